//! Access logs: every line is a strict HAProxy httplog line (with the right facts in it),
//! `<BADREQ>` and `<NOSRV>` lines included; the JSON format parses; syslog datagrams carry the
//! same message behind an RFC 3164 header.

use std::time::Duration;

use http::Method;
use lb_testkit::client::{self, Connection};
use lb_testkit::log::{self, HttpLogLine};
use lb_testkit::raw::RawConn;
use lb_testkit::{ProxyProcess, TestServer};

fn config(log: &str, server: &TestServer, maint: &TestServer) -> impl Fn(&[u16]) -> String {
    let (log, s, m) = (log.to_owned(), server.addr(), maint.addr());
    move |ports: &[u16]| {
        format!(
            r#"global:
  log: {log}
defaults:
  timeouts: {{ connect: 1s, client: 5s, server: 5s, http_request: 2s }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
    rules: [ {{ path_prefix: /off, backend: off }} ]
backends:
  - name: be
    servers: [ {{ name: s1, address: "{s}" }} ]
  - name: off
    servers: [ {{ name: m1, address: "{m}", state: maint }} ]
"#,
            fe = ports[0]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_line_is_strict_httplog_with_the_right_facts() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: haproxy }", &s1, &m1));

    let mut conn = Connection::open(proxy.addr()).await.expect("connect");
    let client_port = conn.local_addr().port();
    assert_eq!(conn.get("/echo?a=1").await.expect("GET").status, 200);
    assert_eq!(conn.get("/status?code=404").await.expect("GET").status, 404);
    let post = client::request(Method::POST, proxy.addr(), "/echo", client::full("0123456789"));
    assert_eq!(conn.send(post).await.expect("POST").status, 200);
    assert_eq!(conn.get("/bytes?n=12345").await.expect("GET").status, 200);
    assert_eq!(conn.get("/off/x").await.expect("GET").status, 503);
    drop(conn);
    let mut bad = RawConn::connect(proxy.addr()).await.expect("connect");
    bad.send(b"NOT HTTP AT ALL\r\n\r\n").await.expect("send");
    assert_eq!(bad.read_response(Duration::from_secs(10)).await.expect("400").status, 400);

    let lines = proxy.wait_for_log_lines(6).await;
    let parsed = log::parse_all_http(&lines);
    assert_eq!(parsed.len(), 6, "one line per request: {lines:#?}");
    for p in &parsed {
        assert_eq!(p.tag, "haproxy", "{p:?}");
        assert!(proxy.is_own_pid(p.pid), "the pid is the master's or one of its workers': {p:?}");
        assert_eq!(p.client_ip.as_deref(), Some("127.0.0.1"));
        assert_eq!(p.frontend, "fe");
    }
    let by_request = |req: &str| {
        parsed.iter().find(|p| p.request == req).unwrap_or_else(|| panic!("no line for {req:?}: {lines:#?}")).clone()
    };

    let get = by_request("GET /echo?a=1 HTTP/1.1");
    assert_eq!(get.client_port, Some(client_port), "the client's own port: {get:?}");
    assert_eq!((get.backend.as_str(), get.server.as_str(), get.status), ("be", "s1", 200));
    assert_eq!(get.termination, "----");
    assert!(get.tr >= 0 && get.tw >= 0 && get.tc >= 0 && get.tresp >= 0, "timers all set: {get:?}");
    assert!(get.ta >= get.tresp, "Ta covers Tr: {get:?}");
    assert!(get.bytes > 0 && get.actconn >= 1 && get.feconn >= 1 && get.retries == 0, "{get:?}");

    assert_eq!(by_request("GET /status?code=404 HTTP/1.1").status, 404);
    assert_eq!(by_request("POST /echo HTTP/1.1").status, 200);
    let bytes = by_request("GET /bytes?n=12345 HTTP/1.1");
    assert!(bytes.bytes >= 12345, "bytes_read counts at least the body: {bytes:?}");

    let nosrv = by_request("GET /off/x HTTP/1.1");
    assert_eq!((nosrv.backend.as_str(), nosrv.server.as_str(), nosrv.status), ("off", "<NOSRV>", 503), "{nosrv:?}");
    assert_eq!(nosrv.termination, "SC--");

    let badreq = by_request("<BADREQ>");
    assert_eq!((badreq.backend.as_str(), badreq.server.as_str(), badreq.status), ("fe", "<NOSRV>", 400), "{badreq:?}");
    assert_eq!(badreq.termination, "PR--");
    assert_eq!((badreq.tc, badreq.tresp), (-1, -1), "{badreq:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bytes_read_counts_the_response_head_and_body() {
    // HAProxy's bytes_read is "the total number of bytes transmitted to the client", HTTP
    // headers included; log tooling sums it as traffic.
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: haproxy }", &s1, &m1));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /bytes?n=12345 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").await.expect("send");
    let (received, _) = conn.read_until_closed(Duration::from_secs(10)).await;
    let line = proxy.wait_for_log(|l| l.contains("/bytes")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!(
        parsed.bytes,
        received.len() as u64,
        "bytes_read is every byte the client received (head {} + body 12345): {line}",
        received.len() - 12345
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_lines_are_escaped_so_a_line_cannot_be_forged() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: haproxy }", &s1, &m1));
    // A quote and a `#` in the request target (both legal in a URI for hyper's parser).
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /a\"b#c HTTP/1.1\r\nHost: x\r\n\r\n").await.expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert!(r.status == 200 || r.status == 400, "{}", r.status);
    let lines = proxy.wait_for_log_lines(1).await;
    let parsed = log::parse_all_http(&lines);
    assert_eq!(parsed.len(), 1, "{lines:#?}");
    assert!(!parsed[0].request.contains('"'), "a quote in the request line is escaped: {}", lines[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_format_lines_parse() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: json }", &s1, &m1));
    let mut conn = Connection::open(proxy.addr()).await.expect("connect");
    let client_port = conn.local_addr().port();
    assert_eq!(conn.get("/echo").await.expect("GET").status, 200);
    assert_eq!(conn.get("/off").await.expect("GET").status, 503);
    let lines = proxy.wait_for_log_lines(2).await;
    let values: Vec<serde_json::Value> =
        lines.iter().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect();
    let ok = values.iter().find(|v| v["uri"] == "/echo").unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(ok["frontend"], "fe");
    assert_eq!(ok["backend"], "be");
    assert_eq!(ok["server"], "s1");
    assert_eq!(ok["status"], 200);
    assert_eq!(ok["method"], "GET");
    assert_eq!(ok["client_ip"], "127.0.0.1");
    assert_eq!(ok["client_port"], client_port);
    assert!(ok["bytes_read"].as_u64().is_some_and(|b| b > 0), "{ok}");
    let nosrv = values.iter().find(|v| v["uri"] == "/off").unwrap_or_else(|| panic!("{lines:#?}"));
    assert_eq!(nosrv["server"], "<NOSRV>");
    assert_eq!(nosrv["status"], 503);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syslog_udp_target_gets_rfc3164_datagrams() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP syslog sink");
    sink.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let log = format!(
        "{{ target: \"udp:{}\", format: haproxy, facility: local0, hostname: lbtest }}",
        sink.local_addr().expect("addr")
    );
    let proxy = ProxyProcess::start_with(1, config(&log, &s1, &m1));
    assert_eq!(client::get(proxy.addr(), "/via-syslog").await.expect("GET").status, 200);
    let datagram = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 9000];
        let n = sink.recv(&mut buf).expect("a syslog datagram within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    })
    .await
    .expect("receiver");
    let parsed = HttpLogLine::parse_syslog(&datagram)
        .unwrap_or_else(|| panic!("not an RFC 3164 httplog datagram: {datagram:?}"));
    assert!(datagram.starts_with("<134>"), "local0.info is PRI 134: {datagram:?}");
    assert!(datagram.contains(" lbtest haproxy["), "{datagram:?}");
    assert_eq!((parsed.status, parsed.request.as_str()), (200, "GET /via-syslog HTTP/1.1"));
    assert!(proxy.access_log().is_empty(), "nothing on stdout when logging to syslog");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn syslog_unix_target_gets_rfc3164_datagrams() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.sock");
    let sink = std::os::unix::net::UnixDatagram::bind(&path).expect("a Unix syslog sink");
    sink.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let log = format!("{{ target: \"unix:{}\", format: haproxy, tag: lbtag }}", path.display());
    let proxy = ProxyProcess::start_with(1, config(&log, &s1, &m1));
    assert_eq!(client::get(proxy.addr(), "/via-unix").await.expect("GET").status, 200);
    let datagram = tokio::task::spawn_blocking(move || {
        let mut buf = vec![0u8; 9000];
        let n = sink.recv(&mut buf).expect("a syslog datagram within 10 s");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    })
    .await
    .expect("receiver");
    let parsed = HttpLogLine::parse_syslog(&datagram)
        .unwrap_or_else(|| panic!("not an RFC 3164 httplog datagram: {datagram:?}"));
    assert_eq!(parsed.tag, "lbtag");
    assert!(proxy.is_own_pid(parsed.pid), "the pid is the master's or one of its workers': {}", parsed.pid);
    assert_eq!(parsed.request, "GET /via-unix HTTP/1.1");
}

/// `halog <flag>` (Debian's haproxy package) on these lines: its output.
fn halog(flag: &str, lines: &[String]) -> String {
    log::halog(&[flag], lines)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn halog_reads_the_default_stdout_lines_and_syslog_files() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: haproxy }", &s1, &m1));
    let mut conn = Connection::open(proxy.addr()).await.expect("connect");
    for _ in 0..3 {
        assert_eq!(conn.get("/echo").await.expect("GET").status, 200);
    }
    for _ in 0..2 {
        assert_eq!(conn.get("/status?code=404").await.expect("GET").status, 404);
    }
    assert_eq!(conn.get("/off/x").await.expect("GET").status, 503);
    drop(conn);
    let lines = proxy.wait_for_log_lines(6).await;
    assert!(lines.iter().all(|l| log::httplog_regex().is_match(l)), "{lines:#?}");

    // -st: requests by status code; -srv: by server, with its 2xx and 4xx.
    let statuses = halog("-st", &lines);
    let statuses: Vec<&str> = statuses.lines().collect();
    assert_eq!(statuses, ["200 3", "404 2", "503 1"], "halog -st");
    let servers = halog("-srv", &lines);
    let s1_row = servers.lines().find(|l| l.starts_with("be/s1 ")).unwrap_or_else(|| panic!("halog -srv:\n{servers}"));
    let fields: Vec<&str> = s1_row.split_whitespace().collect();
    assert_eq!(&fields[1..8], ["0", "3", "0", "2", "0", "0", "5"], "1xx 2xx 3xx 4xx 5xx other total: {s1_row}");

    // Through syslog: the daemon drops the <PRI> and writes the rest to its file, which halog
    // reads the same way.
    let sink = std::net::UdpSocket::bind("127.0.0.1:0").expect("a UDP syslog sink");
    sink.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    let log = format!("{{ target: \"udp:{}\", format: haproxy }}", sink.local_addr().expect("addr"));
    let syslogged = ProxyProcess::start_with(1, config(&log, &s1, &m1));
    assert_eq!(client::get(syslogged.addr(), "/echo").await.expect("GET").status, 200);
    assert_eq!(client::get(syslogged.addr(), "/status?code=404").await.expect("GET").status, 404);
    let file = tokio::task::spawn_blocking(move || {
        (0..2)
            .map(|_| {
                let mut buf = vec![0u8; 9000];
                let n = sink.recv(&mut buf).expect("a syslog datagram within 10 s");
                let datagram = String::from_utf8_lossy(&buf[..n]).into_owned();
                datagram.split_once('>').map(|(_, rest)| rest.to_owned()).unwrap_or(datagram)
            })
            .collect::<Vec<String>>()
    })
    .await
    .expect("receiver");
    let mut statuses: Vec<String> = halog("-st", &file).lines().map(str::to_owned).collect();
    statuses.sort();
    assert_eq!(statuses, ["200 1", "404 1"], "halog -st on the syslog file: {file:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_abandoned_in_its_head_is_logged_like_haproxy() {
    let s1 = TestServer::start("s1");
    let m1 = TestServer::start("m1");
    let proxy = ProxyProcess::start_with(1, config("{ target: stdout, format: haproxy }", &s1, &m1));
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    conn.send(b"GET /half HTTP/1.1\r\nHost: x\r\n").await.expect("half a head");
    tokio::time::sleep(Duration::from_millis(100)).await;
    drop(conn);
    // A connection that sent nothing is not a request: no line for it.
    drop(RawConn::connect(proxy.addr()).await.expect("connect"));
    let lines = proxy.wait_for_log_lines(1).await;
    let parsed = log::parse_all_http(&lines);
    assert_eq!(parsed.len(), 1, "{lines:#?}");
    let line = &parsed[0];
    assert_eq!(
        (line.status, line.termination.as_str(), line.request.as_str()),
        (400, "CR--", "<BADREQ>"),
        "{lines:#?}"
    );
    assert_eq!(line.server, "<NOSRV>");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(proxy.access_log().len(), 1, "nothing for the empty connection");
}
