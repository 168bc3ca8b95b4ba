//! lb-tls's statistics as an operator reads them: `lbctl -f lb-tls.yaml show stat` and `show
//! info` (the library in use), the same through the runtime socket, and /metrics checked by
//! Prometheus' own `promtool check metrics`. Real `openssl s_client` handshakes: full and
//! resumed, TLS 1.2 and 1.3, failures of known kinds (plain HTTP to the TLS port, a protocol
//! the frontend does not serve); the totals carry on across a reload; bytes are counted as they
//! move, on a keep-alive connection still open, and `show info`'s totals are `show stat`'s.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use lb_testkit::certs::TestCerts;
use lb_testkit::lbctl::lbctl_blocking;
use lb_testkit::runtime::promtool_check;
use lb_testkit::sclient::s_client;
use lb_testkit::{free_port, wait_until_blocking, TestServer, TlsProcess};

const REQUEST: &[u8] = b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n";
const WAIT: Duration = Duration::from_secs(10);

fn start(pem: &Path, backend: &TestServer, metrics: u16) -> TlsProcess {
    let pem = pem.display().to_string();
    let backend = backend.addr();
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
  runtime_socket: runtime.sock
  metrics_address: "127.0.0.1:{metrics}"
  worker_threads: 1
tls:
  certificates: [ {pem} ]
  protocols: [TLSv1.2, TLSv1.3]
backend:
  address: "{backend}"
  write_proxy: none
frontends:
  - bind: "127.0.0.1:{port}"
"#,
            port = ports[0]
        )
    })
}

/// `show stat`'s one frontend row (lbctl --json: numbers as numbers, empty cells left out).
fn stat_row(tls: &TlsProcess) -> serde_json::Value {
    let out = lbctl_blocking(&tls.control_socket(), &["--json", "show", "stat"]);
    assert_eq!(out.code, Some(0), "show stat: {out}");
    let rows: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(rows.as_array().map(Vec::len), Some(1), "one frontend: {rows}");
    rows[0].clone()
}

fn value(row: &serde_json::Value, column: &str) -> u64 {
    row[column].as_u64().unwrap_or_else(|| panic!("no number in {column}: {row}"))
}

fn handshake(tls: &TlsProcess, args: &[&str]) {
    let out = s_client(tls.addr(), args, REQUEST, WAIT);
    assert!(out.stdout.contains(" 200 OK"), "{args:?}: served: {}", out.text());
}

fn scrape(port: u16) -> String {
    let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
    s.set_read_timeout(Some(WAIT)).expect("timeout");
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    s.read_to_string(&mut text).expect("read");
    assert!(text.starts_with("HTTP/1.1 200"), "GET /metrics: {text}");
    text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default()
}

#[test]
fn show_stat_info_and_metrics_count_handshakes_and_failures_across_a_reload() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let metrics = free_port();
    let tls = start(&pem, &server, metrics);

    let session = certs.dir().join("stats.sess");
    let file = session.display().to_string();
    handshake(&tls, &["-tls1_3"]);
    handshake(&tls, &["-tls1_3"]);
    handshake(&tls, &["-tls1_2", "-sess_out", &file]);
    handshake(&tls, &["-tls1_2", "-sess_in", &file]);
    // Failures: plain HTTP to the TLS port, and a TLS 1.1-only client.
    let mut plain = TcpStream::connect(tls.addr()).expect("connect");
    plain.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").expect("send");
    let _ = plain.read(&mut [0; 512]);
    drop(plain);
    let old = s_client(tls.addr(), &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"], REQUEST, WAIT);
    assert!(!old.stdout.contains(" 200 OK"), "TLS 1.1 is not served: {}", old.text());

    let row = stat_row(&tls);
    assert!(
        wait_until_blocking(WAIT, || value(&stat_row(&tls), "ssl_failed_handshake") == 2),
        "both failures counted: {}",
        stat_row(&tls)
    );
    let row = if value(&row, "ssl_failed_handshake") == 2 { row } else { stat_row(&tls) };
    assert_eq!(value(&row, "stot"), 6, "every connection: {row}");
    assert_eq!(value(&row, "ssl_sess"), 4, "completed handshakes: {row}");
    assert_eq!(value(&row, "ssl_reused_sess"), 1, "the -sess_in one resumed: {row}");
    assert_eq!(value(&row, "tls1_3"), 2, "{row}");
    assert_eq!(value(&row, "tls1_2"), 2, "{row}");
    assert_eq!(value(&row, "hs_fail_not_tls"), 1, "plain HTTP: {row}");
    assert_eq!(value(&row, "hs_fail_protocol"), 1, "TLS 1.1: {row}");
    assert!(value(&row, "bout") > 0 && value(&row, "bin") >= 4 * REQUEST.len() as u64, "bytes: {row}");

    // `show info` names the library, as `lb-tls -V` does; the runtime socket answers the same.
    let info = lbctl_blocking(&tls.control_socket(), &["--json", "show", "info"]);
    let info: serde_json::Value = serde_json::from_str(&info.stdout).expect("JSON");
    assert_eq!(info["Name"], "lb-tls", "{info}");
    assert_eq!(info["CumSslConns"], 4, "{info}");
    assert_eq!(info["SslFrontendSessionReuse_pct"], 25, "{info}");
    let version = Command::new(lb_testkit::bin_path("lb-tls")).arg("-V").output().expect("lb-tls -V");
    let library = String::from_utf8_lossy(&version.stdout);
    let library = library.trim().split_once(" (").map(|(_, l)| l.trim_end_matches(')')).expect("a library");
    assert_eq!(info["Tls_library"], library, "as lb-tls -V says: {info}");
    let socket = std::os::unix::net::UnixStream::connect(tls.dir().join("runtime.sock"));
    let mut socket = socket.expect("the runtime socket");
    socket.write_all(b"show stat\n").expect("send");
    let mut csv = String::new();
    socket.read_to_string(&mut csv).expect("read");
    assert!(csv.starts_with("# pxname,svname,scur,smax,slim,stot,"), "{csv}");

    // A reload: the new worker's totals include the old one's.
    let reloaded = lbctl_blocking(&tls.control_socket(), &["reload"]);
    assert_eq!(reloaded.code, Some(0), "reload: {reloaded}");
    handshake(&tls, &["-tls1_3"]);
    assert!(
        wait_until_blocking(WAIT, || value(&stat_row(&tls), "ssl_sess") == 5),
        "4 before the reload and 1 after: {}",
        stat_row(&tls)
    );
    let row = stat_row(&tls);
    assert_eq!(value(&row, "stot"), 7, "{row}");
    assert_eq!(value(&row, "ssl_failed_handshake"), 2, "{row}");

    // /metrics: what the CSV says, in a text promtool finds nothing wrong with.
    let text = scrape(metrics);
    assert!(text.contains("lb_tls_frontend_handshakes_total{frontend=\"127.0.0.1:"), "{text}");
    assert!(
        text.contains("lb_tls_frontend_failed_handshakes_total{") && text.contains("reason=\"not_tls\"} 1"),
        "{text}"
    );
    assert!(text.contains("reason=\"protocol\"} 1"), "{text}");
    let complaints = promtool_check(&text);
    assert!(complaints.is_empty(), "promtool check metrics: {complaints}\n{text}");
}

#[test]
fn unknown_runtime_commands_are_refused_with_haproxy_words() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let tls = start(&pem, &server, free_port());
    let out = lbctl_blocking(&tls.control_socket(), &["set", "server", "a/b", "state", "drain"]);
    assert_eq!(out.code, Some(1), "refused: {out}");
    assert!((out.stdout.clone() + &out.stderr).contains("Unknown command: 'set server a/b state drain'"), "{out}");
}

/// `show info`'s field as a number (lbctl --json).
fn info_value(tls: &TlsProcess, field: &str) -> u64 {
    let out = lbctl_blocking(&tls.control_socket(), &["--json", "show", "info"]);
    let info: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    info[field].as_u64().or_else(|| info[field].as_str()?.parse().ok()).unwrap_or_else(|| panic!("{field}: {info}"))
}

/// Bytes each way move `bin`/`bout` while the connection is still open (a keep-alive client
/// is seen before it leaves), and `show info`'s `TotalBytesIn`/`TotalBytesOut` are those of
/// `show stat`, summed.
#[test]
fn bytes_are_counted_as_they_move_and_show_info_agrees_with_show_stat() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let tls = start(&pem, &server, free_port());
    assert_eq!((info_value(&tls, "TotalBytesIn"), info_value(&tls, "TotalBytesOut")), (0, 0));

    let mut client = Command::new("openssl")
        .args(["s_client", "-quiet", "-ign_eof", "-connect", &tls.addr().to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("running openssl s_client");
    let mut input = client.stdin.take().expect("its stdin");
    let request: &[u8] = b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n";
    let mut seen = (0, 0);
    for n in 1..=2u64 {
        input.write_all(request).expect("send a request");
        input.flush().expect("flush");
        let moved = wait_until_blocking(WAIT, || {
            let row = stat_row(&tls);
            value(&row, "bin") >= n * request.len() as u64 && value(&row, "bout") > seen.1
        });
        assert!(moved, "request {n} counted while its connection is open: {}", stat_row(&tls));
        // The answer may still be on its way: the counters settle, then both views agree.
        std::thread::sleep(Duration::from_millis(300));
        let row = stat_row(&tls);
        let now = (value(&row, "bin"), value(&row, "bout"));
        assert_eq!(now.0, n * request.len() as u64, "the requests' bytes exactly: {row}");
        assert!(now.1 > seen.1, "the answer's bytes: {row}");
        assert_eq!((info_value(&tls, "TotalBytesIn"), info_value(&tls, "TotalBytesOut")), now, "show info: {row}");
        seen = now;
    }
    assert_eq!(value(&stat_row(&tls), "scur"), 1, "still the one connection");
    drop(input);
    let _ = client.kill();
    let _ = client.wait();
}
