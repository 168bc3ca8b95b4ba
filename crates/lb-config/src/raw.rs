//! The YAML document as written, before validation: one struct per mapping of the schema.
//!
//! Everything the operator may leave out is an `Option`, and enumerations, durations, sizes and
//! addresses are kept as text, so that serde only rejects what is structurally wrong (unknown
//! keys, a list where a map belongs) and validation can report every value problem at once,
//! each with its location. The same structs, filled from a typed [`Config`](crate::Config),
//! are serialized by `Config::to_yaml`.

use std::collections::BTreeMap;
use std::fmt;

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_yaml::Value;

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map with `global`, `defaults`, `frontends` and `backends`")]
pub(crate) struct RawConfig {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) global: Option<RawGlobal>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) defaults: Option<RawDefaults>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) frontends: Option<Vec<RawFrontend>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) backends: Option<Vec<RawBackend>>,
    /// Named conditions: each a condition as `if:` takes it (checked by `validate::policy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) conditions: Option<BTreeMap<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) lists: Option<BTreeMap<String, RawList>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) maps: Option<BTreeMap<String, RawMap>>,
    /// Limit tables (checked by `validate::tables`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tables: Option<BTreeMap<String, RawTable>>,
}

/// `tables.NAME`: a limit table (HAProxy's `stick-table`).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a table: a map with `type`, `size`, `expire`, `store`, `limit_req`, `fleet`")]
pub(crate) struct RawTable {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    /// `{ ipv4: 24, ipv6: 64 }`: addresses grouped by network.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prefix: Option<RawPrefix>,
    /// String keys: bytes kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) len: Option<i64>,
    /// Entries: a number, or with `k` / `m` (×1024, ×1048576, as HAProxy reads them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) size: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expire: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) store: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) limit_req: Option<RawLimitReq>,
    /// The limits on this table's figures are the fleet's: each node enforces its share.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fleet: Option<bool>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map with `ipv4` and/or `ipv6` prefix lengths")]
pub(crate) struct RawPrefix {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ipv4: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ipv6: Option<i64>,
}

/// `tables.NAME.limit_req`: nginx's `limit_req` on each entry.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map with `rate`, `per`, `burst`, `nodelay`, `delay`")]
pub(crate) struct RawLimitReq {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rate: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) per: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) burst: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) nodelay: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) delay: Option<i64>,
}

/// `lists.NAME`: a pattern list, inline (`values`) or from a file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a list: a map with `type`, and `file` or `values`")]
pub(crate) struct RawList {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) values: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ignore_case: Option<bool>,
}

/// `maps.NAME`: keys to values, inline (`entries`) or from a file.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map: a map with `match`, and `file` or `entries`")]
pub(crate) struct RawMap {
    #[serde(rename = "match", skip_serializing_if = "Option::is_none")]
    pub(crate) matching: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) file: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) entries: Option<BTreeMap<String, Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) ignore_case: Option<bool>,
}

/// `unique_id:` of a frontend.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map with `header`, `format` and `keep_client`")]
pub(crate) struct RawUniqueId {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) header: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) keep_client: Option<bool>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of global settings")]
pub(crate) struct RawGlobal {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_connections: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker_threads: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) control_socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_socket: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stats: Option<RawStats>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_old_workers: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) worker_start_timeout: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hard_stop_after: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) close_spread: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) runtime_name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log: Option<RawLog>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) canary: Option<crate::RawCanary>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of log settings")]
pub(crate) struct RawLog {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) target: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) format: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) header: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tag: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) facility: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hostname: Option<String>,
}

/// `global.stats:`: the stats page, `/metrics` and the CSV over HTTP.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of stats settings")]
pub(crate) struct RawStats {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) refresh: Option<String>,
}

/// `defaults:`: values every frontend and backend starts from.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of default settings")]
pub(crate) struct RawDefaults {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) balance: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retries: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) redispatch: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_reuse: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_header_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_body_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forward_for: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeouts: Option<RawTimeouts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error_files: Option<BTreeMap<StatusKey, String>>,
    /// A text template, or `{ json: { key: template, … } }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log_format: Option<Value>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of timeouts")]
pub(crate) struct RawTimeouts {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connect: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) client: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) server: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_request: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_keep_alive: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tunnel: Option<String>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a frontend (a map)")]
pub(crate) struct RawFrontend {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) bind: Option<Vec<RawBind>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) accept_proxy: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tls: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) default_backend: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_connections: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_header_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_body_size: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) forward_for: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeouts: Option<RawTimeouts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) error_files: Option<BTreeMap<StatusKey, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rules: Option<Vec<RawRule>>,
    /// Each a map with one action key and `if`/`unless` (checked by `validate::policy`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_request: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_response: Option<Vec<Value>>,
    /// `track` and `reject` at accept (checked by `validate::policy::limits`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) tcp_request: Option<Vec<Value>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unique_id: Option<RawUniqueId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) log_format: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http2: Option<RawHttp2>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a map with `enabled`, `max_concurrent_streams`, `stream_window`, `connection_window`"
)]
pub(crate) struct RawHttp2 {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) enabled: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_concurrent_streams: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) stream_window: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) connection_window: Option<String>,
}

/// A `bind` entry: `127.0.0.1:80`, or `{ address: 127.0.0.1:80, accept_proxy: true }`.
#[derive(Debug)]
pub(crate) enum RawBind {
    Address(String),
    Map(RawBindMap),
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a map with `address`, `accept_proxy`, and for a Unix socket `mode`, `user`, `group`"
)]
pub(crate) struct RawBindMap {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) accept_proxy: Option<bool>,
    /// Octal permission bits, `"0660"` (a YAML integer is read as its octal digits: `660`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<RawMode>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) user: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) group: Option<String>,
}

/// A Unix socket's mode as written: `"0660"` or `660`.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum RawMode {
    Text(String),
    Number(u64),
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a rule (a map)")]
pub(crate) struct RawRule {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path_prefix: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    /// A backend's name, or `{ map, key, default }`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) backend: Option<Value>,
    #[serde(rename = "if", skip_serializing_if = "Option::is_none")]
    pub(crate) if_: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) unless: Option<Value>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a backend (a map)")]
pub(crate) struct RawBackend {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) mode: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) balance: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) retries: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) redispatch: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) http_reuse: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) timeouts: Option<RawTimeouts>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) health_check: Option<RawHealthCheck>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) servers: Option<Vec<RawServer>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of health check settings")]
pub(crate) struct RawHealthCheck {
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub(crate) kind: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) expect_status: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) interval: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) rise: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) fall: Option<i64>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a server (a map)")]
pub(crate) struct RawServer {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) weight: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) check: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) slowstart: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) max_connections: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) state: Option<String>,
}

/// An `error_files` key as written. Kept as text so that `404:` or `oops:` is a located
/// diagnostic rather than a serde type error; written back as a plain number.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Deserialize)]
#[serde(transparent)]
pub(crate) struct StatusKey(pub(crate) String);

impl Serialize for StatusKey {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self.0.parse::<u16>() {
            Ok(status) => serializer.serialize_u16(status),
            Err(_) => serializer.serialize_str(&self.0),
        }
    }
}

impl Serialize for RawBind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            RawBind::Address(address) => serializer.serialize_str(address),
            RawBind::Map(map) => map.serialize(serializer),
        }
    }
}

impl<'de> Deserialize<'de> for RawBind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(BindVisitor)
    }
}

struct BindVisitor;

impl<'de> Visitor<'de> for BindVisitor {
    type Value = RawBind;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an address such as 127.0.0.1:80, or a map with `address` and `accept_proxy`")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<RawBind, E> {
        Ok(RawBind::Address(v.to_owned()))
    }

    // A bare `80` is a plausible slip; take it as text so validation explains what is expected.
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<RawBind, E> {
        Ok(RawBind::Address(v.to_string()))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<RawBind, E> {
        Ok(RawBind::Address(v.to_string()))
    }

    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<RawBind, A::Error> {
        RawBindMap::deserialize(de::value::MapAccessDeserializer::new(map)).map(RawBind::Map)
    }
}
