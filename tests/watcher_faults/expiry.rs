//! Every registration gone while the API servers are healthy: ten registrars (`lbctl register`
//! processes, each with its own ZooKeeper session) frozen, so that ZooKeeper expires their
//! sessions and deletes their nodes, all together or one by one. The backend keeps serving
//! from its last full set; the figures say step by step what the hysteresis did.

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{bin_path, watched_proxy_yaml, ProxyProcess, Signal, TestServer, WatcherProcess};

use crate::common::*;

/// A hold of 1 s and a fifth per round: the throttle's rounds come fast enough to show.
const THROTTLE: &str =
    "{ collect: 500ms, collect_jitter: 0s, hold: 1s, max_remove_percent: 20, min_apply_interval: 0s }";
const N: usize = 10;

/// `lbctl register` processes this test started, one per server, 2 s sessions; stopped by
/// PID (SIGCONT, SIGTERM) on drop.
struct Registrars {
    children: Vec<Child>,
}

impl Registrars {
    fn start(zk: &str, servers: &[TestServer], log: &std::path::Path) -> Registrars {
        let children = servers
            .iter()
            .map(|s| {
                let log = std::fs::File::create(log.join(format!("{}.log", s.name()))).expect("a registrar log");
                Command::new(bin_path("lbctl"))
                    .args(["register", "--zk", zk, "--path", DIR, "--name", s.name(), "--address", "127.0.0.1"])
                    .args(["--type", "load_balancer", "--port", &s.addr().port().to_string()])
                    .args(["--session-timeout", "2s"])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .expect("spawning lbctl register")
            })
            .collect();
        Registrars { children }
    }

    fn signal(&self, i: usize, signal: Signal) {
        let _ = lb_testkit::procfs::signal(self.children[i].id(), signal);
    }
}

impl Drop for Registrars {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = lb_testkit::procfs::signal(child.id(), Signal::SIGCONT);
            let _ = lb_testkit::procfs::signal(child.id(), Signal::SIGTERM);
        }
        for child in &mut self.children {
            let deadline = Instant::now() + Duration::from_secs(3);
            while child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How many nodes ZooKeeper lists under [`DIR`], each change with its time, polled every
/// 20 ms through a session of the test's own.
struct ZkCount {
    seen: Arc<Mutex<Vec<(Instant, usize)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl ZkCount {
    fn start(client: ZkClient) -> ZkCount {
        let seen: Arc<Mutex<Vec<(Instant, usize)>>> = Arc::default();
        let task = tokio::spawn({
            let seen = seen.clone();
            async move {
                loop {
                    if let Ok(children) = client.client.list_children(DIR).await {
                        let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                        if seen.last().map(|(_, n)| *n) != Some(children.len()) {
                            seen.push((Instant::now(), children.len()));
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        ZkCount { seen, task }
    }

    fn since(&self, t0: Instant) -> Vec<String> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.iter()
            .filter(|(at, _)| *at >= t0)
            .map(|(at, n)| format!("{:.2}s:{n}", at.duration_since(t0).as_secs_f64()))
            .collect()
    }
}

impl Drop for ZkCount {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Rig {
    _zk: ZkServer,
    proxy: ProxyProcess,
    watcher: WatcherProcess,
    registrars: Registrars,
    count: ZkCount,
    all: Vec<String>,
    _servers: Vec<TestServer>,
    _dir: tempfile::TempDir,
}

async fn rig() -> Rig {
    let zk = ZkServer::start();
    let servers: Vec<TestServer> = (0..N).map(|i| TestServer::start(&format!("web{i:02}"))).collect();
    let all: Vec<String> = servers.iter().map(|s| s.name().to_owned()).collect();
    let proxy = ProxyProcess::start_with(1, watched_proxy_yaml);
    let observer = ZkClient::connect(&zk.connect_string()).await;
    observer.mkdir(DIR).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let registrars = Registrars::start(&zk.connect_string(), &servers, dir.path());
    // The watcher's own session (6 s) is not what expires here.
    let watcher = watcher_for(dir.path(), &proxy, &zk.connect_string(), "6s", THROTTLE).await;
    let up = wait_converged(&proxy, &all, Duration::from_secs(30)).await;
    assert!(up, "{:?}; watcher:\n{}", in_service(&proxy).await, watcher.stderr().join("\n"));
    let count = ZkCount::start(observer);
    Rig { _zk: zk, proxy, watcher, registrars, count, all, _servers: servers, _dir: dir }
}

/// The step-by-step account: ZooKeeper's node count, lb-proxy's in-service count, the
/// watcher's lines, all in seconds from `t0`.
fn account(r: &Rig, t0: Instant, seen: &[(Instant, Vec<String>)]) -> String {
    // What lb-proxy served when the fault began, then each change.
    let before = seen.iter().rfind(|(at, _)| *at < t0).map(|(_, set)| format!("before:{}", set.len()));
    let changes = seen
        .iter()
        .filter(|(at, _)| *at >= t0)
        .map(|(at, set)| format!("{:.2}s:{}", at.duration_since(t0).as_secs_f64(), set.len()));
    let served: Vec<String> = before.into_iter().chain(changes).collect();
    format!(
        "  ZooKeeper nodes: {}\n  lb-proxy in service: {}\n  watcher:\n    {}",
        r.count.since(t0).join(" "),
        served.join(" "),
        timeline(&r.watcher, t0).join("\n    ")
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_registration_expiring_at_once_keeps_the_full_set_serving() {
    let r = rig().await;
    let applies = r.watcher.metric("lb_watcher_applies_total").await;
    let load = light_load(&r.proxy, Duration::from_secs(60));
    let sampler = Sampler::start(&r.proxy);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t0 = Instant::now();
    for i in 0..N {
        r.registrars.signal(i, Signal::SIGSTOP);
    }
    r.watcher.wait_for_stderr("refusing to empty backend api", Duration::from_secs(15)).await;
    // Several holds: the throttle would have had its rounds by now.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(in_service(&r.proxy).await, r.all, "every server kept in lb-proxy");
    assert_eq!(file_servers(r.proxy.config_path()), r.all, "and in the file");
    let status = r.watcher.status().await;
    assert_eq!(status["refused"], serde_json::json!(["api"]), "{status}");
    assert_eq!(status["pending"][0]["remove"].as_array().map(Vec::len), Some(N), "{status}");
    assert_eq!(r.watcher.metric("lb_watcher_refused_total").await, 1);
    assert_eq!(r.watcher.metric("lb_watcher_applies_total").await, applies, "nothing applied");
    assert_eq!(r.watcher.stderr_count("throttled"), 0, "no removal round at all");

    // The registrars wake up, find their sessions expired and register again.
    let t_cont = Instant::now();
    for i in 0..N {
        r.registrars.signal(i, Signal::SIGCONT);
    }
    let back = eventually(Duration::from_secs(20), || async {
        let status = r.watcher.status().await;
        status["refused"] == serde_json::json!([]) && status["pending"] == serde_json::json!([])
    })
    .await;
    assert!(back, "refusal lifted once they are back: {}", r.watcher.status().await);
    let back_after = t_cont.elapsed();
    assert_eq!(r.watcher.metric("lb_watcher_applies_total").await, applies, "still nothing to apply");
    let report = load.stop().await;
    let seen = sampler.stop().await;
    assert!(seen.iter().all(|(_, set)| *set == r.all), "lb-proxy kept every server throughout: {seen:?}");
    assert_eq!(report.failed(), 0, "no request failed:\n{report}");
    println!(
        "FIGURES mass-expiry (at once, {N} sessions of 2 s, {THROTTLE}): re-registered and in step {:.1}s after \
         SIGCONT; requests ok {} failed {}; from SIGSTOP:\n{}",
        back_after.as_secs_f64(),
        report.total().ok,
        report.failed(),
        account(&r, t0, &seen)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registrations_expiring_one_by_one_end_with_the_full_set_serving() {
    let r = rig().await;
    let load = light_load(&r.proxy, Duration::from_secs(60));
    let sampler = Sampler::start(&r.proxy);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let t0 = Instant::now();
    for i in 0..N {
        r.registrars.signal(i, Signal::SIGSTOP);
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    r.watcher.wait_for_stderr("refusing to empty backend api", Duration::from_secs(20)).await;
    let restored = wait_converged(&r.proxy, &r.all, Duration::from_secs(10)).await;
    let t_end = Instant::now();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let kept = in_service(&r.proxy).await;
    let refused = r.watcher.status().await["refused"].clone();

    for i in 0..N {
        r.registrars.signal(i, Signal::SIGCONT);
    }
    let back =
        eventually(Duration::from_secs(20), || async { r.watcher.status().await["pending"] == serde_json::json!([]) })
            .await;
    let report = load.stop().await;
    let seen = sampler.stop().await;
    let fewest = seen.iter().filter(|(at, _)| *at <= t_end).map(|(_, s)| s.len()).min().unwrap_or(0);
    let account = account(&r, t0, &seen);
    println!(
        "FIGURES trickle ({N} sessions of 2 s frozen 500 ms apart, {THROTTLE}): fewest in service {fewest}, \
         in service at the end {}; requests ok {} failed {}; from the first SIGSTOP:\n{account}",
        kept.len(),
        report.total().ok,
        report.failed(),
    );
    assert!(restored, "the backend ends with its full set, not what the throttle left: {kept:?}\n{account}");
    assert_eq!(kept, r.all, "and keeps it");
    assert_eq!(refused, serde_json::json!(["api"]), "the empty set is refused");
    assert!(back, "in step once they are back: {}", r.watcher.status().await);
    assert_eq!(in_service(&r.proxy).await, r.all);
    assert_eq!(report.failed(), 0, "no request failed:\n{report}");
}
