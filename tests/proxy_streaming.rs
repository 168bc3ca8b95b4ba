//! Bodies stream through the proxy: a 1 GiB upload and a 1 GiB download pass with the right
//! byte count while the proxy's peak resident memory stays small.

use std::time::{Duration, Instant};

use http::Method;
use lb_testkit::{client, single_backend, ProxyProcess, TestServer};

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
