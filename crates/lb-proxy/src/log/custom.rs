//! Access-log lines in the operator's own format (`log_format`): HAProxy's log-format
//! variables rendered from a finished exchange, as text or as a JSON object; and the capture
//! blocks (`{a|b}`) that the default httplog line carries when a frontend captures headers.

use std::fmt::{Display, Write as _};

use chrono::TimeZone;
use lb_config::{AccessLogFormat, Template, TemplatePart, Var};
use serde_json::{Map, Value};

use super::format::{push_escaped, termination};
use super::stamp::{datetime, push_accept_date};
use super::HttpLog;
use crate::policy::{render, Vars};

/// The variables of a finished HTTP exchange.
struct LogVars<'r, 'a, Tz> {
    rec: &'r HttpLog<'a>,
    tz: &'r Tz,
    /// The request line's method, URI and version, cut once per line (not per variable).
    line: [Option<&'r str>; 3],
}

impl<Tz> Vars for LogVars<'_, '_, Tz>
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    fn write(&self, var: &Var, out: &mut String) -> bool {
        let r = self.rec;
        let [method, uri, version] = self.line;
        let num = |out: &mut String, n: i64| write!(out, "{n}").is_ok();
        match var {
            Var::ClientIp => r.facts.client.is_some_and(|c| write!(out, "{}", c.ip()).is_ok()),
            Var::ClientPort => r.facts.client.is_some_and(|c| write!(out, "{}", c.port()).is_ok()),
            Var::AcceptDate | Var::RequestDate => {
                push_accept_date(out, &datetime(r.accept_date, self.tz));
                true
            }
            Var::Timestamp => {
                let secs = r.accept_date.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                num(out, secs as i64)
            }
            Var::Frontend => {
                out.push_str(r.frontend);
                true
            }
            Var::FrontendTransport => {
                out.push_str(r.frontend);
                if r.facts.tls.is_some() {
                    out.push('~');
                }
                true
            }
            Var::Backend => {
                out.push_str(r.backend);
                true
            }
            Var::Server => {
                out.push_str(r.server);
                true
            }
            Var::TimeRequest => num(out, r.tr),
            Var::TimeQueue => num(out, r.tw),
            Var::TimeConnect => num(out, r.tc),
            Var::TimeResponse => num(out, r.tresp),
            Var::TimeActive | Var::TimeTotal => num(out, r.ta),
            Var::Status => num(out, i64::from(r.status)),
            Var::BytesRead => num(out, r.bytes_read as i64),
            Var::BytesUploaded => num(out, r.bytes_uploaded as i64),
            Var::TermState => {
                out.push_str(&termination(r.termination));
                true
            }
            Var::TermStateCookie => {
                out.push_str(&termination(r.termination));
                out.push_str("--");
                true
            }
            Var::Actconn => num(out, r.actconn as i64),
            Var::Feconn => num(out, r.feconn as i64),
            Var::Beconn => num(out, r.beconn as i64),
            Var::Srvconn => num(out, r.srv_conn as i64),
            Var::Retries => num(out, i64::from(r.retries)),
            Var::SrvQueue => num(out, r.srv_queue as i64),
            Var::BackendQueue => num(out, r.backend_queue as i64),
            Var::CapturedRequest => r.captured.is_some_and(|c| {
                block(out, &c.request);
                true
            }),
            Var::CapturedResponse => r.captured.is_some_and(|c| {
                block(out, &c.response);
                true
            }),
            Var::RequestLine => {
                push_escaped(out, r.request_line, false);
                true
            }
            Var::Method => method.is_some_and(|m| {
                out.push_str(m);
                true
            }),
            Var::Uri => uri.is_some_and(|u| {
                push_escaped(out, u, false);
                true
            }),
            Var::Path => uri.is_some_and(|u| {
                push_escaped(out, u.split_once('?').map_or(u, |(p, _)| p), false);
                true
            }),
            Var::Query => {
                if let Some((_, q)) = uri.and_then(|u| u.split_once('?')) {
                    out.push('?');
                    push_escaped(out, q, false);
                }
                true
            }
            Var::HttpVersion => version.is_some_and(|v| {
                out.push_str(v);
                true
            }),
            Var::UniqueId => r.unique_id.is_some_and(|id| {
                push_escaped(out, id, false);
                true
            }),
            Var::Pid => num(out, i64::from(std::process::id())),
            Var::TlsVersion => r.facts.tls.as_ref().and_then(|t| t.version.as_deref()).is_some_and(|v| {
                out.push_str(v);
                true
            }),
            Var::TlsCipher => r.facts.tls.as_ref().and_then(|t| t.cipher.as_deref()).is_some_and(|v| {
                out.push_str(v);
                true
            }),
            Var::Fetch(lb_config::Fetch::Sni) => r.facts.authority.as_deref().is_some_and(|v| {
                push_escaped(out, v, false);
                true
            }),
            Var::Fetch(lb_config::Fetch::Alpn) => r.facts.alpn.as_deref().is_some_and(|v| {
                out.push_str(v);
                true
            }),
            // The request's headers are gone once it is logged; capture what the log needs.
            _ => false,
        }
    }
}

/// `{a|b}`: captured values, escaped as HAProxy writes them (an absent one is empty).
pub(super) fn block(out: &mut String, values: &[Option<String>]) {
    out.push('{');
    for (i, v) in values.iter().enumerate() {
        if i > 0 {
            out.push('|');
        }
        if let Some(v) = v {
            push_escaped(out, v, false);
        }
    }
    out.push('}');
}

/// The line in the frontend's own format.
pub(super) fn render_custom<Tz>(out: &mut String, rec: &HttpLog<'_>, format: &AccessLogFormat, tz: &Tz)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let mut parts = rec.request_line.splitn(3, ' ');
    let vars = LogVars { rec, tz, line: [parts.next(), parts.next(), parts.next()] };
    match format {
        AccessLogFormat::Text(t) => render(t, &vars, out),
        AccessLogFormat::Json(fields) => {
            let mut obj = Map::with_capacity(fields.len());
            let mut text = String::new();
            for (key, t) in fields {
                text.clear();
                render(t, &vars, &mut text);
                obj.insert(key.clone(), json_value(t, &text));
            }
            out.push_str(&Value::Object(obj).to_string());
        }
    }
}

/// A template that is one numeric variable alone gives a number (or null when unknown); any
/// other gives a string.
fn json_value(t: &Template, text: &str) -> Value {
    if let [TemplatePart::Var { var, quote: false }] = t.parts.as_slice() {
        if var.is_numeric() {
            return text.parse::<i64>().map_or(Value::Null, |n| if n < 0 { Value::Null } else { Value::from(n) });
        }
        if text == "-" {
            return Value::Null;
        }
    }
    Value::String(text.to_owned())
}
