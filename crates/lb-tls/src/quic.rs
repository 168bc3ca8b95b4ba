//! HTTP/3 towards clients: a UDP frontend (`bind: "udp:…"`) where QUIC ends, with the same
//! certificate files and SNI selection as the TLS frontends, ALPN `h3`, 0-RTT off. Each QUIC
//! connection gets one hop connection to lb-proxy (`hop`): a PROXY v2 header saying ALPN `h3`,
//! then HTTP/2 carrying each HTTP/3 request as a stream.
//!
//! The stack is quinn + h3 over rustls with AWS-LC's crypto (docs/architecture.md, "QUIC
//! library"). QUIC connections count against `max_connections` and in the frontend's counters
//! as TLS connections do; a drain sends GOAWAY and lets the requests in flight finish.

pub(crate) mod fuzz;
mod hop;
mod sockets;
mod tickets;
mod tls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use lb_supervisor::Shutdown;
use tokio_util::task::TaskTracker;

use crate::proxy_header;
use crate::serve::{Admission, Shared};
use crate::stats::Failure;
use sockets::Sockets;

pub(crate) use tls::QuicTls;

/// HTTP/3 requests open at once per connection (lb-proxy's HTTP/2 default, which the hop meets).
const MAX_STREAMS: u32 = 100;

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
/// cipher suite and whether it resumed in `seen`.
fn server_config(tls: &QuicTls, seen: tls::Chosen) -> Result<quinn::ServerConfig, String> {
    let crypto =
        quinn::crypto::rustls::QuicServerConfig::try_from(tls.for_connection(seen)).map_err(|e| e.to_string())?;
    let mut server = quinn::ServerConfig::with_crypto(Arc::new(crypto));
    let mut transport = quinn::TransportConfig::default();
    transport.max_concurrent_bidi_streams(MAX_STREAMS.into());
    // Clients open three unidirectional streams (control, QPACK encoder and decoder).
    transport.max_concurrent_uni_streams(3u32.into());
    server.transport_config(Arc::new(transport));
    Ok(server)
}

/// Accepts QUIC connections until the drain, then lets the endpoint's connections finish.
pub(crate) async fn accept_loop(
    shared: Arc<Shared>,
    frontend: usize,
    endpoint: Endpoint,
    mut shutdown: Shutdown,
    tracker: TaskTracker,
) {
    let Endpoint { quinn: endpoint, sockets } = endpoint;
    let bound = endpoint.local_addr().ok();
    let mut unowned_logged = false;
    loop {
        let incoming = tokio::select! {
            biased;
            _ = shutdown.draining() => break,
            i = endpoint.accept() => match i { Some(i) => i, None => break },
        };
        let Ok(permit) = shared.limit.clone().try_acquire_owned() else {
            // At max_connections: the client is told at once, rather than left to retry.
            incoming.refuse();
            continue;
        };
        let admission = Admission::new(shared.clone(), frontend, permit);
        let local = bound.map(|b| SocketAddr::new(incoming.local_ip().unwrap_or(b.ip()), b.port()));
        let owned = match sockets.adopt(incoming.remote_address(), incoming.local_ip()) {
            Ok(owned) => Some(owned),
            Err(e) => {
                if !std::mem::replace(&mut unowned_logged, true) {
                    let bind = &shared.config.frontends[frontend].bind;
                    tracing::warn!(
                        frontend = %bind,
                        "QUIC connections share the frontend's socket ({e}): across a reload, their datagrams reach either worker"
                    );
                }
                None
            }
        };
        let task = connection(shared.clone(), frontend, incoming, local, shutdown.clone());
        tracker.spawn(async move {
            task.await;
            drop((owned, admission));
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

async fn connection(
    shared: Arc<Shared>,
    frontend: usize,
    incoming: quinn::Incoming,
    local: Option<SocketAddr>,
    mut shutdown: Shutdown,
) {
    let config = &shared.config;
    let fe = &config.frontends[frontend];
    let Some(quic) = fe.quic.as_ref() else { return };
    let stats = shared.stats.frontend(frontend);
    let started = Instant::now();
    let peer = incoming.remote_address();
    let seen = tls::Chosen::default();
    let server = match server_config(quic, seen.clone()) {
        Ok(server) => server,
        Err(e) => return tracing::warn!("QUIC configuration refused: {e}"),
    };
    let timeout = config.global.handshake_timeout;
    let handshake = async { incoming.accept_with(Arc::new(server))?.await };
    let conn = match tokio::time::timeout(timeout, handshake).await {
        Ok(Ok(conn)) => conn,
        Ok(Err(e)) => {
            let reason = e.to_string();
            stats.failed(Failure::of_reason(&reason));
            shared.handshake_log.warn("handshake failures", || {
                format!("QUIC handshake failed: client {peer} on {}: {reason}", fe.bind)
            });
            return;
        }
        Err(_) => {
            stats.failed(Failure::Timeout);
            shared.handshake_log.warn("handshake failures", || {
                format!("QUIC handshake failed: client {peer} on {}: no handshake within {timeout:?}", fe.bind)
            });
            return;
        }
    };
    let (cipher, resumed) = {
        let seen = seen.lock().unwrap_or_else(|e| e.into_inner());
        (seen.cipher, seen.resumed)
    };
    stats.handshake(resumed, "TLSv1.3", cipher);
    let sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let facts = proxy_header::QuicFacts { sni: sni.as_deref(), cipher };
    let header = proxy_header::v2_quic(peer, local, &facts);
    let hop = hop::connect(&config.backend.address, config.global.backend_connect_timeout, &header).await;
    let hop = match hop {
        Ok(hop) => hop,
        Err(why) => {
            stats.backend_failed();
            shared.backend_log.warn("backend failures", || {
                format!(
                    "backend {} {why}: closing QUIC client {peer} on {} after {} ms",
                    config.backend.address,
                    fe.bind,
                    started.elapsed().as_millis()
                )
            });
            conn.close(h3::error::Code::H3_INTERNAL_ERROR.value().try_into().unwrap_or(0u32.into()), b"");
            return;
        }
    };
    let h3_conn = h3_quinn::Connection::new(conn.clone());
    // No grease (reserved frame types before a stream's end): aioquic 1.2, a client in use,
    // then never sees the end of the response.
    let Ok(mut h3_conn) = h3::server::builder().send_grease(false).build::<_, Bytes>(h3_conn).await else { return };
    let requests = TaskTracker::new();
    let mut stop = shutdown.clone();
    let mut draining = false;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.draining(), if !draining => None,
            _ = stop.stopped() => break,
            a = h3_conn.accept() => Some(a),
        };
        match accepted {
            None => {
                draining = true;
                // GOAWAY: the client opens no more requests here, those in flight finish.
                let _ = h3_conn.shutdown(0).await;
            }
            Some(Ok(Some(resolver))) => {
                let hop = hop.clone();
                requests.spawn(async move {
                    if let Ok((request, stream)) = resolver.resolve_request().await {
                        hop::exchange(hop, request, stream).await;
                    }
                });
            }
            Some(Ok(None) | Err(_)) => break,
        }
    }
    requests.close();
    tokio::select! {
        _ = requests.wait() => {}
        _ = stop.stopped() => {}
    }
    let (sent, received) = (conn.stats().udp_tx.bytes, conn.stats().udp_rx.bytes);
    stats.received_from_client(received);
    stats.sent_to_client(sent);
    conn.close(0u32.into(), b"");
}
