//! Upgraded connections (WebSocket): after a server's `101 Switching Protocols` the client and
//! server connections become one two-way tunnel of bytes, as HAProxy makes them.
//!
//! The request handler answers the 101 and leaves a [`Pending`] tunnel in the connection's
//! context; once hyper has written the 101 and handed the client socket over, the connection's
//! own task runs the tunnel (so the connection stays counted, tracked and drained like any
//! other). A tunnel ends when both directions have ended (each end-of-file is passed on as a
//! half-close), on an error, after `timeouts.tunnel` without a byte either way, or at a hard
//! stop; then its one log line is written: status 101, the whole duration, every byte.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::Activity;
use super::forward::Exchange;
use lb_supervisor::Shutdown;

/// A tunnel agreed on (the server said 101), waiting for hyper to hand over both sockets.
#[derive(Debug)]
pub(crate) struct Pending {
    pub(crate) exchange: Exchange,
    pub(crate) client: OnUpgrade,
    pub(crate) server: OnUpgrade,
    pub(crate) timeout: Duration,
}

/// Whether an upgrade a request asked for (the `Upgrade` value `strip_hop_by_hop` gave back) is
/// passed on: HTTP/1.1 only, never `h2c` (HTTP/2 is spoken to clients, not tunnelled to
/// servers), and never on a request with a body.
pub(crate) fn passes(
    version: http::Version,
    headers: &http::HeaderMap,
    has_te: bool,
    upgrade: &http::HeaderValue,
) -> bool {
    let h2c = upgrade.as_bytes().split(|&b| b == b',').any(|p| p.trim_ascii().eq_ignore_ascii_case(b"h2c"));
    let has_body = has_te || headers.get(http::header::CONTENT_LENGTH).is_some_and(|v| v.as_bytes() != b"0");
    version == http::Version::HTTP_11 && !h2c && !has_body
}

/// Runs the tunnel to its end and logs it.
/// Tunnels are HTTP/1 only: their line goes out through the connection's `activity`, once the
/// client socket is closed (so that its byte count is final).
pub(crate) async fn run(pending: Pending, activity: &Activity, mut stop: Shutdown) {
    let Pending { mut exchange, client, server, timeout } = pending;
    activity.tunnel_began();
    let (client, server) = match tokio::try_join!(client, server) {
        Ok(both) => both,
        Err(e) => {
            tracing::debug!(frontend = exchange.ctx.fe.name(), "upgrade failed: {e}");
            exchange.termination = *b"SD";
            activity.log_when_sent(Box::new(exchange));
            return;
        }
    };
    let started = Instant::now();
    let last = AtomicU64::new(0);
    let mut client = Side::new(TokioIo::new(client), started, &last);
    let mut server = Side::new(TokioIo::new(server), started, &last);
    let ending = {
        let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
        tokio::pin!(copy);
        let idle = tokio::time::sleep(timeout);
        tokio::pin!(idle);
        loop {
            tokio::select! {
                r = &mut copy => break r.err(),
                () = &mut idle => {
                    // Data moved since the timer was set: look again at the new deadline.
                    let quiet_since = started + Duration::from_millis(last.load(Ordering::Relaxed));
                    if quiet_since.elapsed() >= timeout {
                        exchange.termination = *b"cD";
                        break None;
                    }
                    idle.as_mut().reset((quiet_since + timeout).into());
                }
                () = stop.stopped() => {
                    exchange.termination = *b"KD";
                    break None;
                }
            }
        }
    };
    if let Some(e) = ending {
        exchange.termination = if server.failed { *b"SD" } else { *b"CD" };
        tracing::debug!(frontend = exchange.ctx.fe.name(), "tunnel ended: {e}");
    }
    // The client socket closes first, so that the byte count the line takes is final.
    drop(client);
    drop(server);
    activity.log_when_sent(Box::new(exchange));
}

/// One end of the tunnel: notes when data last moved (ms since the tunnel began), and whether a
/// read or write on it failed (to tell a client abort from a server one).
struct Side<'a, S> {
    io: S,
    started: Instant,
    last: &'a AtomicU64,
    failed: bool,
}

impl<'a, S> Side<'a, S> {
    fn new(io: S, started: Instant, last: &'a AtomicU64) -> Self {
        Side { io, started, last, failed: false }
    }

    fn note<T>(&mut self, r: &Poll<io::Result<T>>, moved: bool) {
        match r {
            Poll::Ready(Ok(_)) if moved => {
                self.last.store(self.started.elapsed().as_millis() as u64, Ordering::Relaxed);
            }
            Poll::Ready(Err(_)) => self.failed = true,
            _ => {}
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Side<'_, S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let r = Pin::new(&mut this.io).poll_read(cx, buf);
        let moved = buf.filled().len() > before;
        this.note(&r, moved);
        r
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Side<'_, S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_write(cx, buf);
        this.note(&r, false);
        r
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        this.note(&r, false);
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_shutdown(cx);
        // A peer that already went away cannot be half-closed: not a failure of the tunnel.
        if let Poll::Ready(Err(e)) = &r {
            if e.kind() == io::ErrorKind::NotConnected {
                return Poll::Ready(Ok(()));
            }
        }
        this.note(&r, false);
        r
    }
}
