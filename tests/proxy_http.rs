//! HTTP mode basics: HTTP/1.0 and 1.1 clients, keep-alive, forwarding headers, hop-by-hop
//! headers, routing by path prefix and Host, request bodies.

use std::time::Duration;

use http::Method;
use lb_testkit::client::{self, Connection};
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::{ProxyProcess, TestServer};

/// One frontend `fe` → backend `be` (round robin) over `servers`; `fe_extra` is added to the
/// frontend (indented YAML lines).
fn one_backend(servers: &[&TestServer], fe_extra: &str) -> impl Fn(&[u16]) -> String {
    let servers: String =
        servers.iter().map(|s| format!("      - {{ name: {}, address: \"{}\" }}\n", s.name(), s.addr())).collect();
    let fe_extra = fe_extra.to_owned();
    move |ports: &[u16]| {
        format!(
            r#"global:
  log: {{ target: stdout, format: haproxy }}
defaults:
  mode: http
  timeouts: {{ connect: 2s, client: 10s, server: 10s, http_request: 5s, http_keep_alive: 5s }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
{fe_extra}
backends:
  - name: be
    balance: roundrobin
    servers:
{servers}"#,
            fe = ports[0]
        )
    }
}

fn header_values<'a>(echo: &'a serde_json::Value, name: &str) -> Vec<&'a str> {
    echo["headers"]
        .as_array()
        .expect("echo has a header list")
        .iter()
        .filter(|pair| pair[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .filter_map(|pair| pair[1].as_str())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http11_request_reaches_the_server_with_forwarding_headers() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));

    let r = client::get(proxy.addr(), "/echo?x=1").await.expect("GET /echo through the proxy");
    assert_eq!(r.status, 200, "{}", r.text());
    assert_eq!(r.server(), Some("s1"));
    let echo = r.json();
    assert_eq!(echo["method"], "GET");
    assert_eq!(echo["path"], "/echo");
    assert_eq!(echo["query"], "x=1");
    assert_eq!(echo["version"], "HTTP/1.1");
    assert_eq!(header_values(&echo, "x-forwarded-for"), ["127.0.0.1"], "X-Forwarded-For is the client's IP");
    assert_eq!(header_values(&echo, "x-forwarded-proto"), ["http"]);
    assert_eq!(header_values(&echo, "host"), [proxy.addr().to_string().as_str()], "Host is kept as sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_is_appended_to_what_the_client_sent() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));
    let mut req = client::get_request(proxy.addr(), "/echo");
    req.headers_mut().insert("x-forwarded-for", "203.0.113.7".parse().expect("header value"));
    let r = client::send(proxy.addr(), req).await.expect("GET /echo");
    assert_eq!(r.status, 200);
    let echo = r.json();
    let xff = header_values(&echo, "x-forwarded-for").join(", ");
    assert_eq!(xff, "203.0.113.7, 127.0.0.1", "the proxy's client is appended, the client's value kept first");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_frontend_sets_x_forwarded_proto_https() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], "    tls: true"));
    let r = client::get(proxy.addr(), "/echo").await.expect("GET /echo");
    assert_eq!(r.status, 200);
    assert_eq!(header_values(&r.json(), "x-forwarded-proto"), ["https"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_client_gets_an_answer_and_the_connection_closes() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));

    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /echo HTTP/1.0\r\nHost: example.com\r\n\r\n").await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("a response to an HTTP/1.0 request");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-server"), Some("s1"));
    let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo JSON");
    assert_eq!(echo["path"], "/echo");
    assert_eq!(header_values(&echo, "x-forwarded-for"), ["127.0.0.1"]);
    // HTTP/1.0 without keep-alive: one request per connection.
    let (rest, ending) = conn.read_until_closed(Duration::from_secs(10)).await;
    assert!(rest.is_empty(), "nothing after the response: {:?}", String::from_utf8_lossy(&rest));
    assert_eq!(ending, Ending::Eof, "the proxy closes an HTTP/1.0 connection after the response");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http10_keep_alive_connection_carries_two_requests() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    for path in ["/one", "/two"] {
        conn.send(format!("GET {path} HTTP/1.0\r\nHost: example.com\r\nConnection: keep-alive\r\n\r\n"))
            .await
            .expect("send");
        let r = conn.read_response(Duration::from_secs(10)).await.expect("a response");
        assert_eq!(r.status, 200);
        assert_eq!(r.text(), "s1");
    }
    assert_eq!(s1.hits_for("/one"), 1);
    assert_eq!(s1.hits_for("/two"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_connection_carries_many_requests() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));

    let mut conn = Connection::open(proxy.addr()).await.expect("connect");
    let mut server_connections = Vec::new();
    for i in 0..10 {
        let r = conn.get(&format!("/echo?i={i}")).await.expect("a request on the kept-alive connection");
        assert_eq!(r.status, 200);
        let echo = r.json();
        assert_eq!(echo["query"], format!("i={i}"));
        server_connections.push(echo["connection"].as_u64().expect("connection id"));
        assert!(!conn.is_closed(), "the proxy keeps the client connection open after request {i}");
    }
    assert_eq!(s1.hits_for("/echo"), 10);
    // http_reuse: never — one server connection per client connection, used for all requests.
    server_connections.dedup();
    assert_eq!(server_connections.len(), 1, "all requests of one client connection use one server connection");

    // Pipelined requests on a raw connection are answered in order.
    let mut raw = RawConn::connect(proxy.addr()).await.expect("connect");
    raw.send(
        b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nGET /b HTTP/1.1\r\nHost: x\r\n\r\nGET /echo?c HTTP/1.1\r\nHost: x\r\n\r\n",
    )
    .await
    .expect("send pipelined");
    for _ in 0..2 {
        let r = raw.read_response(Duration::from_secs(10)).await.expect("a pipelined response");
        assert_eq!((r.status, r.text().as_str()), (200, "s1"));
    }
    let r = raw.read_response(Duration::from_secs(10)).await.expect("the third pipelined response");
    assert_eq!(r.status, 200);
    assert!(r.text().contains("\"query\":\"c\""), "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_not_forwarded_either_way() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));

    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(
        "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: keep-alive, X-Private\r\nX-Private: secret\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers\r\nProxy-Connection: keep-alive\r\nTrailer: X-T\r\n\
         X-Kept: yes\r\n\r\n",
    )
    .await
    .expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo JSON");
    for name in ["connection", "x-private", "keep-alive", "te", "proxy-connection", "trailer"] {
        assert!(header_values(&echo, name).is_empty(), "hop-by-hop request header {name} reached the server: {echo}");
    }
    assert_eq!(header_values(&echo, "x-kept"), ["yes"], "end-to-end headers are forwarded");

    // And in the response: the server's hop-by-hop headers stop at the proxy.
    let r = client::get(proxy.addr(), "/hop").await.expect("GET /hop");
    assert_eq!(r.status, 200);
    for name in ["x-hop", "keep-alive", "upgrade"] {
        assert!(r.header(name).is_none(), "hop-by-hop response header {name} reached the client: {:?}", r.headers);
    }
    assert_eq!(r.header("x-end"), Some("kept"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_by_path_prefix_and_host() {
    let default = TestServer::start("default");
    let admin = TestServer::start("admin");
    let a = TestServer::start("a");
    let proxy = ProxyProcess::start_with(1, |ports| {
        format!(
            r#"frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: main
    rules:
      - {{ path_prefix: /admin, backend: admin }}
      - {{ host: a.example.com, backend: a }}
backends:
  - name: main
    servers: [ {{ name: default, address: "{d}" }} ]
  - name: admin
    servers: [ {{ name: admin, address: "{adm}" }} ]
  - name: a
    servers: [ {{ name: a, address: "{a}" }} ]
"#,
            fe = ports[0],
            d = default.addr(),
            adm = admin.addr(),
            a = a.addr()
        )
    });
    let addr = proxy.addr();
    let with_host = |path: &str, host: &str| {
        let mut req = client::get_request(addr, path);
        req.headers_mut().insert(http::header::HOST, host.parse().expect("host"));
        req
    };
    let cases: Vec<(http::Request<client::ClientBody>, &str)> = vec![
        (client::get_request(addr, "/admin"), "admin"),
        (client::get_request(addr, "/admin/users?x=1"), "admin"),
        (client::get_request(addr, "/adm"), "default"),
        (client::get_request(addr, "/"), "default"),
        (with_host("/x", "a.example.com"), "a"),
        (with_host("/x", "a.example.com:8443"), "a"),
        (with_host("/x", "A.Example.COM"), "a"),
        (with_host("/x", "b.example.com"), "default"),
        (with_host("/admin/x", "a.example.com"), "admin"),
    ];
    for (req, want) in cases {
        let what = format!("{} Host: {:?}", req.uri(), req.headers().get("host"));
        let r = client::send(addr, req).await.expect("request");
        assert_eq!(r.status, 200, "{what}");
        assert_eq!(r.server(), Some(want), "{what} should be routed to {want}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_bodies_are_forwarded_with_content_length_and_chunked() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));

    let req = client::request(Method::POST, proxy.addr(), "/echo", client::full("hello, body"));
    let r = client::send(proxy.addr(), req).await.expect("POST /echo");
    assert_eq!(r.status, 200);
    let echo = r.json();
    assert_eq!(echo["method"], "POST");
    assert_eq!(echo["body"], "hello, body");
    assert_eq!(echo["body_len"], 11);

    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(
        b"POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
    )
    .await
    .expect("send chunked");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response to a chunked POST");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo JSON");
    assert_eq!(echo["body"], "hello world");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_reuse_safe_shares_idle_server_connections_between_clients() {
    let s1 = TestServer::start("s1");
    let addr = s1.addr();
    let proxy = ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    http_reuse: safe
    servers: [ {{ name: s1, address: "{addr}" }} ]
"#,
            fe = ports[0]
        )
    });
    // One client connection after another: the second finds the first's server connection idle
    // in the pool and uses it.
    let mut ids = Vec::new();
    for _ in 0..3 {
        let r = client::get(proxy.addr(), "/echo").await.expect("GET");
        assert_eq!(r.status, 200);
        ids.push(r.json()["connection"].as_u64().expect("connection id"));
    }
    assert_eq!(s1.connections(), 1, "three client connections in turn used one pooled server connection: {ids:?}");

    // The server closes its idle connections (a restart): the next request is not lost, it goes
    // on a new connection.
    s1.restart();
    let r =
        client::get(proxy.addr(), "/after-restart").await.expect("GET after the server closed the pooled connection");
    assert_eq!(r.status, 200, "{}", r.text());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unix_socket_bind_serves_http() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let s1 = TestServer::start("s1");
    let addr = s1.addr();
    let proxy = ProxyProcess::start(&format!(
        r#"frontends:
  - name: fe
    bind: ["unix:fe.sock"]
    default_backend: be
backends:
  - name: be
    servers: [ {{ name: s1, address: "{addr}" }} ]
"#
    ));
    // A relative socket path is taken from the configuration file's directory.
    let path = proxy.dir().join("fe.sock");
    let mut stream = tokio::net::UnixStream::connect(&path).await.expect("connect to the Unix socket bind");
    stream.write_all(b"GET /echo HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("send");
    let mut response = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut response))
        .await
        .expect("response within 10 s")
        .expect("read");
    let text = String::from_utf8_lossy(&response);
    assert!(text.starts_with("HTTP/1.1 200 "), "{text}");
    assert!(text.contains("\"path\":\"/echo\""), "{text}");
    let line = proxy.wait_for_log(|l| l.contains("GET /echo")).await;
    let parsed = lb_testkit::log::HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!(parsed.client_ip, None, "a Unix-socket client is logged as unix:<id>: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn head_response_has_no_body_and_the_connection_stays_usable() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));
    let mut conn = Connection::open(proxy.addr()).await.expect("connect");
    let head = client::request(Method::HEAD, proxy.addr(), "/bytes?n=1000", client::empty());
    let r = conn.send(head).await.expect("HEAD");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-length"), Some("1000"), "HEAD keeps the length of the body it does not send");
    assert!(r.body.is_empty());
    let r = conn.get("/after-head").await.expect("a GET on the same connection after a HEAD");
    assert_eq!((r.status, r.text().as_str()), (200, "s1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expect_100_continue_gets_an_interim_response_then_the_body_is_forwarded() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, one_backend(&[&s1], ""));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        .await
        .expect("send the head");
    let interim = conn.read_response(Duration::from_secs(5)).await.expect("a 100 Continue before the body is sent");
    assert_eq!(interim.status, 100);
    conn.send(b"hello").await.expect("send the body");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("the final response");
    assert_eq!((r.status, r.text().as_str()), (200, "5"));
}
