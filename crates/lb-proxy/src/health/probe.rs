//! One check of one server: a TCP connect, or an HTTP request over hyper's client connection.
//!
//! Everything (connect and response head) must happen within `timeouts.check`; the outcome is
//! classified the way HAProxy's check statuses are, so logs and stats read the same.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::pin;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::header::{CONNECTION, HOST, USER_AGENT};
use http::{Method, Request};
use http_body_util::{BodyExt, Empty, Limited};
use hyper_util::rt::TokioIo;
use lb_config::CheckKind;
use tokio::net::TcpStream;
use tokio::time::{timeout_at, Instant as Deadline};

use super::{CheckResult, CheckStatus};

/// The `User-Agent` of HTTP checks, so servers can tell them from traffic.
const CHECK_USER_AGENT: &str = "lb-proxy-check";
/// How much of a check response's body is read (so the server sees an orderly close).
const MAX_BODY: usize = 64 * 1024;

/// What a probe found, before timing is added.
struct Outcome {
    status: CheckStatus,
    code: Option<u16>,
    info: Option<String>,
}

impl Outcome {
    fn new(status: CheckStatus, info: Option<String>) -> Outcome {
        Outcome { status, code: None, info }
    }
}

/// Check `addr` once as `kind` says, within `timeout`.
pub(super) async fn run(kind: &CheckKind, addr: SocketAddr, timeout: Duration) -> CheckResult {
    let start = Instant::now();
    let deadline = Deadline::now() + timeout;
    let outcome = match kind {
        CheckKind::Tcp => tcp(addr, deadline).await,
        CheckKind::Http { method, path, host, expect_status } => {
            http(addr, deadline, method, path, host.as_deref(), *expect_status).await
        }
    };
    CheckResult {
        status: outcome.status,
        code: outcome.code,
        info: outcome.info,
        duration: start.elapsed(),
        at: Some(SystemTime::now()),
    }
}

async fn connect(addr: SocketAddr, deadline: Deadline) -> Result<TcpStream, Outcome> {
    match timeout_at(deadline, TcpStream::connect(addr)).await {
        Err(_) => Err(Outcome::new(CheckStatus::L4Timeout, None)),
        Ok(Err(e)) => Err(Outcome::new(CheckStatus::L4Con, Some(io_info(&e)))),
        Ok(Ok(stream)) => Ok(stream),
    }
}

async fn tcp(addr: SocketAddr, deadline: Deadline) -> Outcome {
    match connect(addr, deadline).await {
        Ok(_) => Outcome::new(CheckStatus::L4Ok, None),
        Err(o) => o,
    }
}

async fn http(
    addr: SocketAddr,
    deadline: Deadline,
    method: &str,
    path: &str,
    host: Option<&str>,
    expect_status: u16,
) -> Outcome {
    let request = match build_request(addr, method, path, host) {
        Ok(r) => r,
        Err(e) => {
            let info = format!("invalid check request: {e}");
            return Outcome::new(CheckStatus::L7Response, Some(info));
        }
    };
    let stream = match connect(addr, deadline).await {
        Ok(s) => s,
        Err(o) => return o,
    };
    let _ = stream.set_nodelay(true);
    let handshake = hyper::client::conn::http1::handshake(TokioIo::new(stream));
    let (mut sender, conn) = match timeout_at(deadline, handshake).await {
        Err(_) => return Outcome::new(CheckStatus::L7Timeout, None),
        Ok(Err(e)) => return Outcome::new(CheckStatus::L7Response, Some(e.to_string())),
        Ok(Ok(pair)) => pair,
    };
    // The connection future does the I/O: it is polled alongside each step below, and dropped
    // (closing the socket) when the check is over.
    let mut conn = pin!(async move {
        let _ = conn.await;
    });
    let mut conn_done = false;
    let exchange = drive(&mut conn, &mut conn_done, sender.send_request(request));
    let response = match timeout_at(deadline, exchange).await {
        Err(_) => return Outcome::new(CheckStatus::L7Timeout, None),
        Ok(Err(e)) => return Outcome::new(CheckStatus::L7Response, Some(e.to_string())),
        Ok(Ok(r)) => r,
    };
    let status = response.status();
    // Read what the server sends (bounded) before closing; the verdict is already known.
    let body = Limited::new(response.into_body(), MAX_BODY).collect();
    let _ = timeout_at(deadline, drive(&mut conn, &mut conn_done, body)).await;
    let code = Some(status.as_u16());
    if status.as_u16() == expect_status {
        Outcome { status: CheckStatus::L7Ok, code, info: None }
    } else {
        let info = status.canonical_reason().map(str::to_owned);
        Outcome { status: CheckStatus::L7Status, code, info }
    }
}

fn build_request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    host: Option<&str>,
) -> Result<Request<Empty<Bytes>>, http::Error> {
    let method = Method::from_bytes(method.as_bytes())?;
    let host = host.map_or_else(|| addr.to_string(), str::to_owned);
    Request::builder()
        .method(method)
        .uri(path)
        .header(HOST, host)
        .header(USER_AGENT, CHECK_USER_AGENT)
        .header(CONNECTION, "close")
        .body(Empty::new())
}

/// Await `fut` while also polling the connection future (until it is done).
async fn drive<C, F>(conn: &mut C, conn_done: &mut bool, fut: F) -> F::Output
where
    C: Future<Output = ()> + Unpin,
    F: Future,
{
    let mut fut = pin!(fut);
    if !*conn_done {
        tokio::select! {
            biased;
            out = &mut fut => return out,
            () = &mut *conn => *conn_done = true,
        }
    }
    fut.await
}

/// An I/O error as HAProxy words check info: `Connection refused`, without `(os error 111)`.
fn io_info(e: &std::io::Error) -> String {
    let mut text = e.to_string();
    if let Some(i) = text.find(" (os error") {
        text.truncate(i);
    }
    text
}
