//! The typed configuration: what lb-proxy runs on once a file has been parsed and validated.
//!
//! Every value here is resolved: `defaults` have been merged into each frontend and backend,
//! durations are `Duration`, addresses are parsed, error files are read. Nothing downstream
//! re-checks what validation already guaranteed (names unique, referenced backends exist, modes
//! agree between a frontend and its backends).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// A whole lb-proxy configuration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    pub global: Global,
    pub frontends: Vec<Frontend>,
    pub backends: Vec<Backend>,
    /// Named conditions, lists and maps, shared by every frontend's rules.
    pub policy: Policy,
    /// Limit tables (`tables:`), shared by every frontend, in name order.
    pub tables: Vec<crate::table::Table>,
}

/// Process-wide settings (`global:`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Global {
    /// Connections accepted at once over all frontends; at the limit we stop accepting.
    pub max_connections: usize,
    /// What lb-supervisor reads: control and runtime sockets (the runtime socket always set,
    /// mode 0600; the TCP address loopback only), user and group, worker threads, reload limits.
    pub supervision: Supervision,
    pub log: Log,
    /// The stats page, `/metrics` and the CSV over HTTP; `None`: off.
    pub stats: Option<Stats>,
    /// Reloads: a draining worker closes its idle keep-alive connections spread over this long,
    /// so that their clients do not all reconnect at once.
    pub close_spread: Duration,
    /// `Name:` in `show info`: `lb-proxy` by default; `HAProxy` for tooling that insists on it.
    pub runtime_name: String,
}

/// `global.stats`: an HTTP listener of each worker serving the stats page (`/`), Prometheus
/// metrics (`/metrics`) and HAProxy's CSV (`/;csv`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    /// A loopback or internal address: the page shows every server.
    pub address: SocketAddr,
    /// How often the page reloads itself.
    pub refresh: Duration,
}

/// Where and how access logs are written (`global.log`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Log {
    pub target: LogTarget,
    pub format: LogFormat,
    /// What goes in front of each message (HAProxy's `log … format`).
    pub header: LogHeader,
    /// The syslog program tag; `haproxy` by default so that existing log tooling matches.
    pub tag: String,
    pub facility: Facility,
    /// The host name written in each line; `None` means the machine's host name.
    pub hostname: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogTarget {
    /// One line per request on standard output (the default).
    Stdout,
    /// Syslog datagrams to a Unix socket such as `/dev/log` (written `unix:/dev/log`).
    SyslogUnix(PathBuf),
    /// Syslog datagrams over UDP (written `udp:127.0.0.1:514`).
    SyslogUdp(SocketAddr),
    /// No access log at all.
    None,
}

/// The header in front of each log message, as HAProxy's `log … format` names them. On
/// standard output the `<PRI>` of the syslog forms is left out (the line reads as a syslog
/// daemon writes it to a file, which is what `halog` parses); syslog targets get it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogHeader {
    /// `Nov 24 16:26:59 host tag[pid]: ` (the default for the haproxy format).
    Rfc3164,
    /// `1 2026-11-24T16:26:59.123+00:00 host tag pid - - `.
    Rfc5424,
    /// `2026-11-24T16:26:59.123+00:00 host tag[pid]: `.
    Iso,
    /// The message alone (the default for JSON).
    Raw,
    /// `<PRI>` and the message (systemd's journal reads the priority from it on stdout).
    Short,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogFormat {
    /// HAProxy's `option httplog` (and `option tcplog` in TCP mode).
    Haproxy,
    /// One JSON object per line with the same facts plus the TLS ones.
    Json,
}

/// Syslog facility, as numbered by RFC 5424.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Facility {
    Kern = 0,
    User = 1,
    Daemon = 3,
    Local0 = 16,
    Local1 = 17,
    Local2 = 18,
    Local3 = 19,
    Local4 = 20,
    Local5 = 21,
    Local6 = 22,
    Local7 = 23,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Http,
    Tcp,
}

/// Every timeout, resolved from `defaults.timeouts` and the section's own overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timeouts {
    /// TCP connect to a server.
    pub connect: Duration,
    /// Client inactivity while a request (or, in TCP mode, data) is expected from it.
    pub client: Duration,
    /// Server inactivity: waiting for response headers or for body data (504 before headers).
    pub server: Duration,
    /// Time allowed to receive a complete request header section (408).
    pub http_request: Duration,
    /// Time an idle keep-alive client connection is kept waiting for its next request.
    pub http_keep_alive: Duration,
    /// Health check connect + response.
    pub check: Duration,
    /// Inactivity, both ways, of a connection upgraded into a tunnel (WebSocket): HAProxy's
    /// `timeout tunnel`.
    pub tunnel: Duration,
}

pub use lb_supervisor::{ListenAddr, Supervision};

use crate::policy::{AccessLogFormat, Guard, Policy, RequestRule, ResponseRule, RouteTarget, UniqueId};

/// One `bind` entry of a frontend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub address: ListenAddr,
    /// A PROXY protocol header (v1 or v2) is required on every connection to this bind.
    pub accept_proxy: bool,
    /// A Unix socket's permission bits, owner and group (`None`: the defaults, 0660 and
    /// `global.user`/`global.group`); always `None` for TCP.
    pub mode: Option<u32>,
    pub user: Option<String>,
    pub group: Option<String>,
}

/// HTTP/2 towards clients on an HTTP frontend: after ALPN `h2` (lb-tls says so in the PROXY
/// header) or, on a plain listener, when a connection opens with HTTP/2's preface.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Http2 {
    pub enabled: bool,
    /// Streams a client may have open at once on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).
    pub max_concurrent_streams: u32,
    /// Flow-control window of each stream, and of the whole connection, in bytes.
    pub stream_window: u32,
    pub connection_window: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frontend {
    pub name: String,
    pub binds: Vec<Bind>,
    pub mode: Mode,
    /// Connections reach this frontend through TLS (lb-tls in front): `X-Forwarded-Proto: https`.
    pub tls: bool,
    pub default_backend: Option<String>,
    /// Checked in order; the first match chooses the backend, else `default_backend`.
    pub rules: Vec<Rule>,
    /// `http_request` rules, in order, before routing (HAProxy's `http-request`).
    pub http_request: Vec<RequestRule>,
    /// `http_response` rules, in order, on each response (HAProxy's `http-response`).
    pub http_response: Vec<ResponseRule>,
    /// `tcp_request` rules, in order, at accept (HAProxy's `tcp-request connection`).
    pub tcp_request: Vec<crate::table::ConnectionRule>,
    pub unique_id: Option<UniqueId>,
    /// The access-log line of this frontend; `None`: `global.log.format`.
    pub log_format: Option<AccessLogFormat>,
    /// Connections accepted at once on this frontend; `None`: only the global limit applies.
    pub max_connections: Option<usize>,
    pub timeouts: Timeouts,
    /// Largest request header section accepted, in bytes (HTTP mode).
    pub max_header_size: usize,
    /// Largest request body accepted, in bytes (HTTP mode): a larger one is answered 413;
    /// `None`: no limit (bodies stream to the server whatever their size).
    pub max_body_size: Option<usize>,
    /// Add `X-Forwarded-For` and `X-Forwarded-Proto` to requests (HTTP mode).
    pub forward_for: bool,
    /// The response sent for each error status lb-proxy itself produces.
    pub error_pages: ErrorPages,
    pub http2: Http2,
}

/// A routing rule (HAProxy's `use_backend`): every condition given must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Request path starts with this.
    pub path_prefix: Option<String>,
    /// Host header (port removed) equals this, case-insensitively.
    pub host: Option<String>,
    /// `if:` or `unless:`.
    pub guard: Option<Guard>,
    pub backend: RouteTarget,
}

/// Responses for the statuses lb-proxy generates: 400, 403, 408, 413, 500, 502, 503, 504.
/// Every one is present: those not configured hold the built-in JSON default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPages {
    pub pages: BTreeMap<u16, ErrorPage>,
}

/// A complete response. Loaded from an HAProxy-style errorfile (a raw HTTP/1.x response:
/// status line, headers, blank line, body) or the built-in default.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorPage {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
    /// The file it came from, `None` for the built-in default.
    pub source: Option<PathBuf>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Balance {
    /// Fewest current connections, weighted (the default: API requests vary wildly in length).
    LeastConn,
    /// Weighted round robin.
    RoundRobin,
}

/// How server connections are shared between client connections (HTTP mode).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HttpReuse {
    /// One server connection per client connection (the default: API servers may cache
    /// per-connection facts such as the forwarded address).
    Never,
    /// Idle server connections are pooled and reused by any client connection.
    Safe,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backend {
    pub name: String,
    pub mode: Mode,
    pub balance: Balance,
    pub servers: Vec<Server>,
    /// How servers with `check: true` are checked.
    pub health_check: HealthCheck,
    pub timeouts: Timeouts,
    /// Extra connect attempts after a failed connect.
    pub retries: u32,
    /// Retries go to another server when one is usable.
    pub redispatch: bool,
    pub http_reuse: HttpReuse,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HealthCheck {
    pub kind: CheckKind,
    pub interval: Duration,
    /// Consecutive successes that bring a down server up.
    pub rise: u32,
    /// Consecutive failures that bring an up server down.
    pub fall: u32,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckKind {
    /// A TCP connect that succeeds within `timeouts.check`.
    Tcp,
    /// An HTTP request whose response status is `expect_status`.
    Http { method: String, path: String, host: Option<String>, expect_status: u16 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Server {
    pub name: String,
    pub address: SocketAddr,
    /// 0 to 256; 0 takes no new traffic.
    pub weight: u32,
    pub check: bool,
    /// After coming up, the weight ramps from almost nothing to `weight` over this long.
    pub slowstart: Option<Duration>,
    pub max_connections: Option<usize>,
    pub state: AdminState,
}

/// The administrative state a server starts in (the runtime API can change it later).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdminState {
    /// Takes traffic.
    Ready,
    /// Keeps its current connections, gets no new ones.
    Drain,
    /// Gets nothing and is not checked.
    Maint,
}

impl Config {
    /// The frontend named `name`.
    pub fn frontend(&self, name: &str) -> Option<&Frontend> {
        self.frontends.iter().find(|f| f.name == name)
    }

    /// The backend named `name`.
    pub fn backend(&self, name: &str) -> Option<&Backend> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// Every listening address of every frontend, in order, without repeats.
    pub fn listen_addrs(&self) -> Vec<ListenAddr> {
        let mut seen = Vec::new();
        for bind in self.frontends.iter().flat_map(|f| &f.binds) {
            if !seen.contains(&bind.address) {
                seen.push(bind.address.clone());
            }
        }
        // The stats listener is a socket like the others: the master keeps it across reloads.
        if let Some(stats) = &self.global.stats {
            let address = ListenAddr::Tcp(stats.address);
            if !seen.contains(&address) {
                seen.push(address);
            }
        }
        seen
    }
}
