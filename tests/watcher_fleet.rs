//! A fleet-wide limit: each lb-watcher registers its lb-proxy under the fleet path, and every
//! lb-proxy divides its `fleet: true` tables' limits by the live nodes (`set fleet share N`),
//! the share moving as pairs start and stop (real ZooKeeper, real processes).

use std::time::Duration;

use lb_testkit::zookeeper::ZkServer;
use lb_testkit::{watched_proxy_yaml, ProxyProcess, WatcherProcess};
use nix::sys::signal::Signal;

const FLEET: &str = "/com/example/test/lb";

fn fleet_proxy_yaml(ports: &[u16]) -> String {
    format!(
        "{}tables:\n  per_ip:\n    type: ip\n    size: 1000\n    expire: 1m\n    store: [http_req_rate(1s)]\n    fleet: true\n",
        watched_proxy_yaml(ports)
    )
}

/// An lb-proxy and its lb-watcher, the watcher registering it as `name` in the fleet.
struct Pair {
    proxy: ProxyProcess,
    watcher: Option<WatcherProcess>,
    _dir: tempfile::TempDir,
}

impl Pair {
    async fn start(zk: &ZkServer, name: &str) -> Pair {
        let proxy = ProxyProcess::start_with(1, fleet_proxy_yaml);
        let dir = tempfile::tempdir().expect("a temporary directory");
        std::fs::copy(proxy.config_path(), dir.path().join("base.yaml")).expect("base.yaml");
        let yaml = format!(
            "zookeeper:\n  servers: [\"{zk}\"]\n  session_timeout: 4s\n\
             proxy:\n  base: base.yaml\n  config: {config}\n\
             hysteresis: {{ collect: 0s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }}\n\
             services:\n  - backend: api\n    path: /com/example/test/api\n    record_type: load_balancer\n\
             fleet:\n  path: {FLEET}\n  name: {name}\n",
            zk = zk.connect_string(),
            config = proxy.config_path().display()
        );
        let watcher = WatcherProcess::start(dir.path(), &yaml).await;
        Pair { proxy, watcher: Some(watcher), _dir: dir }
    }

    /// The share `show table` says the fleet table has.
    async fn share(&self) -> Option<u32> {
        let shown = self.proxy.runtime_command("show table").await.ok()?;
        let line = shown.lines().find(|l| l.starts_with("# table: per_ip,"))?;
        line.rsplit_once("share:")?.1.trim().parse().ok()
    }

    async fn share_becomes(&self, want: u32, within: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            if self.share().await == Some(want) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        false
    }

    fn log(&self) -> String {
        self.watcher.as_ref().map(|w| w.stderr().join("\n")).unwrap_or_default()
    }
}

async fn all_at(pairs: &[&Pair], want: u32) {
    for (i, pair) in pairs.iter().enumerate() {
        let moved = pair.share_becomes(want, Duration::from_secs(15)).await;
        assert!(moved, "pair {i}: share {:?}, want {want}; watcher:\n{}", pair.share().await, pair.log());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_fleet_share_follows_the_live_nodes() {
    let zk = ZkServer::start();
    let a = Pair::start(&zk, "a").await;
    all_at(&[&a], 1).await;
    let b = Pair::start(&zk, "b").await;
    all_at(&[&a, &b], 2).await;
    let mut c = Pair::start(&zk, "c").await;
    all_at(&[&a, &b, &c], 3).await;

    // A reload keeps the share (the new worker inherits it).
    a.proxy.reload().await.expect("a reload");
    assert_eq!(a.share().await, Some(3), "the share survives a reload");

    // c's watcher stops: it deletes its node, the others' share moves at once.
    drop(c.watcher.take());
    all_at(&[&a, &b], 2).await;

    // b's watcher is killed: its node goes with its session (after the session timeout).
    if let Some(w) = &b.watcher {
        w.signal(Signal::SIGKILL);
    }
    all_at(&[&a], 1).await;
    assert_eq!(b.share().await, Some(2), "an lb-proxy whose watcher is gone keeps the last share");
}
