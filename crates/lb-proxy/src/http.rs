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
mod headers;
mod upstream;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};

use self::activity::{Activity, ActivityIo, Watch};
use self::forward::Exchange;
use self::upstream::Upstream;
use crate::facts::ConnFacts;
use crate::listener::ClientStream;
use crate::serve::{FrontendState, Proxy};
use lb_supervisor::Shutdown;

pub(crate) use self::upstream::Pool;

/// hyper's read buffer cannot be smaller than this.
const MIN_HEADER_BUFFER: usize = 8192;

/// While draining, an idle connection is closed only after this long without a request.
const DRAIN_QUIET: Duration = Duration::from_secs(1);

/// What every request of one client connection shares.
#[derive(Debug)]
pub(crate) struct ConnCtx {
    proxy: Arc<Proxy>,
    fe: Arc<FrontendState>,
    facts: ConnFacts,
    activity: Arc<Activity>,
    shutdown: Shutdown,
    /// The server connection tied to this client connection (`http_reuse: never`).
    pinned: Mutex<Option<Upstream>>,
    /// `X-Forwarded-Proto: https`: the frontend is marked TLS or the PROXY header said SSL.
    https: bool,
}

pub(crate) async fn serve(proxy: &Arc<Proxy>, fe: &Arc<FrontendState>, stream: ClientStream, facts: ConnFacts, mut shutdown: Shutdown) {
    let timeouts = fe.config.timeouts;
    let activity = Activity::new(Instant::now(), fe.config.max_header_size.max(MIN_HEADER_BUFFER));
    let ctx = Arc::new(ConnCtx {
        proxy: proxy.clone(),
        fe: fe.clone(),
        https: fe.config.tls || facts.tls.is_some(),
        facts,
        activity: activity.clone(),
        shutdown: shutdown.clone(),
        pinned: Mutex::new(None),
    });
    let service_ctx = ctx.clone();
    let service = service_fn(move |req| forward::handle(service_ctx.clone(), req));
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .keep_alive(true)
        .preserve_header_case(true)
        .max_buf_size(fe.config.max_header_size.max(MIN_HEADER_BUFFER))
        // Our watchdog owns these timeouts; hyper's own is only a backstop behind it.
        .header_read_timeout(timeouts.http_request + timeouts.http_keep_alive + timeouts.client);
    let conn = builder.serve_connection(TokioIo::new(ActivityIo::new(stream, activity.clone())), service);
    tokio::pin!(conn);

    let mut ending = false;
    // While draining, when to close this connection if it is idle then (spread over
    // close_spread so that clients do not all reconnect at once).
    let mut drain_close_at: Option<Instant> = None;
    let mut stop = shutdown.clone();
    let result = loop {
        let deadline = match activity.watch() {
            _ if ending => None,
            Watch::Busy => None,
            Watch::Idle { since, requests } => {
                let limit = if requests == 0 { timeouts.http_request } else { timeouts.http_keep_alive };
                // A client quiet for a while is unlikely to be sending right now: a drain
                // never closes a connection that was busy less than DRAIN_QUIET ago.
                let drain = drain_close_at.map(|at| at.max(since + DRAIN_QUIET));
                Some(drain.map_or(since + limit, |at| at.min(since + limit)))
            }
            Watch::Reading { since } => Some(since + timeouts.http_request),
        };
        tokio::select! {
            result = conn.as_mut() => break result,
            _ = activity.changed() => {}
            _ = sleep_until(deadline) => {
                match activity.watch() {
                    Watch::Reading { since } if since + timeouts.http_request <= Instant::now() => {
                        activity.reply_and_end(errors::raw(&fe.config.error_pages, 408));
                        bad_request(&ctx, since, 408, *b"cR");
                        ending = true;
                    }
                    Watch::Idle { .. } => {
                        activity.end_when_idle();
                        ending = true;
                    }
                    _ => {}
                }
            }
            _ = shutdown.draining(), if drain_close_at.is_none() => {
                // Busy connections end after their response (it says `Connection: close`);
                // idle ones are closed at a spread-out moment, only when nothing is arriving.
                let spread = proxy.close_spread.as_millis() as u64;
                drain_close_at = Some(Instant::now() + Duration::from_millis(rand::random_range(0..=spread)));
            }
            _ = stop.stopped() => return,
        }
    };
    if let Err(e) = result {
        if e.is_parse() || e.is_parse_too_large() {
            tracing::debug!(frontend = fe.name(), client = ?ctx.facts.client, "bad request: {e}");
            let since = match activity.watch() {
                Watch::Reading { since } => since,
                _ => Instant::now(),
            };
            bad_request(&ctx, since, 400, *b"PR");
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

/// Log a request that never got far enough to be parsed: `<BADREQ>`, HAProxy style.
fn bad_request(ctx: &Arc<ConnCtx>, since: Instant, status: u16, termination: [u8; 2]) {
    let ex = Exchange {
        ctx: ctx.clone(),
        accept_date: SystemTime::now() - since.elapsed(),
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
    };
    ex.log(0);
}
