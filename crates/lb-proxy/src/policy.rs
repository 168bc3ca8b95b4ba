//! The edge policy of each frontend, compiled once per configuration from lb-config's typed
//! model and read by every request: routing rules (HAProxy's `use_backend`), `http_request`
//! actions before routing, `http_response` actions on each response, the request ID. `http`
//! calls it; the runtime API changes its lists and maps (`patterns`).
//!
//! Layout: `cond` compiles and evaluates conditions; `patterns` holds the live lists and maps;
//! `template` renders templates; `actions` runs the rules' actions.

mod actions;
mod cond;
mod connection;
pub(crate) mod fuzz;
mod patterns;
mod template;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use http::{HeaderMap, Method, Uri};
use lb_config::{Fetch, Frontend, Guard, Policy, ResponseAction, RouteTarget, UniqueId};

pub(crate) use actions::{Captured, Final};
pub(crate) use patterns::{ListCell, MapCell, Patterns};
pub(crate) use template::{render, RequestVars, Vars};

use crate::backend::{BackendState, Backends};
use crate::facts::ConnFacts;
use cond::{compile, CompileError, Cond, Fetched};

/// What a condition reads: the request (absent when a response rule runs without it), the
/// connection, the frontend, and at response time the response.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Subject<'a> {
    pub(crate) req: Option<RequestView<'a>>,
    pub(crate) facts: &'a ConnFacts,
    pub(crate) frontend: &'a str,
    pub(crate) response: Option<(u16, &'a HeaderMap)>,
    /// The request's tracked table entries (`sc0`–`sc2`), when it tracks any.
    pub(crate) tracked: Option<&'a crate::tables::Tracked>,
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct RequestView<'a> {
    pub(crate) method: &'a Method,
    pub(crate) uri: &'a Uri,
    pub(crate) headers: &'a HeaderMap,
}

impl<'a> RequestView<'a> {
    pub(crate) fn of(parts: &'a http::request::Parts) -> RequestView<'a> {
        RequestView { method: &parts.method, uri: &parts.uri, headers: &parts.headers }
    }

    /// The Host header, else the URI's authority (HTTP/2, absolute-form), without its port.
    pub(crate) fn host(&self) -> Option<&'a str> {
        let host = self.headers.get(http::header::HOST).and_then(|h| h.to_str().ok()).or_else(|| self.uri.host())?;
        Some(strip_port(host))
    }
}

pub(crate) fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}

/// A `tcp_request` rule closed the connection.
#[derive(Debug)]
pub(crate) struct Rejected;

/// A rule's condition, with `unless` folded in.
#[derive(Debug)]
struct When {
    cond: Cond,
    negate: bool,
}

impl When {
    fn holds<'a>(&self, s: &Subject<'a>, fetched: &Fetched<'a>) -> bool {
        self.cond.holds(s, fetched) != self.negate
    }
}

/// A routing rule.
#[derive(Debug)]
struct Route {
    path_prefix: Option<String>,
    host: Option<String>,
    when: Option<When>,
    target: Target,
    hits: AtomicU64,
}

#[derive(Debug)]
enum Target {
    Backend(Arc<BackendState>),
    Map { cell: Arc<MapCell>, key: Fetch, default: Option<Arc<BackendState>> },
}

/// One frontend's compiled policy.
#[derive(Debug)]
pub(crate) struct FrontendPolicy {
    routes: Vec<Route>,
    default_backend: Option<Arc<BackendState>>,
    /// Every backend by name, for map targets (whose values name backends).
    by_name: HashMap<String, Arc<BackendState>>,
    request: Vec<actions::RequestRule>,
    response: Vec<actions::ResponseRule>,
    /// `tcp_request` rules, at accept.
    connection: Vec<connection::ConnRule>,
    pub(crate) unique_id: Option<UniqueId>,
    /// Capture slots of the log's request and response blocks.
    pub(crate) request_captures: usize,
    pub(crate) response_captures: usize,
    /// Some response rule reads the request: the exchange keeps a copy of its head.
    pub(crate) response_reads_request: bool,
    /// Some request condition reads Content-Length: HTTP/1 heads are counted raw, since hyper
    /// merges identical duplicates that such a rule means to see.
    pub(crate) reads_content_length: bool,
}

fn when(g: Option<&Guard>, policy: &Policy, patterns: &Patterns) -> Result<Option<When>, CompileError> {
    g.map(|g| Ok(When { cond: compile(&g.condition, &policy.conditions, patterns, 0)?, negate: g.negate })).transpose()
}

impl FrontendPolicy {
    /// Compiles `fe`'s rules against the configuration's named conditions and the live lists.
    /// Validation has checked every reference; what still fails (a configuration built by
    /// hand) is named in the error.
    pub(crate) fn new(
        fe: &Frontend,
        policy: &Policy,
        patterns: &Patterns,
        backends: &Backends,
        tables: &crate::tables::Tables,
    ) -> Result<Self, String> {
        let err = |what: String| move |e: CompileError| format!("frontend {}: {what}: {}", fe.name, e.0);
        let by_name: HashMap<String, Arc<BackendState>> =
            backends.iter().map(|b| (b.name().to_owned(), b.clone())).collect();
        let backend =
            |name: &str| by_name.get(name).cloned().ok_or_else(|| format!("frontend {}: no backend `{name}`", fe.name));
        let mut routes = Vec::with_capacity(fe.rules.len());
        for (i, rule) in fe.rules.iter().enumerate() {
            let target = match &rule.backend {
                RouteTarget::Backend(name) => Target::Backend(backend(name)?),
                RouteTarget::Map { map, key, default } => Target::Map {
                    cell: patterns.map(map).cloned().ok_or_else(|| format!("frontend {}: no map `{map}`", fe.name))?,
                    key: key.clone(),
                    default: default.as_deref().map(backend).transpose()?,
                },
            };
            routes.push(Route {
                path_prefix: rule.path_prefix.clone(),
                host: rule.host.clone(),
                when: when(rule.guard.as_ref(), policy, patterns).map_err(err(format!("rules[{i}]")))?,
                target,
                hits: AtomicU64::new(0),
            });
        }
        let (request, request_captures) = actions::compile_request(&fe.http_request, policy, patterns, tables)
            .map_err(|(i, e)| err(format!("http_request[{i}]"))(e))?;
        let (response, response_captures) = actions::compile_response(&fe.http_response, policy, patterns)
            .map_err(|(i, e)| err(format!("http_response[{i}]"))(e))?;
        let connection = connection::compile(&fe.tcp_request, policy, patterns, tables)
            .map_err(|(i, e)| err(format!("tcp_request[{i}]"))(e))?;
        let response_reads_request = fe.http_response.iter().any(|r| {
            r.guard.as_ref().is_some_and(|g| g.condition.any_test(&policy.conditions, &mut |t| !t.fetch.is_response()))
                || matches!(&r.action, ResponseAction::SetHeader(h) | ResponseAction::AddHeader(h)
                    if h.value.vars().any(|v| !matches!(v, lb_config::Var::Status | lb_config::Var::Fetch(Fetch::ResponseHeader(_)))))
        });
        let guards = fe
            .rules
            .iter()
            .filter_map(|r| r.guard.as_ref())
            .chain(fe.http_request.iter().filter_map(|r| r.guard.as_ref()));
        let reads_content_length = guards.clone().any(|g| {
            g.condition.any_test(&policy.conditions, &mut |t| t.fetch == Fetch::Header("content-length".to_owned()))
        });
        Ok(FrontendPolicy {
            reads_content_length,
            routes,
            default_backend: fe.default_backend.as_deref().map(backend).transpose()?,
            by_name,
            request,
            response,
            connection,
            unique_id: fe.unique_id.clone(),
            request_captures,
            response_captures,
            response_reads_request,
        })
    }

    /// The backend for a request: the first routing rule that holds, else the default backend.
    pub(crate) fn route(&self, s: &Subject<'_>) -> Option<&Arc<BackendState>> {
        let fetched = Fetched::default();
        let path = s.req.map_or("", |r| r.uri.path());
        for route in &self.routes {
            let holds = route.path_prefix.as_deref().is_none_or(|p| path.starts_with(p))
                && route
                    .host
                    .as_deref()
                    .is_none_or(|want| fetched.host(s).is_some_and(|h| h.eq_ignore_ascii_case(want)))
                && route.when.as_ref().is_none_or(|w| w.holds(s, &fetched));
            if !holds {
                continue;
            }
            let chosen = match &route.target {
                Target::Backend(b) => Some(b),
                // A key that is not in the map (or names no backend) takes the rule's default;
                // without one, the next rule.
                Target::Map { cell, key, default } => {
                    let named = s.value(key).and_then(|k| cell.lookup(&k)).and_then(|name| self.by_name.get(&name));
                    named.or(default.as_ref())
                }
            };
            if let Some(backend) = chosen {
                route.hits.fetch_add(1, Ordering::Relaxed);
                return Some(backend);
            }
        }
        self.default_backend.as_ref()
    }

    /// The backend of a TCP-mode frontend.
    pub(crate) fn default_backend(&self) -> Option<&Arc<BackendState>> {
        self.default_backend.as_ref()
    }

    /// Whether the exchange needs a capture block.
    pub(crate) fn captures(&self) -> bool {
        self.request_captures + self.response_captures > 0
    }

    /// Every rule with its hits: (`rules` / `http_request` / `http_response`, index, action,
    /// hits), for `show rules` and `/metrics`.
    pub(crate) fn hits(&self) -> Vec<(&'static str, usize, &'static str, u64)> {
        let routes =
            self.routes.iter().enumerate().map(|(i, r)| ("rules", i, "use_backend", r.hits.load(Ordering::Relaxed)));
        let request = self.request.iter().enumerate().map(|(i, r)| ("http_request", i, r.name(), r.hits()));
        let response = self.response.iter().enumerate().map(|(i, r)| ("http_response", i, r.name(), r.hits()));
        let connection = self.connection.iter().enumerate().map(|(i, r)| ("tcp_request", i, r.name(), r.hits()));
        routes.chain(request).chain(response).chain(connection).collect()
    }

    /// Runs the `tcp_request` rules on a new connection: what it tracks (held until it ends;
    /// boxed, so that a connection's task stays small when there is none), or `Err` when it is
    /// to be closed at once.
    pub(crate) fn on_connection(
        &self,
        facts: &ConnFacts,
        frontend: &str,
    ) -> Result<Option<Box<crate::tables::Tracked>>, Rejected> {
        if self.connection.is_empty() {
            return Ok(None);
        }
        let tracked = connection::run(&self.connection, facts, frontend).ok_or(Rejected)?;
        Ok((!tracked.is_empty()).then(|| Box::new(tracked)))
    }

    pub(crate) fn has_request_rules(&self) -> bool {
        !self.request.is_empty() || self.unique_id.is_some()
    }

    pub(crate) fn has_response_rules(&self) -> bool {
        !self.response.is_empty()
    }
}
