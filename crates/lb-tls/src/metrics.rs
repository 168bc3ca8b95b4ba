//! /metrics on `global.metrics_address`: the Prometheus text of [`Stats`] over plain HTTP/1.1
//! (hyper), for a scraper on the same host. Anything but `GET /metrics` gets a 404.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use lb_supervisor::{AsyncListener, Shutdown};
use tokio_util::task::TaskTracker;

use crate::stats::{self, Process, Stats};

/// A scrape connection is closed after this long (a scraper reconnects).
const IDLE: Duration = Duration::from_secs(30);

pub(crate) async fn serve(
    listener: AsyncListener,
    stats: Arc<Stats>,
    process: Process,
    mut shutdown: Shutdown,
    tracker: TaskTracker,
) {
    let process = Arc::new(process);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = shutdown.draining() => break,
            a = listener.accept(None) => a,
        };
        let stream = match accepted {
            Ok(lb_supervisor::Accepted::Tcp { stream, .. }) => stream,
            Ok(lb_supervisor::Accepted::Unix(_)) => continue,
            Err(e) => {
                tracing::warn!("metrics: accept failed: {e}");
                lb_supervisor::back_off_after(&e).await;
                continue;
            }
        };
        let (stats, process) = (stats.clone(), process.clone());
        tracker.spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, stats.clone(), process.clone()));
            let conn = hyper::server::conn::http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service);
            let _ = tokio::time::timeout(IDLE, conn).await;
        });
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    stats: Arc<Stats>,
    process: Arc<Process>,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let response = if req.method() == Method::GET && req.uri().path() == "/metrics" {
        Response::builder()
            .header("content-type", "text/plain; version=0.0.4; charset=utf-8")
            .body(Full::new(Bytes::from(stats::metrics(&stats, &process))))
    } else {
        Response::builder().status(StatusCode::NOT_FOUND).body(Full::new(Bytes::from_static(b"only GET /metrics\n")))
    };
    Ok(response.unwrap_or_else(|_| Response::new(Full::new(Bytes::new()))))
}
