//! lb-watcher's YAML as written: serde structs with `deny_unknown_fields`, values that need
//! checking kept as text or wide integers so that validation can report every problem at once,
//! each with its line and column.

use serde::Deserialize;

#[derive(Debug, Default, Deserialize)]
#[serde(
    deny_unknown_fields,
    expecting = "a map with `zookeeper`, `proxy`, `hysteresis`, `status`, `services` and `fleet`"
)]
pub(crate) struct RawConfig {
    pub(crate) zookeeper: Option<RawZookeeper>,
    pub(crate) proxy: Option<RawProxy>,
    pub(crate) hysteresis: Option<RawHysteresis>,
    pub(crate) status: Option<RawStatus>,
    pub(crate) services: Option<Vec<RawService>>,
    pub(crate) fleet: Option<RawFleet>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map with `path` and `name`")]
pub(crate) struct RawFleet {
    pub(crate) path: Option<String>,
    pub(crate) name: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map of ZooKeeper settings")]
pub(crate) struct RawZookeeper {
    pub(crate) servers: Option<Vec<String>>,
    pub(crate) session_timeout: Option<String>,
    pub(crate) chroot: Option<String>,
    pub(crate) retry_max: Option<String>,
    pub(crate) audit_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map of lb-proxy settings")]
pub(crate) struct RawProxy {
    pub(crate) base: Option<String>,
    pub(crate) config: Option<String>,
    pub(crate) control_socket: Option<String>,
    pub(crate) reload_command: Option<Vec<String>>,
    pub(crate) runtime: Option<bool>,
    pub(crate) reload_retries: Option<i64>,
    pub(crate) reload_timeout: Option<String>,
    pub(crate) drift_check: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map of hysteresis settings")]
pub(crate) struct RawHysteresis {
    pub(crate) collect: Option<String>,
    pub(crate) collect_jitter: Option<String>,
    pub(crate) hold: Option<String>,
    pub(crate) max_remove_percent: Option<i64>,
    pub(crate) min_apply_interval: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a map of status settings")]
pub(crate) struct RawStatus {
    pub(crate) listen: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a service: `backend`, `path` or `name`, `port`, …")]
pub(crate) struct RawService {
    pub(crate) backend: Option<String>,
    pub(crate) path: Option<String>,
    pub(crate) name: Option<String>,
    pub(crate) format: Option<String>,
    pub(crate) record_type: Option<String>,
    pub(crate) port: Option<i64>,
    pub(crate) check: Option<bool>,
    pub(crate) weight: Option<i64>,
    pub(crate) slowstart: Option<String>,
}
