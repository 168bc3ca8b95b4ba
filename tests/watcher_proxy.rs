//! lb-watcher with a real lb-proxy: a server that registers in ZooKeeper receives requests, a
//! server that deregisters under load is drained and removed without one failed request, and
//! neither starts a new lb-proxy worker (runtime commands, not reloads).

use std::time::Duration;

use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{client, wait_until, watched_proxy_yaml, ProxyProcess, TestServer, WatcherProcess};
use tokio::time::Instant;

const DIR: &str = "/com/example/test/api";

/// lb-watcher on `proxy`'s file, its base the file as the proxy started with it (no servers).
async fn watcher_for(dir: &std::path::Path, proxy: &ProxyProcess, zk: &ZkServer, hysteresis: &str) -> WatcherProcess {
    std::fs::copy(proxy.config_path(), dir.join("base.yaml")).expect("base.yaml");
    let yaml = format!(
        "zookeeper:\n  servers: [\"{zk}\"]\n  session_timeout: 6s\n\
         proxy:\n  base: base.yaml\n  config: {config}\n  drift_check: 500ms\n\
         hysteresis: {hysteresis}\n\
         services:\n  - backend: api\n    path: {DIR}\n    record_type: load_balancer\n",
        zk = zk.connect_string(),
        config = proxy.config_path().display()
    );
    WatcherProcess::start(dir, &yaml).await
}

/// Which server answered `GET /`, if any did with 200.
async fn answered_by(proxy: &ProxyProcess) -> Option<String> {
    let response = client::get(proxy.addr(), "/").await.ok()?;
    (response.status == 200).then(|| response.server().unwrap_or_default().to_owned())
}

/// Polls `GET /` until a server for which `want` holds answers; that server.
async fn answered_within(proxy: &ProxyProcess, within: Duration, want: impl Fn(&str) -> bool) -> Option<String> {
    let deadline = Instant::now() + within;
    loop {
        let answered = answered_by(proxy).await;
        if answered.as_deref().is_some_and(&want) || Instant::now() >= deadline {
            return answered;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registered_server_receives_requests_without_a_new_worker() {
    let zk = ZkServer::start();
    let web1 = TestServer::start("web1");
    let proxy = ProxyProcess::start_with(1, watched_proxy_yaml);
    let table = proxy.show_proc().await;
    let worker = proxy.current_worker().await.expect("a worker");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let hysteresis = "{ collect: 0s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let watcher = watcher_for(dir.path(), &proxy, &zk, hysteresis).await;
    assert_eq!(answered_by(&proxy).await, None, "no server yet: 503");

    let registrar = ZkClient::connect(&zk.connect_string()).await;
    registrar.mkdir(DIR).await;
    registrar.register_port(DIR, "web1", web1.addr()).await;
    let answered = answered_within(&proxy, Duration::from_secs(15), |s| s == "web1").await;
    assert_eq!(answered.as_deref(), Some("web1"), "web1 receives requests; watcher:\n{}", watcher.stderr().join("\n"));

    let after = proxy.show_proc().await;
    assert_eq!(proxy.current_worker().await, Some(worker), "the same worker serves: no reload");
    assert_eq!(after.master.reloads, table.master.reloads, "no reload: {after:?}");
    let status = watcher.status().await;
    assert_eq!(status["last_apply"]["result"], "runtime", "{status}");
    assert_eq!(watcher.metric("lb_watcher_reloads_total").await, 0);
    // The file is the reference: it has the server too.
    let file = lb_config::Config::load(proxy.config_path()).expect("the file loads");
    assert_eq!(file.backend("api").map(|b| b.servers.len()), Some(1));

    // Drift: a server added by hand is drained and deleted, one put in maint is made ready.
    let rogue = TestServer::start("rogue");
    let add = format!("add server api/rogue {}", rogue.addr());
    proxy.runtime_command(&add).await.expect("add server");
    proxy.runtime_command("set server api/rogue state ready").await.expect("ready");
    proxy.runtime_command("set server api/web1 state maint").await.expect("maint");
    let mut repaired = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !repaired && Instant::now() < deadline {
        repaired = running_state(&proxy, "rogue").await.is_none() && running_state(&proxy, "web1").await == Some(0);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(repaired, "drift repaired; watcher:\n{}", watcher.stderr().join("\n"));
    // Counted once the repair's commands are done.
    let mut repairs = 0;
    let deadline = Instant::now() + Duration::from_secs(5);
    while repairs == 0 && Instant::now() < deadline {
        repairs = watcher.metric("lb_watcher_drift_repairs_total").await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(repairs >= 1, "drift repairs counted");
    assert_eq!(proxy.current_worker().await, Some(worker), "still no new worker");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_deregistering_under_load_costs_no_request_and_no_new_worker() {
    let zk = ZkServer::start();
    let web1 = TestServer::start("web1");
    let web2 = TestServer::start("web2");
    let proxy = ProxyProcess::start_with(1, watched_proxy_yaml);
    let worker = proxy.current_worker().await.expect("a worker");
    let reloads = proxy.show_proc().await.master.reloads;
    let registrar = ZkClient::connect(&zk.connect_string()).await;
    registrar.mkdir(DIR).await;
    registrar.register_port(DIR, "web1", web1.addr()).await;
    registrar.register_port(DIR, "web2", web2.addr()).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let hysteresis = "{ collect: 500ms, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let watcher = watcher_for(dir.path(), &proxy, &zk, hysteresis).await;
    let web2_answers = answered_within(&proxy, Duration::from_secs(15), |s| s == "web2").await;
    assert_eq!(web2_answers.as_deref(), Some("web2"), "watcher:\n{}", watcher.stderr().join("\n"));
    assert!(answered_within(&proxy, Duration::from_secs(10), |s| s == "web1").await.is_some());

    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(20));
    spec.new_connection_clients = 10;
    spec.keep_alive_clients = 10;
    spec.pause = Duration::from_millis(10);
    spec.slow_every = Some(Duration::from_millis(200));
    spec.slow_path = "/slow?ms=1000".into();
    let load = Load::start(spec);
    tokio::time::sleep(Duration::from_millis(700)).await;

    registrar.delete(&format!("{DIR}/web2")).await;
    // Drained, then deleted from lb-proxy once its last connection is done.
    let gone = wait_until(Duration::from_secs(15), || {
        let file = lb_config::Config::load(proxy.config_path()).ok();
        let in_file = file.and_then(|f| f.backend("api").map(|b| b.servers.iter().any(|s| s.name == "web2")));
        in_file == Some(false)
    })
    .await;
    assert!(gone, "web2 left the file");
    // Drained at once: it keeps the connections it has, gets no new one.
    let mut drained = false;
    let deadline = Instant::now() + Duration::from_secs(10);
    while !drained && Instant::now() < deadline {
        drained = running_state(&proxy, "web2").await.is_some_and(|admin| admin & 0x08 != 0);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(drained, "web2 drained in the running lb-proxy; watcher:\n{}", watcher.stderr().join("\n"));
    let connections = web2.connections();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(web2.connections(), connections, "no new connection to the drained web2");
    let report = load.stop().await;
    println!("{report}");

    // Deleted from lb-proxy once its last connection is done (the drift check retries).
    let mut deleted = false;
    let deadline = Instant::now() + Duration::from_secs(15);
    while !deleted && Instant::now() < deadline {
        deleted = running_state(&proxy, "web2").await.is_none() && running_state(&proxy, "web1").await.is_some();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(deleted, "web2 deleted from the running lb-proxy once idle; watcher:\n{}", watcher.stderr().join("\n"));
    assert_eq!(report.failed(), 0, "no request failed:\n{report}");
    assert!(report.total().ok > 100, "the load ran:\n{report}");
    assert_eq!(proxy.current_worker().await, Some(worker), "the same worker serves");
    let table = proxy.show_proc().await;
    assert_eq!(table.master.reloads, reloads, "no reload: {table:?}");
    assert_eq!(table.workers.len(), 1, "no other worker: {table:?}");
    assert_eq!(watcher.metric("lb_watcher_reloads_total").await, 0);
    assert_eq!(answered_within(&proxy, Duration::from_secs(1), |s| s == "web1").await.as_deref(), Some("web1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_moves_is_followed_with_set_server_addr_and_no_new_worker() {
    let zk = ZkServer::start();
    let old = TestServer::start("old-address");
    let new = TestServer::start("new-address");
    let proxy = ProxyProcess::start_with(1, watched_proxy_yaml);
    let worker = proxy.current_worker().await.expect("a worker");
    let reloads = proxy.show_proc().await.master.reloads;
    let registrar = ZkClient::connect(&zk.connect_string()).await;
    registrar.mkdir(DIR).await;
    registrar.register_port(DIR, "web1", old.addr()).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let hysteresis = "{ collect: 0s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let watcher = watcher_for(dir.path(), &proxy, &zk, hysteresis).await;
    let first = answered_within(&proxy, Duration::from_secs(15), |s| s == "old-address").await;
    assert_eq!(first.as_deref(), Some("old-address"), "watcher:\n{}", watcher.stderr().join("\n"));

    // web1 comes back on another port: the same server, moved in place.
    registrar.move_port(DIR, "web1", new.addr()).await;
    let moved = answered_within(&proxy, Duration::from_secs(15), |s| s == "new-address").await;
    assert_eq!(moved.as_deref(), Some("new-address"), "watcher:\n{}", watcher.stderr().join("\n"));
    for _ in 0..5 {
        assert_eq!(answered_by(&proxy).await.as_deref(), Some("new-address"), "every request to the new address");
    }
    let state = proxy.runtime_command("show servers state api").await.expect("show servers state");
    let port = new.addr().port().to_string();
    assert!(state.lines().any(|l| l.split(' ').nth(3) == Some("web1") && l.split(' ').any(|w| w == port)), "{state}");
    let file = lb_config::Config::load(proxy.config_path()).expect("the file loads");
    let servers = &file.backend("api").expect("api").servers;
    assert_eq!(servers.iter().map(|s| (s.name.as_str(), s.address)).collect::<Vec<_>>(), [("web1", new.addr())]);
    assert_eq!(proxy.current_worker().await, Some(worker), "the same worker serves");
    assert_eq!(proxy.show_proc().await.master.reloads, reloads, "no reload");
    assert_eq!(watcher.metric("lb_watcher_reloads_total").await, 0);
    assert_eq!(watcher.status().await["last_apply"]["result"], "runtime");
}

/// `srv_admin_state` of `server` in backend `api` of the running lb-proxy (`None`: not there).
async fn running_state(proxy: &ProxyProcess, server: &str) -> Option<u32> {
    let out =
        proxy.runtime_command("show servers state api").await.unwrap_or_else(|e| panic!("show servers state: {e}"));
    let rows = lb_testkit::runtime::parse_servers_state(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    rows.iter()
        .find(|r| r.get("srv_name").map(String::as_str) == Some(server))
        .and_then(|r| r.get("srv_admin_state")?.parse().ok())
}
