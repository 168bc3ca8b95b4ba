//! HTTP/3 against a flood of new connection attempts: QUIC Initial packets from many source
//! ports that never complete a handshake. Past `quic.retry_threshold` handshakes under way, a
//! new client's address is checked with a Retry first, so the flood holds no connected socket
//! and no connection slot; a client already connected keeps being answered meanwhile. A
//! client that refuses the handshake is counted by its reason, as over TCP. CRYPTO data a client
//! sends out of order is held up to 16 KiB, a handshake message up to 64 KiB: past either, that
//! connection is closed and the others keep being answered.

mod h3;

use h3::{Session, Stack};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_initials_gets_retries_and_established_clients_keep_answers() {
    flood_while_answering(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_initials_from_many_addresses_gets_retries_and_established_clients_keep_answers() {
    flood_while_answering(true).await;
}

/// 400 Initials from 400 ports (with `addresses`, from 400 addresses of 127.0.0.0/8) against
/// `retry_threshold: 10`, while an established client keeps asking: each of its requests is
/// answered within 5 s (the flood does not starve it), and the flood holds nothing.
async fn flood_while_answering(addresses: bool) {
    const FLOOD: usize = 400;
    const ANSWERED_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);
    let stack = Stack::start_quic("{ retry_threshold: 10 }");
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, None, false));
    let get = json!([{"path": "/echo?before"}]);
    assert_eq!(tokio::task::block_in_place(|| session.requests(&get))[0]["status"], 200);

    let flood = tokio::task::spawn_blocking(move || h3::flood(port, FLOOD, addresses));
    // The established connection is answered while the flood arrives.
    let mut answered = 0;
    while !flood.is_finished() && answered < 50 {
        let asked = std::time::Instant::now();
        let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo?during"}])));
        assert_eq!(responses[0]["status"], 200, "{responses:?}");
        assert!(asked.elapsed() < ANSWERED_WITHIN, "answered after {:?} during the flood", asked.elapsed());
        answered += 1;
    }
    assert!(answered > 0, "no request was made while the flood arrived");
    assert_eq!(flood.await.expect("the flood"), FLOOD);
    let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo?after"}])));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");

    // Past the threshold, Retry: the flood's spoofable sources hold nothing.
    let retries = stack.stat("quic_retry_sent").as_u64().expect("a count");
    assert!(retries as usize >= FLOOD - 10 - 1, "{retries} Retry packets for {FLOOD} attempts past 10 under way");
    // One connected socket: the established client's; none for a handshake that never ended.
    assert_eq!(h3::connected_udp_peers(port).len(), 1, "{:?}", h3::connected_udp_peers(port));
    let open = stack.stat("scur").as_u64().expect("a count");
    assert!(open <= 1 + 10, "{open}: the real client and at most 10 handshakes under way");
    assert!(tokio::task::block_in_place(|| session.close()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_refuses_our_certificate_is_counted_by_reason() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    // No certificate names nowhere.example.test: the default one is sent and the client refuses it.
    let error = tokio::task::block_in_place(|| h3::refused(port, "nowhere.example.test", &ca));
    assert!(error.contains("hostname") || error.contains("certificate"), "{error}");
    assert_eq!(stack.stat_becomes("hs_fail_certificate", json!(1)).await, 1, "the client's bad_certificate alert");
    assert_eq!(stack.stat("ssl_failed_handshake"), 1);
    let sample = format!(
        "lb_tls_frontend_failed_handshakes_total{{frontend=\"udp:127.0.0.1:{port}\",reason=\"certificate\"}} 1"
    );
    assert!(stack.metrics().lines().any(|l| l == sample), "{sample} in {}", stack.metrics());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crypto_data_past_the_buffer_or_the_message_limit_closes_that_connection_only() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, None, false));
    assert_eq!(tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo?before"}])))[0]["status"], 200);

    // 100 bytes 20,000 ahead of anything read: more than the 16 KiB lb-tls holds out of order.
    let gap = tokio::task::block_in_place(|| h3::hostile_crypto(port, "gap"));
    assert_eq!(gap["closed"], true, "{gap}");
    assert_eq!(gap["error_code"], 0x0d, "CRYPTO_BUFFER_EXCEEDED: {gap}");
    // A ClientHello claiming 16 MiB: refused by the TLS library, not buffered.
    let oversized = tokio::task::block_in_place(|| h3::hostile_crypto(port, "oversized"));
    assert_eq!(oversized["closed"], true, "{oversized}");

    let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo?after"}])));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(
        stack.stat_becomes("ssl_failed_handshake", json!(2)).await,
        2,
        "both hostile handshakes counted as failed"
    );
    assert_eq!(stack.stat("scur"), 1, "only the real client's connection is open");
    assert_eq!(h3::connected_udp_peers(port).len(), 1, "{:?}", h3::connected_udp_peers(port));
    assert!(tokio::task::block_in_place(|| session.close()));
}
