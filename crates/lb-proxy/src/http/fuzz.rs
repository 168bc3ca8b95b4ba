//! For the fuzzer (`fuzz/`, target `http_request_head`): bytes a client sends, through hyper's
//! HTTP/1 server as `serve_h1` configures it and the connection's [`Activity`] (which keeps the
//! raw head), into the checks `forward::handle` makes before forwarding: the framing refusals on
//! the parsed request and on the raw head, hop-by-hop stripping, the log's request line, the
//! origin-form URI servers get. Nothing is forwarded; a request that passes is answered 200.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{Request, Response, StatusCode, Version};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::activity::{Activity, ActivityIo};
use super::framing::After;
use super::{forward, headers, tunnel};

/// lb-config's default `max_header_size`: hyper's buffer and the raw head kept.
const MAX_HEADER_SIZE: usize = 16 * 1024;

/// Headers that never cross a hop (`headers::HOP_BY_HOP`, written out again to check it).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "proxy-authenticate",
    "keep-alive",
    "proxy-connection",
];

/// How many times one input's connection may be polled: hyper yields every few steps (and is
/// polled again), but a connection still busy after this many polls of a few KiB is spinning.
const MAX_POLLS: usize = 100_000;

/// Serves `bytes` as one client connection (hyper configured as `serve_h1` configures it) whose
/// reads return at most `read_size` bytes each, the client then silent (never closing, so that
/// every request in the input is read whatever hyper does at a half-close);
/// returns the status of every request that got as far as lb-proxy's checks, in order.
///
/// # Panics
/// When a check disagrees with what it checks: a first request whose raw head carries both
/// Content-Length and Transfer-Encoding and is not refused, a hop-by-hop header left after
/// stripping, a request line or origin-form URI not as documented; or when the connection is
/// still busy after [`MAX_POLLS`] polls. Never on malformed input as such (hyper refuses it, as
/// it does for lb-proxy).
#[doc(hidden)]
pub fn fuzz_request_head(bytes: &[u8], read_size: usize) -> Vec<u16> {
    let input: Arc<[u8]> = Arc::from(bytes);
    let activity = Activity::new(
        Instant::now(),
        super::read_buffer(MAX_HEADER_SIZE),
        Duration::from_secs(10),
        Duration::from_secs(10),
    );
    let statuses = Arc::new(Mutex::new(Vec::new()));
    let (service_input, service_activity, service_statuses) = (input.clone(), activity.clone(), statuses.clone());
    let service = service_fn(move |req: Request<Incoming>| {
        let (input, activity, statuses) = (service_input.clone(), service_activity.clone(), service_statuses.clone());
        async move {
            let first = forward::lock(&statuses).is_empty();
            let status = check(req, &activity, first.then_some(&input[..])).await;
            forward::lock(&statuses).push(status.as_u16());
            activity.request_done();
            let mut response = Response::new(Empty::<Bytes>::new());
            *response.status_mut() = status;
            if status == StatusCode::BAD_REQUEST {
                response.headers_mut().insert(header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            Ok::<_, Infallible>(response)
        }
    });
    let io = ActivityIo::new(Wire { input, at: 0, read_size: read_size.max(1) }, activity);
    let builder = super::h1_server_builder(MAX_HEADER_SIZE);
    let conn = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
    // Polled by hand: everything is in memory, so a connection that is pending without having
    // woken itself waits for bytes that will never come, and the input is done. (No runtime:
    // hyper gets no timer, as in `serve_h1`, and the IO needs no driver.)
    let mut conn = std::pin::pin!(conn);
    let woken = Arc::new(Woken(AtomicBool::new(false)));
    let waker = Waker::from(woken.clone());
    let mut cx = Context::from_waker(&waker);
    let mut polls = 0;
    loop {
        woken.0.store(false, Ordering::Relaxed);
        // Errors are hyper refusing the bytes: what the fuzzer feeds, not a finding.
        if conn.as_mut().poll(&mut cx).is_ready() || !woken.0.load(Ordering::Relaxed) {
            break;
        }
        polls += 1;
        assert!(polls < MAX_POLLS, "the connection is still busy after {MAX_POLLS} polls");
    }
    let statuses = std::mem::take(&mut *forward::lock(&statuses));
    statuses
}

/// A waker that notes it was called.
struct Woken(AtomicBool);

impl Wake for Woken {
    fn wake(self: Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// What `forward::handle` checks before it forwards, with each check checked.
async fn check(req: Request<Incoming>, activity: &Activity, raw_head: Option<&[u8]>) -> StatusCode {
    let (has_te, refused) = headers::framing(&req);
    let (_, conflict, _) = activity.request_started(has_te, refused.is_some(), After::of(&req));
    let refused = conflict.or(refused);
    if let Some(head) = raw_head {
        assert!(
            refused.is_some() || !both_lengths(head),
            "a first request with Content-Length and Transfer-Encoding was let through: {:?}",
            String::from_utf8_lossy(head)
        );
    }
    if req.version() != Version::HTTP_2 {
        let line = forward::request_line(&req);
        assert_eq!(line, format!("{} {} {:?}", req.method(), req.uri(), req.version()));
    }
    if refused.is_some() {
        return StatusCode::BAD_REQUEST;
    }
    let (mut parts, body) = req.into_parts();
    // Tokens as bytes, folded as ASCII only: header names are ASCII, and a Unicode fold could
    // turn a token that names nothing into one that names a field.
    let connection: Vec<Vec<u8>> = parts
        .headers
        .get_all(header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b',').map(|t| t.trim_ascii().to_ascii_lowercase()))
        .collect();
    let had_upgrade = parts.headers.contains_key(header::UPGRADE);
    let upgrade = headers::strip_hop_by_hop(&mut parts.headers);
    for name in HOP_BY_HOP {
        assert!(!parts.headers.contains_key(name), "`{name}` left after stripping");
    }
    for token in &connection {
        if let Ok(name) = HeaderName::from_bytes(token) {
            assert!(!parts.headers.contains_key(&name), "`{name}`, listed in Connection, left after stripping");
        }
    }
    assert_eq!(upgrade.is_some(), had_upgrade && connection.iter().any(|t| t == b"upgrade"), "Upgrade given back");
    if let Some(protocol) = &upgrade {
        let _ = tunnel::passes(parts.version, &parts.headers, has_te, protocol);
    }
    // Servers get origin form (RFC 9112 §3.2.1) with the client's path and query, or `*`.
    let origin = forward::origin_form(&parts.uri);
    let text = origin.to_string();
    assert!(origin.scheme().is_none() && origin.authority().is_none(), "{} → {text}", parts.uri);
    assert!(text.starts_with('/') || text == "*", "{} → {text}", parts.uri);
    if parts.uri.path_and_query().is_some() {
        let path = Some(parts.uri.path()).filter(|p| !p.is_empty()).unwrap_or("/");
        assert_eq!((origin.path(), origin.query()), (path, parts.uri.query()), "{} → {text}", parts.uri);
    }
    // Read the body as forwarding would, so that hyper goes on to the next request.
    match body.collect().await {
        Ok(_) => StatusCode::OK,
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

/// Whether the first request head at the start of `input` has both framing headers: parsed on
/// its own, with room for more header lines than hyper takes.
fn both_lengths(input: &[u8]) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 256];
    let mut request = httparse::Request::new(&mut fields);
    if !matches!(request.parse(input), Ok(httparse::Status::Complete(_))) {
        return false;
    }
    let has = |name: &str| request.headers.iter().any(|h| h.name.eq_ignore_ascii_case(name));
    has("content-length") && has("transfer-encoding")
}

/// The client's end in memory: reads give the input in pieces of at most `read_size` bytes,
/// then wait for ever; writes (the responses) are taken whole and dropped.
struct Wire {
    input: Arc<[u8]>,
    at: usize,
    read_size: usize,
}

impl AsyncRead for Wire {
    fn poll_read(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let rest = this.input.get(this.at..).unwrap_or_default();
        if rest.is_empty() {
            // The client is silent from now on; nothing will wake the reader.
            return Poll::Pending;
        }
        let n = rest.len().min(buf.remaining()).min(this.read_size);
        buf.put_slice(&rest[..n]);
        this.at += n;
        Poll::Ready(Ok(()))
    }
}

impl crate::listener::SendMore for Wire {
    fn poll_send_more(self: Pin<&mut Self>, _: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(bufs.iter().map(|b| b.len()).sum()))
    }
}

impl AsyncWrite for Wire {
    fn poll_write(self: Pin<&mut Self>, _: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::fuzz_request_head;

    const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

    /// The statuses, the same whether the bytes come whole or a few at a time.
    fn statuses(input: &str) -> Vec<u16> {
        let whole = fuzz_request_head(input.as_bytes(), usize::MAX);
        assert_eq!(fuzz_request_head(input.as_bytes(), 7), whole, "{input:?} read in pieces");
        whole
    }

    #[test]
    fn requests_pass_and_framing_conflicts_are_refused() {
        assert_eq!(statuses("GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\n"), [200, 200]);
        let cl_te = format!(
            "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
        );
        assert_eq!(statuses(&cl_te), [400]);
        // The same pipelined behind other requests, one with a chunked body (the seed
        // `pipelined-cl-te` and its like): refused too.
        let behind = format!(
            "GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n\
             2\r\nab\r\n0\r\n\r\n{cl_te}"
        );
        assert_eq!(statuses(&behind), [200, 200, 400]);
        let seed = include_bytes!("../../../../fuzz/seeds/http_request_head/pipelined-cl-te");
        assert_eq!(fuzz_request_head(seed, usize::MAX), [200, 400]);
        assert_eq!(
            statuses("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n"),
            [400]
        );
        assert_eq!(statuses("GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 1, 2\r\n\r\nx"), Vec::<u16>::new());
        let hop = "GET / HTTP/1.1\r\nHost: x\r\nConnection: X-A, upgrade\r\nX-A: 1\r\nUpgrade: websocket\r\n\r\n";
        assert_eq!(statuses(hop), [200]);
        // An absolute URI with a query and no path: servers get `/?q` (found by the fuzzer).
        assert_eq!(
            statuses("GET http://u.example:8080-p?q HTTP/1.1\r\nHost: x\r\n\r\nOPTIONS * HTTP/1.1\r\n\r\n"),
            [200, 200]
        );
    }
}
