//! The three daemons together, as real processes, with a real ZooKeeper: the demo's scenario
//! with assertions.
//!
//! API servers register themselves the registrar way (`lbctl register`, `host` records, each
//! server on its own loopback address); lb-watcher turns them into lb-proxy's backend; clients
//! come through lb-tls (curl, TLS, PROXY v2 to lb-proxy over a Unix socket, as etc/ deploys
//! them: mode 0660, the services' own user and group). Under one continuous load through TLS:
//! a fourth server registers and receives requests, one deregisters and is drained away, lb-proxy
//! and lb-tls reload, and ZooKeeper restarts; not one request fails, and membership changes
//! start no lb-proxy worker.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb_testkit::certs::TestCerts;
use lb_testkit::runtime::parse_servers_state;
use lb_testkit::zookeeper::ZkServer;
use lb_testkit::{bin_path, free_port, wait_until, ProxyProcess, TestServer, TlsProcess, WatcherProcess};

const API_PATH: &str = "/com/example/us-east/api";
/// Requests each curl run makes (keep-alive among them), and curl runs at a time.
const REQUESTS_PER_RUN: usize = 20;
const CLIENTS: usize = 3;
/// Bound on the whole load, whatever happens.
const LOAD_LIMIT: Duration = Duration::from_secs(120);

/// An API server on its own loopback address, and its registration (a real `lbctl register`).
struct Api {
    /// Kept for as long as the test runs: dropped, it stops serving.
    _server: TestServer,
    registration: Option<Child>,
}

impl Api {
    fn start(n: u8, port: u16, zk: &ZkServer) -> Api {
        let ip = IpAddr::from([127, 0, 0, 10 + n]);
        let server = TestServer::start_at(&format!("api{n}"), SocketAddr::new(ip, port));
        let registration = Command::new(bin_path("lbctl"))
            .args(["register", "--zk", &zk.connect_string(), "--path", API_PATH, "--name"])
            .arg(format!("api{n}"))
            .args(["--address", &ip.to_string(), "--session-timeout", "6s"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("lbctl register");
        Api { _server: server, registration: Some(registration) }
    }

    /// Ends the registration as registrar does on shutdown: the node is deleted; the server
    /// itself keeps serving what it has.
    fn deregister(&mut self) {
        if let Some(mut child) = self.registration.take() {
            let pid = nix::unistd::Pid::from_raw(child.id() as i32);
            let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
            let _ = child.wait();
        }
    }
}

impl Drop for Api {
    fn drop(&mut self) {
        if let Some(mut child) = self.registration.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// lb-proxy: a PROXY-protocol bind for lb-tls (ports[0]); the backend starts empty.
/// lb-proxy's configuration; `socket`: the Unix socket lb-tls forwards to.
fn proxy_yaml(ports: &[u16], socket: &Path) -> String {
    format!(
        r#"global:
  worker_threads: 1
defaults:
  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }}
frontends:
  - name: https_in
    bind:
      - {{ address: "127.0.0.1:{p}", accept_proxy: true }}
      - {{ address: "unix:{socket}", accept_proxy: true }}
    tls: true
    default_backend: secure_api
backends:
  - name: secure_api
    health_check: {{ type: http, path: /ping, interval: 500ms, rise: 1, fall: 2 }}
    servers: []
"#,
        p = ports[0],
        socket = socket.display()
    )
}

async fn watcher_for(dir: &Path, proxy: &ProxyProcess, zk: &ZkServer, api_port: u16) -> WatcherProcess {
    std::fs::copy(proxy.config_path(), dir.join("base.yaml")).expect("base.yaml");
    let yaml = format!(
        r#"zookeeper:
  servers: ["{zk}"]
  session_timeout: 6s
proxy:
  base: base.yaml
  config: {config}
hysteresis: {{ collect: 500ms, collect_jitter: 0s, hold: 1s, min_apply_interval: 0s }}
services:
  - backend: secure_api
    name: api.us-east.example.com
    record_type: host
    port: {api_port}
    check: true
"#,
        zk = zk.connect_string(),
        config = proxy.config_path().display()
    );
    WatcherProcess::start(dir, &yaml).await
}

fn start_tls(certs: &TestCerts, socket: &Path) -> TlsProcess {
    let pem = certs.server("api", &["api.example.test"]).display().to_string();
    let mode = std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(socket).expect("the socket").permissions());
    assert_eq!(mode & 0o777, 0o660, "a Unix bind is 0660 unless configured otherwise");
    let backend = format!("unix:{}", socket.display());
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
  worker_threads: 1
tls:
  certificates: [ {pem} ]
backend:
  address: "{backend}"
  write_proxy: v2
frontends:
  - bind: "127.0.0.1:{p}"
"#,
            p = ports[0]
        )
    })
}

/// What answered one request through TLS: the status (0 when curl failed) and the server.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Answer {
    status: u16,
    server: String,
    error: String,
}

/// One curl run of `n` requests on `url` (one connection, kept alive while it can be).
fn curl_run(url: &str, n: usize) -> Vec<Answer> {
    let mut cmd = Command::new("curl");
    cmd.args(["-ks", "--max-time", "20", "-w", "%{http_code} %header{x-server}\\n", "-o", "/dev/null"]);
    for i in 0..n {
        if i > 0 {
            cmd.arg("--next").args(["-ks", "--max-time", "20", "-w", "%{http_code} %header{x-server}\\n"]);
            cmd.args(["-o", "/dev/null"]);
        }
        cmd.arg(url);
    }
    let out = cmd.stdin(Stdio::null()).output().expect("running curl");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let mut answers: Vec<Answer> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|line| {
            let (status, server) = line.split_once(' ').unwrap_or((line, ""));
            Answer { status: status.parse().unwrap_or(0), server: server.to_owned(), error: stderr.clone() }
        })
        .collect();
    // A run cut short (curl died) counts its missing requests as failed.
    while answers.len() < n {
        answers.push(Answer { status: 0, server: String::new(), error: format!("curl {:?}: {stderr}", out.status) });
    }
    answers
}

/// A load of `CLIENTS` curl loops through TLS, until stopped (or `LOAD_LIMIT`).
struct CurlLoad {
    stop: Arc<AtomicBool>,
    answers: Arc<Mutex<Vec<Answer>>>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl CurlLoad {
    fn start(url: String) -> CurlLoad {
        let stop = Arc::new(AtomicBool::new(false));
        let answers = Arc::new(Mutex::new(Vec::new()));
        let threads = (0..CLIENTS)
            .map(|_| {
                let (stop, answers, url) = (stop.clone(), answers.clone(), url.clone());
                std::thread::spawn(move || {
                    let limit = std::time::Instant::now() + LOAD_LIMIT;
                    while !stop.load(Ordering::Relaxed) && std::time::Instant::now() < limit {
                        let run = curl_run(&url, REQUESTS_PER_RUN);
                        answers.lock().unwrap_or_else(|e| e.into_inner()).extend(run);
                    }
                })
            })
            .collect();
        CurlLoad { stop, answers, threads }
    }

    fn served_by(&self, server: &str) -> usize {
        self.answers.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|a| a.server == server).count()
    }

    fn total(&self) -> usize {
        self.answers.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    fn finish(self) -> Vec<Answer> {
        self.stop.store(true, Ordering::Relaxed);
        for thread in self.threads {
            let _ = thread.join();
        }
        std::mem::take(&mut *self.answers.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The servers lb-proxy has in `secure_api` now (runtime `show servers state`).
fn servers_in_proxy(proxy: &ProxyProcess) -> Vec<String> {
    let text = proxy.runtime("show servers state secure_api");
    parse_servers_state(&text).unwrap_or_default().into_iter().filter_map(|row| row.get("srv_name").cloned()).collect()
}

async fn reloads(proxy: &ProxyProcess) -> u64 {
    proxy.show_proc().await.master.reloads
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stack_under_load_loses_nothing_through_churn_reloads_and_a_zookeeper_restart() {
    let mut zk = ZkServer::start();
    let api_port = free_port();
    let mut apis: Vec<Api> = (1..=3).map(|n| Api::start(n, api_port, &zk)).collect();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let socket = dir.path().join("proxy-tls.sock");
    let proxy = ProxyProcess::start_with(1, |ports| proxy_yaml(ports, &socket));
    let watcher = watcher_for(dir.path(), &proxy, &zk, api_port).await;
    let certs = TestCerts::new();
    let tls = start_tls(&certs, &socket);
    let url = format!("https://{}/", tls.addr());
    let worker = proxy.current_worker().await.expect("a worker");

    // Registration reaches traffic: all three answer through TLS, and no reload was needed.
    // One curl run is one client connection, pinned to one server: look across runs.
    let mut seen = Vec::new();
    let all_three = wait_until(Duration::from_secs(30), || {
        seen.extend(curl_run(&url, 1));
        (1..=3).all(|n| seen.iter().any(|a| a.server == format!("api{n}")))
    })
    .await;
    assert!(
        all_three,
        "api1-3 answer through lb-tls: {seen:?}\nstat: {}\nwatcher:\n{}",
        proxy.runtime("show stat"),
        watcher.stderr().join("\n")
    );
    assert_eq!(reloads(&proxy).await, 0, "registrations went through the runtime socket");

    let load = CurlLoad::start(url.clone());
    assert!(wait_until(Duration::from_secs(10), || load.total() > 50).await, "the load runs");

    // A fourth server registers: it receives requests, with the same lb-proxy worker.
    apis.push(Api::start(4, api_port, &zk));
    assert!(wait_until(Duration::from_secs(30), || load.served_by("api4") > 0).await, "api4 gets traffic");
    assert_eq!(proxy.current_worker().await, Some(worker), "no new worker for a registration");

    // One deregisters: drained and removed from lb-proxy, with the same worker.
    apis[1].deregister();
    let removed = wait_until(Duration::from_secs(30), || !servers_in_proxy(&proxy).contains(&"api2".to_owned())).await;
    assert!(removed, "api2 removed from lb-proxy; watcher:\n{}", watcher.stderr().join("\n"));
    assert_eq!(proxy.current_worker().await, Some(worker), "no new worker for a deregistration");
    assert_eq!(reloads(&proxy).await, 0, "membership changes never reloaded lb-proxy");

    // Reloads of both daemons under the same load.
    proxy.reload().await.expect("lb-proxy reload");
    tls.reload().await.expect("lb-tls reload");
    let before = load.total();
    assert!(wait_until(Duration::from_secs(20), || load.total() > before + 50).await, "served after the reloads");

    // ZooKeeper restarts: lb-watcher keeps every server meanwhile, reconnects, re-reads
    // everything, and still has the same servers.
    let disconnects = watcher.metric("lb_watcher_zookeeper_disconnects_total").await;
    zk.restart();
    let mut reconnected = false;
    for _ in 0..100 {
        let connected = watcher.metric("lb_watcher_zookeeper_connected").await == 1;
        if connected && watcher.metric("lb_watcher_zookeeper_disconnects_total").await > disconnects {
            reconnected = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(reconnected, "lb-watcher reconnected after the restart:\n{}", watcher.stderr().join("\n"));
    let before = load.total();
    assert!(wait_until(Duration::from_secs(20), || load.total() > before + 100).await, "served across the restart");
    let mut servers = servers_in_proxy(&proxy);
    servers.sort();
    assert_eq!(servers, ["api1", "api3", "api4"], "the same servers after ZooKeeper's restart");

    let answers = load.finish();
    let failed: Vec<&Answer> = answers.iter().filter(|a| a.status != 200).collect();
    assert!(
        failed.is_empty(),
        "{} of {} requests failed, first: {:?}\nlb-proxy:\n{}\nlb-tls:\n{}",
        failed.len(),
        answers.len(),
        failed.first(),
        proxy.stderr().join("\n"),
        tls.stderr().join("\n")
    );
    assert!(answers.len() > 300, "a real load: {} requests", answers.len());
    drop(apis);
}
