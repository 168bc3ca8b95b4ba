//! Balancing: weighted round robin, least connections, and servers that take no new traffic.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

/// `servers` as YAML flow maps, one per line, with extra keys per server.
fn server_lines(servers: &[(&TestServer, &str)]) -> String {
    servers
        .iter()
        .map(|(s, extra)| format!("      - {{ name: {}, address: \"{}\"{extra} }}\n", s.name(), s.addr()))
        .collect()
}

fn config(balance: &str, servers: &[(&TestServer, &str)]) -> impl Fn(&[u16]) -> String {
    let lines = server_lines(servers);
    let balance = balance.to_owned();
    move |ports: &[u16]| {
        format!(
            r#"global:
  max_connections: 1000
defaults:
  timeouts: {{ connect: 2s, client: 20s, server: 20s }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    balance: {balance}
    servers:
{lines}"#,
            fe = ports[0]
        )
    }
}

/// Sends `n` requests, each on a new connection, `parallel` at a time; returns how many each
/// server answered (by `X-Server`), panicking on any failure.
async fn spread(proxy: &ProxyProcess, n: usize, parallel: usize, path: &str) -> BTreeMap<String, usize> {
    let addr = proxy.addr();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..parallel {
        let next = next.clone();
        let path = path.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut seen = Vec::new();
            while next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < n {
                let r = client::get(addr, &path).await.expect("a request through the proxy");
                assert_eq!(r.status, 200, "{}", r.text());
                seen.push(r.server().expect("X-Server").to_owned());
            }
            seen
        }));
    }
    let mut counts = BTreeMap::new();
    for task in tasks {
        for server in task.await.expect("a client task") {
            *counts.entry(server).or_insert(0) += 1;
        }
    }
    counts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_follows_weights_1_2_3() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let s3 = TestServer::start("s3");
    let proxy = ProxyProcess::start_with(
        1,
        config("roundrobin", &[(&s1, ", weight: 1"), (&s2, ", weight: 2"), (&s3, ", weight: 3")]),
    );

    let counts = spread(&proxy, 600, 4, "/").await;
    let got = |name: &str| counts.get(name).copied().unwrap_or(0);
    assert_eq!(got("s1") + got("s2") + got("s3"), 600, "{counts:?}");
    // ±2% of the 600 requests around 100/200/300.
    for (name, want) in [("s1", 100), ("s2", 200), ("s3", 300)] {
        assert!(
            got(name).abs_diff(want) <= 12,
            "{name} answered {} of 600 requests, expected {want} ±12: {counts:?}",
            got(name)
        );
    }
    // The servers agree with what the clients saw.
    assert_eq!((s1.traffic(), s2.traffic(), s3.traffic()), (got("s1"), got("s2"), got("s3")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn roundrobin_with_equal_weights_alternates() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let proxy = ProxyProcess::start_with(1, config("roundrobin", &[(&s1, ""), (&s2, "")]));
    let counts = spread(&proxy, 100, 1, "/").await;
    assert_eq!(counts.get("s1"), Some(&50), "{counts:?}");
    assert_eq!(counts.get("s2"), Some(&50), "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leastconn_sends_new_requests_away_from_a_stuck_server() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let s3 = TestServer::start("s3");
    let proxy = ProxyProcess::start_with(1, config("leastconn", &[(&s1, ""), (&s2, ""), (&s3, "")]));
    let addr = proxy.addr();

    // s1 gets stuck: everything it receives waits 15 s. Send requests one at a time until one
    // is stuck on s1 (the others are answered at once by s2 and s3).
    s1.set_delay(Duration::from_secs(15));
    let mut stuck = Vec::new();
    for _ in 0..20 {
        if s1.in_flight() >= 1 {
            break;
        }
        let before = s1.in_flight();
        let task = tokio::spawn(async move { client::get(addr, "/stuck").await });
        // Either it lands on s1 (in flight there) or it is answered by another server.
        let landed = wait_until(Duration::from_secs(10), || s1.in_flight() > before || task.is_finished()).await;
        assert!(landed, "a request neither reached s1 nor was answered");
        if task.is_finished() {
            let r = task.await.expect("task").expect("request");
            assert_eq!(r.status, 200);
        } else {
            stuck.push(task);
        }
    }
    assert_eq!(s1.in_flight(), 1, "a request should be stuck on s1");

    // Now s1 has a connection and the others none: every new request goes to s2 or s3. The
    // requests go one at a time, each after the proxy closed the previous one's server
    // connection, so that the counts leastconn compares are exactly 1/0/0 at every pick.
    let mut counts = BTreeMap::new();
    for _ in 0..30 {
        let r = client::get(addr, "/fresh").await.expect("a request through the proxy");
        assert_eq!(r.status, 200, "{}", r.text());
        *counts.entry(r.server().expect("X-Server").to_owned()).or_insert(0) += 1;
        let closed = wait_until(Duration::from_secs(5), || s2.open_connections() + s3.open_connections() == 0).await;
        assert!(closed, "the proxy kept a server connection open after its client connection closed");
    }
    assert_eq!(counts.get("s1"), None, "leastconn sent requests to the stuck server: {counts:?}");
    assert_eq!(s1.hits_for("/fresh"), 0);
    for task in stuck {
        task.abort();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_maint_and_zero_weight_servers_get_no_new_traffic() {
    let ready = TestServer::start("ready");
    let drain = TestServer::start("drain");
    let maint = TestServer::start("maint");
    let zero = TestServer::start("zero");
    for balance in ["roundrobin", "leastconn"] {
        let proxy = ProxyProcess::start_with(
            1,
            config(
                balance,
                &[(&drain, ", state: drain"), (&ready, ""), (&maint, ", state: maint"), (&zero, ", weight: 0")],
            ),
        );
        let counts = spread(&proxy, 30, 2, "/").await;
        assert_eq!(counts.get("ready"), Some(&30), "{balance}: only the ready server takes traffic: {counts:?}");
    }
    assert_eq!(drain.traffic() + maint.traffic() + zero.traffic(), 0);
}
