//! SIGTERM drains: no new connections, idle ones closed, requests in flight finish, then the
//! process exits 0. A second signal stops at once.

use std::time::Duration;

use lb_testkit::client::{self, Connection};
use lb_testkit::{single_backend, wait_until, ProxyProcess, Signal, TestServer};
use tokio::net::TcpStream;

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    let head = "defaults:\n  timeouts: { connect: 1s, client: 20s, server: 20s, http_keep_alive: 20s }\n";
    single_backend(head, "", ("s1", server.addr()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_drains_in_flight_requests_then_exits_0() {
    let s1 = TestServer::start("s1");
    let mut proxy = ProxyProcess::start_with(1, config(&s1));
    let addr = proxy.addr();

    let mut idle = Connection::open(addr).await.expect("connect");
    assert_eq!(idle.get("/before").await.expect("request").status, 200);
    let slow = tokio::spawn(async move { client::get(addr, "/slow?ms=1500").await });
    assert!(wait_until(Duration::from_secs(10), || s1.in_flight() == 1).await);

    proxy.kill_with(Signal::SIGTERM);
    // New connections are refused once the listener is closed.
    let refused = wait_until_async_refused(addr).await;
    assert!(refused, "the proxy still accepts connections after SIGTERM");
    // The idle keep-alive connection is closed.
    assert!(
        wait_until(Duration::from_secs(5), || idle.is_closed()).await,
        "the idle connection was not closed on drain"
    );
    // The request in flight completes.
    let r = slow.await.expect("task").expect("the request in flight is finished during the drain");
    assert_eq!(r.status, 200);
    assert_eq!(r.header("connection"), Some("close"), "a response during the drain closes its connection");
    let status = proxy.wait_exit(Duration::from_secs(10)).await.expect("the proxy exits once drained");
    assert_eq!(status.code(), Some(0), "{status}");
}

async fn wait_until_async_refused(addr: std::net::SocketAddr) -> bool {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        if TcpStream::connect(addr).await.is_err() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_signal_stops_at_once() {
    let s1 = TestServer::start("s1");
    let mut proxy = ProxyProcess::start_with(1, config(&s1));
    let addr = proxy.addr();
    let _slow = tokio::spawn(async move { client::get(addr, "/slow?ms=15000").await });
    assert!(wait_until(Duration::from_secs(10), || s1.in_flight() == 1).await);
    proxy.kill_with(Signal::SIGTERM);
    assert!(wait_until_async_refused(addr).await, "the first signal starts the drain");
    assert!(proxy.try_exit().is_none(), "a request is in flight: the first signal only drains");
    proxy.kill_with(Signal::SIGTERM);
    let status = proxy.wait_exit(Duration::from_secs(5)).await;
    assert!(status.is_some(), "the second signal stops the proxy at once");
}
