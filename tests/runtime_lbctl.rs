//! lbctl against a real lb-proxy for the runtime commands: tables for a person, JSON objects
//! for a script, and the exit statuses scripts rely on (0 done, 1 refused, 2 usage, 69 no
//! master).

use lb_testkit::lbctl::lbctl;
use lb_testkit::{ProxyProcess, TestServer};

fn config(s1: &TestServer) -> impl Fn(&[u16]) -> String {
    let a1 = s1.addr();
    move |ports: &[u16]| {
        format!(
            r#"frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    servers:
      - {{ name: s1, address: "{a1}" }}
"#,
            fe = ports[0]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lbctl_runtime_commands() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));

    let out = proxy.lbctl(&["show", "stat"]).await;
    assert_eq!(out.code, Some(0), "{out}");
    let mut lines = out.stdout.lines();
    assert!(lines.next().is_some_and(|l| l.starts_with("NAME  SERVER    STATUS")), "{out}");
    assert!(out.stdout.lines().any(|l| l.starts_with("be    s1") && l.contains("no check")), "{out}");

    let out = proxy.lbctl(&["--json", "show", "servers", "state"]).await;
    assert_eq!(out.code, Some(0), "{out}");
    let rows: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(rows[0]["srv_name"], "s1");
    assert_eq!(rows[0]["srv_port"], s1.port());
    assert_eq!(rows[0]["srv_admin_state"], 0);

    let out = proxy.lbctl(&["--json", "show", "info"]).await;
    let info: serde_json::Value = serde_json::from_str(&out.stdout).expect("JSON");
    assert_eq!(info["Name"], "lb-proxy");

    let out = proxy.lbctl(&["set", "server", "be/s1", "state", "drain"]).await;
    assert_eq!((out.code, out.stdout.as_str(), out.stderr.as_str()), (Some(0), "", ""), "{out}");
    let out = proxy.lbctl(&["show", "servers", "state"]).await;
    assert!(out.stdout.contains(" drain "), "{out}");

    let out = proxy.lbctl(&["enable", "server", "be/nope"]).await;
    assert_eq!((out.code, out.stderr.as_str()), (Some(1), "lbctl: No such server.\n"), "{out}");
    let out = proxy.lbctl(&["frobnicate"]).await;
    assert_eq!(out.code, Some(1), "{out}");
    let out = proxy.lbctl(&["--bogus", "show", "stat"]).await;
    assert_eq!(out.code, Some(2), "{out}");
    let gone = proxy.dir().join("nobody.sock");
    let out = lbctl(&gone, &["show", "stat"]).await;
    assert_eq!(out.code, Some(69), "{out}");
}
