//! HTTP/3 clients that change address: a client whose source port changes mid-connection
//! (a phone moving between networks, a NAT rebinding) keeps its QUIC connection, its requests
//! are answered, and the connection follows it through a reload.

mod h3;

use h3::{Session, Stack};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_changes_its_source_port_keeps_its_connection() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, None, false));
    let get = json!([{"path": "/echo?before"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&get));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");

    let new_port = tokio::task::block_in_place(|| session.migrate());
    let get = json!([{"path": "/echo?after"}, {"path": "/bytes?n=500000"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&get));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(responses[1]["length"], 500_000, "{responses:?}");
    let state = tokio::task::block_in_place(|| session.state());
    assert_eq!(state["closed"], false, "{state}");
    // The worker took a connected socket towards the client's new port, and counted the move.
    let remote = h3::connected_udp_peers(port);
    assert!(remote.contains(&new_port), "a connected socket towards port {new_port}: {remote:?}");
    assert_eq!(stack.stat("quic_conn_migration_done"), 1);
    assert!(stack.info().lines().any(|l| l == "QuicConnMigrations: 1"), "{}", stack.info());
    let sample = format!("lb_tls_frontend_quic_migrations_total{{frontend=\"udp:127.0.0.1:{port}\"}} 1");
    assert!(stack.metrics().lines().any(|l| l == sample), "{sample} in {}", stack.metrics());

    // A reload during a request: the connection stays with its worker, which reads the client's
    // new port on its connected socket (the shared one is the new worker's now); the request
    // finishes there, and the draining worker says GOAWAY.
    let reloaded = tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        stack.tls.reload().await.expect("reload");
        stack
    });
    let slow = json!([{"path": "/slow?ms=2000"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&slow));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    assert_eq!(responses[0]["body"], "api", "{responses:?}");
    let _stack = reloaded.await.expect("the reload");
    let state = tokio::task::block_in_place(|| session.state());
    assert!(state["goaway"].is_u64(), "the draining worker sent GOAWAY: {state}");
}
