//! Membership changes under load without a reload: while new-connection, keep-alive and slow
//! clients hit the proxy, a server is added (checked, then enabled), another is drained, put in
//! maintenance and deleted once it holds no connection, and a weight changes. Not one request
//! may fail, and the servers see exactly the traffic their state allows.

use std::time::Duration;

use lb_testkit::load::{Load, LoadSpec};
use lb_testkit::runtime::parse_stat_csv;
use lb_testkit::{wait_until, ProxyProcess, TestServer};

fn config(s1: &TestServer, s2: &TestServer) -> impl Fn(&[u16]) -> String {
    let (a1, a2) = (s1.addr(), s2.addr());
    move |ports: &[u16]| {
        format!(
            r#"global:
  worker_threads: 1
defaults:
  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 2s, check: 500ms }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    balance: leastconn
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 2, fall: 2 }}
    servers:
      - {{ name: s1, address: "{a1}", check: true }}
      - {{ name: s2, address: "{a2}", check: true }}
"#,
            fe = ports[0]
        )
    }
}

/// `scur` of `be/server` in `show stat`, None when the server is not listed.
fn current_sessions(proxy: &ProxyProcess, server: &str) -> Option<u64> {
    let answer = proxy.runtime("show stat");
    let (_, rows) = parse_stat_csv(answer.trim_end_matches('\n')).unwrap_or_else(|e| panic!("{e}"));
    rows.iter().find(|r| r["pxname"] == "be" && r["svname"] == server).and_then(|r| r["scur"].parse().ok())
}

async fn run(proxy: &ProxyProcess, line: &str) {
    proxy.runtime_command(line).await.unwrap_or_else(|e| panic!("{line}: {e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn add_drain_delete_under_load_lose_no_request() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let s3 = TestServer::start("s3");
    let proxy = ProxyProcess::start_with(1, config(&s1, &s2));

    let mut spec = LoadSpec::new(proxy.addr(), Duration::from_secs(60));
    spec.new_connection_clients = 8;
    spec.keep_alive_clients = 8;
    spec.pause = Duration::from_millis(5);
    spec.slow_every = Some(Duration::from_millis(200));
    spec.slow_path = "/slow?ms=500".into();
    let load = Load::start(spec);
    assert!(wait_until(Duration::from_secs(10), || load.snapshot().total().finished() > 200).await, "load runs");

    // Add s3: in maintenance, checked once enabled, then it takes traffic.
    run(&proxy, &format!("add server be/s3 {} check weight 2", s3.addr())).await;
    let before = s3.hits_for("/load");
    run(&proxy, "set server be/s3 state ready").await;
    assert!(
        wait_until(Duration::from_secs(10), || s3.hits_for("/load") > before + 50).await,
        "s3 takes traffic once its checks passed"
    );

    // A weight change at run time.
    run(&proxy, "set server be/s1 weight 3").await;

    // Drain s2, then maintenance (keep-alive clients pinned to it move on at their next
    // request), wait until it holds nothing, delete it.
    run(&proxy, "set server be/s2 state drain").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    run(&proxy, "set server be/s2 state maint").await;
    assert!(
        wait_until(Duration::from_secs(15), || current_sessions(&proxy, "s2") == Some(0)).await,
        "s2 still has connections: {:?}",
        current_sessions(&proxy, "s2")
    );
    run(&proxy, "del server be/s2").await;
    assert_eq!(current_sessions(&proxy, "s2"), None, "s2 is gone from show stat");
    let s2_after_delete = s2.hits_for("/load") + s2.hits_for("/slow");

    // Back and forth once more, still under load.
    run(&proxy, "disable server be/s3").await;
    run(&proxy, "enable server be/s3").await;
    assert!(wait_until(Duration::from_secs(10), || load.snapshot().total().finished() > 4000).await);

    let report = load.stop().await;
    println!("{report}");
    assert_eq!(report.failed(), 0, "requests failed during membership changes:\n{report}");
    assert_eq!(report.slow.ok, report.slow.started, "every slow request completes:\n{report}");
    assert_eq!(s2.hits_for("/load") + s2.hits_for("/slow"), s2_after_delete, "no request reached s2 once deleted");
    assert!(s1.hits_for("/load") > 0 && s3.hits_for("/load") > 0);
}
