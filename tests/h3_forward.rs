//! HTTP/3 end to end: aioquic (PyPI; scripts/install-deps test installs it) → lb-tls's UDP
//! frontend → one hop connection per QUIC connection (PROXY v2 with ALPN `h3`, then HTTP/2), or
//! one stream of the multiplexed hop (`backend.multiplex`) → lb-proxy → a test server. GET, POST
//! with a body, a large response and several streams at once on one connection; the
//! certificate chosen by SNI; the TLS facts and ALPN `h3` reaching lb-proxy's rules and log.

mod h3;

use h3::Stack;
use serde_json::{json, Value};

fn header<'a>(response: &'a Value, name: &str) -> Option<&'a str> {
    response["headers"].as_array()?.iter().find(|h| h[0] == name).and_then(|h| h[1].as_str())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_requests_reach_the_servers_through_the_hop() {
    let stack = Stack::start();
    let proxy_port = stack.proxy.addr().port();
    requests_reach_the_servers(&stack).await;
    // A hop connection per QUIC connection, closed with it.
    let closed = || lb_testkit::procfs::established_on(proxy_port) == 0;
    assert!(lb_testkit::wait_until(std::time::Duration::from_secs(10), closed).await, "the hops closed");
    let hops = tokio::task::block_in_place(|| hops_for_open_connections(&stack, 4));
    assert_eq!(hops, 4, "a hop connection per QUIC connection");
}

/// The hop connections established to lb-proxy while `n` QUIC connections are open, each after
/// one request.
fn hops_for_open_connections(stack: &Stack, n: usize) -> usize {
    let ca = stack.certs.ca();
    let sessions: Vec<h3::Session> = (0..n)
        .map(|_| {
            let mut session = h3::Session::open(stack.port, &ca, None, false);
            let responses = session.requests(&json!([{"path": "/echo"}]));
            assert_eq!(responses[0]["status"], 200, "{responses:?}");
            session
        })
        .collect();
    let hops = lb_testkit::procfs::established_on(stack.proxy.addr().port());
    drop(sessions);
    hops
}

/// With `backend.multiplex: true` the QUIC connection's hop is a stream of lb-tls's
/// multiplexed hop connection: the same requests, the same facts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http3_requests_reach_the_servers_through_the_multiplexed_hop() {
    let stack = Stack::start_multiplexed();
    requests_reach_the_servers(&stack).await;
    // Four QUIC connections open at once: their hops are streams of one hop connection per
    // lb-tls worker thread (two), not a connection each.
    let hops = tokio::task::block_in_place(|| hops_for_open_connections(&stack, 4));
    assert!((1..=2).contains(&hops), "{hops} hop connections to lb-proxy for 4 QUIC connections");
}

async fn requests_reach_the_servers(stack: &Stack) {
    let (port, ca, proxy) = (stack.port, stack.certs.ca(), &stack.proxy);

    let body = "x".repeat(300_000);
    let mut requests = vec![
        json!({"method": "GET", "path": "/echo?first=1"}),
        json!({"method": "POST", "path": "/upload", "body": body}),
        json!({"method": "GET", "path": "/bytes?n=3000000"}),
    ];
    requests.extend((0..8).map(|i| json!({"method": "GET", "path": format!("/echo?stream={i}")})));
    let responses = h3::h3(port, "api.example.test", &ca, &Value::Array(requests));
    assert_eq!(responses.len(), 11);
    for r in &responses {
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(header(r, "x-server"), Some("api"), "{r}");
    }

    // The GET: the TLS facts of the QUIC connection reached lb-proxy's rules.
    let echo: Value = serde_json::from_str(responses[0]["body"].as_str().unwrap_or("")).expect("echo JSON");
    let sent = |name: &str| {
        echo["headers"].as_array().and_then(|h| h.iter().find(|h| h[0] == name)).and_then(|h| h[1].as_str())
    };
    assert_eq!(sent("x-tls"), Some("TLSv1.3 h3 api.example.test TLS_AES_128_GCM_SHA256"), "{echo}");
    assert_eq!(sent("x-forwarded-for"), Some("127.0.0.1"), "{echo}");
    assert_eq!(echo["query"], "first=1");
    // The POST's body arrived whole; the large response came back whole.
    assert_eq!(responses[1]["body"], "300000");
    assert_eq!(responses[2]["length"], 3_000_000);
    // Several streams at once, each its own request and answer.
    for (i, r) in responses[3..].iter().enumerate() {
        let echo: Value = serde_json::from_str(r["body"].as_str().unwrap_or("")).expect("echo JSON");
        assert_eq!(echo["query"], format!("stream={i}"), "{r}");
    }
    // One QUIC connection, one hop connection: every request on the same connection to lb-proxy.
    let log = proxy.wait_for_log_lines(11).await;
    let h3_lines: Vec<&String> = log.iter().filter(|l| l.contains(r#""alpn":"h3""#)).collect();
    assert_eq!(h3_lines.len(), 11, "{log:#?}");

    // SNI picks the certificate: the client verifies admin.example.test's name against it.
    let responses = h3::h3(port, "admin.example.test", &ca, &json!([{"method": "GET", "path": "/echo"}]));
    assert_eq!(responses[0]["status"], 200, "{:?}", responses);
    let echo: Value = serde_json::from_str(responses[0]["body"].as_str().unwrap_or("")).expect("echo JSON");
    let x_tls = echo["headers"].as_array().and_then(|h| h.iter().find(|h| h[0] == "x-tls")).map(|h| h[1].clone());
    assert_eq!(x_tls, Some(json!("TLSv1.3 h3 admin.example.test TLS_AES_128_GCM_SHA256")), "{echo}");
}
