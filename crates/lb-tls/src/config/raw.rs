//! serde structs mirroring the YAML, exactly as written: every field optional, unknown keys
//! refused, no interpretation (that is validation's job, which knows where each value sits).
//! `write` fills the same structs to write a configuration out, so the two cannot drift apart.

use serde::{Deserialize, Serialize};

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawConfig {
    pub(crate) global: Option<RawGlobal>,
    pub(crate) tls: Option<RawTls>,
    pub(crate) backend: Option<RawBackend>,
    pub(crate) frontends: Option<Vec<RawFrontend>>,
}

#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawGlobal {
    pub(crate) control_socket: Option<String>,
    pub(crate) runtime_socket: Option<String>,
    pub(crate) runtime_address: Option<String>,
    pub(crate) metrics_address: Option<String>,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) worker_threads: Option<i64>,
    pub(crate) max_old_workers: Option<i64>,
    pub(crate) hard_stop_after: Option<String>,
    pub(crate) worker_start_timeout: Option<String>,
    pub(crate) max_connections: Option<i64>,
    pub(crate) backlog: Option<i64>,
    pub(crate) tcp_keepalive: Option<String>,
    pub(crate) handshake_timeout: Option<String>,
    pub(crate) backend_connect_timeout: Option<String>,
    pub(crate) log_rate: Option<i64>,
    pub(crate) ticket_key_rotation: Option<String>,
    pub(crate) ticket_lifetime: Option<String>,
    pub(crate) ticket_key_files: Option<Vec<String>>,
    pub(crate) canary: Option<lb_config::RawCanary>,
}

/// TLS settings: under `tls:` for every frontend, and under a frontend's own `tls:` for
/// that frontend (each key given there replaces the global one).
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawTls {
    pub(crate) certificates: Option<Vec<RawCertificate>>,
    pub(crate) cert_dirs: Option<Vec<String>>,
    pub(crate) protocols: Option<Vec<String>>,
    pub(crate) ciphers: Option<String>,
    pub(crate) ciphersuites: Option<String>,
    pub(crate) prefer_server_ciphers: Option<bool>,
    pub(crate) ecdh_curves: Option<String>,
    pub(crate) alpn_protocols: Option<Vec<String>>,
    pub(crate) sni_nomatch_abort: Option<bool>,
    pub(crate) client_cert: Option<String>,
    pub(crate) client_ca: Option<String>,
    pub(crate) session_tickets: Option<bool>,
    pub(crate) session_cache_size: Option<i64>,
}

/// `- /path/cert.pem` or `- { pem: /path/cert.pem, ocsp: /path/cert.ocsp }`.
#[derive(Debug, Deserialize, Serialize)]
#[serde(untagged)]
pub(crate) enum RawCertificate {
    Path(String),
    Full(RawCertificateFull),
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawCertificateFull {
    pub(crate) pem: String,
    pub(crate) ocsp: Option<String>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawBackend {
    pub(crate) address: Option<String>,
    pub(crate) write_proxy: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) multiplex: Option<bool>,
}

#[derive(Debug, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawFrontend {
    pub(crate) bind: Option<String>,
    pub(crate) proxy_proxy: Option<bool>,
    pub(crate) tls: Option<RawTls>,
    pub(crate) quic: Option<RawQuic>,
}

/// A UDP frontend's `quic:`.
#[derive(Debug, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RawQuic {
    pub(crate) zero_rtt: Option<bool>,
    pub(crate) retry_threshold: Option<i64>,
    pub(crate) max_streams: Option<i64>,
}
