//! The actions on limit tables: `track`, `tarpit`, `set_gpt`, `inc_gpc`. Whether a tracked
//! table exists is checked once every table is known (`validate::tables::check_references`).

use std::time::Duration;

use serde_yaml::{Mapping, Value};

use super::actions::{fetch_spec, reply, split_rule};
use super::Names;
use crate::check::Checker;
use crate::locate::{child, item};
use crate::policy::{Condition, Fetch};
use crate::table::{ConnectionAction, ConnectionRule, Mark, Tarpit, Track, GENERAL_PURPOSE, SLOTS};

/// `tcp_request:` rules: `track` (keyed by `src`) and `reject`, with conditions on what is known
/// at accept: the client's address and port, the frontend, the PROXY header's TLS facts, and
/// tracked figures.
pub(in crate::validate) fn connection_rules(
    ctx: &mut Checker<'_>,
    path: &str,
    raw: Option<&Vec<Value>>,
    names: &Names<'_>,
) -> Vec<ConnectionRule> {
    let mut rules = Vec::new();
    for (i, value) in raw.into_iter().flatten().enumerate() {
        let at = item(path, i);
        let Some((key, arg, guard)) = split_rule(ctx, &at, value, names) else { continue };
        if let Some(g) = &guard {
            if let Some(fetch) = not_at_accept(&g.condition) {
                let what = fetch.key().0;
                ctx.error(&at, format!("`{what}` is not known at accept: a tcp_request condition reads src, src_port, frontend, sni, alpn, tls_version, tls_cipher or sc0-sc2"));
                continue;
            }
        }
        let field = child(&at, key);
        let action = match key {
            "track" => match track(ctx, &field, arg) {
                Some(t) if t.key != Fetch::Src => {
                    ctx.error(&child(&field, "key"), "at accept the key is the client's address: `src`");
                    None
                }
                t => t.map(ConnectionAction::Track),
            },
            "reject" => match arg {
                Value::Bool(true) | Value::Null => Some(ConnectionAction::Reject),
                _ => {
                    ctx.error(&field, "write `reject: true`");
                    None
                }
            },
            other => {
                ctx.error(&at, format!("unknown action `{other}` in tcp_request: expected track or reject"));
                None
            }
        };
        if let Some(action) = action {
            rules.push(ConnectionRule { action, guard });
        }
    }
    rules
}

/// A fetch of `c` that a connection does not have at accept (named conditions are checked
/// where they are used, through their tests).
fn not_at_accept(c: &Condition) -> Option<&Fetch> {
    match c {
        Condition::All(cs) | Condition::Any(cs) => cs.iter().find_map(not_at_accept),
        Condition::Not(c) => not_at_accept(c),
        Condition::Named(_) => None,
        Condition::Test(t) => match t.fetch {
            Fetch::Src
            | Fetch::SrcPort
            | Fetch::Frontend
            | Fetch::Sni
            | Fetch::Alpn
            | Fetch::TlsVersion
            | Fetch::TlsCipher
            | Fetch::Sc { .. } => None,
            ref other => Some(other),
        },
    }
}

/// `track: { table, key, slot }`; `key` defaults to `src`, `slot` to 0.
pub(super) fn track(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<Track> {
    let map = mapping(ctx, field, arg, "`{ table: NAME, key: src, slot: 0 }`")?;
    unknown_keys(ctx, field, map, &["table", "key", "slot"]);
    let Some(table) = map.get("table").and_then(Value::as_str) else {
        ctx.error(field, "missing `table` (the name of a table under `tables`)");
        return None;
    };
    let key = match map.get("key") {
        None => crate::policy::Fetch::Src,
        Some(v) => fetch_spec(ctx, &child(field, "key"), Some(v))?,
    };
    if matches!(key, crate::policy::Fetch::Sc { .. }) {
        ctx.error(&child(field, "key"), "a key is a request's value (src, a header, …), not a tracked figure");
        return None;
    }
    let slot = slot(ctx, field, map)?;
    Some(Track { slot, table: table.to_owned(), key })
}

/// `tarpit: { delay, status, content_type, body | file, headers }`: `delay` required.
pub(super) fn tarpit(ctx: &mut Checker<'_>, field: &str, arg: &Value) -> Option<Tarpit> {
    let map = mapping(ctx, field, arg, "`{ delay: 10s, status: 429 }`")?;
    let delay = match map.get("delay").and_then(Value::as_str) {
        Some(text) => ctx.duration(field, "delay", Some(&text.to_owned()))?,
        None => {
            ctx.error(field, "missing `delay` (how long the request is held, e.g. `10s`)");
            return None;
        }
    };
    let mut rest = map.clone();
    rest.remove("delay");
    let reply = reply(ctx, field, &Value::Mapping(rest), 500, true)?;
    Some(Tarpit { delay: delay.min(Duration::from_secs(3600)), reply })
}

/// `set_gpt: { slot, index, value }` (`with_value`) or `inc_gpc: { slot, index }`.
pub(super) fn mark(ctx: &mut Checker<'_>, field: &str, arg: &Value, with_value: bool) -> Option<Mark> {
    let map = mapping(ctx, field, arg, "`{ slot: 0, index: 0 }`")?;
    let allowed: &[&str] = if with_value { &["slot", "index", "value"] } else { &["slot", "index"] };
    unknown_keys(ctx, field, map, allowed);
    let slot = slot(ctx, field, map)?;
    let index = ctx.int(
        field,
        "index",
        map.get("index").map_or(Some(0), |v| v.as_i64().or(Some(-1))),
        0..=i64::from(GENERAL_PURPOSE) - 1,
    )?;
    let value = if with_value {
        let Some(v) = map.get("value") else {
            ctx.error(field, "missing `value` (the tag's value, 0 to 4294967295)");
            return None;
        };
        ctx.int(field, "value", v.as_i64().or(Some(-1)), 0..=i64::from(u32::MAX))? as u32
    } else {
        1
    };
    Some(Mark { slot, index: index as u8, value })
}

fn mapping<'v>(ctx: &mut Checker<'_>, field: &str, arg: &'v Value, example: &str) -> Option<&'v Mapping> {
    match arg {
        Value::Mapping(map) => Some(map),
        _ => {
            ctx.error(field, format!("expected a map: {example}"));
            None
        }
    }
}

fn unknown_keys(ctx: &mut Checker<'_>, field: &str, map: &Mapping, allowed: &[&str]) {
    for k in map.keys() {
        let k = k.as_str().unwrap_or("?");
        if !allowed.contains(&k) {
            ctx.error(&child(field, k), format!("unknown key `{k}`: expected {}", allowed.join(", ")));
        }
    }
}

fn slot(ctx: &mut Checker<'_>, field: &str, map: &Mapping) -> Option<u8> {
    let raw = map.get("slot").map_or(Some(0), |v| v.as_i64().or(Some(-1)));
    ctx.int(field, "slot", raw, 0..=i64::from(SLOTS) - 1).map(|n| n as u8)
}
