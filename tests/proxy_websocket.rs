//! WebSocket upgrades through lb-proxy, with a real WebSocket server and client
//! (python3-websockets): the 101 turns the connection into a tunnel that carries messages both
//! ways; it is logged once when it ends (status 101, every byte); `timeouts.tunnel` replaces the
//! client and server timeouts; a reload leaves an open tunnel on the old worker until it ends;
//! an upgrade the server does not take is an ordinary exchange; `h2c` is never passed on; and
//! the same through lb-tls (`wss://`).

use std::time::Duration;

use lb_testkit::lbctl::{workers_in, Role};
use lb_testkit::log::HttpLogLine;
use lb_testkit::raw::RawConn;
use lb_testkit::runtime::parse_stat_csv;
use lb_testkit::websocket::{talk, WsServer};
use lb_testkit::{single_backend, wait_until, ProxyProcess, TestServer, TlsChain};

fn proxy_for(server: std::net::SocketAddr, timeouts: &str) -> ProxyProcess {
    let head = format!("defaults:\n  timeouts: {{ {timeouts} }}\n");
    ProxyProcess::start_with(1, single_backend(&head, "", ("ws1", server)))
}

async fn log_line(proxy: &ProxyProcess, path: &str) -> HttpLogLine {
    let line = proxy.wait_for_log(|l| l.contains(&format!("\"GET {path} HTTP/1.1\""))).await;
    HttpLogLine::parse(&line).unwrap_or_else(|| panic!("not httplog: {line}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_carries_messages_both_ways_and_is_logged_when_it_ends() {
    let ws = WsServer::start();
    let proxy = proxy_for(ws.addr(), "client: 10s, server: 10s");
    let url = format!("ws://{}/chat", proxy.addr());

    let talked = talk(&url, 50, Duration::ZERO).await;
    assert_eq!(talked.echoed, 50, "{talked:?}");
    assert_eq!(talked.closed.as_deref(), Some("4000"), "the server's close frame reaches the client: {talked:?}");
    let headers = talked.headers.clone().unwrap_or_else(|| panic!("no headers: {talked:?}"));
    assert_eq!(headers["upgrade"], "websocket", "{headers}");
    assert_eq!(headers["connection"], "upgrade", "{headers}");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "{headers}");
    assert!(headers["sec-websocket-key"].is_string(), "{headers}");

    let line = log_line(&proxy, "/chat").await;
    assert_eq!((line.status, line.termination.as_str(), line.server.as_str()), (101, "----", "ws1"), "{line:?}");
    assert!(line.bytes > 200, "the 101 and every frame sent to the client are counted: {line:?}");

    // Its connection is no longer counted, and the tunnel went into the counters as one 101
    // response whose bytes are all there.
    assert!(wait_until(Duration::from_secs(5), || proxy.runtime("show info").contains("\nCurrConns: 0\n")).await);
    let text = proxy.runtime("show stat");
    let (_, rows) = parse_stat_csv(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    for (px, sv) in [("fe", "FRONTEND"), ("be", "BACKEND"), ("be", "ws1")] {
        let row = rows.iter().find(|r| r["pxname"] == px && r["svname"] == sv).expect("a row");
        assert_eq!(row["hrsp_1xx"], "1", "{px}/{sv}: {row:?}");
        assert_eq!(row["bout"], line.bytes.to_string(), "{px}/{sv}: {row:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tunnel_timeout_replaces_client_and_server_timeouts() {
    let ws = WsServer::start();
    let proxy = proxy_for(ws.addr(), "client: 300ms, server: 300ms, tunnel: 2s");
    let url = format!("ws://{}/quiet", proxy.addr());

    // Silences longer than the client and server timeouts, shorter than the tunnel's: kept.
    let talked = talk(&url, 3, Duration::from_millis(800)).await;
    assert_eq!((talked.echoed, talked.closed.as_deref()), (3, Some("4000")), "{talked:?}");
    let line = log_line(&proxy, "/quiet").await;
    assert_eq!((line.status, line.termination.as_str()), (101, "----"), "{line:?}");

    // A silence longer than the tunnel's timeout: closed by the proxy, and logged as a timeout.
    let url = format!("ws://{}/silent", proxy.addr());
    let talked = talk(&url, 2, Duration::from_millis(3500)).await;
    assert_eq!(talked.echoed, 1, "the second message finds the tunnel closed: {talked:?}");
    assert_eq!(talked.closed.as_deref(), Some("abnormally"), "{talked:?}");
    let line = log_line(&proxy, "/silent").await;
    assert_eq!((line.status, line.termination.as_str()), (101, "cD--"), "{line:?}");
    assert!((2000..3500).contains(&line.ta), "ended by the 2 s tunnel timeout: {line:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_leaves_an_open_websocket_on_the_old_worker_until_it_ends() {
    let ws = WsServer::start();
    let proxy = proxy_for(ws.addr(), "client: 10s, server: 10s");
    let url = format!("ws://{}/long", proxy.addr());
    let first = proxy.current_worker().await.expect("a worker");

    // 40 messages over about 4 s; the reload comes in the middle.
    let long = tokio::spawn(async move { talk(&url, 40, Duration::from_millis(100)).await });
    assert!(
        wait_until(Duration::from_secs(10), || proxy.runtime("show info").contains("\nCurrConns: 1\n")).await,
        "the tunnel opened"
    );
    proxy.reload().await.expect("reload");
    let table = proxy.show_proc().await;
    let old = workers_in(&table, Role::Old);
    assert_eq!(old.len(), 1, "{table:?}");
    assert_eq!((old[0].pid, old[0].connections), (first, Some(1)), "the old worker keeps the tunnel: {table:?}");

    // New connections go to the new worker meanwhile, tunnels included.
    let talked = talk(&format!("ws://{}/new", proxy.addr()), 5, Duration::ZERO).await;
    assert_eq!(talked.echoed, 5, "{talked:?}");

    let talked = long.await.expect("the long talk");
    assert_eq!((talked.echoed, talked.closed.as_deref()), (40, Some("4000")), "not one message lost: {talked:?}");
    let line = log_line(&proxy, "/long").await;
    assert_eq!((line.pid, line.status, line.termination.as_str()), (first, 101, "----"), "{line:?}");
    // Its last connection gone, the old worker exits.
    let mut proxy = proxy;
    let gone = wait_until(Duration::from_secs(10), || {
        let table = lb_testkit::lbctl::lbctl_blocking(proxy.control_socket(), &["--json", "show", "proc"]);
        !table.stdout.contains("\"old\"")
    })
    .await;
    assert!(gone, "the old worker exits once its tunnel has ended");
    proxy.stop();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_the_server_does_not_take_is_an_ordinary_exchange_and_h2c_is_not_passed_on() {
    let s1 = TestServer::start("s1");
    let proxy = proxy_for(s1.addr(), "client: 10s, server: 10s");
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");

    // The server (no WebSocket there) answers 200: the connection stays HTTP, kept alive.
    conn.send("GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n")
        .await
        .expect("send");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo: serde_json::Value = serde_json::from_slice(&r.body).expect("echo JSON");
    assert!(echo.to_string().contains("websocket"), "the upgrade request reached the server as asked: {echo}");

    // h2c: HTTP/2 is not tunnelled to servers; the request goes on as HTTP/1.1 without it.
    conn.send(
        "GET /echo HTTP/1.1\r\nHost: x\r\nConnection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n\
         HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n",
    )
    .await
    .expect("send on the same connection");
    let r = conn.read_response(Duration::from_secs(10)).await.expect("response");
    assert_eq!(r.status, 200, "{}", r.text());
    let echo = String::from_utf8_lossy(&r.body).to_lowercase();
    assert!(!echo.contains("h2c") && !echo.contains("http2-settings"), "h2c reached the server: {echo}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_websocket_through_lb_tls() {
    let ws = WsServer::start();
    let TlsChain { proxy, tls, certs: _certs } = TlsChain::start(ws.addr(), "[ http/1.1 ]");

    let talked = talk(&format!("wss://{}/secure", tls.addr()), 20, Duration::ZERO).await;
    assert_eq!((talked.echoed, talked.closed.as_deref()), (20, Some("4000")), "{talked:?}");
    let headers = talked.headers.clone().unwrap_or_else(|| panic!("no headers: {talked:?}"));
    assert_eq!(headers["x-forwarded-proto"], "https", "{headers}");
    assert_eq!(headers["x-forwarded-for"], "127.0.0.1", "the client's address from PROXY v2: {headers}");
    let line = log_line(&proxy, "/secure").await;
    assert_eq!((line.status, line.termination.as_str()), (101, "----"), "{line:?}");
}
