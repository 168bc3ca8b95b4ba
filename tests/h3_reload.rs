//! HTTP/3 across a reload of lb-tls: the UDP socket is the master's and passes to the new
//! worker; a QUIC connection open at the reload stays with the worker that accepted it (its
//! own connected socket, which the kernel prefers for its client's datagrams) and its requests
//! finish there; new connections go to the new worker, and resume sessions whose tickets the
//! old worker made (the master's ticket keys). Under load with a reload every 0.2 s, clients
//! that follow the spec across GOAWAYs lose no request; a connection with a response under
//! way across 10 reloads gets all of it. Across reloads of lb-proxy, an open QUIC connection
//! takes a new hop to the new worker (over the multiplexed hop too) and its client sees nothing;
//! with lb-proxy gone, its requests get 502.

mod h3;

use std::time::Duration;

use h3::Stack;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_leaves_open_quic_connections_on_their_worker() {
    let stack = Stack::start();
    let (port, ca, tls) = (stack.port, stack.certs.ca(), &stack.tls);
    let old = tls.current_worker().await.expect("a current worker");

    // A connection with a slow request and a large response under way across the reload.
    let requests = json!([{"path": "/slow?ms=3000"}, {"path": "/bytes?n=2000000"}]);
    let ca_path = ca.clone();
    let during = std::thread::spawn(move || h3::h3(port, "api.example.test", &ca_path, &requests));
    let mut owned = Vec::new();
    for _ in 0..250 {
        owned = connected_udp_inodes(port);
        if !owned.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let old_sockets = lb_testkit::procfs::socket_inodes(old);
    assert_eq!(owned.len(), 1, "one connected socket for the one QUIC connection");
    assert!(old_sockets.contains(&owned[0]), "the worker that accepted the connection owns its socket");

    tls.reload().await.expect("reload");
    let new = tls.current_worker().await.expect("a current worker");
    assert_ne!(new, old);

    let responses =
        tokio::task::spawn_blocking(move || during.join().expect("the client thread")).await.expect("joined");
    assert_eq!(responses[0]["status"], 200, "{:?}", responses[0]);
    assert_eq!(responses[0]["body"], "api");
    assert_eq!(responses[1]["status"], 200);
    assert_eq!(responses[1]["length"], 2_000_000);

    // A new connection after the reload: the new worker's, on a socket of its own.
    let requests = json!([{"path": "/slow?ms=1000"}]);
    let ca_path = ca.clone();
    let after = std::thread::spawn(move || h3::h3(port, "api.example.test", &ca_path, &requests));
    let mut owner = None;
    for _ in 0..250 {
        if let Some(inode) = connected_udp_inodes(port).first() {
            owner = [old, new].into_iter().find(|pid| lb_testkit::procfs::socket_inodes(*pid).contains(inode));
            if owner.is_some() {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(owner, Some(new), "the new worker took the new connection");
    let responses =
        tokio::task::spawn_blocking(move || after.join().expect("the client thread")).await.expect("joined");
    assert_eq!(responses[0]["status"], 200, "{:?}", responses[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quic_sessions_resume_across_a_reload() {
    let stack = Stack::start();
    let (port, tls) = (stack.port, &stack.tls);
    let ticket = tls.dir().join("client.ticket");
    let get = json!([{"path": "/echo"}]);

    let (resumed, responses) = stack.get(&get, Some(&ticket));
    assert!(!resumed, "the first connection makes a full handshake");
    assert_eq!(responses[0]["status"], 200);
    assert!(ticket.exists(), "the server sent a session ticket");

    tls.reload().await.expect("reload");
    let (resumed, responses) = stack.get(&get, Some(&ticket));
    assert!(resumed, "the new worker opens the old worker's ticket");
    assert_eq!(responses[0]["status"], 200);

    // The UDP frontend's counters, carried across the reload: two handshakes, one resumed.
    let out = lb_testkit::lbctl::lbctl_blocking(&tls.control_socket(), &["--json", "show", "stat"]);
    let rows: serde_json::Value = serde_json::from_str(&out.stdout).expect("show stat JSON");
    let udp = format!("udp:127.0.0.1:{port}");
    let row = rows.as_array().and_then(|r| r.iter().find(|r| r["pxname"] == udp.as_str())).expect("the UDP row");
    assert_eq!((&row["ssl_sess"], &row["ssl_reused_sess"], &row["tls1_3"]), (&json!(2), &json!(1), &json!(2)), "{row}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reloads_every_fifth_of_a_second_under_load_lose_no_request() {
    reloads_under_load(Stack::start(), Daemon::LbTls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_proxy_reloads_every_fifth_of_a_second_under_load_lose_no_request() {
    reloads_under_load(Stack::start(), Daemon::LbProxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_proxy_reloads_under_load_over_the_multiplexed_hop_lose_no_request() {
    reloads_under_load(Stack::start_multiplexed(), Daemon::LbProxy).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_tls_reloads_under_load_over_the_multiplexed_hop_lose_no_request() {
    reloads_under_load(Stack::start_multiplexed(), Daemon::LbTls).await;
}

#[derive(Clone, Copy, PartialEq)]
enum Daemon {
    LbTls,
    LbProxy,
}

/// Three HTTP/3 clients that follow the spec (requests refused as unprocessed, by GOAWAY or
/// H3_REQUEST_REJECTED, go again) while `which` reloads every 0.2 s: none fails, and the
/// server saw each request answered once.
async fn reloads_under_load(stack: Stack, which: Daemon) {
    const CLIENTS: usize = 3;
    const EACH: usize = 1000;
    let (port, ca) = (stack.port, stack.certs.ca());
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let ca = ca.clone();
            std::thread::spawn(move || h3::load(port, &ca, EACH, 20))
        })
        .collect();
    let mut reloads = 0;
    while !clients.iter().all(|c| c.is_finished()) && reloads < 100 {
        tokio::time::sleep(Duration::from_millis(200)).await;
        match which {
            Daemon::LbTls => stack.tls.reload().await.expect("reload lb-tls"),
            Daemon::LbProxy => stack.proxy.reload().await.expect("reload lb-proxy"),
        };
        reloads += 1;
    }
    let mut ok = 0;
    let mut goaways = 0;
    for client in clients {
        let totals = tokio::task::spawn_blocking(move || client.join().expect("a client")).await.expect("joined");
        assert_eq!(totals["failed"], 0, "{totals}");
        ok += totals["ok"].as_u64().expect("a count");
        goaways += totals["goaways"].as_u64().expect("a count");
    }
    assert!(reloads >= 5, "{reloads} reloads under load");
    if which == Daemon::LbTls {
        assert!(goaways >= 1, "the clients were told GOAWAY by draining workers");
    } else {
        // lb-tls's workers stay: their connections move to lb-proxy's new workers unseen.
        assert_eq!(goaways, 0, "lb-proxy's reloads reached the clients");
    }
    assert!(ok >= 1000, "{ok} requests answered");
    // The server's own count: every request answered reached it once, none twice.
    assert_eq!(stack.api.hits_for("/echo") as u64, ok, "{reloads} reloads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_connection_open_across_ten_reloads_gets_its_whole_response() {
    let stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let first = stack.tls.current_worker().await.expect("a current worker");
    let mut session = tokio::task::block_in_place(|| h3::Session::open(port, &ca, None, false));
    // A slow request and a large response on one connection while ten reloads go by. The
    // reloads start once both requests have reached the server: one still in flight when the
    // first GOAWAY goes out would be refused as unprocessed (H3_REQUEST_REJECTED, RFC 9114
    // §5.2), which a client retries on a new connection; this test is about the one connection.
    let reloads = tokio::spawn(async move {
        let received = || stack.api.hits_for("/slow") == 1 && stack.api.hits_for("/bytes") == 1;
        assert!(lb_testkit::wait_until(Duration::from_secs(20), received).await, "both requests reached the server");
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(200)).await;
            stack.tls.reload().await.expect("reload");
        }
        stack
    });
    let requests = json!([{"path": "/slow?ms=3000"}, {"path": "/bytes?n=4000000"}]);
    let responses = tokio::task::block_in_place(|| session.requests(&requests));
    let stack = reloads.await.expect("the reloads");
    assert_eq!(responses[0]["status"], 200, "{:?}", responses[0]);
    assert_eq!(responses[0]["body"], "api");
    assert_eq!(responses[1]["length"], 4_000_000, "{:?}", responses[1]["error"]);
    assert_ne!(stack.tls.current_worker().await, Some(first), "ten reloads happened");
    let state = tokio::task::block_in_place(|| session.state());
    assert!(state["goaway"].is_u64(), "its draining worker said GOAWAY: {state}");
}

/// The inodes of this host's UDP sockets bound to `port` and connected to a peer (IPv4).
fn connected_udp_inodes(port: u16) -> Vec<u64> {
    let text = std::fs::read_to_string("/proc/net/udp").unwrap_or_default();
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (local, remote, inode) = (fields.get(1)?, fields.get(2)?, fields.get(9)?);
            let local_port = u16::from_str_radix(local.rsplit(':').next()?, 16).ok()?;
            let connected = !remote.ends_with(":0000");
            (local_port == port && connected).then(|| inode.parse().ok()).flatten()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_proxy_reloads_cost_an_open_quic_connection_no_request() {
    lb_proxy_reloads_under_an_open_quic_connection(Stack::start()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lb_proxy_reloads_cost_a_multiplexed_quic_connection_no_request() {
    lb_proxy_reloads_under_an_open_quic_connection(Stack::start_multiplexed()).await;
}

/// lb-proxy reloaded three times under one QUIC connection, a request in flight at each reload:
/// that request finishes on the old lb-proxy worker, the next ones go to the new worker (lb-tls
/// takes a new hop once the old one is going away), the client sees no error and no GOAWAY, and
/// each old worker ends its drain while the connection stays open.
async fn lb_proxy_reloads_under_an_open_quic_connection(stack: Stack) {
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| h3::Session::open(port, &ca, None, false));
    let echo = json!([{"path": "/echo"}, {"path": "/echo"}, {"path": "/echo"}]);
    let first = tokio::task::block_in_place(|| session.requests(&echo));
    assert!(first.iter().all(|r| r["status"] == 200), "{first:?}");
    for round in 1..=3 {
        let old = stack.proxy.current_worker().await.expect("a current lb-proxy worker");
        let client = tokio::task::spawn_blocking(move || {
            let slow = session.requests(&json!([{"path": "/slow?ms=2000"}]));
            let after = session.requests(&json!([{"path": "/echo"}, {"path": "/echo"}, {"path": "/echo"}]));
            (slow, after, session)
        });
        let received = || stack.api.hits_for("/slow") == round;
        assert!(lb_testkit::wait_until(Duration::from_secs(20), received).await, "the slow request arrived");
        stack.proxy.reload().await.expect("reload lb-proxy");
        assert!(!client.is_finished(), "round {round}: the reload came while the request was in flight");
        let (slow, after, back) = client.await.expect("the client");
        session = back;
        assert_eq!(slow[0]["status"], 200, "round {round}: the request in flight at the reload: {slow:?}");
        assert!(after.iter().all(|r| r["status"] == 200), "round {round}: after the reload: {after:?}");
        let new = stack.proxy.current_worker().await;
        assert!(new.is_some() && new != Some(old), "round {round}: lb-proxy has a new worker");
        // The old worker ends its drain while the connection stays open: the connection's old
        // hop does not hold it.
        let old_gone = || !stack.proxy.worker_pids().contains(&old);
        assert!(lb_testkit::wait_until(Duration::from_secs(20), old_gone).await, "round {round}: the old worker ended");
    }
    let state = tokio::task::block_in_place(|| session.state());
    assert!(state["goaway"].is_null() && state["closed"] != true, "the client saw no GOAWAY: {state}");
    // The server's own count: each request once.
    assert_eq!(stack.api.hits_for("/slow"), 3);
    assert_eq!(stack.api.hits_for("/echo"), 12);
    assert!(tokio::task::block_in_place(|| session.close()), "the client ended well");
}

/// lb-proxy stopped under an open QUIC connection: its next request cannot get a new hop and is
/// answered 502 (as lb-proxy answers when no server can be reached), said in lb-tls's log; the
/// connection stays usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_lb_proxy_gone_is_answered_502_and_logged() {
    let mut stack = Stack::start();
    let (port, ca) = (stack.port, stack.certs.ca());
    let mut session = tokio::task::block_in_place(|| h3::Session::open(port, &ca, None, false));
    let first = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo"}])));
    assert_eq!(first[0]["status"], 200, "{first:?}");
    stack.proxy.stop();
    let after = tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo"}, {"path": "/echo"}])));
    assert!(after.iter().all(|r| r["status"] == 502), "{after:?}");
    let line = stack.tls.wait_for_stderr(|l| l.contains("answering 502 to a request of an open QUIC connection")).await;
    assert!(line.contains(&stack.proxy.addr().to_string()), "{line}");
    let state = tokio::task::block_in_place(|| session.state());
    assert!(state["closed"] != true, "the connection stays: {state}");
}

/// lb-proxy ends an HTTP/2 connection idle for its `http_keep_alive` (a GOAWAY, then the close),
/// a QUIC connection's hop as any: a QUIC connection idle longer than that takes a new hop for
/// its next requests, and its client sees nothing of it. With either hop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quic_connection_idle_past_lb_proxys_keep_alive_takes_a_new_hop() {
    for multiplex in [false, true] {
        let stack = Stack::start_proxy_timeouts("{ http_keep_alive: 300ms }", multiplex);
        let (port, ca) = (stack.port, stack.certs.ca());
        let mut session = tokio::task::block_in_place(|| h3::Session::open(port, &ca, None, false));
        for round in 0..3 {
            let responses =
                tokio::task::block_in_place(|| session.requests(&json!([{"path": "/echo"}, {"path": "/echo"}])));
            assert!(
                responses.iter().all(|r| r["status"] == 200),
                "multiplex {multiplex}, round {round}: {responses:?}"
            );
            tokio::time::sleep(Duration::from_millis(1000)).await;
        }
        let state = tokio::task::block_in_place(|| session.state());
        assert!(state["goaway"].is_null() && state["closed"] != true, "multiplex {multiplex}: {state}");
        assert_eq!(stack.api.hits_for("/echo"), 6, "multiplex {multiplex}");
    }
}
