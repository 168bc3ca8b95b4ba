//! Seamless reloads under load: 200 reloads at 10 per second, half through `lbctl reload` and
//! half through SIGUSR2, while 100 clients (new connection per request and keep-alive) and a
//! steady stream of 2-second requests hit the proxy. Not one request may fail, every slow
//! request completes, the old workers stay within `max_old_workers` and are all gone once the
//! load ends, and the master keeps its PID.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_testkit::lbctl::{show_proc_direct, Role};
use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::{procfs, single_backend, wait_until, ProxyProcess, Signal, TestServer};

const RELOADS: u64 = 200;
const RELOAD_EVERY: Duration = Duration::from_millis(100);
/// Slow requests last 2 s and a reload comes every 100 ms: about 20 old workers drain at once.
const MAX_OLD_WORKERS: usize = 30;

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    let head = format!(
        "global:\n  max_old_workers: {MAX_OLD_WORKERS}\n  close_spread: 1s\n  worker_threads: 1\n\
         defaults:\n  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }}\n"
    );
    single_backend(&head, "", ("s1", server.addr()))
}

/// What the `show proc` sampler saw.
#[derive(Debug, Default)]
struct Samples {
    taken: u64,
    max_old: usize,
    max_children: usize,
    /// Samples that broke a rule, described.
    violations: Vec<String>,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_reloads_under_load_lose_no_request() {
    let server = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let master = proxy.pid();
    let socket = proxy.control_socket().to_path_buf();
    let first = proxy.current_worker().await.expect("a current worker");

    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(90));
    spec.new_connection_clients = 40;
    spec.keep_alive_clients = 60;
    spec.pause = Duration::from_millis(10);
    spec.slow_every = Some(Duration::from_millis(100));
    spec.slow_path = "/slow?ms=2000".into();
    let load = Load::start(spec);

    // Sample the processes every ~100 ms for the whole run.
    let samples = Arc::new(Mutex::new(Samples::default()));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = tokio::spawn({
        let (samples, sampling, socket) = (samples.clone(), sampling.clone(), socket.clone());
        async move {
            while sampling.load(Ordering::SeqCst) {
                let table = show_proc_direct(&socket).await;
                let children = procfs::live_children_of(master).len();
                {
                    let mut s = samples.lock().unwrap_or_else(|e| e.into_inner());
                    s.taken += 1;
                    s.max_children = s.max_children.max(children);
                    match table {
                        Ok(table) => {
                            let old = table.workers.iter().filter(|w| w.role == Role::Old).count();
                            s.max_old = s.max_old.max(old);
                            if old > MAX_OLD_WORKERS {
                                s.violations.push(format!("{old} old workers (max_old_workers {MAX_OLD_WORKERS})"));
                            }
                            if table.master.pid != master {
                                s.violations.push(format!("master pid {} instead of {master}", table.master.pid));
                            }
                        }
                        Err(e) => s.violations.push(format!("show proc failed: {e:#}")),
                    }
                    // Current + starting + old workers, and nothing else.
                    if children > MAX_OLD_WORKERS + 2 {
                        s.violations.push(format!("the master has {children} live children"));
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    });

    // Let the load settle, then reload 200 times at 10/s: even ones by lbctl, odd ones by SIGUSR2.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = load.snapshot();
    assert_eq!(before.failed(), 0, "failures before any reload:\n{before}");
    let started = Instant::now();
    let mut took = Vec::new();
    let mut next = Instant::now();
    for i in 0..RELOADS {
        tokio::time::sleep_until(next.into()).await;
        next += RELOAD_EVERY;
        if i % 2 == 0 {
            let reloaded = proxy.reload().await.unwrap_or_else(|out| panic!("reload {i} by lbctl failed: {out}"));
            took.push(reloaded.took_ms);
        } else {
            proxy.kill_with(Signal::SIGUSR2);
            // Wait for this very reload to be done, so that none is coalesced with the next.
            let mut done = false;
            let deadline = Instant::now() + Duration::from_secs(10);
            while !done && Instant::now() < deadline {
                done = show_proc_direct(&socket).await.is_ok_and(|t| t.master.reloads > i);
                if !done {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            assert!(done, "reload {i} (SIGUSR2) did not happen within 10 s");
        }
    }
    let reload_time = started.elapsed();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let report = load.stop().await;
    let load_ended = Instant::now();

    // Every old worker goes once its connections are done: only the current one remains.
    let only_current = wait_until(Duration::from_secs(10), || procfs::live_children_of(master).len() == 1).await;
    let drained_in = load_ended.elapsed();
    sampling.store(false, Ordering::SeqCst);
    sampler.await.expect("sampler");
    let table = show_proc_direct(&socket).await.expect("show proc");
    let samples = samples.lock().unwrap_or_else(|e| e.into_inner());

    took.sort_unstable();
    println!("{report}");
    println!(
        "{RELOADS} reloads in {:.1}s; lbctl took_ms min {} median {} max {}; {} samples: max {} old workers, \
         max {} children; drained {:.2}s after the load ended",
        reload_time.as_secs_f64(),
        took.first().unwrap_or(&0),
        took.get(took.len() / 2).unwrap_or(&0),
        took.last().unwrap_or(&0),
        samples.taken,
        samples.max_old,
        samples.max_children,
        drained_in.as_secs_f64()
    );

    assert_eq!(report.failed(), 0, "requests failed across reloads:\n{report}");
    assert!(report.new_connection.ok > 0 && report.keep_alive.ok > 0, "the load did not run:\n{report}");
    assert_eq!(report.slow.ok, report.slow.started, "every slow request completes with 200:\n{report}");
    assert!(report.slow.started >= 150, "slow requests kept starting during the reloads:\n{report}");
    assert!(
        report.keep_alive.closed_by_server > 0,
        "draining workers close keep-alive connections with Connection: close:\n{report}"
    );
    assert!(samples.violations.is_empty(), "process sampling found:\n{}", samples.violations.join("\n"));
    assert!(samples.max_old >= 2, "the sampler saw old workers draining (max {})", samples.max_old);
    assert!(only_current, "old workers still alive 10 s after the load ended: {:?}", procfs::live_children_of(master));
    assert_eq!(table.master.pid, master, "the master keeps its PID");
    assert_eq!(table.master.reloads, RELOADS, "every reload happened: {table:?}");
    assert_eq!(table.workers.len(), 1, "only the current worker is left: {table:?}");
    assert_eq!(table.workers[0].role, Role::Current);
    assert_ne!(table.workers[0].pid, first);
    assert_eq!(table.workers[0].generation, RELOADS + 1);
    assert!(procfs::is_alive(master));
}
