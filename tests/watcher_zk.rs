//! lb-watcher against a real ZooKeeper: registrations become servers in the file after the
//! collect window, re-registrations and bursts change nothing or once, removals are throttled,
//! an empty backend is refused, ZooKeeper outages and session expiry write nothing and resync
//! after, bad nodes are skipped with one warning (at the start or after the first apply), an
//! ensemble losing its leader is survived.
//! lb-proxy is not running here: the reload command is `true`, and the file is what is checked.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkEnsemble, ZkServer};
use lb_testkit::{wait_until, Signal, WatcherProcess, WATCHED_BASE};

const DIR: &str = "/com/example/test/api";

struct Setup {
    dir: tempfile::TempDir,
    out: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::Builder::new().prefix("lb-watcher-test-").tempdir().expect("a temporary directory");
    std::fs::write(dir.path().join("base.yaml"), WATCHED_BASE).expect("base.yaml");
    let out = dir.path().join("lb-proxy.yaml");
    Setup { dir, out }
}

fn watcher_yaml(zk: &str, session_timeout: &str, hysteresis: &str) -> String {
    format!(
        "zookeeper:\n  servers: [{servers}]\n  session_timeout: {session_timeout}\n  retry_max: 1s\n\
         proxy:\n  base: base.yaml\n  config: lb-proxy.yaml\n  reload_command: [\"true\"]\n  runtime: false\n\
         hysteresis: {hysteresis}\n\
         services:\n  - backend: api\n    path: {DIR}\n    port: 80\n",
        servers = zk.split(',').map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")
    )
}

const QUICK: &str = "{ collect: 1s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";

/// The server names of backend `api` in the file (empty when there is no file).
fn servers_in(out: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read_to_string(out) else { return Vec::new() };
    let config = lb_config::Config::parse(&text, "lb-proxy.yaml").expect("the written file is valid");
    let mut names: Vec<String> =
        config.backend("api").map(|b| b.servers.iter().map(|s| s.name.clone()).collect()).unwrap_or_default();
    names.sort();
    names
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

async fn wait_servers(out: &Path, want: &[&str], within: Duration) -> bool {
    let want = names(want);
    wait_until(within, || servers_in(out) == want).await
}

/// ZooKeeper with `web1` registered, and lb-watcher (sessions of `session_timeout`) once it has
/// written `web1` to the file.
async fn web1_written(session_timeout: &str) -> (ZkServer, Setup, ZkClient, WatcherProcess) {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    let yaml = watcher_yaml(&zk.connect_string(), session_timeout, QUICK);
    let watcher = WatcherProcess::start(s.dir.path(), &yaml).await;
    assert!(wait_servers(&s.out, &["web1"], Duration::from_secs(10)).await, "{:?}", servers_in(&s.out));
    (zk, s, client, watcher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registration_reaches_the_file_after_the_collect_window() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    let hysteresis = "{ collect: 2s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", hysteresis)).await;
    assert!(wait_until(Duration::from_secs(10), || watcher.stderr_count("ZooKeeper connected") > 0).await);

    let registered = Instant::now();
    client.register(DIR, "web1", "10.0.0.5").await;
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(servers_in(&s.out), Vec::<String>::new(), "nothing before the collect window ends");
    let status = watcher.status().await;
    assert_eq!(status["pending"][0]["add"], serde_json::json!(["web1"]), "{status}");
    assert!(status["pending_due_in_ms"].as_u64().is_some_and(|ms| ms <= 2000), "{status}");
    assert!(wait_servers(&s.out, &["web1"], Duration::from_secs(10)).await, "web1 reaches the file");
    assert!(registered.elapsed() >= Duration::from_secs(2));
    let config = lb_config::Config::load(&s.out).expect("valid");
    let server = &config.backend("api").expect("api").servers[0];
    assert_eq!(server.address.to_string(), "10.0.0.5:80", "the service gives the port of a host record");
    // The file is written first, then lb-proxy is reloaded, then the status says so.
    let mut status = watcher.status().await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while status["last_apply"].is_null() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
        status = watcher.status().await;
    }
    assert_eq!(status["zookeeper"]["state"], "connected", "{status}");
    assert_eq!(status["last_apply"]["result"], "reload", "{status}");
    assert_eq!(status["servers"]["api"]["web1"], "10.0.0.5:80 weight 100", "{status}");
    assert_eq!(watcher.metric("lb_watcher_reloads_total").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_registration_inside_the_window_changes_nothing() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    client.register(DIR, "web2", "10.0.0.6").await;
    let hysteresis = "{ collect: 2s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", hysteresis)).await;
    assert!(wait_servers(&s.out, &["web1", "web2"], Duration::from_secs(10)).await);
    // The apply is over (file written, reload done, counted) before the baseline is taken.
    assert!(wait_until(Duration::from_secs(10), || watcher.stderr_count("applied (reload)") == 1).await);
    let before = std::fs::metadata(&s.out).and_then(|m| m.modified()).expect("mtime");
    let applies = watcher.metric("lb_watcher_applies_total").await;
    assert_eq!(applies, 1);

    // The registrar's way of re-registering: delete, then create again.
    client.delete(&format!("{DIR}/web2")).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    client.register(DIR, "web2", "10.0.0.6").await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = std::fs::metadata(&s.out).and_then(|m| m.modified()).expect("mtime");
    assert_eq!(before, after, "the file was not touched");
    assert_eq!(watcher.metric("lb_watcher_applies_total").await, applies, "no apply");
    assert_eq!(servers_in(&s.out), names(&["web1", "web2"]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_simultaneous_removals_go_in_throttled_rounds() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    for i in 0..20 {
        client.register(DIR, &format!("web{i:02}"), &format!("10.0.1.{i}")).await;
    }
    let hysteresis = "{ collect: 500ms, collect_jitter: 0s, hold: 1s, max_remove_percent: 20, min_apply_interval: 0s }";
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", hysteresis)).await;
    assert!(wait_until(Duration::from_secs(10), || servers_in(&s.out).len() == 20).await);

    for i in 0..10 {
        client.delete(&format!("{DIR}/web{i:02}")).await;
    }
    // Sample the file until it settles at 10 servers.
    let mut steps: Vec<(Instant, usize)> = vec![(Instant::now(), 20)];
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        let n = servers_in(&s.out).len();
        if steps.last().map(|s| s.1) != Some(n) {
            steps.push((Instant::now(), n));
        }
        if n == 10 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let sizes: Vec<usize> = steps.iter().map(|s| s.1).collect();
    // Each round removes at most a fifth of the servers (at least one), rounds a hold apart:
    // 20 → 16 → 13 → 11 → 10 when all ten went at once.
    assert_eq!(sizes.last(), Some(&10), "settled at 10: {sizes:?}");
    assert!(sizes.len() >= 5, "at least four rounds: {sizes:?}");
    for w in steps.windows(2) {
        let (before, after) = (w[0].1, w[1].1);
        assert!(after < before && before - after <= (before / 5).max(1), "a round removed too many: {sizes:?}");
    }
    for w in steps[1..].windows(2) {
        let apart = w[1].0.duration_since(w[0].0);
        assert!(apart >= Duration::from_millis(900), "rounds {apart:?} apart (hold 1s): {sizes:?}");
    }
    let expected: Vec<String> = (10..20).map(|i| format!("web{i:02}")).collect();
    assert_eq!(servers_in(&s.out), expected);
    assert!(watcher.stderr_count("throttled to a later round") >= 1, "the wait is logged: {:?}", watcher.stderr());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn all_removed_is_refused_and_the_last_set_kept() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    for name in ["web1", "web2", "web3"] {
        client.register(DIR, name, "10.0.0.7").await;
    }
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", QUICK)).await;
    assert!(wait_servers(&s.out, &["web1", "web2", "web3"], Duration::from_secs(10)).await);
    for name in ["web1", "web2", "web3"] {
        client.delete(&format!("{DIR}/{name}")).await;
    }
    watcher.wait_for_stderr("refusing to empty backend api", Duration::from_secs(10)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(servers_in(&s.out), names(&["web1", "web2", "web3"]), "the last good set is kept");
    assert_eq!(watcher.stderr_count("refusing to empty backend api"), 1, "said once");
    let status = watcher.status().await;
    assert_eq!(status["refused"], serde_json::json!(["api"]), "{status}");
    assert_eq!(watcher.metric("lb_watcher_refused_total").await, 1);
    // A server coming back is taken as usual.
    client.register(DIR, "web4", "10.0.0.8").await;
    assert!(wait_servers(&s.out, &["web4"], Duration::from_secs(10)).await, "{:?}", servers_in(&s.out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_and_foreign_nodes_are_skipped_with_one_warning() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.create(&format!("{DIR}/garbage"), b"{not json").await;
    client.create(&format!("{DIR}/foreign"), br#"{"type":"load_balancer","address":"10.0.0.9"}"#).await;
    client.create(&format!("{DIR}/noaddr"), br#"{"type":"host"}"#).await;
    client.register(DIR, "good1", "10.0.0.10").await;
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", QUICK)).await;
    assert!(wait_servers(&s.out, &["good1"], Duration::from_secs(10)).await);
    // Another change: every node is read again, the bad ones are not warned about again.
    client.register(DIR, "good2", "10.0.0.11").await;
    assert!(wait_servers(&s.out, &["good1", "good2"], Duration::from_secs(10)).await);
    for name in ["garbage", "foreign", "noaddr"] {
        let said = watcher.stderr_count(&format!("skipping node {DIR}/{name}"));
        assert_eq!(said, 1, "{name}: {:?}", watcher.stderr());
    }
    assert!(watcher.stderr().iter().any(|l| l.contains("garbage") && l.contains("not valid JSON")));
    assert!(watcher.stderr().iter().any(|l| l.contains("foreign") && l.contains("record type `load_balancer`")));
    assert_eq!(watcher.metric("lb_watcher_skipped_nodes_total").await, 3);
    assert!(zk.is_serving());
}

/// After the first apply lb-watcher checks only the servers a change adds: a registration that
/// would make a server lb-proxy refuses (an address that is not one, a name lb-config forbids)
/// is still refused, named by its node, and the file stays as it was; a good registration
/// after it goes through without it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_registration_after_the_first_apply_is_named_and_the_file_kept() {
    let (_zk, s, client, watcher) = web1_written("4s").await;
    let running = std::fs::read(&s.out).expect("the written file");
    client.register(DIR, "web2", "10.0.0.300").await;
    client.register(DIR, "web!3", "10.0.0.7").await;
    for (node, reason) in [("web2", "address `10.0.0.300` is not an IP address"), ("web!3", "not a valid server name")]
    {
        let line = watcher.wait_for_stderr(&format!("skipping node {DIR}/{node} "), Duration::from_secs(10)).await;
        assert!(line.contains(reason), "{node}: {line}");
    }
    // Past the collect window: nothing was written.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(std::fs::read(&s.out).expect("the file") == running, "the file changed: {:?}", servers_in(&s.out));
    client.register(DIR, "web4", "10.0.0.8").await;
    assert!(wait_servers(&s.out, &["web1", "web4"], Duration::from_secs(10)).await, "{:?}", servers_in(&s.out));
    assert_eq!(watcher.metric("lb_watcher_skipped_nodes_total").await, 2);
}

/// Checks the file keeps `want` while `during` runs: returns how many distinct contents seen.
async fn sample_file(out: &Path, for_how_long: Duration) -> Vec<Vec<String>> {
    let mut seen: Vec<Vec<String>> = Vec::new();
    let deadline = Instant::now() + for_how_long;
    while Instant::now() < deadline {
        let now = servers_in(out);
        if seen.last() != Some(&now) {
            seen.push(now);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_killed_and_restarted_writes_nothing_then_resyncs() {
    let mut zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    client.register(DIR, "web2", "10.0.0.6").await;
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "8s", QUICK)).await;
    assert!(wait_servers(&s.out, &["web1", "web2"], Duration::from_secs(10)).await);
    let before = std::fs::read(&s.out).expect("the file");

    zk.kill();
    let mut disconnected = false;
    let outage = Instant::now();
    while outage.elapsed() < Duration::from_secs(4) {
        disconnected |= watcher.status().await["zookeeper"]["state"] == "disconnected";
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(disconnected, "the status says disconnected during the outage");
    assert_eq!(std::fs::read(&s.out).expect("the file"), before, "nothing written while ZooKeeper is away");

    zk.restart();
    assert!(
        wait_until(Duration::from_secs(15), || watcher.stderr_count("ZooKeeper connected") >= 2).await,
        "reconnected: {:?}",
        watcher.stderr()
    );
    // The watches work again: a new registration arrives (the test's own session reconnects too).
    let client2 = ZkClient::connect(&zk.connect_string()).await;
    client2.register(DIR, "web3", "10.0.0.7").await;
    assert!(wait_servers(&s.out, &["web1", "web2", "web3"], Duration::from_secs(15)).await, "{:?}", servers_in(&s.out));
    assert!(watcher.metric("lb_watcher_zookeeper_disconnects_total").await >= 1);
    assert_eq!(watcher.status().await["zookeeper"]["state"], "connected");
    drop(client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_expiry_is_followed_by_a_new_session_and_a_full_re_read() {
    let (_zk, s, client, watcher) = web1_written("1s").await;
    let session = watcher.status().await["zookeeper"]["session_id"].clone();

    // Frozen longer than its session timeout: ZooKeeper expires the session.
    watcher.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(4)).await;
    client.register(DIR, "web2", "10.0.0.6").await;
    watcher.signal(Signal::SIGCONT);

    watcher.wait_for_stderr("session expired", Duration::from_secs(15)).await;
    assert!(wait_servers(&s.out, &["web1", "web2"], Duration::from_secs(15)).await, "{:?}", servers_in(&s.out));
    let status = watcher.status().await;
    assert_eq!(status["zookeeper"]["state"], "connected", "{status}");
    assert_ne!(status["zookeeper"]["session_id"], session, "a new session");
    assert_eq!(watcher.metric("lb_watcher_zookeeper_expirations_total").await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_three_server_ensemble_losing_its_leader() {
    let mut ensemble = ZkEnsemble::start(3);
    let s = setup();
    let connect = ensemble.connect_string();
    let client = ZkClient::connect(&connect).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&connect, "6s", QUICK)).await;
    assert!(wait_servers(&s.out, &["web1"], Duration::from_secs(15)).await);

    let leader = ensemble.leader().expect("a leader");
    ensemble.servers[leader].kill();
    let sampling = tokio::spawn({
        let out = s.out.clone();
        async move { sample_file(&out, Duration::from_secs(8)).await }
    });
    let new_leader = ensemble.wait_leader(Duration::from_secs(20));
    assert!(new_leader.is_some_and(|l| l != leader), "the two others elect a leader");
    let seen = sampling.await.expect("sampler");
    assert!(seen.iter().all(|set| set.contains(&"web1".to_owned())), "web1 never left the file: {seen:?}");

    let client2 = ZkClient::connect(&connect).await;
    client2.register(DIR, "web2", "10.0.0.6").await;
    assert!(wait_servers(&s.out, &["web1", "web2"], Duration::from_secs(20)).await, "{:?}", servers_in(&s.out));
    assert_eq!(watcher.status().await["zookeeper"]["state"], "connected");
    ensemble.restart(leader);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_unreachable_at_start_leaves_the_file_and_keeps_trying() {
    let mut zk = ZkServer::start();
    let s = setup();
    // A file from an earlier run, with a server in it.
    let earlier = WATCHED_BASE.replace("servers: []", "servers: [{ name: old1, address: \"10.0.0.1:80\" }]");
    std::fs::write(&s.out, &earlier).expect("the earlier file");
    zk.kill();
    let watcher = WatcherProcess::start(s.dir.path(), &watcher_yaml(&zk.connect_string(), "4s", QUICK)).await;
    // A connection attempt gives up after about the session timeout, then another one starts.
    let mut status = watcher.status().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !status["zookeeper"]["last_error"].is_string() && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        status = watcher.status().await;
    }
    assert_eq!(status["zookeeper"]["state"], "connecting", "{status}");
    assert!(status["zookeeper"]["last_error"].is_string(), "{status}");
    assert_eq!(std::fs::read_to_string(&s.out).expect("the file"), earlier, "left as it is");

    zk.restart();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    // old1 is not registered: held, then removed (hold 0), web1 added.
    assert!(wait_servers(&s.out, &["web1"], Duration::from_secs(20)).await, "{:?}", servers_in(&s.out));
    assert_eq!(watcher.status().await["zookeeper"]["state"], "connected");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_reload_command_is_retried_and_reported() {
    let zk = ZkServer::start();
    let s = setup();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register(DIR, "web1", "10.0.0.5").await;
    let yaml = watcher_yaml(&zk.connect_string(), "4s", QUICK)
        .replace("reload_command: [\"true\"]", "reload_command: [sh, -c, \"echo no lb-proxy here >&2; exit 3\"]")
        .replace("runtime: false", "runtime: false\n  reload_retries: 1");
    let watcher = WatcherProcess::start(s.dir.path(), &yaml).await;
    let mut status = watcher.status().await;
    let deadline = Instant::now() + Duration::from_secs(15);
    while status["last_apply"]["result"] != "failed" && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        status = watcher.status().await;
    }
    assert_eq!(status["last_apply"]["result"], "failed", "{status}");
    let detail = status["last_apply"]["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("exited with exit status: 3") && detail.contains("no lb-proxy here"), "{detail}");
    assert!(watcher.stderr_count("retrying in") >= 1, "retried: {:?}", watcher.stderr());
    assert!(watcher.metric("lb_watcher_reload_failures_total").await >= 1);
    // The file is written (it is the reference) and the apply is tried again later.
    assert_eq!(servers_in(&s.out), names(&["web1"]));
    assert!(
        wait_until(Duration::from_secs(15), || watcher.stderr_count("applying the new server list failed") >= 2).await,
        "tried again: {:?}",
        watcher.stderr()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lbctl_register_registers_until_sigterm() {
    let (zk, s, client, watcher) = web1_written("4s").await;

    let mut lbctl = std::process::Command::new(lb_testkit::bin_path("lbctl"))
        .args(["register", "--zk", &zk.connect_string(), "--path", DIR, "--name", "web9", "--address", "10.0.0.9"])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawning lbctl register");
    assert!(wait_servers(&s.out, &["web1", "web9"], Duration::from_secs(15)).await, "{:?}", watcher.stderr());
    let data = client.client.get_data(&format!("{DIR}/web9")).await.map(|(d, _)| d).unwrap_or_default();
    assert_eq!(
        String::from_utf8_lossy(&data),
        r#"{"address":"10.0.0.9","host":{"address":"10.0.0.9"},"ttl":60,"type":"host"}"#
    );

    let _ = lb_testkit::procfs::signal(lbctl.id(), Signal::SIGTERM);
    let exited = wait_until(Duration::from_secs(10), || lbctl.try_wait().ok().flatten().is_some()).await;
    assert!(exited, "lbctl register exits on SIGTERM");
    assert_eq!(lbctl.wait().ok().and_then(|s| s.code()), Some(0));
    let gone = client.client.check_stat(&format!("{DIR}/web9")).await.ok().flatten().is_none();
    assert!(gone, "the node is deleted at once, not at session expiry");
    assert!(wait_servers(&s.out, &["web1"], Duration::from_secs(10)).await, "{:?}", servers_in(&s.out));
}
