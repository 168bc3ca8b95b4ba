//! `tables:` → [`Table`]s: key type, size, expiry, stored data types with their periods, the
//! `limit_req` bucket.

use std::time::Duration;

use serde_yaml::Value;

use crate::check::Checker;
use crate::locate::{child, item};
use crate::raw::{RawLimitReq, RawTable};
use crate::table::{Bucket, DataType, KeyType, Store, Table};
use crate::units::{format_duration, parse_duration};

/// The largest table: 64 Mi entries (about 5 GiB with a few counters each).
pub(crate) const MAX_TABLE_SIZE: usize = 64 << 20;

/// String keys: bytes kept by default (HAProxy's `len` default is 32).
const DEFAULT_KEY_LEN: usize = 32;

/// Rates: the shortest and the longest period. The period number is kept on 32 bits, so 100 ms
/// periods last 13 years from 2025; entries live at most a day.
const MIN_PERIOD: Duration = Duration::from_millis(100);
const MAX_PERIOD: Duration = Duration::from_secs(86_400);

const KEY_TYPES: &[(&str, &str)] = &[("ip", "ip"), ("string", "string"), ("integer", "integer")];

/// Every table, in name order.
pub(super) fn tables(ctx: &mut Checker<'_>, raw: Option<&std::collections::BTreeMap<String, RawTable>>) -> Vec<Table> {
    let mut out = Vec::new();
    for (name, table) in raw.into_iter().flatten() {
        let path = child("tables", name);
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            ctx.key_error(&path, format!("invalid table name `{name}`: use only letters, digits, `_`, `.` and `-`"));
        }
        out.push(one(ctx, &path, name, table));
    }
    out
}

fn one(ctx: &mut Checker<'_>, path: &str, name: &str, raw: &RawTable) -> Table {
    let kind = ctx.keyword(path, "type", raw.kind.as_ref(), KEY_TYPES).unwrap_or("ip");
    let key = match kind {
        "string" => {
            let len = ctx.int(path, "len", raw.len, 1..=1024).map_or(DEFAULT_KEY_LEN, |n| n as usize);
            KeyType::String { len }
        }
        "integer" => KeyType::Integer,
        _ => {
            let prefix = raw.prefix.as_ref();
            let prefix_path = child(path, "prefix");
            let v4 = ctx.int(&prefix_path, "ipv4", prefix.and_then(|p| p.ipv4), 1..=32).unwrap_or(32);
            let v6 = ctx.int(&prefix_path, "ipv6", prefix.and_then(|p| p.ipv6), 1..=128).unwrap_or(128);
            KeyType::Ip { v4_prefix: v4 as u8, v6_prefix: v6 as u8 }
        }
    };
    if kind != "ip" && raw.prefix.is_some() {
        ctx.error(&child(path, "prefix"), "only an `ip` table groups its keys by prefix");
    }
    if kind != "string" && raw.len.is_some() {
        ctx.error(&child(path, "len"), "only a `string` table has a key length");
    }
    let size = size(ctx, path, raw.size.as_ref());
    let expire = match raw.expire.as_ref() {
        None => {
            ctx.error(path, "missing `expire` (how long an untouched entry lives, e.g. `10m`)");
            Duration::from_secs(60)
        }
        Some(text) => match ctx.duration(path, "expire", Some(text)) {
            Some(d) if d < Duration::from_secs(1) => {
                ctx.error(&child(path, "expire"), "must be at least 1s");
                d
            }
            Some(d) => d,
            None => Duration::from_secs(60),
        },
    };
    let mut store: Vec<Store> = Vec::new();
    for (i, text) in raw.store.iter().flatten().enumerate() {
        let at = item(&child(path, "store"), i);
        match parse_store(text) {
            Ok(s) if store.iter().any(|o| o.data == s.data) => ctx.error(&at, format!("`{}` is stored twice", s.data)),
            Ok(s) => store.push(s),
            Err(message) => ctx.error(&at, message),
        }
    }
    let bucket = raw.limit_req.as_ref().and_then(|b| bucket(ctx, &child(path, "limit_req"), b));
    if store.is_empty() && bucket.is_none() {
        ctx.error(path, "the table stores nothing: add `store: [...]` (e.g. `http_req_rate(10s)`) or `limit_req`");
    }
    Table { name: name.to_owned(), key, size, expire, store, bucket, fleet: raw.fleet.unwrap_or(false) }
}

/// `size`: entries, a number or a string with k or m (a number in YAML is as good).
fn size(ctx: &mut Checker<'_>, path: &str, raw: Option<&Value>) -> usize {
    let text = match raw {
        None => {
            ctx.error(&child(path, "size"), "missing `size` (entries at most, e.g. `1m`)");
            return 1;
        }
        Some(Value::Number(n)) => n.to_string(),
        Some(Value::String(s)) => s.clone(),
        Some(_) => {
            ctx.error(&child(path, "size"), "expected a number of entries, e.g. 100000 or 1m");
            return 1;
        }
    };
    ctx.size(path, "size", Some(&text), 1..=MAX_TABLE_SIZE, "entries").unwrap_or(1)
}

/// One `store` word: a data type (`conn_cur`, `gpc0`) or a rate with its period
/// (`http_req_rate(10s)`; HAProxy's bare milliseconds work too).
pub(crate) fn parse_store(text: &str) -> Result<Store, String> {
    let text = text.trim();
    let (name, period) = match text.split_once('(') {
        Some((name, rest)) => match rest.strip_suffix(')') {
            Some(p) => (name, Some(p)),
            None => return Err(format!("`{text}`: a period is written in parentheses, e.g. `http_req_rate(10s)`")),
        },
        None => (text, None),
    };
    let data = DataType::parse(name).ok_or_else(|| {
        format!(
            "unknown data type `{name}`: expected one of conn_cnt, conn_cur, conn_rate(P), http_req_cnt, \
             http_req_cur, http_req_rate(P), http_err_cnt, http_err_rate(P), http_fail_cnt, http_fail_rate(P), \
             bytes_in_cnt, bytes_in_rate(P), bytes_out_cnt, bytes_out_rate(P), gpc0..gpc7, gpt0..gpt7"
        )
    })?;
    match (data.is_rate(), period) {
        (true, None) => Err(format!("`{name}` is a rate: give its period, e.g. `{name}(10s)`")),
        (false, Some(_)) => Err(format!("`{name}` is not a rate: it takes no period")),
        (false, None) => Ok(Store { data, period: None }),
        (true, Some(p)) => {
            let period = parse_duration(p)?;
            if !(MIN_PERIOD..=MAX_PERIOD).contains(&period) {
                let got = format_duration(period);
                return Err(format!("`{name}`: the period must be between 100ms and 24h, got {got}"));
            }
            Ok(Store { data, period: Some(period) })
        }
    }
}

fn bucket(ctx: &mut Checker<'_>, path: &str, raw: &RawLimitReq) -> Option<Bucket> {
    let Some(rate) = raw.rate else {
        ctx.error(path, "missing `rate` (requests per `per`, e.g. `rate: 10`)");
        return None;
    };
    let rate = ctx.int(path, "rate", Some(rate), 1..=1_000_000)? as u32;
    let per = match raw.per.as_ref() {
        Some(p) => ctx.duration(path, "per", Some(p))?,
        None => Duration::from_secs(1),
    };
    let burst = ctx.int(path, "burst", raw.burst, 0..=1_000_000).unwrap_or(0) as u32;
    let delay = ctx.int(path, "delay", raw.delay, 0..=1_000_000).unwrap_or(0) as u32;
    let nodelay = raw.nodelay.unwrap_or(false);
    if nodelay && delay > 0 {
        ctx.error(&child(path, "delay"), "`nodelay` lets the whole burst through at once: `delay` has no effect");
    }
    if delay > burst {
        ctx.error(&child(path, "delay"), format!("at most the burst ({burst})"));
    }
    Some(Bucket { rate, per, burst, nodelay, delay })
}

/// Every `track` names a table that exists, whose key type can take the fetched value.
pub(super) fn check_references<'f>(
    ctx: &mut Checker<'_>,
    frontends: impl Iterator<Item = &'f crate::model::Frontend>,
    tables: &[Table],
) {
    for (i, fe) in frontends.enumerate() {
        let at_request = fe.http_request.iter().enumerate().filter_map(|(j, rule)| match &rule.action {
            crate::policy::RequestAction::Track(track) => Some(("http_request", j, track)),
            _ => None,
        });
        let at_accept = fe.tcp_request.iter().enumerate().filter_map(|(j, rule)| match &rule.action {
            crate::table::ConnectionAction::Track(track) => Some(("tcp_request", j, track)),
            crate::table::ConnectionAction::Reject => None,
        });
        for (list, j, track) in at_request.chain(at_accept) {
            let field = child(&child(&item(&child(&item("frontends", i), list), j), "track"), "table");
            let Some(table) = tables.iter().find(|t| t.name == track.table) else {
                let known: Vec<&str> = tables.iter().map(|t| t.name.as_str()).collect();
                let known =
                    if known.is_empty() { "none is defined under `tables`".to_owned() } else { known.join(", ") };
                ctx.error(&field, format!("no table named `{}` ({known})", track.table));
                continue;
            };
            if matches!(table.key, KeyType::Ip { .. }) && !matches!(track.key, crate::policy::Fetch::Src) {
                // Any fetch may key an address table, but only an address (a header holding
                // one, say) makes an entry: say so rather than count nothing silently.
                if !matches!(track.key, crate::policy::Fetch::Header(_) | crate::policy::Fetch::Query(_)) {
                    let key = child(&field[..field.len() - "table".len() - 1], "key");
                    ctx.error(
                        &key,
                        format!("table `{}` is keyed by address: track `src` (or a header holding one)", table.name),
                    );
                }
            }
        }
    }
}
