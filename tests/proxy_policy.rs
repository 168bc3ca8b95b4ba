//! The edge-policy language end to end, with curl against lb-proxy and real servers: the
//! object-storage edge (routing by regex, header prefix, query parameter and CORS preflight; a
//! duplicate Content-Length refused; a request ID captured; a JSON log; a 503 page with
//! Retry-After), and the policies every public API edge has (HTTP to HTTPS redirect, HSTS and
//! other response headers, internal headers removed, a request ID generated and passed on,
//! clients denied by address from a list file changed at run time, a fixed answer for a path).

use std::io::Write as _;
use std::path::Path;

use lb_testkit::sclient::curl;
use lb_testkit::{ProxyProcess, TestServer};

/// `curl -i`: the status, the headers (names lowercase) and the body.
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }

    /// The echo server's JSON (the request as the server got it).
    fn echo(&self) -> serde_json::Value {
        serde_json::from_str(&self.body).unwrap_or_else(|e| panic!("not the echo's JSON ({e}): {}", self.body))
    }
}

fn fetch(url: &str, args: &[&str]) -> Answer {
    let mut all = vec!["-i"];
    all.extend_from_slice(args);
    let out = curl(url, &all);
    assert_eq!(out.code, Some(0), "curl {args:?} {url}: {}", out.stderr);
    let text = out.body.replace("\r\n", "\n");
    let (head, body) = text.split_once("\n\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().and_then(|l| l.split_whitespace().nth(1)).and_then(|s| s.parse().ok()).unwrap_or(0);
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    Answer { status, headers, body: body.to_owned() }
}

fn echo_header(echo: &serde_json::Value, name: &str) -> Vec<String> {
    echo["headers"]
        .as_array()
        .expect("headers")
        .iter()
        .filter(|p| p[0].as_str().is_some_and(|n| n.eq_ignore_ascii_case(name)))
        .filter_map(|p| p[1].as_str().map(str::to_owned))
        .collect()
}

/// The object-storage edge of the issue, as lb-proxy's YAML.
fn object_storage(objects: &TestServer, buckets: &TestServer, dir: &Path) -> impl Fn(&[u16]) -> String {
    let page = dir.join("503.http");
    std::fs::write(
        &page,
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 60\r\n\r\n\
         {\"error\":\"unavailable\",\"retry_after\":60}\n",
    )
    .expect("error file");
    let (objects, buckets, page) = (objects.addr(), buckets.addr(), page.display().to_string());
    move |ports: &[u16]| {
        format!(
            r#"global:
  # One JSON object per line: no syslog header in front.
  log: {{ target: stdout, header: raw }}
conditions:
  buckets_path: {{ path: {{ regex: "^/[^/]+/buckets" }} }}
  sigv4: {{ header: {{ name: Authorization, prefix: "AWS4-HMAC-SHA256" }} }}
  presigned: {{ query: {{ name: X-Amz-Algorithm, exists: true }} }}
  preflight:
    all:
      - {{ method: OPTIONS }}
      - {{ header: {{ name: access-control-request-method, exists: true }} }}
frontends:
  - name: s3
    bind: ["127.0.0.1:{fe}"]
    default_backend: objects_api
    error_files: {{ 503: {page} }}
    http_request:
      - deny: {{ status: 400 }}
        if: {{ header: {{ name: content-length, count: {{ gt: 1 }} }} }}
      - capture: {{ header: x-request-id, length: 36 }}
    rules:
      - backend: buckets_api
        if: {{ any: [buckets_path, sigv4, presigned, preflight] }}
      - {{ path_prefix: /maintenance, backend: empty }}
    log_format:
      json: {{ client: "%ci", frontend: "%f", backend: "%b", status: "%ST", request: "%r", request_id: "%hr", ms: "%Ta" }}
backends:
  - name: objects_api
    servers: [{{ name: o1, address: "{objects}" }}]
  - name: buckets_api
    servers: [{{ name: b1, address: "{buckets}" }}]
  - name: empty
    servers: []
"#,
            fe = ports[0]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_object_storage_edge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (objects, buckets) = (TestServer::start("objects"), TestServer::start("buckets"));
    let proxy = ProxyProcess::start_with(1, object_storage(&objects, &buckets, dir.path()));
    let base = format!("http://{}", proxy.addr());
    let server_of =
        |path: &str, args: &[&str]| fetch(&format!("{base}{path}"), args).echo()["server"].as_str().map(str::to_owned);
    // /echo is the test server's echo: each request says which server answered it.
    assert_eq!(server_of("/echo", &[]).as_deref(), Some("objects"));
    assert_eq!(server_of("/echo?X-Amz-Algorithm=AWS4-HMAC-SHA256", &[]).as_deref(), Some("buckets"));
    assert_eq!(server_of("/echo?x=X-Amz-Algorithm", &[]).as_deref(), Some("objects"));
    assert_eq!(
        server_of("/echo", &["-H", "Authorization: AWS4-HMAC-SHA256 Credential=k/x"]).as_deref(),
        Some("buckets")
    );
    assert_eq!(server_of("/echo", &["-H", "Authorization: Basic eDp5"]).as_deref(), Some("objects"));
    assert_eq!(
        server_of("/echo", &["-X", "OPTIONS", "-H", "Access-Control-Request-Method: PUT"]).as_deref(),
        Some("buckets")
    );
    assert_eq!(server_of("/echo", &["-X", "OPTIONS"]).as_deref(), Some("objects"));
    // The path regex: `/<account>/buckets…` (the test server answers any path with its name).
    let r = fetch(&format!("{base}/acct/buckets/b1"), &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "buckets"));
    let r = fetch(&format!("{base}/acct/objects/o1"), &[]);
    assert_eq!((r.status, r.body.as_str()), (200, "objects"));

    // Two Content-Length headers: 400 before anything else, and no server sees it.
    let (o, b) = (objects.hits(), buckets.hits());
    let r = fetch(
        &format!("{base}/acct/buckets/b1"),
        &["-X", "PUT", "-H", "Content-Length: 3", "-H", "Content-Length: 3", "--data-binary", "abc"],
    );
    assert_eq!(r.status, 400);
    assert_eq!((objects.hits(), buckets.hits()), (o, b), "the refused request reached no server");

    // The 503 page: Retry-After and a JSON body.
    let r = fetch(&format!("{base}/maintenance"), &[]);
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("60"));
    let body: serde_json::Value = serde_json::from_str(&r.body).expect("a JSON body");
    assert_eq!(body["retry_after"], 60);

    // The request ID captured (cut at 36 characters) into the JSON log line.
    let id = "0123456789abcdef0123456789abcdef0123-and-more";
    fetch(&format!("{base}/echo?trace"), &["-H", &format!("X-Request-ID: {id}")]);
    let line = proxy.wait_for_log(|l| l.contains("?trace")).await;
    let v: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("a JSON line ({e}): {line}"));
    assert_eq!(v["request_id"], format!("{{{}}}", &id[..36]));
    assert_eq!((&v["status"], &v["backend"], &v["client"]), (&200.into(), &"objects_api".into(), &"127.0.0.1".into()));
    assert!(v["ms"].is_u64(), "{line}");
    let denied = proxy.wait_for_log(|l| l.contains("\"status\":400")).await;
    assert!(denied.contains("\"backend\":\"s3\""), "a denied request has no backend: {denied}");

    // `dreq` counts the denial as HAProxy counts it.
    let stat = proxy.runtime("show stat");
    let row = stat.lines().find(|l| l.starts_with("s3,FRONTEND,")).expect("frontend row");
    let header: Vec<&str> = stat.lines().next().expect("header").trim_start_matches("# ").split(',').collect();
    let cells: Vec<&str> = row.split(',').collect();
    let dreq = header.iter().position(|c| *c == "dreq").expect("dreq column");
    assert_eq!(cells[dreq], "1", "{row}");
}

/// The policies of a public API edge.
fn api_edge(server: &TestServer, blocked: &Path) -> impl Fn(&[u16]) -> String {
    let (server, blocked) = (server.addr(), blocked.display().to_string());
    move |ports: &[u16]| {
        format!(
            r#"global:
  log: {{ target: stdout, format: haproxy }}
lists:
  blocked: {{ type: ip, file: {blocked} }}
frontends:
  - name: public_http
    bind: ["127.0.0.1:{http}"]
    default_backend: api
    http_request:
      - return: {{ status: 200, content_type: application/json, body: '{{"status":"ok"}}' }}
        if: {{ path: /healthz }}
      - redirect: {{ scheme: https, code: 301 }}
  - name: public
    bind: ["127.0.0.1:{api}"]
    default_backend: api
    unique_id: {{ header: X-Request-ID }}
    http_request:
      - deny: {{ status: 403, content_type: application/json, body: '{{"error":"forbidden"}}' }}
        if: {{ src: {{ list: blocked }} }}
      - return: {{ status: 503, content_type: text/html, body: "<h1>Down for maintenance</h1>", headers: {{ Retry-After: "120" }} }}
        if: {{ path: {{ prefix: /maintenance }} }}
      - set_header: {{ name: X-Client-IP, value: "%ci" }}
      - capture: {{ header: user-agent, length: 16 }}
    http_response:
      - set_header: {{ name: Strict-Transport-Security, value: "max-age=31536000; includeSubDomains" }}
      - del_header: X-Server
      - del_header: X-Powered-By
      - set_header: {{ name: X-Request-ID, value: "%ID" }}
backends:
  - name: api
    servers: [{{ name: a1, address: "{server}" }}]
"#,
            http = ports[0],
            api = ports[1]
        )
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_public_api_edge() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocked = dir.path().join("blocked.lst");
    std::fs::write(&blocked, "# abusive clients\n192.0.2.0/24\n").expect("list");
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(2, api_edge(&server, &blocked));
    let (http, api) =
        (format!("http://127.0.0.1:{}", proxy.ports()[0]), format!("http://127.0.0.1:{}", proxy.ports()[1]));

    // Plain HTTP goes to HTTPS, path and query kept; the health endpoint is answered here.
    let r = fetch(&format!("{http}/v1/items?page=2"), &["-H", "Host: api.example.com"]);
    assert_eq!(r.status, 301);
    assert_eq!(r.header("location"), Some("https://api.example.com/v1/items?page=2"));
    let r = fetch(&format!("{http}/healthz"), &[]);
    assert_eq!((r.status, r.body.as_str()), (200, r#"{"status":"ok"}"#));
    assert_eq!(r.header("content-type"), Some("application/json"));
    assert_eq!(server.hits(), 0, "neither reached the server");

    // Response headers added and removed; a request ID made, passed on, and returned.
    let r = fetch(&format!("{api}/echo"), &[]);
    assert_eq!(r.status, 200);
    assert_eq!(r.header("strict-transport-security"), Some("max-age=31536000; includeSubDomains"));
    assert_eq!(r.header("x-server"), None, "the internal header is removed");
    let echo = r.echo();
    let ids = echo_header(&echo, "x-request-id");
    assert_eq!(ids.len(), 1, "{echo}");
    assert_eq!(ids[0].len(), 36, "a UUID: {}", ids[0]);
    assert_eq!(r.header("x-request-id"), Some(ids[0].as_str()));
    assert_eq!(echo_header(&echo, "x-client-ip"), ["127.0.0.1"]);
    // A client's own ID is kept.
    let r = fetch(&format!("{api}/echo"), &["-H", "X-Request-ID: client-chosen-1"]);
    assert_eq!(echo_header(&r.echo(), "x-request-id"), ["client-chosen-1"]);

    // A fixed answer with its own header.
    let r = fetch(&format!("{api}/maintenance/x"), &[]);
    assert_eq!((r.status, r.header("retry-after")), (503, Some("120")));

    // 127.0.0.1 is not in the list yet; added at run time, it is refused at once.
    assert_eq!(fetch(&format!("{api}/echo"), &[]).status, 200);
    assert_eq!(proxy.runtime("add acl blocked 127.0.0.0/8").trim(), "");
    let r = fetch(&format!("{api}/echo"), &[]);
    assert_eq!((r.status, r.body.as_str()), (403, r#"{"error":"forbidden"}"#));
    // HAProxy's wording for a bad entry and an unknown list; nothing changed by either.
    assert!(proxy.runtime("add acl blocked 300.1.1.1").contains("not an address"), "bad entry refused");
    assert!(proxy.runtime("add acl nosuch 10.0.0.1").contains("Unknown ACL identifier"));
    let shown = proxy.runtime(&format!("show acl {}", blocked.display()));
    assert_eq!(shown.trim_end().lines().collect::<Vec<_>>(), ["#0 192.0.2.0/24", "#1 127.0.0.0/8"], "{shown}");
    // The file is written back, so a reload keeps the change (HAProxy loses it).
    let text = std::fs::read_to_string(&blocked).expect("list file");
    assert!(text.lines().any(|l| l == "127.0.0.0/8"), "{text}");
    proxy.reload().await.expect("reload");
    assert_eq!(fetch(&format!("{api}/echo"), &[]).status, 403, "the new worker read the changed file");
    assert_eq!(proxy.runtime("del acl #0 127.0.0.0/8").trim(), "");
    assert_eq!(fetch(&format!("{api}/echo"), &["-A", "curl-policy-test/1.0"]).status, 200);

    // The capture block in the httplog line, as halog reads it.
    let line = proxy.wait_for_log(|l| l.contains("{curl-policy-test")).await;
    assert!(line.contains(" {curl-policy-test} \"GET /echo HTTP/1.1\""), "{line}");
    assert_eq!(lb_testkit::log::halog(&["-hdr", "1:1"], std::slice::from_ref(&line)).trim(), "curl-policy-test");
    // And as haproxy-log-analysis reads it (PyPI; scripts/install-deps test installs it).
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools/pyenv/bin/python");
    let script = "import sys\nfrom haproxy.line import parse_line\nl = parse_line(sys.stdin.read().strip())\n\
                  print(l.is_valid, l.captured_request_headers, l.http_request_path, l.status_code)";
    let mut child = std::process::Command::new(&python)
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{} (scripts/install-deps test installs it): {e}", python.display()));
    child.stdin.take().expect("stdin").write_all(line.as_bytes()).expect("to python");
    let parsed = String::from_utf8_lossy(&child.wait_with_output().expect("python").stdout).into_owned();
    assert_eq!(parsed.trim(), "True curl-policy-test /echo 200");

    // Every rule's hits.
    let rules = proxy.runtime("show rules public");
    assert!(rules.lines().any(|l| l.starts_with("public http_request 0 deny ")), "{rules}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_list_file_fails_the_reload_and_the_old_worker_serves() {
    let dir = tempfile::tempdir().expect("tempdir");
    let blocked = dir.path().join("blocked.lst");
    std::fs::write(&blocked, "192.0.2.0/24\n").expect("list");
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(2, api_edge(&server, &blocked));
    let api = format!("http://127.0.0.1:{}", proxy.ports()[1]);
    assert_eq!(fetch(&format!("{api}/echo"), &[]).status, 200);
    std::fs::write(&blocked, "192.0.2.0/24\n198.51.100.0/33\n").expect("list");
    let refused = proxy.reload().await.expect_err("a bad list entry fails the reload");
    let said = format!("{refused:?}");
    assert!(said.contains(&format!("{}:2:1", blocked.display())) && said.contains("0 to 32"), "{said}");
    assert_eq!(fetch(&format!("{api}/echo"), &[]).status, 200, "the old worker still serves");
}

/// Every fetch, matcher and action not shown above, each against a real server, with a map
/// changed at run time moving requests between backends at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_fetch_matcher_and_action() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (a, b) = (TestServer::start("a"), TestServer::start("b"));
    let map = dir.path().join("tenants.map");
    std::fs::write(&map, "acme a\nglobex b\n").expect("map");
    let (a_addr, b_addr, map_path) = (a.addr(), b.addr(), map.display().to_string());
    let proxy = ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  log: {{ target: stdout, format: haproxy }}
lists:
  legacy: {{ type: prefix, values: [/old/, /older/] }}
  agents: {{ type: string, values: [Scanner, BadBot], ignore_case: true }}
maps:
  tenants: {{ file: {map_path} }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{p}"]
    default_backend: a
    http_request:
      - allow: true
        if: {{ cookie: {{ name: role, equals: admin }} }}
      - deny: {{ status: 403, body: "agent" }}
        if: {{ header: {{ name: user-agent, list: agents }} }}
      - deny: {{ status: 418, body: "teapot" }}
        if: {{ uri: {{ contains: "brew=1" }} }}
      - deny: {{ status: 405, body: "method" }}
        unless: {{ method: {{ in: [GET, HEAD, POST] }} }}
      - deny: {{ status: 400, body: "json only" }}
        if: {{ all: [{{ method: POST }}, {{ not: {{ header: {{ name: content-type, suffix: /JSON, ignore_case: true }} }} }}] }}
      - deny: {{ status: 429, body: "small ports" }}
        if: {{ src_port: {{ lt: 1024 }} }}
      - set_path: "/echo"
        if: {{ path: {{ list: legacy }} }}
      - add_header: {{ name: X-Fe, value: "%f" }}
        if: {{ frontend: fe }}
      - add_header: {{ name: X-Fe, value: "again" }}
    http_response:
      - capture: {{ header: x-server, length: 8 }}
      - add_header: {{ name: X-Seen-By, value: "lb %ST" }}
        if: {{ response_header: {{ name: x-server, exists: true }} }}
    rules:
      - backend: {{ map: tenants, key: {{ header: X-Tenant }} }}
backends:
  - name: a
    servers: [{{ name: a1, address: "{a_addr}" }}]
  - name: b
    servers: [{{ name: b1, address: "{b_addr}" }}]
"#,
            p = ports[0]
        )
    });
    let base = format!("http://{}", proxy.addr());
    let status = |path: &str, args: &[&str]| fetch(&format!("{base}{path}"), args);
    // Cookie + allow: the admin skips every deny that follows.
    assert_eq!(status("/x?brew=1", &["-A", "scanner", "-b", "role=admin"]).status, 200);
    // String list, ignoring case.
    assert_eq!(status("/x", &["-A", "SCANNER"]).body, "agent");
    // uri contains.
    assert_eq!(status("/x?brew=1", &[]).status, 418);
    // unless + in.
    assert_eq!(status("/x", &["-X", "DELETE"]).status, 405);
    // all + not + suffix (ignore_case).
    assert_eq!(status("/x", &["-X", "POST", "-d", "a=1"]).status, 400);
    assert_eq!(status("/echo", &["-X", "POST", "-H", "Content-Type: application/json", "-d", "{}"]).status, 200);
    // Prefix list + set_path: /old/... is served as /echo (the echo answers with JSON).
    let r = status("/old/thing?k=v", &[]);
    let echo = r.echo();
    assert_eq!((echo["path"].as_str(), echo["query"].as_str()), (Some("/echo"), Some("k=v")));
    // frontend fetch + add_header twice (both kept, in order); response_header + status template.
    assert_eq!(echo_header(&echo, "x-fe"), ["fe", "again"]);
    assert_eq!(r.header("x-seen-by"), Some("lb 200"));
    // The map routes by a header; a key not in it falls to the default backend.
    let server = |tenant: &str| {
        status("/echo", &["-H", &format!("X-Tenant: {tenant}")]).echo()["server"].as_str().map(str::to_owned)
    };
    assert_eq!(server("globex").as_deref(), Some("b"));
    assert_eq!(server("initech").as_deref(), Some("a"));
    // Changed at run time: at once, and written back to its file.
    assert_eq!(proxy.runtime(&format!("set map {} globex a", map.display())).trim(), "");
    assert_eq!(proxy.runtime("add map tenants initech b").trim(), "");
    assert_eq!(server("globex").as_deref(), Some("a"));
    assert_eq!(server("initech").as_deref(), Some("b"));
    let text = std::fs::read_to_string(&map).expect("map file");
    assert!(text.contains("globex a\n") && text.contains("initech b\n"), "{text}");
    assert!(proxy.runtime("del map tenants nosuch").contains("Key not found."));
    // The response capture block in the httplog line (the request block is absent: no request
    // capture on this frontend).
    let line = proxy.wait_for_log(|l| l.contains("X-Tenant") || l.contains("/echo HTTP")).await;
    assert!(line.contains(" {a} \"") || line.contains(" {b} \""), "{line}");
}
