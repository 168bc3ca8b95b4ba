//! The fuzz target `policy`'s entry point: a template and a request head from the fuzzer, run
//! through a policy that uses every fetch, matcher and action. No panic; every header a rule
//! set is a valid header value (no CR, LF or NUL reaches the wire); the template either parses
//! and renders, or is refused with a message.

use std::sync::OnceLock;

use super::{Captured, FrontendPolicy, Patterns, RequestVars, RequestView, Subject};
use crate::backend::Backends;
use crate::facts::ConnFacts;

const CONFIG: &str = r#"
conditions:
  every_fetch:
    any:
      - { method: { in: [GET, POST] } }
      - { path: { regex: "^/[^/]+/b(u|o)ckets?$", ignore_case: true } }
      - { uri: { contains: "%00" } }
      - { query: { name: q, count: { ge: 2 } } }
      - { host: { suffix: .example.com, ignore_case: true } }
      - { header: { name: x-n, gt: 10 } }
      - { cookie: { name: s, list: words } }
      - { src: { list: nets } }
      - { src_port: { le: 1024 } }
      - { sni: { exists: true } }
      - { not: { alpn: h2 } }
lists:
  nets: { type: ip, values: [10.0.0.0/8, "::1", 0.0.0.0/0] }
  words: { type: prefix, values: [a, bc, def], ignore_case: true }
maps:
  hosts: { entries: { a.example.com: b, b.example.com: b } }
frontends:
  - name: f
    bind: ["127.0.0.1:1"]
    default_backend: b
    unique_id: { header: X-Request-ID, format: "%ci-%[req.hdr(x-id)]" }
    http_request:
      - capture: { header: x-id, length: 5 }
      - set_header: { name: X-Echo, value: "%[req.hdr(x-id)] %[query] %[path] %ci %HU" }
      - add_header: { name: X-Cookie, value: "%[req.cook(s)]" }
      - set_path: "/p%[path]"
        if: every_fetch
      - redirect: { scheme: https }
        if: { header: { name: x-redirect, exists: true } }
      - redirect: { location: "https://x%[path]" }
        if: { header: { name: x-location, exists: true } }
      - deny: {}
        if: { header: { name: x-deny, equals: "1" } }
    http_response:
      - set_header: { name: X-Status, value: "%ST %[res.hdr(x-s)]" }
      - capture: { header: x-s, length: 3 }
    rules:
      - backend: { map: hosts, key: host }
      - backend: b
        if: every_fetch
backends:
  - name: b
    servers: [{ name: s, address: 127.0.0.1:2 }]
"#;

fn policy() -> &'static (FrontendPolicy, Patterns) {
    static POLICY: OnceLock<(FrontendPolicy, Patterns)> = OnceLock::new();
    POLICY.get_or_init(|| {
        let config = lb_config::Config::parse(CONFIG, "fuzz.yaml").unwrap_or_else(|e| panic!("fuzz policy: {e}"));
        let patterns = Patterns::new(&config.policy);
        let backends = Backends::new(&config);
        let fe = FrontendPolicy::new(
            &config.frontends[0],
            &config.policy,
            &patterns,
            &backends,
            &crate::tables::Tables::default(),
        )
        .unwrap_or_else(|e| panic!("fuzz policy: {e}"));
        (fe, patterns)
    })
}

/// The first line of `data` is a template; the rest an HTTP/1 request head.
pub fn fuzz_policy(data: &[u8]) {
    let (first, rest) = match data.iter().position(|&b| b == b'\n') {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let template = std::str::from_utf8(first).ok().and_then(|t| lb_config::Template::parse(t).ok());
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut req = httparse::Request::new(&mut headers);
    let Ok(httparse::Status::Complete(_)) = req.parse(rest) else { return };
    let mut builder = http::Request::builder().method(req.method.unwrap_or("GET")).uri(req.path.unwrap_or("/"));
    for h in req.headers.iter() {
        builder = builder.header(h.name, h.value);
    }
    let Ok(request) = builder.body(()) else { return };
    let mut parts = request.into_parts().0;
    let facts = ConnFacts::from_socket("10.1.2.3:4000".parse().ok());
    let (fe, _) = policy();
    let mut captured = Captured::default();
    let _ = fe.on_request(&mut parts, &facts, "f", Some("id"), &mut captured, &mut crate::tables::Tracked::default());
    let subject =
        Subject { req: Some(RequestView::of(&parts)), facts: &facts, frontend: "f", response: None, tracked: None };
    let _ = fe.route(&subject);
    if let Some(t) = &template {
        let mut out = String::new();
        super::render(t, &RequestVars { subject: &subject, unique_id: Some("id") }, &mut out);
    }
    let mut response = parts.headers.clone();
    let _ = fe.on_response(200, &mut response, Some(RequestView::of(&parts)), &facts, "f", None, &mut captured);
    for v in parts.headers.values().chain(response.values()) {
        assert!(!v.as_bytes().iter().any(|&b| b == b'\r' || b == b'\n' || b == 0), "a header value with CR/LF/NUL");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_fuzz_policy_compiles_and_runs() {
        super::fuzz_policy(b"%ci %[req.hdr(x-id)] %{+Q}r\nGET /a/buckets?q=1&q=2 HTTP/1.1\r\nHost: a.example.com\r\nX-Id: a\xff\r\nCookie: s=Bcd\r\n\r\n");
        super::fuzz_policy(b"%[\nGET / HTTP/1.1\r\nX-Redirect: 1\r\n\r\n");
    }
}
