//! `bench-watcher`: lb-watcher's benchmark (run through `scripts/bench-watcher`).
//!
//! A real ZooKeeper, lb-proxy and lb-watcher (collect window, jitter, hold and minimum interval
//! all 0; runtime commands on) on loopback:
//! - convergence: from the creation of the registration node(s) to the first request served by
//!   the new server (for 100: by every one of them), for 1 and for 100 simultaneous
//!   registrations; a client sends requests through lb-proxy back to back meanwhile;
//! - scale: 1,000 servers registered at once in another backend: time until lb-proxy runs them
//!   all, lb-watcher's CPU for that and for 10 s idle after, its RSS (now and peak).
//!
//! ```text
//! bench-watcher [--rounds 3] [--write docs/benchmarks.md]
//! ```

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{client, procfs, ProxyProcess, TestServer, WatcherProcess};

const API: &str = "/com/example/bench/api";
const BULK: &str = "/com/example/bench/bulk";

fn proxy_yaml(ports: &[u16]) -> String {
    format!(
        "global:\n  worker_threads: 1\n  log: {{ target: none }}\n\
         frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{}\"]\n    default_backend: api\n\
         backends:\n  - name: api\n    balance: roundrobin\n    servers: []\n  - name: bulk\n    servers: []\n",
        ports[0]
    )
}

fn cpu_seconds(pid: u32) -> f64 {
    lb_testkit::procfs::cpu_seconds(pid).unwrap_or(0.0)
}

/// Sends requests through the proxy until every server of `servers` has served one; the time
/// from `t0` to the first request served by each.
async fn first_served(proxy: SocketAddr, servers: &[TestServer], t0: Instant, limit: Duration) -> Vec<Duration> {
    let mut seen: Vec<Option<Duration>> = vec![None; servers.len()];
    let before: Vec<usize> = servers.iter().map(TestServer::hits).collect();
    while seen.iter().any(Option::is_none) && t0.elapsed() < limit {
        let batch: Vec<_> = (0..8).map(|_| tokio::spawn(client::get(proxy, "/"))).collect();
        for request in batch {
            let _ = request.await;
        }
        for (i, server) in servers.iter().enumerate() {
            if seen[i].is_none() && server.hits() > before[i] {
                seen[i] = Some(t0.elapsed());
            }
        }
    }
    seen.into_iter().map(|s| s.unwrap_or(limit)).collect()
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1000.0)
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut rounds = 3;
    let mut write: Option<PathBuf> = None;
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--rounds" => rounds = it.next().and_then(|v| v.parse().ok()).unwrap_or(3),
            "--write" => write = it.next().map(PathBuf::from),
            _ => {
                eprintln!("usage: bench-watcher [--rounds N] [--write FILE]");
                std::process::exit(64);
            }
        }
    }

    let zk = ZkServer::start();
    let proxy = ProxyProcess::start_with(1, proxy_yaml);
    let dir = tempfile::tempdir().expect("a temporary directory");
    std::fs::copy(proxy.config_path(), dir.path().join("base.yaml")).expect("base.yaml");
    let yaml = format!(
        "zookeeper:\n  servers: [\"{zk}\"]\n  session_timeout: 10s\n\
         proxy:\n  base: base.yaml\n  config: {config}\n  drift_check: 30s\n\
         hysteresis: {{ collect: 0s, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s, max_remove_percent: 100 }}\n\
         services:\n  - backend: api\n    path: {API}\n    record_type: load_balancer\n\
         \x20 - backend: bulk\n    path: {BULK}\n    record_type: load_balancer\n",
        zk = zk.connect_string(),
        config = proxy.config_path().display()
    );
    let watcher = WatcherProcess::start(dir.path(), &yaml).await;
    let registrar = ZkClient::connect(&zk.connect_string()).await;
    registrar.mkdir(API).await;
    registrar.mkdir(BULK).await;
    // Give the watcher its first (empty) observation of both paths.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let limit = Duration::from_secs(60);

    // 1 registration, `rounds` times (each with a new server).
    let mut one = Vec::new();
    let mut kept = Vec::new();
    for r in 0..rounds {
        let server = TestServer::start(&format!("one{r}"));
        let t0 = Instant::now();
        registrar.register_port(API, &format!("one{r}"), server.addr()).await;
        let t = first_served(proxy.addr(), std::slice::from_ref(&server), t0, limit).await;
        one.push(t[0]);
        eprintln!("1 registration, round {r}: {}", ms(t[0]));
        kept.push(server);
    }

    // 100 simultaneous registrations, `rounds` times.
    let mut hundred_last = Vec::new();
    let mut hundred_median = Vec::new();
    for r in 0..rounds {
        let servers: Vec<TestServer> = (0..100).map(|i| TestServer::start(&format!("h{r}x{i}"))).collect();
        let t0 = Instant::now();
        let creates: Vec<_> = servers
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let (c, addr) = (registrar.client.clone(), s.addr());
                tokio::spawn(async move {
                    let data = format!(
                        r#"{{"type":"load_balancer","address":"{ip}","load_balancer":{{"address":"{ip}","ports":[{p}]}}}}"#,
                        ip = addr.ip(),
                        p = addr.port()
                    );
                    let options =
                        zookeeper_client::CreateMode::Ephemeral.with_acls(zookeeper_client::Acls::anyone_all());
                    c.create(&format!("{API}/h{r}x{i}"), data.as_bytes(), &options).await.map(|_| ())
                })
            })
            .collect();
        for c in creates {
            let _ = c.await;
        }
        let t = first_served(proxy.addr(), &servers, t0, limit).await;
        let last = t.iter().max().copied().unwrap_or_default();
        eprintln!("100 registrations, round {r}: median {}, last {}", ms(median(t.clone())), ms(last));
        hundred_median.push(median(t));
        hundred_last.push(last);
        kept.extend(servers);
    }

    // 1,000 servers in the bulk backend (addresses that are never connected to).
    let pid = watcher.pid();
    let cpu0 = cpu_seconds(pid);
    let t0 = Instant::now();
    for i in 0..1000u32 {
        let addr = SocketAddr::from(([127, 0, 3, (i % 250) as u8], 20000 + (i / 250) as u16));
        registrar.register_port(BULK, &format!("b{i:04}"), addr).await;
    }
    let created = t0.elapsed();
    let mut applied = None;
    while t0.elapsed() < Duration::from_secs(120) {
        let out = proxy.runtime_command("show servers state bulk").await.unwrap_or_default();
        if out.lines().filter(|l| l.contains(" bulk ")).count() >= 1000 {
            applied = Some(t0.elapsed());
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let cpu_burst = cpu_seconds(pid) - cpu0;
    let rss_after = procfs::status_kib(pid, "VmRSS:").unwrap_or(0);
    let cpu1 = cpu_seconds(pid);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let cpu_idle = cpu_seconds(pid) - cpu1;
    let rss = procfs::status_kib(pid, "VmRSS:").unwrap_or(0);
    let hwm = procfs::status_kib(pid, "VmHWM:").unwrap_or(0);
    let file_kib = std::fs::metadata(proxy.config_path()).map(|m| m.len() / 1024).unwrap_or(0);
    let reloads = watcher.metric("lb_watcher_reloads_total").await;
    let workers = proxy.show_proc().await.workers.len();

    let rows = [
        ("1 registration → first request served by it (median of rounds)", ms(median(one.clone()))),
        ("100 simultaneous registrations → each served once: median server", ms(median(hundred_median.clone()))),
        (
            "100 simultaneous registrations → each served once: last server (median of rounds)",
            ms(median(hundred_last.clone())),
        ),
        ("1,000 registrations (created in)", ms(created)),
        ("1,000 registrations → all running in lb-proxy", applied.map_or("not reached in 120 s".into(), ms)),
        (
            "lb-watcher CPU for the 1,000 (ZooKeeper reads, render, write, 2,000 runtime commands)",
            format!("{cpu_burst:.2} s"),
        ),
        ("lb-watcher CPU idle with 1,000 servers, over 10 s", format!("{cpu_idle:.2} s")),
        (
            "lb-watcher RSS with 1,000 servers (peak)",
            format!("{:.1} MiB ({:.1} MiB)", rss as f64 / 1024.0, hwm as f64 / 1024.0),
        ),
        ("RSS right after applying the 1,000", format!("{:.1} MiB", rss_after as f64 / 1024.0)),
        ("lb-proxy file with 1,106 servers", format!("{file_kib} KiB")),
        ("reloads by lb-watcher over the whole run / lb-proxy workers at the end", format!("{reloads} / {workers}")),
    ];
    let mut table = format!(
        "## lb-watcher: convergence, CPU and memory\n\n\
         `scripts/bench-watcher` ({rounds} rounds; windows 0; runtime commands; ZooKeeper, lb-proxy, lb-watcher and \
         the client on the same 2 shared cores, release build). Convergence is from the creation of the node(s) to \
         the first request each new server serves through lb-proxy.\n\n| what | figure |\n| --- | --- |\n"
    );
    for (what, figure) in rows {
        table.push_str(&format!("| {what} | {figure} |\n"));
    }
    table.push_str(&format!(
        "\nRounds: 1 registration {}; 100 registrations, last server {}.\n",
        one.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", "),
        hundred_last.iter().map(|d| ms(*d)).collect::<Vec<_>>().join(", ")
    ));
    println!("{table}");
    if let Some(path) = write {
        write_section(&path, &table);
    }
    drop(kept);
}

fn write_section(path: &Path, table: &str) {
    let (begin, end) = ("<!-- bench-watcher:begin -->", "<!-- bench-watcher:end -->");
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let block = format!("{begin}\n{table}{end}");
    let text = match (text.find(begin), text.find(end)) {
        (Some(b), Some(e)) if b < e => format!("{}{block}{}", &text[..b], &text[e + end.len()..]),
        _ => format!("{text}\n{block}\n"),
    };
    std::fs::write(path, text).expect("writing the benchmarks file");
}
