//! Stats end to end: `show stat` against HAProxy's own header (Debian's haproxy, run here) and
//! parsed by a parser written from HAProxy's documented CSV format; the stats listener's CSV
//! and `/metrics` (parsed as Prometheus parses it); and counters carried across reloads, with
//! the gauges of old workers while one drains.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::Duration;

use lb_testkit::haproxy::haproxy_answers;
use lb_testkit::runtime::promtool_check;
use lb_testkit::runtime::{parse_prometheus, parse_stat_csv, Metrics, StatRow};
use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

fn config(s1: &TestServer, s2: &TestServer) -> impl Fn(&[u16]) -> String {
    let (a1, a2) = (s1.addr(), s2.addr());
    move |ports: &[u16]| {
        format!(
            r#"global:
  stats: {{ address: "127.0.0.1:{stats}", refresh: 2s }}
defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: web
    bind: ["127.0.0.1:{fe}"]
    default_backend: api
backends:
  - name: api
    balance: roundrobin
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 1, fall: 1 }}
    servers:
      - {{ name: a1, address: "{a1}", check: true }}
      - {{ name: a2, address: "{a2}" }}
      - {{ name: a3, address: "127.0.0.1:1", check: true }}
"#,
            fe = ports[0],
            stats = ports[1]
        )
    }
}

/// GET over a fresh connection: status and body.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String, String) {
    let mut stream = std::net::TcpStream::connect(addr).expect("connect to stats");
    stream.set_read_timeout(Some(Duration::from_secs(10))).ok();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: stats\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let content_type = head
        .lines()
        .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-type: ").map(str::to_owned))
        .unwrap_or_default();
    (status, content_type, body.to_owned())
}

fn stats_addr(proxy: &ProxyProcess) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], proxy.ports()[1]))
}

fn row<'a>(rows: &'a [StatRow], px: &str, sv: &str) -> &'a StatRow {
    rows.iter().find(|r| r["pxname"] == px && r["svname"] == sv).unwrap_or_else(|| panic!("no row {px}/{sv}"))
}

/// A numeric column of one row; panics naming the row when it is empty or not a number.
fn number(rows: &[StatRow], px: &str, sv: &str, column: &str) -> u64 {
    let r = row(rows, px, sv);
    r[column].parse().unwrap_or_else(|_| panic!("{px}/{sv} {column}: {r:?}"))
}

/// The same column in a `show stat` asked now.
fn stat_now(proxy: &ProxyProcess, px: &str, sv: &str, column: &str) -> u64 {
    let text = proxy.runtime("show stat");
    let (_, rows) = parse_stat_csv(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    number(&rows, px, sv, column)
}

fn metrics(proxy: &ProxyProcess) -> Metrics {
    let (status, content_type, body) = http_get(stats_addr(proxy), "/metrics");
    assert_eq!(status, 200, "{body}");
    assert!(content_type.starts_with("text/plain; version=0.0.4"), "{content_type}");
    parse_prometheus(&body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

/// The header of Debian's haproxy's `show stat`, from a haproxy run here.
fn haproxy_header() -> String {
    let (answers, _) = haproxy_answers(&["show stat"]);
    answers[0].lines().next().expect("haproxy answered show stat").to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_stat_is_haproxys_csv() {
    let (s1, s2) = (TestServer::start("a1"), TestServer::start("a2"));
    let proxy = ProxyProcess::start_with(2, config(&s1, &s2));
    for _ in 0..10 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    let text = proxy.runtime("show stat");
    assert!(text.ends_with("\n\n"), "an answer ends with an empty line");
    let ours = text.lines().next().unwrap_or_default().to_owned();
    assert_eq!(ours, haproxy_header(), "the header is HAProxy 2.6's, column for column");

    let (columns, rows) = parse_stat_csv(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(columns.first().map(String::as_str), Some("pxname"));
    let svnames: Vec<String> = rows.iter().map(|r| format!("{}/{}", r["pxname"], r["svname"])).collect();
    assert_eq!(svnames, ["web/FRONTEND", "api/a1", "api/a2", "api/a3", "api/BACKEND"]);

    let fe = row(&rows, "web", "FRONTEND");
    assert_eq!((fe["status"].as_str(), fe["req_tot"].as_str(), fe["hrsp_2xx"].as_str()), ("OPEN", "10", "10"));
    assert_eq!((fe["stot"].as_str(), fe["type"].as_str(), fe["mode"].as_str()), ("10", "0", "http"));
    let be = row(&rows, "api", "BACKEND");
    assert_eq!((be["status"].as_str(), be["req_tot"].as_str(), be["algo"].as_str()), ("UP", "10", "roundrobin"));
    let (a1, a2, a3) = (row(&rows, "api", "a1"), row(&rows, "api", "a2"), row(&rows, "api", "a3"));
    assert_eq!(a1["status"], "UP");
    assert_eq!(a2["status"], "no check");
    assert_eq!(a3["status"], "DOWN", "{a3:?}");
    assert_eq!(a3["check_status"], "L4CON");
    let served: u64 = [a1, a2].iter().map(|r| r["req_tot"].parse::<u64>().unwrap_or(0)).sum();
    assert_eq!(served, 10);
    assert_eq!(a1["addr"], s1.addr().to_string());
    assert_eq!(a1["type"], "2");
    // Columns lb-proxy does not have are empty, never made up.
    assert_eq!((a1["cookie"].as_str(), a1["agent_status"].as_str(), fe["comp_in"].as_str()), ("", "", ""));

    // Bytes in and out: what the frontend counts, its backend and servers count too.
    for column in ["bin", "bout"] {
        let fe = number(&rows, "web", "FRONTEND", column);
        assert!(fe > 0, "{column}");
        assert_eq!(number(&rows, "api", "BACKEND", column), fe, "{column}");
        assert_eq!(number(&rows, "api", "a1", column) + number(&rows, "api", "a2", column), fe, "{column}");
    }
    // bin is every byte the client sent: one request of a known size adds exactly its size.
    let bin_before = number(&rows, "web", "FRONTEND", "bin");
    let (status, _, _) = http_get(proxy.addr(), "/exactly");
    assert_eq!(status, 200);
    let sent = "GET /exactly HTTP/1.1\r\nHost: stats\r\nConnection: close\r\n\r\n".len() as u64;
    let bin_now = || stat_now(&proxy, "web", "FRONTEND", "bin");
    assert!(wait_until(Duration::from_secs(5), || bin_now() == bin_before + sent).await, "bin {}", bin_now());

    // downtime: seconds DOWN (or in MAINT) so far; a3 has been down since the start.
    assert_eq!(a1["downtime"], "0");
    let a3_downtime = || stat_now(&proxy, "api", "a3", "downtime");
    assert!(wait_until(Duration::from_secs(5), || a3_downtime() >= 1).await, "a3 downtime {}", a3_downtime());

    // HAProxy's selection: proxy (id or name), type mask, server id.
    let names = |line: &str| -> Vec<String> {
        let (_, rows) = parse_stat_csv(&proxy.runtime(line)).unwrap_or_default();
        rows.iter().map(|r| format!("{}/{}", r["pxname"], r["svname"])).collect()
    };
    assert_eq!(names("show stat -1 4 -1"), ["api/a1", "api/a2", "api/a3"]);
    assert_eq!(names("show stat api 2 -1"), ["api/BACKEND"]);
    assert_eq!(names("show stat -1 1 -1"), ["web/FRONTEND"]);
    assert_eq!(names("show stat 2 -1 2"), ["api/a2"]);

    proxy.runtime("set server api/a2 state drain; disable server api/a1");
    let (_, rows) = parse_stat_csv(&proxy.runtime("show stat")).unwrap_or_default();
    assert_eq!(row(&rows, "api", "a1")["status"], "MAINT");
    assert_eq!(row(&rows, "api", "a2")["status"], "DRAIN");
    assert_eq!(row(&rows, "api", "BACKEND")["status"], "DOWN");
    // The backend's downtime: time without a usable server, from now on.
    let backend_downtime = || stat_now(&proxy, "api", "BACKEND", "downtime");
    assert!(
        wait_until(Duration::from_secs(5), || backend_downtime() >= 1).await,
        "backend downtime {}",
        backend_downtime()
    );

    // The same CSV over HTTP, at HAProxy's URLs.
    for path in ["/;csv", "/stats;csv", "/;csv;norefresh"] {
        let (status, content_type, body) = http_get(stats_addr(&proxy), path);
        assert_eq!(status, 200, "{path}");
        assert!(content_type.starts_with("text/csv"), "{path}: {content_type}");
        let (columns_http, rows_http) = parse_stat_csv(&body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(columns_http, columns);
        assert_eq!(rows_http.len(), 5);
    }
    assert_eq!(http_get(stats_addr(&proxy), "/nope").0, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_and_counters_survive_reloads() {
    let (s1, s2) = (TestServer::start("a1"), TestServer::start("a2"));
    let proxy = ProxyProcess::start_with(2, config(&s1, &s2));
    for _ in 0..20 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    let text = http_get(stats_addr(&proxy), "/metrics").2;
    let m = metrics(&proxy);
    let fe = [("proxy", "web")];
    assert_eq!(m.value("haproxy_frontend_http_requests_total", &fe), Some(20.0));
    assert_eq!(m.value("haproxy_frontend_http_responses_total", &[("proxy", "web"), ("code", "2xx")]), Some(20.0));
    assert_eq!(m.value("haproxy_backend_http_requests_total", &[("proxy", "api")]), Some(20.0));
    let status = |server: &str, state: &str| {
        m.value("haproxy_server_status", &[("proxy", "api"), ("server", server), ("state", state)])
    };
    assert_eq!(status("a1", "UP"), Some(1.0));
    assert_eq!(status("a3", "DOWN"), Some(1.0));
    assert_eq!(status("a3", "UP"), Some(0.0));
    assert_eq!(m.value("lb_proxy_old_workers", &[]), Some(0.0));
    let served: f64 = ["a1", "a2"]
        .iter()
        .filter_map(|s| m.value("lb_proxy_server_http_requests_total", &[("proxy", "api"), ("server", s)]))
        .sum();
    assert_eq!(served, 20.0);

    // HAProxy's exporter names: every haproxy_* family here is one of Debian's haproxy, of the
    // same type, so its dashboards and alerts find them; promtool finds nothing to say.
    let (_, reference) = haproxy_answers(&[]);
    let reference = parse_prometheus(&reference).unwrap_or_else(|e| panic!("haproxy's /metrics: {e}"));
    assert!(reference.families.len() > 100, "haproxy exported {} families", reference.families.len());
    for (name, family) in m.families.iter().filter(|(name, _)| name.starts_with("haproxy_")) {
        let theirs = reference.families.get(name).unwrap_or_else(|| panic!("{name} is not one of haproxy's"));
        assert_eq!(family.kind, theirs.kind, "{name}'s type");
    }
    assert!(m.families.keys().filter(|n| n.starts_with("haproxy_")).count() > 60);
    let complaints = promtool_check(&text);
    assert!(complaints.is_empty(), "promtool check metrics: {complaints}\n{text}");

    // A slow request keeps the old worker draining across the reload.
    let slow = tokio::spawn({
        let addr = proxy.addr();
        async move { client::get(addr, "/slow?ms=3000").await }
    });
    assert!(wait_until(Duration::from_secs(5), || s1.in_flight() + s2.in_flight() == 1).await);
    proxy.reload().await.expect("reload");
    let m = metrics(&proxy);
    assert_eq!(m.value("haproxy_frontend_http_requests_total", &fe), Some(20.0), "carried across the reload");
    assert_eq!(m.value("lb_proxy_old_workers", &[]), Some(1.0));
    assert_eq!(m.value("lb_proxy_old_worker_connections", &[]), Some(1.0));
    assert_eq!(slow.await.expect("join").expect("slow request").status, 200);

    for _ in 0..5 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    proxy.reload().await.expect("second reload");
    // 20 + 5, and the slow request, which the old worker counted after its snapshot (it was in
    // flight at the reload) and handed on once drained.
    let req_tot = || {
        let (_, rows) = parse_stat_csv(&proxy.runtime("show stat")).unwrap_or_default();
        row(&rows, "web", "FRONTEND")["req_tot"].clone()
    };
    assert!(wait_until(Duration::from_secs(10), || req_tot() == "26").await, "req_tot {}", req_tot());
    let info = proxy.runtime("show info");
    assert!(info.contains("CumReq: 26\n"), "{info}");
    let m = metrics(&proxy);
    assert_eq!(m.value("haproxy_frontend_http_responses_total", &[("proxy", "web"), ("code", "2xx")]), Some(26.0));
    assert!(
        wait_until(Duration::from_secs(10), || {
            let m = metrics(&proxy);
            m.value("lb_proxy_old_workers", &[]) == Some(0.0)
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_chain_through_back_to_back_reloads() {
    let (s1, s2) = (TestServer::start("a1"), TestServer::start("a2"));
    let proxy = ProxyProcess::start_with(2, config(&s1, &s2));
    let mut sent = 0u64;
    for round in 0..8 {
        for _ in 0..5 {
            assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
            sent += 1;
        }
        // Two reloads at once: the second worker is asked for its counters before (or while)
        // it gets its predecessor's.
        let (a, b) = tokio::join!(proxy.reload(), proxy.reload());
        a.unwrap_or_else(|e| panic!("reload {round}: {e}"));
        b.unwrap_or_else(|e| panic!("reload {round}: {e}"));
    }
    let count = || metrics(&proxy).value("haproxy_frontend_http_requests_total", &[("proxy", "web")]);
    assert!(
        wait_until(Duration::from_secs(10), || count() == Some(sent as f64)).await,
        "{:?} requests counted, {sent} sent",
        count()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn response_times_in_the_csv_and_as_histograms() {
    let (s1, s2) = (TestServer::start("a1"), TestServer::start("a2"));
    let proxy = ProxyProcess::start_with(2, config(&s1, &s2));
    // a2 is not checked and a3 is down: with round robin between a1 and a2, each gets two.
    for _ in 0..4 {
        assert_eq!(client::get(proxy.addr(), "/slow?ms=150").await.expect("request").status, 200);
    }
    for _ in 0..4 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    let (_, rows) = parse_stat_csv(&proxy.runtime("show stat")).unwrap_or_default();
    for sv in ["a1", "a2", "BACKEND"] {
        let n = |column: &str| number(&rows, "api", sv, column);
        // Averages over the requests so far: half took 150 ms, half almost nothing.
        assert!((70..150).contains(&n("rtime")), "api/{sv} rtime {}", n("rtime"));
        assert!(n("ttime") >= n("rtime"), "api/{sv} ttime {} < rtime", n("ttime"));
        assert!((150..1000).contains(&n("rtime_max")), "api/{sv} rtime_max {}", n("rtime_max"));
        assert!(n("ttime_max") >= 150, "api/{sv} ttime_max {}", n("ttime_max"));
        assert_eq!((n("qtime"), n("qtime_max")), (0, 0), "api/{sv}: nothing queued");
        assert!(n("ctime_max") < 150, "api/{sv} ctime_max {}", n("ctime_max"));
    }
    assert_eq!(row(&rows, "web", "FRONTEND")["rtime"], "", "frontends have no server times, as in HAProxy");

    let m = metrics(&proxy);
    let api = [("proxy", "api")];
    let average = m.value("haproxy_backend_response_time_average_seconds", &api).expect("average");
    assert!((0.07..0.15).contains(&average), "response average {average}");
    let max = m.value("haproxy_server_max_total_time_seconds", &[("proxy", "api"), ("server", "a1")]).expect("max");
    assert!(max >= 0.15, "a1's longest {max}");
    let bucket = |phase: &str, le: &str| {
        m.value("lb_proxy_backend_request_duration_seconds_bucket", &[("proxy", "api"), ("phase", phase), ("le", le)])
    };
    assert_eq!(bucket("first_byte", "+Inf"), Some(8.0));
    assert_eq!(bucket("first_byte", "0.1"), Some(4.0), "the four quick ones");
    assert_eq!(bucket("first_byte", "0.25"), Some(8.0), "and the four slow ones under 250 ms");
    assert_eq!(bucket("total", "0.1"), Some(4.0));
    assert_eq!(bucket("connect", "0.1"), Some(8.0));
    assert_eq!(m.families["lb_proxy_backend_request_duration_seconds"].kind, "histogram");
    let sum = m.value("lb_proxy_backend_request_duration_seconds_sum", &[("proxy", "api"), ("phase", "total")]);
    assert!(sum.is_some_and(|s| s >= 0.6), "total sum {sum:?}");
    let text = http_get(stats_addr(&proxy), "/metrics").2;
    let complaints = promtool_check(&text);
    assert!(complaints.is_empty(), "promtool check metrics: {complaints}");

    // Histograms are counters: carried across a reload.
    proxy.reload().await.expect("reload");
    assert_eq!(
        metrics(&proxy).value(
            "lb_proxy_backend_request_duration_seconds_bucket",
            &[("proxy", "api"), ("phase", "total"), ("le", "+Inf")]
        ),
        Some(8.0)
    );
}
