//! What the fault tests share: lb-proxy with one watched backend `api`, lb-watcher on its file,
//! the servers lb-proxy runs (through its control socket, as lb-watcher sees them), a light
//! load whose failures are counted, and a sampler of lb-proxy's servers over time.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::{ProxyProcess, WatcherOptions, WatcherProcess};

pub(crate) const DIR: &str = "/com/example/test/api";

/// Debug lines of lb-watcher (one per ZooKeeper snapshot) for the timelines.
pub(crate) const DEBUG_LOG: &str = "info,lb_watcher::engine=debug,zookeeper_client=warn";

/// lb-watcher's configuration: `config` is the file it writes, `reload` the proxy section's
/// other keys (`runtime`, `reload_command`, `drift_check`).
pub(crate) fn watcher_yaml(zk: &str, session_timeout: &str, hysteresis: &str, config: &Path, reload: &str) -> String {
    format!(
        "zookeeper:\n  servers: [{servers}]\n  session_timeout: {session_timeout}\n  retry_max: 1s\n\
         proxy:\n  base: base.yaml\n  config: {config}\n{reload}\
         hysteresis: {hysteresis}\n\
         services:\n  - backend: api\n    path: {DIR}\n    record_type: load_balancer\n",
        servers = zk.split(',').map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", "),
        config = config.display(),
    )
}

/// lb-watcher on `proxy`'s file (its base: the file as lb-proxy started, no servers), runtime
/// commands, drift check every 500 ms.
pub(crate) async fn watcher_for(
    dir: &Path,
    proxy: &ProxyProcess,
    zk: &str,
    session_timeout: &str,
    hysteresis: &str,
) -> WatcherProcess {
    std::fs::copy(proxy.config_path(), dir.join("base.yaml")).expect("base.yaml");
    let yaml = watcher_yaml(zk, session_timeout, hysteresis, proxy.config_path(), "  drift_check: 500ms\n");
    let options = WatcherOptions { env: vec![("LB_LOG".into(), DEBUG_LOG.into())], ..WatcherOptions::default() };
    WatcherProcess::start_with(dir, &yaml, &options).await
}

/// The servers of backend `api` in the file at `path`, sorted (empty when there is none).
pub(crate) fn file_servers(path: &Path) -> Vec<String> {
    let Ok(config) = lb_config::Config::load(path) else { return Vec::new() };
    let mut names: Vec<String> =
        config.backend("api").map(|b| b.servers.iter().map(|s| s.name.clone()).collect()).unwrap_or_default();
    names.sort();
    names
}

/// The servers lb-proxy sends new requests to (in backend `api`, neither draining nor in
/// maintenance), sorted; `None` when the control socket does not answer.
pub(crate) async fn in_service_at(control: &Path) -> Option<Vec<String>> {
    servers_at(control, false).await
}

/// Every server of backend `api` in the running lb-proxy (`all`), or only those in service.
pub(crate) async fn servers_at(control: &Path, all: bool) -> Option<Vec<String>> {
    let request = lb_supervisor::Request::Runtime { line: "show servers state api".into() };
    let output = match lb_supervisor::control::call(control, &request).await {
        Ok(lb_supervisor::Response::Runtime { output }) => output,
        _ => return None,
    };
    let rows = lb_testkit::runtime::parse_servers_state(&output).ok()?;
    let mut names: Vec<String> = rows
        .iter()
        .filter(|r| all || r.get("srv_admin_state").and_then(|a| a.parse::<u32>().ok()).is_some_and(|a| a & 0x09 == 0))
        .filter_map(|r| r.get("srv_name").cloned())
        .collect();
    names.sort();
    Some(names)
}

pub(crate) async fn in_service(proxy: &ProxyProcess) -> Vec<String> {
    in_service_at(proxy.control_socket()).await.unwrap_or_default()
}

pub(crate) fn names(list: &[&str]) -> Vec<String> {
    let mut v: Vec<String> = list.iter().map(|s| (*s).to_owned()).collect();
    v.sort();
    v
}

/// Waits until lb-proxy serves exactly `want` and the file says so too.
pub(crate) async fn wait_converged(proxy: &ProxyProcess, want: &[String], within: Duration) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if in_service(proxy).await == want && file_servers(proxy.config_path()) == want {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Requests through lb-proxy while the fault happens: two new-connection and two keep-alive
/// clients, 20 ms apart (light enough for two cores shared with ZooKeeper's JVMs).
pub(crate) fn light_load(proxy: &ProxyProcess, duration: Duration) -> Load {
    let mut spec = LoadSpec::new(proxy.addr(), duration);
    spec.new_connection_clients = 2;
    spec.keep_alive_clients = 2;
    spec.pause = Duration::from_millis(20);
    Load::start(spec)
}

/// Each distinct set of servers seen, with when it was first seen.
pub(crate) type Seen = Vec<(Instant, Vec<String>)>;

/// lb-proxy's in-service servers every 100 ms, each change with its time, until stopped.
#[derive(Debug)]
pub(crate) struct Sampler {
    stop: Arc<AtomicBool>,
    seen: Arc<Mutex<Seen>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sampler {
    pub(crate) fn start(proxy: &ProxyProcess) -> Sampler {
        let control: PathBuf = proxy.control_socket().to_path_buf();
        let stop = Arc::new(AtomicBool::new(false));
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let task = tokio::spawn({
            let (stop, seen) = (stop.clone(), seen.clone());
            async move {
                while !stop.load(Ordering::SeqCst) {
                    if let Some(now) = in_service_at(&control).await {
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        if seen.last().map(|(_, s)| s) != Some(&now) {
                            seen.push((Instant::now(), now));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        Sampler { stop, seen, task }
    }

    /// Every distinct set seen, in order, with when it was first seen.
    pub(crate) async fn stop(self) -> Seen {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.clone()
    }
}

/// The watcher's stderr lines since `t0`, each prefixed with its time in seconds from `t0`.
pub(crate) fn timeline(watcher: &WatcherProcess, t0: Instant) -> Vec<String> {
    watcher
        .stderr_timed()
        .into_iter()
        .filter(|(at, _)| *at >= t0)
        .map(|(at, line)| {
            // Drop the timestamp and level columns tracing writes: the relative time says when.
            let text = line.split_once(": ").map_or(line.as_str(), |(_, rest)| rest).to_owned();
            format!("{:7.3}s {text}", at.duration_since(t0).as_secs_f64())
        })
        .collect()
}

/// The first stderr line containing `text` after `t0`: seconds after `t0`.
pub(crate) fn first_after(watcher: &WatcherProcess, t0: Instant, text: &str) -> Option<f64> {
    watcher
        .stderr_timed()
        .into_iter()
        .find(|(at, line)| *at >= t0 && line.contains(text))
        .map(|(at, _)| at.duration_since(t0).as_secs_f64())
}

/// Polls `cond` (async) every 50 ms until it holds or `within` passes.
pub(crate) async fn eventually<F, Fut>(within: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    loop {
        if cond().await {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
