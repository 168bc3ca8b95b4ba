//! Rise/fall counting, probes against real local listeners, and the check task end to end.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use lb_config::{AdminState, Balance, CheckKind};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use super::{probe, transition_line, CheckResult, CheckStatus, Counter};
use crate::backend::tests::{backend_config, config_with, server_config};
use crate::backend::{BackendState, Backends, ServerState};
use lb_supervisor as shutdown;

const LOCALHOST: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// A port on which nothing listens (bound, then released).
async fn closed_port() -> SocketAddr {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.expect("bind");
    listener.local_addr().expect("local addr")
}

/// A TCP listener that accepts and holds connections, saying nothing.
async fn silent_listener(addr: SocketAddr) -> tokio::task::JoinHandle<()> {
    let listener = TcpListener::bind(addr).await.expect("bind");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    })
}

/// An HTTP/1.1 responder answering every request with the status in `status` (0: garbage),
/// recording each request head.
struct Responder {
    addr: SocketAddr,
    status: Arc<AtomicU16>,
    requests: Arc<Mutex<Vec<String>>>,
}

async fn responder(status: u16) -> Responder {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let status = Arc::new(AtomicU16::new(status));
    let requests = Arc::new(Mutex::new(Vec::new()));
    let (st, reqs) = (Arc::clone(&status), Arc::clone(&requests));
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let (st, reqs) = (Arc::clone(&st), Arc::clone(&reqs));
            tokio::spawn(async move {
                let mut head = Vec::new();
                let mut chunk = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&chunk[..n]),
                    }
                }
                reqs.lock().expect("lock").push(String::from_utf8_lossy(&head).into_owned());
                let response = match st.load(Ordering::SeqCst) {
                    0 => "SSH-2.0-OpenSSH_9.6\r\n\r\n".to_owned(),
                    code => format!("HTTP/1.1 {code} Whatever\r\ncontent-length: 2\r\nconnection: close\r\n\r\nok"),
                };
                let _ = stream.write_all(response.as_bytes()).await;
                let _ = stream.shutdown().await;
            });
        }
    });
    Responder { addr, status, requests }
}

fn http_kind(host: Option<&str>, expect_status: u16) -> CheckKind {
    CheckKind::Http {
        method: "GET".to_owned(),
        path: "/health".to_owned(),
        host: host.map(str::to_owned),
        expect_status,
    }
}

/// A backend of one checked server at `addr`.
fn checked_backend(addr: SocketAddr, kind: CheckKind, interval_ms: u64, rise: u32, fall: u32) -> Arc<BackendState> {
    let mut server = server_config("api1", addr.port(), 1);
    server.check = true;
    let mut config = backend_config("secure_api", Balance::LeastConn, vec![server]);
    config.health_check.kind = kind;
    config.health_check.interval = Duration::from_millis(interval_ms);
    config.health_check.rise = rise;
    config.health_check.fall = fall;
    config.timeouts.check = Duration::from_millis(500);
    Arc::new(BackendState::new(config))
}

/// Start the check task of every checked server of `backend`.
fn start_checks(backend: &Arc<BackendState>, shutdown: shutdown::Shutdown) {
    for server in backend.servers().iter().filter(|s| s.config().check) {
        tokio::spawn(super::check_loop(Arc::clone(backend), Arc::clone(server), shutdown.clone()));
    }
}

/// Wait up to `limit` for the server's health to be `up`; the time it took.
async fn wait_health(server: &ServerState, up: bool, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if server.is_up() == up {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

#[test]
fn counter_follows_rise_and_fall() {
    let mut c = Counter::new(2, 3);
    // Up: two failures are not enough, a success in between starts over.
    assert_eq!(c.record(true, false, false), None);
    assert_eq!(c.record(true, false, false), None);
    assert!(c.transitioning());
    assert_eq!(c.record(true, true, false), None);
    assert!(!c.transitioning());
    assert_eq!(c.record(true, false, false), None);
    assert_eq!(c.record(true, false, false), None);
    assert_eq!(c.record(true, false, false), Some(false));
    assert!(!c.transitioning());
    // Down: rise successes bring it up; a failure starts over.
    assert_eq!(c.record(false, true, false), None);
    assert!(c.transitioning());
    assert_eq!(c.record(false, false, false), None);
    assert_eq!(c.record(false, true, false), None);
    assert_eq!(c.record(false, true, false), Some(true));
    // A failure seen on traffic counts as one more failure, only when up.
    assert_eq!(c.record(true, false, true), None);
    assert_eq!(c.record(true, false, false), Some(false));
    assert_eq!(c.record(false, true, true), None);
    // Zero rise/fall act as 1.
    let mut c = Counter::new(0, 0);
    assert_eq!(c.record(true, false, false), Some(false));
    assert_eq!(c.record(false, true, false), Some(true));
}

#[test]
fn transition_lines_read_like_haproxy() {
    let down = CheckResult {
        status: CheckStatus::L4Con,
        code: None,
        info: Some("Connection refused".to_owned()),
        duration: Duration::from_micros(300),
        at: None,
    };
    assert_eq!(
        transition_line("secure_api", "api1", false, &down, 1),
        "Server secure_api/api1 is DOWN, reason: Layer4 connection problem, \
         info: \"Connection refused\", check duration: 0ms. 1 active servers left."
    );
    let up = CheckResult {
        status: CheckStatus::L7Ok,
        code: Some(200),
        info: None,
        duration: Duration::from_millis(3),
        at: None,
    };
    assert_eq!(
        transition_line("secure_api", "api1", true, &up, 2),
        "Server secure_api/api1 is UP, reason: Layer7 check passed, code: 200, \
         check duration: 3ms. 2 active servers online."
    );
    assert_eq!(CheckStatus::L7Status.to_string(), "L7STS");
    assert_eq!(CheckResult::default().status.as_str(), "INI");
}

#[tokio::test]
async fn tcp_probe_passes_on_a_listener_and_fails_on_a_closed_port() {
    let listener = TcpListener::bind((LOCALHOST, 0)).await.expect("bind");
    let addr = listener.local_addr().expect("local addr");
    let ok = probe::run(&CheckKind::Tcp, addr, Duration::from_secs(1)).await;
    assert_eq!(ok.status, CheckStatus::L4Ok);
    assert!(ok.at.is_some());

    let bad = probe::run(&CheckKind::Tcp, closed_port().await, Duration::from_secs(1)).await;
    assert_eq!(bad.status, CheckStatus::L4Con);
    assert_eq!(bad.info.as_deref(), Some("Connection refused"));
}

#[tokio::test]
async fn http_probe_checks_the_status() {
    let server = responder(200).await;
    let ok = probe::run(&http_kind(None, 200), server.addr, Duration::from_secs(1)).await;
    assert_eq!((ok.status, ok.code, ok.info.as_deref()), (CheckStatus::L7Ok, Some(200), None));

    server.status.store(500, Ordering::SeqCst);
    let kind = http_kind(Some("api.internal"), 200);
    let bad = probe::run(&kind, server.addr, Duration::from_secs(1)).await;
    assert_eq!(bad.status, CheckStatus::L7Status);
    assert_eq!(bad.code, Some(500));
    assert_eq!(bad.info.as_deref(), Some("Internal Server Error"));

    // Expecting another status: 500 is then a pass.
    let expect_500 = probe::run(&http_kind(None, 500), server.addr, Duration::from_secs(1)).await;
    assert_eq!(expect_500.status, CheckStatus::L7Ok);

    let requests = server.requests.lock().expect("lock").clone();
    assert_eq!(requests.len(), 3);
    let first = requests[0].to_ascii_lowercase();
    assert!(first.starts_with("get /health http/1.1\r\n"), "{first}");
    assert!(first.contains(&format!("host: {}\r\n", server.addr)), "{first}");
    assert!(first.contains("user-agent: lb-proxy-check\r\n"), "{first}");
    assert!(first.contains("connection: close\r\n"), "{first}");
    assert!(requests[1].to_ascii_lowercase().contains("host: api.internal\r\n"));
}

#[tokio::test]
async fn http_probe_failures_are_classified() {
    // Not HTTP.
    let garbage = responder(0).await;
    let r = probe::run(&http_kind(None, 200), garbage.addr, Duration::from_secs(1)).await;
    assert_eq!(r.status, CheckStatus::L7Response);
    assert!(r.info.is_some());

    // Accepts, never answers: a timeout within the check timeout.
    let addr = closed_port().await;
    let _silent = silent_listener(addr).await;
    let start = Instant::now();
    let r = probe::run(&http_kind(None, 200), addr, Duration::from_millis(200)).await;
    assert_eq!(r.status, CheckStatus::L7Timeout);
    assert!(start.elapsed() < Duration::from_secs(1));
    assert!(r.duration >= Duration::from_millis(190));

    // Nothing there.
    let r = probe::run(&http_kind(None, 200), closed_port().await, Duration::from_secs(1)).await;
    assert_eq!(r.status, CheckStatus::L4Con);

    // A method that cannot be sent.
    let bad = CheckKind::Http { method: "G E T".to_owned(), path: "/".to_owned(), host: None, expect_status: 200 };
    let r = probe::run(&bad, garbage.addr, Duration::from_secs(1)).await;
    assert_eq!(r.status, CheckStatus::L7Response);
}

#[tokio::test]
async fn closed_port_goes_down_after_fall_and_back_up_after_rise() {
    let addr = closed_port().await;
    let interval = 300;
    let backend = checked_backend(addr, CheckKind::Tcp, interval, 2, 3);
    let server = Arc::clone(&backend.servers()[0]);
    assert!(server.is_up(), "checked servers start up");
    let (handle, shutdown) = shutdown::shutdown_channel();
    start_checks(&backend, shutdown);

    // First check within one interval, then two more at the fast interval (100 ms).
    let took = wait_health(&server, false, Duration::from_secs(3)).await.expect("goes down");
    assert!(took < Duration::from_millis(interval + 2 * 100 + 500), "down after {took:?}");
    assert_eq!(server.last_check().status, CheckStatus::L4Con);
    assert!(backend.pick(&[]).is_none());
    assert!(!backend.has_usable_server());

    // Listen again on the same port: up after two passing checks.
    let _listener = silent_listener(addr).await;
    let took = wait_health(&server, true, Duration::from_secs(3)).await.expect("comes back");
    assert!(took < Duration::from_millis(interval + 100 + 500), "up after {took:?}");
    assert_eq!(server.last_check().status, CheckStatus::L4Ok);
    assert!(backend.pick(&[]).is_some());
    handle.drain();
}

#[tokio::test]
async fn http_check_follows_the_status() {
    let server_http = responder(200).await;
    let backend = checked_backend(server_http.addr, http_kind(None, 200), 200, 1, 2);
    let server = Arc::clone(&backend.servers()[0]);
    let (handle, shutdown) = shutdown::shutdown_channel();
    start_checks(&backend, shutdown);

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(server.is_up());
    assert_eq!(server.last_check().status, CheckStatus::L7Ok);
    assert_eq!(server.last_check().code, Some(200));

    server_http.status.store(503, Ordering::SeqCst);
    wait_health(&server, false, Duration::from_secs(2)).await.expect("goes down on 503");
    let last = server.last_check();
    assert_eq!((last.status, last.code), (CheckStatus::L7Status, Some(503)));

    server_http.status.store(200, Ordering::SeqCst);
    wait_health(&server, true, Duration::from_secs(2)).await.expect("back up on 200");
    handle.drain();
}

#[tokio::test]
async fn a_failed_connect_on_traffic_triggers_a_check_at_once() {
    let addr = closed_port().await;
    // A long interval: only the triggered checks can bring it down in time.
    let backend = checked_backend(addr, CheckKind::Tcp, 30_000, 2, 2);
    let server = Arc::clone(&backend.servers()[0]);
    let (handle, shutdown) = shutdown::shutdown_channel();
    start_checks(&backend, shutdown);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(server.is_up());

    server.observe_connect(true);
    server.observe_connect(false);
    server.observe_connect(false);
    let took = wait_health(&server, false, Duration::from_secs(2)).await.expect("goes down");
    assert!(took < Duration::from_millis(1000), "down after {took:?}");
    // Down: more failures change nothing.
    server.observe_connect(false);
    assert!(!server.take_observed_failure());
    handle.drain();
}

#[tokio::test]
async fn maintenance_suspends_checks_and_draining_stops_them() {
    let addr = closed_port().await;
    let backend = checked_backend(addr, CheckKind::Tcp, 100, 1, 1);
    let server = Arc::clone(&backend.servers()[0]);
    backend.set_admin_state(&server, AdminState::Maint);
    let (handle, shutdown) = shutdown::shutdown_channel();
    start_checks(&backend, shutdown);

    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(server.is_up(), "not checked in maintenance");
    assert_eq!(server.last_check().status, CheckStatus::Init);

    backend.set_admin_state(&server, AdminState::Ready);
    let took = wait_health(&server, false, Duration::from_secs(1)).await.expect("checked again");
    assert!(took < Duration::from_millis(500), "checked after {took:?}");

    // After a drain, no more checks: a listener appearing does not bring it back.
    handle.drain();
    tokio::time::sleep(Duration::from_millis(50)).await;
    let _listener = silent_listener(addr).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!server.is_up());
}

#[tokio::test]
async fn spawn_health_checks_starts_only_checked_servers() {
    let addr = closed_port().await;
    let mut checked = server_config("checked", addr.port(), 1);
    checked.check = true;
    let unchecked = server_config("unchecked", addr.port(), 1);
    let mut config = backend_config("be", Balance::RoundRobin, vec![checked, unchecked]);
    config.health_check.interval = Duration::from_millis(100);
    config.health_check.fall = 1;
    let backends = Backends::new(&config_with(vec![config]));
    let (handle, shutdown) = shutdown::shutdown_channel();
    super::spawn_health_checks(&backends, shutdown);

    let be = backends.get("be").expect("be");
    wait_health(&be.servers()[0], false, Duration::from_secs(1)).await.expect("checked");
    assert!(be.servers()[1].is_up(), "unchecked servers are always up");
    assert_eq!(be.servers()[1].last_check().status, CheckStatus::Init);
    be.servers()[1].observe_connect(false);
    assert!(be.servers()[1].is_up());
    handle.drain();
}
