//! Bodies stream through the proxy: a 1 GiB upload and a 1 GiB download pass with the right
//! byte count while the proxy's peak resident memory stays small. And how a response leaves for
//! the client when the server writes its head and its body apart: together when the head
//! announced the body's length (one segment, as HAProxy sends it), the head on its own when the
//! body is late (never held back until it comes), and at once for a chunked stream. A server's
//! response head is bounded as a request's is (`max_header_size`): the same bound keeps what a
//! streaming exchange holds small.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use http::Method;
use lb_testkit::{client, single_backend, ProxyProcess, TestServer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const GIB: u64 = 1024 * 1024 * 1024;
/// The proxy's peak RSS (VmHWM) must stay under this whatever the body size.
const MAX_RSS_KIB: u64 = 64 * 1024;
/// Loopback moves 1 GiB through a debug build in well under this.
const TRANSFER_TIMEOUT: Duration = Duration::from_secs(120);

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    single_backend("defaults:\n  timeouts: { connect: 2s, client: 30s, server: 30s }\n", "", ("s1", server.addr()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upload_of_1_gib_streams_with_bounded_memory() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    let started = Instant::now();
    let r = client::upload(proxy.addr(), Method::PUT, "/upload", GIB, TRANSFER_TIMEOUT)
        .await
        .expect("a 1 GiB PUT through the proxy");
    let took = started.elapsed();
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.text(), GIB.to_string(), "the server received every byte");
    let peak = proxy.peak_rss_kib().expect("VmHWM of the proxy");
    assert!(peak < MAX_RSS_KIB, "lb-proxy's peak RSS was {peak} KiB during a 1 GiB upload (limit {MAX_RSS_KIB} KiB)");
    eprintln!("1 GiB upload in {took:?}, proxy peak RSS {peak} KiB");
    let line = proxy.wait_for_log(|l| l.contains("PUT /upload")).await;
    assert!(line.contains(" 200 "), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn download_of_1_gib_streams_with_bounded_memory() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    let started = Instant::now();
    let (status, n) = client::download(proxy.addr(), &format!("/bytes?n={GIB}"), TRANSFER_TIMEOUT)
        .await
        .expect("a 1 GiB GET through the proxy");
    let took = started.elapsed();
    assert_eq!(status, 200);
    assert_eq!(n, GIB, "every byte arrived");
    let peak = proxy.peak_rss_kib().expect("VmHWM of the proxy");
    assert!(peak < MAX_RSS_KIB, "lb-proxy's peak RSS was {peak} KiB during a 1 GiB download (limit {MAX_RSS_KIB} KiB)");
    eprintln!("1 GiB download in {took:?}, proxy peak RSS {peak} KiB");
    // The log counts the bytes sent to the client: the body and the response head.
    let line = proxy.wait_for_log(|l| l.contains("GET /bytes")).await;
    let parsed = lb_testkit::log::HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert!(parsed.bytes >= GIB && parsed.bytes < GIB + 4096, "bytes_read {} for a 1 GiB body: {line}", parsed.bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_upload_with_chunked_body_is_counted() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    // A chunked POST of 8 MiB written by hand, in many chunks.
    let mut conn = lb_testkit::raw::RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n").await.expect("send head");
    let chunk = vec![b'z'; 64 * 1024];
    for _ in 0..128 {
        conn.send(format!("{:x}\r\n", chunk.len())).await.expect("chunk size");
        conn.send(&chunk).await.expect("chunk");
        conn.send(b"\r\n").await.expect("chunk end");
    }
    conn.send(b"0\r\n\r\n").await.expect("last chunk");
    let r = conn.read_response(Duration::from_secs(30)).await.expect("response");
    assert_eq!(r.status, 200);
    assert_eq!(r.text(), (128 * 64 * 1024).to_string());
}

/// A server that answers each request with `head`, then, `gap` later, `body`; it reports when it
/// wrote the body.
async fn server_writing_apart(
    head: &'static str,
    gap: Duration,
    body: &'static str,
) -> (SocketAddr, tokio::sync::mpsc::UnboundedReceiver<Instant>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let (wrote, body_written) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let wrote = wrote.clone();
            tokio::spawn(async move {
                if lb_testkit::raw::read_request_head(&mut stream).await.is_none() {
                    return;
                }
                let _ = stream.set_nodelay(true);
                let _ = stream.write_all(head.as_bytes()).await;
                tokio::time::sleep(gap).await;
                let _ = stream.write_all(body.as_bytes()).await;
                let _ = wrote.send(Instant::now());
                let mut rest = [0u8; 64];
                let _ = stream.read(&mut rest).await; // until the proxy closes
            });
        }
    });
    (addr, body_written)
}

/// The client's first read after its request: whatever arrived first, and when.
async fn first_read(proxy: SocketAddr) -> (String, Instant, TcpStream) {
    let mut conn = TcpStream::connect(proxy).await.expect("connect");
    conn.set_nodelay(true).expect("nodelay");
    conn.write_all(b"GET /apart HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("send");
    let mut buf = vec![0u8; 4096];
    let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
        .await
        .expect("a response within 10 s")
        .expect("read");
    (String::from_utf8_lossy(&buf[..n]).into_owned(), Instant::now(), conn)
}

fn apart_config(server: SocketAddr) -> impl Fn(&[u16]) -> String {
    single_backend("defaults:\n  timeouts: { connect: 2s, client: 30s, server: 30s }\n", "", ("s1", server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_and_its_announced_body_written_apart_reach_the_client_together() {
    // 50 ms apart: long enough for the proxy to read and forward the head alone, well within
    // the time the kernel holds a partial segment (at least 200 ms).
    let (server, _) =
        server_writing_apart("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Duration::from_millis(50), "hello").await;
    let proxy = ProxyProcess::start_with(1, apart_config(server));
    for _ in 0..3 {
        let (first, _, _) = first_read(proxy.addr()).await;
        assert!(first.starts_with("HTTP/1.1 200"), "{first}");
        assert!(first.ends_with("\r\n\r\nhello"), "the head came without its body: {first:?}");
    }
    let line = proxy.wait_for_log(|l| l.contains("GET /apart")).await;
    assert!(line.contains(" 200 "), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_head_whose_body_is_late_is_not_held_until_the_body_comes() {
    let (server, mut body_written) =
        server_writing_apart("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n", Duration::from_millis(1500), "hello")
            .await;
    let proxy = ProxyProcess::start_with(1, apart_config(server));
    let (first, head_at, mut conn) = first_read(proxy.addr()).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    assert!(first.ends_with("\r\n\r\n"), "the head alone first: {first:?}");
    let written = body_written.recv().await.expect("the server wrote the body");
    assert!(head_at < written, "the head was held until the body came");
    let mut body = [0u8; 5];
    tokio::time::timeout(Duration::from_secs(10), conn.read_exact(&mut body))
        .await
        .expect("the body within 10 s")
        .expect("read the body");
    assert_eq!(&body, b"hello");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_head_goes_at_once() {
    // A stream of events (chunked, no length) must not wait for its first event: 150 ms apart,
    // less than the kernel would hold a head sent as "more to come", so a held head would
    // arrive with the event.
    let (server, mut body_written) = server_writing_apart(
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        Duration::from_millis(150),
        "5\r\nevent\r\n0\r\n\r\n",
    )
    .await;
    let proxy = ProxyProcess::start_with(1, apart_config(server));
    let (first, head_at, _conn) = first_read(proxy.addr()).await;
    assert!(first.starts_with("HTTP/1.1 200"), "{first}");
    let written = body_written.recv().await.expect("the server wrote the event");
    assert!(head_at < written, "the head of a chunked stream waited for its first chunk: {first:?}");
}

/// A response head with one header of `size` bytes and a five-byte body.
fn head_of(size: usize) -> &'static str {
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Big: {}\r\n\r\n", "a".repeat(size));
    Box::leak(head.into_boxed_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_response_head_is_bounded_by_the_largest_max_header_size() {
    // The bound that keeps a streaming exchange's buffers small (HAProxy's one bufsize for both
    // directions): heads under the largest frontend's `max_header_size` pass, larger ones are
    // the server's fault (502), never a buffer grown without end.
    for (defaults, size, status) in
        [("", 12 * 1024, "200"), ("", 20 * 1024, "502"), ("  max_header_size: 32k\n", 20 * 1024, "200")]
    {
        let (server, _) = server_writing_apart(head_of(size), Duration::ZERO, "hello").await;
        let defaults = format!("defaults:\n  timeouts: {{ connect: 2s, client: 30s, server: 30s }}\n{defaults}");
        let proxy = ProxyProcess::start_with(1, single_backend(&defaults, "", ("s1", server)));
        let (first, _, mut conn) = first_read(proxy.addr()).await;
        assert!(
            first.starts_with(&format!("HTTP/1.1 {status}")),
            "a {size}-byte header with `{defaults}`: {}",
            &first[..first.len().min(200)]
        );
        let line = proxy.wait_for_log(|l| l.contains("GET /apart")).await;
        assert!(line.contains(&format!(" {status} ")), "{line}");
        assert_eq!(line.contains(" SH-- "), status == "502", "a server's oversized head is its error: {line}");
        if status == "200" {
            // The rest of the head and the body.
            let mut rest = first.into_bytes();
            let mut buf = vec![0u8; 64 * 1024];
            while !rest.ends_with(b"\r\n\r\nhello") {
                let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
                    .await
                    .expect("within 10 s")
                    .expect("read");
                assert!(n > 0, "closed before the body");
                rest.extend_from_slice(&buf[..n]);
            }
        }
    }
}
