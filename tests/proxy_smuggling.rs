//! Request smuggling: every request shape two HTTP parsers could read differently is refused
//! with 400 (431 for an oversized header section), the connection is closed, and nothing of it
//! (nor what was hidden behind it) reaches a server.

use std::time::Duration;

use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::{single_backend, ProxyProcess, TestServer};

fn start(server: &TestServer) -> ProxyProcess {
    let head =
        "defaults:\n  max_header_size: 8k\n  timeouts: { connect: 1s, client: 5s, server: 5s, http_request: 5s }\n";
    ProxyProcess::start_with(1, single_backend(head, "", ("s1", server.addr())))
}

/// The request smuggled behind each attack: it must never reach the server.
const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n";

/// Sends `attack`, expects one response with a status in `statuses`, then the connection closed
/// with nothing more; and the server must have seen no request at all. Every deviation is
/// reported at once, so that a failure tells the whole story.
async fn assert_refused(proxy: &ProxyProcess, server: &TestServer, what: &str, attack: &[u8], statuses: &[u16]) {
    server.clear_requests();
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(attack).await.expect("send the attack");
    let mut problems = Vec::new();
    match conn.read_response(Duration::from_secs(10)).await {
        Ok(r) if statuses.contains(&r.status) => {}
        Ok(r) => problems.push(format!("got {} instead of {statuses:?}: {}", r.status, r.text())),
        Err(e) => problems.push(format!("expected a {statuses:?} response: {e:#}")),
    }
    let (rest, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    if !rest.is_empty() {
        problems.push(format!("more was sent after the first response: {:?}", String::from_utf8_lossy(&rest)));
    }
    if ending == Ending::Open {
        problems.push("the connection was left open".to_owned());
    }
    let seen = server.requests();
    if !seen.is_empty() {
        problems.push(format!(
            "the server received {:?}",
            seen.iter().map(|r| format!("{} {}", r.method, r.path)).collect::<Vec<_>>()
        ));
    }
    assert!(problems.is_empty(), "{what}:\n  {}", problems.join("\n  "));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn content_length_then_transfer_encoding_is_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    // CL.TE: a front end reading Content-Length forwards the smuggled request as body.
    let attack = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    assert_refused(&proxy, &s1, "Content-Length then Transfer-Encoding", attack.as_bytes(), &[400]).await;
    let line = proxy.wait_for_log(|l| l.contains(" 400 ")).await;
    assert!(HttpLogLine::parse(&line).is_some_and(|l| l.status == 400), "{line}");
}

/// The same conflict pipelined behind requests the proxy serves (one with a chunked body, sent
/// in one write with it): those are answered, the conflicting one is refused and the connection
/// closed, and neither it nor what it hides reaches the server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pipelined_conflict_is_refused_too() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let attack = format!(
        "GET /first HTTP/1.1\r\nHost: x\r\n\r\n\
         POST /second HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n\
         POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(attack.as_bytes()).await.expect("send");
    let mut statuses = Vec::new();
    for _ in 0..3 {
        match conn.read_response(Duration::from_secs(10)).await {
            Ok(r) => statuses.push(r.status),
            Err(e) => panic!("after {statuses:?}: expected a response: {e:#}"),
        }
    }
    assert_eq!(statuses, [200, 200, 400]);
    let (rest, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert!(rest.is_empty(), "more after the refusal: {:?}", String::from_utf8_lossy(&rest));
    assert_ne!(ending, Ending::Open, "the connection is closed after the refusal");
    let seen: Vec<String> = s1.requests().iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    assert_eq!(seen, ["GET /first", "POST /second"], "what reached the server");
}

/// An upgrade the server does not grant leaves an HTTP connection: the conflict pipelined behind
/// it is refused like any other (an `Upgrade` header must not switch the checks off).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_conflict_behind_a_refused_upgrade_is_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let attack = format!(
        "GET /first HTTP/1.1\r\nHost: x\r\nConnection: upgrade\r\nUpgrade: x-nothing\r\n\r\n\
         POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(attack.as_bytes()).await.expect("send");
    let first = conn.read_response(Duration::from_secs(10)).await.expect("the first response");
    assert_eq!(first.status, 200, "the upgrade is not granted: {}", first.text());
    let second = conn.read_response(Duration::from_secs(10)).await.expect("the second response");
    assert_eq!(second.status, 400, "{}", second.text());
    let (_, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_ne!(ending, Ending::Open, "the connection is closed after the refusal");
    let seen: Vec<String> = s1.requests().iter().map(|r| format!("{} {}", r.method, r.path)).collect();
    assert_eq!(seen, ["GET /first"], "what reached the server");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_then_content_length_is_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    // TE.CL: a back end reading Content-Length takes the chunked framing as the body.
    let attack = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 40\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    assert_refused(&proxy, &s1, "Transfer-Encoding then Content-Length", attack.as_bytes(), &[400]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicting_content_lengths_are_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let attack =
        format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!{SMUGGLED}");
    assert_refused(&proxy, &s1, "two different Content-Length", attack.as_bytes(), &[400]).await;
    let attack = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 6\r\n\r\nhello!{SMUGGLED}");
    assert_refused(&proxy, &s1, "Content-Length: 5, 6", attack.as_bytes(), &[400]).await;
    let attack = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello{SMUGGLED}");
    assert_refused(&proxy, &s1, "Content-Length: +5", attack.as_bytes(), &[400]).await;
    let attack = format!("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: -1\r\n\r\n{SMUGGLED}");
    assert_refused(&proxy, &s1, "Content-Length: -1", attack.as_bytes(), &[400]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transfer_encoding_other_than_chunked_is_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let attack =
        format!("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n{SMUGGLED}");
    assert_refused(&proxy, &s1, "Transfer-Encoding: gzip, chunked", attack.as_bytes(), &[400]).await;
    let attack = format!(
        "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n{SMUGGLED}"
    );
    assert_refused(&proxy, &s1, "two Transfer-Encoding headers", attack.as_bytes(), &[400]).await;
    let attack = format!("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n{SMUGGLED}");
    assert_refused(&proxy, &s1, "Transfer-Encoding: xchunked", attack.as_bytes(), &[400]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_chunk_size_smuggles_nothing() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    // The head is valid, so the request may already be on its way to the server when the bad
    // chunk size arrives; what must never happen is the smuggled request being served.
    let attack = format!("POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{SMUGGLED}");
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(attack.as_bytes()).await.expect("send");
    let (bytes, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    let text = String::from_utf8_lossy(&bytes);
    assert_ne!(ending, Ending::Open, "the connection is closed after a bad chunk: got {text:?}");
    assert!(!text.contains(" 200 "), "no 200 after a bad chunk size: {text:?}");
    assert_eq!(s1.hits_for("/smuggled"), 0, "the smuggled request reached the server");
    if !text.is_empty() {
        assert!(text.starts_with("HTTP/1.1 400 ") || text.starts_with("HTTP/1.1 502 "), "{text:?}");
    }
}

/// Chunk lines that end in a bare LF (after the size, inside an extension, after the data, on
/// the last chunk) and a `0x` size: parsers that read them differently are how chunked bodies
/// smuggle requests ("funky chunks"). Each is refused and the request hidden behind it is never
/// served; a chunk extension written correctly is accepted and ignored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunk_lines_with_a_bare_lf_smuggle_nothing() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let vectors: [(&str, &str); 6] = [
        ("bare LF after the size", "2\nxx\r\n0\r\n\r\n"),
        ("LF in an extension", "2;\nxx\r\n0\r\n\r\n"),
        ("LF in a quoted extension", "2;a=\"b\nc\"\r\nxx\r\n0\r\n\r\n"),
        ("bare LF after the data", "2\r\nxx\n0\r\n\r\n"),
        ("bare LF on the last chunk", "0\n\r\n"),
        ("a 0x size", "0x2\r\nxx\r\n0\r\n\r\n"),
    ];
    for (what, body) in vectors {
        let attack = format!("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n{body}{SMUGGLED}");
        let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
        conn.send(attack.as_bytes()).await.expect("send");
        let (bytes, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
        let text = String::from_utf8_lossy(&bytes);
        assert_ne!(ending, Ending::Open, "{what}: the connection is closed: got {text:?}");
        assert!(text.starts_with("HTTP/1.1 400 ") || text.starts_with("HTTP/1.1 502 "), "{what}: {text:?}");
        assert!(!text.contains(" 200 "), "{what}: {text:?}");
        assert_eq!(s1.hits_for("/smuggled"), 0, "{what}: the smuggled request reached the server");
    }

    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2;a=b\r\nxx\r\n0\r\n\r\n")
        .await
        .expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.text().contains(r#""body":"xx""#), "the extension dropped, the data kept: {}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_header_section_is_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let big = "a".repeat(20 * 1024);
    let attack = format!("GET /big HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n");
    assert_refused(&proxy, &s1, "a 20 KiB header with max_header_size 8k", attack.as_bytes(), &[400, 431]).await;
    // Many small headers over the limit too.
    let many: String = (0..600).map(|i| format!("X-H{i}: value-{i}\r\n")).collect();
    let attack = format!("GET /many HTTP/1.1\r\nHost: x\r\n{many}\r\n");
    assert_refused(&proxy, &s1, "600 headers", attack.as_bytes(), &[400, 431]).await;
    let line = proxy.wait_for_log(|l| l.contains("<BADREQ>")).await;
    assert!(HttpLogLine::parse(&line).is_some(), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn header_section_under_the_limit_is_accepted() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    // 6 KiB of headers with max_header_size 8k: a legitimate large request passes.
    let big = "b".repeat(6 * 1024);
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(format!("GET /echo HTTP/1.1\r\nHost: x\r\nX-Big: {big}\r\n\r\n")).await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(s1.hits_for("/echo"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_header_lines_are_refused() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    assert_refused(
        &proxy,
        &s1,
        "a space in a header name",
        b"GET /x HTTP/1.1\r\nHost: x\r\nBad Header: x\r\n\r\n",
        &[400],
    )
    .await;
    assert_refused(
        &proxy,
        &s1,
        "space before the colon",
        b"GET /x HTTP/1.1\r\nHost: x\r\nContent-Length : 5\r\n\r\nhello",
        &[400],
    )
    .await;
    assert_refused(
        &proxy,
        &s1,
        "obsolete line folding",
        b"GET /x HTTP/1.1\r\nHost: x\r\nX-A: a\r\n  folded\r\n\r\n",
        &[400],
    )
    .await;
    assert_refused(
        &proxy,
        &s1,
        "a header line without colon",
        b"GET /x HTTP/1.1\r\nHost: x\r\nNoColon\r\n\r\n",
        &[400],
    )
    .await;
    assert_refused(&proxy, &s1, "garbage request line", b"GARBAGE\r\n\r\n", &[400]).await;
    let line = proxy.wait_for_log(|l| l.contains("<BADREQ>")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.status, parsed.server.as_str()), (400, "<NOSRV>"), "{line}");
}
