//! The policy model written back as the YAML values `validate::policy` reads: conditions,
//! rules, lists, maps, templates (as their source text).

use std::collections::BTreeMap;

use serde_yaml::{Mapping, Value};

use super::path;
use crate::policy::{
    AccessLogFormat, Capture, Condition, Fetch, Guard, HeaderTemplate, Matcher, Pattern, Policy, Redirect, RedirectTo,
    Reply, RequestAction, RequestRule, ResponseAction, ResponseRule, RouteTarget, Test, UniqueId,
};
use crate::raw::{RawList, RawMap, RawUniqueId};

fn s(text: &str) -> Value {
    Value::String(text.to_owned())
}

fn map<const N: usize>(pairs: [(&str, Value); N]) -> Value {
    Value::Mapping(pairs.into_iter().map(|(k, v)| (s(k), v)).collect())
}

pub(super) fn conditions(p: &Policy) -> Option<BTreeMap<String, Value>> {
    let out: BTreeMap<_, _> = p.conditions.iter().map(|(n, c)| (n.clone(), condition(c))).collect();
    (!out.is_empty()).then_some(out)
}

pub(super) fn lists(p: &Policy) -> Option<BTreeMap<String, RawList>> {
    let out: BTreeMap<_, _> = p
        .lists
        .iter()
        .map(|(n, l)| {
            let raw = RawList {
                kind: Some(l.kind.keyword().to_owned()),
                file: l.file.as_deref().map(path),
                values: l.file.is_none().then(|| l.entries.iter().map(|e| s(e)).collect()),
                ignore_case: l.ignore_case.then_some(true),
            };
            (n.clone(), raw)
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

pub(super) fn maps(p: &Policy) -> Option<BTreeMap<String, RawMap>> {
    let out: BTreeMap<_, _> = p
        .maps
        .iter()
        .map(|(n, m)| {
            let raw = RawMap {
                matching: Some(m.matching.keyword().to_owned()),
                file: m.file.as_deref().map(path),
                entries: m.file.is_none().then(|| m.entries.iter().map(|(k, v)| (k.clone(), s(v))).collect()),
                ignore_case: m.ignore_case.then_some(true),
            };
            (n.clone(), raw)
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

pub(super) fn condition(c: &Condition) -> Value {
    match c {
        Condition::All(cs) => map([("all", Value::Sequence(cs.iter().map(condition).collect()))]),
        Condition::Any(cs) => map([("any", Value::Sequence(cs.iter().map(condition).collect()))]),
        Condition::Not(c) => map([("not", condition(c))]),
        Condition::Named(n) => s(n),
        Condition::Test(t) => test(t),
    }
}

fn test(t: &Test) -> Value {
    let (key, name) = t.fetch.key();
    let mut m = Mapping::new();
    if let Some(name) = name {
        m.insert(s("name"), s(name));
    }
    if t.ignore_case {
        m.insert(s("ignore_case"), Value::Bool(true));
    }
    let (mk, mv) = match &t.matcher {
        Matcher::Equals(v) => ("equals", s(v)),
        Matcher::Prefix(v) => ("prefix", s(v)),
        Matcher::Suffix(v) => ("suffix", s(v)),
        Matcher::Contains(v) => ("contains", s(v)),
        Matcher::Regex(v) => ("regex", s(v)),
        Matcher::Exists(b) => ("exists", Value::Bool(*b)),
        Matcher::In(patterns) => (
            "in",
            Value::Sequence(
                patterns
                    .iter()
                    .map(|p| match p {
                        Pattern::Text(t) => s(t),
                        Pattern::Net(n) => s(&n.to_string()),
                    })
                    .collect(),
            ),
        ),
        Matcher::List(n) => ("list", s(n)),
        Matcher::Count(c) => ("count", map([(c.op.keyword(), Value::from(c.value))])),
        Matcher::Int(c) => (c.op.keyword(), Value::from(c.value)),
    };
    m.insert(s(mk), mv);
    map([(key, Value::Mapping(m))])
}

pub(super) fn fetch(f: &Fetch) -> Value {
    match f.key() {
        (key, None) => s(key),
        (key, Some(name)) => map([(key, s(name))]),
    }
}

pub(super) fn guard_pair(g: Option<&Guard>) -> (Option<Value>, Option<Value>) {
    match g {
        None => (None, None),
        Some(g) if g.negate => (None, Some(condition(&g.condition))),
        Some(g) => (Some(condition(&g.condition)), None),
    }
}

pub(super) fn route_target(t: &RouteTarget) -> Value {
    match t {
        RouteTarget::Backend(b) => s(b),
        RouteTarget::Map { map: m, key, default } => {
            let mut out = Mapping::new();
            out.insert(s("map"), s(m));
            out.insert(s("key"), fetch(key));
            if let Some(d) = default {
                out.insert(s("default"), s(d));
            }
            Value::Mapping(out)
        }
    }
}

pub(super) fn with_guard(action: &str, arg: Value, g: Option<&Guard>) -> Value {
    let mut out = Mapping::new();
    out.insert(s(action), arg);
    let (if_, unless) = guard_pair(g);
    if let Some(c) = if_ {
        out.insert(s("if"), c);
    }
    if let Some(c) = unless {
        out.insert(s("unless"), c);
    }
    Value::Mapping(out)
}

pub(super) fn reply(r: &Reply) -> Value {
    let mut out = Mapping::new();
    out.insert(s("status"), Value::from(r.status));
    if let Some(t) = &r.content_type {
        out.insert(s("content_type"), s(t));
    }
    match &r.body_file {
        Some(f) => {
            out.insert(s("file"), s(&path(f)));
        }
        None if !r.body.is_empty() => {
            out.insert(s("body"), s(&String::from_utf8_lossy(&r.body)));
        }
        None => {}
    }
    if !r.headers.is_empty() {
        let headers = r.headers.iter().map(|(n, t)| (s(n), s(&t.source))).collect();
        out.insert(s("headers"), Value::Mapping(headers));
    }
    Value::Mapping(out)
}

fn header(h: &HeaderTemplate) -> Value {
    map([("name", s(&h.name)), ("value", s(&h.value.source))])
}

fn capture(c: &Capture) -> Value {
    map([("header", s(&c.header)), ("length", Value::from(c.length as u64))])
}

fn redirect(r: &Redirect) -> Value {
    let (key, to) = match &r.to {
        RedirectTo::Scheme(v) => ("scheme", s(v)),
        RedirectTo::Location(t) => ("location", s(&t.source)),
        RedirectTo::Prefix(p) => ("prefix", s(p)),
    };
    map([(key, to), ("code", Value::from(r.code)), ("keep_query", Value::Bool(r.keep_query))])
}

pub(super) fn request_rules(rules: &[RequestRule]) -> Option<Vec<Value>> {
    let out: Vec<_> = rules
        .iter()
        .map(|r| {
            let (action, arg) = match &r.action {
                RequestAction::Deny(rep) => ("deny", reply(rep)),
                RequestAction::Return(rep) => ("return", reply(rep)),
                RequestAction::Redirect(red) => ("redirect", redirect(red)),
                RequestAction::Allow => ("allow", Value::Bool(true)),
                RequestAction::SetHeader(h) => ("set_header", header(h)),
                RequestAction::AddHeader(h) => ("add_header", header(h)),
                RequestAction::DelHeader(n) => ("del_header", s(n)),
                RequestAction::SetPath(t) => ("set_path", s(&t.source)),
                RequestAction::Capture(c) => ("capture", capture(c)),
                RequestAction::Track(t) => ("track", super::tables::track(t)),
                RequestAction::Tarpit(t) => ("tarpit", super::tables::tarpit(t)),
                RequestAction::SetGpt(m) => ("set_gpt", super::tables::mark(m, true)),
                RequestAction::IncGpc(m) => ("inc_gpc", super::tables::mark(m, false)),
            };
            with_guard(action, arg, r.guard.as_ref())
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

pub(super) fn response_rules(rules: &[ResponseRule]) -> Option<Vec<Value>> {
    let out: Vec<_> = rules
        .iter()
        .map(|r| {
            let (action, arg) = match &r.action {
                ResponseAction::Deny(rep) => ("deny", reply(rep)),
                ResponseAction::SetHeader(h) => ("set_header", header(h)),
                ResponseAction::AddHeader(h) => ("add_header", header(h)),
                ResponseAction::DelHeader(n) => ("del_header", s(n)),
                ResponseAction::Capture(c) => ("capture", capture(c)),
            };
            with_guard(action, arg, r.guard.as_ref())
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

pub(super) fn unique_id(u: Option<&UniqueId>) -> Option<RawUniqueId> {
    u.map(|u| RawUniqueId {
        header: Some(u.header.clone()),
        format: u.format.as_ref().map(|f| f.source.clone()),
        keep_client: Some(u.keep_client),
    })
}

pub(super) fn log_format(f: Option<&AccessLogFormat>) -> Option<Value> {
    match f? {
        AccessLogFormat::Text(t) => Some(s(&t.source)),
        AccessLogFormat::Json(fields) => {
            let fields = fields.iter().map(|(k, t)| (s(k), s(&t.source))).collect();
            Some(map([("json", Value::Mapping(fields))]))
        }
    }
}
