//! lb-tls's `backend.multiplex: true`: client connections reach lb-proxy as streams of one hop
//! connection per lb-tls worker thread. With curl, `openssl`-built clients and ab: the client's
//! address and TLS facts in lb-proxy's log, over one hop connection; HTTP/2 clients; 16 MiB both
//! ways, and a client reading slowly does not hold up the others; 100 concurrent clients; lb-proxy
//! and lb-tls each reloaded under load with no failed request, the old workers gone after.

use std::process::Command;
use std::time::{Duration, Instant};

use lb_testkit::lbctl::Role;
use lb_testkit::procfs::established_on;
use lb_testkit::sclient::curl;
use lb_testkit::{wait_until, ChainOptions, TestServer, TlsChain, TlsProcess};

const WAIT: Duration = Duration::from_secs(10);

/// lb-proxy with JSON access logs behind lb-tls multiplexing to it with two threads; the server
/// it forwards to.
fn chain(alpn: &str) -> (TestServer, TlsChain, String) {
    let server = TestServer::start("s1");
    let head = "global:\n  log: { format: json }\ndefaults:\n  timeouts: { connect: 1s, client: 5s, server: 5s, http_request: 2s }\n";
    let options = ChainOptions { multiplex: true, proxy_head: head, tls_global: "worker_threads: 2" };
    let chain = TlsChain::start_with(server.addr(), alpn, options);
    let ca = chain.certs.ca().display().to_string();
    (server, chain, ca)
}

fn url(tls: &TlsProcess, path: &str) -> (String, String) {
    let port = tls.addr().port();
    (format!("https://api.example.test:{port}{path}"), format!("api.example.test:{port}:127.0.0.1"))
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_facts_reach_lb_proxy_over_one_hop_connection() {
    let (_server, TlsChain { proxy, tls, certs: _certs }, ca) = chain("[ http/1.1 ]");
    for i in 0..4 {
        let (u, resolve) = url(&tls, &format!("/echo?n={i}"));
        let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve, "-o", "/dev/null", "-w", "%{local_port}"]);
        assert_eq!(r.code, Some(0), "{r:?}");
        let line = json(&proxy.wait_for_log(|l| l.contains(&format!("/echo?n={i}"))).await);
        assert_eq!(line["client_ip"], "127.0.0.1", "{line}");
        assert_eq!(line["client_port"].to_string(), r.body, "the client's own port, not lb-tls's: {line}");
        assert_eq!(line["tls_version"], "TLSv1.3", "{line}");
        assert!(line["tls_cipher"].as_str().is_some_and(|c| c.starts_with("TLS_AES_")), "{line}");
        assert_eq!(line["sni"], "api.example.test", "{line}");
        assert_eq!(line["alpn"], "http/1.1", "{line}");
    }
    // Every client connection has ended; the hop connection stays, one for the thread(s) that
    // served them (a connection each would all be closed now).
    let hops = established_on(proxy.addr().port());
    assert!((1..=2).contains(&hops), "{hops} hop connections to lb-proxy");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_clients_through_the_hop() {
    let (_server, TlsChain { proxy, tls, certs: _certs }, ca) = chain("[ h2, http/1.1 ]");
    let (first, resolve) = url(&tls, "/echo?h2=1");
    let (second, _) = url(&tls, "/echo?h2=2");
    let r = curl(
        &first,
        &[
            "--http2",
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "-o",
            "/dev/null",
            "-o",
            "/dev/null",
            &second,
            "-w",
            "%{http_version} %{http_code}\\n",
        ],
    );
    assert_eq!((r.code, r.body.as_str()), (Some(0), "2 200\n2 200\n"), "{r:?}");
    for n in 1..=2 {
        let line = json(&proxy.wait_for_log(|l| l.contains(&format!("/echo?h2={n}"))).await);
        assert_eq!(line["alpn"], "h2", "{line}");
        assert!(line["request"].as_str().is_some_and(|r| r.ends_with(" HTTP/2.0")), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_bodies_both_ways_and_a_slow_reader_holds_up_no_one() {
    let (_server, TlsChain { proxy: _proxy, tls, certs: _certs }, ca) = chain("[ http/1.1 ]");
    const BIG: usize = 16 * 1024 * 1024;
    let (u, resolve) = url(&tls, &format!("/bytes?n={BIG}"));
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve, "-o", "/dev/null", "-w", "%{size_download}"]);
    assert_eq!((r.code, r.body.clone()), (Some(0), BIG.to_string()), "{r:?}");
    let upload = tls.dir().join("upload.bin");
    std::fs::write(&upload, vec![b'x'; BIG]).expect("writing the upload");
    let (u, resolve) = url(&tls, "/upload");
    let data = format!("@{}", upload.display());
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve, "--data-binary", &data, "-w", " %{size_upload}"]);
    assert_eq!((r.code, r.body.clone()), (Some(0), format!("{BIG} {BIG}")), "{r:?}");

    // A client reading 4 MiB at 512 KiB/s: its stream waits at its window, the others flow.
    let (u, resolve) = url(&tls, "/bytes?n=4194304");
    let slow = {
        let (ca, u, resolve) = (ca.clone(), u.clone(), resolve.clone());
        std::thread::spawn(move || {
            let args = [
                "--limit-rate",
                "512K",
                "--cacert",
                &ca,
                "--resolve",
                &resolve,
                "-o",
                "/dev/null",
                "-w",
                "%{size_download}",
            ];
            curl(&u, &args)
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    for i in 0..10 {
        let (u, resolve) = url(&tls, &format!("/bytes?n={}", 100_000 + i));
        let r = curl(
            &u,
            &["--max-time", "5", "--cacert", &ca, "--resolve", &resolve, "-o", "/dev/null", "-w", "%{size_download}"],
        );
        assert_eq!((r.code, r.body.clone()), (Some(0), (100_000 + i).to_string()), "{r:?}");
    }
    assert!(!slow.is_finished(), "the slow client is still reading while the others were served");
    let r = slow.join().expect("slow client");
    assert_eq!((r.code, r.body.as_str()), (Some(0), "4194304"), "{r:?}");
}

/// `ab` over TLS, new connection per request: what it says of completed and failed requests.
fn ab(url: &str, concurrency: usize, requests: usize) -> std::thread::JoinHandle<std::process::Output> {
    let (url, c, n) = (url.to_owned(), concurrency.to_string(), requests.to_string());
    std::thread::spawn(move || {
        Command::new("ab").args(["-r", "-c", &c, "-n", &n, "-s", "10", &url]).output().expect("running ab")
    })
}

fn assert_ab_clean(out: &std::process::Output, requests: usize) {
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ab: {}\n{text}", String::from_utf8_lossy(&out.stderr));
    let field = |name: &str| {
        text.lines().find(|l| l.starts_with(name)).and_then(|l| l.split_whitespace().nth(2)).map(str::to_owned)
    };
    assert_eq!(field("Complete requests:"), Some(requests.to_string()), "{text}");
    assert_eq!(field("Failed requests:").as_deref(), Some("0"), "{text}");
    assert!(!text.contains("Non-2xx responses:"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_clients_share_the_hop_connections() {
    let server = TestServer::start("s1");
    let chain = TlsChain::start_multiplexed(server.addr(), "[ http/1.1 ]");
    let url = format!("https://127.0.0.1:{}/", chain.tls.addr().port());
    let run = ab(&url, 100, 3000);
    let mut most = 0;
    while !run.is_finished() {
        most = most.max(established_on(chain.proxy.addr().port()));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_ab_clean(&run.join().expect("ab"), 3000);
    let threads = std::thread::available_parallelism().map_or(1, usize::from);
    assert!((1..=threads).contains(&most), "{most} hop connections for 100 clients ({threads} lb-tls threads)");
}

#[derive(Debug, Clone, Copy)]
enum Reloaded {
    Proxy,
    Tls,
}

/// ab through a multiplexing chain while `which` reloads every 300 ms: no request fails.
async fn reloaded_under_load(which: Reloaded) -> (TestServer, TlsChain) {
    let server = TestServer::start("s1");
    let chain = TlsChain::start_multiplexed(server.addr(), "[ http/1.1 ]");
    let url = format!("https://127.0.0.1:{}/", chain.tls.addr().port());
    let run = ab(&url, 20, 4000);
    let mut reloads = 0;
    let started = Instant::now();
    while !run.is_finished() && started.elapsed() < Duration::from_secs(120) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let done = match which {
            Reloaded::Proxy => chain.proxy.reload().await,
            Reloaded::Tls => chain.tls.reload().await,
        };
        done.unwrap_or_else(|e| panic!("{which:?} reload {reloads}: {e}"));
        reloads += 1;
    }
    assert_ab_clean(&run.join().expect("ab"), 4000);
    assert!(reloads >= 3, "only {reloads} reloads during the run");
    (server, chain)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_proxy_reloaded_under_load_fails_nothing_and_its_old_workers_go() {
    let (_server, chain) = reloaded_under_load(Reloaded::Proxy).await;
    // Each old worker sent GOAWAY: lb-tls closed its hop connections once their streams ended,
    // so the old workers finish their drain.
    let deadline = Instant::now() + WAIT;
    let mut table = chain.proxy.show_proc().await;
    while table.workers.iter().any(|w| w.role != Role::Current) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
        table = chain.proxy.show_proc().await;
    }
    assert!(table.workers.iter().all(|w| w.role == Role::Current), "old lb-proxy workers still running: {table:?}");
    let url = format!("https://127.0.0.1:{}/", chain.tls.addr().port());
    let r = Command::new("curl").args(["-sk", "-o", "/dev/null", "-w", "%{http_code}", &url]).output().expect("curl");
    assert_eq!(String::from_utf8_lossy(&r.stdout), "200", "served after the reloads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_tls_reloaded_under_load_fails_nothing() {
    let (_server, chain) = reloaded_under_load(Reloaded::Tls).await;
    // The old lb-tls workers closed their hop connections: one or two remain, the current's.
    let settled = wait_until(WAIT, || established_on(chain.proxy.addr().port()) <= 2).await;
    assert!(settled, "{} hop connections left", established_on(chain.proxy.addr().port()));
}
