//! Reloads that must fail without anyone noticing but the operator, and reloads that change
//! what is served: a configuration with errors, a new binary that hangs or dies while starting,
//! listening addresses added and removed, and `max_old_workers`.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::{Duration, Instant};

use lb_testkit::lbctl::Role;
use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::{bin_path, client, free_port, procfs, wait_until, ProxyProcess, StartOptions, TestServer};
use tokio::net::TcpStream;

fn yaml(binds: &[u16], server: &TestServer, global: &str) -> String {
    let binds: Vec<String> = binds.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
    format!(
        r#"global:
  worker_threads: 1
{global}
defaults:
  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }}
frontends:
  - name: fe
    bind: [{binds}]
    default_backend: be
backends:
  - name: be
    servers: [ {{ name: s1, address: "{addr}" }} ]
"#,
        binds = binds.join(", "),
        addr = server.addr()
    )
}

/// 1-based line and column of the first occurrence of `needle` in `text`.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let offset = text.find(needle).expect("needle in text");
    let line = text[..offset].matches('\n').count() + 1;
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    (line, text[line_start..offset].chars().count() + 1)
}

/// A light load for "requests keep working meanwhile".
fn light_load(proxy: &ProxyProcess) -> Load {
    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(60));
    spec.new_connection_clients = 4;
    spec.keep_alive_clients = 4;
    spec.pause = Duration::from_millis(20);
    Load::start(spec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_configuration_fails_the_reload_and_the_worker_keeps_serving() {
    let server = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, |p| yaml(p, &server, ""));
    let port = proxy.port();
    let worker = proxy.current_worker().await.expect("a current worker");
    let load = light_load(&proxy);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let good = std::fs::read_to_string(proxy.config_path()).expect("the configuration");
    let bad = good.replace(&format!("127.0.0.1:{port}"), "127.0.0.1:99999");
    proxy.write_config(&bad);
    let written = std::fs::read_to_string(proxy.config_path()).expect("the bad configuration");
    let (line, column) = position(&written, "127.0.0.1:99999");
    let out = proxy.lbctl(&["reload"]).await;
    assert_eq!(out.code, Some(1), "a failed reload exits 1: {out}");
    let expected =
        format!("{}:{line}:{column}: frontends[0].bind[0]: invalid port 99999", proxy.config_path().display());
    assert!(out.stderr.starts_with("reload failed: "), "{out}");
    assert!(out.stderr.lines().any(|l| l.ends_with(&expected)), "expected {expected:?} in lbctl's stderr: {out}");
    assert!(out.stdout.is_empty(), "{out}");

    // Same worker, still serving; the failed one is gone.
    assert_eq!(proxy.current_worker().await, Some(worker));
    assert!(wait_until(Duration::from_secs(5), || procfs::live_children_of(proxy.pid()) == vec![worker]).await);
    assert_eq!(client::get(proxy.addr(), "/after-failed-reload").await.expect("request").status, 200);

    proxy.write_config(&good);
    let reloaded = proxy.reload().await.unwrap_or_else(|out| panic!("reload after the fix: {out}"));
    assert_ne!(reloaded.pid, worker);
    assert_eq!(reloaded.generation, 3, "generation 2 was the failed one");
    assert_eq!(client::get(proxy.addr(), "/after-fix").await.expect("request").status, 200);

    let report = load.stop().await;
    println!("{report}");
    assert_eq!(report.failed(), 0, "requests failed during the failed reload:\n{report}");
    let table = proxy.show_proc().await;
    assert_eq!(table.master.reloads, 1, "only the successful reload counts: {table:?}");
}

/// Writes `content` as an executable beside `target`, then renames it over `target`: the way a
/// package manager replaces a binary that is running.
fn replace_binary(target: &Path, content: &[u8]) {
    let temporary = target.with_extension("new");
    std::fs::write(&temporary, content).expect("writing the replacement");
    std::fs::set_permissions(&temporary, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    std::fs::rename(&temporary, target).expect("renaming the replacement into place");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_binary_that_hangs_or_dies_fails_the_reload() {
    let server = TestServer::start("s1");
    let bin_dir = tempfile::Builder::new().prefix("lb-proxy-bin-").tempdir().expect("tempdir");
    let binary = bin_dir.path().join("lb-proxy");
    let real = std::fs::read(bin_path("lb-proxy")).expect("reading the lb-proxy binary");
    replace_binary(&binary, &real);
    let options = StartOptions::default().binary(&binary);
    let proxy = ProxyProcess::start_with_options(1, &options, |p| yaml(p, &server, "  worker_start_timeout: 1s"));
    let master = proxy.pid();
    let worker = proxy.current_worker().await.expect("a current worker");
    assert_eq!(procfs::exe_of(worker).as_deref(), Some(binary.as_path()));
    let load = light_load(&proxy);

    // A binary that never reports ready: the reload fails after worker_start_timeout.
    replace_binary(&binary, b"#!/bin/sh\nexec sleep 3600\n");
    let asked = Instant::now();
    let out = proxy.lbctl(&["reload"]).await;
    let took = asked.elapsed();
    assert_eq!(out.code, Some(1), "{out}");
    assert!(
        out.stderr.starts_with("reload failed: ") && out.stderr.contains("worker_start_timeout"),
        "the error names the timeout: {out}"
    );
    assert!(took >= Duration::from_secs(1) && took < Duration::from_secs(5), "failed after {took:?}");
    assert_eq!(proxy.current_worker().await, Some(worker), "the old worker keeps serving");
    // The hung process was killed: nothing but the current worker is left.
    assert!(
        wait_until(Duration::from_secs(5), || procfs::live_children_of(master) == vec![worker]).await,
        "children: {:?}",
        procfs::live_children_of(master)
    );
    assert_eq!(client::get(proxy.addr(), "/after-hang").await.expect("request").status, 200);

    // A binary that exits at once: the reload fails naming the exit status.
    replace_binary(&binary, b"#!/bin/sh\necho 'not today' >&2\nexit 3\n");
    let out = proxy.lbctl(&["reload"]).await;
    assert_eq!(out.code, Some(1), "{out}");
    assert!(out.stderr.contains("exit status 3"), "the error names the exit status: {out}");
    assert!(out.stderr.contains("not today"), "the error carries the worker's stderr: {out}");
    assert_eq!(proxy.current_worker().await, Some(worker), "the old worker keeps serving");
    assert_eq!(client::get(proxy.addr(), "/after-crash").await.expect("request").status, 200);

    // The real binary again: the reload works and the new worker runs it.
    replace_binary(&binary, &real);
    let reloaded = proxy.reload().await.unwrap_or_else(|out| panic!("reload with the real binary: {out}"));
    assert_ne!(reloaded.pid, worker);
    assert_eq!(procfs::exe_of(reloaded.pid).as_deref(), Some(binary.as_path()));
    assert_eq!(client::get(proxy.addr(), "/after-restore").await.expect("request").status, 200);
    assert!(wait_until(Duration::from_secs(5), || procfs::live_children_of(master) == vec![reloaded.pid]).await);

    let report = load.stop().await;
    println!("{report}");
    assert_eq!(report.failed(), 0, "requests failed during the failed reloads:\n{report}");
    assert_eq!(proxy.pid(), master);
}

/// The inode of the one listening socket on `port`.
fn listening_inode(port: u16) -> u64 {
    let inodes = procfs::listening_inodes(port);
    assert_eq!(inodes.len(), 1, "one listening socket on port {port}: {inodes:?}");
    inodes[0]
}

async fn refused(port: u16) -> bool {
    matches!(TcpStream::connect(("127.0.0.1", port)).await, Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_add_and_remove_listeners_and_keep_the_unchanged_socket() {
    let server = TestServer::start("s1");
    // Ports: kept, removed; the added one is picked afterwards.
    let proxy = ProxyProcess::start_with(2, |p| yaml(p, &server, ""));
    let (kept, removed) = (proxy.ports()[0], proxy.ports()[1]);
    let master = proxy.pid();
    let inode = listening_inode(kept);
    assert!(procfs::socket_inodes(master).contains(&inode), "the master holds the socket on {kept}");
    let old_worker = proxy.current_worker().await.expect("a current worker");

    // A request in flight on the port that goes keeps the old worker for a while.
    let removed_addr = std::net::SocketAddr::from(([127, 0, 0, 1], removed));
    let slow = tokio::spawn(async move { client::get(removed_addr, "/slow?ms=1500").await });
    assert!(wait_until(Duration::from_secs(5), || server.in_flight() == 1).await);

    let added = free_port();
    proxy.write_config(&yaml(&[kept, added], &server, ""));
    let reloaded = proxy.reload().await.unwrap_or_else(|out| panic!("reload: {out}"));

    // The added port serves at once, from the new worker's generation.
    let r = client::get(std::net::SocketAddr::from(([127, 0, 0, 1], added)), "/added")
        .await
        .expect("request on the added port");
    assert_eq!(r.status, 200);
    // The kept port: the very same socket, held by the master and the new worker.
    assert_eq!(listening_inode(kept), inode, "the unchanged port keeps its socket");
    assert!(procfs::socket_inodes(master).contains(&inode));
    assert!(procfs::socket_inodes(reloaded.pid).contains(&inode));
    assert_eq!(client::get(proxy.addr(), "/kept").await.expect("request on the kept port").status, 200);

    // The removed port: the request in flight finishes; once the old worker is gone, connections
    // are refused.
    let r = slow.await.expect("task").expect("the request in flight on the removed port");
    assert_eq!(r.status, 200);
    assert!(
        wait_until(Duration::from_secs(5), || !procfs::is_alive(old_worker)).await,
        "the old worker exits once its request is done"
    );
    assert!(!procfs::socket_inodes(master).iter().any(|i| procfs::listening_inodes(removed).contains(i)));
    assert!(refused(removed).await, "the removed port refuses connections once the old worker is gone");
    assert!(procfs::listening_inodes(removed).is_empty(), "nobody listens on {removed} any more");
    assert_eq!(proxy.ports().len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn beyond_max_old_workers_the_oldest_is_stopped() {
    let server = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, |p| yaml(p, &server, "  max_old_workers: 2"));
    let master = proxy.pid();
    let addr = proxy.addr();
    // One long request per generation, then a reload: each old worker keeps draining.
    let mut requests = Vec::new();
    let mut workers = Vec::new();
    for i in 0..3 {
        workers.push(proxy.current_worker().await.expect("a current worker"));
        requests.push(tokio::spawn(async move { client::get(addr, "/slow?ms=8000").await }));
        assert!(wait_until(Duration::from_secs(5), || server.in_flight() == i + 1).await);
        proxy.reload().await.unwrap_or_else(|out| panic!("reload {i}: {out}"));
    }
    // Three old workers would drain: the oldest was stopped at once (SIGTERM).
    assert!(
        wait_until(Duration::from_secs(3), || !procfs::is_alive(workers[0])).await,
        "the oldest old worker beyond max_old_workers is stopped"
    );
    // The master forgets it once it has reaped it.
    let deadline = Instant::now() + Duration::from_secs(3);
    let (table, old) = loop {
        let table = proxy.show_proc().await;
        let old: Vec<u32> = table.workers.iter().filter(|w| w.role == Role::Old).map(|w| w.pid).collect();
        if old.len() <= 2 || Instant::now() > deadline {
            break (table, old);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(old.len(), 2, "{table:?}");
    assert!(old.contains(&workers[1]) && old.contains(&workers[2]), "{table:?}");
    assert!(procfs::is_alive(workers[1]) && procfs::is_alive(workers[2]));
    // The stopped worker's request was cut; the others complete.
    let mut results = Vec::new();
    for r in requests {
        results.push(r.await.expect("task"));
    }
    assert!(results[0].is_err(), "the stopped worker's request cannot complete: {:?}", results[0]);
    for r in &results[1..] {
        assert_eq!(r.as_ref().expect("a request on a draining worker completes").status, 200);
    }
    assert!(wait_until(Duration::from_secs(5), || procfs::live_children_of(master).len() == 1).await);
}
