//! Rendering templates (HAProxy's log-format syntax, parsed by lb-config) from whatever knows
//! the variables: a request being processed (header values, paths, redirects) or a finished
//! exchange (access-log lines).

use std::fmt::Write as _;

use lb_config::{Template, TemplatePart, Var};

use super::Subject;

/// What knows the values of a template's variables.
pub(crate) trait Vars {
    /// Writes `var`'s value; false when it is not known here (the template writes `-`).
    fn write(&self, var: &Var, out: &mut String) -> bool;
}

/// Appends `t` rendered from `vars` to `out`.
pub(crate) fn render(t: &Template, vars: &impl Vars, out: &mut String) {
    for part in &t.parts {
        match part {
            TemplatePart::Literal(text) => out.push_str(text),
            TemplatePart::Var { var, quote } => {
                if *quote {
                    out.push('"');
                }
                let before = out.len();
                if !vars.write(var, out) || out.len() == before {
                    out.push('-');
                }
                if *quote {
                    out.push('"');
                }
            }
        }
    }
}

/// The variables a request knows while its `http_request` rules run (and its response's, for
/// `http_response`): the connection's facts, the request line, fetches, its ID.
#[derive(Debug)]
pub(crate) struct RequestVars<'a> {
    pub(crate) subject: &'a Subject<'a>,
    pub(crate) unique_id: Option<&'a str>,
}

impl Vars for RequestVars<'_> {
    fn write(&self, var: &Var, out: &mut String) -> bool {
        let s = self.subject;
        let req = s.req;
        match var {
            Var::ClientIp => s.facts.client.is_some_and(|c| write!(out, "{}", c.ip()).is_ok()),
            Var::ClientPort => s.facts.client.is_some_and(|c| write!(out, "{}", c.port()).is_ok()),
            Var::Frontend | Var::FrontendTransport => {
                out.push_str(s.frontend);
                if *var == Var::FrontendTransport && s.facts.tls.is_some() {
                    out.push('~');
                }
                true
            }
            Var::Method => req.is_some_and(|r| {
                out.push_str(r.method.as_str());
                true
            }),
            Var::Path => req.is_some_and(|r| {
                out.push_str(r.uri.path());
                true
            }),
            Var::Uri => req.is_some_and(|r| {
                out.push_str(r.uri.path_and_query().map_or("/", |pq| pq.as_str()));
                true
            }),
            Var::Query => {
                if let Some(q) = req.and_then(|r| r.uri.query()) {
                    out.push('?');
                    out.push_str(q);
                }
                true
            }
            Var::UniqueId => self.unique_id.is_some_and(|id| {
                out.push_str(id);
                true
            }),
            Var::Status => s.response.is_some_and(|(status, _)| write!(out, "{status}").is_ok()),
            Var::Pid => write!(out, "{}", std::process::id()).is_ok(),
            Var::Timestamp => {
                let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
                write!(out, "{now}").is_ok()
            }
            Var::TlsVersion => s.facts.tls.as_ref().and_then(|t| t.version.as_deref()).is_some_and(|v| {
                out.push_str(v);
                true
            }),
            Var::TlsCipher => s.facts.tls.as_ref().and_then(|t| t.cipher.as_deref()).is_some_and(|v| {
                out.push_str(v);
                true
            }),
            Var::Fetch(fetch) => s.value(fetch).is_some_and(|v| {
                out.push_str(&v);
                true
            }),
            _ => false,
        }
    }
}
