//! What the HTTP/3 tests share: the stack (lb-proxy with a JSON log and a rule that echoes the
//! TLS facts; lb-tls with HTTPS and HTTP/3 on one port number, two certificates) and the
//! aioquic client (`client.py` beside this file; scripts/install-deps test installs aioquic).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use lb_testkit::certs::TestCerts;
use lb_testkit::{ProxyProcess, TestServer, TlsProcess};
use serde_json::Value;

/// The stack the HTTP/3 tests run: a test server, lb-proxy, lb-tls (HTTPS and HTTP/3 on `port`).
/// Each test file reads the parts it needs; the others only keep their processes running.
#[allow(dead_code)]
pub(crate) struct Stack {
    pub(crate) certs: TestCerts,
    pub(crate) api: TestServer,
    pub(crate) proxy: ProxyProcess,
    pub(crate) tls: TlsProcess,
    pub(crate) port: u16,
}

impl Stack {
    pub(crate) fn start() -> Stack {
        Stack::start_quic("")
    }

    /// As [`Stack::start`], the UDP frontend with these `quic:` settings (YAML flow mapping).
    pub(crate) fn start_quic(quic: &str) -> Stack {
        Stack::start_with(quic, false)
    }

    /// As [`Stack::start`], lb-tls with `backend.multiplex: true`: each QUIC connection's hop
    /// is a stream of the worker thread's multiplexed hop connection.
    #[allow(dead_code)]
    pub(crate) fn start_multiplexed() -> Stack {
        Stack::start_with("", true)
    }

    /// As [`Stack::start`], lb-proxy's frontend with these `timeouts:` (YAML flow mapping).
    #[allow(dead_code)]
    pub(crate) fn start_proxy_timeouts(timeouts: &str, multiplex: bool) -> Stack {
        Stack::start_full("", multiplex, timeouts)
    }

    fn start_with(quic: &str, multiplex: bool) -> Stack {
        Stack::start_full(quic, multiplex, "{}")
    }

    fn start_full(quic: &str, multiplex: bool, timeouts: &str) -> Stack {
        let certs = TestCerts::new();
        let api = TestServer::start("api");
        let proxy = proxy(&api, timeouts);
        let tls = tls(&certs, &proxy.addr().to_string(), quic, multiplex);
        let port = tls.addr().port();
        Stack { certs, api, proxy, tls, port }
    }

    /// The UDP frontend's `show stat` column.
    #[allow(dead_code)]
    pub(crate) fn stat(&self, column: &str) -> Value {
        let out = lb_testkit::lbctl::lbctl_blocking(&self.tls.control_socket(), &["--json", "show", "stat"]);
        let rows: Value = serde_json::from_str(&out.stdout).expect("show stat JSON");
        let udp = format!("udp:127.0.0.1:{}", self.port);
        let row = rows.as_array().and_then(|r| r.iter().find(|r| r["pxname"] == udp.as_str())).expect("the UDP row");
        row[column].clone()
    }

    /// The UDP frontend's `show stat` column once it is `want` (counts of a connection that just
    /// ended land a moment later), or what it is after a second.
    #[allow(dead_code)]
    pub(crate) async fn stat_becomes(&self, column: &str, want: Value) -> Value {
        let mut now = self.stat(column);
        for _ in 0..50 {
            if now == want {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            now = self.stat(column);
        }
        now
    }

    /// lb-tls's `show info`, `Name: value` lines.
    #[allow(dead_code)]
    pub(crate) fn info(&self) -> String {
        lb_testkit::lbctl::lbctl_blocking(&self.tls.control_socket(), &["show", "info"]).stdout
    }

    /// lb-tls's /metrics text.
    #[allow(dead_code)]
    pub(crate) fn metrics(&self) -> String {
        use std::io::Read;
        let port = self.tls.ports()[1];
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect to /metrics");
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").expect("send");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("read /metrics");
        text
    }

    /// [`h3_session`] to this stack as `api.example.test`.
    #[allow(dead_code)]
    pub(crate) fn get(&self, requests: &Value, ticket: Option<&Path>) -> (bool, Vec<Value>) {
        h3_session(self.port, "api.example.test", &self.certs.ca(), requests, ticket)
    }
}

fn proxy(api: &TestServer, timeouts: &str) -> ProxyProcess {
    let api = api.addr();
    let timeouts = timeouts.to_owned();
    ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  log: {{ format: json }}
frontends:
  - name: tls_in
    bind: [ {{ address: "127.0.0.1:{p}", accept_proxy: true }} ]
    tls: true
    timeouts: {timeouts}
    default_backend: api
    http_request:
      - set_header: {{ name: X-TLS, value: "%[ssl_fc_protocol] %[ssl_fc_alpn] %[ssl_fc_sni] %[ssl_fc_cipher]" }}
backends:
  - name: api
    servers: [ {{ name: a1, address: "{api}" }} ]
"#,
            p = ports[0]
        )
    })
}

/// HTTPS on TCP and HTTP/3 on UDP, on the same port number, as on 443.
fn tls(certs: &TestCerts, backend: &str, quic: &str, multiplex: bool) -> TlsProcess {
    let api = certs.server("api", &["api.example.test"]).display().to_string();
    let admin = certs.server("admin", &["admin.example.test"]).display().to_string();
    let backend = backend.to_owned();
    let quic = if quic.is_empty() { String::new() } else { format!("\n    quic: {quic}") };
    TlsProcess::start_with(2, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
  metrics_address: "127.0.0.1:{metrics}"
tls:
  certificates: [ {api}, {admin} ]
  alpn_protocols: [ h2, http/1.1 ]
backend:
  address: "{backend}"
  multiplex: {multiplex}
frontends:
  - bind: "127.0.0.1:{port}"
  - bind: "udp:127.0.0.1:{port}"{quic}
"#,
            port = ports[0],
            metrics = ports[1]
        )
    })
}

/// The responses to `requests`, sent at once on one QUIC connection to `port` with `sni`.
#[allow(dead_code)]
pub(crate) fn h3(port: u16, sni: &str, ca: &Path, requests: &Value) -> Vec<Value> {
    h3_session(port, sni, ca, requests, None).1
}

/// As [`h3`], offering the session ticket saved in `ticket` (if any) and saving the new one;
/// first whether the session was resumed.
pub(crate) fn h3_session(
    port: u16,
    sni: &str,
    ca: &Path,
    requests: &Value,
    ticket: Option<&Path>,
) -> (bool, Vec<Value>) {
    let mut child = client(port, sni, ca, ticket, &[]);
    child.stdin.take().expect("stdin").write_all(requests.to_string().as_bytes()).expect("to the client");
    let out = child.wait_with_output().expect("the HTTP/3 client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the HTTP/3 client failed: {stderr}");
    let result: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"));
    (result["resumed"] == true, result["responses"].as_array().cloned().unwrap_or_default())
}

/// The aioquic client with its arguments, stdin and stdout piped.
fn client(port: u16, sni: &str, ca: &Path, ticket: Option<&Path>, flags: &[&str]) -> Child {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/tools/pyenv/bin/python");
    Command::new(&python)
        .arg(root.join("tests/h3/client.py"))
        .args(["127.0.0.1", &port.to_string(), sni])
        .arg(ca)
        .args(ticket)
        .args(flags)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} (scripts/install-deps test installs aioquic): {e}", python.display()))
}

/// One QUIC connection kept open by the aioquic client (`client.py --session`), driven a
/// command at a time: requests, a migration to a new source port, its state.
#[allow(dead_code)]
pub(crate) struct Session {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
}

#[allow(dead_code)]
impl Session {
    /// A connection to `port` as `api.example.test`; with `early`, the first requests go in
    /// 0-RTT when `ticket` allows.
    pub(crate) fn open(port: u16, ca: &Path, ticket: Option<PathBuf>, early: bool) -> Session {
        let flags: &[&str] = if early { &["--session", "--early"] } else { &["--session"] };
        let mut child = client(port, "api.example.test", ca, ticket.as_deref(), flags);
        let stdin = child.stdin.take();
        let stdout = BufReader::new(child.stdout.take().expect("stdout"));
        Session { child, stdin, stdout }
    }

    fn ask(&mut self, command: &Value) -> Value {
        let stdin = self.stdin.as_mut().expect("the session is open");
        writeln!(stdin, "{command}").expect("to the client");
        let mut line = String::new();
        let read = self.stdout.read_line(&mut line).expect("from the client");
        if read == 0 {
            let mut stderr = String::new();
            if let Some(mut e) = self.child.stderr.take() {
                let _ = std::io::Read::read_to_string(&mut e, &mut stderr);
            }
            panic!("the HTTP/3 client ended: {stderr}");
        }
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    }

    /// The responses to `requests`, sent at once (a failed one: `status` null and `error`).
    pub(crate) fn requests(&mut self, requests: &Value) -> Vec<Value> {
        self.ask(&serde_json::json!({ "requests": requests }))["responses"].as_array().cloned().unwrap_or_default()
    }

    /// Sends from a new socket (a new source port) with a new connection ID; the new port.
    pub(crate) fn migrate(&mut self) -> u16 {
        let port = self.ask(&serde_json::json!({ "migrate": true }))["port"].as_u64().expect("a port");
        u16::try_from(port).expect("a port")
    }

    /// `goaway` (the last GOAWAY's stream ID, or null), `closed`, `resumed`, `early_data_accepted`.
    pub(crate) fn state(&mut self) -> Value {
        self.ask(&serde_json::json!({ "state": true }))
    }

    /// Closes the connection; whether the client ended well.
    pub(crate) fn close(mut self) -> bool {
        drop(self.stdin.take());
        self.child.wait().is_ok_and(|s| s.success())
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let _ = self.child.wait();
    }
}

/// Sends `count` QUIC Initial packets to `port`, each a new connection attempt from a source
/// port of its own (and with `addresses`, a 127.0.0.0/8 address of its own), never followed up
/// (`flood.py`).
#[allow(dead_code)]
pub(crate) fn flood(port: u16, count: usize, addresses: bool) -> usize {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("target/tools/pyenv/bin/python"))
        .arg(root.join("tests/h3/flood.py"))
        .args(["127.0.0.1", &port.to_string(), &count.to_string()])
        .args(addresses.then_some("--addresses"))
        .output()
        .expect("the flood sender");
    assert!(out.status.success(), "flood.py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).trim().parse().expect("a count")
}

/// What lb-tls answers to one hand-built Initial packet with hostile CRYPTO data (`crypto.py`,
/// MODE `gap` or `oversized`): `closed`, `error_code`, `reason`.
#[allow(dead_code)]
pub(crate) fn hostile_crypto(port: u16, mode: &str) -> Value {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Command::new(root.join("target/tools/pyenv/bin/python"))
        .arg(root.join("tests/h3/crypto.py"))
        .args(["127.0.0.1", &port.to_string(), mode])
        .output()
        .expect("the CRYPTO sender");
    assert!(out.status.success(), "crypto.py: {}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)))
}

/// The peer ports of this host's UDP sockets bound to `port` and connected (IPv4): lb-tls's
/// sockets for its QUIC connections.
#[allow(dead_code)]
pub(crate) fn connected_udp_peers(port: u16) -> Vec<u16> {
    let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote) = (fields.get(1)?, fields.get(2)?);
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let remote_port = u16::from_str_radix(remote.rsplit(':').next()?, 16).ok()?;
            (local_port == port && remote_port != 0).then_some(remote_port)
        })
        .collect()
}

/// `count` requests within `seconds` to `port` by a client that follows RFC 9114 across
/// GOAWAYs (`client.py --load`): `ok`, `failed`, `retried`, `connections`, `goaways`, `errors`.
#[allow(dead_code)]
pub(crate) fn load(port: u16, ca: &Path, count: usize, seconds: u64) -> Value {
    let (count, seconds) = (count.to_string(), seconds.to_string());
    let child = client(port, "api.example.test", ca, None, &["--load", &count, &seconds]);
    let out = child.wait_with_output().expect("the HTTP/3 client");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the HTTP/3 client failed: {stderr}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {stderr}"))
}

/// How the aioquic client fails to connect to `port` as `sni` (its error), when it must.
#[allow(dead_code)]
pub(crate) fn refused(port: u16, sni: &str, ca: &Path) -> String {
    let mut child = client(port, sni, ca, None, &[]);
    child.stdin.take().expect("stdin").write_all(b"[{\"path\": \"/echo\"}]").expect("to the client");
    let out = child.wait_with_output().expect("the HTTP/3 client");
    assert!(!out.status.success(), "the client connected: {}", String::from_utf8_lossy(&out.stdout));
    String::from_utf8_lossy(&out.stderr).into_owned()
}
