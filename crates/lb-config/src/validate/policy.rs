//! The policy language as written → its typed model: the top level's `conditions`, `lists` and
//! `maps`, and for each frontend its `http_request` / `http_response` rules, routing rules'
//! `if`/`unless` and map targets, `unique_id` and `log_format`. Conditions are in
//! `conditions`, actions in `actions`.

mod actions;
mod conditions;
mod limits;

use std::collections::{BTreeMap, BTreeSet};

use serde_yaml::{Mapping, Value};

pub(super) use actions::{request_rules, response_rules, route_target};
pub(super) use conditions::{condition, tests_response};
pub(super) use limits::connection_rules;

use crate::check::Checker;
use crate::locate::child;
use crate::policy::{
    check_map_entry, parse_list_entry, parse_list_text, parse_map_text, AccessLogFormat, Condition, Guard, ListKind,
    MapDef, MapMatch, PatternList, Policy, Template, UniqueId,
};
use crate::raw::{RawConfig, RawList, RawMap, RawUniqueId};

/// What names a rule may refer to.
#[derive(Debug)]
pub(super) struct Names<'a> {
    pub(super) conditions: &'a BTreeSet<String>,
    pub(super) lists: &'a BTreeMap<String, ListKind>,
    pub(super) maps: &'a BTreeSet<String>,
}

/// The top level's `conditions`, `lists` and `maps`.
pub(super) fn policy(ctx: &mut Checker<'_>, raw: &RawConfig) -> Policy {
    let mut lists = BTreeMap::new();
    for (name, list) in raw.lists.iter().flatten() {
        let path = child("lists", name);
        check_name(ctx, &path, name);
        if let Some(list) = pattern_list(ctx, &path, list) {
            lists.insert(name.clone(), list);
        }
    }
    let mut maps = BTreeMap::new();
    for (name, map) in raw.maps.iter().flatten() {
        let path = child("maps", name);
        check_name(ctx, &path, name);
        if let Some(map) = map_def(ctx, &path, map) {
            maps.insert(name.clone(), map);
        }
    }
    let condition_names: BTreeSet<String> = raw.conditions.iter().flatten().map(|(n, _)| n.clone()).collect();
    let list_kinds = lists.iter().map(|(n, l): (&String, &PatternList)| (n.clone(), l.kind)).collect();
    let map_names = maps.keys().cloned().collect();
    let names = Names { conditions: &condition_names, lists: &list_kinds, maps: &map_names };
    let mut conditions = BTreeMap::new();
    for (name, value) in raw.conditions.iter().flatten() {
        let path = child("conditions", name);
        check_name(ctx, &path, name);
        if let Some(c) = condition(ctx, &path, value, &names) {
            conditions.insert(name.clone(), c);
        }
    }
    for name in conditions.keys() {
        if refers_to(&conditions, name, name, 0) {
            ctx.error(&child("conditions", name), format!("condition `{name}` refers to itself (through its names)"));
        }
    }
    Policy { conditions, lists, maps }
}

/// Whether condition `from` reaches the name `target` through its named conditions.
fn refers_to(conditions: &BTreeMap<String, Condition>, from: &str, target: &str, depth: usize) -> bool {
    fn walk(c: &Condition, conditions: &BTreeMap<String, Condition>, target: &str, depth: usize) -> bool {
        match c {
            Condition::All(cs) | Condition::Any(cs) => cs.iter().any(|c| walk(c, conditions, target, depth)),
            Condition::Not(c) => walk(c, conditions, target, depth),
            Condition::Named(n) => n == target || (depth < 64 && refers_to(conditions, n, target, depth + 1)),
            Condition::Test(_) => false,
        }
    }
    conditions.get(from).is_some_and(|c| walk(c, conditions, target, depth))
}

fn check_name(ctx: &mut Checker<'_>, path: &str, name: &str) {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        ctx.error(path, format!("invalid name `{name}`: use only letters, digits, `_`, `.` and `-`"));
    }
}

fn pattern_list(ctx: &mut Checker<'_>, path: &str, raw: &RawList) -> Option<PatternList> {
    let kind = ctx.keyword(path, "type", raw.kind.as_ref(), ListKind::KEYWORDS).unwrap_or(ListKind::String);
    let ignore_case = raw.ignore_case.unwrap_or(false);
    if ignore_case && kind == ListKind::Ip {
        ctx.error(&child(path, "ignore_case"), "an ip list has no case");
    }
    match (&raw.file, &raw.values) {
        (Some(file), None) => {
            let (file, entries) = read_file(ctx, path, file, |text| parse_list_text(kind, text))?;
            Some(PatternList { kind, file: Some(file), entries, ignore_case })
        }
        (None, Some(values)) => {
            let field = child(path, "values");
            let mut entries = Vec::with_capacity(values.len());
            for (i, v) in values.iter().enumerate() {
                let at = crate::locate::item(&field, i);
                match scalar_text(v)
                    .ok_or_else(|| "expected a value".to_owned())
                    .and_then(|t| parse_list_entry(kind, &t))
                {
                    Ok(entry) => entries.push(entry),
                    Err(e) => ctx.error(&at, e),
                }
            }
            Some(PatternList { kind, file: None, entries, ignore_case })
        }
        _ => {
            ctx.error(path, "a list needs `file` or `values` (one of them)");
            None
        }
    }
}

/// A list or map file (`path.file`) read and parsed; a bad line refuses it whole, the
/// diagnostic pointing at the file's line.
fn read_file<T>(
    ctx: &mut Checker<'_>,
    path: &str,
    file: &str,
    parse: impl FnOnce(&str) -> Result<T, (usize, String)>,
) -> Option<(std::path::PathBuf, T)> {
    let field = child(path, "file");
    let file = ctx.path(&field, file)?;
    let text = match std::fs::read_to_string(&file) {
        Ok(text) => text,
        Err(e) => {
            ctx.error(&field, format!("cannot read {}: {e}", file.display()));
            return None;
        }
    };
    match parse(&text) {
        Ok(parsed) => Some((file, parsed)),
        Err((line, message)) => {
            ctx.error_in(&file.display().to_string(), line, path, format!("refused whole: {message}"));
            None
        }
    }
}

fn map_def(ctx: &mut Checker<'_>, path: &str, raw: &RawMap) -> Option<MapDef> {
    let matching = ctx.keyword(path, "match", raw.matching.as_ref(), MapMatch::KEYWORDS).unwrap_or(MapMatch::Exact);
    let ignore_case = raw.ignore_case.unwrap_or(false);
    match (&raw.file, &raw.entries) {
        (Some(file), None) => {
            let (file, entries) = read_file(ctx, path, file, parse_map_text)?;
            Some(MapDef { matching, file: Some(file), entries, ignore_case })
        }
        (None, Some(raw_entries)) => {
            let field = child(path, "entries");
            let mut entries = Vec::with_capacity(raw_entries.len());
            for (key, v) in raw_entries {
                let value = scalar_text(v).unwrap_or_default();
                match check_map_entry(key, &value) {
                    Ok(()) => entries.push((key.clone(), value)),
                    Err(e) => ctx.error(&child(&field, key), e),
                }
            }
            Some(MapDef { matching, file: None, entries, ignore_case })
        }
        _ => {
            ctx.error(path, "a map needs `file` or `entries` (one of them)");
            None
        }
    }
}

/// `if:` / `unless:` of a rule (at most one of them).
pub(super) fn guard(
    ctx: &mut Checker<'_>,
    path: &str,
    if_: Option<&Value>,
    unless: Option<&Value>,
    names: &Names<'_>,
) -> Option<Guard> {
    match (if_, unless) {
        (Some(_), Some(_)) => {
            ctx.error(path, "`if` or `unless`, not both (write `all: [...]` with a `not`)");
            None
        }
        (Some(c), None) => {
            condition(ctx, &child(path, "if"), c, names).map(|condition| Guard { condition, negate: false })
        }
        (None, Some(c)) => {
            condition(ctx, &child(path, "unless"), c, names).map(|condition| Guard { condition, negate: true })
        }
        (None, None) => None,
    }
}

/// A template at `field`; `header_value`: what it gives goes on the wire as a header value, so
/// its literal text may not hold CR, LF or NUL.
pub(super) fn template(ctx: &mut Checker<'_>, field: &str, text: &str, header_value: bool) -> Option<Template> {
    if header_value && text.chars().any(|c| matches!(c, '\r' | '\n' | '\0')) {
        ctx.error(field, "a header value cannot hold CR, LF or NUL");
        return None;
    }
    Template::parse(text).map_err(|e| ctx.error(field, e)).ok()
}

pub(super) fn unique_id(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawUniqueId>) -> Option<UniqueId> {
    let raw = raw?;
    let header = raw.header.clone().unwrap_or_else(|| "X-Request-ID".to_owned());
    if !is_header_name(&header) {
        ctx.error(&child(path, "header"), format!("`{header}` is not a header name"));
    }
    let format = raw.format.as_ref().and_then(|f| template(ctx, &child(path, "format"), f, true));
    Some(UniqueId { header, format, keep_client: raw.keep_client.unwrap_or(true) })
}

pub(super) fn log_format(ctx: &mut Checker<'_>, path: &str, raw: Option<&Value>) -> Option<AccessLogFormat> {
    let raw = raw?;
    let field = child(path, "log_format");
    match raw {
        Value::String(text) => template(ctx, &field, text, false).map(AccessLogFormat::Text),
        Value::Mapping(map) if map.len() == 1 && map.contains_key("json") => {
            let json_field = child(&field, "json");
            let Some(Value::Mapping(fields)) = map.get("json") else {
                ctx.error(&json_field, "expected a map of field names to templates, e.g. `{ client: \"%ci\" }`");
                return None;
            };
            let mut out = Vec::with_capacity(fields.len());
            for (k, v) in fields {
                let (Some(k), Some(v)) = (k.as_str(), scalar_text(v)) else {
                    ctx.error(&json_field, "each field: a name and a template");
                    continue;
                };
                if let Some(t) = template(ctx, &child(&json_field, k), &v, false) {
                    out.push((k.to_owned(), t));
                }
            }
            Some(AccessLogFormat::Json(out))
        }
        _ => {
            ctx.error(&field, "expected a template (HAProxy's log-format) or `{ json: { field: template, … } }`");
            None
        }
    }
}

/// RFC 9110's token characters.
pub(super) fn is_header_name(name: &str) -> bool {
    !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// A scalar as text (numbers and booleans too: `in: [200, 204]`).
pub(super) fn scalar_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A mapping's keys, for messages: "`a`, `b`".
pub(super) fn keys_of(map: &Mapping) -> String {
    map.keys().map(|k| format!("`{}`", k.as_str().unwrap_or("?"))).collect::<Vec<_>>().join(", ")
}
