//! HTTP mode: hyper serves the client connection, each request is forwarded by hyper's client on
//! a server connection, and bodies stream both ways, frame by frame.
//!
//! Around hyper sits a watchdog per connection (see `activity`): it closes idle keep-alive
//! connections without racing a request, answers 408 when headers are too slow, and on a drain
//! ends idle connections while busy ones finish with `Connection: close`.

mod activity;
mod body;
mod errors;
mod forward;
mod framing;
pub(crate) mod fuzz;
mod h2;
mod headers;
mod rules;
mod sniff;
mod tunnel;
mod upstream;

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;

use self::activity::{Activity, ActivityIo, Watch};
use self::forward::Exchange;
use self::sniff::{sniff, Prefixed, Sniffed};
use self::upstream::Upstream;
use crate::counters::Transfer;
use crate::facts::ConnFacts;
use crate::listener::ClientStream;
use crate::serve::Serving;
use crate::state::{FrontendState, Proxy};
use lb_supervisor::{Quiet, Shutdown};

/// hyper's read buffer cannot be smaller than this.
const MIN_HEADER_BUFFER: usize = 8192;

/// hyper's read buffer for a frontend's `max_header_size`, which the raw-request following in
/// `framing` is sized from too.
pub(crate) fn read_buffer(max_header_size: usize) -> usize {
    max_header_size.max(MIN_HEADER_BUFFER)
}

/// While a request is served the watchdog looks again after the shorter of `http_request` and
/// `http_keep_alive`, but not more often than this.
const BUSY_RECHECK_MIN: Duration = Duration::from_millis(100);

/// What every request of one client connection shares.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    proxy: Arc<Proxy>,
    fe: Arc<FrontendState>,
    facts: ConnFacts,
    wire: Wire,
    shutdown: Shutdown,
    /// The server connections tied to this client connection (`http_reuse: never`): one for
    /// HTTP/1; for HTTP/2, one per stream served at once.
    pinned: Mutex<Vec<Upstream>>,
    /// A tunnel the server agreed to (101), for this task to run once hyper lets go. Boxed:
    /// most connections never have one, and every idle one would keep its room.
    tunnel: Mutex<Option<Box<tunnel::Pending>>>,
    /// `X-Forwarded-Proto: https`: the frontend is marked TLS or the PROXY header said SSL.
    https: bool,
    /// The client's `X-Forwarded-For` value, when there is a client address.
    forwarded_for: Option<http::HeaderValue>,
}

/// How the client connection speaks, and what its requests report to.
#[derive(Debug)]
pub(crate) enum Wire {
    /// HTTP/1.x, one request at a time: the watchdog's activity times them and counts bytes.
    H1(Arc<Activity>),
    /// HTTP/2, streams side by side.
    H2(Arc<h2::Streams>),
}

impl ConnCtx {
    fn new(proxy: &Arc<Proxy>, fe: &Arc<FrontendState>, facts: ConnFacts, wire: Wire, shutdown: &Shutdown) -> Self {
        ConnCtx {
            proxy: proxy.clone(),
            fe: fe.clone(),
            https: fe.config.tls || facts.tls.is_some(),
            forwarded_for: headers::forwarded_for(facts.client.map(|c| c.ip())),
            facts,
            wire,
            shutdown: shutdown.clone(),
            pinned: Mutex::new(Vec::new()),
            tunnel: Mutex::new(None),
        }
    }

    /// HTTP/1: the Content-Length lines of the request just started, as the client sent them
    /// (counted only when a rule reads them); `None` for HTTP/2.
    fn raw_content_lengths(&self) -> Option<usize> {
        match &self.wire {
            Wire::H1(activity) => Some(activity.content_lengths()),
            Wire::H2(_) => None,
        }
    }

    fn is_h2(&self) -> bool {
        matches!(self.wire, Wire::H2(_))
    }

    /// HTTP/1: where a response body says its head waits for it (HTTP/2 frames its own writes).
    fn body_due(&self) -> Option<&Arc<body::BodyDue>> {
        match &self.wire {
            Wire::H1(activity) => Some(activity.body_due()),
            Wire::H2(_) => None,
        }
    }

    /// A request's head is in: when its first byte came, why to refuse it if its raw head shows
    /// a framing conflict (HTTP/1 only: HTTP/2 frames its messages itself), and for HTTP/2 the
    /// guard that keeps its stream counted as open.
    /// `refused`: why the parsed request is refused already, if it is; a refused HTTP/1 request
    /// is captured for `show errors` (HTTP/2's are not: there is no raw head to show).
    fn request_started<B: hyper::body::Body>(
        &self,
        req: &hyper::Request<B>,
        has_transfer_encoding: bool,
        refused: Option<&'static str>,
    ) -> (Instant, Option<&'static str>, Option<h2::StreamGuard>) {
        match &self.wire {
            Wire::H1(activity) => {
                let after = framing::After::of(req);
                let (first_byte, conflict, head) =
                    activity.request_started(has_transfer_encoding, refused.is_some(), after);
                if let (Some(reason), Some(head)) = (conflict.or(refused), head) {
                    self.fe.errors.record(self.facts.client, reason.to_owned(), head);
                }
                (first_byte, conflict, None)
            }
            Wire::H2(streams) => (Instant::now(), None, Some(streams.open())),
        }
    }

    /// The exchange is over: its line is written once what was sent is known (for HTTP/1 when
    /// hyper has flushed the response; an HTTP/2 stream counts its own bodies).
    fn request_ended(&self, exchange: Box<Exchange>, body_bytes: u64) {
        match &self.wire {
            Wire::H1(activity) => {
                activity.request_done();
                activity.log_when_sent(exchange);
            }
            Wire::H2(_) => {
                let from_client = exchange.client_side.as_ref().map_or(0, |c| c.received.load(Ordering::Relaxed));
                exchange.log(Transfer { from_client, to_client: body_bytes });
            }
        }
    }
}

/// Starts serving one client connection in HTTP mode: HTTP/2 when lb-tls negotiated `h2` (the
/// PROXY header's ALPN), or `h3` (lb-tls carries each HTTP/3 request as an HTTP/2 stream on the
/// hop; the logs and `ssl_fc_alpn` still say `h3`), or a plain connection opens with HTTP/2's
/// preface, else HTTP/1.x. Returns the future that serves it from then on (`None`: the client
/// closed before saying which).
pub(crate) async fn serve(
    proxy: &Arc<Proxy>,
    fe: &Arc<FrontendState>,
    mut stream: ClientStream,
    facts: ConnFacts,
    shutdown: Shutdown,
) -> Option<Serving> {
    let opened = Instant::now();
    let mut first = BytesMut::new();
    let http2 = fe.config.http2.enabled
        && match facts.alpn.as_deref() {
            Some(alpn) => alpn == "h2" || alpn == "h3",
            // Through TLS without ALPN: HTTP/1.1 (RFC 9113 §3.3).
            None if facts.tls.is_some() => false,
            None => match tokio::time::timeout(fe.config.timeouts.http_request, sniff(&mut stream, &mut first)).await {
                Ok(Sniffed::Http2) => true,
                Ok(Sniffed::Http1) | Err(_) => false,
                Ok(Sniffed::Closed) => return None,
            },
        };
    let io = Prefixed::new(first, stream);
    // Each protocol's state machine (hyper's connection, timers, the drain) goes on the heap at
    // its exact size, and holds none of what only the start needed (the facts are the
    // context's, the accept-time futures are gone).
    Some(if http2 {
        let streams = Arc::new(h2::Streams::new());
        let ctx = Arc::new(ConnCtx::new(proxy, fe, facts, Wire::H2(streams.clone()), &shutdown));
        Box::pin(h2::serve(ctx, streams, io, shutdown))
    } else {
        Box::pin(serve_h1(proxy, fe, io, facts, shutdown, opened))
    })
}

/// HTTP/1: builds the connection's state, then returns the future that serves it. Built here,
/// outside the future, so that the future keeps only what it uses while the connection lives
/// (an async function keeps its arguments, and locals such as hyper's builder, for its whole
/// life: they were a third of an idle connection's task).
fn serve_h1(
    proxy: &Arc<Proxy>,
    fe: &Arc<FrontendState>,
    stream: Prefixed,
    facts: ConnFacts,
    shutdown: Shutdown,
    opened: Instant,
) -> impl Future<Output = ()> + Send + 'static {
    let timeouts = fe.config.timeouts;
    let (http_request, http_keep_alive) = (timeouts.http_request, timeouts.http_keep_alive);
    let activity = Activity::new(opened, read_buffer(fe.config.max_header_size), http_request, http_keep_alive);
    if fe.policy.reads_content_length {
        activity.count_content_lengths();
    }
    let ctx = Arc::new(ConnCtx::new(proxy, fe, facts, Wire::H1(activity.clone()), &shutdown));
    let service_ctx = ctx.clone();
    let service = service_fn(move |req| forward::handle(service_ctx.clone(), req));
    let mut conn = h1_server_builder(fe.config.max_header_size)
        .serve_connection(TokioIo::new(ActivityIo::new(stream, activity.clone())), service)
        .with_upgrades();
    let spread = proxy.close_spread;
    async move {
        // The watchdog's timer is set for the current deadline, or, while a request is served,
        // for a look again later; whenever it fires the state is read anew (a deadline may have
        // moved later meanwhile: re-armed), and `activity.changed()` wakes it only when one
        // moved earlier.
        let busy_recheck = http_request.min(http_keep_alive).max(BUSY_RECHECK_MIN);
        // Set for the first deadline from the start, as its firing would set it: a timer that
        // fired at once cost a wake-up and a pass through the watchdog, 1,400 instructions a
        // connection.
        let first = activity.watch().deadline(http_request, http_keep_alive);
        let first = first.unwrap_or_else(|| Instant::now() + busy_recheck);
        activity.arm(first);
        let timer = tokio::time::sleep_until(first.into());
        tokio::pin!(timer);
        let mut ending = false;
        // A drain closes the connection once idle (at a spread-out moment); a hard stop drops
        // it. One future for both, so that each wake-up of this task polls one shutdown future.
        let tunnel_stop = shutdown.clone();
        let drain_activity = activity.clone();
        let mut shutdown = shutdown;
        let shutdown_steps = async move {
            shutdown.draining().await;
            let spread = Duration::from_millis(rand::random_range(0..=spread.as_millis() as u64));
            drain_activity.drain(Instant::now() + spread);
            shutdown.stopped().await;
        };
        tokio::pin!(shutdown_steps);
        let result = loop {
            // The watchdog's waits are polled only when one of them woke the task (see
            // `Quiet`): hyper's IO wakes it several times per request, and polling the three
            // waits at each wake-up cost about 700 instructions a request.
            let watchdog = Quiet::new(async {
                tokio::select! {
                    biased;
                    _ = activity.changed(), if !ending => Watchdog::Changed,
                    () = timer.as_mut(), if !ending => Watchdog::Timer,
                    () = &mut shutdown_steps => Watchdog::Stopped,
                }
            });
            let woke = tokio::select! {
                biased;
                // Polled where it lies (it is Unpin): pinned in a local of its own, hyper's
                // connection would take its room twice in this future.
                result = &mut conn => break result,
                woke = watchdog => woke,
            };
            match woke {
                Watchdog::Changed => {
                    // A deadline moved earlier: set the timer for it (it may have passed already).
                    let now = Instant::now();
                    let at = activity.watch().deadline(http_request, http_keep_alive);
                    let at = at.unwrap_or(now + busy_recheck);
                    activity.arm(at);
                    timer.as_mut().reset(at.into());
                }
                Watchdog::Timer => {
                    let now = Instant::now();
                    let watch = activity.watch();
                    match (watch, watch.deadline(http_request, http_keep_alive)) {
                        (Watch::Reading { since }, Some(at)) if at <= now => {
                            activity.reply_and_end(errors::raw(&ctx.fe.config.error_pages, 408));
                            bad_request(&ctx, since, 408, *b"cR");
                            ending = true;
                        }
                        (Watch::Idle { .. }, Some(at)) if at <= now => {
                            // Ends at hyper's next read unless a request is arriving; if one
                            // is, keep watching it (its first byte moves the deadline earlier).
                            activity.end_when_idle();
                            let at = now + busy_recheck;
                            activity.arm(at);
                            timer.as_mut().reset(at.into());
                        }
                        (_, at) => {
                            let at = at.unwrap_or(now + busy_recheck);
                            activity.arm(at);
                            timer.as_mut().reset(at.into());
                        }
                    }
                }
                Watchdog::Stopped => return,
            }
        };
        let pending = forward::lock(&ctx.tunnel).take();
        // Boxed: inline, the tunnel's state would be room this future keeps for the whole life
        // of every connection, most of which never become tunnels.
        let tunnel = match (&result, pending) {
            (Ok(()), Some(pending)) => Some(Box::pin(tunnel::run(*pending, &activity, tunnel_stop))),
            _ => None,
        };
        if let Some(tunnel) = tunnel {
            return tunnel.await;
        }
        if let Err(e) = result {
            let reading = match activity.watch() {
                Watch::Reading { since } => Some(since),
                _ => None,
            };
            let fe = &ctx.fe;
            if e.is_parse() || e.is_parse_too_large() {
                tracing::debug!(frontend = fe.name(), client = ?ctx.facts.client, "bad request: {e}");
                fe.errors.record(ctx.facts.client, e.to_string(), activity.take_head());
                bad_request(&ctx, reading.unwrap_or_else(Instant::now), 400, *b"PR");
            } else if let (true, Some(since)) = (e.is_incomplete_message(), reading) {
                // The client went away in the middle of its request's head: HAProxy logs it as
                // `400 CR-- <BADREQ>` (nothing was sent back; the status says what it would
                // have been).
                tracing::debug!(frontend = fe.name(), client = ?ctx.facts.client, "client aborted its request: {e}");
                bad_request(&ctx, since, 400, *b"CR");
            }
        }
    }
}

/// Which of the watchdog's waits ended.
enum Watchdog {
    /// A deadline moved earlier.
    Changed,
    Timer,
    /// The drain closed the connection, or a hard stop came.
    Stopped,
}

/// Log a request that never got far enough to be parsed: `<BADREQ>`, HAProxy style.
fn bad_request(ctx: &Arc<ConnCtx>, since: Instant, status: u16, termination: [u8; 2]) {
    let ex = Exchange {
        ctx: ctx.clone(),
        started: since,
        tr: -1,
        backend: None,
        server: None,
        tw: -1,
        tc: -1,
        tresp: -1,
        status: i32::from(status),
        retries: 0,
        termination,
        request_line: "<BADREQ>".to_owned(),
        upstream: None,
        client_side: None,
        _stream: None,
        policy: None,
    };
    let from_client = match &ctx.wire {
        Wire::H1(activity) => activity.take_received(),
        Wire::H2(_) => 0,
    };
    let bytes = Transfer { from_client, to_client: 0 };
    ex.log(bytes);
}

/// hyper's HTTP/1 server as lb-proxy runs it (and the fuzz target `http_request_head` with it).
/// No timer for hyper: `serve_h1`'s watchdog owns the header and keep-alive timeouts (hyper's
/// one timeout mixes both and cannot answer 408), and a timer per request costs. half_close: a
/// client that shuts down its sending side after its request (`nc -N`, some scripts and health
/// checkers) still gets its response, as with HAProxy (no `abortonclose`); hyper's default
/// would drop the request at the FIN.
pub(crate) fn h1_server_builder(max_header_size: usize) -> http1::Builder {
    let mut builder = http1::Builder::new();
    builder.keep_alive(true).half_close(true).writev(false).max_buf_size(read_buffer(max_header_size));
    builder
}
