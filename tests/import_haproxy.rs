//! `lbctl import-haproxy` end to end, on the samples in etc/haproxy-import/ (an object-storage
//! API edge, a multi-site web edge terminating TLS, a TCP service): each is translated, the
//! translation checked with `lb-proxy -c`, then Debian's haproxy runs the original and lb runs
//! the translation (lb-tls too for TLS), one after the other on the same ports, and both get
//! the same requests: the same backends must answer, with the same statuses.

#[path = "import_haproxy/support.rs"]
mod support;

use std::net::SocketAddr;
use std::path::Path;

use lb_testkit::certs::TestCerts;
use lb_testkit::raw::RawResponse;
use lb_testkit::sclient::curl;
use lb_testkit::{free_port, ProxyProcess, TestServer, TlsProcess};
use support::{import, sample, send, send_until, wait_all_up, Haproxy};

/// What a client saw: the status, and the backend whose server answered (the test servers
/// are named after their backend: `objects1` belongs to `objects`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    status: u16,
    backend: Option<String>,
}

fn outcome(response: &RawResponse) -> Outcome {
    let backend = response.header("x-server").map(|s| s.trim_end_matches(|c: char| c.is_ascii_digit()).to_owned());
    Outcome { status: response.status, backend }
}

fn expect(status: u16, backend: Option<&str>) -> Outcome {
    Outcome { status, backend: backend.map(str::to_owned) }
}

const REQUEST_ID: &str = "0f5e7a1c-3b2d-4c8e-9f10-112233445566";

/// The API edge's requests, each with what the issue says must happen.
fn api_requests() -> Vec<(String, Outcome)> {
    let get = |target: &str, headers: &str| format!("GET {target} HTTP/1.1\nHost: s3.example.test\n{headers}\n");
    vec![
        (get("/photos/cat.jpg", ""), expect(200, Some("objects"))),
        (get("/photos/buckets", ""), expect(200, Some("buckets_api"))),
        (get("/photos/buckets/list?x=1", ""), expect(200, Some("buckets_api"))),
        // The regular expression wants a first segment.
        (get("/buckets", ""), expect(200, Some("objects"))),
        (
            get(
                "/photos/cat.jpg",
                "Authorization: AWS4-HMAC-SHA256 Credential=AKID/20261127/us-east-1/s3/aws4_request\n",
            ),
            expect(200, Some("buckets_api")),
        ),
        (get("/photos/cat.jpg", "Authorization: Bearer abc\n"), expect(200, Some("objects"))),
        (
            get("/photos/cat.jpg?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Expires=60", ""),
            expect(200, Some("buckets_api")),
        ),
        // Query parameter names are case-sensitive.
        (get("/photos/cat.jpg?x-amz-algorithm=AWS4-HMAC-SHA256", ""), expect(200, Some("objects"))),
        (
            "OPTIONS /photos/cat.jpg HTTP/1.1\nHost: s3.example.test\nOrigin: https://app.example.test\n\
             Access-Control-Request-Method: PUT\n\n"
                .to_owned(),
            expect(200, Some("buckets_api")),
        ),
        ("OPTIONS /photos/cat.jpg HTTP/1.1\nHost: s3.example.test\n\n".to_owned(), expect(200, Some("objects"))),
        (
            "POST /photos/cat.jpg HTTP/1.1\nHost: s3.example.test\nContent-Length: 5\nContent-Length: 6\n\nhello"
                .to_owned(),
            expect(400, None),
        ),
        (get("/photos/dog.jpg", &format!("X-Request-ID: {REQUEST_ID}\n")), expect(200, Some("objects"))),
    ]
}

const DUPLICATE_LENGTH: &str =
    "POST /photos/cat.jpg HTTP/1.1\nHost: s3.example.test\nContent-Length: 5\nContent-Length: 5\n\nhello";

/// The fields of a JSON log line the two must agree on (`server` and `bytes` may differ:
/// round robin, and what each counts).
fn log_fields(line: &str) -> Vec<(String, serde_json::Value)> {
    let value: serde_json::Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    ["client", "frontend", "backend", "status", "request_id", "request"]
        .iter()
        .map(|k| ((*k).to_owned(), value.get(k).cloned().unwrap_or_else(|| panic!("no `{k}` in {line}"))))
        .collect()
}

/// What one proxy did with the API edge's requests.
#[derive(Debug)]
struct ApiRun {
    outcomes: Vec<Outcome>,
    duplicate_length: Outcome,
    unavailable: RawResponse,
}

async fn api_run(addr: SocketAddr, socket: &Path, buckets: &TestServer) -> ApiRun {
    // Every server up (health checks) before anything is compared.
    wait_all_up(socket);
    let mut outcomes = Vec::new();
    for (request, _) in api_requests() {
        outcomes.push(outcome(&send(addr, &request).await));
    }
    let duplicate_length = outcome(&send(addr, DUPLICATE_LENGTH).await);
    buckets.stop();
    let unavailable = send_until(addr, "GET /a/buckets HTTP/1.1\nHost: s3.example.test\n\n", |r| r.status == 503).await;
    buckets.restart();
    ApiRun { outcomes, duplicate_length, unavailable }
}

#[tokio::test(flavor = "multi_thread")]
async fn the_api_edge_imports_and_chooses_as_haproxy_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    let objects = [TestServer::start("objects1"), TestServer::start("objects2")];
    let buckets = TestServer::start("buckets_api1");
    std::fs::write(
        dir.path().join("503.http"),
        "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nRetry-After: 60\r\n\
         Cache-Control: no-cache\r\n\r\n{\"error\":\"unavailable\",\"retry_after\":60}\n",
    )
    .expect("write 503.http");
    let port = free_port();
    let cfg = sample(
        "api-edge.cfg",
        dir.path(),
        &[
            ("DIR", dir.path().display().to_string()),
            ("PORT", port.to_string()),
            ("SERVER1", objects[0].addr().to_string()),
            ("SERVER2", objects[1].addr().to_string()),
            ("SERVER3", buckets.addr().to_string()),
        ],
    );
    let import = import(&cfg, &[]);
    assert_eq!(import.status, Some(0), "{}", import.stderr);
    assert_eq!(import.untranslated(), Vec::<String>::new());
    assert_eq!(
        import.notes(),
        ["13: stats socket: note: lb-proxy's runtime socket is mode 0600 for its user, at admin level: `mode`, `level`, `user`, `group` and `expose-fd` are not translated"]
    );
    let config = lb_config::Config::parse(&import.yaml, "translation").expect("the translation loads");
    let socket = dir.path().join("haproxy.sock");
    assert_eq!(config.global.supervision.runtime.socket.as_deref(), Some(socket.as_path()));
    assert_eq!(config.policy.conditions.len(), 5, "one named condition per acl");

    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let haproxy = Haproxy::start(&cfg, port);
    let theirs = api_run(addr, &socket, &buckets).await;
    let their_log = haproxy.log();
    drop(haproxy);
    let _ = std::fs::remove_file(&socket);

    let proxy = ProxyProcess::try_start(&import.yaml).unwrap_or_else(|e| panic!("{e}"));
    let ours = api_run(addr, &socket, &buckets).await;

    let expected: Vec<Outcome> = api_requests().into_iter().map(|(_, o)| o).collect();
    assert_eq!(theirs.outcomes, expected, "haproxy, on the original");
    assert_eq!(ours.outcomes, expected, "lb-proxy, on the translation");
    // Identical Content-Length headers: HAProxy folds them into one before its rules count
    // them, so the request goes through; lb-proxy counts the lines as sent and the translated
    // rule refuses it, as the frontend means (docs/operations.md, the importer's traps).
    // Different values are refused by both parsers themselves (the 400 above).
    assert_eq!(theirs.duplicate_length, expect(200, Some("objects")));
    assert_eq!(ours.duplicate_length, expect(400, None));
    for (who, page) in [("haproxy", &theirs.unavailable), ("lb-proxy", &ours.unavailable)] {
        assert_eq!(page.status, 503, "{who}");
        assert_eq!(page.header("retry-after"), Some("60"), "{who}: {page:?}");
        assert_eq!(page.header("content-type"), Some("application/json"), "{who}");
        assert_eq!(page.text(), "{\"error\":\"unavailable\",\"retry_after\":60}\n", "{who}");
    }
    // The access log: one JSON object per line, the request ID captured.
    let line = |log: &[String]| -> String {
        log.iter().find(|l| l.contains(REQUEST_ID)).cloned().unwrap_or_else(|| panic!("no line with the ID: {log:#?}"))
    };
    let ours_line = proxy.wait_for_log(|l| l.contains(REQUEST_ID)).await;
    let their_fields = log_fields(&line(&their_log));
    assert_eq!(log_fields(&ours_line), their_fields);
    let id = serde_json::json!(format!("{{{REQUEST_ID}}}"));
    assert!(their_fields.contains(&("request_id".to_owned(), id)), "{their_fields:?}");
    drop(proxy);
}

/// The web edge's requests: (TLS?, host, path) and what must happen.
fn web_requests() -> Vec<(bool, &'static str, &'static str, Outcome)> {
    vec![
        (true, "www.example.test", "/", expect(200, Some("www"))),
        (true, "shop.example.test", "/cart", expect(200, Some("shop"))),
        (true, "API.example.test", "/v1/users", expect(200, Some("api"))),
        (true, "shop.example.test", "/static/app.css", expect(200, Some("static"))),
        (true, "www.example.test", "/assets/logo.png", expect(200, Some("static"))),
        (true, "other.example.test", "/", expect(200, Some("www"))),
        (false, "www.example.test", "/", expect(301, None)),
        (false, "shop.example.test", "/cart?id=7", expect(301, None)),
        (false, "www.example.test", "/.well-known/acme-challenge/token", expect(200, Some("www"))),
    ]
}

/// One request through curl (TLS with SNI, the Host header without a port, as on port 443);
/// the outcome, the Location and Strict-Transport-Security headers.
fn web_get(
    tls: bool,
    host: &str,
    path: &str,
    ports: (u16, u16),
    ca: &Path,
) -> (Outcome, Option<String>, Option<String>) {
    let (scheme, port) = if tls { ("https", ports.1) } else { ("http", ports.0) };
    let url = format!("{scheme}://{}:{port}{path}", host.to_ascii_lowercase());
    let resolve = format!("{}:{port}:127.0.0.1", host.to_ascii_lowercase());
    let host_header = format!("Host: {host}");
    let ca = ca.display().to_string();
    let out = curl(&url, &["--resolve", &resolve, "-H", &host_header, "--cacert", &ca, "-D", "-", "-o", "/dev/null"]);
    assert_eq!(out.code, Some(0), "{url}: {}", out.stderr);
    let head = out.body.to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let header =
        |name: &str| head.lines().find_map(|l| l.strip_prefix(&format!("{name}: ")).map(|v| v.trim().to_owned()));
    let backend = header("x-server").map(|s| s.trim_end_matches(|c: char| c.is_ascii_digit()).to_owned());
    (Outcome { status, backend }, header("location"), header("strict-transport-security"))
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_edge_imports_as_the_whole_stack_with_lb_tls() {
    let dir = tempfile::tempdir().expect("tempdir");
    let certs = TestCerts::new();
    let cert =
        certs.server("sites", &["www.example.test", "shop.example.test", "api.example.test", "other.example.test"]);
    let servers: Vec<TestServer> =
        ["www1", "www2", "shop1", "api1", "static1"].iter().map(|n| TestServer::start(n)).collect();
    let (http, https, stats) = (free_port(), free_port(), free_port());
    std::fs::write(dir.path().join("sites.map"), "# host backend\nshop.example.test shop\napi.example.test api\n")
        .expect("write sites.map");
    let cfg = sample(
        "web-edge.cfg",
        dir.path(),
        &[
            ("DIR", dir.path().display().to_string()),
            ("HTTP", http.to_string()),
            ("HTTPS", https.to_string()),
            ("STATS", stats.to_string()),
            ("CERT", cert.display().to_string()),
            ("WWW1", servers[0].addr().to_string()),
            ("WWW2", servers[1].addr().to_string()),
            ("SHOP1", servers[2].addr().to_string()),
            ("API1", servers[3].addr().to_string()),
            ("STATIC1", servers[4].addr().to_string()),
        ],
    );
    let tls_yaml = dir.path().join("lb-tls.yaml");
    let tls_socket = dir.path().join("proxy-tls.sock");
    let tls_args = [
        "--tls-config",
        &tls_yaml.display().to_string(),
        "--tls-socket",
        &tls_socket.display().to_string(),
        "--tls-control-socket",
        "master.sock",
    ]
    .map(|s| s.to_owned());
    let import = import(&cfg, &tls_args.iter().map(String::as_str).collect::<Vec<_>>());
    // `option http-server-close` is the one line left out.
    assert_eq!(
        import.untranslated(),
        ["25: option http-server-close: not translated: lb-proxy keeps client connections alive; server connections follow `http-reuse`"]
    );
    assert_eq!(import.status, Some(1));
    let tls_text = std::fs::read_to_string(&tls_yaml).expect("lb-tls.yaml written");
    let config = lb_config::Config::parse(&import.yaml, "translation").expect("the translation loads");
    assert_eq!(config.global.stats.as_ref().map(|s| s.address.port()), Some(stats));
    assert!(config.policy.maps.contains_key("sites"), "{:?}", config.policy.maps);
    let sites = config.frontend("sites").expect("frontend sites");
    assert!(sites
        .binds
        .iter()
        .any(|b| b.accept_proxy && b.address.to_string() == format!("unix:{}", tls_socket.display())));

    let ports = (http, https);
    let ca = certs.ca();
    let socket = dir.path().join("haproxy.sock");
    let run = || {
        // Every server up (health checks) before anything is compared.
        wait_all_up(&socket);
        web_requests().into_iter().map(|(tls, host, path, _)| web_get(tls, host, path, ports, &ca)).collect::<Vec<_>>()
    };
    let haproxy = Haproxy::start(&cfg, http);
    let theirs = run();
    drop(haproxy);
    let _ = std::fs::remove_file(&socket);

    let proxy = ProxyProcess::try_start(&import.yaml).unwrap_or_else(|e| panic!("{e}"));
    let tls = TlsProcess::try_start(&tls_text, &[https]).unwrap_or_else(|e| panic!("{e}\n{tls_text}"));
    let ours = run();

    let expected: Vec<Outcome> = web_requests().into_iter().map(|(_, _, _, o)| o).collect();
    let outcomes =
        |run: &[(Outcome, Option<String>, Option<String>)]| run.iter().map(|r| r.0.clone()).collect::<Vec<_>>();
    assert_eq!(outcomes(&theirs), expected, "haproxy, on the original");
    assert_eq!(outcomes(&ours), expected, "lb-tls + lb-proxy, on the translation");
    for (i, (theirs, ours)) in theirs.iter().zip(&ours).enumerate() {
        assert_eq!(theirs.1, ours.1, "Location of request {i}");
        assert_eq!(theirs.2, ours.2, "Strict-Transport-Security of request {i}");
    }
    assert_eq!(ours[7].1.as_deref(), Some("https://shop.example.test/cart?id=7"));
    assert_eq!(ours[0].2.as_deref(), Some("max-age=31536000"));
    // The stats page moved with it.
    let page = curl(&format!("http://127.0.0.1:{stats}/;csv"), &[]);
    assert!(page.body.contains("sites,FRONTEND"), "{}", page.body);
    drop(tls);
    drop(proxy);
}

#[tokio::test(flavor = "multi_thread")]
async fn the_tcp_service_imports_and_connects_as_haproxy_does() {
    let dir = tempfile::tempdir().expect("tempdir");
    // HTTP servers behind a TCP proxy: the bytes pass untouched, and each answer says which
    // server it came from.
    let servers: Vec<TestServer> = ["db1", "db2", "cache1", "cache2"].iter().map(|n| TestServer::start(n)).collect();
    let (db, cache) = (free_port(), free_port());
    let cfg = sample(
        "tcp-service.cfg",
        dir.path(),
        &[
            ("DIR", dir.path().display().to_string()),
            ("DB", db.to_string()),
            ("CACHE", cache.to_string()),
            ("DB1", servers[0].addr().to_string()),
            ("DB2", servers[1].addr().to_string()),
            ("CACHE1", servers[2].addr().to_string()),
            ("CACHE2", servers[3].addr().to_string()),
        ],
    );
    let import = import(&cfg, &[]);
    assert_eq!(
        import.untranslated(),
        ["34: server: not translated: `db2` is a backup server: lb-proxy has no backup servers (a plain server would take traffic at once); left out"]
    );
    let config = lb_config::Config::parse(&import.yaml, "translation").expect("the translation loads");
    let backend = config.backend("db_primary").expect("db_primary");
    assert_eq!(
        (backend.mode, backend.balance, backend.retries, backend.redispatch),
        (lb_config::Mode::Tcp, lb_config::Balance::LeastConn, 2, true)
    );
    assert_eq!(config.frontend("db").and_then(|f| f.max_connections), Some(500));
    assert_eq!(config.frontend("cache").and_then(|f| f.default_backend.as_deref()), Some("cache"));

    /// Four connections to each service; the server that answered each, in order.
    async fn run(db: u16, cache: u16, socket: &Path) -> Vec<String> {
        wait_all_up(socket);
        let mut answered = Vec::new();
        for port in [db, cache] {
            for i in 0..4 {
                let addr = SocketAddr::from(([127, 0, 0, 1], port));
                let response = send(addr, &format!("GET /{i} HTTP/1.1\nHost: db\nConnection: close\n\n")).await;
                answered.push(response.header("x-server").unwrap_or("none").to_owned());
            }
        }
        answered
    }
    let socket = dir.path().join("haproxy.sock");
    let haproxy = Haproxy::start(&cfg, db);
    let theirs = run(db, cache, &socket).await;
    drop(haproxy);
    let _ = std::fs::remove_file(&socket);
    let proxy = ProxyProcess::try_start(&import.yaml).unwrap_or_else(|e| panic!("{e}"));
    let ours = run(db, cache, &socket).await;
    drop(proxy);
    // The primary takes every database connection (the standby none); the cache servers take
    // turns, whichever starts.
    for (who, answered) in [("haproxy", &theirs), ("lb-proxy", &ours)] {
        assert_eq!(answered[..4], ["db1"; 4], "{who}");
        let mut cache = answered[4..].to_vec();
        assert!(cache.windows(2).all(|w| w[0] != w[1]), "{who}: {cache:?}");
        cache.sort();
        assert_eq!(cache, ["cache1", "cache1", "cache2", "cache2"], "{who}");
    }
}
