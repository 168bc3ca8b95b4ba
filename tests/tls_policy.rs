//! The policy language on TLS facts, end to end: curl → lb-tls → PROXY v2 → lb-proxy → servers.
//! Conditions on SNI, ALPN and TLS version route and refuse; templates pass the facts on; the
//! same rules hold on HTTP/2 streams (ALPN `h2`) as on HTTP/1.1.

use lb_testkit::certs::TestCerts;
use lb_testkit::sclient::curl;
use lb_testkit::{ProxyProcess, TestServer, TlsProcess};

fn proxy(api: &TestServer, admin: &TestServer) -> ProxyProcess {
    let (api, admin) = (api.addr(), admin.addr());
    ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  log: {{ format: json }}
frontends:
  - name: tls_in
    bind: [ {{ address: "127.0.0.1:{p}", accept_proxy: true }} ]
    tls: true
    default_backend: api
    http_request:
      - deny: {{ status: 426, content_type: text/plain, body: "TLS 1.3 required for /v2" }}
        if: {{ all: [{{ path: {{ prefix: /v2 }} }}, {{ not: {{ tls_version: TLSv1.3 }} }}] }}
      - set_header: {{ name: X-TLS, value: "%[ssl_fc_protocol] %[ssl_fc_alpn] %[ssl_fc_sni]" }}
    rules:
      - backend: admin
        if: {{ sni: {{ equals: ADMIN.example.test, ignore_case: true }} }}
backends:
  - name: api
    servers: [ {{ name: a1, address: "{api}" }} ]
  - name: admin
    servers: [ {{ name: m1, address: "{admin}" }} ]
"#,
            p = ports[0]
        )
    })
}

fn tls(certs: &TestCerts, backend: &str) -> TlsProcess {
    let cert = certs.server("edge", &["api.example.test", "admin.example.test"]).display().to_string();
    let backend = backend.to_owned();
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
tls:
  certificates: [ {cert} ]
  alpn_protocols: [ h2, http/1.1 ]
backend:
  address: "{backend}"
  write_proxy: v2
frontends:
  - bind: "127.0.0.1:{port}"
"#,
            port = ports[0]
        )
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sni_alpn_and_tls_version_drive_the_rules() {
    let certs = TestCerts::new();
    let (api, admin) = (TestServer::start("api"), TestServer::start("admin"));
    let proxy = proxy(&api, &admin);
    let tls = tls(&certs, &proxy.addr().to_string());
    let ca = certs.ca().display().to_string();
    let port = tls.addr().port();
    let get = |host: &str, path: &str, extra: &[&str]| {
        let resolve = format!("{host}:{port}:127.0.0.1");
        let mut args =
            vec!["--cacert", ca.as_str(), "--resolve", resolve.as_str(), "-w", "\n%{http_code} %{http_version}"];
        args.extend_from_slice(extra);
        let r = curl(&format!("https://{host}:{port}{path}"), &args);
        assert_eq!(r.code, Some(0), "{r:?}");
        let (body, status) = r.body.rsplit_once('\n').map(|(b, s)| (b.to_owned(), s.to_owned())).unwrap_or_default();
        (status, body)
    };

    // SNI routes: admin.example.test to the admin backend, whatever the Host header says.
    let (status, body) = get("admin.example.test", "/", &["--http1.1"]);
    assert_eq!((status.as_str(), body.as_str()), ("200 1.1", "admin"));
    let (_, body) = get("api.example.test", "/", &["--http1.1"]);
    assert_eq!(body, "api");

    // The TLS facts reach the server through a template, on HTTP/2 and on HTTP/1.1.
    for (flag, alpn, version) in [("--http2", "h2", "2"), ("--http1.1", "http/1.1", "1.1")] {
        let (status, body) = get("api.example.test", "/echo", &[flag]);
        assert_eq!(status, format!("200 {version}"));
        let echo: serde_json::Value = serde_json::from_str(&body).expect("echo JSON");
        let tls_header = echo["headers"].as_array().expect("headers").iter().find(|p| p[0] == "x-tls").cloned();
        assert_eq!(
            tls_header.and_then(|p| p[1].as_str().map(str::to_owned)),
            Some(format!("TLSv1.3 {alpn} api.example.test"))
        );
    }

    // TLS 1.2 is refused on /v2, not elsewhere; TLS 1.3 passes.
    let (status, body) = get("api.example.test", "/v2/x", &["--tls-max", "1.2", "--http1.1"]);
    assert_eq!((status.as_str(), body.as_str()), ("426 1.1", "TLS 1.3 required for /v2"));
    let (status, _) = get("api.example.test", "/v2/x", &["--tls-max", "1.2", "--http2"]);
    assert_eq!(status, "426 2", "an HTTP/2 stream gets the same answer");
    assert_eq!(get("api.example.test", "/v1/x", &["--tls-max", "1.2"]).0, "200 2");
    assert_eq!(get("api.example.test", "/v2/x", &[]).0, "200 2");
    assert_eq!(api.hits_for("/v2/x"), 1, "only the TLS 1.3 request reached the server");
}
