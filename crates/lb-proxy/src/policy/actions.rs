//! The actions of `http_request` and `http_response` rules, compiled (header names parsed,
//! capture slots numbered) and run on a request's or a response's head.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::header::{HeaderName, HeaderValue};
use http::HeaderMap;
use lb_config::{
    Fetch, Mark, Policy, Redirect, RedirectTo, Reply, RequestAction, ResponseAction, Tarpit, Template, TemplatePart,
};

use super::cond::CompileError;
use super::template::{render, RequestVars};
use super::{when, Fetched, FrontendPolicy, Patterns, RequestView, Subject, When};
use crate::facts::ConnFacts;
use crate::tables::{Key, Now, Table, Tables, TrackOutcome, Tracked};

#[derive(Debug)]
pub(super) struct RequestRule {
    when: Option<When>,
    action: Req,
    hits: AtomicU64,
}

#[derive(Debug)]
pub(super) struct ResponseRule {
    when: Option<When>,
    action: Res,
    hits: AtomicU64,
}

#[derive(Debug)]
enum Req {
    Deny(Reply),
    Return(Reply),
    Redirect(Redirect),
    Allow,
    Set(HeaderName, Value),
    Add(HeaderName, Value),
    Del(HeaderName),
    SetPath(Template),
    Capture {
        header: HeaderName,
        length: usize,
        slot: usize,
    },
    Track {
        slot: u8,
        table: Arc<Table>,
        key: Fetch,
    },
    Tarpit(Tarpit),
    /// `set_gpt` (true) or `inc_gpc` (false).
    Mark(Mark, bool),
}

#[derive(Debug)]
enum Res {
    Deny(Reply),
    Set(HeaderName, Value),
    Add(HeaderName, Value),
    Del(HeaderName),
    Capture { header: HeaderName, length: usize, slot: usize },
}

/// A header value to write: made once when its template is plain text (each request then
/// shares it), else rendered per request.
#[derive(Debug)]
enum Value {
    Fixed(HeaderValue),
    Rendered(Template),
}

impl Value {
    fn new(t: &Template) -> Value {
        let mut text = String::new();
        for part in &t.parts {
            match part {
                TemplatePart::Literal(l) => text.push_str(l),
                TemplatePart::Var { .. } => return Value::Rendered(t.clone()),
            }
        }
        // Text that is not a valid value stays a template: dropped at run time, as before.
        HeaderValue::from_str(&text).map_or_else(|_| Value::Rendered(t.clone()), Value::Fixed)
    }

    /// The value for this request, or `None` when it would not be a valid one (a CR or LF that
    /// came from the request, say): such a header is dropped, never sent.
    fn get(&self, vars: &RequestVars<'_>) -> Option<HeaderValue> {
        match self {
            Value::Fixed(v) => Some(v.clone()),
            Value::Rendered(t) => {
                let mut out = String::new();
                render(t, vars, &mut out);
                let v = HeaderValue::from_str(&out);
                if v.is_err() {
                    tracing::debug!(template = t.source, "a header value with a forbidden character was dropped");
                }
                v.ok()
            }
        }
    }
}

/// What ends a request's rules with an answer of lb-proxy's own.
#[derive(Debug)]
pub(crate) enum Final<'p> {
    Deny(&'p Reply),
    Return(&'p Reply),
    Redirect {
        code: u16,
        location: String,
    },
    /// Hold the request, then answer.
    Tarpit(&'p Tarpit),
    /// Past a table's `limit_req` burst: 429, and when to come back.
    LimitReq {
        retry_after_ms: u64,
    },
}

/// The values captured for the log's `{…}` blocks, by slot.
#[derive(Debug, Default, Clone)]
pub(crate) struct Captured {
    pub(crate) request: Vec<Option<String>>,
    pub(crate) response: Vec<Option<String>>,
}

fn header_name(name: &str) -> Result<HeaderName, CompileError> {
    HeaderName::from_bytes(name.as_bytes()).map_err(|_| CompileError(format!("`{name}` is not a header name")))
}

pub(super) fn compile_request(
    rules: &[lb_config::RequestRule],
    policy: &Policy,
    patterns: &Patterns,
    tables: &Tables,
) -> Result<(Vec<RequestRule>, usize), (usize, CompileError)> {
    let mut slots = 0;
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let compiled = (|| {
            let action = match &rule.action {
                RequestAction::Deny(r) => Req::Deny(r.clone()),
                RequestAction::Return(r) => Req::Return(r.clone()),
                RequestAction::Redirect(r) => Req::Redirect(r.clone()),
                RequestAction::Allow => Req::Allow,
                RequestAction::SetHeader(h) => Req::Set(header_name(&h.name)?, Value::new(&h.value)),
                RequestAction::AddHeader(h) => Req::Add(header_name(&h.name)?, Value::new(&h.value)),
                RequestAction::DelHeader(n) => Req::Del(header_name(n)?),
                RequestAction::SetPath(t) => Req::SetPath(t.clone()),
                RequestAction::Capture(c) => {
                    slots += 1;
                    Req::Capture { header: header_name(&c.header)?, length: c.length, slot: slots - 1 }
                }
                RequestAction::Track(t) => Req::Track {
                    slot: t.slot,
                    table: tables
                        .get(&t.table)
                        .cloned()
                        .ok_or_else(|| CompileError(format!("no table `{}`", t.table)))?,
                    key: t.key.clone(),
                },
                RequestAction::Tarpit(t) => Req::Tarpit(t.clone()),
                RequestAction::SetGpt(m) => Req::Mark(*m, true),
                RequestAction::IncGpc(m) => Req::Mark(*m, false),
            };
            Ok(RequestRule { when: when(rule.guard.as_ref(), policy, patterns)?, action, hits: AtomicU64::new(0) })
        })();
        out.push(compiled.map_err(|e| (i, e))?);
    }
    Ok((out, slots))
}

pub(super) fn compile_response(
    rules: &[lb_config::ResponseRule],
    policy: &Policy,
    patterns: &Patterns,
) -> Result<(Vec<ResponseRule>, usize), (usize, CompileError)> {
    let mut slots = 0;
    let mut out = Vec::with_capacity(rules.len());
    for (i, rule) in rules.iter().enumerate() {
        let compiled = (|| {
            let action = match &rule.action {
                ResponseAction::Deny(r) => Res::Deny(r.clone()),
                ResponseAction::SetHeader(h) => Res::Set(header_name(&h.name)?, Value::new(&h.value)),
                ResponseAction::AddHeader(h) => Res::Add(header_name(&h.name)?, Value::new(&h.value)),
                ResponseAction::DelHeader(n) => Res::Del(header_name(n)?),
                ResponseAction::Capture(c) => {
                    slots += 1;
                    Res::Capture { header: header_name(&c.header)?, length: c.length, slot: slots - 1 }
                }
            };
            Ok(ResponseRule { when: when(rule.guard.as_ref(), policy, patterns)?, action, hits: AtomicU64::new(0) })
        })();
        out.push(compiled.map_err(|e| (i, e))?);
    }
    Ok((out, slots))
}

impl RequestRule {
    pub(super) fn name(&self) -> &'static str {
        match self.action {
            Req::Deny(_) => "deny",
            Req::Return(_) => "return",
            Req::Redirect(_) => "redirect",
            Req::Allow => "allow",
            Req::Set(..) => "set_header",
            Req::Add(..) => "add_header",
            Req::Del(_) => "del_header",
            Req::SetPath(_) => "set_path",
            Req::Capture { .. } => "capture",
            Req::Track { .. } => "track",
            Req::Tarpit(_) => "tarpit",
            Req::Mark(_, true) => "set_gpt",
            Req::Mark(_, false) => "inc_gpc",
        }
    }

    pub(super) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }

    /// The tracked slots its condition reads (a bit each).
    fn slots_read(&self) -> u8 {
        self.when.as_ref().map_or(0, |w| w.cond.slots_read())
    }
}

impl ResponseRule {
    pub(super) fn name(&self) -> &'static str {
        match self.action {
            Res::Deny(_) => "deny",
            Res::Set(..) => "set_header",
            Res::Add(..) => "add_header",
            Res::Del(_) => "del_header",
            Res::Capture { .. } => "capture",
        }
    }

    pub(super) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// The first value of `header`, cut at `length` bytes (on a character boundary).
fn captured(headers: &HeaderMap, header: &HeaderName, length: usize) -> Option<String> {
    let v = headers.get(header)?;
    let text = String::from_utf8_lossy(v.as_bytes());
    let mut end = text.len().min(length);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    Some(text[..end].to_owned())
}

fn store(slots: &mut Vec<Option<String>>, slot: usize, value: Option<String>) {
    if slots.len() <= slot {
        slots.resize(slot + 1, None);
    }
    slots[slot] = value;
}

impl FrontendPolicy {
    /// Runs the `http_request` rules on a request's head; `Some` when one answers it.
    pub(crate) fn on_request<'p>(
        &'p self,
        parts: &mut http::request::Parts,
        facts: &ConnFacts,
        frontend: &str,
        unique_id: Option<&str>,
        captures: &mut Captured,
        tracked: &mut Tracked,
    ) -> Option<Final<'p>> {
        let mut rules = self.request.iter();
        loop {
            // Conditions and templates read the head as the rules before left it: what the
            // conditions fetch from it holds until a rule's action changes it.
            let tracking = (!tracked.is_empty()).then_some(&*tracked);
            let subject =
                Subject { req: Some(RequestView::of(parts)), facts, frontend, response: None, tracked: tracking };
            let fetched = Fetched::default();
            let rule = rules.by_ref().find(|r| r.when.as_ref().is_none_or(|w| w.holds(&subject, &fetched)))?;
            rule.hits.fetch_add(1, Ordering::Relaxed);
            if let Req::Track { slot, table, key } = &rule.action {
                let Some(key) = table_key(&subject, table, key) else { continue };
                if let TrackOutcome::Refused { retry_after_ms } = tracked.track(*slot, table, key, Now::read()) {
                    return Some(Final::LimitReq { retry_after_ms });
                }
                continue;
            }
            let vars = RequestVars { subject: &subject, unique_id };
            match &rule.action {
                Req::Track { .. } => {}
                Req::Tarpit(t) => {
                    tracked.read_by_refusal = rule.slots_read();
                    return Some(Final::Tarpit(t));
                }
                Req::Mark(mark, set) => tracked.mark(mark, *set, Now::read()),
                Req::Deny(r) => {
                    tracked.read_by_refusal = rule.slots_read();
                    return Some(Final::Deny(r));
                }
                Req::Return(r) => return Some(Final::Return(r)),
                Req::Redirect(r) => {
                    if let Some(location) = location(r, &subject, &vars) {
                        return Some(Final::Redirect { code: r.code, location });
                    }
                }
                Req::Allow => return None,
                // `insert` replaces every value the header had.
                Req::Set(name, v) => match v.get(&vars) {
                    Some(v) => {
                        parts.headers.insert(name.clone(), v);
                    }
                    None => {
                        parts.headers.remove(name);
                    }
                },
                Req::Add(name, v) => {
                    if let Some(v) = v.get(&vars) {
                        parts.headers.append(name.clone(), v);
                    }
                }
                Req::Del(name) => {
                    parts.headers.remove(name);
                }
                Req::SetPath(t) => {
                    let mut path = String::new();
                    render(t, &vars, &mut path);
                    set_path(&mut parts.uri, &path);
                }
                Req::Capture { header, length, slot } => {
                    let v = captured(&parts.headers, header, *length);
                    store(&mut captures.request, *slot, v);
                }
            }
        }
    }

    /// Runs the `http_response` rules on a server's response head; `Some` when one denies it.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn on_response<'p>(
        &'p self,
        status: u16,
        headers: &mut HeaderMap,
        req: Option<RequestView<'_>>,
        facts: &ConnFacts,
        frontend: &str,
        unique_id: Option<&str>,
        captures: &mut Captured,
    ) -> Option<&'p Reply> {
        let mut rules = self.response.iter();
        loop {
            let subject = Subject { req, facts, frontend, response: Some((status, &*headers)), tracked: None };
            let fetched = Fetched::default();
            let rule = rules.by_ref().find(|r| r.when.as_ref().is_none_or(|w| w.holds(&subject, &fetched)))?;
            rule.hits.fetch_add(1, Ordering::Relaxed);
            let vars = RequestVars { subject: &subject, unique_id };
            match &rule.action {
                Res::Deny(r) => return Some(r),
                // `insert` replaces every value the header had.
                Res::Set(name, v) => match v.get(&vars) {
                    Some(v) => {
                        headers.insert(name.clone(), v);
                    }
                    None => {
                        headers.remove(name);
                    }
                },
                Res::Add(name, v) => {
                    if let Some(v) = v.get(&vars) {
                        headers.append(name.clone(), v);
                    }
                }
                Res::Del(name) => {
                    headers.remove(name);
                }
                Res::Capture { header, length, slot } => {
                    let v = captured(headers, header, *length);
                    store(&mut captures.response, *slot, v);
                }
            }
        }
    }
}

/// The key `fetch` gives for `table`; `None` when the request has no such value (it is then
/// not tracked, as HAProxy tracks nothing without a sample).
fn table_key(s: &Subject<'_>, table: &Table, fetch: &Fetch) -> Option<Key> {
    match fetch {
        Fetch::Src => Key::ip(&table.config.key, s.facts.client?.ip())
            .or_else(|| Key::bytes(&table.config.key, s.facts.client?.ip().to_string().as_bytes())),
        other => Key::bytes(&table.config.key, s.value(other)?.as_bytes()),
    }
}

/// Where a redirect sends the client; `None` for a scheme redirect of a request without a
/// host (there is nowhere to send it: the rule is passed over).
fn location(r: &Redirect, s: &Subject<'_>, vars: &RequestVars<'_>) -> Option<String> {
    let req = s.req?;
    let path = req.uri.path();
    let query = req.uri.query().filter(|_| r.keep_query);
    let mut out = String::new();
    match &r.to {
        RedirectTo::Scheme(scheme) => {
            let host = req
                .headers
                .get(http::header::HOST)
                .and_then(|h| h.to_str().ok())
                .or(req.uri.authority().map(|a| a.as_str()))?;
            // The port of the old scheme does not carry over to the new one.
            let host =
                if host.starts_with('[') || host.matches(':').count() == 1 { super::strip_port(host) } else { host };
            out.push_str(scheme);
            out.push_str("://");
            out.push_str(host);
            out.push_str(path);
        }
        RedirectTo::Prefix(prefix) => {
            out.push_str(prefix);
            out.push_str(path);
        }
        RedirectTo::Location(t) => {
            render(t, vars, &mut out);
            return HeaderValue::from_str(&out).is_ok().then_some(out);
        }
    }
    if let Some(q) = query {
        out.push('?');
        out.push_str(q);
    }
    HeaderValue::from_str(&out).is_ok().then_some(out)
}

/// Replaces the path, keeping the query; a path that is not a valid one is not set.
fn set_path(uri: &mut http::Uri, path: &str) {
    let pq = match uri.query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_owned(),
    };
    let mut parts = uri.clone().into_parts();
    match pq.parse() {
        Ok(pq) => parts.path_and_query = Some(pq),
        Err(_) => {
            tracing::debug!(path, "set_path: not a valid path; left unchanged");
            return;
        }
    }
    if let Ok(new) = http::Uri::from_parts(parts) {
        *uri = new;
    }
}
