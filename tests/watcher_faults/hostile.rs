//! Registrar nodes written by someone careless or hostile: huge data, deep nesting, wrong
//! types, forged log lines, long names, and a directory of thousands of children. Each bad node
//! gets one warning naming it, the good ones are applied, the watcher keeps running with
//! bounded memory. lb-proxy is not involved: the file is what is checked.

use std::path::Path;
use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{wait_until, WatcherOptions, WatcherProcess, WATCHED_BASE};

use crate::common::*;

/// lb-watcher writing `dir/lb-proxy.yaml` (no lb-proxy: the reload is `true`).
pub(crate) async fn file_watcher(dir: &Path, zk: &str, hysteresis: &str, options: &WatcherOptions) -> WatcherProcess {
    file_watcher_at(dir, zk, hysteresis, Path::new("lb-proxy.yaml"), options).await
}

/// The same, writing `out` (relative to `dir`).
pub(crate) async fn file_watcher_at(
    dir: &Path,
    zk: &str,
    hysteresis: &str,
    out: &Path,
    options: &WatcherOptions,
) -> WatcherProcess {
    std::fs::write(dir.join("base.yaml"), WATCHED_BASE).expect("base.yaml");
    let reload = "  reload_command: [\"true\"]\n  runtime: false\n";
    WatcherProcess::start_with(dir, &watcher_yaml(zk, "4s", hysteresis, out, reload), options).await
}

fn record(ip: &str) -> String {
    format!(r#"{{"type":"load_balancer","address":"{ip}","load_balancer":{{"address":"{ip}","ports":[80]}}}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_registrar_nodes_are_skipped_naming_each_and_the_rest_applied() {
    let zk = ZkServer::start();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    // ZooKeeper's default jute.maxbuffer is 1 MiB - 1 byte for a whole request: the data of
    // the largest node it takes is a little less.
    let mib = 1024 * 1024 - 1024;
    let padded = format!(
        r#"{{"type":"load_balancer","address":"10.0.0.9","load_balancer":{{"address":"10.0.0.9","ports":[80]}},"pad":"{}"}}"#,
        "x".repeat(mib - 120)
    );
    let deep =
        format!(r#"{{"type":"load_balancer","address":"10.0.0.9","x":{}{}}}"#, "[".repeat(20_000), "]".repeat(20_000));
    let forged =
        r#"{"type":"load_balancer\n2026-01-01T00:00:00.000000Z  INFO lb_watcher: FORGED","address":"10.0.0.9"}"#;
    let long_type = format!(r#"{{"type":"{}","address":"10.0.0.9"}}"#, "t".repeat(60_000));
    let long_name = "n".repeat(2000);
    let bad: Vec<(&str, Vec<u8>, &str)> = vec![
        ("huge-valid", padded.into_bytes(), "bytes of data, more than a registration may hold"),
        ("huge-garbage", vec![b'x'; mib], "bytes of data, more than a registration may hold"),
        ("deep", deep.into_bytes(), "recursion limit exceeded"),
        ("type-number", br#"{"type":5,"address":"10.0.0.9"}"#.to_vec(), "`type` must be a string, not a number"),
        (
            "address-number",
            br#"{"type":"load_balancer","load_balancer":{"address":167772169,"ports":[80]}}"#.to_vec(),
            "must be a string, not a number",
        ),
        (
            "ports-string",
            br#"{"type":"load_balancer","load_balancer":{"address":"10.0.0.9","ports":"80"}}"#.to_vec(),
            "`ports` must be a list of port numbers",
        ),
        (
            "port-too-big",
            br#"{"type":"load_balancer","load_balancer":{"address":"10.0.0.9","ports":[70000]}}"#.to_vec(),
            "`ports` must be a list of port numbers",
        ),
        ("top-list", b"[1,2,3]".to_vec(), "no `type`"),
        ("null", b"null".to_vec(), "no `type`"),
        ("empty", Vec::new(), "not valid JSON"),
        ("not-utf8", b"\xff\xfe\x00{".to_vec(), "not valid JSON"),
        ("forged", forged.as_bytes().to_vec(), r"record type `load_balancer\n2026"),
        ("long-type", long_type.into_bytes(), "bytes)`, this service keeps `load_balancer`"),
        (&long_name, record("10.0.0.9").into_bytes(), "is not a valid server name"),
    ];
    for (name, data, _) in &bad {
        client.create(&format!("{DIR}/{name}"), data).await;
    }
    client.register_port(DIR, "good1", "10.0.0.1:80".parse().expect("address")).await;
    client.register_port(DIR, "good2", "10.0.0.2:80".parse().expect("address")).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let quick = "{ collect: 500ms, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";
    let t0 = Instant::now();
    let watcher = file_watcher(dir.path(), &zk.connect_string(), quick, &WatcherOptions::default()).await;
    let out = dir.path().join("lb-proxy.yaml");
    let applied = wait_until(Duration::from_secs(15), || file_servers(&out) == names(&["good1", "good2"])).await;
    assert!(applied, "{:?}; watcher:\n{}", file_servers(&out), watcher.stderr().join("\n"));
    let first = t0.elapsed();
    // A change: everything is read again (the megabyte too), nothing is warned about twice.
    client.register_port(DIR, "good3", "10.0.0.3:80".parse().expect("address")).await;
    let again = wait_until(Duration::from_secs(15), || file_servers(&out) == names(&["good1", "good2", "good3"])).await;
    assert!(again, "{:?}; watcher:\n{}", file_servers(&out), watcher.stderr().join("\n"));

    let stderr = watcher.stderr();
    for (name, _, says) in &bad {
        let shown = &name[..name.len().min(128)];
        let lines: Vec<&String> =
            stderr.iter().filter(|l| l.contains(&format!("skipping node {DIR}/{shown}"))).collect();
        let line = match lines.as_slice() {
            [line] => line,
            _ => panic!("{shown}: one warning naming it, got {lines:?}"),
        };
        assert!(line.contains(says), "{shown}: {line}");
    }
    assert!(stderr.iter().all(|l| l.len() < 1024), "no line floods the log");
    assert!(stderr.iter().all(|l| !l.starts_with("2026-01-01T00:00:00.000000Z")), "no forged line: {stderr:?}");
    assert_eq!(watcher.metric("lb_watcher_skipped_nodes_total").await, bad.len() as u64);
    assert!(watcher.is_alive() && zk.is_serving());
    let (rss, peak) = watcher.rss_kib();
    println!(
        "FIGURES hostile: {} bad nodes (two of ~1 MiB) skipped with one warning each, the longest line {} bytes; \
         good ones applied {:.1}s after start; watcher RSS {rss:?} KiB, peak {peak:?} KiB",
        bad.len(),
        stderr.iter().map(String::len).max().unwrap_or(0),
        first.as_secs_f64()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_thousand_children_are_read_and_applied_with_bounded_memory() {
    const COUNT: usize = 5000;
    let zk = ZkServer::start();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register_port(DIR, "seed", "10.0.0.1:80".parse().expect("address")).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let quick = "{ collect: 500ms, collect_jitter: 0s, hold: 0s, max_remove_percent: 100, min_apply_interval: 0s }";
    let options = WatcherOptions { env: vec![("LB_LOG".into(), DEBUG_LOG.into())], ..WatcherOptions::default() };
    let watcher = file_watcher(dir.path(), &zk.connect_string(), quick, &options).await;
    let out = dir.path().join("lb-proxy.yaml");
    assert!(wait_until(Duration::from_secs(15), || file_servers(&out).len() == 1).await);
    let (rss_before, _) = watcher.rss_kib();

    let registrar = ZkClient::connect(&zk.connect_string()).await;
    let nodes: Vec<(String, Vec<u8>)> = (0..COUNT)
        .map(|i| (format!("n{i:04}"), record(&format!("10.1.{}.{}", i / 250, i % 250 + 1)).into_bytes()))
        .collect();
    let t0 = Instant::now();
    registrar.create_many(DIR, &nodes).await;
    let created = t0.elapsed();
    let all = wait_until(Duration::from_secs(60), || file_servers(&out).len() == COUNT + 1).await;
    assert!(all, "{} servers in the file; watcher:\n{}", file_servers(&out).len(), watcher.stderr().join("\n"));
    let applied = t0.elapsed();
    let reads = watcher.stderr_count(&format!("{DIR}: "));

    // One more change on a directory this size: the whole directory is read again.
    let t1 = Instant::now();
    client.delete(&format!("{DIR}/seed")).await;
    let followed = wait_until(Duration::from_secs(30), || !file_servers(&out).contains(&"seed".to_owned())).await;
    assert!(followed, "the change is followed; watcher:\n{}", watcher.stderr().join("\n"));
    let one_change = t1.elapsed();

    // Every one of them gone at once (their session closed): refused, all kept.
    let t2 = Instant::now();
    drop(registrar);
    watcher.wait_for_stderr("refusing to empty backend api", Duration::from_secs(30)).await;
    let refused = t2.elapsed();
    assert_eq!(file_servers(&out).len(), COUNT, "the last set kept");
    let (rss_after, peak) = watcher.rss_kib();
    assert!(watcher.is_alive());
    let (rss_after_kib, peak_kib) = (rss_after.unwrap_or(0), peak.unwrap_or(0));
    // Bounded: a few hundred bytes per server and a few copies of the directory at most.
    assert!(peak_kib < 200 * 1024, "peak RSS {peak_kib} KiB for {COUNT} servers");
    let size = std::fs::metadata(&out).map(|m| m.len()).unwrap_or(0);
    println!(
        "FIGURES children: {COUNT} nodes created in {:.1}s (multi-writes of 500), all in the file {:.1}s after \
         the first create ({reads} full reads of the directory meanwhile), file {size} bytes; one more change \
         followed in {:.2}s; all {COUNT} gone at once refused after {:.2}s; watcher RSS {rss_before:?} KiB \
         before, {rss_after_kib} KiB after, peak {peak_kib} KiB",
        created.as_secs_f64(),
        applied.as_secs_f64(),
        one_change.as_secs_f64(),
        refused.as_secs_f64()
    );
}
