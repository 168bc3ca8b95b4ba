//! What lb-watcher reads from a real ZooKeeper, counted (`lb_watcher_zookeeper_*` in
//! /metrics): a path is read whole only at the start of a session, after a reconnection or an
//! expiry, and at an audit; in between a change costs the data of the nodes it created or
//! changed (one multi-read per transaction), and nothing at all for the nodes it deleted. The
//! audit finds and repairs what the watch missed (a fault injected in debug builds only).
//!
//! Nodes are nerve registrations (`host`, `port`, `weight`) so that a node's data carries both
//! the address and the weight lb-proxy gets. lb-proxy is not running: the reload command is
//! `true`, and the file is what is checked.

use std::path::Path;
use std::time::Duration;

use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{wait_until, Signal, WatcherOptions, WatcherProcess, WATCHED_BASE};

const DIR: &str = "/com/example/test/api";
const INITIAL: usize = 100;

fn nerve(i: usize, port: u16, weight: u32) -> Vec<u8> {
    format!(r#"{{"host":"10.0.{}.{}","port":{port},"name":"api","weight":{weight}}}"#, i / 250, i % 250 + 1)
        .into_bytes()
}

fn name(i: usize) -> String {
    format!("web{i:04}")
}

/// lb-watcher on `DIR`, every window at 0, with `extra` ZooKeeper settings.
async fn start(dir: &Path, zk: &ZkServer, session_timeout: &str, extra: &str, env: &[(&str, &str)]) -> WatcherProcess {
    std::fs::write(dir.join("base.yaml"), WATCHED_BASE).expect("base.yaml");
    let yaml = format!(
        "zookeeper:\n  servers: [\"{zk}\"]\n  session_timeout: {session_timeout}\n  retry_max: 1s\n{extra}\
         proxy:\n  base: base.yaml\n  config: lb-proxy.yaml\n  reload_command: [\"true\"]\n  runtime: false\n\
         hysteresis: {{ collect: 0s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }}\n\
         services:\n  - backend: api\n    path: {DIR}\n    format: nerve\n",
        zk = zk.connect_string()
    );
    let mut options = WatcherOptions::default();
    options.env.extend(env.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
    WatcherProcess::start_with(dir, &yaml, &options).await
}

/// `name → address weight` of backend `api` in the written file.
fn servers_in(dir: &Path) -> Vec<(String, String)> {
    let Ok(text) = std::fs::read_to_string(dir.join("lb-proxy.yaml")) else { return Vec::new() };
    let config = lb_config::Config::parse(&text, "lb-proxy.yaml").expect("the written file is valid");
    let backend = config.backend("api").map(|b| b.servers.clone()).unwrap_or_default();
    backend.iter().map(|s| (s.name.clone(), format!("{} {}", s.address, s.weight))).collect()
}

async fn wait_count(dir: &Path, n: usize) -> bool {
    wait_until(Duration::from_secs(15), || servers_in(dir).len() == n).await
}

/// The read counters, in the order: requests, nodes read, whole reads of the path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Reads {
    requests: u64,
    nodes: u64,
    whole: u64,
}

async fn reads(watcher: &WatcherProcess) -> Reads {
    Reads {
        requests: watcher.metric("lb_watcher_zookeeper_reads_total").await,
        nodes: watcher.metric("lb_watcher_zookeeper_nodes_read_total").await,
        whole: watcher.metric("lb_watcher_zookeeper_full_reads_total").await,
    }
}

/// What was read since `before`.
async fn cost(watcher: &WatcherProcess, before: Reads) -> Reads {
    let now = reads(watcher).await;
    Reads { requests: now.requests - before.requests, nodes: now.nodes - before.nodes, whole: now.whole - before.whole }
}

/// What was read since `before`, once a whole read of the path is done (its counters are
/// taken as it goes: the listing first, the nodes after).
async fn whole_read_since(watcher: &WatcherProcess, before: Reads) -> Reads {
    let mut seen = cost(watcher, before).await;
    for _ in 0..50 {
        if seen.nodes >= INITIAL as u64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
        seen = cost(watcher, before).await;
    }
    seen
}

/// ZooKeeper with the `INITIAL` registrations, from a session of `session_timeout`, and a
/// directory for lb-watcher.
async fn registered_at_start(session_timeout: Duration) -> (ZkServer, tempfile::TempDir, ZkClient) {
    let zk = ZkServer::start();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let client = ZkClient::connect_with(&zk.connect_string(), session_timeout).await;
    client.mkdir(DIR).await;
    registered(&client, 0..INITIAL).await;
    (zk, dir, client)
}

async fn registered(client: &ZkClient, range: std::ops::Range<usize>) {
    let nodes: Vec<(String, Vec<u8>)> = range.map(|i| (name(i), nerve(i, 80, 10))).collect();
    client.create_many(DIR, &nodes).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn joins_leaves_and_changed_data_cost_only_the_nodes_that_changed() {
    let (zk, dir, client) = registered_at_start(Duration::from_secs(10)).await;
    let watcher = start(dir.path(), &zk, "6s", "", &[]).await;
    assert!(wait_count(dir.path(), INITIAL).await);
    // The start: one listing and one multi-read of every node.
    let start = reads(&watcher).await;
    assert_eq!(start, Reads { requests: 2, nodes: INITIAL as u64, whole: 1 });

    // Ten join in one transaction: their ten nodes, in one multi-read; no listing.
    registered(&client, INITIAL..INITIAL + 10).await;
    assert!(wait_count(dir.path(), INITIAL + 10).await);
    let joins = cost(&watcher, start).await;
    assert_eq!(joins, Reads { requests: 1, nodes: 10, whole: 0 }, "ten joins");

    // Ten leave in one transaction: nothing is read.
    let before = reads(&watcher).await;
    let mut writer = client.client.new_multi_writer();
    for i in 0..10 {
        writer.add_delete(&format!("{DIR}/{}", name(i)), None).expect("a delete");
    }
    writer.commit().await.expect("ten deletes in one transaction");
    assert!(wait_count(dir.path(), INITIAL).await);
    assert_eq!(cost(&watcher, before).await, Reads { requests: 0, nodes: 0, whole: 0 }, "ten leaves");

    // One node moves (new address), then is re-weighted: one node read each time.
    let moved = name(50);
    for (data, want) in [(nerve(50, 8080, 10), "10.0.0.51:8080 10"), (nerve(50, 8080, 42), "10.0.0.51:8080 42")] {
        let before = reads(&watcher).await;
        client.client.set_data(&format!("{DIR}/{moved}"), &data, None).await.expect("set_data");
        let seen = wait_until(Duration::from_secs(15), || {
            servers_in(dir.path()).iter().any(|(n, s)| *n == moved && s == want)
        })
        .await;
        assert!(seen, "{moved} is {want}: {:?}", servers_in(dir.path()));
        assert_eq!(cost(&watcher, before).await, Reads { requests: 1, nodes: 1, whole: 0 }, "{want}");
    }
    assert_eq!(watcher.metric("lb_watcher_zookeeper_audits_total").await, 0, "no audit in this test's time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnection_and_an_expiry_each_cost_one_whole_read() {
    // The registrations live as long as `_client`, whose session outlasts the restart.
    let (mut zk, dir, _client) = registered_at_start(Duration::from_secs(30)).await;
    let watcher = start(dir.path(), &zk, "4s", "", &[]).await;
    assert!(wait_count(dir.path(), INITIAL).await);
    let before = reads(&watcher).await;

    // ZooKeeper restarted within the session: a reconnection, the path read whole once.
    zk.kill();
    tokio::time::sleep(Duration::from_millis(500)).await;
    zk.restart();
    let back = wait_until(Duration::from_secs(20), || watcher.stderr_count("ZooKeeper connected") >= 2).await;
    assert!(back, "reconnected: {:?}", watcher.stderr());
    let whole_once = Reads { requests: 2, nodes: INITIAL as u64, whole: 1 };
    assert_eq!(whole_read_since(&watcher, before).await, whole_once, "a reconnection");
    assert!(watcher.metric("lb_watcher_zookeeper_disconnects_total").await >= 1);
    assert_eq!(watcher.metric("lb_watcher_zookeeper_expirations_total").await, 0, "the session lived");

    // Frozen past its 4 s session: a new session, the path read whole once.
    let before = reads(&watcher).await;
    watcher.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(8)).await;
    watcher.signal(Signal::SIGCONT);
    watcher.wait_for_stderr("session expired", Duration::from_secs(15)).await;
    let renewed = wait_until(Duration::from_secs(15), || watcher.stderr_count("(new)") >= 1).await;
    assert!(renewed, "{:?}", watcher.stderr());
    assert_eq!(whole_read_since(&watcher, before).await, whole_once, "an expiry");
    assert_eq!(watcher.metric("lb_watcher_zookeeper_expirations_total").await, 1);
    assert_eq!(servers_in(dir.path()).len(), INITIAL);
}

// The missed events are injected by a fault hook that only debug builds have.
#[cfg(debug_assertions)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_finds_and_repairs_what_the_watch_missed() {
    let (zk, dir, client) = registered_at_start(Duration::from_secs(10)).await;
    // While this file exists the watcher ignores the watch's events (debug builds only).
    let deaf = dir.path().join("deaf");
    let deaf_env = deaf.to_str().expect("a UTF-8 path");
    let watcher = start(dir.path(), &zk, "6s", "  audit_interval: 5s\n", &[("LB_WATCHER_FAULT_DEAF", deaf_env)]).await;
    assert!(wait_count(dir.path(), INITIAL).await);
    std::fs::write(&deaf, b"").expect("the fault file");
    let before = reads(&watcher).await;
    let audits_before = watcher.metric("lb_watcher_zookeeper_audits_total").await;

    // Five join and one changes weight, unheard.
    registered(&client, INITIAL..INITIAL + 5).await;
    client.client.set_data(&format!("{DIR}/{}", name(7)), &nerve(7, 80, 99), None).await.expect("set_data");
    tokio::time::sleep(Duration::from_secs(1)).await;
    std::fs::remove_file(&deaf).expect("the fault file");
    // The first audit comes 5 s to 6.25 s after the start: not yet.
    assert_eq!(cost(&watcher, before).await, Reads { requests: 0, nodes: 0, whole: 0 }, "the events were missed");
    assert_eq!(servers_in(dir.path()).len(), INITIAL, "the change is not in the file yet");

    // The audit (every 5 s to 6.25 s) reads the path whole, finds the six nodes, repairs them.
    let repaired = wait_until(Duration::from_secs(15), || {
        let servers = servers_in(dir.path());
        servers.len() == INITIAL + 5 && servers.iter().any(|(n, s)| *n == name(7) && s.ends_with(" 99"))
    })
    .await;
    assert!(repaired, "{:?}", watcher.stderr());
    let line = watcher.wait_for_stderr("nodes differed", Duration::from_secs(5)).await;
    assert!(line.contains(&format!("audit of {DIR}: 6 nodes differed")), "{line}");
    assert_eq!(watcher.metric("lb_watcher_zookeeper_audit_repairs_total").await, 6);
    // Each audit: one whole read (a listing and one multi-read of every node), nothing else.
    let audits = watcher.metric("lb_watcher_zookeeper_audits_total").await - audits_before;
    let spent = cost(&watcher, before).await;
    assert!(audits >= 1);
    assert_eq!(spent.whole, audits, "{spent:?}");
    assert_eq!(spent.requests, 2 * audits, "{spent:?}");
}
