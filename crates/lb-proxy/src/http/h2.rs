//! HTTP/2 towards clients: hyper's HTTP/2 server on the client connection; each stream is one
//! request, forwarded over HTTP/1.1 like any other (the same handler: routing, retries,
//! X-Forwarded-*, error pages, counters, one log line per stream).
//!
//! Around it, what hyper leaves to us: the idle timeout (no stream open for `http_keep_alive`:
//! GOAWAY and close), the drain (GOAWAY naming the last stream served; those streams finish,
//! then the connection closes, and the client opens its next one to the new worker), and the
//! hard stop. The limits against abusive clients are hyper's and the h2 crate's, set here:
//! concurrent streams, header list size (CONTINUATION floods end there), windows, and resets
//! (rapid reset, CVE-2023-44487: a client that keeps resetting streams it opened is sent GOAWAY).

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::server::conn::http2;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{forward, ConnCtx};
use lb_supervisor::{Quiet, Shutdown};

/// Streams reset by the client before we answered them, at most, at one time: past this the
/// connection is ended with GOAWAY (ENHANCE_YOUR_CALM). The h2 crate's own default.
const MAX_PENDING_RESETS: usize = 20;
/// Streams we reset because the client broke the protocol on them, at most, per connection.
const MAX_LOCAL_RESETS: usize = 1024;

/// Spawns each stream's task (the request's handler, in hyper's stream future) as a box: tokio
/// copies a task's whole future while spawning and finishing it, and a box is copied as a
/// pointer (the handler's future is a few kilobytes; 2,000 instructions per stream went to
/// those copies).
#[derive(Debug, Clone, Copy)]
struct BoxingExecutor;

impl<F> hyper::rt::Executor<F> for BoxingExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(Box::pin(fut));
    }
}

/// The streams of one connection: how many are open, and since when none is.
#[derive(Debug)]
pub(crate) struct Streams {
    open: AtomicUsize,
    /// Milliseconds after `base` when the last stream ended.
    idle_since_ms: AtomicU64,
    base: Instant,
}

impl Streams {
    pub(crate) fn new() -> Self {
        Streams { open: AtomicUsize::new(0), idle_since_ms: AtomicU64::new(0), base: Instant::now() }
    }

    /// A stream is being served until the guard drops: with its exchange, whether that ends
    /// normally or is dropped half-way (the client reset the stream).
    pub(crate) fn open(self: &Arc<Self>) -> StreamGuard {
        self.open.fetch_add(1, Ordering::Relaxed);
        StreamGuard(self.clone())
    }

    fn ended(&self) {
        if self.open.fetch_sub(1, Ordering::Relaxed) == 1 {
            self.idle_since_ms.store(self.base.elapsed().as_millis() as u64, Ordering::Relaxed);
        }
    }

    /// How long no stream has been open; `None` while one is.
    fn idle_for(&self) -> Option<Duration> {
        if self.open.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        Some(self.base.elapsed().saturating_sub(since))
    }
}

/// One open stream of a connection's [`Streams`].
#[derive(Debug)]
pub(crate) struct StreamGuard(Arc<Streams>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.ended();
    }
}

/// Serves one HTTP/2 connection until the client closes it, it idles out, or a drain or a hard
/// stop ends it.
pub(crate) async fn serve<I>(ctx: Arc<ConnCtx>, streams: Arc<Streams>, io: I, mut shutdown: Shutdown)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let config = &ctx.fe.config;
    let settings = config.http2;
    let service_ctx = ctx.clone();
    let service = service_fn(move |req| forward::handle(service_ctx.clone(), req));
    let mut builder = http2::Builder::new(BoxingExecutor);
    builder
        .timer(TokioTimer::new())
        .max_concurrent_streams(settings.max_concurrent_streams)
        .initial_stream_window_size(settings.stream_window)
        .initial_connection_window_size(settings.connection_window)
        .max_header_list_size(u32::try_from(config.max_header_size).unwrap_or(u32::MAX))
        .max_pending_accept_reset_streams(MAX_PENDING_RESETS)
        .max_local_error_reset_streams(MAX_LOCAL_RESETS);
    let conn = builder.serve_connection(TokioIo::new(io), service);
    tokio::pin!(conn);

    let keep_alive = config.timeouts.http_keep_alive;
    let idle = tokio::time::sleep(keep_alive);
    tokio::pin!(idle);
    let mut stop = shutdown.clone();
    let mut closing = false;
    loop {
        // The waits beside the connection are polled only when one of them woke the task (see
        // `Quiet`), not at each of the many wake-ups of a busy connection.
        let watchdog = Quiet::new(async {
            tokio::select! {
                biased;
                () = stop.stopped() => Watch::Stopped,
                () = shutdown.draining(), if !closing => Watch::Draining,
                () = &mut idle, if !closing => Watch::Idle,
            }
        });
        let woke = tokio::select! {
            biased;
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(frontend = ctx.fe.name(), client = ?ctx.facts.client, "HTTP/2 connection: {e}");
                }
                return;
            }
            woke = watchdog => woke,
        };
        match woke {
            Watch::Idle => match streams.idle_for() {
                Some(quiet) if quiet >= keep_alive => {
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                quiet => {
                    let left = keep_alive - quiet.unwrap_or_default();
                    idle.as_mut().reset((Instant::now() + left).into());
                }
            },
            Watch::Draining => {
                conn.as_mut().graceful_shutdown();
                closing = true;
            }
            Watch::Stopped => return,
        }
    }
}

/// Which of the waits beside an HTTP/2 connection ended.
enum Watch {
    Idle,
    Draining,
    Stopped,
}
