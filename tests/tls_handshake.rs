//! lb-tls handshakes with real clients (`openssl s_client`, `curl`): the certificate chosen by
//! SNI (exact name, then wildcard, then the default) and `sni_nomatch_abort`; TLS 1.0 and 1.1
//! refused by default, with the reason in the log; ALPN; the OCSP staple; client certificates
//! none/optional/required; a client that sends nothing is closed after `handshake_timeout`;
//! TLS 1.2 clients without tickets resume from the session cache (and do not when it is off).

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use lb_testkit::certs::TestCerts;
use lb_testkit::raw::{Ending, RawConn};
use lb_testkit::sclient::{curl, s_client, SClient};
use lb_testkit::{TestServer, TlsProcess};

const WAIT: Duration = Duration::from_secs(10);

/// Default certificate `default.test`, a wildcard `*.example.test`, an exact `api.example.test`
/// (with an OCSP response beside it); `extra` goes under `tls:`.
fn start(certs: &TestCerts, backend: SocketAddr, extra: &str) -> TlsProcess {
    let default = certs.server("default", &["default.test"]);
    let wildcard = certs.server("wildcard", &["*.example.test"]);
    let api = certs.server("api", &["api.example.test"]);
    certs.ocsp("api");
    let p = |p: &Path| p.display().to_string();
    let (default, wildcard, api) = (p(&default), p(&wildcard), p(&api));
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
  handshake_timeout: 1s
tls:
  certificates:
    - {default}
    - {wildcard}
    - {{ pem: {api}, ocsp: {api_ocsp} }}
{extra}
backend:
  address: "{backend}"
  write_proxy: none
frontends:
  - bind: "127.0.0.1:{port}"
"#,
            api_ocsp = api.replace(".pem", ".ocsp"),
            port = ports[0]
        )
    })
}

/// An HTTP/1.0 request through s_client: the server answers and closes, so s_client ends.
const REQUEST: &[u8] = b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n";

fn hello(tls: &TlsProcess, args: &[&str]) -> SClient {
    s_client(tls.addr(), args, REQUEST, WAIT)
}

fn answered(out: &SClient) -> bool {
    out.stdout.contains("HTTP/1.1 200") || out.stdout.contains("HTTP/1.0 200")
}

#[test]
fn sni_picks_exact_then_wildcard_then_default() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "");
    for (sni, served) in [
        ("api.example.test", "api.example.test"),
        ("API.Example.TEST", "api.example.test"),
        ("www.example.test", "*.example.test"),
        ("a.b.example.test", "default.test"),
        ("unknown.test", "default.test"),
    ] {
        let out = hello(&tls, &["-servername", sni]);
        assert_eq!(out.subject_cn(), Some(served), "SNI {sni}: {}", out.text());
        assert!(answered(&out), "the server answered through lb-tls: {}", out.text());
    }
    let out = hello(&tls, &["-noservername"]);
    assert_eq!(out.subject_cn(), Some("default.test"), "no SNI: the default certificate: {}", out.text());
    // curl verifies the chain and the name against the CA.
    let ca = certs.ca().display().to_string();
    let url = format!("https://api.example.test:{}/", tls.addr().port());
    let resolve = format!("api.example.test:{}:127.0.0.1", tls.addr().port());
    let r = curl(&url, &["--cacert", &ca, "--resolve", &resolve, "-o", "/dev/null", "-w", "%{ssl_verify_result}"]);
    assert_eq!((r.code, r.body.as_str()), (Some(0), "0"), "verified and served: {r:?}");
}

#[test]
fn sni_nomatch_abort_refuses_unknown_names_only() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "  sni_nomatch_abort: true");
    let out = hello(&tls, &["-servername", "unknown.test"]);
    assert!(!out.success && out.session() != Some("New"), "unknown name refused: {}", out.text());
    assert!(out.stderr.contains("unrecognized name"), "with alert unrecognized_name: {}", out.text());
    let out = hello(&tls, &["-servername", "www.example.test"]);
    assert_eq!(out.subject_cn(), Some("*.example.test"), "{}", out.text());
    let out = hello(&tls, &["-noservername"]);
    assert_eq!(out.subject_cn(), Some("default.test"), "no SNI still gets the default: {}", out.text());
}

#[test]
fn old_protocols_are_refused_by_default_and_logged() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "");
    for (flag, name) in [("-tls1", "TLSv1.0"), ("-tls1_1", "TLSv1.1")] {
        // SECLEVEL 0 so that the client itself is willing to offer the old protocol.
        let out = hello(&tls, &[flag, "-cipher", "DEFAULT:@SECLEVEL=0"]);
        assert_eq!(out.session(), None, "{name} refused: {}", out.text());
        assert!(!answered(&out), "{name}: nothing forwarded");
    }
    for (flag, name) in [("-tls1_2", "TLSv1.2"), ("-tls1_3", "TLSv1.3")] {
        let out = hello(&tls, &[flag]);
        assert_eq!(out.protocol(), Some(name), "{}", out.text());
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let line = rt.block_on(tls.wait_for_stderr(|l| l.contains("handshake failed")));
    assert!(line.contains("unsupported protocol") && line.contains("127.0.0.1:"), "reason and client logged: {line}");
}

/// Old protocols, when an operator asks for them, are served with the configuration the docs
/// give (the `@SECLEVEL=0` that Debian's OpenSSL needs is accepted by every build).
#[test]
fn old_protocols_are_served_when_configured() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(
        &certs,
        echo.addr(),
        "  protocols: [TLSv1.0, TLSv1.1, TLSv1.2, TLSv1.3]\n  ciphers: \"ECDHE-ECDSA-AES128-SHA:ECDHE-RSA-AES128-SHA:ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:@SECLEVEL=0\"",
    );
    for (flag, name) in [("-tls1", "TLSv1"), ("-tls1_1", "TLSv1.1"), ("-tls1_2", "TLSv1.2")] {
        let out = hello(&tls, &[flag, "-cipher", "DEFAULT:@SECLEVEL=0"]);
        assert_eq!(out.protocol(), Some(name), "{}", out.text());
        assert!(answered(&out), "{name}: forwarded: {}", out.text());
    }
}

#[test]
fn alpn_is_negotiated_from_the_configured_list() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "  alpn_protocols: [h2, http/1.1]");
    assert_eq!(hello(&tls, &["-alpn", "http/1.1,h2"]).alpn(), Some("h2"), "the server's preference wins");
    assert_eq!(hello(&tls, &["-alpn", "http/1.1"]).alpn(), Some("http/1.1"));
    let out = hello(&tls, &["-alpn", "spdy/3"]);
    assert_eq!(out.alpn(), None, "no common protocol: no ALPN, the handshake goes on: {}", out.text());
    assert_eq!(out.session(), Some("New"), "{}", out.text());
}

#[test]
fn ocsp_response_is_stapled_for_its_certificate() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "");
    let out = hello(&tls, &["-servername", "api.example.test", "-status"]);
    assert!(out.ocsp_stapled(), "OCSP staple present: {}", out.text());
    let out = hello(&tls, &["-servername", "default.test", "-status"]);
    assert!(!out.ocsp_stapled() && out.stdout.contains("no response sent"), "none for default.test: {}", out.text());
}

fn client_cert_tls(certs: &TestCerts, echo: &TestServer, mode: &str) -> TlsProcess {
    let ca = certs.ca().display().to_string();
    start(certs, echo.addr(), &format!("  client_cert: {mode}\n  client_ca: {ca}"))
}

#[test]
fn client_certificates_none_optional_required() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let (good, good_key) = certs.client("alice", "alice", true);
    let (bad, bad_key) = certs.client("mallory", "mallory", false);
    let (good, good_key) = (good.display().to_string(), good_key.display().to_string());
    let (bad, bad_key) = (bad.display().to_string(), bad_key.display().to_string());
    let with = |c: &str, k: &str| vec!["-cert".to_owned(), c.to_owned(), "-key".to_owned(), k.to_owned()];
    let run = |tls: &TlsProcess, extra: Vec<String>| {
        let mut args: Vec<String> = vec!["-tls1_2".into()];
        args.extend(extra);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        hello(tls, &args)
    };
    let forwarded = answered;

    let tls = client_cert_tls(&certs, &echo, "required");
    assert!(forwarded(&run(&tls, with(&good, &good_key))), "required + trusted certificate: served");
    let out = run(&tls, vec![]);
    assert!(!forwarded(&out), "required + no certificate: refused: {}", out.text());
    let out = run(&tls, with(&bad, &bad_key));
    assert!(!forwarded(&out), "required + untrusted certificate: refused: {}", out.text());
    drop(tls);

    let tls = client_cert_tls(&certs, &echo, "optional");
    assert!(forwarded(&run(&tls, with(&good, &good_key))), "optional + trusted: served");
    assert!(forwarded(&run(&tls, vec![])), "optional + none: served");
    let out = run(&tls, with(&bad, &bad_key));
    assert!(!forwarded(&out), "optional + untrusted: refused: {}", out.text());
    drop(tls);

    let tls = start(&certs, echo.addr(), "  client_cert: none");
    let out = run(&tls, vec![]);
    assert!(!out.stdout.contains("Acceptable client certificate CA names"), "none: no request: {}", out.text());
    assert!(forwarded(&out));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_sends_nothing_is_closed_after_the_handshake_timeout() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let tls = start(&certs, echo.addr(), "");
    let started = Instant::now();
    let mut silent = RawConn::connect(tls.addr()).await.expect("connect");
    let (bytes, ending) = silent.read_until_closed(Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert!(bytes.is_empty() && ending != Ending::Open, "closed without a byte: {ending:?} {bytes:?}");
    assert!(
        took >= Duration::from_millis(900) && took < Duration::from_secs(5),
        "after handshake_timeout 1s: {took:?}"
    );
    // A client that starts a ClientHello and stalls is closed as well.
    let mut partial = RawConn::connect(tls.addr()).await.expect("connect");
    partial.send(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01]).await.expect("send a record header");
    let (_, ending) = partial.read_until_closed(Duration::from_secs(10)).await;
    assert_ne!(ending, Ending::Open);
    let line = tls.wait_for_stderr(|l| l.contains("no handshake within")).await;
    assert!(line.contains("handshake failed: client 127.0.0.1:"), "{line}");
    assert_eq!(echo.connections(), 0, "nothing reached the backend");
}

/// A TLS 1.2 client that takes no ticket (`-no_ticket`) resumes by session ID from the worker's
/// session cache; with `session_cache_size: 0` the server gives it no session ID, so it has
/// nothing to resume with and every handshake is a full one.
#[test]
fn tls12_clients_without_tickets_resume_from_the_session_cache() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    let dir = tempfile::tempdir().expect("tempdir");
    let session = dir.path().join("session");
    let session = session.to_str().expect("a UTF-8 path");

    let tls = start(&certs, echo.addr(), "");
    let first = hello(&tls, &["-tls1_2", "-no_ticket", "-sess_out", session]);
    assert_eq!(first.session(), Some("New"), "{}", first.text());
    assert!(answered(&first), "{}", first.text());
    for _ in 0..3 {
        let again = hello(&tls, &["-tls1_2", "-no_ticket", "-sess_in", session]);
        assert_eq!(again.session(), Some("Reused"), "{}", again.text());
        assert!(answered(&again), "{}", again.text());
    }
    drop(tls);

    let tls = start(&certs, echo.addr(), "  session_cache_size: 0");
    let first = hello(&tls, &["-tls1_2", "-no_ticket"]);
    assert_eq!(first.session(), Some("New"), "{}", first.text());
    assert!(answered(&first), "{}", first.text());
    let id = first.stdout.lines().find_map(|l| l.trim().strip_prefix("Session-ID:")).map(str::trim);
    assert_eq!(id, Some(""), "no cache, no session ID to resume with: {}", first.text());
}

/// The cipher or TLS 1.3 suite `s_client` got (from its `Cipher is …` line).
fn cipher(out: &SClient) -> Option<String> {
    let line = out.stdout.lines().find(|l| l.contains(", Cipher is "))?;
    Some(line.rsplit("Cipher is ").next()?.trim().to_owned())
}

#[test]
fn the_servers_cipher_order_wins_by_default_and_the_clients_when_configured() {
    let certs = TestCerts::new();
    let echo = TestServer::start("s1");
    // The client prefers AES-256; the default list puts AES-128 first.
    let offer = "ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:\
                 ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256";
    let ours = start(&certs, echo.addr(), "");
    let out = hello(&ours, &["-tls1_2", "-cipher", offer]);
    assert!(cipher(&out).is_some_and(|c| c.contains("AES128")), "our order by default: {}", out.text());
    let theirs = start(&certs, echo.addr(), "  prefer_server_ciphers: false");
    let out = hello(&theirs, &["-tls1_2", "-cipher", offer]);
    assert!(cipher(&out).is_some_and(|c| c.contains("AES256")), "the client's order: {}", out.text());

    // TLS 1.3 suites the same way (OpenSSL's clients list AES-256 first, as here).
    let offer = "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256";
    let out = hello(&ours, &["-tls1_3", "-ciphersuites", offer]);
    assert_eq!(cipher(&out).as_deref(), Some("TLS_AES_128_GCM_SHA256"), "our order by default: {}", out.text());
    let out = hello(&theirs, &["-tls1_3", "-ciphersuites", offer]);
    assert_eq!(cipher(&out).as_deref(), Some("TLS_AES_256_GCM_SHA384"), "the client's order: {}", out.text());
}
