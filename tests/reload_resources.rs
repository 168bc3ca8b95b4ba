//! The master does not leak across reloads: after 1,000 reloads (back to back through lbctl,
//! no load) it has as many file descriptors as after 100, and about the same memory. And it does
//! not hang on its own log: a stderr nobody reads does not stop reloads.

use std::time::{Duration, Instant};

use lb_testkit::client::get;
use lb_testkit::lbctl::{lbctl, Reloaded};
use lb_testkit::{procfs, single_backend, wait_until, ProxyProcess, StartOptions, TestServer};

const FIRST: u64 = 100;
const TOTAL: u64 = 1000;
/// RSS growth allowed between reload 100 and reload 1,000.
const RSS_MARGIN_KIB: u64 = 2048;

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    single_backend("global:\n  worker_threads: 1\n", "", ("s1", server.addr()))
}

/// The master's fds (what they point to) and RSS once only the current worker is left.
async fn settled(proxy: &ProxyProcess) -> (Vec<String>, u64) {
    let master = proxy.pid();
    assert!(
        wait_until(Duration::from_secs(10), || procfs::live_children_of(master).len() == 1).await,
        "old workers still alive: {:?}",
        procfs::live_children_of(master)
    );
    // Let the master reap and close what the last exits left.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let fds = procfs::fd_targets(master);
    let rss = procfs::rss_kib(master).expect("the master's VmRSS");
    (fds, rss)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_reloads_leave_the_master_flat() {
    let server = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let socket = proxy.control_socket().to_path_buf();
    let started = Instant::now();
    let mut took = Vec::new();
    let mut at_first = None;
    for i in 1..=TOTAL {
        let out = lbctl(&socket, &["reload"]).await;
        let reloaded = match (out.code, Reloaded::parse(&out.stdout)) {
            (Some(0), Some(r)) => r,
            _ => panic!("reload {i} failed: {out}"),
        };
        assert_eq!(reloaded.generation, i + 1);
        took.push(reloaded.took_ms);
        if i == FIRST {
            at_first = Some(settled(&proxy).await);
        }
    }
    let elapsed = started.elapsed();
    let (fds_first, rss_first) = at_first.expect("measured after the first reloads");
    let (fds_last, rss_last) = settled(&proxy).await;
    let table = proxy.show_proc().await;
    took.sort_unstable();
    println!(
        "{TOTAL} reloads in {:.1}s ({:.1} ms each); took_ms median {} p99 {} max {}; master fds {} → {}; \
         VmRSS {rss_first} KiB → {rss_last} KiB",
        elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1000.0 / TOTAL as f64,
        took[took.len() / 2],
        took[took.len() * 99 / 100],
        took[took.len() - 1],
        fds_first.len(),
        fds_last.len()
    );
    assert_eq!(table.master.reloads, TOTAL);
    assert_eq!(
        fds_last.len(),
        fds_first.len(),
        "the master's fds after {FIRST} reloads:\n{fds_first:?}\nafter {TOTAL}:\n{fds_last:?}"
    );
    assert!(
        rss_last <= rss_first + RSS_MARGIN_KIB,
        "the master's RSS grew from {rss_first} KiB to {rss_last} KiB between reload {FIRST} and {TOTAL}"
    );
}

/// A log collector that stops reading (a full pipe, a stuck journald) must not stop the master:
/// it keeps reloading and reaping workers, keeps its log lines queued, and once stderr drains
/// again they all come out, none lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_whose_stderr_nobody_reads_still_reloads() {
    const RELOADS: u64 = 60;
    let server = TestServer::start("s1");
    // One page: a few dozen lines fill it (before the fix, the master hung within 10 reloads).
    let options = StartOptions::default().stderr_pipe_bytes(4096);
    let proxy = ProxyProcess::start_with_options(1, &options, config(&server));
    proxy.pause_stderr();
    for i in 1..=RELOADS {
        let out = tokio::time::timeout(Duration::from_secs(10), proxy.lbctl(&["reload"]))
            .await
            .unwrap_or_else(|_| panic!("reload {i} got no answer within 10 s: the master is stuck"));
        assert_eq!(Reloaded::parse(&out.stdout).map(|r| r.generation), Some(i + 1), "reload {i}: {out}");
    }
    let response = get(proxy.addr(), "/").await.expect("a request after the reloads");
    assert_eq!(response.status, 200);
    proxy.resume_stderr();
    let last = format!("generation={}", RELOADS + 1);
    proxy.wait_for_stderr(|l| l.contains("worker ready") && l.contains(&last)).await;
    let ready = proxy.stderr().iter().filter(|l| l.contains("worker ready")).count() as u64;
    assert_eq!(ready, RELOADS + 1, "every worker's `ready` line, in order, once stderr drained");
}
