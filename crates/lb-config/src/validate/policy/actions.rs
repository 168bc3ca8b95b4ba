//! `http_request` and `http_response` rules (one action key, `if`/`unless`), and a routing
//! rule's map target.

use serde_yaml::{Mapping, Value};

use super::{guard, is_header_name, keys_of, scalar_text, template, tests_response, Names};
use crate::check::Checker;
use crate::locate::{child, item};
use crate::policy::{
    Capture, Condition, Fetch, Guard, HeaderTemplate, Redirect, RedirectTo, Reply, RequestAction, RequestRule,
    ResponseAction, ResponseRule, RouteTarget,
};

const REQUEST_ACTIONS: &str =
    "deny, return, redirect, allow, set_header, add_header, del_header, set_path, capture, track, tarpit, set_gpt, inc_gpc";
const RESPONSE_ACTIONS: &str = "deny, set_header, add_header, del_header, capture";

/// Captures cut values at this many bytes at most (HAProxy's own limit is 64 KiB; a log line
/// past a few KiB is cut by syslog anyway).
const MAX_CAPTURE: i64 = 4096;

pub(in crate::validate) fn request_rules(
    ctx: &mut Checker<'_>,
    path: &str,
    raw: Option<&Vec<Value>>,
    names: &Names<'_>,
    named: &std::collections::BTreeMap<String, Condition>,
) -> Vec<RequestRule> {
    let mut rules = Vec::new();
    for (i, value) in raw.into_iter().flatten().enumerate() {
        let at = item(path, i);
        let Some((key, arg, guard)) = split_rule(ctx, &at, value, names) else { continue };
        if let Some(g) = &guard {
            if tests_response(&g.condition, named) {
                ctx.error(
                    &at,
                    "this condition tests the response (status, response_header): use it in `http_response`",
                );
            }
        }
        let field = child(&at, key);
        let action = match key {
            "deny" => reply(ctx, &field, arg, 403, true).map(RequestAction::Deny),
            "return" => reply(ctx, &field, arg, 200, false).map(RequestAction::Return),
            "redirect" => redirect(ctx, &field, arg).map(RequestAction::Redirect),
            "allow" => match arg {
                Value::Bool(true) | Value::Null => Some(RequestAction::Allow),
                _ => {
                    ctx.error(&field, "write `allow: true`");
                    None
                }
            },
            "set_header" => header(ctx, &field, arg).map(RequestAction::SetHeader),
            "add_header" => header(ctx, &field, arg).map(RequestAction::AddHeader),
            "del_header" => header_name(ctx, &field, arg).map(RequestAction::DelHeader),
            "set_path" => set_path(ctx, &field, arg).map(RequestAction::SetPath),
            "capture" => capture(ctx, &field, arg).map(RequestAction::Capture),
            "track" => super::limits::track(ctx, &field, arg).map(RequestAction::Track),
            "tarpit" => super::limits::tarpit(ctx, &field, arg).map(RequestAction::Tarpit),
            "set_gpt" => super::limits::mark(ctx, &field, arg, true).map(RequestAction::SetGpt),
            "inc_gpc" => super::limits::mark(ctx, &field, arg, false).map(RequestAction::IncGpc),
            other => {
                ctx.error(&at, format!("unknown action `{other}`: expected one of {REQUEST_ACTIONS}"));
                None
            }
        };
        if let Some(action) = action {
            rules.push(RequestRule { action, guard });
        }
    }
    rules
}

pub(in crate::validate) fn response_rules(
    ctx: &mut Checker<'_>,
    path: &str,
    raw: Option<&Vec<Value>>,
    names: &Names<'_>,
) -> Vec<ResponseRule> {
    let mut rules = Vec::new();
    for (i, value) in raw.into_iter().flatten().enumerate() {
        let at = item(path, i);
        let Some((key, arg, guard)) = split_rule(ctx, &at, value, names) else { continue };
        let field = child(&at, key);
        let action = match key {
            "deny" => reply(ctx, &field, arg, 502, true).map(ResponseAction::Deny),
            "set_header" => header(ctx, &field, arg).map(ResponseAction::SetHeader),
            "add_header" => header(ctx, &field, arg).map(ResponseAction::AddHeader),
            "del_header" => header_name(ctx, &field, arg).map(ResponseAction::DelHeader),
            "capture" => capture(ctx, &field, arg).map(ResponseAction::Capture),
            other => {
                ctx.error(
                    &at,
                    format!("unknown action `{other}` in http_response: expected one of {RESPONSE_ACTIONS}"),
                );
                None
            }
        };
        if let Some(action) = action {
            rules.push(ResponseRule { action, guard });
        }
    }
    rules
}

/// A rule's one action key and its argument, and its `if`/`unless`.
pub(super) fn split_rule<'v>(
    ctx: &mut Checker<'_>,
    at: &str,
    value: &'v Value,
    names: &Names<'_>,
) -> Option<(&'v str, &'v Value, Option<Guard>)> {
    let Value::Mapping(map) = value else {
        ctx.error(at, "expected a rule: a map with one action and optional `if` or `unless`");
        return None;
    };
    let actions: Vec<(&str, &Value)> = map
        .iter()
        .filter_map(|(k, v)| k.as_str().map(|k| (k, v)))
        .filter(|(k, _)| !matches!(*k, "if" | "unless"))
        .collect();
    let [(key, arg)] = actions[..] else {
        let found = if actions.is_empty() { "none".to_owned() } else { keys_of(map) };
        ctx.error(at, format!("a rule has exactly one action (plus `if` or `unless`); found {found}"));
        return None;
    };
    let guard = guard(ctx, at, map.get("if"), map.get("unless"), names);
    Some((key, arg, guard))
}

/// `deny` / `return`: `{ status, content_type, body | file, headers }`; `deny` may be bare.
pub(super) fn reply(
    ctx: &mut Checker<'_>,
    field: &str,
    arg: &Value,
    default_status: u16,
    bare_ok: bool,
) -> Option<Reply> {
    let empty = Mapping::new();
    let map = match arg {
        Value::Mapping(map) => map,
        Value::Bool(true) | Value::Null if bare_ok => &empty,
        _ => {
            ctx.error(field, "expected a map: `{ status, content_type, body or file, headers }`");
            return None;
        }
    };
    let mut reply = Reply::status(default_status);
    for (k, v) in map {
        let k = k.as_str().unwrap_or_default();
        let at = child(field, k);
        match k {
            "status" => match v.as_u64() {
                Some(s @ 200..=599) => reply.status = s as u16,
                _ => ctx.error(&at, "expected a status between 200 and 599"),
            },
            "content_type" => match v.as_str() {
                Some(t) if !t.chars().any(char::is_control) && !t.is_empty() => reply.content_type = Some(t.to_owned()),
                _ => ctx.error(&at, "expected a media type such as application/json"),
            },
            "body" => match scalar_text(v) {
                Some(b) => reply.body = b.into_bytes().into(),
                None => ctx.error(&at, "expected text"),
            },
            "file" => {
                let Some(path) = v.as_str().and_then(|p| ctx.path(&at, p)) else { continue };
                match std::fs::read(&path) {
                    Ok(bytes) => {
                        reply.body = bytes.into();
                        reply.body_file = Some(path);
                    }
                    Err(e) => ctx.error(&at, format!("cannot read {}: {e}", path.display())),
                }
            }
            "headers" => {
                let Value::Mapping(headers) = v else {
                    ctx.error(&at, "expected a map of header names to values");
                    continue;
                };
                for (name, value) in headers {
                    let (Some(name), Some(value)) = (name.as_str(), scalar_text(value)) else {
                        ctx.error(&at, "each header: a name and a value");
                        continue;
                    };
                    let hf = child(&at, name);
                    if !is_header_name(name) {
                        ctx.error(&hf, format!("`{name}` is not a header name"));
                    } else if let Some(t) = template(ctx, &hf, &value, true) {
                        reply.headers.push((name.to_owned(), t));
                    }
                }
            }
            other => {
                ctx.error(&at, format!("unknown key `{other}`: expected status, content_type, body, file, headers"))
            }
        }
    }
    if map.contains_key("body") && map.contains_key("file") {
        ctx.error(field, "`body` or `file`, not both");
    }
    if !reply.body.is_empty() && reply.content_type.is_none() {
        reply.content_type = Some("text/plain; charset=utf-8".to_owned());
    }
    Some(reply)
}

fn redirect(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<Redirect> {
    let Value::Mapping(map) = arg else {
        ctx.error(field, "expected a map: `{ scheme | location | prefix, code, keep_query }`");
        return None;
    };
    let mut to = Vec::new();
    let (mut code, mut keep_query) = (302, true);
    for (k, v) in map {
        let k = k.as_str().unwrap_or_default();
        let at = child(field, k);
        let text = v.as_str();
        match (k, text) {
            ("scheme", Some(s)) if matches!(s, "http" | "https") => to.push(RedirectTo::Scheme(s.to_owned())),
            ("scheme", _) => ctx.error(&at, "expected http or https"),
            ("location", Some(l)) => {
                if let Some(t) = template(ctx, &at, l, true) {
                    to.push(RedirectTo::Location(t));
                }
            }
            ("prefix", Some(p)) if !p.chars().any(char::is_control) && !p.is_empty() => {
                to.push(RedirectTo::Prefix(p.trim_end_matches('/').to_owned()))
            }
            ("location" | "prefix", None) | ("prefix", Some(_)) => ctx.error(&at, "expected a URL or path"),
            ("code", _) => match v.as_u64() {
                Some(c @ (301 | 302 | 303 | 307 | 308)) => code = c as u16,
                _ => ctx.error(&at, "expected 301, 302, 303, 307 or 308"),
            },
            ("keep_query", _) => match v.as_bool() {
                Some(b) => keep_query = b,
                None => ctx.error(&at, "expected true or false"),
            },
            (other, _) => {
                ctx.error(&at, format!("unknown key `{other}`: expected scheme, location, prefix, code, keep_query"))
            }
        }
    }
    if to.len() != 1 {
        ctx.error(field, "a redirect needs exactly one of `scheme`, `location`, `prefix`");
        return None;
    }
    Some(Redirect { to: to.remove(0), code, keep_query })
}

fn header(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<HeaderTemplate> {
    let Value::Mapping(map) = arg else {
        ctx.error(field, "expected `{ name: …, value: … }`");
        return None;
    };
    for k in map.keys().filter_map(Value::as_str).filter(|k| !matches!(*k, "name" | "value")) {
        ctx.error(&child(field, k), format!("unknown key `{k}`: expected name and value"));
    }
    let name = header_name(ctx, &child(field, "name"), map.get("name").unwrap_or(&Value::Null))?;
    let Some(value) = map.get("value").and_then(scalar_text) else {
        ctx.error(field, "missing `value`");
        return None;
    };
    let value = template(ctx, &child(field, "value"), &value, true)?;
    Some(HeaderTemplate { name, value })
}

fn header_name(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<String> {
    match arg.as_str() {
        Some(name) if is_header_name(name) => Some(name.to_owned()),
        Some(name) => {
            ctx.error(field, format!("`{name}` is not a header name"));
            None
        }
        None => {
            ctx.error(field, "expected a header name");
            None
        }
    }
}

fn set_path(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<crate::policy::Template> {
    let Some(text) = arg.as_str() else {
        ctx.error(field, "expected a path template, e.g. \"/v2%[path]\"");
        return None;
    };
    let t = template(ctx, field, text, true)?;
    if let Some(crate::policy::TemplatePart::Literal(first)) = t.parts.first() {
        if !first.starts_with('/') {
            ctx.error(field, "a path starts with `/`");
            return None;
        }
    }
    Some(t)
}

fn capture(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<Capture> {
    let Value::Mapping(map) = arg else {
        ctx.error(field, "expected `{ header: NAME, length: N }`");
        return None;
    };
    for k in map.keys().filter_map(Value::as_str).filter(|k| !matches!(*k, "header" | "length")) {
        ctx.error(&child(field, k), format!("unknown key `{k}`: expected header and length"));
    }
    let header = header_name(ctx, &child(field, "header"), map.get("header").unwrap_or(&Value::Null))?;
    let length = ctx.int(field, "length", map.get("length").and_then(Value::as_i64), 1..=MAX_CAPTURE);
    if map.get("length").is_none() {
        ctx.error(field, "missing `length` (bytes kept of the value)");
    }
    Some(Capture { header: header.to_ascii_lowercase(), length: length? as usize })
}

/// A routing rule's `backend:`: a name, or `{ map, key, default }`.
pub(in crate::validate) fn route_target(
    ctx: &mut Checker<'_>,
    field: &str,
    value: &Value,
    names: &Names<'_>,
) -> Option<RouteTarget> {
    match value {
        Value::String(name) => Some(RouteTarget::Backend(name.clone())),
        Value::Mapping(map) => {
            for k in map.keys().filter_map(Value::as_str).filter(|k| !matches!(*k, "map" | "key" | "default")) {
                ctx.error(&child(field, k), format!("unknown key `{k}`: expected map, key, default"));
            }
            let map_name = map.get("map").and_then(Value::as_str);
            let Some(map_name) = map_name else {
                ctx.error(field, "missing `map` (a name under `maps`)");
                return None;
            };
            if !names.maps.contains(map_name) {
                ctx.error(&child(field, "map"), format!("no map named `{map_name}` under `maps`"));
                return None;
            }
            let key = fetch_spec(ctx, &child(field, "key"), map.get("key"))?;
            let default = map.get("default").and_then(Value::as_str).map(str::to_owned);
            Some(RouteTarget::Map { map: map_name.to_owned(), key, default })
        }
        _ => {
            ctx.error(field, "expected a backend's name or `{ map, key, default }`");
            None
        }
    }
}

/// A fetch alone: `host`, `path`, or `{ header: NAME }` for those that take a name.
pub(super) fn fetch_spec(ctx: &mut Checker<'_>, field: &str, value: Option<&Value>) -> Option<Fetch> {
    let (key, name) = match value {
        Some(Value::String(key)) => (key.as_str(), None),
        Some(Value::Mapping(map)) if map.len() == 1 => {
            let (k, v) = map.iter().next()?;
            (k.as_str().unwrap_or_default(), v.as_str().map(str::to_owned))
        }
        _ => {
            ctx.error(field, "expected a fetch: `host`, `path`, … or `{ header: NAME }`");
            return None;
        }
    };
    let needs_name = Fetch::KEYS.iter().find(|(k, _)| *k == key).map(|(_, n)| *n);
    match needs_name {
        None => {
            ctx.error(field, format!("unknown fetch `{key}`"));
            None
        }
        Some(true) if name.is_none() => {
            ctx.error(field, format!("`{key}` needs a name: `{{ {key}: NAME }}`"));
            None
        }
        Some(_) => {
            let fetch = Fetch::from_key(key, name)?;
            if fetch.is_response() {
                ctx.error(field, "a response fetch cannot choose a backend");
                return None;
            }
            Some(fetch)
        }
    }
}
