//! TCP mode: bytes both ways unchanged, half-close, tcplog lines, retries to a live server.

use std::time::Duration;

use lb_testkit::log::TcpLogLine;
use lb_testkit::raw::{self, Ending, RawConn};
use lb_testkit::{free_port, ProxyProcess, TcpEchoServer, ECHO_TRAILER};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

fn config(servers: &str, fe_extra: &str) -> impl Fn(&[u16]) -> String {
    let (servers, fe_extra) = (servers.to_owned(), fe_extra.to_owned());
    move |ports: &[u16]| {
        format!(
            r#"defaults:
  mode: tcp
  retries: 3
  redispatch: true
  timeouts: {{ connect: 1s, client: 10s, server: 10s }}
frontends:
  - name: tcp_in
    bind: ["127.0.0.1:{fe}"]
    default_backend: echo
{fe_extra}
backends:
  - name: echo
    balance: roundrobin
    servers:
{servers}"#,
            fe = ports[0]
        )
    }
}

fn echo_servers(echo: &TcpEchoServer) -> String {
    format!("      - {{ name: e1, address: \"{}\" }}\n", echo.addr())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_pass_both_ways_unchanged() {
    let echo = TcpEchoServer::start();
    let proxy = ProxyProcess::start_with(1, config(&echo_servers(&echo), ""));
    let stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    let (mut rd, mut wr) = stream.into_split();

    // 4 MiB of every byte value, written while reading back (so neither side's buffers fill).
    let data: Vec<u8> = (0..4 * 1024 * 1024u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8).collect();
    let sent = data.clone();
    let writer = tokio::spawn(async move {
        for chunk in sent.chunks(100_000) {
            wr.write_all(chunk).await.expect("write");
        }
        wr.shutdown().await.expect("half-close");
    });
    let mut received = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), rd.read_to_end(&mut received))
        .await
        .expect("the echo ends within 60 s")
        .expect("read");
    writer.await.expect("writer");
    assert_eq!(received.len(), data.len() + ECHO_TRAILER.len());
    assert!(received[..data.len()] == data[..], "the bytes came back unchanged");
    assert_eq!(&received[data.len()..], ECHO_TRAILER);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_close_keeps_the_other_direction_open() {
    let echo = TcpEchoServer::start();
    let proxy = ProxyProcess::start_with(1, config(&echo_servers(&echo), ""));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"hello").await.expect("send");
    conn.shutdown_write().await.expect("shut down our writing side");
    // The server sees our end of stream (through the proxy), and only then writes its trailer:
    // the proxy must pass the FIN on and keep carrying the server's data back.
    let (got, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_eq!(String::from_utf8_lossy(&got), format!("hello{}", String::from_utf8_lossy(ECHO_TRAILER)));
    assert_eq!(ending, Ending::Eof, "closed cleanly once the server is done");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_connection_writes_a_tcplog_line() {
    let echo = TcpEchoServer::start();
    let proxy = ProxyProcess::start_with(1, config(&echo_servers(&echo), ""));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let client_port = conn.local_addr().port();
    conn.send(b"0123456789").await.expect("send");
    conn.shutdown_write().await.expect("half-close");
    let (got, _) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_eq!(got.len(), 10 + ECHO_TRAILER.len());

    let line = proxy.wait_for_log(|l| l.contains(" tcp_in ")).await;
    let parsed = TcpLogLine::parse(&line).unwrap_or_else(|| panic!("not a strict tcplog line: {line}"));
    assert_eq!((parsed.client_ip.as_deref(), parsed.client_port), (Some("127.0.0.1"), Some(client_port)), "{line}");
    assert_eq!((parsed.frontend.as_str(), parsed.backend.as_str(), parsed.server.as_str()), ("tcp_in", "echo", "e1"));
    assert_eq!(parsed.bytes, got.len() as u64, "bytes_read is what the client received: {line}");
    assert_eq!(parsed.termination, "--", "{line}");
    assert!(parsed.tc >= 0 && parsed.tt >= parsed.tc, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_failures_are_retried_on_another_server() {
    let echo = TcpEchoServer::start();
    let dead = free_port();
    let servers = format!("      - {{ name: dead, address: \"127.0.0.1:{dead}\" }}\n{}", echo_servers(&echo));
    let proxy = ProxyProcess::start_with(1, config(&servers, ""));
    for i in 0..6 {
        let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
        conn.send(format!("ping {i}")).await.expect("send");
        conn.shutdown_write().await.expect("half-close");
        let (got, _) = conn.read_until_closed(Duration::from_secs(10)).await;
        assert_eq!(String::from_utf8_lossy(&got), format!("ping {i}<eof>"), "connection {i}");
    }
    let lines = proxy.wait_for_log_lines(6).await;
    let parsed: Vec<TcpLogLine> = lines.iter().map(|l| TcpLogLine::parse(l).unwrap_or_else(|| panic!("{l}"))).collect();
    assert!(parsed.iter().all(|l| l.server == "e1"), "{lines:#?}");
    assert!(parsed.iter().any(|l| l.retries > 0), "some connections were retried: {lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_header_client_appears_in_the_tcplog_and_is_not_forwarded() {
    let echo = TcpEchoServer::start();
    let proxy = ProxyProcess::start_with(1, config(&echo_servers(&echo), "    accept_proxy: true"));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let mut bytes = raw::proxy_v2("192.0.2.44:4444".parse().expect("addr"), proxy.addr(), &[]);
    bytes.extend_from_slice(b"payload");
    conn.send(&bytes).await.expect("send");
    conn.shutdown_write().await.expect("half-close");
    let (got, _) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert_eq!(String::from_utf8_lossy(&got), "payload<eof>", "the header is consumed, the data after it kept");
    let line = proxy.wait_for_log(|l| l.contains(" tcp_in ")).await;
    let parsed = TcpLogLine::parse(&line).unwrap_or_else(|| panic!("not tcplog: {line}"));
    assert_eq!((parsed.client_ip.as_deref(), parsed.client_port), (Some("192.0.2.44"), Some(4444)), "{line}");
}
