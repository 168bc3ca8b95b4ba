//! The policy compiled from YAML and run on request heads built in the test.

use std::net::SocketAddr;

use super::*;
use crate::facts::ConnFacts;

const CONFIG: &str = r#"
conditions:
  buckets_path: { path: { regex: "^/[^/]+/buckets" } }
  sigv4: { header: { name: Authorization, prefix: "AWS4-HMAC-SHA256" } }
  presigned: { query: { name: X-Amz-Algorithm, exists: true } }
  preflight: { all: [{ method: OPTIONS }, { header: { name: access-control-request-method, exists: true } }] }
lists:
  internal: { type: ip, values: [10.0.0.0/8] }
  agents: { type: prefix, values: [curl/, Wget], ignore_case: true }
maps:
  hosts: { entries: { a.example.com: objects, b.example.com: buckets } }
frontends:
  - name: s3
    bind: [127.0.0.1:8080]
    default_backend: objects
    http_request:
      - deny: { status: 400 }
        if: { header: { name: content-length, count: { gt: 1 } } }
      - capture: { header: x-request-id, length: 8 }
      - deny: { status: 403 }
        if: { header: { name: user-agent, list: agents } }
      - redirect: { scheme: https, code: 301 }
        if: { path: { prefix: /old } }
      - set_header: { name: X-Client, value: "%ci %[req.hdr(host)]" }
      - del_header: X-Internal
      - set_path: "/v2%[path]"
        if: { all: [{ src: { list: internal } }, { path: { prefix: /rewrite } }] }
    http_response:
      - del_header: Server
      - set_header: { name: X-Status-Class, value: "server error" }
        if: { status: { ge: 500 } }
    rules:
      - backend: buckets
        if: { any: [buckets_path, sigv4, presigned, preflight] }
      - backend: { map: hosts, key: host }
backends:
  - name: objects
    servers: [{ name: o1, address: 127.0.0.1:1 }]
  - name: buckets
    servers: [{ name: b1, address: 127.0.0.1:2 }]
"#;

fn setup() -> (FrontendPolicy, Patterns) {
    compiled(CONFIG)
}

/// The first frontend's policy of configuration `text`, and its lists and maps.
fn compiled(text: &str) -> (FrontendPolicy, Patterns) {
    let config = lb_config::Config::parse(text, "policy.yaml").expect("valid");
    let patterns = Patterns::new(&config.policy);
    let backends = Backends::new(&config);
    let policy = FrontendPolicy::new(
        &config.frontends[0],
        &config.policy,
        &patterns,
        &backends,
        &crate::tables::Tables::default(),
    )
    .expect("compiles");
    (policy, patterns)
}

fn request(method: &str, uri: &str, headers: &[(&str, &str)]) -> http::request::Parts {
    let mut b = http::Request::builder().method(method).uri(uri);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(()).expect("request").into_parts().0
}

fn facts(client: &str) -> ConnFacts {
    ConnFacts::from_socket(Some(client.parse::<SocketAddr>().expect("addr")))
}

fn routed(p: &FrontendPolicy, parts: &http::request::Parts) -> String {
    let f = facts("192.0.2.1:5000");
    let s = Subject { req: Some(RequestView::of(parts)), facts: &f, frontend: "s3", response: None, tracked: None };
    p.route(&s).map(|b| b.name().to_owned()).unwrap_or_default()
}

#[test]
fn the_object_storage_routing() {
    let (p, _) = setup();
    let host = [("host", "x.example.com")];
    assert_eq!(routed(&p, &request("GET", "/acct/buckets/1", &host)), "buckets");
    assert_eq!(routed(&p, &request("GET", "/acct/objects/1", &host)), "objects");
    assert_eq!(routed(&p, &request("GET", "/o", &[("authorization", "AWS4-HMAC-SHA256 Credential=x")])), "buckets");
    assert_eq!(routed(&p, &request("GET", "/o", &[("authorization", "Basic eA==")])), "objects");
    assert_eq!(routed(&p, &request("GET", "/o?X-Amz-Algorithm=AWS4", &host)), "buckets");
    assert_eq!(routed(&p, &request("GET", "/o?x=X-Amz-Algorithm", &host)), "objects");
    assert_eq!(routed(&p, &request("OPTIONS", "/o", &[("access-control-request-method", "PUT")])), "buckets");
    assert_eq!(routed(&p, &request("OPTIONS", "/o", &host)), "objects");
    // The map: b.example.com names buckets; a key not in it falls to the default backend.
    assert_eq!(routed(&p, &request("GET", "/o", &[("host", "b.example.com:8080")])), "buckets");
    assert_eq!(routed(&p, &request("GET", "/o", &[("host", "c.example.com")])), "objects");
}

fn run(p: &FrontendPolicy, parts: &mut http::request::Parts, client: &str) -> (Option<String>, Captured) {
    let f = facts(client);
    let mut captured = Captured::default();
    let outcome =
        p.on_request(parts, &f, "s3", None, &mut captured, &mut crate::tables::Tracked::default()).map(|f| match f {
            Final::Deny(r) => format!("deny {}", r.status),
            Final::Return(r) => format!("return {}", r.status),
            Final::Redirect { code, location } => format!("redirect {code} {location}"),
            Final::Tarpit(t) => format!("tarpit {}", t.reply.status),
            Final::LimitReq { retry_after_ms } => format!("limit_req {retry_after_ms}"),
        });
    (outcome, captured)
}

#[test]
fn request_actions_in_order() {
    let (p, _) = setup();
    let mut two_lengths = request("POST", "/x", &[("content-length", "1"), ("content-length", "2")]);
    assert_eq!(run(&p, &mut two_lengths, "192.0.2.1:1").0.as_deref(), Some("deny 400"));
    let mut curl = request("GET", "/x", &[("user-agent", "CURL/8.0"), ("x-request-id", "0123456789abcdef")]);
    let (outcome, captured) = run(&p, &mut curl, "192.0.2.1:1");
    assert_eq!(outcome.as_deref(), Some("deny 403"));
    assert_eq!(captured.request, [Some("01234567".to_owned())]);
    let mut old = request("GET", "/old/p?q=1", &[("host", "api.example.com:80")]);
    assert_eq!(run(&p, &mut old, "192.0.2.1:1").0.as_deref(), Some("redirect 301 https://api.example.com/old/p?q=1"));
    let mut plain = request("GET", "/rewrite/a?k=v", &[("host", "h"), ("x-internal", "secret")]);
    assert_eq!(run(&p, &mut plain, "10.1.2.3:4000").0, None);
    assert_eq!(plain.headers["x-client"], "10.1.2.3 h");
    assert!(!plain.headers.contains_key("x-internal"));
    assert_eq!(plain.uri.to_string(), "/v2/rewrite/a?k=v");
    // Outside the internal list the path stays.
    let mut outside = request("GET", "/rewrite/a", &[("host", "h")]);
    run(&p, &mut outside, "192.0.2.9:4000");
    assert_eq!(outside.uri.to_string(), "/rewrite/a");
    let hits: Vec<u64> = p.hits().iter().filter(|h| h.0 == "http_request").map(|h| h.3).collect();
    // The capture has no condition: every request that got past the first deny reached it.
    assert_eq!(hits, [1, 4, 1, 1, 2, 2, 1]);
}

#[test]
fn response_actions() {
    let (p, _) = setup();
    let f = facts("192.0.2.1:1");
    let mut headers = http::HeaderMap::new();
    headers.insert("server", "nginx".parse().expect("value"));
    let mut captured = Captured::default();
    assert!(p.on_response(503, &mut headers, None, &f, "s3", None, &mut captured).is_none());
    assert!(!headers.contains_key("server"));
    assert_eq!(headers["x-status-class"], "server error");
    let mut ok = http::HeaderMap::new();
    p.on_response(200, &mut ok, None, &f, "s3", None, &mut captured);
    assert!(!ok.contains_key("x-status-class"));
}

#[test]
fn list_changes_apply_at_once() {
    let (p, patterns) = setup();
    let list = patterns.find_list("agents").expect("list").2.clone();
    let mut req = request("GET", "/x", &[("user-agent", "python-requests/2")]);
    assert_eq!(run(&p, &mut req, "192.0.2.1:1").0, None);
    let mut entries = list.snapshot().entries.clone();
    entries.push("python-".to_owned());
    list.replace(entries).expect("inline list: nothing to write");
    let mut req = request("GET", "/x", &[("user-agent", "python-requests/2")]);
    assert_eq!(run(&p, &mut req, "192.0.2.1:1").0.as_deref(), Some("deny 403"));
}

/// A rule reads the head as the rules before it left it, though conditions on one head share
/// what they fetch (the host): a rewrite of Host is seen by the next rule and by routing; and
/// `set_header` replaces every value a header had.
#[test]
fn rules_after_a_rewrite_see_the_new_head() {
    let (p, _) = compiled(
        r#"
frontends:
  - name: fe
    bind: [127.0.0.1:8080]
    http_request:
      - set_header: { name: X-Seen, value: before }
        if: { host: old.example.com }
      - set_header: { name: Host, value: new.example.com }
        if: { host: old.example.com }
      - deny: { status: 403 }
        if: { host: old.example.com }
      - set_header: { name: X-Seen, value: after }
        if: { host: new.example.com }
    rules:
      - { host: new.example.com, backend: new }
      - { host: old.example.com, backend: old }
backends:
  - { name: old, servers: [{ name: o1, address: 127.0.0.1:1 }] }
  - { name: new, servers: [{ name: n1, address: 127.0.0.1:2 }] }
"#,
    );
    let mut parts = request("GET", "/x", &[("host", "old.example.com:8080"), ("x-seen", "a"), ("x-seen", "b")]);
    assert_eq!(run(&p, &mut parts, "192.0.2.1:1").0, None);
    assert_eq!(parts.headers.get_all("x-seen").iter().collect::<Vec<_>>(), ["after"]);
    assert_eq!(routed(&p, &parts), "new");
}
