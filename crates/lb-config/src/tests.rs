//! Unit tests, one module per concern under `tests/`.

mod canary;
mod diagnostics;
mod example;
mod pages;
mod policy;
mod references;
mod robustness;
mod roundtrip;
mod tables;
mod units;
mod valid;

use crate::{Config, Error};

/// Parses `text` (named `proxy.yaml`), failing the test with every diagnostic if it is invalid.
fn parse_ok(text: &str) -> Config {
    match Config::parse(text, "proxy.yaml") {
        Ok(config) => config,
        Err(e) => panic!("expected a valid configuration, got:\n{e}"),
    }
}

/// The diagnostics `text` produces, as displayed; fails the test if it is valid.
fn errors(text: &str) -> Vec<String> {
    match Config::parse(text, "proxy.yaml") {
        Ok(_) => panic!("expected diagnostics for:\n{text}"),
        Err(Error::Invalid { diagnostics }) => diagnostics.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("expected Error::Invalid, got {e:?}"),
    }
}

/// The one diagnostic `text` produces.
fn error(text: &str) -> String {
    let mut all = errors(text);
    assert_eq!(all.len(), 1, "expected exactly one diagnostic, got {all:#?}");
    all.remove(0)
}

/// A valid frontend + backend, for tests that only vary one thing.
const MINIMAL: &str = "\
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: app
backends:
  - name: app
    servers:
      - { name: a1, address: 10.0.0.1:80 }
";

/// Every key of the schema set, most to something other than its default. Relative paths are
/// resolved against the directory [`rich_dir`] writes it into.
const RICH: &str = r#"
global:
  max_connections: 10000
  worker_threads: 2
  user: nobody
  group: nogroup
  control_socket: run/master.sock
  runtime_socket: /var/run/lb/lb-proxy-runtime.sock
  runtime_address: 127.0.0.1:9999
  stats: { address: 127.0.0.1:8404, refresh: 3s }
  log:
    target: udp:[::1]:1514
    format: json
    tag: lb
    facility: local3
    hostname: lb1
defaults:
  mode: http
  balance: leastconn
  retries: 4
  redispatch: true
  http_reuse: never
  max_header_size: 16k
  forward_for: true
  timeouts:
    connect: 4s
    client: 30s
    server: 31s
    http_request: 10s
    http_keep_alive: 9s
    check: 1500ms
  error_files:
    503: errors/503.http
    502: errors/502.http
frontends:
  - name: https_in
    bind:
      - 127.0.0.1:8443
      - "[::1]:8443"
      - unix:run/in.sock
      - { address: 127.0.0.1:8444, accept_proxy: false }
    accept_proxy: true
    tls: true
    default_backend: secure_api
    max_connections: 2000
    max_header_size: 32k
    forward_for: false
    timeouts: { client: 60s }
    error_files: { 503: errors/503-https.http }
    rules:
      - { path_prefix: /admin, backend: admin_api }
      - { host: api.example.com, backend: secure_api }
      - { host: x.example.com, path_prefix: /v2, backend: v2 }
  - name: tcp_in
    mode: tcp
    bind: ["*:9000"]
    default_backend: tcp_pool
backends:
  - name: secure_api
    balance: roundrobin
    retries: 2
    redispatch: false
    http_reuse: safe
    timeouts: { server: 60s, tunnel: 2h }
    health_check:
      type: http
      method: HEAD
      path: /health
      host: api.example.com
      expect_status: 204
      interval: 5s
      rise: 3
      fall: 4
    servers:
      - name: api1
        address: 10.0.0.5:80
        weight: 10
        check: true
        slowstart: 30s
        max_connections: 100
        state: ready
      - { name: api2, address: "[2001:db8::2]:8080", state: drain }
      - { name: api3, address: 10.0.0.7:80, weight: 0, state: maint }
  - name: admin_api
    servers: []
  - name: v2
  - name: tcp_pool
    mode: tcp
    health_check: { type: tcp, interval: 250ms }
    servers:
      - { name: db1, address: 10.0.1.1:5432, check: true }
"#;

/// A temporary directory holding [`RICH`] as `proxy.yaml` and the errorfiles it names.
fn rich_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temporary directory");
    let errors = dir.path().join("errors");
    std::fs::create_dir(&errors).expect("errors directory");
    let page = |status: &str, body: &str| {
        format!("HTTP/1.0 {status}\r\nContent-Type: text/html\r\nCache-Control: no-cache\r\n\r\n{body}")
    };
    let files = [
        ("503.http", page("503 Service Unavailable", "<h1>503 default</h1>\n")),
        ("502.http", page("502 Bad Gateway", "<h1>502</h1>\n")),
        ("503-https.http", page("503 Service Unavailable", "<h1>503 https</h1>\n")),
    ];
    for (name, text) in files {
        std::fs::write(errors.join(name), text).expect("write errorfile");
    }
    std::fs::write(dir.path().join("proxy.yaml"), RICH).expect("write config");
    dir
}

/// Loads [`RICH`] from a fresh [`rich_dir`] (kept alive alongside).
fn load_rich() -> (tempfile::TempDir, Config) {
    let dir = rich_dir();
    match Config::load(&dir.path().join("proxy.yaml")) {
        Ok(config) => (dir, config),
        Err(e) => panic!("the rich configuration does not load:\n{e}"),
    }
}
