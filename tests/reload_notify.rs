//! systemd's notification protocol (`Type=notify-reload`), against a socket the test binds in
//! place of systemd's: READY=1 once the first worker serves; RELOADING=1 with MONOTONIC_USEC
//! then READY=1 around every reload, failed ones included; STOPPING=1 on stop. Only the master
//! talks to systemd: workers never see NOTIFY_SOCKET.

use std::time::Duration;

use lb_testkit::notify::{monotonic_usec, Notification, NotifySocket};
use lb_testkit::{procfs, single_backend, ProxyProcess, Signal, TestServer};

const WITHIN: Duration = Duration::from_secs(10);

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    single_backend("global:\n  worker_threads: 1\n", "", ("s1", server.addr()))
}

fn texts(seen: &[Notification]) -> Vec<&str> {
    seen.iter().map(|n| n.text.as_str()).collect()
}

/// Every notification carries a STATUS= (what `systemctl status` shows).
fn assert_status(n: &Notification) {
    assert!(n.get("STATUS").is_some_and(|s| !s.is_empty()), "no STATUS= in {:?}", n.text);
}

/// The notifications of one reload: RELOADING=1 (with a MONOTONIC_USEC between `before` and
/// `after`), then READY=1. Returns READY's status.
fn assert_reload_sequence(systemd: &NotifySocket, before: i64, after: i64) -> String {
    let seen = systemd.recv_until(WITHIN, |n| n.has("READY=1")).unwrap_or_else(|seen| {
        panic!("no READY=1 after a reload; got {:?}", texts(&seen));
    });
    let reloading = seen.iter().position(|n| n.has("RELOADING=1"));
    let Some(reloading) = reloading else { panic!("no RELOADING=1 before READY=1: {:?}", texts(&seen)) };
    let n = &seen[reloading];
    assert_status(n);
    let usec: i64 = n
        .get("MONOTONIC_USEC")
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("RELOADING=1 without a MONOTONIC_USEC: {:?}", n.text));
    assert!(before <= usec && usec <= after, "MONOTONIC_USEC={usec} not within the reload [{before}, {after}]");
    let ready = seen.last().expect("READY=1");
    assert_status(ready);
    assert!(!ready.has("RELOADING=1"));
    assert!(usec <= ready.received_usec, "MONOTONIC_USEC={usec} later than READY=1 arrived ({})", ready.received_usec);
    println!("{:?}", texts(&seen));
    ready.get("STATUS").unwrap_or_default().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_master_tells_systemd_ready_reloading_and_stopping() {
    let server = TestServer::start("s1");
    let systemd = NotifySocket::bind();
    let notify_socket = systemd.path().to_str().expect("a UTF-8 path").to_owned();
    let mut proxy = ProxyProcess::start_with_env(1, &[("NOTIFY_SOCKET", &notify_socket)], config(&server));
    let master = proxy.pid();

    // Startup: READY=1 once the first worker serves.
    let seen = systemd.recv_until(WITHIN, |n| n.has("READY=1")).unwrap_or_else(|seen| {
        panic!("no READY=1 at startup; got {:?}", texts(&seen));
    });
    let ready = seen.last().expect("READY=1");
    assert_status(ready);
    assert!(seen.iter().all(|n| !n.has("RELOADING=1")), "no RELOADING=1 at startup: {:?}", texts(&seen));
    let first = proxy.current_worker().await.expect("a current worker");
    assert!(ready.get("STATUS").unwrap_or_default().contains(&first.to_string()), "{:?}", ready.text);

    // Only the master has NOTIFY_SOCKET.
    let has_notify = |pid| procfs::environ(pid).expect("environ").iter().any(|e| e.starts_with("NOTIFY_SOCKET="));
    assert!(has_notify(master), "the test passed NOTIFY_SOCKET to the master");
    assert!(!has_notify(first), "the worker must not inherit NOTIFY_SOCKET");

    // A reload: RELOADING=1, then READY=1.
    let before = monotonic_usec();
    let reloaded = proxy.reload().await.unwrap_or_else(|out| panic!("reload: {out}"));
    let after = monotonic_usec();
    let status = assert_reload_sequence(&systemd, before, after);
    assert!(status.contains(&reloaded.pid.to_string()), "READY's status names the new worker: {status:?}");
    assert!(!has_notify(reloaded.pid), "the new worker must not inherit NOTIFY_SOCKET");

    // A reload by signal, too.
    let before = monotonic_usec();
    proxy.kill_with(Signal::SIGHUP);
    let status = assert_reload_sequence(&systemd, before, i64::MAX);
    assert!(status.starts_with("serving"), "{status:?}");

    // A failed reload: RELOADING=1, then READY=1 all the same (the old worker serves).
    let good = std::fs::read_to_string(proxy.config_path()).expect("the configuration");
    proxy.write_config(&good.replace(&format!("127.0.0.1:{}", proxy.port()), "127.0.0.1:99999"));
    let before = monotonic_usec();
    let out = proxy.lbctl(&["reload"]).await;
    let after = monotonic_usec();
    assert_eq!(out.code, Some(1), "{out}");
    let status = assert_reload_sequence(&systemd, before, after);
    assert!(status.contains("failed"), "READY's status after a failed reload says so: {status:?}");
    proxy.write_config(&good);

    // Stop: STOPPING=1.
    let _ = systemd.drain(Duration::from_millis(200));
    proxy.kill_with(Signal::SIGTERM);
    let seen = systemd.recv_until(WITHIN, |n| n.has("STOPPING=1")).unwrap_or_else(|seen| {
        panic!("no STOPPING=1 after SIGTERM; got {:?}", texts(&seen));
    });
    assert_status(seen.last().expect("STOPPING=1"));
    println!("{:?}", texts(&seen));
    let status = proxy.wait_exit(WITHIN).await.expect("the master exits after SIGTERM");
    assert_eq!(status.code(), Some(0));
    let rest = systemd.drain(Duration::from_millis(200));
    assert!(rest.iter().all(|n| !n.has("READY=1") && !n.has("RELOADING=1")), "after STOPPING=1: {:?}", texts(&rest));
}
