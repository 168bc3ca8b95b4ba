//! The stats page in a real browser: Debian's headless Chromium loads it from lb-proxy's stats
//! listener; the DOM it rendered must show every frontend, backend and server with its state,
//! and a screenshot must come out. `LB_STATS_SCREENSHOT=docs/stats-page.png` keeps the
//! screenshot there (how docs/stats-page.png is made).

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

const CHROMIUM: &str = "/usr/bin/chromium";
const BROWSER_TIMEOUT: Duration = Duration::from_secs(90);

fn config(servers: &[&TestServer]) -> impl Fn(&[u16]) -> String {
    let addrs: Vec<String> = servers.iter().map(|s| s.addr().to_string()).collect();
    move |ports: &[u16]| {
        format!(
            r#"global:
  stats: {{ address: "127.0.0.1:{stats}", refresh: 5s }}
defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 300ms }}
frontends:
  - name: public_http
    bind: ["127.0.0.1:{fe}"]
    default_backend: api
  - name: internal
    bind: ["127.0.0.1:{fe2}"]
    default_backend: jobs
backends:
  - name: api
    balance: leastconn
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 1, fall: 1 }}
    servers:
      - {{ name: api-1, address: "{a0}", check: true, weight: 10 }}
      - {{ name: api-2, address: "{a1}", check: true, weight: 10 }}
      - {{ name: api-3, address: "{a2}", check: true, weight: 10 }}
      - {{ name: api-4, address: "127.0.0.1:1", check: true }}
  - name: jobs
    servers:
      - {{ name: jobs-1, address: "{a0}" }}
"#,
            fe = ports[0],
            fe2 = ports[1],
            stats = ports[2],
            a0 = addrs[0],
            a1 = addrs[1],
            a2 = addrs[2],
        )
    }
}

/// Run Chromium headless with `args` then the URL; killed (by its PID) past the timeout.
fn chromium(profile: &Path, args: &[&str], url: &str) -> Output {
    let mut child = Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
            "--window-size=1280,900",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("Debian's chromium (scripts/install-deps test)");
    let deadline = Instant::now() + BROWSER_TIMEOUT;
    while child.try_wait().ok().flatten().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("chromium output")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_page_renders_in_chromium() {
    let servers = [TestServer::start("api-1"), TestServer::start("api-2"), TestServer::start("api-3")];
    let refs: Vec<&TestServer> = servers.iter().collect();
    let proxy = ProxyProcess::start_with(3, config(&refs));
    let stats = format!("http://127.0.0.1:{}/", proxy.ports()[2]);

    // Some history: traffic, a server drained, one in maintenance, one added at run time.
    for _ in 0..60 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    for line in ["set server api/api-2 state drain", "disable server api/api-3", "add server jobs/jobs-2 127.0.0.1:9"] {
        proxy.runtime_command(line).await.unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    assert!(
        wait_until(Duration::from_secs(5), || proxy.runtime("show stat").contains("api,api-4,") && {
            proxy.runtime("show stat").lines().any(|l| l.starts_with("api,api-4,") && l.contains(",DOWN,"))
        })
        .await
    );

    let profile = tempfile::tempdir().expect("profile dir");
    let out = chromium(profile.path(), &["--dump-dom"], &stats);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    for name in ["public_http", "internal", "api", "jobs", "api-1", "api-2", "api-3", "api-4", "jobs-1", "jobs-2"] {
        assert!(dom.contains(&format!(">{name}<")), "the page shows {name}:\n{dom}");
    }
    for state in
        ["state UP\">UP", "state DRAIN\">DRAIN", "state MAINT\">MAINT", "state DOWN\">DOWN", "state nocheck\">no check"]
    {
        assert!(dom.contains(state), "the page shows {state}:\n{dom}");
    }
    assert!(dom.contains("<td>60</td>"), "60 requests are counted on the frontend:\n{dom}");

    let shot = profile.path().join("stats.png");
    let out = chromium(profile.path(), &[&format!("--screenshot={}", shot.display())], &stats);
    assert!(out.status.success(), "chromium failed: {}", String::from_utf8_lossy(&out.stderr));
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n") && png.len() > 10_000, "a real screenshot ({} bytes)", png.len());
    if let Some(keep) = std::env::var_os("LB_STATS_SCREENSHOT") {
        std::fs::write(&keep, &png).expect("keeping the screenshot");
    }
}
