//! The load generator against canned servers: every outcome classified as it happened.

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use tokio::net::TcpListener;

/// A server misbehaving on purpose, by path: `/ok` (keep-alive), `/close` (Connection:
/// close), `/drop` (closes without answering), `/cut` (half a body), `/error` (503),
/// `/chunked`, `/eof-body` (body delimited by the end of the connection).
async fn server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buf = Vec::new();
                loop {
                    let mut chunk = [0u8; 4096];
                    let Ok(n) = stream.read(&mut chunk).await else { return };
                    if n == 0 {
                        return;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                    let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else { continue };
                    let head = String::from_utf8_lossy(&buf[..end]).into_owned();
                    buf.drain(..end + 4);
                    let path = head.split_whitespace().nth(1).unwrap_or("").to_owned();
                    let reply: &[u8] = match path.as_str() {
                        "/ok" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
                        "/close" => b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
                        "/drop" => return,
                        "/cut" => b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\nhalf",
                        "/error" => b"HTTP/1.1 503 Unavailable\r\nContent-Length: 0\r\n\r\n",
                        "/chunked" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
                        "/eof-body" => b"HTTP/1.1 200 OK\r\n\r\nuntil the end",
                        _ => b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n",
                    };
                    if stream.write_all(reply).await.is_err() {
                        return;
                    }
                    if matches!(path.as_str(), "/close" | "/cut" | "/eof-body") {
                        return;
                    }
                }
            });
        }
    });
    addr
}

async fn load(addr: SocketAddr, path: &str, keep_alive: bool) -> Report {
    let mut spec = LoadSpec::new(addr, Duration::from_secs(10));
    spec.path = path.to_owned();
    spec.new_connection_clients = usize::from(!keep_alive);
    spec.keep_alive_clients = usize::from(keep_alive);
    spec.pause = Duration::ZERO;
    spec.max_requests = Some(5);
    spec.timeout = Duration::from_secs(5);
    run(spec).await
}

#[tokio::test]
async fn every_outcome_is_told_apart() {
    let addr = server().await;
    let r = load(addr, "/ok", true).await;
    assert_eq!((r.keep_alive.ok, r.keep_alive.connections, r.failed()), (5, 1, 0), "{r}");
    // A clean Connection: close is no failure: the client reconnects.
    let r = load(addr, "/close", true).await;
    assert_eq!(
        (r.keep_alive.ok, r.keep_alive.connections, r.keep_alive.closed_by_server, r.failed()),
        (5, 5, 5, 0),
        "{r}"
    );
    let r = load(addr, "/drop", true).await;
    assert_eq!((r.keep_alive.reset, r.failed()), (5, 5), "{r}");
    let r = load(addr, "/cut", false).await;
    assert_eq!((r.new_connection.truncated, r.failed()), (5, 5), "{r}");
    let r = load(addr, "/error", true).await;
    assert_eq!((r.keep_alive.server_error, r.failed()), (5, 5), "{r}");
    let r = load(addr, "/missing", false).await;
    assert_eq!((r.new_connection.other_status, r.failed()), (5, 5), "{r}");
    let r = load(addr, "/chunked", true).await;
    assert_eq!((r.keep_alive.ok, r.keep_alive.connections, r.failed()), (5, 1, 0), "{r}");
    let r = load(addr, "/eof-body", true).await;
    assert_eq!((r.keep_alive.ok, r.keep_alive.connections, r.failed()), (5, 5, 0), "{r}");
}

#[tokio::test]
async fn a_port_nobody_listens_on_is_refused() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = listener.local_addr().expect("addr");
    drop(listener);
    let r = load(addr, "/", false).await;
    assert_eq!((r.new_connection.refused, r.failed()), (5, 5), "{r}");
}

#[tokio::test]
async fn keep_alive_on_a_connection_closed_between_requests_is_a_reset() {
    // Answers the first request on each connection, keeps it open (no Connection: close),
    // then closes it as soon as the next request arrives, without answering: the race a
    // draining proxy must never lose.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                if stream.read(&mut chunk).await.unwrap_or(0) == 0 {
                    return;
                }
                let _ = stream.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok").await;
                let _ = stream.read(&mut chunk).await;
            });
        }
    });
    let r = load(addr, "/", true).await;
    assert_eq!(r.keep_alive.ok + r.keep_alive.reset, 5, "{r}");
    assert!(r.keep_alive.reset >= 2, "{r}");
    assert!(
        r.failures.iter().all(|f| matches!(&f.outcome, Outcome::Reset(m) if m.contains("before any response byte"))),
        "{r}"
    );
}
