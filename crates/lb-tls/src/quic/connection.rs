//! One QUIC connection: its handshake (counted, failures by reason), its connected socket once
//! the handshake completes, the hop to lb-proxy and its HTTP/3 requests; and the client's moves
//! (migration, NAT rebinding): quinn finds the connection by its ID whatever address a datagram
//! comes from (those from a new address arrive on the shared socket), and the client seen on a
//! new address gets a connected socket there, so that its datagrams still reach this worker
//! once a reload has made it stop reading the shared socket.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderValue, Method};
use lb_supervisor::Shutdown;
use tokio_util::task::TaskTracker;

use super::sockets::Owned;
use super::tracked::{Home, Registered};
use super::{hop, server_config, tls, Door, Handshaking};
use crate::proxy_header;
use crate::stats::{Failure, Quic};

/// The least time a drained connection waits for its GOAWAY to arrive before it closes (four
/// round trips when longer).
const LINGER: Duration = Duration::from_millis(250);

/// The connection's task: its opening (handshake, hop, h3) is boxed and freed once done, so that
/// the task an idle connection keeps is only the request loop's (the opening's futures, the
/// `Incoming` among them, would otherwise size it: 14 KiB against 4.5; docs/benchmarks.md,
/// "Memory per idle QUIC connection").
pub(super) fn serve(
    door: Arc<Door>,
    incoming: quinn::Incoming,
    handshaking: Handshaking,
    shutdown: Shutdown,
) -> impl std::future::Future<Output = ()> + Send {
    let opening = Box::pin(open(door.clone(), incoming, handshaking, shutdown));
    async move {
        let opened = {
            let opening = opening;
            opening.await
        };
        if let Some(opened) = opened {
            serve_requests(door, opened).await;
        }
    }
}

/// An established connection, its hop and its h3 connection, ready for requests.
struct Opened {
    conn: quinn::Connection,
    /// Boxed: large, and moved from `open` to `requests` (each move would otherwise leave a
    /// copy's room in the task).
    h3_conn: Box<h3::server::Connection<h3_quinn::Connection, Bytes>>,
    hop: Arc<hop::Line>,
    home: Home,
    local_ip: Option<IpAddr>,
    /// Until the handshake ends, when requests came in early data.
    early: Option<quinn::ZeroRttAccepted>,
    shutdown: Shutdown,
}

async fn open(
    door: Arc<Door>,
    incoming: quinn::Incoming,
    handshaking: Handshaking,
    mut shutdown: Shutdown,
) -> Option<Opened> {
    let shared = &door.shared;
    let config = &shared.config;
    let fe = &config.frontends[door.frontend];
    let quic = fe.quic.as_ref()?;
    let stats = shared.stats.frontend(door.frontend);
    let started = Instant::now();
    let peer = incoming.remote_address();
    let local_ip = incoming.local_ip();
    let local = door.bound.map(|b| SocketAddr::new(local_ip.unwrap_or(b.ip()), b.port()));
    let seen = tls::Chosen::default();
    let server = match server_config(quic, seen.clone()) {
        Ok(server) => server,
        Err(e) => {
            tracing::warn!("QUIC configuration refused: {e}");
            return None;
        }
    };
    let timeout = config.global.handshake_timeout;
    let zero_rtt = fe.quic_settings.zero_rtt;
    let handshake = async {
        let mut connecting = incoming.accept_with(Arc::new(server))?;
        // Once the ClientHello is read, rustls has said whether it takes early data; if so, the
        // requests may start now (0.5-RTT), and the handshake ends later (`early`).
        if zero_rtt && connecting.handshake_data().await.is_ok() && seen_now(&seen).early_accepted {
            match connecting.into_0rtt() {
                Ok((conn, done)) => return Ok((conn, Some(done))),
                Err(connecting) => return connecting.await.map(|conn| (conn, None)),
            }
        }
        connecting.await.map(|conn| (conn, None))
    };
    let (result, early_home) = handshake_until(handshake, timeout, &door, (peer, local_ip), &mut shutdown).await;
    let (conn, early) = match result {
        Some(Ok(conn)) => conn,
        Some(Err(e)) => {
            let sni_refused = seen_now(&seen).sni_refused;
            stats.failed(if sni_refused { Failure::Sni } else { failure(&e) });
            shared
                .handshake_log
                .warn("handshake failures", || format!("QUIC handshake failed: client {peer} on {}: {e}", fe.bind));
            return None;
        }
        None => {
            stats.failed(Failure::Timeout);
            shared.handshake_log.warn("handshake failures", || {
                format!("QUIC handshake failed: client {peer} on {}: no handshake within {timeout:?}", fe.bind)
            });
            return None;
        }
    };
    drop(handshaking);
    let owned = early_home.unwrap_or_else(|| door.adopt(conn.remote_address(), local_ip));
    let home = Home { address: conn.remote_address(), owned };
    let (cipher, resumed) = {
        let seen = seen_now(&seen);
        if seen.early_accepted {
            stats.quic(Quic::ZeroRttAccepted, 1);
        } else if seen.early_offered {
            stats.quic(Quic::ZeroRttRefused, 1);
        }
        (seen.cipher, seen.resumed)
    };
    stats.handshake(resumed, "TLSv1.3", cipher);
    let sni = conn
        .handshake_data()
        .and_then(|d| d.downcast::<quinn::crypto::rustls::HandshakeData>().ok())
        .and_then(|d| d.server_name);
    let facts = proxy_header::QuicFacts { sni: sni.as_deref(), cipher };
    let header = proxy_header::v2_quic(peer, local, &facts);
    let hop = match hop::Line::open(shared.clone(), door.frontend, header).await {
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
            return None;
        }
    };
    let h3_conn = h3_quinn::Connection::new(conn.clone());
    // No grease (reserved frame types before a stream's end): aioquic 1.2, a client in use,
    // then never sees the end of the response.
    let h3_conn = Box::new(h3::server::builder().send_grease(false).build::<_, Bytes>(h3_conn).await.ok()?);
    Some(Opened { conn, h3_conn, hop, home, local_ip, early, shutdown })
}

/// The connection's requests until it ends or the worker stops; GOAWAY at the drain.
async fn serve_requests(door: Arc<Door>, opened: Opened) {
    let Opened { conn, mut h3_conn, hop, home, local_ip, mut early, mut shutdown } = opened;
    // Its traffic counted and its client followed once a second from now on (`tracked`).
    let registered = Registered::new(door.clone(), conn.clone(), home, local_ip);
    let timeout = door.shared.config.global.handshake_timeout;
    let requests = TaskTracker::new();
    let mut stop = shutdown.clone();
    let mut draining = false;
    let early_until = tokio::time::Instant::now() + timeout;
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.draining(), if !draining => None,
            _ = stop.stopped() => break,
            a = h3_conn.accept() => Some(a),
            // After the requests: one that arrives with the handshake's end counts as early.
            // (On a server this resolves when the handshake ends, well or not; a failed one
            // ends the connection, which the next accept sees.)
            _ = async { if let Some(done) = early.as_mut() { done.await; } }, if early.is_some() => {
                early = None;
                continue;
            }
            _ = tokio::time::sleep_until(early_until), if early.is_some() => break,
        };
        registered.follow();
        match accepted {
            None => {
                draining = true;
                // GOAWAY: the client opens no more requests here, those in flight finish.
                let _ = h3_conn.shutdown(0).await;
            }
            Some(Ok(Some(resolver))) => {
                let hop = hop.clone();
                // Received before the handshake completed: in early data, which may be replayed.
                let in_early_data = early.is_some();
                // Boxed: tokio moves a task's future whole at its spawn and at its end (a few
                // KiB here), a box as a pointer.
                requests.spawn(Box::pin(async move {
                    if let Ok((mut request, stream)) = resolver.resolve_request().await {
                        if in_early_data {
                            if !matches!(*request.method(), Method::GET | Method::HEAD | Method::OPTIONS) {
                                return hop::too_early(stream).await;
                            }
                            // RFC 8470 §5.1: added when absent, never removed.
                            request.headers_mut().entry("early-data").or_insert(HeaderValue::from_static("1"));
                        }
                        hop::exchange(hop, request, stream).await;
                    }
                }));
            }
            Some(Ok(None) | Err(_)) => break,
        }
    }
    requests.close();
    tokio::select! {
        _ = requests.wait() => {}
        _ = stop.stopped() => {}
    }
    if draining {
        // Closing at once would drop the GOAWAY if still unsent or lost: the client would see
        // the connection end with no word of which requests were not taken, and could not
        // retry them safely. A client that heard it closes first.
        let linger = (conn.rtt() * 4).max(LINGER);
        tokio::select! {
            _ = conn.closed() => {}
            _ = tokio::time::sleep(linger) => {}
            _ = stop.stopped() => {}
        }
    }
    // Its last traffic counted as it leaves the open connections.
    drop(registered);
    conn.close(0u32.into(), b"");
}

fn seen_now(seen: &tls::Chosen) -> std::sync::MutexGuard<'_, tls::Seen> {
    seen.lock().unwrap_or_else(|e| e.into_inner())
}

/// The handshake's end within `timeout` (`None`: not within it). A handshake still under way
/// when the worker drains gets its connected socket then (`Some` second): the shared socket is
/// the next worker's from now on, and the rest of the handshake must reach this one.
async fn handshake_until<T>(
    handshake: impl std::future::Future<Output = Result<T, quinn::ConnectionError>>,
    timeout: Duration,
    door: &Door,
    (peer, local_ip): (SocketAddr, Option<IpAddr>),
    shutdown: &mut Shutdown,
) -> (Option<Result<T, quinn::ConnectionError>>, Option<Option<Owned>>) {
    let handshake = tokio::time::timeout(timeout, handshake);
    tokio::pin!(handshake);
    let mut early = None;
    loop {
        tokio::select! {
            result = &mut handshake => return (result.ok(), early),
            _ = shutdown.draining(), if early.is_none() => early = Some(door.adopt(peer, local_ip)),
        }
    }
}

/// The kind of a failed QUIC handshake: the TLS alert carried in a CRYPTO_ERROR (RFC 9001
/// §4.8) when there is one, whoever sent it.
fn failure(e: &quinn::ConnectionError) -> Failure {
    use quinn::ConnectionError as E;
    let (code, by_peer) = match e {
        E::TimedOut => return Failure::Timeout,
        E::TransportError(t) => (t.code, false),
        E::ConnectionClosed(c) => (c.error_code, true),
        E::ApplicationClosed(_) | E::Reset | E::LocallyClosed => return Failure::Closed,
        E::VersionMismatch | E::CidsExhausted => return Failure::Other,
    };
    match u64::from(code).checked_sub(0x100).filter(|alert| *alert < 0x100) {
        // protocol_version
        Some(70) => Failure::Protocol,
        // handshake_failure, insufficient_security: nothing in common
        Some(40 | 71) => Failure::Cipher,
        // bad_certificate … certificate_unknown, unknown_ca, certificate_required
        Some(42..=46 | 48 | 116) => Failure::Certificate,
        // unrecognized_name
        Some(112) => Failure::Sni,
        Some(_) => Failure::Other,
        None if by_peer => Failure::Closed,
        None => Failure::Other,
    }
}
