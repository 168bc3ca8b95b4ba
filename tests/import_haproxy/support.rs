//! What every import test does: a sample haproxy.cfg with its placeholders filled, Debian's
//! haproxy run on it, `lbctl import-haproxy` run on it, `lb-proxy -c` on the translation, and
//! one request (or connection) at a time through either.

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_testkit::raw::{RawConn, RawResponse};
use lb_testkit::runtime::{parse_stat_csv, send_line};
use lb_testkit::{bin_path, run_lb_proxy};

/// Where each sample writes what a test replaces: (sample, name, text in the sample, what the
/// test's value becomes there; `{}` is the value).
const LITERALS: &[(&str, &str, &str, &str)] = &[
    ("api-edge.cfg", "DIR", "/etc/haproxy", "{}"),
    ("api-edge.cfg", "PORT", "10.0.0.1:80", "127.0.0.1:{}"),
    ("api-edge.cfg", "SERVER1", "10.0.1.11:8000", "{}"),
    ("api-edge.cfg", "SERVER2", "10.0.1.12:8000", "{}"),
    ("api-edge.cfg", "SERVER3", "10.0.1.21:8000", "{}"),
    ("web-edge.cfg", "CERT", "/etc/ssl/private/sites.pem", "{}"),
    ("web-edge.cfg", "DIR", "/etc/haproxy", "{}"),
    ("web-edge.cfg", "HTTPS", "10.0.0.1:443", "127.0.0.1:{}"),
    ("web-edge.cfg", "HTTP", "10.0.0.1:80", "127.0.0.1:{}"),
    ("web-edge.cfg", "STATS", "10.0.0.1:8404", "127.0.0.1:{}"),
    ("web-edge.cfg", "WWW1", "10.0.2.11:8000", "{}"),
    ("web-edge.cfg", "WWW2", "10.0.2.12:8000", "{}"),
    ("web-edge.cfg", "SHOP1", "10.0.2.21:8000", "{}"),
    ("web-edge.cfg", "API1", "10.0.2.31:8000", "{}"),
    ("web-edge.cfg", "STATIC1", "10.0.2.41:8000", "{}"),
    ("tcp-service.cfg", "DIR", "/etc/haproxy", "{}"),
    ("tcp-service.cfg", "DB", "10.0.0.1:5432", "127.0.0.1:{}"),
    ("tcp-service.cfg", "CACHE", "10.0.0.1:6379", "127.0.0.1:{}"),
    ("tcp-service.cfg", "DB1", "10.0.3.11:5432", "{}"),
    ("tcp-service.cfg", "DB2", "10.0.3.12:5432", "{}"),
    ("tcp-service.cfg", "CACHE1", "10.0.3.21:6379", "{}"),
    ("tcp-service.cfg", "CACHE2", "10.0.3.22:6379", "{}"),
];

/// A sample from etc/haproxy-import/ with the test's ports, addresses and paths in place of the
/// operator's (see `LITERALS`), written to `dir/NAME`.
pub(crate) fn sample(name: &str, dir: &Path, vars: &[(&str, String)]) -> PathBuf {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/haproxy-import").join(name);
    let mut text = std::fs::read_to_string(&source).unwrap_or_else(|e| panic!("{}: {e}", source.display()));
    for (file, key, literal, template) in LITERALS.iter().filter(|(file, ..)| *file == name) {
        let value =
            vars.iter().find(|(k, _)| k == key).map(|(_, v)| v).unwrap_or_else(|| panic!("{file}: no value for {key}"));
        assert!(text.contains(literal), "{file} no longer writes `{literal}` ({key})");
        text = text.replace(literal, &template.replace("{}", value));
    }
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write the sample");
    path
}

/// What `lbctl import-haproxy` printed.
#[derive(Debug)]
pub(crate) struct Import {
    pub(crate) yaml: String,
    pub(crate) stderr: String,
    pub(crate) status: Option<i32>,
}

impl Import {
    /// The report's lines naming something not translated, without the file name.
    pub(crate) fn untranslated(&self) -> Vec<String> {
        self.lines("not translated")
    }

    pub(crate) fn notes(&self) -> Vec<String> {
        self.lines("note")
    }

    fn lines(&self, kind: &str) -> Vec<String> {
        self.stderr
            .lines()
            .filter(|l| l.contains(&format!(": {kind}: ")))
            .map(|l| l.split_once(':').map_or(l, |(_, rest)| rest).to_owned())
            .collect()
    }
}

/// Runs `lbctl import-haproxy ARGS… CFG` and checks its translation with `lb-proxy -c`.
pub(crate) fn import(cfg: &Path, args: &[&str]) -> Import {
    // A control socket of the test's own: tests run side by side, and lb-proxy's default is one
    // path for the whole machine.
    let control = cfg.parent().expect("the sample's directory").join("lb-proxy-master.sock");
    let out = Command::new(bin_path("lbctl"))
        .arg("import-haproxy")
        .arg("--control-socket")
        .arg(&control)
        .args(args)
        .arg(cfg)
        .stdin(Stdio::null())
        .output()
        .expect("run lbctl import-haproxy");
    let import = Import {
        yaml: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        status: out.status.code(),
    };
    let dir = cfg.parent().expect("the sample's directory");
    let yaml = dir.join("lb-proxy.yaml");
    std::fs::write(&yaml, &import.yaml).expect("write the translation");
    let checked: Output = run_lb_proxy(&["-c", "-f", "lb-proxy.yaml"], dir, Duration::from_secs(20));
    assert!(
        checked.status.success(),
        "lb-proxy -c refuses the translation:\n{}{}\n{}\nlbctl said:\n{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr),
        import.yaml,
        import.stderr
    );
    import
}

/// Debian's haproxy on a configuration file, its standard output (the access log) kept.
pub(crate) struct Haproxy {
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl Haproxy {
    /// Starts `haproxy -db -f CFG` and waits until `port` accepts connections.
    pub(crate) fn start(cfg: &Path, port: u16) -> Haproxy {
        let checked = Command::new("haproxy").args(["-c", "-q", "-f"]).arg(cfg).output().expect("run haproxy -c");
        assert!(
            checked.status.success(),
            "haproxy refuses {}: {}{}",
            cfg.display(),
            String::from_utf8_lossy(&checked.stdout),
            String::from_utf8_lossy(&checked.stderr)
        );
        let mut child = Command::new("haproxy")
            .args(["-db", "-f"])
            .arg(cfg)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("run haproxy (Debian's haproxy package: scripts/install-deps test)");
        let log = Arc::new(Mutex::new(Vec::new()));
        if let Some(out) = child.stdout.take() {
            let lines = log.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(out).lines().map_while(Result::ok) {
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            });
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "haproxy does not listen on {port}");
            std::thread::sleep(Duration::from_millis(20));
        }
        Haproxy { child, log }
    }

    pub(crate) fn log(&self) -> Vec<String> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Drop for Haproxy {
    fn drop(&mut self) {
        // Our own child, by its handle.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One request on a connection of its own; the response, or why there was none.
pub(crate) async fn send(addr: SocketAddr, request: &str) -> RawResponse {
    let mut conn = RawConn::connect(addr).await.unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    conn.send(request.replace('\n', "\r\n")).await.expect("send");
    conn.read_response(Duration::from_secs(10)).await.unwrap_or_else(|e| panic!("{request}: {e}"))
}

/// Sends `request` until `done` holds for the response (10 s at most); the last response.
pub(crate) async fn send_until(addr: SocketAddr, request: &str, done: impl Fn(&RawResponse) -> bool) -> RawResponse {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let response = send(addr, request).await;
        if done(&response) || Instant::now() > deadline {
            return response;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (15 s at most) until `show stat` on the runtime socket `socket` says every server is
/// UP: haproxy and lb-proxy answer it alike, and their health checks take their time.
pub(crate) fn wait_all_up(socket: &Path) {
    let deadline = Instant::now() + Duration::from_secs(15);
    let mut last = String::new();
    while Instant::now() < deadline {
        last = send_line(socket, "show stat").unwrap_or_default();
        if let Ok((_, rows)) = parse_stat_csv(&last) {
            let servers: Vec<_> = rows
                .iter()
                .filter(|r| !matches!(r.get("svname").map(String::as_str), Some("FRONTEND" | "BACKEND")))
                .collect();
            if !servers.is_empty() && servers.iter().all(|r| r.get("status").is_some_and(|s| s.starts_with("UP"))) {
                return;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!("not every server came up; show stat:\n{last}");
}
