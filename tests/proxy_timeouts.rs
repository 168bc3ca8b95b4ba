//! Timeouts: connect (503 sC), server (504 sH), http_request (408), http_keep_alive (idle
//! connections closed, never one whose request is arriving), client (a stalled request body).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::{client, single_backend, Blackhole, ProxyProcess, TestServer};

fn config(server: SocketAddr, timeouts: &str) -> impl Fn(&[u16]) -> String {
    single_backend(&format!("defaults:\n  retries: 1\n  timeouts: {timeouts}\n"), "", ("s1", server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_timeout_gives_504_logged_sh() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 10s, server: 500ms, http_request: 5s, http_keep_alive: 5s }"),
    );
    let started = Instant::now();
    let r = client::get(proxy.addr(), "/slow?ms=20000").await.expect("request");
    assert_eq!(r.status, 504, "{}", r.text());
    assert!(started.elapsed() < Duration::from_secs(10), "the 504 came only after {:?}", started.elapsed());
    let line = proxy.wait_for_log(|l| l.contains("/slow")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str(), parsed.server.as_str()), (504, "sH--", "s1"), "{line}");
    assert_eq!(parsed.tresp, -1, "no response headers were received: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_timeout_gives_503_logged_sc() {
    let hole = Blackhole::start();
    let proxy = ProxyProcess::start_with(
        1,
        config(hole.addr(), "{ connect: 300ms, client: 10s, server: 10s, http_request: 5s, http_keep_alive: 5s }"),
    );
    let r = client::get(proxy.addr(), "/unreachable").await.expect("request");
    assert_eq!(r.status, 503, "{}", r.text());
    let line = proxy.wait_for_log(|l| l.contains("/unreachable")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str()), (503, "sC--"), "{line}");
    assert_eq!(parsed.retries, 1, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incomplete_request_header_gets_408() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 10s, server: 10s, http_request: 500ms, http_keep_alive: 5s }"),
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /half HTTP/1.1\r\nHost: x\r\nX-Partial: ").await.expect("send half a header");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a 408 response");
    assert_eq!(r.status, 408, "{}", r.text());
    let (_, ending) = conn.read_until_closed(Duration::from_secs(5)).await;
    assert_eq!(ending, Ending::Eof, "the connection is closed after the 408");
    assert_eq!(s1.traffic(), 0);
    let line = proxy.wait_for_log(|l| l.contains(" 408 ")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.request.as_str(), parsed.server.as_str()), ("<BADREQ>", "<NOSRV>"), "{line}");
    assert_eq!(parsed.termination, "cR--", "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_keep_alive_connection_is_closed_after_http_keep_alive() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 10s, server: 10s, http_request: 5s, http_keep_alive: 600ms }"),
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert_eq!(r.status, 200);
    let idle_since = Instant::now();
    let (rest, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    let idle = idle_since.elapsed();
    assert_eq!(ending, Ending::Eof, "the idle connection is closed cleanly (FIN), within 10 s");
    assert!(rest.is_empty(), "nothing is sent on an idle close: {:?}", String::from_utf8_lossy(&rest));
    assert!(idle >= Duration::from_millis(500), "closed after {idle:?}, before http_keep_alive (600ms)");
    assert!(
        idle < Duration::from_secs(5),
        "closed after {idle:?}, not after http_keep_alive (600ms) but client/http_request (5s+)"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_timeout_never_cuts_a_request_being_sent() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 10s, server: 10s, http_request: 5s, http_keep_alive: 600ms }"),
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /first HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("send");
    assert_eq!(conn.read_response(Duration::from_secs(10)).await.expect("response").status, 200);
    // Idle for a while, then start the next request before the keep-alive timeout…
    tokio::time::sleep(Duration::from_millis(300)).await;
    conn.send(b"GET /second HTTP/1.1\r\n").await.expect("send the request line");
    // …and finish it well after the keep-alive timeout would have expired (still within
    // http_request, which governs a request once it has begun).
    tokio::time::sleep(Duration::from_millis(900)).await;
    conn.send(b"Host: x\r\n\r\n").await.expect("send the rest of the header");
    let r = conn
        .read_response(Duration::from_secs(10))
        .await
        .expect("the request begun before the keep-alive timeout is answered");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s1.hits_for("/second"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_request_body_is_cut_by_the_client_timeout() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 600ms, server: 10s, http_request: 5s, http_keep_alive: 5s }"),
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n0123456789")
        .await
        .expect("send the start of the body");
    // Then nothing: within a few seconds the proxy answers 408 or closes; it never forwards a
    // complete request or answers 200.
    let (bytes, ending) = conn.read_until_closed(Duration::from_secs(8)).await;
    let text = String::from_utf8_lossy(&bytes);
    let status = text.split(' ').nth(1).unwrap_or("");
    assert!(
        (status == "408" && text.starts_with("HTTP/1.1 ")) || (bytes.is_empty() && ending != Ending::Open),
        "expected a 408 or a closed connection, got {ending:?} with {text:?}"
    );
    assert_ne!(ending, Ending::Open, "the connection is not left open with a stalled body");
    let uploads: Vec<_> = s1.requests().into_iter().filter(|r| r.path == "/upload").collect();
    assert!(uploads.len() <= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_trickled_byte_by_byte_still_gets_408_at_http_request() {
    // http_request bounds the whole header section, however steadily its bytes arrive.
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(s1.addr(), "{ connect: 1s, client: 10s, server: 10s, http_request: 800ms, http_keep_alive: 5s }"),
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let header = format!("GET /trickle HTTP/1.1\r\nHost: x\r\nX-Long: {}\r\n\r\n", "z".repeat(100));
    let started = Instant::now();
    let mut answered = Vec::new();
    for byte in header.as_bytes() {
        if conn.send([*byte]).await.is_err() {
            break;
        }
        answered = conn.read_for(Duration::from_millis(50)).await;
        if !answered.is_empty() || started.elapsed() > Duration::from_secs(6) {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answered);
    assert!(
        text.starts_with("HTTP/1.1 408 "),
        "a trickled header section gets 408 at http_request, got {text:?} after {:?}",
        started.elapsed()
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the 408 came after {:?} (http_request 800ms)",
        started.elapsed()
    );
    assert_eq!(s1.traffic(), 0);
}
