//! HTTP/3's transport as a client sees it: `quic.max_streams` makes a client that opens more
//! requests at once wait for stream credit (none refused); on a path that loses datagrams the
//! requests still complete and the lost packets are counted (`quic_lost_pkt`, /metrics); a
//! connection's UDP bytes show in the statistics while it lasts, not only once it closes; one
//! connection serves many more requests than `max_streams` over its life, one after another and
//! at once.

mod h3;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use h3::{Session, Stack};
use serde_json::{json, Value};
use tokio::net::UdpSocket;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_past_max_streams_waits_for_credit_and_every_request_completes() {
    let stack = Stack::start_quic("{ max_streams: 2 }");
    let (port, ca) = (stack.port, stack.certs.ca());
    // Eight requests at once on one connection, each 300 ms at the server.
    let requests: Vec<Value> = (0..8).map(|i| json!({"path": format!("/slow?ms=300&n={i}")})).collect();
    let responses = tokio::task::block_in_place(|| h3::h3(port, "api.example.test", &ca, &Value::Array(requests)));
    assert_eq!(responses.len(), 8);
    for r in &responses {
        assert_eq!(r["status"], 200, "{r}");
    }
    assert_eq!(stack.api.hits_for("/slow"), 8);
    // Two at a time reached the server: the others waited for the client's credit.
    assert_eq!(stack.api.peak_in_flight(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_connection_outlives_max_streams_one_request_after_another_and_many_at_once() {
    // The default max_streams, 100: each finished request gives its stream back, and the client
    // is granted new ones as it goes, well past the 100 it was first allowed.
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, None, false));
    for i in 0..150 {
        let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": format!("/echo?n={i}")}])));
        assert_eq!(responses[0]["status"], 200, "request {i}: {responses:?}");
    }
    // Then 250 at once, each 200 ms at the server: at most 100 at a time reach it, the others
    // wait for stream credit, and none is refused.
    let requests: Vec<Value> = (0..250).map(|i| json!({"path": format!("/slow?ms=200&n={i}")})).collect();
    let responses = tokio::task::block_in_place(|| session.requests(&Value::Array(requests)));
    assert_eq!(responses.len(), 250);
    for r in &responses {
        assert_eq!(r["status"], 200, "{r}");
    }
    assert_eq!(stack.api.hits_for("/echo"), 150);
    assert_eq!(stack.api.hits_for("/slow"), 250);
    assert!(stack.api.peak_in_flight() <= 100, "{} requests in flight at once", stack.api.peak_in_flight());
    let state = tokio::task::block_in_place(|| session.state());
    assert_eq!(state["closed"], false, "{state}");
    assert!(tokio::task::block_in_place(|| session.close()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_complete_over_a_lossy_path_and_lost_packets_are_counted() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    // Every 20th datagram dropped each way (5 %), after the handshake's first few.
    let relay = Lossy::start(port, 20).await;
    let relay_port = relay.port;
    let requests: Vec<Value> = (0..10).map(|i| json!({"path": format!("/bytes?n=200000&i={i}")})).collect();
    let responses =
        tokio::task::block_in_place(|| h3::h3(relay_port, "api.example.test", &ca, &Value::Array(requests)));
    assert_eq!(responses.len(), 10);
    for r in &responses {
        assert_eq!(r["status"], 200, "{r}");
        assert_eq!(r["length"], 200_000, "{r}");
    }
    assert!(relay.dropped.load(Ordering::Relaxed) > 50, "{} dropped", relay.dropped.load(Ordering::Relaxed));

    let mut lost = 0;
    for _ in 0..100 {
        lost = stack.stat("quic_lost_pkt").as_u64().expect("a count");
        if lost > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(lost > 0, "no lost packet counted after {} datagrams dropped", relay.dropped.load(Ordering::Relaxed));
    let metrics = stack.metrics();
    let line = metrics
        .lines()
        .find(|l| {
            l.starts_with(&format!("lb_tls_frontend_quic_lost_packets_total{{frontend=\"udp:127.0.0.1:{port}\"}}"))
        })
        .unwrap_or_else(|| panic!("no lost packets sample in {metrics}"));
    let sampled: u64 = line.rsplit(' ').next().and_then(|v| v.parse().ok()).expect("a count");
    assert!(sampled > 0, "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn udp_bytes_are_counted_while_the_connection_lasts() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| Session::open(port, &ca, None, false));
    let responses = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/bytes?n=100000"}])));
    assert_eq!(responses[0]["status"], 200, "{responses:?}");
    // The connection stays open: its bytes show within a few seconds all the same.
    let (mut bin, mut bout) = (0, 0);
    for _ in 0..60 {
        bin = stack.stat("bin").as_u64().expect("a count");
        bout = stack.stat("bout").as_u64().expect("a count");
        if bout >= 100_000 && bin > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(bout >= 100_000, "{bout} bytes out for a 100,000-byte response on an open connection");
    assert!(bin > 0, "{bin} bytes in");
    assert_eq!(stack.stat("scur"), 1, "still open");
    assert!(tokio::task::block_in_place(|| session.close()));
}

/// A UDP relay between one client and lb-tls's `target` port, dropping every `nth` datagram
/// each way (none of the first 10, so that the handshake goes through at its usual pace).
struct Lossy {
    port: u16,
    dropped: Arc<AtomicUsize>,
    task: tokio::task::JoinHandle<()>,
}

impl Lossy {
    async fn start(target: u16, nth: usize) -> Lossy {
        let front = UdpSocket::bind("127.0.0.1:0").await.expect("bind the relay");
        let back = UdpSocket::bind("127.0.0.1:0").await.expect("bind the relay");
        back.connect(("127.0.0.1", target)).await.expect("connect the relay");
        let port = front.local_addr().expect("an address").port();
        let dropped = Arc::new(AtomicUsize::new(0));
        let counted = dropped.clone();
        let task = tokio::spawn(async move {
            let (mut up, mut down) = (0usize, 0usize);
            let mut client: Option<SocketAddr> = None;
            let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
            loop {
                tokio::select! {
                    Ok((n, from)) = front.recv_from(&mut a) => {
                        client = Some(from);
                        up += 1;
                        if up > 10 && up % nth == 0 {
                            counted.fetch_add(1, Ordering::Relaxed);
                        } else {
                            let _ = back.send(&a[..n]).await;
                        }
                    }
                    Ok(n) = back.recv(&mut b) => {
                        down += 1;
                        if down > 10 && down % nth == 0 {
                            counted.fetch_add(1, Ordering::Relaxed);
                        } else if let Some(to) = client {
                            let _ = front.send_to(&b[..n], to).await;
                        }
                    }
                }
            }
        });
        Lossy { port, dropped, task }
    }
}

impl Drop for Lossy {
    fn drop(&mut self) {
        self.task.abort();
    }
}
