//! lb-tls → lb-proxy → server, end to end with curl and `openssl s_client`: the PROXY v2 header
//! lb-tls writes is decoded by lb-proxy, whose access log shows the client address, TLS version,
//! cipher, SNI and ALPN; v1 and `proxy_proxy`; 64 KiB bodies both ways; a backend that refuses
//! or does not answer closes the client promptly, and is logged.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lb_testkit::certs::TestCerts;
use lb_testkit::sclient::{curl, s_client};
use lb_testkit::{free_port, Blackhole, ProxyProcess, TestServer, TlsProcess};
use tokio::io::AsyncWriteExt;

/// lb-proxy with a PROXY-protocol bind and JSON access logs, in front of `server`.
fn start_proxy(server: &TestServer) -> ProxyProcess {
    let addr = server.addr();
    ProxyProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  log: {{ format: json }}
defaults:
  timeouts: {{ connect: 1s, client: 5s, server: 5s, http_request: 2s }}
frontends:
  - name: fe
    bind: [ {{ address: "127.0.0.1:{p}", accept_proxy: true }} ]
    default_backend: be
backends:
  - name: be
    servers: [ {{ name: s1, address: "{addr}" }} ]
"#,
            p = ports[0]
        )
    })
}

fn start_tls(certs: &TestCerts, backend: &str, write_proxy: &str, extra_global: &str, frontend: &str) -> TlsProcess {
    let api = certs.server("api", &["api.example.test"]).display().to_string();
    let ca = certs.ca().display().to_string();
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
{extra_global}
tls:
  certificates: [ {api} ]
  alpn_protocols: [ http/1.1 ]
  client_cert: optional
  client_ca: {ca}
backend:
  address: "{backend}"
  write_proxy: {write_proxy}
frontends:
  - bind: "127.0.0.1:{port}"
{frontend}
"#,
            port = ports[0]
        )
    })
}

/// A test server behind lb-proxy behind lb-tls, and the CA path curl trusts.
struct Chain {
    certs: TestCerts,
    _server: TestServer,
    proxy: ProxyProcess,
    tls: TlsProcess,
    ca: String,
}

fn chain(write_proxy: &str, extra_global: &str, frontend: &str) -> Chain {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let proxy = start_proxy(&server);
    let tls = start_tls(&certs, &proxy.addr().to_string(), write_proxy, extra_global, frontend);
    let ca = certs.ca().display().to_string();
    Chain { certs, _server: server, proxy, tls, ca }
}

fn url(tls: &TlsProcess, path: &str) -> (String, String) {
    let port = tls.addr().port();
    (format!("https://api.example.test:{port}{path}"), format!("api.example.test:{port}:127.0.0.1"))
}

fn json(line: &str) -> serde_json::Value {
    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_v2_facts_reach_lb_proxy_access_log() {
    let Chain { certs, _server, proxy, tls, ca } = chain("v2", "", "");

    let (u, resolve) = url(&tls, "/echo");
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve, "-w", "\n%{local_port}"]);
    assert_eq!(r.code, Some(0), "{r:?}");
    let (body, port) = r.body.rsplit_once('\n').expect("body and local port");
    let echo: serde_json::Value = serde_json::from_str(body).expect("echo JSON");
    let headers = echo["headers"].as_array().expect("headers").clone();
    let header = |name: &str| headers.iter().find(|p| p[0] == name).and_then(|p| p[1].as_str()).map(str::to_owned);
    assert_eq!(header("x-forwarded-proto").as_deref(), Some("https"), "{echo}");
    assert_eq!(header("x-forwarded-for").as_deref(), Some("127.0.0.1"), "{echo}");

    let line = json(&proxy.wait_for_log(|l| l.contains("GET /echo")).await);
    assert_eq!(line["client_ip"], "127.0.0.1", "{line}");
    assert_eq!(line["client_port"].to_string(), port, "the client's own port, not lb-tls's: {line}");
    assert_eq!(line["tls_version"], "TLSv1.3", "{line}");
    assert!(line["tls_cipher"].as_str().is_some_and(|c| c.starts_with("TLS_AES_")), "{line}");
    assert_eq!(line["sni"], "api.example.test", "{line}");
    assert_eq!(line["alpn"], "http/1.1", "{line}");
    assert_eq!(line["tls_client_cert"], false, "{line}");

    // TLS 1.2 with a client certificate.
    let (cert, key) = certs.client("alice", "alice", true);
    let (u, resolve) = url(&tls, "/ping");
    let r = curl(
        &u,
        &[
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "--tls-max",
            "1.2",
            "--cert",
            &cert.display().to_string(),
            "--key",
            &key.display().to_string(),
        ],
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let line = json(&proxy.wait_for_log(|l| l.contains("GET /ping")).await);
    assert_eq!(line["tls_version"], "TLSv1.2", "{line}");
    assert!(line["tls_cipher"].as_str().is_some_and(|c| c.starts_with("ECDHE-ECDSA-")), "{line}");
    assert_eq!((line["tls_client_cert"].clone(), line["tls_client_cert_verified"].clone()), (true.into(), true.into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_of_64_kib_both_ways() {
    let Chain { certs: _certs, _server, proxy: _proxy, tls, ca } = chain("v2", "", "");
    let (u, resolve) = url(&tls, "/bytes?n=65536");
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve, "-o", "/dev/null", "-w", "%{size_download}"]);
    assert_eq!((r.code, r.body.as_str()), (Some(0), "65536"), "{r:?}");
    let upload = tls.dir().join("upload.bin");
    std::fs::write(&upload, vec![b'x'; 65536]).expect("writing the upload");
    let (u, resolve) = url(&tls, "/upload");
    let data = format!("@{}", upload.display());
    let r = curl(
        &u,
        &[
            "--cacert",
            &ca,
            "--resolve",
            &resolve,
            "--data-binary",
            &data,
            "-o",
            "/dev/null",
            "-w",
            "%{http_code} %{size_upload}",
        ],
    );
    assert_eq!((r.code, r.body.as_str()), (Some(0), "200 65536"), "{r:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_v1_carries_the_address_only() {
    let Chain { certs: _certs, _server, proxy, tls, ca } = chain("v1", "", "");
    let (u, resolve) = url(&tls, "/ping");
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve]);
    assert_eq!(r.code, Some(0), "{r:?}");
    let line = json(&proxy.wait_for_log(|l| l.contains("GET /ping")).await);
    assert_eq!(line["client_ip"], "127.0.0.1", "{line}");
    assert!(line.get("tls_version").is_none() && line.get("sni").is_none(), "v1 has no TLS facts: {line}");
}

/// A load balancer in front: accepts on its own port, writes a PROXY v1 header naming
/// `client`, then relays both ways to `to`.
async fn relay_with_proxy_header(client: &str, to: SocketAddr) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("relay bind");
    let addr = listener.local_addr().expect("relay address");
    let header = format!("PROXY TCP4 {client} 127.0.0.1 40001 443\r\n");
    tokio::spawn(async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            let header = header.clone();
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(to).await else { return };
                if outbound.write_all(header.as_bytes()).await.is_ok() {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                }
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_proxy_takes_the_client_from_the_balancer_in_front() {
    let Chain { certs, _server, proxy, tls, ca } = chain("v2", "", "    proxy_proxy: true");
    let relay = relay_with_proxy_header("192.0.2.33", tls.addr()).await;
    let out = tokio::task::spawn_blocking(move || {
        s_client(
            relay,
            &["-servername", "api.example.test", "-CAfile", &ca],
            b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n",
            Duration::from_secs(10),
        )
    })
    .await
    .expect("s_client");
    assert!(out.stdout.contains(" 200 OK"), "{}", out.text());
    let line = json(&proxy.wait_for_log(|l| l.contains("GET /ping")).await);
    assert_eq!((line["client_ip"].clone(), line["client_port"].clone()), ("192.0.2.33".into(), 40001.into()), "{line}");
    assert_eq!(line["sni"], "api.example.test", "{line}");

    // Straight to lb-tls without the header: refused before any TLS, and logged.
    let ca = certs.ca().display().to_string();
    let direct = tls.addr();
    let out = tokio::task::spawn_blocking(move || {
        s_client(direct, &["-servername", "api.example.test", "-CAfile", &ca], b"", Duration::from_secs(10))
    })
    .await
    .expect("s_client");
    assert_eq!(out.session(), None, "{}", out.text());
    tls.wait_for_stderr(|l| l.contains("missing PROXY header")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_refuses_closes_the_client_promptly_and_is_logged() {
    let certs = TestCerts::new();
    let nobody = format!("127.0.0.1:{}", free_port());
    let tls = start_tls(&certs, &nobody, "v2", "", "");
    let ca = certs.ca().display().to_string();
    let (u, resolve) = url(&tls, "/ping");
    let started = Instant::now();
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve]);
    assert!(started.elapsed() < Duration::from_secs(2), "closed promptly: {:?}", started.elapsed());
    assert_ne!(r.code, Some(0), "{r:?}");
    assert_ne!(r.code, Some(35), "the handshake itself succeeded: {r:?}");
    let line = tls.wait_for_stderr(|l| l.contains("refused the connection")).await;
    assert!(line.contains(&nobody) && line.contains("closing client 127.0.0.1:"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_does_not_answer_is_given_up_after_the_connect_timeout() {
    let certs = TestCerts::new();
    let hole = Blackhole::start();
    let tls = start_tls(&certs, &hole.addr().to_string(), "v2", "  backend_connect_timeout: 500ms", "");
    let ca = certs.ca().display().to_string();
    let (u, resolve) = url(&tls, "/ping");
    let started = Instant::now();
    let r = curl(&u, &["--cacert", &ca, "--resolve", &resolve]);
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(450) && took < Duration::from_secs(3), "after 500ms: {took:?}");
    assert_ne!(r.code, Some(0), "{r:?}");
    tls.wait_for_stderr(|l| l.contains("did not accept within 500ms")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_max_connections_nothing_more_is_accepted_until_one_ends() {
    let Chain { certs: _certs, _server, proxy: _proxy, tls, ca } =
        chain("v2", "  max_connections: 1\n  handshake_timeout: 30s", "");
    let (u, resolve) = url(&tls, "/ping");
    // One connection that says nothing holds the only place.
    let holder = lb_testkit::raw::RawConn::connect(tls.addr()).await.expect("connect");
    let (u2, resolve2, ca2) = (u.clone(), resolve.clone(), ca.clone());
    let waiting =
        tokio::task::spawn_blocking(move || curl(&u2, &["--cacert", &ca2, "--resolve", &resolve2, "--max-time", "2"]))
            .await
            .expect("curl");
    assert_eq!(waiting.code, Some(28), "queued in the backlog, not served nor refused: {waiting:?}");
    drop(holder);
    let r =
        tokio::task::spawn_blocking(move || curl(&u, &["--cacert", &ca, "--resolve", &resolve])).await.expect("curl");
    assert_eq!((r.code, r.body.as_str()), (Some(0), "pong"), "served once the place is free: {r:?}");
}

/// The server certificate's signature and key algorithms reach the backend in the PROXY v2
/// header (`SSL_SIG_ALG`, `SSL_KEY_ALG`), for the default certificate and for one SNI picks.
/// lb-tls lets the TLS library free a connection's copy of its certificate once the handshake
/// is done, so these are kept with each certificate instead. The default is ECDSA, the other
/// RSA from an RSA CA: each SNI must get its own certificate's algorithms, not the default's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_v2_names_the_server_certificates_algorithms() {
    let certs = TestCerts::new();
    let api = certs.server("api", &["api.example.test"]).display().to_string();
    let other = certs.server_rsa("other", &["other.example.test"]).display().to_string();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("binding the backend");
    let backend = listener.local_addr().expect("backend address");
    let tls = TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
tls:
  certificates: [ {api}, {other} ]
backend:
  address: "{backend}"
  write_proxy: v2
frontends:
  - bind: "127.0.0.1:{port}"
"#,
            port = ports[0]
        )
    });
    let expected = [
        ("api.example.test", certs.ca(), "ecdsa-with-SHA256", "EC256"),
        ("other.example.test", certs.rsa_ca(), "RSA-SHA256", "RSA2048"),
    ];
    for (sni, ca, sig_alg, key_alg) in expected {
        let (addr, ca) = (tls.addr(), ca.display().to_string());
        let client = tokio::task::spawn_blocking(move || {
            s_client(addr, &["-servername", sni, "-CAfile", &ca], b"", Duration::from_secs(10))
        });
        let (mut conn, _) = tokio::time::timeout(Duration::from_secs(10), listener.accept())
            .await
            .expect("lb-tls connects")
            .expect("accept");
        let tlvs = proxy_v2_tlvs(&mut conn).await;
        drop(conn);
        let served = client.await.expect("s_client");
        assert_eq!(served.subject_cn(), Some(sni), "the certificate for {sni}: {}", served.text());
        assert_eq!(tlvs.get(&0x02).map(Vec::as_slice), Some(sni.as_bytes()), "SNI: {tlvs:?}");
        let ssl = ssl_sub_tlvs(tlvs.get(&0x20).expect("PP2_TYPE_SSL"));
        assert_eq!(ssl.get(&0x24).map(Vec::as_slice), Some(sig_alg.as_bytes()), "SSL_SIG_ALG for {sni}: {ssl:?}");
        assert_eq!(ssl.get(&0x25).map(Vec::as_slice), Some(key_alg.as_bytes()), "SSL_KEY_ALG for {sni}: {ssl:?}");
    }
}

/// Reads a PROXY v2 header and returns its TLVs by type.
async fn proxy_v2_tlvs(conn: &mut tokio::net::TcpStream) -> std::collections::HashMap<u8, Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut head = [0u8; 16];
    conn.read_exact(&mut head).await.expect("the header's first 16 bytes");
    assert_eq!(&head[..12], b"\r\n\r\n\0\r\nQUIT\n", "a v2 signature");
    let mut body = vec![0u8; usize::from(u16::from_be_bytes([head[14], head[15]]))];
    conn.read_exact(&mut body).await.expect("the header's body");
    // TCP over IPv4: 12 bytes of addresses, then the TLVs.
    assert_eq!(head[13], 0x11, "TCP over IPv4");
    tlvs(&body[12..])
}

/// `PP2_TYPE_SSL`'s sub-TLVs, after its client flags (1 byte) and verify result (4).
fn ssl_sub_tlvs(value: &[u8]) -> std::collections::HashMap<u8, Vec<u8>> {
    tlvs(&value[5..])
}

fn tlvs(mut rest: &[u8]) -> std::collections::HashMap<u8, Vec<u8>> {
    let mut out = std::collections::HashMap::new();
    while rest.len() >= 3 {
        let len = usize::from(u16::from_be_bytes([rest[1], rest[2]]));
        let value = rest.get(3..3 + len).expect("a whole TLV");
        out.insert(rest[0], value.to_vec());
        rest = &rest[3 + len..];
    }
    out
}
