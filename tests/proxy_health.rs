//! Health checks: a server that dies or fails its check is taken out quickly, with no client
//! error once detected, and comes back after `rise` good checks.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

fn config(check: &str, s1: &TestServer, s2: &TestServer) -> impl Fn(&[u16]) -> String {
    let check = check.to_owned();
    let (a1, a2) = (s1.addr(), s2.addr());
    move |ports: &[u16]| {
        format!(
            r#"defaults:
  retries: 3
  redispatch: true
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    balance: roundrobin
    health_check: {check}
    servers:
      - {{ name: s1, address: "{a1}", check: true }}
      - {{ name: s2, address: "{a2}", check: true }}
"#,
            fe = ports[0]
        )
    }
}

const HTTP_CHECK: &str = "{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 2, fall: 2 }";
const TCP_CHECK: &str = "{ type: tcp, interval: 200ms, rise: 2, fall: 2 }";

/// `n` requests, each on a new connection; every one must succeed. Returns who answered.
async fn traffic(proxy: &ProxyProcess, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for i in 0..n {
        let r = client::get(proxy.addr(), "/work").await.unwrap_or_else(|e| panic!("request {i} failed: {e:#}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        *counts.entry(r.server().expect("X-Server").to_owned()).or_insert(0) += 1;
    }
    counts
}

async fn checks_running(s1: &TestServer, s2: &TestServer) {
    let both = wait_until(Duration::from_secs(10), || s1.hits_for("/ping") >= 1 && s2.hits_for("/ping") >= 1).await;
    assert!(both, "health checks never reached both servers");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopped_server_is_taken_out_and_comes_back_after_rise() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let proxy = ProxyProcess::start_with(1, config(HTTP_CHECK, &s1, &s2));
    checks_running(&s1, &s2).await;
    let before = traffic(&proxy, 10).await;
    assert_eq!((before.get("s1"), before.get("s2")), (Some(&5), Some(&5)), "{before:?}");

    let stopped = Instant::now();
    s2.stop();
    let down = proxy.wait_for_stderr(|l| l.contains("Server be/s2 is DOWN")).await;
    // interval 200ms, then fall × the fast interval (100ms): well under a second; 3 s is generous.
    let detected = stopped.elapsed();
    assert!(detected < Duration::from_secs(3), "s2 marked DOWN only after {detected:?}: {down}");
    assert!(down.contains("reason:"), "the DOWN line says why: {down}");

    // Once detected: every request succeeds, all on s1.
    let after = traffic(&proxy, 40).await;
    assert_eq!(after.get("s1"), Some(&40), "{after:?}");

    s2.restart();
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is UP")).await;
    let back = traffic(&proxy, 20).await;
    assert!(back.get("s2").copied().unwrap_or(0) >= 5, "s2 gets traffic again once UP: {back:?}");
    // A DOWN server came back UP after `rise` (2) good checks: it needed at least 2 checks.
    assert!(proxy.stderr().iter().filter(|l| l.contains("Server be/s2 is UP")).count() == 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_http_check_status_takes_server_out_while_it_still_listens() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let proxy = ProxyProcess::start_with(1, config(HTTP_CHECK, &s1, &s2));
    checks_running(&s1, &s2).await;

    s2.set_healthy(false);
    let down = proxy.wait_for_stderr(|l| l.contains("Server be/s2 is DOWN")).await;
    assert!(down.contains("500"), "the DOWN line gives the status the check got: {down}");
    s2.clear_requests();
    let counts = traffic(&proxy, 20).await;
    assert_eq!(counts.get("s1"), Some(&20), "a server failing its check gets no traffic: {counts:?}");
    assert_eq!(s2.traffic(), 0);

    s2.set_healthy(true);
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is UP")).await;
    let counts = traffic(&proxy, 20).await;
    assert!(counts.get("s2").copied().unwrap_or(0) >= 5, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_check_detects_a_closed_port() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let proxy = ProxyProcess::start_with(1, config(TCP_CHECK, &s1, &s2));
    // TCP checks connect only: wait until s2 has seen connections that carried no request.
    let checked = wait_until(Duration::from_secs(10), || s2.connections() >= 2).await;
    assert!(checked, "TCP checks never reached s2");

    s2.stop();
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is DOWN")).await;
    let counts = traffic(&proxy, 20).await;
    assert_eq!(counts.get("s1"), Some(&20), "{counts:?}");

    s2.restart();
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is UP")).await;
    let counts = traffic(&proxy, 20).await;
    assert!(counts.get("s2").copied().unwrap_or(0) >= 5, "{counts:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slowstart_ramps_a_returning_server_up_gradually() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let (a1, a2) = (s1.addr(), s2.addr());
    let proxy = ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    balance: roundrobin
    health_check: {HTTP_CHECK}
    servers:
      - {{ name: s1, address: "{a1}", weight: 10, check: true }}
      - {{ name: s2, address: "{a2}", weight: 10, check: true, slowstart: 4s }}
"#,
            fe = ports[0]
        )
    });
    checks_running(&s1, &s2).await;
    s2.stop();
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is DOWN")).await;
    s2.restart();
    proxy.wait_for_stderr(|l| l.contains("Server be/s2 is UP")).await;
    let up = Instant::now();

    // Right after coming back, s2's share is small: at time t its weight is about 10·t/4, so
    // its share of a batch ending at T is at most (T/4)/(1 + T/4).
    let early = traffic(&proxy, 20).await;
    let t = up.elapsed().as_secs_f64() / 4.0;
    let bound = (20.0 * t.min(1.0) / (1.0 + t.min(1.0))).ceil() as usize + 2;
    let s2_early = early.get("s2").copied().unwrap_or(0);
    assert!(
        s2_early <= bound.min(8),
        "s2 got {s2_early} of 20 requests {:?} after coming back with slowstart 4s: {early:?}",
        up.elapsed()
    );

    // Once the ramp is over, it takes its full share again.
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(up.elapsed())).await;
    let late = traffic(&proxy, 20).await;
    let s2_late = late.get("s2").copied().unwrap_or(0);
    assert!((8..=12).contains(&s2_late), "after the ramp s2 takes half of the traffic: {late:?}");
}
