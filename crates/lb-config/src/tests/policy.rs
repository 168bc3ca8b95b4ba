//! The policy language: the issue's object-storage edge as written, every condition and action
//! form, the errors a mistake gets (located), list and map files, and the round trip.

use std::io::Write as _;

use super::{error, errors, parse_ok};
use crate::*;

/// The object-storage API edge: routing by regex, header prefix, query parameter and CORS
/// preflight; a duplicate Content-Length refused; a request ID captured; a JSON log.
const EDGE: &str = r#"
conditions:
  buckets_path: { path: { regex: "^/[^/]+/buckets" } }
  sigv4: { header: { name: Authorization, prefix: "AWS4-HMAC-SHA256" } }
  presigned: { query: { name: X-Amz-Algorithm, exists: true } }
  preflight:
    all:
      - { method: OPTIONS }
      - { header: { name: access-control-request-method, exists: true } }
lists:
  internal: { type: ip, values: [10.0.0.0/8, "::1", 192.0.2.7] }
frontends:
  - name: s3
    bind: [127.0.0.1:8080]
    default_backend: objects_api
    http_request:
      - deny: { status: 400 }
        if: { header: { name: content-length, count: { gt: 1 } } }
      - capture: { header: x-request-id, length: 36 }
      - return: { status: 200, content_type: application/json, body: '{"ok":true}' }
        if: { all: [{ path: /healthz }, { src: { list: internal } }] }
      - set_header: { name: X-Client-IP, value: "%ci" }
    http_response:
      - del_header: Server
      - set_header: { name: Strict-Transport-Security, value: "max-age=31536000" }
        unless: { status: { lt: 200 } }
    rules:
      - backend: buckets_api
        if: { any: [buckets_path, sigv4, presigned, preflight] }
    unique_id: { header: X-Request-ID }
    log_format: { json: { client: "%ci", status: "%ST", request_id: "%ID", captured: "%hr" } }
backends:
  - name: objects_api
    servers: [{ name: o1, address: 10.0.0.1:80 }]
  - name: buckets_api
    servers: [{ name: b1, address: 10.0.0.2:80 }]
"#;

#[test]
fn the_object_storage_edge_is_written_as_typed_values() {
    let config = parse_ok(EDGE);
    let fe = &config.frontends[0];
    assert_eq!(fe.rules.len(), 1);
    let Some(Guard { condition: Condition::Any(any), negate: false }) = &fe.rules[0].guard else {
        panic!("{:?}", fe.rules[0].guard)
    };
    assert_eq!(any[0], Condition::Named("buckets_path".into()));
    assert_eq!(
        config.policy.conditions["sigv4"],
        Condition::Test(Test {
            fetch: Fetch::Header("authorization".into()),
            matcher: Matcher::Prefix("AWS4-HMAC-SHA256".into()),
            ignore_case: false
        })
    );
    assert!(matches!(&fe.http_request[0].action, RequestAction::Deny(r) if r.status == 400));
    let Some(g) = &fe.http_request[0].guard else { panic!("guard") };
    assert_eq!(
        g.condition,
        Condition::Test(Test {
            fetch: Fetch::Header("content-length".into()),
            matcher: Matcher::Count(Compare { op: CmpOp::Gt, value: 1 }),
            ignore_case: false
        })
    );
    assert_eq!(
        fe.http_request[1].action,
        RequestAction::Capture(Capture { header: "x-request-id".into(), length: 36 })
    );
    assert_eq!(config.policy.lists["internal"].entries, ["10.0.0.0/8", "::1", "192.0.2.7"]);
    assert!(matches!(&fe.log_format, Some(AccessLogFormat::Json(f)) if f.len() == 4));
    assert_eq!(fe.unique_id.as_ref().map(|u| u.header.as_str()), Some("X-Request-ID"));
}

#[test]
fn the_policy_survives_a_round_trip() {
    let config = parse_ok(EDGE);
    let yaml = config.to_yaml();
    let again = Config::parse(&yaml, "rendered.yaml").unwrap_or_else(|e| panic!("{e}\n---\n{yaml}"));
    assert_eq!(again, config);
}

#[test]
fn the_old_rules_keep_their_meaning_and_form() {
    let text = super::MINIMAL.replace(
        "    default_backend: app\n",
        "    default_backend: app\n    rules:\n      - { path_prefix: /v2, host: api.example.com, backend: app }\n",
    );
    let config = parse_ok(&text);
    let rule = &config.frontends[0].rules[0];
    assert_eq!(rule.backend, RouteTarget::Backend("app".into()));
    assert_eq!(rule.guard, None);
    let yaml = config.to_yaml();
    assert!(yaml.contains("path_prefix: /v2") && !yaml.contains("if:"), "{yaml}");
}

fn with_request_rules(rules: &str) -> String {
    super::MINIMAL
        .replace("    default_backend: app\n", &format!("    default_backend: app\n    http_request:\n{rules}"))
}

#[test]
fn mistakes_are_located_and_explained() {
    let cases = [
        ("      - deny: {}\n        if: nosuch\n", "proxy.yaml:7:13: frontends[0].http_request[0].if: no condition named `nosuch`"),
        ("      - deny: {}\n        if: { path: { regex: \"(\" } }\n", "proxy.yaml:7:30: frontends[0].http_request[0].if.path.regex: invalid regular expression: regex parse error: (: error: unclosed group"),
        ("      - deny: {}\n        if: { header: { exists: true } }\n", "frontends[0].http_request[0].if.header: `header` needs a `name`"),
        ("      - deny: {}\n        if: { paht: /x }\n", "unknown condition `paht`"),
        ("      - deny: {}\n        if: { path: { prefix: /a, suffix: /b } }\n", "one matcher per test"),
        ("      - deny: {}\n        if: { src: { in: [10.0.0.0/33] } }\n", "the prefix length must be 0 to 32"),
        ("      - deny: {}\n        if: { method: { count: { gt: 1 } } }\n", "`count` is for header"),
        ("      - deny: {}\n        if: { status: 500 }\n", "use it in `http_response`"),
        ("      - deny: { status: 700 }\n", "frontends[0].http_request[0].deny.status: expected a status between 200 and 599"),
        ("      - set_header: { name: \"X A\", value: v }\n", "`X A` is not a header name"),
        ("      - set_header: { name: X-A, value: \"a\\r\\nb: c\" }\n", "cannot hold CR, LF or NUL"),
        ("      - set_header: { name: X-A, value: \"%zz\" }\n", "unknown variable `%zz`"),
        ("      - redirect: { scheme: https, prefix: /x }\n", "exactly one of `scheme`, `location`, `prefix`"),
        ("      - redirect: { scheme: https, code: 304 }\n", "expected 301, 302, 303, 307 or 308"),
        ("      - denny: {}\n", "unknown action `denny`"),
        ("      - deny: {}\n        set_path: /x\n", "exactly one action"),
        ("      - set_path: v2\n", "a path starts with `/`"),
        ("      - capture: { header: x-id }\n", "missing `length`"),
        ("      - deny: {}\n        if: { path: /a }\n        unless: { path: /b }\n", "`if` or `unless`, not both"),
    ];
    for (rules, expected) in cases {
        let all = errors(&with_request_rules(rules));
        assert!(all.iter().any(|e| e.contains(expected)), "expected `{expected}` for\n{rules}got {all:#?}");
        assert!(all.iter().all(|e| e.starts_with("proxy.yaml:")), "{all:#?}");
    }
}

#[test]
fn named_conditions_may_not_loop() {
    let text = format!("conditions:\n  a: {{ not: b }}\n  b: {{ any: [a] }}\n{}", super::MINIMAL);
    let all = errors(&text);
    assert!(all.iter().any(|e| e.contains("condition `a` refers to itself")), "{all:#?}");
}

#[test]
fn a_list_file_with_a_bad_entry_is_refused_whole_naming_its_line() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("blocked.lst");
    let mut f = std::fs::File::create(&file).expect("create");
    writeln!(f, "# blocked clients\n192.0.2.0/24\n198.51.100.300\n").expect("write");
    let text = format!("lists:\n  blocked: {{ type: ip, file: {} }}\n{}", file.display(), super::MINIMAL);
    let e = error(&text);
    assert_eq!(
        e,
        format!(
            "{}:3:1: lists.blocked: refused whole: `198.51.100.300` is not an address or network (a.b.c.d/n)",
            file.display()
        )
    );
}

#[test]
fn lists_and_maps_from_files_route_and_match() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("hosts.map"), "a.example.com app\nb.example.com nosuch\n").expect("map");
    let text = format!(
        "maps:\n  hosts: {{ file: {} }}\n{}",
        dir.path().join("hosts.map").display(),
        super::MINIMAL.replace(
            "    default_backend: app\n",
            "    default_backend: app\n    rules:\n      - backend: { map: hosts, key: host, default: app }\n"
        )
    );
    // A routing map's values must be backends.
    assert!(error(&text).contains("map `hosts`: key `b.example.com` names `nosuch`, which is no backend"));
    std::fs::write(dir.path().join("hosts.map"), "a.example.com app\n").expect("map");
    let config = parse_ok(&text);
    assert_eq!(config.policy.maps["hosts"].entries, [("a.example.com".into(), "app".into())]);
    assert_eq!(
        config.frontends[0].rules[0].backend,
        RouteTarget::Map { map: "hosts".into(), key: Fetch::Host, default: Some("app".into()) }
    );
}

#[test]
fn tcp_frontends_take_no_http_rules() {
    let text = super::MINIMAL
        .replace(
            "    default_backend: app\n",
            "    mode: tcp\n    default_backend: app\n    http_request:\n      - deny: {}\n",
        )
        .replace("  - name: app\n", "  - name: app\n    mode: tcp\n");
    assert!(error(&text).contains("are for http frontends"));
}
