//! 0-RTT on HTTP/3 (`quic.zero_rtt`): a resumed client's requests sent in early data are
//! answered at once when their method is safe (GET, HEAD, OPTIONS), and reach lb-proxy with
//! `Early-Data: 1`; an unsafe one gets 425 Too Early (RFC 8470) and goes through once sent
//! again after the handshake. A session carries early data once: the same ticket offered a
//! second time (a replay) gets none. Off by default: tickets invite no early data, and a
//! client's first requests wait for the handshake.

mod h3;

use h3::{Session, Stack};
use serde_json::{json, Value};

/// The request headers the test server saw, from its `/echo` answer.
fn sent(response: &Value, name: &str) -> Option<String> {
    let echo: Value = serde_json::from_str(response["body"].as_str()?).ok()?;
    let headers = echo["headers"].as_array()?;
    headers.iter().find(|h| h[0] == name).and_then(|h| h[1].as_str()).map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn early_data_is_taken_for_safe_methods_once_per_session() {
    let stack = Stack::start_quic("{ zero_rtt: true }");
    let (port, ca) = (stack.port, stack.certs.ca());
    let ticket = stack.tls.dir().join("client.ticket");
    let (resumed, responses) = stack.get(&json!([{"path": "/echo"}]), Some(&ticket));
    assert!(!resumed);
    assert_eq!(responses[0]["status"], 200);
    let replay = stack.tls.dir().join("replay.ticket");
    std::fs::copy(&ticket, &replay).expect("a copy of the ticket");

    // Resumed, with requests in early data.
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, Some(ticket.clone()), true));
    let early = json!([
        {"path": "/echo?early"},
        {"method": "POST", "path": "/upload", "body": "not twice"},
        {"method": "OPTIONS", "path": "/echo?options"},
    ]);
    let responses = tokio::task::block_in_place(|| session.requests(&early));
    let state = tokio::task::block_in_place(|| session.state());
    assert_eq!((&state["resumed"], &state["early_data_accepted"]), (&json!(true), &json!(true)), "{state}");
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(sent(&responses[0], "early-data").as_deref(), Some("1"), "{:?}", responses[0]);
    assert_eq!(responses[1]["status"], 425, "an unsafe method in early data: {:?}", responses[1]);
    assert_eq!(responses[2]["status"], 200, "{:?}", responses[2]);
    assert_eq!(stack.api.hits_for("/upload"), 0, "the POST in early data never reached the server");

    // After the handshake, the same requests are ordinary ones.
    let after = json!([{"path": "/echo?after"}, {"method": "POST", "path": "/upload", "body": "not twice"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&after));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(sent(&responses[0], "early-data"), None, "{:?}", responses[0]);
    assert_eq!(responses[1]["status"], 200, "{responses:?}");
    assert_eq!(responses[1]["body"], "9");
    assert!(tokio::task::block_in_place(|| session.close()));

    // The ticket once more, as a replay would: the session was used, no early data.
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, Some(replay), true));
    let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo?replayed"}])));
    let state = tokio::task::block_in_place(|| session.state());
    assert_eq!(state["early_data_accepted"], false, "{state}");
    assert_eq!(responses[0]["status"], 200, "sent again after the handshake: {responses:?}");
    assert_eq!(sent(&responses[0], "early-data"), None, "{:?}", responses[0]);
    assert!(tokio::task::block_in_place(|| session.close()));

    assert_eq!(stack.stat("quic_0rtt_accepted"), 1);
    assert_eq!(stack.stat("quic_0rtt_refused"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn by_default_tickets_invite_no_early_data_and_requests_wait_for_the_handshake() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let ticket = stack.tls.dir().join("client.ticket");
    let (_, responses) = stack.get(&json!([{"path": "/echo"}]), Some(&ticket));
    assert_eq!(responses[0]["status"], 200);

    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, Some(ticket), true));
    let early = json!([{"path": "/echo?early"}, {"method": "POST", "path": "/upload", "body": "once"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&early));
    let state = tokio::task::block_in_place(|| session.state());
    assert_eq!((&state["resumed"], &state["early_data_accepted"]), (&json!(true), &json!(false)), "{state}");
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(sent(&responses[0], "early-data"), None);
    assert_eq!(responses[1]["status"], 200, "{responses:?}");
    assert!(tokio::task::block_in_place(|| session.close()));
    assert_eq!(stack.stat("quic_0rtt_accepted"), 0);
    assert_eq!(stack.stat("quic_0rtt_refused"), 0, "the client was not invited to offer any");
}
