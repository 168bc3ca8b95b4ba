//! Processes dying: the current worker killed under load (the master keeps the sockets, so no
//! connection is refused, and starts a new worker at once), and the master killed while a
//! worker serves (the worker finishes what it has, stops accepting and exits).

use std::time::{Duration, Instant};

use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::{client, procfs, single_backend, wait_until, ProxyProcess, Signal, TestServer};
use tokio::net::TcpStream;

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    let head = "global:\n  worker_threads: 1\n\
                defaults:\n  timeouts: { connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }\n";
    single_backend(head, "", ("s1", server.addr()))
}

/// Signals a worker of a master this test started, by PID.
fn kill(pid: u32, signal: Signal) {
    let _ = procfs::signal(pid, signal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_current_worker_under_load_refuses_nothing() {
    let server = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let master = proxy.pid();
    let victim = proxy.current_worker().await.expect("a current worker");

    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(60));
    spec.new_connection_clients = 30;
    spec.keep_alive_clients = 30;
    spec.pause = Duration::from_millis(10);
    spec.slow_every = Some(Duration::from_millis(100));
    spec.slow_path = "/slow?ms=1000".into();
    let load = Load::start(spec);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let before = load.snapshot();
    assert_eq!(before.failed(), 0, "{before}");

    let killed_at = Instant::now();
    kill(victim, Signal::SIGKILL);
    let mut replacement = None;
    let found = wait_until(Duration::from_secs(10), || {
        replacement = procfs::live_children_of(master).into_iter().find(|&p| p != victim);
        replacement.is_some()
    })
    .await;
    assert!(found, "no new worker after the current one was killed");
    let replacement = replacement.unwrap_or_default();
    assert!(wait_until(Duration::from_secs(10), || !procfs::is_alive(victim)).await);
    // Serving: it is the current worker, and a request gets through.
    let mut current = None;
    for _ in 0..100 {
        current = proxy.current_worker().await;
        if current.is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let respawned_in = killed_at.elapsed();
    assert_eq!(current, Some(replacement));
    tokio::time::sleep(Duration::from_secs(2)).await;
    let report = load.stop().await;

    println!("{report}");
    println!(
        "worker {victim} killed; worker {replacement} serving {:.0} ms later; in-flight requests cut: {} reset, {} truncated",
        respawned_in.as_secs_f64() * 1000.0,
        report.total().reset,
        report.total().truncated
    );
    let total = report.total();
    assert_eq!(total.refused, 0, "no connection is refused while the master holds the sockets:\n{report}");
    assert_eq!(total.timeout, 0, "queued connections are served by the new worker:\n{report}");
    assert_eq!(total.server_error + total.other_status + total.other_error, 0, "{report}");
    let after = report.total().ok - before.total().ok;
    assert!(after > 100, "requests succeed after the crash ({after}):\n{report}");
    assert!(proxy.stderr().iter().any(|l| l.contains("current worker died")), "the master logs the crash");
    assert_eq!(proxy.show_proc().await.master.pid, master);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn when_the_master_dies_the_worker_finishes_its_requests_and_exits() {
    let server = TestServer::start("s1");
    let mut proxy = ProxyProcess::start_with(1, config(&server));
    let addr = proxy.addr();
    let worker = proxy.current_worker().await.expect("a current worker");

    let slow = tokio::spawn(async move { client::get(addr, "/slow?ms=2000").await });
    assert!(wait_until(Duration::from_secs(5), || server.in_flight() == 1).await);
    proxy.kill_with(Signal::SIGKILL);
    let status = proxy.wait_exit(Duration::from_secs(5)).await;
    assert!(status.is_some(), "the master was killed");

    // The worker stops accepting: with the master gone nobody else holds the socket.
    let mut refused = false;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !refused && Instant::now() < deadline {
        refused = matches!(TcpStream::connect(addr).await, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused);
        if !refused {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let alive_after_master_death = procfs::is_alive(worker);
    let response = slow.await.expect("task");
    let completed_at = Instant::now();
    let gone = wait_until(Duration::from_secs(5), || !procfs::is_alive(worker)).await;
    let gone_after = completed_at.elapsed();
    let how = procfs::zombie_exit(worker).unwrap_or_else(|| "reaped, status unknown".into());
    if !gone {
        kill(worker, Signal::SIGKILL);
    }
    println!(
        "master killed; worker {worker}: alive while its request was in flight: {alive_after_master_death}; \
         request: {:?}; new connections refused: {refused}; worker ended ({how}) {:.0} ms after the request ended",
        response.as_ref().map(|r| r.status).map_err(|e| format!("{e:#}")),
        gone_after.as_secs_f64() * 1000.0
    );
    let response = response.unwrap_or_else(|e| {
        panic!("the request in flight must complete after the master died, but: {e:#} (the worker ended: {how})")
    });
    assert_eq!(response.status, 200);
    assert!(alive_after_master_death, "the worker serves its request after the master died");
    assert!(refused, "the worker stops accepting once the master is gone");
    assert!(gone, "the worker exits once its last request is done (still alive {gone_after:?} after)");
    assert_eq!(how, "exit status 0", "the worker drains and exits cleanly");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_loop_backs_off_queues_connections_and_then_the_master_gives_up() {
    let server = TestServer::start("s1");
    let mut proxy = ProxyProcess::start_with(1, config(&server));
    let master = proxy.pid();
    let addr = proxy.addr();
    let mut killed = Vec::new();
    // Four crashes: each time a new worker comes (after a growing delay), and a connection made
    // while there is none waits in the kernel's queue and is served by the next worker.
    for crash in 1..=4 {
        let worker = proxy.current_worker().await.expect("a current worker");
        kill(worker, Signal::SIGKILL);
        killed.push(worker);
        assert!(wait_until(Duration::from_secs(5), || !procfs::is_alive(worker)).await);
        let asked = Instant::now();
        let r =
            client::get(addr, "/during-backoff").await.unwrap_or_else(|e| panic!("request after crash {crash}: {e:#}"));
        assert_eq!(r.status, 200);
        println!("crash {crash}: served again after {:.0} ms", asked.elapsed().as_secs_f64() * 1000.0);
    }
    // The fifth crash within 60 s: the master stops trying and exits non-zero.
    let worker = proxy.current_worker().await.expect("a current worker");
    kill(worker, Signal::SIGKILL);
    let status = proxy.wait_exit(Duration::from_secs(10)).await;
    let status = status.unwrap_or_else(|| panic!("the master still runs after 5 crashes in 60 s (pid {master})"));
    assert!(!status.success(), "the master exits non-zero after a crash loop: {status}");
    assert!(!procfs::is_alive(worker));
    assert!(proxy.stderr().iter().any(|l| l.contains("giving up")), "the master says why it exits");
}
