//! `tables:` written back.

use std::collections::BTreeMap;

use serde_yaml::Value;

use crate::raw::{RawLimitReq, RawPrefix, RawTable};
use crate::table::{ConnectionAction, ConnectionRule, KeyType, Mark, Table, Tarpit, Track};
use crate::units::format_duration;

pub(super) fn tables(tables: &[Table]) -> Option<BTreeMap<String, RawTable>> {
    if tables.is_empty() {
        return None;
    }
    Some(tables.iter().map(|t| (t.name.clone(), table(t))).collect())
}

fn table(t: &Table) -> RawTable {
    let (prefix, len) = match t.key {
        KeyType::Ip { v4_prefix, v6_prefix } if v4_prefix < 32 || v6_prefix < 128 => {
            (Some(RawPrefix { ipv4: Some(i64::from(v4_prefix)), ipv6: Some(i64::from(v6_prefix)) }), None)
        }
        KeyType::String { len } => (None, Some(len as i64)),
        _ => (None, None),
    };
    RawTable {
        kind: Some(t.key.word().to_owned()),
        prefix,
        len,
        size: Some(Value::from(t.size as u64)),
        expire: Some(format_duration(t.expire)),
        store: Some(
            t.store
                .iter()
                .map(|s| match s.period {
                    Some(p) => format!("{}({})", s.data, format_duration(p)),
                    None => s.data.to_string(),
                })
                .collect(),
        ),
        limit_req: t.bucket.map(|b| RawLimitReq {
            rate: Some(i64::from(b.rate)),
            per: Some(format_duration(b.per)),
            burst: Some(i64::from(b.burst)),
            nodelay: Some(b.nodelay),
            delay: Some(i64::from(b.delay)),
        }),
        fleet: t.fleet.then_some(true),
    }
}

pub(super) fn track(t: &Track) -> Value {
    let mut out = serde_yaml::Mapping::new();
    out.insert("table".into(), t.table.clone().into());
    out.insert("key".into(), super::policy::fetch(&t.key));
    out.insert("slot".into(), u64::from(t.slot).into());
    Value::Mapping(out)
}

pub(super) fn tarpit(t: &Tarpit) -> Value {
    let mut out = match super::policy::reply(&t.reply) {
        Value::Mapping(m) => m,
        _ => serde_yaml::Mapping::new(),
    };
    out.insert("delay".into(), format_duration(t.delay).into());
    Value::Mapping(out)
}

/// `set_gpt` (with its value) or `inc_gpc`.
pub(super) fn mark(m: &Mark, with_value: bool) -> Value {
    let mut out = serde_yaml::Mapping::new();
    out.insert("slot".into(), u64::from(m.slot).into());
    out.insert("index".into(), u64::from(m.index).into());
    if with_value {
        out.insert("value".into(), u64::from(m.value).into());
    }
    Value::Mapping(out)
}

pub(super) fn connection_rules(rules: &[ConnectionRule]) -> Option<Vec<Value>> {
    let out: Vec<Value> = rules
        .iter()
        .map(|r| {
            let (action, arg) = match &r.action {
                ConnectionAction::Track(t) => ("track", track(t)),
                ConnectionAction::Reject => ("reject", Value::Bool(true)),
            };
            super::policy::with_guard(action, arg, r.guard.as_ref())
        })
        .collect();
    (!out.is_empty()).then_some(out)
}
