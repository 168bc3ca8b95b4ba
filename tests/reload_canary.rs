//! Canary reloads of lb-proxy: the new worker takes the share asked of new connections (over
//! 10,000 of them), a configuration that is valid and wrong is rolled back within its window
//! having failed no more than its share, and a good one is promoted.
//!
//! The old configuration sends every request to server `old`, the new one to server `new` (or
//! breaks in some way): the `X-Server` of each answer says which worker served it.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lb_testkit::client;
use lb_testkit::lbctl::{LbctlOutput, Role};
use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::{wait_until, ProxyProcess, TestServer};

/// `global` and the backend's server line, with a canary setting of `canary` (YAML under
/// `global.canary`, empty for none) and `timeouts` for the defaults.
/// With a second port, the stats listener (`/metrics`) is on it.
fn config(server: SocketAddr, canary: &str, server_line: &str, server_timeout: &str) -> impl Fn(&[u16]) -> String {
    let canary = if canary.is_empty() { String::new() } else { format!("  canary: {{ {canary} }}\n") };
    let (server_line, server_timeout) = (server_line.to_owned(), server_timeout.to_owned());
    move |ports: &[u16]| {
        let stats = ports.get(1).map_or_else(String::new, |p| format!("  stats: {{ address: \"127.0.0.1:{p}\" }}\n"));
        format!(
            "global:\n  worker_threads: 1\n{canary}{stats}\
             defaults:\n  timeouts: {{ connect: 2s, client: 30s, server: {server_timeout}, http_keep_alive: 30s }}\n\
             frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{fe}\"]\n    default_backend: be\n\
             backends:\n  - name: be\n    servers: [ {{ name: s, address: \"{server}\"{server_line} }} ]\n",
            fe = ports[0]
        )
    }
}

/// `lbctl reload ARGS…` in the background (it answers with the verdict).
fn reload_in_background(proxy: &ProxyProcess, args: &[&str]) -> tokio::task::JoinHandle<LbctlOutput> {
    let socket = proxy.control_socket().to_path_buf();
    let args: Vec<String> = std::iter::once("reload".to_owned()).chain(args.iter().map(|a| (*a).to_owned())).collect();
    tokio::spawn(async move {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        lb_testkit::lbctl::lbctl(&socket, &args).await
    })
}

/// Waits until `show proc` has a canary, and returns its pid.
async fn canary_pid(proxy: &ProxyProcess) -> u32 {
    for _ in 0..200 {
        let table = proxy.show_proc().await;
        if let Some(w) = table.workers.iter().find(|w| w.role == Role::Canary) {
            return w.pid;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no canary worker appeared; stderr: {:?}", proxy.stderr());
}

/// `count` GETs, each on a new connection, `clients` at a time: answers by `X-Server`, and
/// the requests that failed (with the first error).
async fn hits(addr: SocketAddr, count: u64, clients: u64) -> (HashMap<String, u64>, u64, Option<String>) {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let next = next.clone();
        tasks.push(tokio::spawn(async move {
            let (mut by_server, mut failed, mut first) = (HashMap::<String, u64>::new(), 0, None);
            while next.fetch_add(1, Ordering::Relaxed) < count {
                match client::get(addr, "/").await {
                    Ok(r) if r.status == 200 => {
                        *by_server.entry(r.server().unwrap_or("?").to_owned()).or_default() += 1
                    }
                    Ok(r) => {
                        failed += 1;
                        first.get_or_insert(format!("status {}", r.status));
                    }
                    Err(e) => {
                        failed += 1;
                        first.get_or_insert(format!("{e:#}"));
                    }
                }
            }
            (by_server, failed, first)
        }));
    }
    let (mut by_server, mut failed, mut first) = (HashMap::new(), 0, None);
    for task in tasks {
        let (b, f, e) = task.await.expect("a client task");
        for (k, n) in b {
            *by_server.entry(k).or_default() += n;
        }
        failed += f;
        first = first.or(e);
    }
    (by_server, failed, first)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_share_served_is_the_share_asked_over_ten_thousand_connections() {
    const CONNECTIONS: u64 = 10_000;
    let (old, new) = (TestServer::start("old"), TestServer::start("new"));
    let proxy = ProxyProcess::start_with(1, config(old.addr(), "", "", "30s"));
    // 30 % beside the 10 and 50: at 50 % a split with its sides swapped would still serve
    // half, and only an uneven share tells them apart.
    for share in [10u64, 30, 50] {
        proxy.write_config(&config(new.addr(), "", "", "30s")(proxy.ports()));
        let reload = reload_in_background(&proxy, &["--canary", &format!("{share}%"), "--for", "10m"]);
        canary_pid(&proxy).await;
        let (by_server, failed, first) = hits(proxy.addr(), CONNECTIONS, 20).await;
        assert_eq!(failed, 0, "requests failed during the split: first {first:?}");
        let served = by_server.get("new").copied().unwrap_or(0);
        let served_points = served as f64 * 100.0 / CONNECTIONS as f64;
        println!("canary of {share}%: the new worker served {served} of {CONNECTIONS} ({served_points:.2}%)");
        // Each worker's counter keeps its share exactly (the ±3 points asked of it are met with
        // room to spare): a few connections of slack, for the ones in flight at the switch.
        let expected = CONNECTIONS * share / 100;
        assert!(
            served.abs_diff(expected) <= 10,
            "asked {share}%, served {served} of {CONNECTIONS} ({served_points:.2}%, {by_server:?})"
        );
        // Ended by hand: the canary drains, the reload fails for whoever waited.
        let rolled = proxy.lbctl(&["rollback"]).await;
        assert_eq!(rolled.code, Some(0), "{rolled}");
        let answer = reload.await.expect("the reload task");
        assert_eq!(answer.code, Some(1), "{answer}");
        assert!(answer.stderr.contains("rolled back by hand"), "{answer}");
        // The old configuration serves everything again.
        let (by_server, failed, first) = hits(proxy.addr(), 200, 4).await;
        assert_eq!((failed, by_server.get("new")), (0, None), "after the rollback: {by_server:?} {first:?}");
    }
}

/// One wrong configuration under a steady load: rolled back within its window, the failed
/// requests at most its share of the window's, none broken by the rollback.
async fn rolled_back_under_load(proxy: &ProxyProcess, bad: &str, kind: &str, old: &TestServer) {
    const SHARE: f64 = 0.2;
    proxy.write_config(bad);
    let before_old = old.hits();
    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(60));
    spec.new_connection_clients = 8;
    spec.keep_alive_clients = 0;
    spec.pause = Duration::from_millis(5);
    let reload = reload_in_background(proxy, &[]);
    canary_pid(proxy).await;
    let load = Load::start(spec);
    let answer = tokio::time::timeout(Duration::from_secs(30), reload)
        .await
        .expect("a verdict within the window and then some")
        .expect("the reload task");
    let counts = load.stop().await.new_connection;
    println!("{kind}: {answer}\nload: {counts:?}");
    assert_eq!(answer.code, Some(1), "the reload must fail: {answer}");
    assert!(answer.stderr.contains("canary rolled back") && answer.stderr.contains(kind), "{answer}");
    let failed = counts.failed();
    let bound = (SHARE * counts.finished() as f64).ceil() as u64 + 2;
    assert!(failed <= bound, "{failed} failed of {} (share bound {bound})", counts.finished());
    assert!(failed > 0, "the wrong configuration never failed a request: the test proves nothing");
    // Failures are answers of the canary, never connections the split or the rollback broke.
    assert_eq!((counts.refused, counts.reset, counts.truncated, counts.timeout), (0, 0, 0, 0), "{counts:?}");
    // What the client saw succeed, the old server served.
    assert!(old.hits() - before_old >= counts.ok as usize, "server side: {} < {}", old.hits() - before_old, counts.ok);
    let table = proxy.show_proc().await;
    assert!(table.workers.iter().all(|w| w.role != Role::Canary), "{table:?}");
    assert!(table.canary.verdicts.first().is_some_and(|v| !v.promoted && v.summary.contains(kind)), "{table:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_configurations_are_rolled_back_within_their_window() {
    let old = TestServer::start("old");
    let canary = "share: 20%, duration: 3s, min_requests: 20";
    let good = config(old.addr(), canary, "", "30s");
    let proxy = ProxyProcess::start_with(1, &good);
    let ports = proxy.ports().to_vec();
    // A weight of 0 on every server: 503 from lb-proxy.
    rolled_back_under_load(&proxy, &config(old.addr(), canary, ", weight: 0", "30s")(&ports), "503 no server", &old)
        .await;
    // A server timeout of 1 ms against a server that takes 20: 504 from lb-proxy.
    old.set_delay(Duration::from_millis(20));
    rolled_back_under_load(&proxy, &config(old.addr(), canary, "", "1ms")(&ports), "502/504 by lb-proxy", &old).await;
    old.set_delay(Duration::ZERO);
    let table = proxy.show_proc().await;
    assert_eq!(table.canary.rolled_back, 2, "{table:?}");
    // And a good one is promoted, with the verdict in the answer.
    proxy.write_config(&good(&ports));
    let load = Load::start(LoadSpec::new(proxy.addr(), Duration::from_secs(30)));
    let answer = proxy.lbctl(&["reload"]).await;
    let report = load.stop().await;
    let counts = (report.new_connection.failed(), report.keep_alive.failed());
    assert_eq!(answer.code, Some(0), "{answer}");
    assert!(answer.stdout.starts_with("canary promoted: "), "{answer}");
    assert_eq!(counts, (0, 0), "{:?}", report.failures);
    assert_eq!(proxy.show_proc().await.canary.promoted, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_that_crashes_is_rolled_back_and_the_current_worker_serves_on() {
    let (old, new) = (TestServer::start("old"), TestServer::start("new"));
    let proxy = ProxyProcess::start_with(1, config(old.addr(), "", "", "30s"));
    proxy.write_config(&config(new.addr(), "", "", "30s")(proxy.ports()));
    let reload = reload_in_background(&proxy, &["--canary", "50%", "--for", "10m"]);
    let pid = canary_pid(&proxy).await;
    assert!(proxy.is_own_pid(pid));
    lb_testkit::procfs::signal(pid, lb_testkit::Signal::SIGKILL).expect("killing the canary worker");
    let answer = reload.await.expect("the reload task");
    assert_eq!(answer.code, Some(1), "{answer}");
    assert!(answer.stderr.contains("the canary worker exited (signal SIGKILL)"), "{answer}");
    let (by_server, failed, first) = hits(proxy.addr(), 200, 4).await;
    assert_eq!((failed, by_server.get("old").copied()), (0, Some(200)), "{first:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_during_a_canary_judges_the_newest_configuration() {
    let (old, new, newer) = (TestServer::start("old"), TestServer::start("new"), TestServer::start("newer"));
    let proxy = ProxyProcess::start_with(1, config(old.addr(), "", "", "30s"));
    let ports = proxy.ports().to_vec();
    proxy.write_config(&config(new.addr(), "", "", "30s")(&ports));
    let first = reload_in_background(&proxy, &["--canary", "50%", "--for", "10m"]);
    let superseded = canary_pid(&proxy).await;
    proxy.write_config(&config(newer.addr(), "min_requests: 0", "", "30s")(&ports));
    let second = reload_in_background(&proxy, &["--canary", "50%", "--for", "1s"]);
    let (a, b) = (first.await.expect("first"), second.await.expect("second"));
    // Both waited for the newest configuration's verdict (promoted: too little traffic to judge).
    for answer in [&a, &b] {
        assert_eq!(answer.code, Some(0), "{answer}");
        assert!(answer.stdout.contains("canary promoted"), "{answer}");
    }
    let (by_server, failed, _) = hits(proxy.addr(), 100, 4).await;
    assert_eq!((failed, by_server.get("newer").copied()), (0, Some(100)), "{by_server:?}");
    assert!(wait_until(Duration::from_secs(10), || !proxy.worker_pids().contains(&superseded)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_little_traffic_promotes_with_a_warning_or_rolls_back_as_configured() {
    let (old, new) = (TestServer::start("old"), TestServer::start("new"));
    let proxy = ProxyProcess::start_with(2, config(old.addr(), "", "", "30s"));
    let ports = proxy.ports().to_vec();
    proxy.write_config(&config(new.addr(), "duration: 300ms, too_little_traffic: rollback", "", "30s")(&ports));
    let answer = proxy.lbctl(&["reload"]).await;
    assert_eq!(answer.code, Some(1), "{answer}");
    assert!(answer.stderr.contains("too little traffic to judge"), "{answer}");
    proxy.write_config(&config(new.addr(), "duration: 300ms", "", "30s")(&ports));
    let answer = proxy.lbctl(&["reload"]).await;
    assert_eq!(answer.code, Some(0), "{answer}");
    assert!(answer.stdout.contains("promoted with too little traffic to judge"), "{answer}");
    // Both verdicts: a row in `show proc`, a counter in /metrics.
    let table = proxy.show_proc().await;
    assert_eq!((table.canary.promoted, table.canary.rolled_back), (1, 1), "{table:?}");
    assert!(table.canary.verdicts[0].promoted && !table.canary.verdicts[1].promoted, "{table:?}");
    let shown = proxy.lbctl(&["show", "proc"]).await.stdout;
    assert!(shown.contains("# canary verdicts: 1 promoted, 1 rolled back"), "{shown}");
    let metrics = client::get_ok(format!("127.0.0.1:{}", ports[1]).parse().expect("an address"), "/metrics")
        .await
        .expect("/metrics")
        .text();
    for verdict in ["promoted", "rolled_back"] {
        let line = format!("lb_proxy_canary_verdicts_total{{verdict=\"{verdict}\"}} 1");
        assert!(metrics.lines().any(|l| l == line), "no `{line}` in:\n{metrics}");
    }
    // `--canary off` skips the configured canary.
    let answer = proxy.lbctl(&["reload", "--canary", "off"]).await;
    assert_eq!(answer.code, Some(0), "{answer}");
    assert!(!answer.stdout.contains("canary"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_after_a_promotion_starts_the_previous_configuration_again() {
    let (old, new) = (TestServer::start("old"), TestServer::start("new"));
    let proxy = ProxyProcess::start_with(1, config(old.addr(), "", "", "30s"));
    let nothing = proxy.lbctl(&["rollback"]).await;
    assert_eq!(nothing.code, Some(1), "{nothing}");
    assert!(nothing.stderr.contains("nothing to roll back to"), "{nothing}");

    proxy.write_config(&config(new.addr(), "", "", "30s")(proxy.ports()));
    assert!(proxy.reload().await.is_ok());
    let (by_server, _, _) = hits(proxy.addr(), 20, 2).await;
    assert_eq!(by_server.get("new"), Some(&20));

    let back = proxy.lbctl(&["rollback"]).await;
    assert_eq!(back.code, Some(0), "{back}");
    assert!(back.stdout.contains("serves the previous configuration"), "{back}");
    let (by_server, failed, _) = hits(proxy.addr(), 20, 2).await;
    assert_eq!((failed, by_server.get("old")), (0, Some(&20)), "{by_server:?}");
    assert!(!proxy.dir().join(".lb-proxy.yaml.rollback").exists(), "the copy stays behind");
    // The file on disk is the reference: the next reload reads it.
    assert!(proxy.reload().await.is_ok());
    let (by_server, _, _) = hits(proxy.addr(), 20, 2).await;
    assert_eq!(by_server.get("new"), Some(&20));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_master_dies_during_a_canary_both_workers_drain_and_exit() {
    let (old, new) = (TestServer::start("old"), TestServer::start("new"));
    let mut proxy = ProxyProcess::start_with(1, config(old.addr(), "", "", "30s"));
    proxy.write_config(&config(new.addr(), "", "", "30s")(proxy.ports()));
    let reload = reload_in_background(&proxy, &["--canary", "50%", "--for", "10m"]);
    canary_pid(&proxy).await;
    let workers = proxy.worker_pids();
    assert_eq!(workers.len(), 2, "{workers:?}");
    proxy.kill_with(lb_testkit::Signal::SIGKILL);
    assert!(proxy.wait_exit(Duration::from_secs(5)).await.is_some());
    // Whoever waited learns the outcome is unknown (the master is gone), not a verdict.
    let answer = reload.await.expect("the reload task");
    assert_eq!(answer.code, Some(69), "{answer}");
    // Neither worker waits for the other for long: both hand nothing more over and go.
    let gone = wait_until(Duration::from_secs(10), || workers.iter().all(|&w| !lb_testkit::procfs::is_alive(w))).await;
    assert!(gone, "workers still alive: {workers:?}");
}
