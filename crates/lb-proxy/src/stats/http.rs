//! The stats listener (`global.stats`): one HTTP/1.1 request per connection, answered by the
//! worker that accepted it.
//!
//! - `/` (or `/stats`): the HTML page;
//! - `/metrics`: Prometheus text format;
//! - `/;csv` (or `/stats;csv`, HAProxy's URLs): `show stat`'s CSV.
//!
//! The socket is the master's, like the frontends': across a reload the old worker stops
//! accepting on it and the new one takes over, so the URL never goes away. A new worker answers
//! only once it holds its predecessor's counters, so no scrape sees a counter go down.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use lb_supervisor::{MasterLink, Shutdown};
use tokio_util::task::TaskTracker;

use crate::state::Proxy;

/// How long a new worker's stats wait for its predecessor's counters at most.
const COUNTERS_WAIT: Duration = Duration::from_secs(2);
/// How long the master may take to say which old workers still run.
const PROC_WAIT: Duration = Duration::from_millis(500);
/// A stats client must send its request within this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// Accept stats requests until the worker drains.
pub(crate) async fn serve(
    proxy: Arc<Proxy>,
    master: MasterLink,
    listener: tokio::net::TcpListener,
    settings: lb_config::Stats,
    mut shutdown: Shutdown,
    tracker: TaskTracker,
) {
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.draining() => return,
            r = listener.accept() => r,
        };
        match accepted {
            Ok((stream, _)) => {
                let (proxy, master) = (proxy.clone(), master.clone());
                let refresh = settings.refresh;
                tracker.spawn(async move {
                    let service = service_fn(move |req| answer(proxy.clone(), master.clone(), refresh, req));
                    let conn = http1::Builder::new().keep_alive(false).serve_connection(TokioIo::new(stream), service);
                    let _ = tokio::time::timeout(REQUEST_TIMEOUT, conn).await;
                });
            }
            Err(e) => {
                tracing::warn!("stats listener: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn answer(
    proxy: Arc<Proxy>,
    master: MasterLink,
    refresh: Duration,
    req: Request<Incoming>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return Ok(reply(StatusCode::METHOD_NOT_ALLOWED, "text/plain", "GET only\n".into()));
    }
    proxy.wait_counters_ready(COUNTERS_WAIT).await;
    let path = req.uri().path();
    // HAProxy's stats URIs carry options after `;` (`/;csv;norefresh`).
    let (base, options) = path.split_once(';').unwrap_or((path, ""));
    let csv = options.split(';').any(|o| o == "csv");
    Ok(match base {
        "/" | "/stats" if csv => reply(StatusCode::OK, "text/csv; charset=utf-8", super::csv(&proxy)),
        "/" | "/stats" => {
            let procs = master.show_proc(PROC_WAIT).await;
            reply(StatusCode::OK, "text/html; charset=utf-8", super::html::page(&proxy, procs.as_ref(), refresh))
        }
        "/metrics" => {
            let procs = master.show_proc(PROC_WAIT).await;
            reply(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                super::metrics::render(&proxy, procs.as_ref()),
            )
        }
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found: try /, /metrics or /;csv\n".into()),
    })
}

fn reply(status: StatusCode, content_type: &'static str, body: String) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static(content_type));
    headers.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-cache"));
    response
}
