//! HTTP/2 towards clients, with real HTTP/2 clients (curl, nghttp, h2load, hyper's): prior
//! knowledge on a plain listener next to HTTP/1.1, ALPN `h2` through lb-tls; every stream a
//! request to an HTTP/1.1 server with the usual headers and its own log line; the limits
//! announced in SETTINGS; a drain's GOAWAY lets open streams finish; and reloads under a
//! multiplexing load lose no stream.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_testkit::client::{self, H2Connection};
use lb_testkit::log::HttpLogLine;
use lb_testkit::sclient::curl;
use lb_testkit::{single_backend, wait_until, ProxyProcess, TestServer, TlsChain};

fn proxy_for(server: &TestServer, frontend: &str) -> ProxyProcess {
    let head = "defaults:\n  timeouts: { client: 10s, server: 10s }\n";
    ProxyProcess::start_with(1, single_backend(head, frontend, ("s1", server.addr())))
}

/// `-w` output of curl: the HTTP version and status.
const VERSION_AND_STATUS: &[&str] = &["-o", "/dev/null", "-w", "%{http_version} %{http_code}"];

fn h2load(url: &str, args: &[&str]) -> String {
    let out = std::process::Command::new("h2load")
        .args(args)
        .arg(url)
        .output()
        .expect("h2load (nghttp2-client: scripts/install-deps test)");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prior_knowledge_and_http1_share_a_plain_listener() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(&s1, "http2: { max_concurrent_streams: 7 }");
    let url = format!("http://{}/echo?x=1", proxy.addr());

    let h2 = curl(&url, &["--http2-prior-knowledge", "-H", "cookie: a=1", "-H", "cookie: b=2"]);
    assert_eq!(h2.code, Some(0), "{h2:?}");
    let seen = s1.requests().pop().expect("the server saw the request");
    assert_eq!(seen.header("host"), Some(proxy.addr().to_string().as_str()), "Host from :authority: {seen:?}");
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"), "{seen:?}");
    assert_eq!(seen.header("cookie"), Some("a=1; b=2"), "cookies joined for HTTP/1.1: {seen:?}");
    let line = proxy.wait_for_log(|l| l.contains("HTTP/2.0")).await;
    let line = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((line.request.as_str(), line.status, line.server.as_str()), ("GET /echo?x=1 HTTP/2.0", 200, "s1"));
    assert!(line.bytes > 0, "{line:?}");

    let h1 = curl(&url, VERSION_AND_STATUS);
    assert_eq!(h1.body, "1.1 200", "HTTP/1.1 on the same listener: {h1:?}");
    let h2 = curl(&url, &["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]);
    assert_eq!(h2.body, "2 200", "{h2:?}");

    // The limit is announced in SETTINGS.
    let out = std::process::Command::new("nghttp").args(["-nv", &url]).output().expect("nghttp");
    let out = String::from_utf8_lossy(&out.stdout);
    assert!(out.contains("[SETTINGS_MAX_CONCURRENT_STREAMS(0x03):7]"), "{out}");

    // Many streams at once on few connections, all answered.
    let report = h2load(&format!("http://{}/", proxy.addr()), &["-n", "600", "-c", "3", "-m", "7"]);
    assert!(report.contains("600 succeeded, 0 failed, 0 errored"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alpn_h2_through_lb_tls() {
    let s1 = TestServer::start("s1");
    let TlsChain { proxy, tls, certs: _certs } = TlsChain::start(s1.addr(), "[ h2, http/1.1 ]");
    let url = format!("https://{}/echo", tls.addr());

    let h2 = curl(&url, &["-k", "--http2", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]);
    assert_eq!(h2.body, "2 200", "{h2:?}");
    let seen = s1.requests().pop().expect("the server saw the request");
    assert_eq!(seen.header("x-forwarded-proto"), Some("https"), "{seen:?}");
    assert_eq!(seen.header("x-forwarded-for"), Some("127.0.0.1"), "the client's address from PROXY v2: {seen:?}");
    let line = proxy.wait_for_log(|l| l.contains("HTTP/2.0")).await;
    assert!(line.contains("\"GET /echo HTTP/2.0\""), "{line}");
    let h1 = curl(&url, &["-k", "--http1.1", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]);
    assert_eq!(h1.body, "1.1 200", "a client that offers only http/1.1: {h1:?}");

    let report = h2load(&format!("https://{}/", tls.addr()), &["-n", "1000", "-c", "4", "-m", "10"]);
    assert!(report.contains("Application protocol: h2"), "{report}");
    assert!(report.contains("1000 succeeded, 0 failed, 0 errored"), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_sends_goaway_and_lets_open_streams_finish() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(&s1, "");
    let first = proxy.current_worker().await.expect("a worker");
    let conn = H2Connection::open(proxy.addr()).await.expect("h2c");
    assert_eq!(conn.get("/").await.expect("GET").status, 200);

    // Five slow streams open at once, then a reload.
    let slow: Vec<_> = (0..5)
        .map(|_| {
            let conn = conn.clone();
            tokio::spawn(async move { conn.get("/slow?ms=1500").await })
        })
        .collect();
    assert!(
        wait_until(Duration::from_secs(5), || s1.requests().iter().filter(|r| r.path == "/slow").count() == 5).await
    );
    let reloaded = proxy.reload().await.expect("reload");
    for stream in slow {
        let r = stream.await.expect("task").expect("a stream open before the drain is answered");
        assert_eq!(r.status, 200);
    }
    // GOAWAY: this connection takes no new stream and closes once its streams are done.
    assert!(wait_until(Duration::from_secs(5), || conn.is_closed()).await, "GOAWAY, then closed");
    // The next connection is the new worker's.
    let again = H2Connection::open(proxy.addr()).await.expect("h2c again");
    assert_eq!(again.get("/after").await.expect("GET").status, 200);
    let line = proxy.wait_for_log(|l| l.contains("GET /after HTTP/2.0")).await;
    let line = HttpLogLine::parse(&line).expect("httplog");
    assert_eq!(line.pid, reloaded.pid, "served by the new worker");
    // The old worker's lines come from its own log writer (batches every 10 ms), so they may
    // follow the new worker's: wait for them, each of the five from the old worker.
    let slow_lines = || {
        let log = proxy.access_log();
        log.iter().filter(|l| l.contains("GET /slow?ms=1500 HTTP/2.0") && l.contains(&format!("[{first}]"))).count()
    };
    assert!(wait_until(Duration::from_secs(5), || slow_lines() == 5).await, "{} of 5 lines", slow_lines());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_under_a_multiplexing_load_lose_no_stream() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(&s1, "");
    let addr = proxy.addr();
    let (done, failed, refused) =
        (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let kinds = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::<&'static str, usize>::new()));
    let end = Instant::now() + Duration::from_secs(4);
    // Ten clients, each with ten streams at a time on one connection; a client whose connection
    // said GOAWAY opens the next one, as browsers do. A stream that never left the client (its
    // connection was closing) or was refused unprocessed (REFUSED_STREAM) is counted apart, and
    // the server's own count shows none of them reached it; anything else but a 200 fails.
    let clients: Vec<_> = (0..10)
        .map(|_| {
            let (done, failed, refused, kinds) = (done.clone(), failed.clone(), refused.clone(), kinds.clone());
            tokio::spawn(async move {
                while Instant::now() < end {
                    let Ok(conn) = H2Connection::open(addr).await else {
                        failed.fetch_add(1, Ordering::Relaxed);
                        continue;
                    };
                    while Instant::now() < end && !conn.is_closed() {
                        let wave: Vec<_> = (0..10)
                            .map(|_| {
                                let conn = conn.clone();
                                tokio::spawn(async move { conn.get("/").await })
                            })
                            .collect();
                        for stream in wave {
                            match stream.await.expect("task") {
                                Ok(r) if r.status == 200 => done.fetch_add(1, Ordering::Relaxed),
                                // Never sent (the connection had said GOAWAY), or refused
                                // unprocessed: a browser sends it again on its next connection.
                                Err(e) if unprocessed(&e) => {
                                    // Which kind, for the failure message: if the server's
                                    // count disagrees, one of these kinds was not unprocessed.
                                    *kinds.lock().expect("kinds").entry(unprocessed_kind(&e)).or_insert(0) += 1;
                                    refused.fetch_add(1, Ordering::Relaxed)
                                }
                                other => {
                                    eprintln!("failed stream: {other:?}");
                                    failed.fetch_add(1, Ordering::Relaxed)
                                }
                            };
                        }
                    }
                }
            })
        })
        .collect();
    let mut reloads = 0;
    while Instant::now() + Duration::from_millis(300) < end {
        tokio::time::sleep(Duration::from_millis(200)).await;
        proxy.reload().await.expect("reload");
        reloads += 1;
    }
    for c in clients {
        c.await.expect("client");
    }
    let (done, failed, refused) =
        (done.load(Ordering::Relaxed), failed.load(Ordering::Relaxed), refused.load(Ordering::Relaxed));
    eprintln!("{reloads} reloads: {done} streams answered, {refused} refused unprocessed, {failed} failed");
    assert!(reloads >= 10, "{reloads}");
    assert!(done > 1000, "{done}");
    assert_eq!(failed, 0, "not one stream lost through {reloads} reloads");
    let reached = s1.requests().iter().filter(|r| r.path == "/").count();
    assert_eq!(
        reached,
        done,
        "every stream that reached the server was answered, none twice (unprocessed, by kind: {:?})",
        kinds.lock().expect("kinds")
    );
}

/// A stream the server never processed (RFC 9113 §6.8): hyper's client never sent it (its
/// connection was closing), the h2 client held it back or it was above the last stream GOAWAY
/// named ("connection error received: not a result of an error" is GOAWAY's NO_ERROR), or the
/// server refused it (REFUSED_STREAM). The test's server-side count checks the claim.
fn unprocessed(e: &anyhow::Error) -> bool {
    !unprocessed_kind(e).is_empty()
}

/// Which of [`unprocessed`]'s kinds `e` is ("" if none).
fn unprocessed_kind(e: &anyhow::Error) -> &'static str {
    let text = format!("{e:#}");
    ["operation was canceled", "not ready", "REFUSED_STREAM", "not a result of an error"]
        .into_iter()
        .find(|s| text.contains(s))
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frontend_without_http2_speaks_http1_only() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(&s1, "http2: { enabled: false }");
    let url = format!("http://{}/", proxy.addr());
    let h2 = curl(&url, &["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]);
    assert_ne!(h2.body, "2 200", "{h2:?}");
    // The preface met the HTTP/1 parser, which refused it as a bad request, and no server saw it.
    let line = proxy.wait_for_log(|l| l.contains("<BADREQ>")).await;
    let line = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((line.status, line.termination.as_str()), (400, "PR--"), "{line:?}");
    assert!(s1.requests().is_empty(), "{:?}", s1.requests());
    assert_eq!(client::get(proxy.addr(), "/").await.expect("HTTP/1.1").status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_connection_is_closed_even_after_a_stream_the_client_reset() {
    let s1 = TestServer::start("s1");
    // (The frontend's extra settings go where `http2:` would.)
    let proxy = proxy_for(&s1, "timeouts: { http_keep_alive: 1s }");
    let conn = H2Connection::open(proxy.addr()).await.expect("h2c");
    assert_eq!(conn.get("/").await.expect("GET").status, 200);
    // A slow stream, reset by the client half-way (the task dropped: RST_STREAM CANCEL).
    let slow = {
        let conn = conn.clone();
        tokio::spawn(async move { conn.get("/slow?ms=3000").await })
    };
    assert!(wait_until(Duration::from_secs(5), || s1.requests().iter().any(|r| r.path == "/slow")).await);
    slow.abort();
    // No stream open any more: the idle timeout closes the connection (GOAWAY).
    assert!(wait_until(Duration::from_secs(5), || conn.is_closed()).await, "closed after http_keep_alive");
}
