//! PROXY protocol v1 and v2 on `accept_proxy` binds: the header's source is the client (in
//! X-Forwarded-For and the log), its SSL TLV means https, a missing or malformed header closes
//! the connection without a response, and the bytes after the header are all delivered. The
//! same bind takes lb-tls's multiplexed hop: each stream a connection, its facts from the PROXY
//! header its OPEN carries.

use std::net::SocketAddr;
use std::time::Duration;

use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::{self, Ending, RawConn};
use lb_testkit::{single_backend, ProxyProcess, TestServer};

/// Frontend `fe` with two binds: ports[0] requires a PROXY header, ports[1] does not.
fn start(server: &TestServer) -> ProxyProcess {
    let addr = server.addr();
    ProxyProcess::start_with(2, move |ports| {
        format!(
            r#"defaults:
  timeouts: {{ connect: 1s, client: 5s, server: 5s, http_request: 2s }}
frontends:
  - name: fe
    bind:
      - {{ address: "127.0.0.1:{p}", accept_proxy: true }}
      - "127.0.0.1:{plain}"
    default_backend: be
backends:
  - name: be
    servers:
      - {{ name: s1, address: "{addr}" }}
"#,
            p = ports[0],
            plain = ports[1]
        )
    })
}

const REQUEST: &[u8] = b"GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";

fn echo_header<'a>(echo: &'a serde_json::Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_array()
        .expect("header list")
        .iter()
        .filter(|p| p[0] == name)
        .filter_map(|p| p[1].as_str())
        .collect()
}

/// Sends `header` and a request in one write; returns the echo JSON.
async fn through(proxy: &ProxyProcess, header: &[u8]) -> serde_json::Value {
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let mut bytes = header.to_vec();
    bytes.extend_from_slice(REQUEST);
    conn.send(&bytes).await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response after a valid PROXY header");
    assert_eq!(r.status, 200, "{}", r.text());
    serde_json::from_slice(&r.body).expect("echo JSON")
}

fn sa(text: &str) -> SocketAddr {
    text.parse().expect("a socket address")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_header_gives_the_client_address() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let echo = through(&proxy, &raw::proxy_v1(sa("192.0.2.10:40000"), proxy.addr())).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["192.0.2.10"]);
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"]);
    let line = proxy.wait_for_log(|l| l.contains("GET /echo")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.client_ip.as_deref(), parsed.client_port), (Some("192.0.2.10"), Some(40000)), "{line}");

    let echo = through(&proxy, &raw::proxy_v1(sa("[2001:db8::7]:4443"), sa("[2001:db8::1]:443"))).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["2001:db8::7"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_header_gives_the_client_address() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let echo = through(&proxy, &raw::proxy_v2(sa("198.51.100.20:50000"), proxy.addr(), &[])).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["198.51.100.20"]);
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["http"], "no SSL TLV: plain http");
    let line = proxy.wait_for_log(|l| l.contains("GET /echo")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.client_ip.as_deref(), parsed.client_port), (Some("198.51.100.20"), Some(50000)), "{line}");

    let echo = through(&proxy, &raw::proxy_v2(sa("[2001:db8::42]:1234"), sa("[2001:db8::1]:443"), &[])).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["2001:db8::42"]);
    let line = proxy.wait_for_log(|l| l.contains("2001:db8::42:1234 ")).await;
    assert!(HttpLogLine::parse(&line).is_some(), "an IPv6 client is logged HAProxy's way (no brackets): {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_ssl_tlv_makes_x_forwarded_proto_https() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let header = raw::proxy_v2(sa("203.0.113.5:61000"), proxy.addr(), &[raw::tlv_ssl("TLSv1.3")]);
    let echo = through(&proxy, &header).await;
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["https"]);
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["203.0.113.5"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v2_local_command_keeps_the_socket_address() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let echo = through(&proxy, &raw::proxy_v2_local()).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["127.0.0.1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_header_closes_the_connection_without_response() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(REQUEST).await.expect("send a request without PROXY header");
    let (bytes, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert!(bytes.is_empty(), "no response without a PROXY header: {:?}", String::from_utf8_lossy(&bytes));
    assert_ne!(ending, Ending::Open, "the connection is closed");
    // A client that sends nothing at all is closed too (after the header wait).
    let mut silent = RawConn::connect(proxy.addr()).await.expect("connect");
    let (bytes, ending) = silent.read_until_closed(Duration::from_secs(10)).await;
    assert!(bytes.is_empty() && ending != Ending::Open, "{ending:?} {bytes:?}");
    assert_eq!(s1.traffic(), 0);

    // The bind without accept_proxy serves the same request.
    let plain = SocketAddr::from(([127, 0, 0, 1], proxy.ports()[1]));
    let mut conn = RawConn::connect(plain).await.expect("connect");
    conn.send(REQUEST).await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response on the plain bind");
    assert_eq!(r.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_headers_close_the_connection() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let mut v2_bad_version = raw::proxy_v2(sa("198.51.100.1:1000"), proxy.addr(), &[]);
    v2_bad_version[12] = 0x31; // version 3
    let mut v2_bad_family = raw::proxy_v2(sa("198.51.100.1:1000"), proxy.addr(), &[]);
    v2_bad_family[13] = 0x71; // no such family
    let mut v2_short = raw::proxy_v2(sa("198.51.100.1:1000"), proxy.addr(), &[]);
    v2_short[15] = 4; // announces fewer bytes than two IPv4 addresses and ports
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("v1 with a bad address", b"PROXY TCP4 999.0.0.1 127.0.0.1 1000 80\r\n".to_vec()),
        ("v1 missing fields", b"PROXY TCP4 192.0.2.1\r\n".to_vec()),
        ("v1 with a bad port", b"PROXY TCP4 192.0.2.1 127.0.0.1 70000 80\r\n".to_vec()),
        ("v1 ending in LF only", b"PROXY TCP4 192.0.2.1 127.0.0.1 1000 80\n".to_vec()),
        ("v1 mixing families", b"PROXY TCP4 2001:db8::1 127.0.0.1 1000 80\r\n".to_vec()),
        ("v1 longer than 107 bytes", format!("PROXY TCP4 {}\r\n", "1".repeat(120)).into_bytes()),
        ("v1 lowercase", b"proxy TCP4 192.0.2.1 127.0.0.1 1000 80\r\n".to_vec()),
        ("v2 with version 3", v2_bad_version),
        ("v2 with an unknown family", v2_bad_family),
        ("v2 with a truncated address block", v2_short),
    ];
    for (what, header) in cases {
        let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
        let mut bytes = header.clone();
        bytes.extend_from_slice(REQUEST);
        // The proxy may close before reading everything: a failed write is fine.
        let _ = conn.send(&bytes).await;
        let (got, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
        assert!(got.is_empty(), "{what}: no response expected, got {:?}", String::from_utf8_lossy(&got));
        assert_ne!(ending, Ending::Open, "{what}: the connection must be closed");
    }
    assert_eq!(s1.traffic(), 0, "nothing reached the server: {:?}", s1.requests());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_after_the_header_is_not_lost() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);

    // Header and two pipelined requests (the second with a body) in one segment.
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let mut bytes = raw::proxy_v2(sa("192.0.2.99:5555"), proxy.addr(), &[raw::tlv_ssl("TLSv1.2")]);
    bytes.extend_from_slice(
        b"GET /one HTTP/1.1\r\nHost: x\r\n\r\nPOST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 4\r\n\r\nbody",
    );
    conn.send(&bytes).await.expect("send");
    let first = conn.read_response(Duration::from_secs(10)).await.expect("first response");
    assert_eq!((first.status, first.text().as_str()), (200, "s1"));
    let second = conn.read_response(Duration::from_secs(10)).await.expect("second response");
    let echo: serde_json::Value = serde_json::from_slice(&second.body).expect("echo JSON");
    assert_eq!(echo["body"], "body");
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["192.0.2.99"]);

    // A v1 header arriving in pieces, the last piece carrying the request's first bytes.
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"PROXY TCP4 192.0.2.").await.expect("send");
    tokio::time::sleep(Duration::from_millis(50)).await;
    conn.send(b"77 127.0.0.1 6000 80\r\nGET /ec").await.expect("send");
    tokio::time::sleep(Duration::from_millis(50)).await;
    conn.send(b"ho HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo JSON");
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["192.0.2.77"]);
    assert_eq!(echo["path"], "/echo");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontend_level_accept_proxy_applies_to_every_bind() {
    let s1 = TestServer::start("s1");
    let addr = s1.addr();
    let proxy = ProxyProcess::start_with(1, single_backend("", "accept_proxy: true\ntls: true", ("s1", addr)));
    let echo = through(&proxy, &raw::proxy_v1(sa("192.0.2.55:1111"), proxy.addr())).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["192.0.2.55"]);
    assert_eq!(echo_header(&echo, "x-forwarded-proto"), ["https"], "tls: true frontend");
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(REQUEST).await.expect("send");
    let (bytes, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert!(bytes.is_empty() && ending != Ending::Open, "no header: closed without response ({ending:?})");
}

/// A hop stream's whole answer to a request that closes its connection.
async fn ask_on_hop(client: &lb_supervisor::hop::HopClient, header: &[u8]) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = client.open(header).expect("a stream on the hop");
    stream.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("request");
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 10 s")?;
    Ok(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multiplexed_hop_serves_each_stream_as_a_connection_with_its_own_facts() {
    let s1 = TestServer::start("s1");
    let proxy = start(&s1);
    let socket = tokio::net::TcpStream::connect(proxy.addr()).await.expect("connect");
    let (client, driver) = lb_supervisor::hop::connect(socket);
    let driver = tokio::spawn(driver);
    let clients = ["192.0.2.1:1001", "192.0.2.2:1002", "[2001:db8::3]:1003"];
    let answers = futures_util::future::join_all(clients.iter().map(|c| {
        let to = if c.starts_with('[') { sa("[2001:db8::1]:443") } else { proxy.addr() };
        let header = raw::proxy_v2(sa(c), to, &[raw::tlv_ssl("TLSv1.3")]);
        let client = &client;
        async move { ask_on_hop(client, &header).await.expect("an answer") }
    }))
    .await;
    for (c, answer) in clients.iter().zip(&answers) {
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        let ip = sa(c).ip().to_string();
        assert!(answer.contains(&format!("[\"x-forwarded-for\",\"{ip}\"]")), "{c}: {answer}");
        assert!(answer.contains("[\"x-forwarded-proto\",\"https\"]"), "{answer}");
        let line = proxy.wait_for_log(|l| l.contains(&format!("{ip}:{} ", sa(c).port()))).await;
        assert!(HttpLogLine::parse(&line).is_some(), "{line}");
    }
    // A stream without a usable header is closed alone without an answer (reset when its
    // request had arrived unread), as a connection without one is; the hop serves on.
    let refused = ask_on_hop(&client, b"").await;
    let closed = match &refused {
        Ok(answer) => answer.is_empty(),
        Err(e) => e.kind() == std::io::ErrorKind::ConnectionReset,
    };
    assert!(closed, "{refused:?}");
    let answer = ask_on_hop(&client, &raw::proxy_v1(sa("192.0.2.9:9"), proxy.addr())).await.expect("an answer");
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    // The plain PROXY header still works on the same bind.
    let echo = through(&proxy, &raw::proxy_v2(sa("198.51.100.20:50000"), proxy.addr(), &[])).await;
    assert_eq!(echo_header(&echo, "x-forwarded-for"), ["198.51.100.20"]);
    drop(client);
    tokio::time::timeout(Duration::from_secs(10), driver)
        .await
        .expect("the hop closes once its client is gone")
        .expect("driver task")
        .expect("a clean end");
}
