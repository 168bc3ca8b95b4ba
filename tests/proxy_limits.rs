//! Connection limits: at a frontend's (or the global) limit a new connection waits in the
//! kernel's backlog — connected, unanswered, never reset — until a slot frees; a server's
//! `max_connections` queues requests instead of exceeding it. Body limits: a request body past
//! the frontend's `max_body_size` is answered 413 and the connection closed, an announced one
//! before it reaches the server.

use std::time::Duration;

use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

fn config(global: &str, frontend: &str, server_extra: &str, server: &TestServer) -> impl Fn(&[u16]) -> String {
    let (global, frontend, server_extra, addr) =
        (global.to_owned(), frontend.to_owned(), server_extra.to_owned(), server.addr());
    move |ports: &[u16]| {
        format!(
            r#"global:
{global}
defaults:
  timeouts: {{ connect: 1s, client: 20s, server: 20s, http_request: 20s, http_keep_alive: 20s }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
{frontend}
backends:
  - name: be
    servers:
      - {{ name: s1, address: "{addr}"{server_extra} }}
"#,
            fe = ports[0]
        )
    }
}

/// With a limit of 2 connections: two slow requests in flight, then a third connection.
async fn third_connection_waits_for_a_free_slot(proxy: &ProxyProcess, s1: &TestServer) {
    let addr = proxy.addr();
    let slow: Vec<_> = (0..2).map(|_| tokio::spawn(async move { client::get(addr, "/slow?ms=2500").await })).collect();
    assert!(wait_until(Duration::from_secs(10), || s1.in_flight() == 2).await, "two slow requests in flight");

    let mut third = RawConn::connect(addr).await.expect("the third connection is connected (kernel backlog)");
    third.send(b"GET /third HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("send");
    // While both slots are taken: no answer, no reset, and nothing reaches the server.
    let (early, ending) = third.read_until_closed(Duration::from_millis(800)).await;
    assert!(early.is_empty(), "the third connection was answered at the limit: {:?}", String::from_utf8_lossy(&early));
    assert_eq!(ending, Ending::Open, "the third connection must wait, not be closed or reset");
    assert_eq!(s1.hits_for("/third"), 0, "the third request reached the server while the limit was reached");
    assert_eq!(s1.in_flight(), 2);

    // The slow requests finish and close their connections: the third is served.
    let r =
        third.read_response(Duration::from_secs(15)).await.expect("the third connection is served once a slot frees");
    assert_eq!(r.status, 200, "{}", r.text());
    for task in slow {
        let r = task.await.expect("task").expect("slow request");
        assert_eq!(r.status, 200);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_max_connections_holds_the_third_connection_until_a_slot_frees() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config("  max_connections: 1000", "    max_connections: 2", "", &s1));
    third_connection_waits_for_a_free_slot(&proxy, &s1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn global_max_connections_holds_the_third_connection_until_a_slot_frees() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config("  max_connections: 2", "", "", &s1));
    third_connection_waits_for_a_free_slot(&proxy, &s1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn server_max_connections_queues_requests_beyond_it() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config("  max_connections: 1000", "", ", max_connections: 1", &s1));
    let addr = proxy.addr();
    let tasks: Vec<_> =
        (0..3).map(|i| tokio::spawn(async move { client::get(addr, &format!("/slow?ms=400&i={i}")).await })).collect();
    let mut statuses = Vec::new();
    for task in tasks {
        let r = task.await.expect("task").expect("request");
        statuses.push(r.status);
    }
    assert_eq!(
        statuses,
        [200, 200, 200],
        "requests beyond a server's max_connections wait for it (queued), they do not fail"
    );
    assert_eq!(s1.peak_in_flight(), 1, "the server never had more than max_connections (1) requests at once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_max_body_size_is_answered_413() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config("  max_connections: 1000", "    max_body_size: 2k", "", &s1));
    let addr = proxy.addr();

    // At the limit: served.
    let body = "a".repeat(2048);
    let mut conn = RawConn::connect(addr).await.expect("connect");
    conn.send(format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2048\r\n\r\n{body}")).await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response");
    assert_eq!(r.status, 200, "a body of max_body_size is served: {}", r.text());

    // Announced past it: refused before the server sees anything, the connection closed.
    let mut conn = RawConn::connect(addr).await.expect("connect");
    conn.send("POST /announced HTTP/1.1\r\nHost: x\r\nContent-Length: 2049\r\n\r\n").await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response");
    assert_eq!(r.status, 413, "{}", r.text());
    let (_, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_ne!(ending, Ending::Open, "the connection is closed: the body was not read");
    assert_eq!(s1.hits_for("/announced"), 0, "a refused announced body never reaches the server");
    let line = proxy.wait_for_log(|l| l.contains("/announced")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str()), (413, "PR--"), "{line}");

    // Chunked, so unannounced: stopped once past the limit (to a server that reads the body
    // before answering, so that its answer cannot come first).
    let chunk = format!("400\r\n{}\r\n", "b".repeat(1024));
    let mut conn = RawConn::connect(addr).await.expect("connect");
    conn.send(format!(
        "POST /echo?chunked HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{chunk}{chunk}{chunk}"
    ))
    .await
    .expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response");
    assert_eq!(r.status, 413, "{}", r.text());
    let (_, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_ne!(ending, Ending::Open, "the connection is closed");
    let line = proxy.wait_for_log(|l| l.contains("/echo?chunked")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str()), (413, "PR--"), "{line}");
}

/// The same limit on HTTP/2 streams (prior knowledge): an announced body past it is refused
/// before the server sees it; an unannounced one is cut once past it. Both answered 413 on the
/// stream and logged `PR--`.
///
/// The 413s are read with nghttp, not curl: an answer that comes before the upload ends is
/// followed by RST_STREAM(NO_ERROR) for the rest of the body (RFC 9113 §8.1), and curl 7.88
/// (Debian 12's) then reports the stream closed instead of the answer when the reset arrives
/// before its upload ends: against haproxy 2.6 answering 413 the same way, in 61 of 200 tries.
/// nghttp reads the answer, as the RFC asks of a client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_max_body_size_is_answered_413_on_http2_too() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config("  max_connections: 1000", "    max_body_size: 2k", "", &s1));
    let dir = tempfile::tempdir().expect("tempdir");
    let (small, large) = (dir.path().join("small"), dir.path().join("large"));
    std::fs::write(&small, "a".repeat(2048)).expect("write");
    std::fs::write(&large, "b".repeat(3072)).expect("write");
    let base = format!("http://{}", proxy.addr());
    // The response's `:status` as nghttp received it on the stream (HTTP/2 prior knowledge).
    let post = |path: &str, file: &std::path::Path, extra: &[&str]| {
        let out = std::process::Command::new("nghttp")
            .args(["-nv", "-d"])
            .arg(file)
            .args(extra)
            .arg(format!("{base}{path}"))
            .output()
            .expect("nghttp");
        let text = String::from_utf8_lossy(&out.stdout);
        let status = text.lines().find_map(|l| l.split_once(":status: ").map(|(_, s)| s.trim().to_string()));
        status.unwrap_or_else(|| format!("none: {text}"))
    };

    assert_eq!(post("/echo?h2-small", &small, &[]), "200", "a body of max_body_size is served");
    assert_eq!(post("/h2-announced", &large, &[]), "413", "announced past the limit");
    assert_eq!(s1.hits_for("/h2-announced"), 0, "a refused announced body never reaches the server");
    let line = proxy.wait_for_log(|l| l.contains("/h2-announced")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str()), (413, "PR--"), "{line}");

    // Without content-length: the stream's DATA frames alone say how long the body is (under
    // the limit, the server sees the body chunked: curl really announced nothing).
    let data = format!("@{}", small.display());
    let echoed = lb_testkit::sclient::curl(
        &format!("{base}/echo?h2-nolength"),
        &["--http2-prior-knowledge", "--data-binary", data.as_str(), "-H", "content-length:"],
    )
    .body;
    assert!(echoed.contains("\"transfer-encoding\",\"chunked\""), "sent without a length: {echoed}");
    assert_eq!(post("/echo?h2-unannounced", &large, &["--no-content-length"]), "413", "cut past the limit");
    let line = proxy.wait_for_log(|l| l.contains("/echo?h2-unannounced")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.termination.as_str()), (413, "PR--"), "{line}");
}
