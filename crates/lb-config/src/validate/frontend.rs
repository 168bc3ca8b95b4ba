//! One `frontends[i]` entry: binds, settings and routing rules (whose backends are checked in
//! `links`, once every backend is known).

use super::policy::{
    connection_rules, guard, log_format, request_rules, response_rules, route_target, tests_response, unique_id, Names,
};
use super::sections::{body_size, error_files, header_size, timeouts, Defaults};
use crate::address::parse_listen;
use crate::check::Checker;
use crate::error_pages::merged;
use crate::locate::{child, item};
use crate::model::{Bind, Frontend, Http2, ListenAddr, Mode, Rule};
use crate::policy::{Policy, RouteTarget};
use crate::raw::{RawBind, RawFrontend, RawHttp2, RawMode, RawRule};

/// A frontend, with where each of its binds was written (for the checks across frontends).
#[derive(Debug)]
pub(super) struct Checked {
    pub(super) frontend: Frontend,
    pub(super) bind_fields: Vec<String>,
}

pub(super) fn frontend(
    ctx: &mut Checker<'_>,
    path: &str,
    raw: &RawFrontend,
    d: &Defaults,
    names: &Names<'_>,
    policy: &Policy,
) -> Checked {
    let accept_proxy = raw.accept_proxy.unwrap_or(false);
    let binds_path = child(path, "bind");
    let (bind_fields, binds): (Vec<String>, Vec<Bind>) = raw
        .bind
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, b)| bind(ctx, &item(&binds_path, i), b, accept_proxy))
        .unzip();
    if raw.bind.as_ref().is_none_or(Vec::is_empty) {
        ctx.error(path, "at least one `bind` address is required");
    }
    let rules_path = child(path, "rules");
    let rules: Vec<Rule> = raw
        .rules
        .iter()
        .flatten()
        .enumerate()
        .filter_map(|(i, r)| rule(ctx, &item(&rules_path, i), r, names, policy))
        .collect();
    if raw.default_backend.is_none() && rules.is_empty() {
        ctx.error(path, "needs a `default_backend` or at least one rule: no request could be routed");
    }
    let files = error_files(ctx, &child(path, "error_files"), raw.error_files.as_ref());
    let frontend = Frontend {
        name: ctx.name(path, raw.name.as_ref()),
        binds,
        mode: ctx.keyword(path, "mode", raw.mode.as_ref(), Mode::KEYWORDS).unwrap_or(d.mode),
        tls: raw.tls.unwrap_or(false),
        default_backend: raw.default_backend.clone(),
        rules,
        http_request: request_rules(
            ctx,
            &child(path, "http_request"),
            raw.http_request.as_ref(),
            names,
            &policy.conditions,
        ),
        http_response: response_rules(ctx, &child(path, "http_response"), raw.http_response.as_ref(), names),
        tcp_request: connection_rules(ctx, &child(path, "tcp_request"), raw.tcp_request.as_ref(), names),
        unique_id: unique_id(ctx, &child(path, "unique_id"), raw.unique_id.as_ref()),
        log_format: log_format(ctx, path, raw.log_format.as_ref()).or_else(|| d.log_format.clone()),
        max_connections: ctx.limit(path, "max_connections", raw.max_connections),
        timeouts: timeouts(ctx, &child(path, "timeouts"), raw.timeouts.as_ref(), d.timeouts),
        max_header_size: header_size(ctx, path, raw.max_header_size.as_ref()).unwrap_or(d.max_header_size),
        max_body_size: body_size(ctx, path, raw.max_body_size.as_ref()).or(d.max_body_size),
        forward_for: raw.forward_for.unwrap_or(d.forward_for),
        error_pages: merged(&d.error_pages, files),
        http2: http2(ctx, &child(path, "http2"), raw.http2.as_ref()),
    };
    Checked { frontend, bind_fields }
}

/// HTTP/2's settings; windows between 64 KiB - 1 (the protocol's initial) and 2 GiB - 1 (its
/// largest).
fn http2(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawHttp2>) -> Http2 {
    let d = Http2::default();
    let Some(raw) = raw else { return d };
    let mut window = |key: &str, text: Option<&String>, default: u32| {
        ctx.size(path, key, text, 65_535..=(u32::MAX >> 1) as usize, "bytes").map_or(default, |n| n as u32)
    };
    let stream_window = window("stream_window", raw.stream_window.as_ref(), d.stream_window);
    let connection_window = window("connection_window", raw.connection_window.as_ref(), d.connection_window);
    Http2 {
        enabled: raw.enabled.unwrap_or(d.enabled),
        max_concurrent_streams: ctx
            .int(path, "max_concurrent_streams", raw.max_concurrent_streams, 1..=10_000)
            .map_or(d.max_concurrent_streams, |n| n as u32),
        stream_window,
        connection_window,
    }
}

/// A string entry takes the frontend's `accept_proxy`; a map entry may set its own.
fn bind(ctx: &mut Checker<'_>, path: &str, raw: &RawBind, accept_proxy: bool) -> Option<(String, Bind)> {
    let (text, field, accept_proxy, map) = match raw {
        RawBind::Address(text) => (text, path.to_owned(), accept_proxy, None),
        RawBind::Map(map) => {
            let Some(text) = &map.address else {
                ctx.error(path, "missing `address`");
                return None;
            };
            (text, child(path, "address"), map.accept_proxy.unwrap_or(accept_proxy), Some(map))
        }
    };
    let address = match parse_listen(text, ctx.base) {
        Ok(address) => address,
        Err(message) => {
            ctx.error(&field, message);
            return None;
        }
    };
    let mut bind = Bind { address, accept_proxy, mode: None, user: None, group: None };
    if let Some(map) = map {
        let unix = matches!(bind.address, ListenAddr::Unix(_));
        for (key, given) in [("mode", map.mode.is_some()), ("user", map.user.is_some()), ("group", map.group.is_some())]
        {
            if given && !unix {
                ctx.error(&child(path, key), format!("only for a Unix socket (unix:/path), not {}", bind.address));
            }
        }
        if unix {
            bind.mode = map.mode.as_ref().and_then(|m| socket_mode(ctx, &child(path, "mode"), m));
            bind.user = ctx.word(path, "user", map.user.as_ref());
            bind.group = ctx.word(path, "group", map.group.as_ref());
        }
    }
    Some((field, bind))
}

/// `"0660"`, `"660"` or `660`: octal permission bits, at most 0777.
fn socket_mode(ctx: &mut Checker<'_>, field: &str, raw: &RawMode) -> Option<u32> {
    let digits = match raw {
        RawMode::Text(text) => text.trim().to_owned(),
        RawMode::Number(n) => n.to_string(),
    };
    match u32::from_str_radix(&digits, 8) {
        Ok(mode) if mode <= 0o777 && !digits.is_empty() => Some(mode),
        _ => {
            ctx.error(field, format!("`{digits}` is not a mode: octal digits, at most 0777 (e.g. \"0660\")"));
            None
        }
    }
}

fn rule(ctx: &mut Checker<'_>, path: &str, raw: &RawRule, names: &Names<'_>, policy: &Policy) -> Option<Rule> {
    if let Some(prefix) = &raw.path_prefix {
        if !prefix.starts_with('/') {
            ctx.error(&child(path, "path_prefix"), format!("`{prefix}` must start with `/`"));
        }
    }
    if let Some(host) = &raw.host {
        if host.is_empty() || host.contains('/') || host.chars().any(char::is_whitespace) {
            ctx.error(&child(path, "host"), format!("invalid host name `{host}`"));
        }
    }
    let guard = guard(ctx, path, raw.if_.as_ref(), raw.unless.as_ref(), names);
    if let Some(g) = &guard {
        if tests_response(&g.condition, &policy.conditions) {
            ctx.error(path, "this condition tests the response (status, response_header): a backend is chosen before");
        }
    }
    let Some(backend) = &raw.backend else {
        ctx.error(path, "missing `backend`");
        return None;
    };
    let backend = route_target(ctx, &child(path, "backend"), backend, names)?;
    let conditional = raw.path_prefix.is_some() || raw.host.is_some() || raw.if_.is_some() || raw.unless.is_some();
    if !conditional && matches!(backend, RouteTarget::Backend(_)) {
        ctx.error(path, "a rule needs a condition: `path_prefix`, `host`, `if` or `unless`");
    }
    Some(Rule { path_prefix: raw.path_prefix.clone(), host: raw.host.clone(), guard, backend })
}
