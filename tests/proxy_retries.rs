//! Retries and redispatch, 503 when no server can take a request, custom error files.

use lb_testkit::log::HttpLogLine;
use lb_testkit::{client, free_port, ProxyProcess, TestServer};

fn config(backend: &str, defaults: &str) -> impl Fn(&[u16]) -> String {
    let (backend, defaults) = (backend.to_owned(), defaults.to_owned());
    move |ports: &[u16]| {
        format!(
            r#"defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
{defaults}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
{backend}
"#,
            fe = ports[0]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_redispatch_to_the_live_server() {
    let live = TestServer::start("live");
    let dead_port = free_port(); // nothing listens there: connects are refused
    let proxy = ProxyProcess::start_with(
        1,
        config(
            &format!(
                r#"    balance: roundrobin
    retries: 3
    redispatch: true
    servers:
      - {{ name: dead, address: "127.0.0.1:{dead_port}" }}
      - {{ name: live, address: "{}" }}"#,
                live.addr()
            ),
            "",
        ),
    );

    for i in 0..30 {
        let r = client::get(proxy.addr(), "/x").await.unwrap_or_else(|e| panic!("request {i}: {e:#}"));
        assert_eq!(r.status, 200, "request {i}: {}", r.text());
        assert_eq!(r.server(), Some("live"));
    }
    let lines = proxy.wait_for_log_lines(30).await;
    let parsed: Vec<HttpLogLine> =
        lines.iter().map(|l| HttpLogLine::parse(l).unwrap_or_else(|| panic!("not httplog: {l}"))).collect();
    assert!(parsed.iter().all(|l| l.status == 200 && l.server == "live"), "{lines:#?}");
    let retried = parsed.iter().filter(|l| l.retries > 0).count();
    assert!(retried > 0, "some requests first went to the dead server and were retried: {lines:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_without_redispatch_end_in_503_naming_the_server() {
    let dead_port = free_port();
    let proxy = ProxyProcess::start_with(
        1,
        config(
            &format!(
                r#"    retries: 2
    redispatch: false
    servers:
      - {{ name: dead, address: "127.0.0.1:{dead_port}" }}"#
            ),
            "",
        ),
    );
    let r = client::get(proxy.addr(), "/x").await.expect("request");
    assert_eq!(r.status, 503, "{}", r.text());
    let line = proxy.wait_for_log(|l| l.contains("\"GET /x HTTP/1.1\"")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.server.as_str(), parsed.status, parsed.retries), ("dead", 503, 2), "{line}");
    assert_eq!(parsed.termination, "SC--", "a refused connect is a server-side connect failure: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_server_up_gives_503_with_nosrv_in_the_log() {
    let dead_port = free_port();
    let proxy = ProxyProcess::start_with(
        1,
        config(
            &format!(
                r#"    health_check: {{ type: tcp, interval: 200ms, rise: 2, fall: 1 }}
    servers:
      - {{ name: dead, address: "127.0.0.1:{dead_port}", check: true }}"#
            ),
            "",
        ),
    );
    proxy.wait_for_stderr(|l| l.contains("Server be/dead is DOWN")).await;

    let r = client::get(proxy.addr(), "/nothing-up").await.expect("request");
    assert_eq!(r.status, 503, "{}", r.text());
    let body = r.json();
    assert_eq!(body["status"], 503, "the built-in error page is JSON: {body}");
    let line = proxy.wait_for_log(|l| l.contains("/nothing-up")).await;
    let parsed = HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"));
    assert_eq!((parsed.backend.as_str(), parsed.server.as_str(), parsed.status), ("be", "<NOSRV>", 503), "{line}");
    assert_eq!(parsed.termination, "SC--", "{line}");
    assert_eq!(parsed.tc, -1, "no connection was attempted: {line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn servers_in_maintenance_give_503_with_nosrv() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(
        1,
        config(&format!("    servers:\n      - {{ name: s1, address: \"{}\", state: maint }}", s1.addr()), ""),
    );
    let r = client::get(proxy.addr(), "/maint").await.expect("request");
    assert_eq!(r.status, 503);
    let line = proxy.wait_for_log(|l| l.contains("/maint")).await;
    assert!(line.contains(" be/<NOSRV> "), "{line}");
    assert_eq!(s1.traffic(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn custom_error_file_is_served_for_503() {
    let dir = tempfile::tempdir().expect("tempdir");
    let page = dir.path().join("503.http");
    std::fs::write(
        &page,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/html\r\nX-Custom-Page: yes\r\n\
         Content-Length: 9999\r\n\r\n<h1>Down for maintenance</h1>\n",
    )
    .expect("writing the error file");
    let dead_port = free_port();
    let proxy = ProxyProcess::start_with(
        1,
        config(
            &format!("    retries: 0\n    servers:\n      - {{ name: dead, address: \"127.0.0.1:{dead_port}\" }}"),
            &format!("  error_files: {{ 503: \"{}\" }}", page.display()),
        ),
    );
    let r = client::get(proxy.addr(), "/").await.expect("request");
    assert_eq!(r.status, 503);
    assert_eq!(r.header("x-custom-page"), Some("yes"));
    assert_eq!(r.header("content-type"), Some("text/html"));
    assert_eq!(r.text(), "<h1>Down for maintenance</h1>\n", "the error file's body, framed by the proxy");
    // The stale Content-Length of the file was not sent: the body's real length was.
    assert_eq!(r.header("content-length"), Some("30"));
}
