//! Connections that end in the middle of a message, on either side: a client or a server that
//! resets mid-body, a client that half-closes after its request. What a user relies on: the other
//! side learns of it at once (no request or response silently completed with missing bytes), the
//! line in the access log says who ended it (HAProxy's termination codes), a server connection
//! that carried half a body is never reused for the next request, and the proxy keeps serving.

use std::net::SocketAddr;
use std::time::Duration;

use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::{single_backend, wait_until, ProxyProcess, TestServer};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

const WITHIN: Duration = Duration::from_secs(10);

fn proxy_for(server: SocketAddr) -> ProxyProcess {
    ProxyProcess::start_with(1, single_backend("global: { worker_threads: 1 }\n", "", ("s1", server)))
}

/// The access-log line of the request whose request line contains `path`.
async fn logged(proxy: &ProxyProcess, path: &str) -> HttpLogLine {
    let line = proxy.wait_for_log(|l| l.contains(path)).await;
    HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not an httplog line: {line}"))
}

async fn get_ok(proxy: &ProxyProcess, path: &str) -> lb_testkit::raw::RawResponse {
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n")).await.expect("send");
    let response = conn.read_response(WITHIN).await.expect("a response");
    assert_eq!(response.status, 200, "{}", response.text());
    response
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_mid_upload_reaches_the_server_and_its_connection_is_not_reused() {
    let server = TestServer::start("s1");
    let proxy = proxy_for(server.addr());
    // Warm a pooled server connection, so that reuse would be possible.
    get_ok(&proxy, "/warm").await;
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send("POST /upload HTTP/1.1\r\nHost: t\r\nContent-Length: 100000\r\n\r\n").await.expect("head");
    conn.send(vec![b'x'; 30_000]).await.expect("part of the body");
    assert!(wait_until(WITHIN, || server.hits_for("/upload") == 1).await, "the upload reached the server");
    conn.reset();
    let line = logged(&proxy, "POST /upload").await;
    assert!(line.termination.starts_with("CD"), "a client abort in the data phase: {line:?}");
    // The server connection that carried 30,000 of 100,000 bytes is closed, not handed to the
    // next request (which would then be read as the rest of the body).
    get_ok(&proxy, "/after").await;
    let requests = server.requests();
    let upload = requests.iter().find(|r| r.path == "/upload").expect("upload recorded");
    let after = requests.iter().find(|r| r.path == "/after").expect("next request recorded");
    assert_ne!(after.connection, upload.connection, "the aborted upload's server connection was reused");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_half_closes_after_its_request_still_gets_the_response() {
    let server = TestServer::start("s1");
    let proxy = proxy_for(server.addr());
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send("GET /slow?ms=300 HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("send");
    // As `curl` or a shell script piping into `nc -N` do: nothing more to say, waiting.
    conn.shutdown_write().await.expect("half-close");
    let response = conn.read_response(WITHIN).await.expect("the response, after the half-close");
    assert_eq!(response.status, 200);
    assert_eq!(response.text(), "s1");
    let line = logged(&proxy, "GET /slow").await;
    assert_eq!(line.status, 200, "{line:?}");
}

/// A server that answers every request with the head of a 100,000-byte response and 1,000 bytes
/// of it, then resets the connection.
async fn resetting_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                if lb_testkit::raw::read_request_head(&mut stream).await.is_none() {
                    return;
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n").await;
                let _ = stream.write_all(&[b'y'; 1000]).await;
                let _ = stream.flush().await;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = socket2::SockRef::from(&stream).set_linger(Some(Duration::ZERO));
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_reset_mid_response_ends_the_client_connection_and_is_logged() {
    let server = resetting_server().await;
    let proxy = proxy_for(server);
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send("GET /big HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("send");
    let (bytes, ending) = conn.read_until_closed(WITHIN).await;
    // The head went on before the reset: the client must see the connection end short of the
    // announced length, never a complete-looking response.
    assert_ne!(ending, Ending::Open, "the client connection must end when the server's does");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("HTTP/1.1 200"), "{text:.200}");
    let body = bytes.len() - text.find("\r\n\r\n").map_or(0, |i| i + 4);
    assert!(body < 100_000, "the body cannot be complete: {body} bytes");
    let line = logged(&proxy, "GET /big").await;
    assert!(line.termination.starts_with("SD"), "a server abort in the data phase: {line:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_reset_mid_download_frees_the_server_side_and_the_proxy_goes_on() {
    let server = TestServer::start("s1");
    let proxy = proxy_for(server.addr());
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send("GET /bytes?n=100000000 HTTP/1.1\r\nHost: t\r\n\r\n").await.expect("send");
    // Read nothing: the socket buffers on the way fill and the proxy waits on the client.
    assert!(wait_until(WITHIN, || server.hits_for("/bytes") == 1).await, "the download started");
    tokio::time::sleep(Duration::from_millis(300)).await;
    conn.reset();
    let line = logged(&proxy, "GET /bytes").await;
    assert!(line.termination.starts_with("CD"), "a client abort in the data phase: {line:?}");
    assert!(line.bytes < 100_000_000, "not the whole body: {line:?}");
    // The server's connection for that download is closed too (it was mid-body): nothing keeps
    // streaming 100 MB into a dead client.
    assert!(wait_until(WITHIN, || server.open_connections() == 0).await, "{} open", server.open_connections());
    get_ok(&proxy, "/after").await;
}
