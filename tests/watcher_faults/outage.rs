//! ZooKeeper away for longer than lb-watcher's session: the whole ensemble killed, or the
//! watcher itself frozen. Clients of lb-proxy see nothing, lb-proxy's servers stay as they
//! were, and once ZooKeeper is reachable again the watcher opens a new session, reads
//! everything again and converges to exactly what is registered.

use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkEnsemble, ZkServer};
use lb_testkit::{watched_proxy_yaml, ProxyProcess, Signal, TestServer, WatcherProcess};

use crate::common::*;

/// Short enough that a change waits half a second; the hold is what a resync restarts.
const QUICK: &str = "{ collect: 500ms, collect_jitter: 0s, hold: 1s, min_apply_interval: 0s }";

/// The watcher's session: 2 s. Its client gives up on a session not heard of for 7/5 of it.
const SESSION: &str = "2s";

/// What the outage tests share: four API servers (web4 registers later), lb-proxy, the
/// watcher, web1..web3 registered and in service.
struct Rig {
    servers: Vec<TestServer>,
    proxy: ProxyProcess,
    watcher: WatcherProcess,
    _dir: tempfile::TempDir,
}

async fn rig(registrar: &ZkClient, connect: &str) -> Rig {
    let servers: Vec<TestServer> = (1..=4).map(|i| TestServer::start(&format!("web{i}"))).collect();
    let proxy = ProxyProcess::start_with(1, watched_proxy_yaml);
    registrar.mkdir(DIR).await;
    for s in &servers[..3] {
        registrar.register_port(DIR, s.name(), s.addr()).await;
    }
    let dir = tempfile::tempdir().expect("a temporary directory");
    let watcher = watcher_for(dir.path(), &proxy, connect, SESSION, QUICK).await;
    let three = names(&["web1", "web2", "web3"]);
    let up = wait_converged(&proxy, &three, Duration::from_secs(20)).await;
    assert!(up, "web1..web3 in service: {:?}; watcher:\n{}", in_service(&proxy).await, watcher.stderr().join("\n"));
    Rig { servers, proxy, watcher, _dir: dir }
}

/// Sets seen by the sampler before `until`: each must be `want`.
fn unchanged_before(seen: &[(Instant, Vec<String>)], until: Instant, want: &[String]) -> Result<(), String> {
    match seen.iter().find(|(at, set)| *at < until && set != want) {
        Some((_, set)) => Err(format!("lb-proxy served {set:?} instead of {want:?}: {seen:?}")),
        None => Ok(()),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_whole_ensemble_down_past_the_session_timeout_changes_nothing_then_resyncs() {
    let mut ensemble = ZkEnsemble::start(3);
    let connect = ensemble.connect_string();
    // The registrars' sessions outlive the outage (a restarted ensemble gives every session it
    // restores a fresh timeout), as real registrars with their usual timeouts would; only the
    // watcher's 2 s session is exceeded.
    let registrar = ZkClient::connect_with(&connect, Duration::from_secs(30)).await;
    let r = rig(&registrar, &connect).await;
    let three = names(&["web1", "web2", "web3"]);
    let file_before = std::fs::read(r.proxy.config_path()).expect("the file");
    let session = r.watcher.status().await["zookeeper"]["session_id"].clone();
    let load = light_load(&r.proxy, Duration::from_secs(90));
    let sampler = Sampler::start(&r.proxy);
    tokio::time::sleep(Duration::from_millis(500)).await;

    let t0 = Instant::now();
    tokio::task::block_in_place(|| ensemble.kill_all());
    let mut states = Vec::new();
    while t0.elapsed() < Duration::from_secs(5) {
        let state = r.watcher.status().await["zookeeper"]["state"].as_str().unwrap_or_default().to_owned();
        if states.last() != Some(&state) {
            states.push(state);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(states.iter().any(|s| s == "disconnected" || s == "expired"), "the status tells: {states:?}");
    assert_eq!(std::fs::read(r.proxy.config_path()).expect("the file"), file_before, "nothing written");
    assert_eq!(in_service(&r.proxy).await, three, "lb-proxy's servers unchanged");
    let during = load.snapshot();
    assert_eq!(during.failed(), 0, "no request failed while ZooKeeper was down:\n{during}");

    let t_back = Instant::now();
    tokio::task::block_in_place(|| ensemble.start_all());
    let formed = t_back.elapsed();
    let reconnected = eventually(Duration::from_secs(30), || async {
        let status = r.watcher.status().await;
        status["zookeeper"]["state"] == "connected" && status["zookeeper"]["session_id"] != session
    })
    .await;
    assert!(reconnected, "a new session once the ensemble is back:\n{}", r.watcher.stderr().join("\n"));
    let resynced = t_back.elapsed();
    assert!(r.watcher.metric("lb_watcher_zookeeper_expirations_total").await >= 1, "the old session expired");
    // Re-read: nothing changed in ZooKeeper, so nothing changes in lb-proxy.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(in_service(&r.proxy).await, three);
    assert_eq!(std::fs::read(r.proxy.config_path()).expect("the file"), file_before, "still nothing written");

    // Changes made once it is back are followed: web4 in, web1 out.
    let t_change = Instant::now();
    let writer = ZkClient::connect(&connect).await;
    writer.register_port(DIR, "web4", r.servers[3].addr()).await;
    writer.delete(&format!("{DIR}/web1")).await;
    let want = names(&["web2", "web3", "web4"]);
    let converged = wait_converged(&r.proxy, &want, Duration::from_secs(20)).await;
    assert!(converged, "{:?}; watcher:\n{}", in_service(&r.proxy).await, r.watcher.stderr().join("\n"));
    let converge = t_change.elapsed();
    let report = load.stop().await;
    let seen = sampler.stop().await;
    unchanged_before(&seen, t_change, &three).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.failed(), 0, "no request failed:\n{report}");
    assert!(report.total().ok > 100, "the load ran:\n{report}");
    let all = eventually(Duration::from_secs(15), || async {
        servers_at(r.proxy.control_socket(), true).await.as_deref() == Some(&want[..])
    })
    .await;
    assert!(all, "web1 deleted from lb-proxy once idle: {:?}", servers_at(r.proxy.control_socket(), true).await);
    println!(
        "FIGURES ensemble-down: down {:.1}s (session {SESSION}); watcher states {states:?}; ensemble formed again \
         {:.1}s after restart, new watcher session {:.1}s after restart; change converged in {:.1}s; \
         requests ok {} failed {}; watcher RSS {:?} KiB; timeline:\n{}",
        t_back.duration_since(t0).as_secs_f64(),
        formed.as_secs_f64(),
        resynced.as_secs_f64(),
        converge.as_secs_f64(),
        report.total().ok,
        report.failed(),
        r.watcher.rss_kib(),
        timeline(&r.watcher, t0).join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_watcher_frozen_past_its_session_changes_nothing_then_converges() {
    let zk = ZkServer::start();
    let registrar = ZkClient::connect(&zk.connect_string()).await;
    let r = rig(&registrar, &zk.connect_string()).await;
    let three = names(&["web1", "web2", "web3"]);
    let file_before = std::fs::read(r.proxy.config_path()).expect("the file");
    let session = r.watcher.status().await["zookeeper"]["session_id"].clone();
    let load = light_load(&r.proxy, Duration::from_secs(60));
    let sampler = Sampler::start(&r.proxy);
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Only the watcher this test started: ZooKeeper expires its session after 2 s.
    let t0 = Instant::now();
    r.watcher.signal(Signal::SIGSTOP);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // Meanwhile ZooKeeper's view changes; lb-proxy's must not until the watcher is back.
    registrar.register_port(DIR, "web4", r.servers[3].addr()).await;
    registrar.delete(&format!("{DIR}/web1")).await;
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(in_service(&r.proxy).await, three, "lb-proxy's servers unchanged while the watcher is frozen");
    assert_eq!(std::fs::read(r.proxy.config_path()).expect("the file"), file_before);
    let during = load.snapshot();
    assert_eq!(during.failed(), 0, "no request failed:\n{during}");

    let t_cont = Instant::now();
    r.watcher.signal(Signal::SIGCONT);
    let want = names(&["web2", "web3", "web4"]);
    let converged = wait_converged(&r.proxy, &want, Duration::from_secs(20)).await;
    assert!(converged, "{:?}; watcher:\n{}", in_service(&r.proxy).await, r.watcher.stderr().join("\n"));
    let converge = t_cont.elapsed();
    let status = r.watcher.status().await;
    assert_eq!(status["zookeeper"]["state"], "connected", "{status}");
    assert_ne!(status["zookeeper"]["session_id"], session, "a new session");
    assert_eq!(r.watcher.metric("lb_watcher_zookeeper_expirations_total").await, 1);
    let expired_at = first_after(&r.watcher, t_cont, "session expired");
    let report = load.stop().await;
    let seen = sampler.stop().await;
    unchanged_before(&seen, t_cont, &three).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.failed(), 0, "no request failed:\n{report}");
    println!(
        "FIGURES watcher-frozen: stopped {:.1}s (session {SESSION}); after SIGCONT: expiry seen at {expired_at:?}s, \
         converged to {want:?} in {:.1}s; requests ok {} failed {}; timeline:\n{}",
        t_cont.duration_since(t0).as_secs_f64(),
        converge.as_secs_f64(),
        report.total().ok,
        report.failed(),
        timeline(&r.watcher, t0).join("\n")
    );
}
