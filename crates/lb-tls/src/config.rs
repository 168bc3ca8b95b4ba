//! lb-tls's configuration: the typed values the terminator runs on, and [`Config::load`].
//!
//! Reading goes text → raw serde structs (`raw`, unknown keys refused) → validated, typed
//! values (`validate`), every problem located as `file:line:col: field.path: message` with
//! lb-config's location machinery. Certificates are read and TLS contexts built while loading,
//! so that `lb-tls -c` and a reload fail on a bad certificate or key, naming the file, before
//! anything serves with it. The schema is documented in `docs/config-lb-tls.md`.

mod raw;
pub(crate) mod validate;
mod write;

pub use write::{Draft, DraftFrontend, DraftTls};

#[cfg(test)]
mod tests;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use lb_config::Locations;
use lb_supervisor::{ListenAddr, Supervision};

use crate::context::Acceptor;
use crate::tickets::TicketStore;
use crate::Error;

/// A loaded, validated configuration with its TLS contexts built.
#[derive(Debug)]
pub struct Config {
    pub global: Global,
    pub backend: Backend,
    pub frontends: Vec<Frontend>,
    /// The session-ticket keys every context uses (`ticket_key_files`, else the master's).
    pub(crate) tickets: Arc<TicketStore>,
    /// Problems that do not stop the service (an unreadable PEM in a certificate directory, an
    /// expired certificate), one line each, naming the file.
    pub warnings: Vec<String>,
}

/// `global:`.
#[derive(Debug, Clone)]
pub struct Global {
    /// What lb-supervisor reads: the control socket (required), the runtime socket and TCP
    /// address for `show stat`, `show info` (`None`: none; lbctl reaches the same commands
    /// through the control socket), user and group, worker threads, reload limits.
    pub supervision: Supervision,
    /// Where /metrics is served (loopback only; `None`: not served).
    pub metrics_address: Option<SocketAddr>,
    /// Client connections at once, over all frontends; at the limit nothing more is accepted.
    pub max_connections: usize,
    /// The listen backlog each worker sets on its sockets (`None`: the master's, 4096).
    pub backlog: Option<i32>,
    /// TCP keepalive idle time on client connections (`None`: off).
    pub tcp_keepalive: Option<Duration>,
    pub handshake_timeout: Duration,
    pub backend_connect_timeout: Duration,
    /// Handshake-failure and backend-failure lines logged per second at most.
    pub log_rate: u32,
    /// A new session-ticket key every this long (keys the master makes).
    pub ticket_key_rotation: Duration,
    /// How long a ticket (or a cached session) resumes; a replaced key still decrypts this long.
    pub ticket_lifetime: Duration,
    /// Ticket keys shared with other instances, the first encrypting (empty: the master's).
    pub ticket_key_files: Vec<PathBuf>,
}

/// Where plaintext goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
}

impl std::fmt::Display for BackendAddr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BackendAddr::Tcp(a) => write!(f, "{a}"),
            BackendAddr::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

/// A setting's words as the file spells them: what the reader accepts and the writer writes.
pub(crate) struct Words<T: 'static>(&'static [(&'static str, T)]);

impl<T: Copy + PartialEq> Words<T> {
    /// The value `word` names (exactly as spelt), if any.
    pub(crate) fn value(&self, word: &str) -> Option<T> {
        self.0.iter().find(|(w, _)| *w == word).map(|(_, v)| *v)
    }

    pub(crate) fn word(&self, value: T) -> Option<&'static str> {
        self.0.iter().find(|(_, v)| *v == value).map(|(w, _)| *w)
    }

    /// The accepted words, for an error: `a, b or c`.
    pub(crate) fn expected(&self) -> String {
        let words: Vec<&str> = self.0.iter().map(|(w, _)| *w).collect();
        match words.split_last() {
            Some((last, [])) => (*last).to_owned(),
            Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
            None => String::new(),
        }
    }
}

/// The PROXY header written to the backend before the plaintext.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteProxy {
    /// Binary v2 with the TLS facts as TLVs (ALPN, AUTHORITY, SSL).
    V2,
    /// Text v1: addresses only.
    V1,
    None,
}

impl WriteProxy {
    pub(crate) const WORDS: Words<WriteProxy> =
        Words(&[("v2", WriteProxy::V2), ("v1", WriteProxy::V1), ("none", WriteProxy::None)]);
}

/// `backend:`.
#[derive(Debug, Clone)]
pub struct Backend {
    pub address: BackendAddr,
    pub write_proxy: WriteProxy,
    /// Client connections go as streams of a few multiplexed hop connections (one per worker
    /// thread) instead of one connection each (`lb_supervisor::hop`; lb-proxy's
    /// `accept_proxy` bind takes both).
    pub multiplex: bool,
}

/// TLS protocol versions, oldest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Protocol {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl Protocol {
    pub(crate) const WORDS: Words<Protocol> = Words(&[
        ("TLSv1.0", Protocol::Tls10),
        ("TLSv1.1", Protocol::Tls11),
        ("TLSv1.2", Protocol::Tls12),
        ("TLSv1.3", Protocol::Tls13),
    ]);
}

/// Whether clients present a certificate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCert {
    None,
    /// Asked for; a client without one is served, a certificate that does not verify is refused.
    Optional,
    Required,
}

impl ClientCert {
    pub(crate) const WORDS: Words<ClientCert> =
        Words(&[("none", ClientCert::None), ("optional", ClientCert::Optional), ("required", ClientCert::Required)]);
}

/// One certificate entry: a PEM file with the key and chain, and its OCSP response file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertSource {
    pub pem: PathBuf,
    /// The DER OCSP response to staple; `None`: `<pem>.ocsp` when that file exists.
    pub ocsp: Option<PathBuf>,
}

/// The TLS settings of one frontend (the global ones, with the frontend's own on top).
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub certificates: Vec<CertSource>,
    pub cert_dirs: Vec<PathBuf>,
    pub protocols: Vec<Protocol>,
    pub ciphers: String,
    pub ciphersuites: String,
    pub prefer_server_ciphers: bool,
    pub ecdh_curves: Option<String>,
    pub alpn_protocols: Vec<String>,
    pub sni_nomatch_abort: bool,
    pub client_cert: ClientCert,
    pub client_ca: Option<PathBuf>,
    pub session_tickets: bool,
    /// Sessions kept for TLS 1.2 clients that resume by session ID instead of a ticket (per
    /// worker; 0: no cache).
    pub session_cache_size: usize,
}

/// One listening address and how it terminates TLS.
#[derive(Debug)]
pub struct Frontend {
    pub bind: ListenAddr,
    /// Read a PROXY header (v1 or v2) sent by a load balancer in front, before the handshake,
    /// and take the client address from it.
    pub proxy_proxy: bool,
    pub tls: TlsSettings,
    pub(crate) acceptor: Arc<Acceptor>,
    /// QUIC's TLS, on a UDP frontend (`bind: "udp:…"`).
    pub(crate) quic: Option<Arc<crate::quic::QuicTls>>,
    /// A UDP frontend's `quic:` settings (the defaults when not written).
    pub quic_settings: QuicSettings,
}

/// A UDP frontend's QUIC settings (`quic:`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QuicSettings {
    /// Early data (0-RTT) taken on resumed connections, for GET, HEAD and OPTIONS only.
    pub zero_rtt: bool,
    /// QUIC handshakes under way (in this worker, on this frontend) past which a new client's
    /// address is checked with a Retry packet before anything is kept for it (0: always).
    pub retry_threshold: usize,
    /// Requests open at once per QUIC connection.
    pub max_streams: u32,
}

impl Default for QuicSettings {
    fn default() -> QuicSettings {
        // HAProxy's tune.quic.retry-threshold and tune.quic.frontend.max-streams-bidi.
        QuicSettings { zero_rtt: false, retry_threshold: 100, max_streams: 100 }
    }
}

impl Config {
    /// Reads and validates the file at `path`, reads every certificate and builds the TLS
    /// contexts. Relative paths in it are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
        let base = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf));
        let base = base.unwrap_or_else(|| PathBuf::from("."));
        Config::parse_in(&text, &path.display().to_string(), &base)
    }

    /// Parses configuration text; `file_name` is only used in diagnostics, relative paths are
    /// taken from `base`.
    pub fn parse_in(text: &str, file_name: &str, base: &Path) -> Result<Config, Error> {
        let locations = Locations::scan(text);
        let raw: raw::RawConfig = serde_yaml::from_str(text)
            .map_err(|e| Error::Invalid { diagnostics: lb_config::serde_diagnostics(&e, file_name, &locations) })?;
        validate::validate(&raw, file_name, &locations, base).map_err(|diagnostics| Error::Invalid { diagnostics })
    }

    /// Every address the master binds: the frontends in configuration order, then /metrics'.
    pub fn listen_addrs(&self) -> Vec<ListenAddr> {
        let metrics = self.global.metrics_address.map(ListenAddr::Tcp);
        self.frontends.iter().map(|f| f.bind.clone()).chain(metrics).collect()
    }
}
