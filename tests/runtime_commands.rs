//! HAProxy's runtime commands for frontends, servers and the process, end to end, with
//! HAProxy's words: moving a server (`set server … addr`), forcing health and stopping checks,
//! relative weights, pausing a frontend, changing limits, clearing counters, and the `show`
//! commands scripts use to look around (`show version`, `show backend`, `show env`,
//! `show servers conn`, `show activity`).

use std::collections::HashMap;
use std::time::Duration;

use lb_testkit::runtime::parse_stat_csv;
use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

fn config(s1: &TestServer) -> impl Fn(&[u16]) -> String {
    let a1 = s1.addr();
    move |ports: &[u16]| {
        format!(
            r#"defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 1, fall: 1 }}
    servers:
      - {{ name: s1, address: "{a1}", check: true, weight: 10 }}
"#,
            fe = ports[0]
        )
    }
}

async fn ok(proxy: &ProxyProcess, line: &str) -> String {
    proxy.runtime_ok(line).await
}

async fn refused(proxy: &ProxyProcess, line: &str) -> String {
    proxy.runtime_refused(line).await
}

/// One `show stat` row by proxy and service name.
fn stat(proxy: &ProxyProcess, px: &str, sv: &str) -> HashMap<String, String> {
    let text = proxy.runtime("show stat");
    let (_, rows) = parse_stat_csv(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    let row = rows.into_iter().find(|r| r["pxname"] == px && r["svname"] == sv);
    row.unwrap_or_else(|| panic!("no row {px}/{sv}")).into_iter().collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moving_a_server_and_forcing_its_health() {
    let (s1, s2) = (TestServer::start("s1"), TestServer::start("s2"));
    let proxy = ProxyProcess::start_with(1, config(&s1));
    assert!(wait_until(Duration::from_secs(5), || stat(&proxy, "be", "s1")["status"] == "UP").await);
    let mut kept = client::Connection::open(proxy.addr()).await.expect("connect");
    assert_eq!(kept.get("/").await.expect("GET").server(), Some("s1"));

    // Moved: new connections and the next request of a kept-alive client go to the new address.
    let (old, new) = (s1.addr(), s2.addr());
    let answer = ok(&proxy, &format!("set server be/s1 addr {} port {}", new.ip(), new.port())).await;
    assert_eq!(answer, format!("port changed from '{}' to '{}' by 'stats socket command'", old.port(), new.port()));
    assert_eq!(client::get(proxy.addr(), "/").await.expect("GET").server(), Some("s2"));
    assert_eq!(kept.get("/").await.expect("GET on the kept connection").server(), Some("s2"));
    assert_eq!(stat(&proxy, "be", "s1")["addr"], new.to_string());
    assert_eq!(
        ok(&proxy, &format!("set server be/s1 addr {}", new.ip())).await,
        "no need to change the addr by 'stats socket command'"
    );
    assert_eq!(
        refused(&proxy, "set server be/s1 addr nowhere").await,
        "Invalid addr 'nowhere' by 'stats socket command'"
    );
    assert_eq!(
        refused(&proxy, "set server be/s1 addr 127.0.0.1 port 0").await,
        "Invalid port '0' by 'stats socket command'"
    );

    // Health forced down, then its checks (which pass) bring it back.
    assert_eq!(ok(&proxy, "set server be/s1 health down").await, "");
    assert_eq!(stat(&proxy, "be", "s1")["status"], "DOWN");
    assert!(wait_until(Duration::from_secs(5), || stat(&proxy, "be", "s1")["status"] == "UP").await);
    assert_eq!(
        refused(&proxy, "set server be/s1 health sideways").await,
        "'set server <srv> health' expects 'up', 'stopping', or 'down'."
    );

    // Checks stopped: unchecked, and up even where checks would fail.
    assert_eq!(ok(&proxy, "disable health be/s1").await, "");
    ok(&proxy, "set server be/s1 addr 127.0.0.1 port 1").await;
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(stat(&proxy, "be", "s1")["status"], "no check");
    assert_eq!(ok(&proxy, "enable health be/s1").await, "");
    assert!(wait_until(Duration::from_secs(5), || stat(&proxy, "be", "s1")["status"] == "DOWN").await);
    assert_eq!(refused(&proxy, "enable agent be/s1").await, "Agent was not configured on this server, cannot enable.");
    assert_eq!(refused(&proxy, "set server be/s1 agent up").await, "agent checks are not enabled on this server.");
    assert_eq!(ok(&proxy, "disable agent be/s1").await, "");

    // Weights relative to the initial one, as HAProxy takes them.
    assert_eq!(ok(&proxy, "set weight be/s1 50%").await, "");
    assert_eq!(ok(&proxy, "get weight be/s1").await, "5 (initial 10)");
    assert_eq!(ok(&proxy, "set server be/s1 weight 5000%").await, "");
    assert_eq!(ok(&proxy, "get weight be/s1").await, "256 (initial 10)");
    assert!(refused(&proxy, "set weight be/s1 x%").await.starts_with("Relative weight must be a number"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frontends_limits_counters_and_the_process() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    for _ in 0..3 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("GET").status, 200);
    }

    // A paused frontend accepts nothing new; the kernel queues, and resuming serves them.
    assert_eq!(ok(&proxy, "disable frontend fe").await, "");
    assert_eq!(refused(&proxy, "disable frontend fe").await, "All sockets are already disabled.");
    assert_eq!(stat(&proxy, "fe", "FRONTEND")["status"], "PAUSED");
    let waiting = tokio::spawn(client::get(proxy.addr(), "/"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!waiting.is_finished(), "no answer while paused");
    assert_eq!(ok(&proxy, "enable frontend fe").await, "");
    let answered = tokio::time::timeout(Duration::from_secs(5), waiting).await.expect("answered once resumed");
    assert_eq!(answered.expect("join").expect("GET").status, 200);
    assert_eq!(refused(&proxy, "enable frontend fe").await, "All sockets are already enabled.");
    assert_eq!(refused(&proxy, "enable frontend nope").await, "No such frontend.");

    // Limits.
    assert_eq!(ok(&proxy, "set maxconn frontend fe 7").await, "");
    assert_eq!(stat(&proxy, "fe", "FRONTEND")["slim"], "7");
    assert_eq!(ok(&proxy, "set maxconn global 100").await, "");
    let info = ok(&proxy, "show info").await;
    assert!(info.contains("\nMaxconn: 100\n") && info.contains("\nHard_maxconn: 4096\n"), "{info}");
    assert!(refused(&proxy, "set maxconn global 5000").await.starts_with("Value out of range: 1 to 4096"));
    assert_eq!(ok(&proxy, "set rate-limit connections global 50").await, "");
    assert!(ok(&proxy, "show info").await.contains("\nConnRateLimit: 50\n"));
    for _ in 0..3 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("GET under the limits").status, 200);
    }

    // Counters: the maxima, then everything.
    assert_ne!(stat(&proxy, "fe", "FRONTEND")["stot"], "0");
    assert_eq!(ok(&proxy, "clear counters").await, "");
    assert_eq!(stat(&proxy, "be", "s1")["rtime_max"], "0");
    assert_ne!(stat(&proxy, "fe", "FRONTEND")["stot"], "0", "clear counters keeps the totals");
    assert_eq!(ok(&proxy, "clear counters all").await, "");
    assert_eq!(stat(&proxy, "fe", "FRONTEND")["stot"], "0");
    assert_eq!(stat(&proxy, "be", "s1")["req_tot"], "0");

    // Looking around.
    assert_eq!(ok(&proxy, "show version").await, env!("CARGO_PKG_VERSION"));
    assert_eq!(ok(&proxy, "show backend").await, "# name\nbe\n");
    assert_eq!(refused(&proxy, "show env LB_NO_SUCH_VARIABLE").await, "Variable not found");
    let conn = ok(&proxy, "show servers conn").await;
    let mut lines = conn.lines();
    assert!(
        lines.next().is_some_and(|h| h.starts_with("# bkname/svname bkid/svid addr port - purge_delay used_cur")),
        "{conn}"
    );
    let row: Vec<&str> = lines.next().unwrap_or_default().split(' ').collect();
    assert_eq!(&row[..4], ["be/s1", "2/1", "127.0.0.1", &s1.addr().port().to_string()], "{conn}");
    assert_eq!(refused(&proxy, "show servers conn nope").await, "Can't find backend.");
    let activity = ok(&proxy, "show activity").await;
    assert!(activity.starts_with("thread_id: 1 (1..") && activity.contains("\naccepted: "), "{activity}");
}
