//! Hostile HTTP/2 clients against lb-proxy, with frames crafted by python3-h2: each attack ends
//! (or is absorbed) within bounds of CPU and memory, and a legitimate HTTP/2 client is served
//! during and after it. Rapid reset (CVE-2023-44487): the connection is closed after a few
//! hundred reset streams; CONTINUATION flood: closed once the header list passes
//! `max_header_size`; SETTINGS and PING floods: absorbed with memory flat; a body that never
//! comes: 408 after `timeouts.client`.

use lb_testkit::h2::attack;
use lb_testkit::procfs::{cpu_seconds, status_kib};
use lb_testkit::sclient::curl;
use lb_testkit::{single_backend, ProxyProcess, TestServer};

fn proxy_for(server: &TestServer) -> ProxyProcess {
    let head = "defaults:\n  timeouts: { client: 1s, server: 10s }\n";
    ProxyProcess::start_with(1, single_backend(head, "", ("s1", server.addr())))
}

/// The worker's CPU seconds and resident KiB.
fn worker_use(proxy: &ProxyProcess) -> (f64, u64) {
    let worker = *proxy.worker_pids().first().expect("a worker");
    (cpu_seconds(worker).expect("cpu"), status_kib(worker, "VmRSS:").expect("rss"))
}

fn legit_h2(proxy: &ProxyProcess) -> String {
    let url = format!("http://{}/", proxy.addr());
    curl(&url, &["--http2-prior-knowledge", "-o", "/dev/null", "-w", "%{http_version} %{http_code}"]).body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_http2_clients_are_cut_off_or_absorbed_and_others_are_served() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(&s1);
    assert_eq!(legit_h2(&proxy), "2 200");
    let (cpu0, rss0) = worker_use(&proxy);

    let reset = attack("rapid-reset", proxy.addr(), 20_000).await;
    eprintln!("rapid reset: {reset:?}");
    assert!(reset.closed && reset.sent < 5_000, "rapid reset is cut off: {reset:?}");
    assert_eq!(legit_h2(&proxy), "2 200");

    let continuation = attack("continuation", proxy.addr(), 20_000).await;
    eprintln!("continuation: {continuation:?}");
    // (The client notices the close late: loopback's socket buffers take a few hundred KiB.)
    assert!(
        continuation.closed && continuation.sent < 2_000,
        "a CONTINUATION flood ends at max_header_size, not after the 20 MiB tried: {continuation:?}"
    );
    assert_eq!(legit_h2(&proxy), "2 200");

    for flood in ["settings", "ping"] {
        let outcome = attack(flood, proxy.addr(), 50_000).await;
        assert_eq!(outcome.sent, 50_000, "{flood}: {outcome:?}");
        assert_eq!(legit_h2(&proxy), "2 200", "served after a {flood} flood");
    }

    let slow = attack("slow-body", proxy.addr(), 10).await;
    eprintln!("slow body: {slow:?}");
    assert_eq!(slow.statuses, [408], "a body that never comes: 408 after timeouts.client: {slow:?}");
    assert!(slow.seconds < 5.0, "{slow:?}");

    let (cpu1, rss1) = worker_use(&proxy);
    eprintln!("attacks cost the worker {:.2} s of CPU; RSS {rss0} → {rss1} KiB", cpu1 - cpu0);
    assert!(cpu1 - cpu0 < 10.0, "CPU bounded: {:.2} s", cpu1 - cpu0);
    assert!(rss1 < rss0 + 32 * 1024, "memory bounded: {rss0} → {rss1} KiB");
}
