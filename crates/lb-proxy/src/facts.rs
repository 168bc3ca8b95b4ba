//! What we know about a client connection: where it came from (the socket, or the PROXY header
//! that lb-tls or another load balancer put in front) and the TLS facts that header carried.

use std::net::SocketAddr;
use std::sync::OnceLock;
use std::time::{Instant, SystemTime};

pub(crate) use lb_proxy_protocol::TlsFacts;

/// The facts of one accepted connection, fixed once the PROXY header (if any) has been read.
#[derive(Debug, Clone)]
pub(crate) struct ConnFacts {
    /// The client: the PROXY header's source when there was one, else the peer address.
    /// `None` for a Unix socket peer without a PROXY header (or a PROXY `LOCAL`/`UNKNOWN`).
    pub(crate) client: Option<SocketAddr>,
    /// TLS facts from a PROXY v2 SSL TLV; `None` when the connection did not come through TLS.
    pub(crate) tls: Option<TlsFacts>,
    /// The negotiated ALPN protocol (PROXY v2 ALPN TLV), e.g. `h2` or `http/1.1`.
    pub(crate) alpn: Option<String>,
    /// The SNI host name (PROXY v2 AUTHORITY TLV).
    pub(crate) authority: Option<String>,
    /// Wall-clock accept time, for the log's accept date.
    pub(crate) accepted_at: SystemTime,
    /// Monotonic accept time, for the log's timers.
    pub(crate) accepted: Instant,
    /// The client as access-log lines write it (`ip:port`), rendered for the first line of the
    /// connection and copied into the next ones, with the address it was rendered for.
    pub(crate) log_client: OnceLock<(Option<SocketAddr>, String)>,
}

impl ConnFacts {
    /// What a PROXY header says, over what the socket said.
    pub(crate) fn take_header(&mut self, header: lb_proxy_protocol::ProxyHeader) {
        if header.client.is_some() {
            self.client = header.client;
        }
        self.tls = header.tls;
        self.alpn = header.alpn;
        self.authority = header.authority;
    }

    /// Facts of a connection with no PROXY header.
    pub(crate) fn from_socket(client: Option<SocketAddr>) -> Self {
        ConnFacts {
            client,
            tls: None,
            alpn: None,
            authority: None,
            accepted_at: SystemTime::now(),
            accepted: Instant::now(),
            log_client: OnceLock::new(),
        }
    }
}
