//! HTTP/3 towards clients: a UDP frontend (`bind: "udp:…"`) where QUIC ends, with the same
//! certificate files and SNI selection as the TLS frontends, ALPN `h3`, 0-RTT when asked. Each QUIC
//! connection gets one hop connection to lb-proxy (`hop`): a PROXY v2 header saying ALPN `h3`,
//! then HTTP/2 carrying each HTTP/3 request as a stream.
//!
//! The stack is quinn + h3 over rustls with AWS-LC's crypto (docs/architecture.md, "QUIC
//! library"). QUIC connections count against `max_connections` and in the frontend's counters
//! as TLS connections do; a drain sends GOAWAY and lets the requests in flight finish.

mod connection;
mod early;
pub(crate) mod fuzz;
mod hkdf;
mod hop;
mod sockets;
mod tickets;
mod tls;
mod tracked;

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use lb_supervisor::Shutdown;
use tokio_util::task::TaskTracker;

use crate::serve::{Admission, Shared};
use crate::stats::Quic;
use sockets::Sockets;

pub(crate) use tls::QuicTls;

/// The QUIC endpoint on a frontend's UDP socket (`sockets`: with a connected socket per
/// connection). Its own server configuration only lets it take connections in: each is
/// accepted with a configuration of its own ([`server_config`]).
pub(crate) fn endpoint(socket: std::net::UdpSocket, tls: &QuicTls) -> std::io::Result<Endpoint> {
    let server = server_config(tls, tls::Chosen::default()).map_err(std::io::Error::other)?;
    let sockets = Arc::new(Sockets::new(socket)?);
    let mut config = quinn::EndpointConfig::default();
    config.max_udp_payload_size(sockets::MAX_DATAGRAM as u16).map_err(std::io::Error::other)?;
    let endpoint = quinn::Endpoint::new_with_abstract_socket(
        config,
        Some(server),
        sockets.clone(),
        Arc::new(quinn::TokioRuntime),
    )?;
    Ok(Endpoint { quinn: endpoint, sockets })
}

/// A frontend's endpoint and its sockets.
#[derive(Debug)]
pub(crate) struct Endpoint {
    quinn: quinn::Endpoint,
    sockets: Arc<Sockets>,
}

/// A connection's configuration: its own certificate resolver and ticketer, which note its
/// cipher suite and whether it resumed in `seen`; the frontend's transport settings.
fn server_config(tls: &QuicTls, seen: tls::Chosen) -> Result<quinn::ServerConfig, String> {
    let crypto = quinn::crypto::rustls::QuicServerConfig::try_from(tls.for_connection(seen.clone()))
        .map_err(|e| e.to_string())?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(early::Noted::new(crypto, seen)));
    server.transport_config(tls.transport.clone());
    Ok(server)
}

/// The most out-of-order CRYPTO data a connection holds (HAProxy's buffer size, `tune.bufsize`;
/// a ClientHello, even with post-quantum key shares, is under 4 KiB).
const CRYPTO_BUFFER: usize = 16 * 1024;

/// The transport settings of a frontend's connections, `max_streams` requests open at once
/// (`quic.max_streams`): built with the frontend's configuration, shared by its handshakes.
fn transport(max_streams: u32) -> Arc<quinn::TransportConfig> {
    let mut transport = quinn::TransportConfig::default();
    // CRYPTO data a client sends out of order is held until the gap before it fills: past
    // this much ahead of what the TLS library has read, the connection is closed with
    // CRYPTO_BUFFER_EXCEEDED (RFC 9000 §7.5). In-order data goes to rustls at once, which
    // refuses a handshake message over 64 KiB. Set here rather than left to quinn's default
    // (the same 16 KiB today) so that the bound is ours (docs/config-lb-tls.md, `quic`).
    transport.crypto_buffer_size(CRYPTO_BUFFER);
    transport.max_concurrent_bidi_streams(max_streams.into());
    // Clients open three unidirectional streams (control, QPACK encoder and decoder).
    transport.max_concurrent_uni_streams(3u32.into());
    Arc::new(transport)
}

/// What a UDP frontend's accept loop and its connections share.
#[derive(Debug)]
struct Door {
    shared: Arc<Shared>,
    frontend: usize,
    sockets: Arc<Sockets>,
    bound: Option<SocketAddr>,
    /// Handshakes under way, against `quic.retry_threshold`.
    handshaking: AtomicUsize,
    unowned_logged: AtomicBool,
    /// Its open connections, for the sweep that counts their traffic (`tracked`).
    open: tracked::Open,
}

impl Door {
    /// The connection's own connected socket towards `peer` (see `sockets`), or none (logged
    /// once) when this worker may not bind the port.
    fn adopt(&self, peer: SocketAddr, local_ip: Option<IpAddr>) -> Option<sockets::Owned> {
        match self.sockets.adopt(peer, local_ip) {
            Ok(owned) => Some(owned),
            Err(e) => {
                if !self.unowned_logged.swap(true, Ordering::Relaxed) {
                    let bind = &self.shared.config.frontends[self.frontend].bind;
                    tracing::warn!(
                        frontend = %bind,
                        "QUIC connections share the frontend's socket ({e}): across a reload, their datagrams reach either worker"
                    );
                }
                None
            }
        }
    }
}

/// Counts a handshake under way until dropped: taken by the accept loop, so that the next
/// client's check against `retry_threshold` sees it at once.
struct Handshaking(Arc<Door>);

impl Handshaking {
    fn new(door: Arc<Door>) -> Handshaking {
        door.handshaking.fetch_add(1, Ordering::Relaxed);
        Handshaking(door)
    }
}

impl Drop for Handshaking {
    fn drop(&mut self) {
        self.0.handshaking.fetch_sub(1, Ordering::Relaxed);
    }
}

/// Accepts QUIC connections until the drain, then lets the endpoint's connections finish.
///
/// A new client costs nothing but quinn's few bytes of `Incoming` until it is let in: past
/// `retry_threshold` handshakes under way, one whose address is not yet validated gets a Retry
/// packet (a spoofed source never answers it); the connection's task is spawned after that and
/// its connected socket made once the handshake completes (`connection`).
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    frontend: usize,
    endpoint: Endpoint,
    mut shutdown: Shutdown,
    tracker: TaskTracker,
) {
    let Endpoint { quinn: endpoint, sockets } = endpoint;
    let bound = endpoint.local_addr().ok();
    let settings = shared.config.frontends[frontend].quic_settings;
    let door = Arc::new(Door {
        shared: shared.clone(),
        frontend,
        sockets: sockets.clone(),
        bound,
        handshaking: AtomicUsize::new(0),
        unowned_logged: AtomicBool::new(false),
        open: tracked::Open::default(),
    });
    // Ends once the door is gone: after this loop and the last of its connections.
    tokio::spawn(tracked::sweep(Arc::downgrade(&door)));
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shutdown.draining() => break,
            i = endpoint.accept() => match i { Some(i) => i, None => break },
        };
        if !incoming.remote_address_validated()
            && door.handshaking.load(Ordering::Relaxed) >= settings.retry_threshold
            && incoming.may_retry()
        {
            shared.stats.frontend(frontend).quic(Quic::Retries, 1);
            let _ = incoming.retry();
            continue;
        }
        let Ok(permit) = shared.limit.clone().try_acquire_owned() else {
            // At max_connections: the client is told at once, rather than left to retry.
            incoming.refuse();
            continue;
        };
        let admission = Admission::new(shared.clone(), frontend, permit);
        let handshaking = Handshaking::new(door.clone());
        let task = connection::serve(door.clone(), incoming, handshaking, shutdown.clone());
        tracker.spawn(async move {
            task.await;
            drop(admission);
        });
    }
    // No new connections: the next worker reads the shared socket; those open here finish on
    // their own sockets.
    sockets.stop_listening();
    endpoint.set_server_config(None);
    let mut shutdown_stop = shutdown.clone();
    tokio::select! {
        _ = endpoint.wait_idle() => {}
        _ = shutdown_stop.stopped() => endpoint.close(0u32.into(), b"stopping"),
    }
}
