//! Runtime commands that change servers, end to end: lb-proxy as a real master and worker, the
//! commands through the control socket (as lbctl and lb-watcher send them) and through the
//! HAProxy-style runtime socket (as `socat` does), real servers behind.
//!
//! Every command lb-watcher sends is here with its exact words: `add server`, `set server …
//! state`, `enable server`, `disable server`, `del server`, and `show servers state` read by
//! its header's column names.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use lb_testkit::runtime::parse_servers_state;
use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

fn config(s1: &TestServer) -> impl Fn(&[u16]) -> String {
    let a1 = s1.addr();
    move |ports: &[u16]| {
        format!(
            r#"defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe}"]
    default_backend: be
backends:
  - name: be
    balance: roundrobin
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 2, fall: 2 }}
    servers:
      - {{ name: s1, address: "{a1}" }}
"#,
            fe = ports[0]
        )
    }
}

/// `n` requests on new connections, all of which must succeed; who answered them.
async fn traffic(proxy: &ProxyProcess, n: usize) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for _ in 0..n {
        let response = client::get(proxy.addr(), "/").await.expect("request");
        assert_eq!(response.status, 200, "{}", response.text());
        *counts.entry(response.server().unwrap_or("?").to_owned()).or_default() += 1;
    }
    counts
}

async fn servers_state(proxy: &ProxyProcess) -> HashMap<String, HashMap<String, String>> {
    let text = proxy.runtime_command("show servers state").await.expect("show servers state");
    let rows = parse_servers_state(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    rows.into_iter().map(|row| (row["srv_name"].clone(), row)).collect()
}

async fn ok(proxy: &ProxyProcess, line: &str) -> String {
    proxy.runtime_ok(line).await
}

async fn refused(proxy: &ProxyProcess, line: &str) -> String {
    proxy.runtime_refused(line).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watcher_commands_add_enable_drain_maint_delete() {
    let s1 = TestServer::start("s1");
    let s2 = TestServer::start("s2");
    let proxy = ProxyProcess::start_with(1, config(&s1));

    // HAProxy 2.6's format: version line, header, one row per server.
    let text = ok(&proxy, "show servers state").await;
    assert!(text.starts_with(
        "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight srv_iweight \
         srv_time_since_last_change srv_check_status srv_check_result srv_check_health srv_check_state \
         srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord"
    ));
    let state = servers_state(&proxy).await;
    let row = &state["s1"];
    assert_eq!((row["be_name"].as_str(), row["srv_id"].as_str()), ("be", "1"));
    assert_eq!((row["srv_addr"].as_str(), row["srv_port"].as_str()), ("127.0.0.1", &*s1.port().to_string()));
    assert_eq!((row["srv_op_state"].as_str(), row["srv_admin_state"].as_str()), ("2", "0"));

    // Added: in maintenance (as HAProxy does), so it takes nothing yet.
    let add = format!("add server be/s2 {} check weight 3", s2.addr());
    assert_eq!(ok(&proxy, &add).await, "New server registered.");
    let state = servers_state(&proxy).await;
    assert_eq!(state["s2"]["srv_admin_state"], "1", "{state:?}");
    assert_eq!((state["s2"]["srv_uweight"].as_str(), state["s2"]["srv_iweight"].as_str()), ("3", "3"));
    assert_eq!(state["s2"]["srv_id"], "2");
    assert_eq!(traffic(&proxy, 6).await.get("s2"), None);

    // Ready: checked first (it starts DOWN), then it takes its share.
    assert_eq!(ok(&proxy, "set server be/s2 state ready").await, "");
    let up = wait_until(Duration::from_secs(10), || {
        let out = proxy.runtime("show servers state be");
        out.lines().any(|l| l.contains(" s2 ") && l.split(' ').nth(5) == Some("2"))
    })
    .await;
    assert!(up, "s2 did not come up: {}", proxy.runtime("show servers state be"));
    assert!(s2.hits_for("/ping") >= 2, "s2 came up after passing its checks");
    let counts = traffic(&proxy, 40).await;
    assert_eq!(counts.get("s2"), Some(&30), "weight 3 against 1: {counts:?}");

    // Drain: no new traffic, still a member.
    assert_eq!(ok(&proxy, "set server be/s2 state drain").await, "");
    assert_eq!(servers_state(&proxy).await["s2"]["srv_admin_state"], "8");
    assert_eq!(traffic(&proxy, 6).await.get("s2"), None);
    // disable / enable are maint / ready.
    assert_eq!(ok(&proxy, "disable server be/s2").await, "");
    assert_eq!(servers_state(&proxy).await["s2"]["srv_admin_state"], "1");
    assert_eq!(ok(&proxy, "enable server be/s2").await, "");
    assert_eq!(servers_state(&proxy).await["s2"]["srv_admin_state"], "0");
    assert_eq!(
        refused(&proxy, "del server be/s2").await.lines().next().unwrap_or(""),
        "Only servers in maintenance or drain mode can be deleted (set server B/S state maint)."
    );

    assert_eq!(ok(&proxy, "set server be/s2 state maint").await, "");
    assert_eq!(ok(&proxy, "del server be/s2").await, "Server deleted.");
    let state = servers_state(&proxy).await;
    assert!(!state.contains_key("s2"), "{state:?}");
    assert_eq!(refused(&proxy, "del server be/s2").await, "No such server.");
    assert_eq!(traffic(&proxy, 4).await.get("s1"), Some(&4));

    // A server added again under the same name gets a new id, as in HAProxy.
    ok(&proxy, &format!("add server be/s2 {}", s2.addr())).await;
    assert_eq!(servers_state(&proxy).await["s2"]["srv_id"], "3");

    // A reload reads the file again: runtime changes are operational state.
    proxy.reload().await.expect("reload");
    let state = servers_state(&proxy).await;
    assert_eq!(state.keys().collect::<Vec<_>>(), ["s1"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_command_good_and_bad() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));

    // Refusals: one line, nothing changed.
    let cases: &[(&str, &str)] = &[
        ("foo bar", "Unknown command: 'foo bar'. Type 'help' for the list."),
        ("disable server be", "Require 'backend/server'."),
        ("enable server", "Require 'backend/server'."),
        ("disable server nope/s1", "No such backend."),
        ("enable server be/nope", "No such server."),
        ("set server be/s1 state foo", "'set server <srv> state' expects 'ready', 'drain' and 'maint'."),
        ("set server be/s1 weight 300", "Absolute weight can only be between 0 and 256 inclusive."),
        ("set weight be/s1 abc", "Weight must be a number between 0 and 256, got 'abc'."),
        ("set server be/s1", "usage: set server <backend>/<server> state <ready|drain|maint> | weight <0-256>[%] | addr <ip> [port <port>] | health <up|down>"),
        ("add server be/s1 127.0.0.1:1", "Already exists a server with the same name in backend."),
        ("add server nope/x 127.0.0.1:1", "No such backend."),
        ("add server be/x example.com:80", "Invalid address 'example.com:80': expected IP:port (no host names), e.g. 10.0.0.5:8080."),
        ("add server be/x 127.0.0.1:0", "Invalid address '127.0.0.1:0': port 0."),
        ("add server be/x", "'add server' expects an address: add server <bk>/<srv> <addr>:<port> [check] [weight <w>] [slowstart <time>]"),
        ("add server be/x 127.0.0.1:1 weight", "'weight' needs a value."),
        ("add server be/x 127.0.0.1:1 slowstart 1y", "Invalid time '1y' (e.g. 500ms, 10s, 2m)."),
        ("add server be/x 127.0.0.1:1 backup", "Unknown keyword 'backup' (expected check, weight or slowstart)."),
        ("add server be/a/b 127.0.0.1:1", "Invalid server name 'a/b' (letters, digits, '_', '.' and '-')."),
        ("del server be/s1", "Only servers in maintenance or drain mode can be deleted (set server B/S state maint)."),
        ("del server nope/s1", "No such backend."),
        ("shutdown sessions server be/zz", "No such server."),
        ("show servers state nope", "Can't find backend."),
        ("show stat be typed", "Usage: show stat [{<iid>|<proxy>} <type> <sid>] [typed|json]."),
        ("show stat -1 8 -1", "Invalid type '8': -1, or a sum of 1 (frontends), 2 (backends), 4 (servers)."),
        ("show stat be 4 x", "Invalid server id 'x': -1 or a positive number."),
        ("show schema xml", "Usage: show schema json."),
        ("show errors nosuch", "No such proxy."),
        ("show errors 1 request x", "Usage: show errors [<iid>|<proxy>] [request|response]."),
    ];
    let before = proxy.runtime_command("show servers state").await.expect("state");
    for (command, message) in cases {
        assert_eq!(&refused(&proxy, command).await, message, "{command}");
        // The same on the runtime socket, framed with its empty line.
        assert_eq!(proxy.runtime(command), format!("{message}\n\n"), "{command}");
    }
    let after = proxy.runtime_command("show servers state").await.expect("state");
    let strip = |t: &str| t.lines().map(|l| l.split(' ').take(9).collect::<Vec<_>>().join(" ")).collect::<Vec<_>>();
    assert_eq!(strip(&before), strip(&after), "refused commands changed nothing");

    // Accepted ones.
    assert_eq!(ok(&proxy, "set weight be/s1 7").await, "");
    assert_eq!(ok(&proxy, "get weight be/s1").await, "7 (initial 1)");
    assert_eq!(ok(&proxy, "set server be/s1 weight 2").await, "");
    assert_eq!(ok(&proxy, "get weight be/s1").await, "2 (initial 1)");
    assert_eq!(ok(&proxy, "shutdown sessions server be/s1").await, "");
    let help = ok(&proxy, "help").await;
    for command in ["add server", "del server", "show stat", "show servers state", "set server", "shutdown sessions"] {
        assert!(help.contains(command), "help lacks {command}:\n{help}");
    }
    let sess = ok(&proxy, "show sess").await;
    assert!(sess.contains("frontend fe:") && sess.contains("server be/s1:"), "{sess}");
    let info = ok(&proxy, "show info").await;
    assert!(info.starts_with("Name: lb-proxy\nVersion: "), "{info}");
    for field in ["Pid: ", "Uptime_sec: ", "CurrConns: ", "CumConns: ", "CumReq: ", "ConnRate: ", "Maxconn: "] {
        assert!(info.contains(field), "show info lacks {field}:\n{info}");
    }

    // Several commands on one line, `;`-separated: each answer ends with an empty line.
    let answer = proxy.runtime("set weight be/s1 1; get weight be/s1;show sess");
    assert!(answer.starts_with("\n1 (initial 1)\n\ntotal: "), "{answer:?}");
    assert!(answer.ends_with("\n\n"), "{answer:?}");
    // Through the control socket, a line with a refused command is an error, with every answer.
    let mixed = proxy.runtime_command("get weight be/s1; enable server be/zz").await;
    assert_eq!(mixed, Err("1 (initial 1)\n\nNo such server.\n\n".to_owned()));
    assert_eq!(proxy.runtime(""), "", "an empty line has no command to answer");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runtime_socket_is_private() {
    use std::os::unix::fs::PermissionsExt;
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    let mode = std::fs::metadata(proxy.runtime_socket()).expect("runtime socket").permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prompt_mode_on_the_runtime_socket() {
    use std::io::{Read, Write};
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    let mut socket = std::os::unix::net::UnixStream::connect(proxy.runtime_socket()).expect("runtime socket");
    socket.set_read_timeout(Some(Duration::from_secs(10))).ok();
    // Everything the proxy writes until the prompt (or until it closes).
    let until_prompt = |socket: &mut std::os::unix::net::UnixStream| {
        let mut text = Vec::new();
        let mut byte = [0u8; 1];
        while !text.ends_with(b"> ") && socket.read(&mut byte).unwrap_or(0) == 1 {
            text.push(byte[0]);
        }
        String::from_utf8_lossy(&text).into_owned()
    };
    socket.write_all(b"prompt\n").expect("send");
    assert_eq!(until_prompt(&mut socket), "> ");
    socket.write_all(b"set server be/s1 state drain\n").expect("send");
    assert_eq!(until_prompt(&mut socket), "\n> ", "an empty answer, then the prompt");
    socket.write_all(b"show servers state be\n").expect("send");
    let state = until_prompt(&mut socket);
    assert!(state.starts_with("1\n# be_id be_name") && state.ends_with("\n\n> "), "{state:?}");
    assert!(state.contains(" s1 "), "{state:?}");
    socket.write_all(b"quit\n").expect("send");
    let mut rest = String::new();
    socket.read_to_string(&mut rest).expect("closed after quit");
    assert_eq!(rest, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_reach_the_current_worker_after_a_reload_and_on_tcp() {
    let s1 = TestServer::start("s1");
    let a1 = s1.addr();
    let rt = lb_testkit::free_port();
    let proxy = ProxyProcess::start_with(1, move |ports: &[u16]| {
        format!(
            "global:\n  runtime_address: 127.0.0.1:{rt}\nfrontends:\n  - name: fe\n    bind: [\"127.0.0.1:{fe}\"]\n    \
             default_backend: be\nbackends:\n  - name: be\n    servers: [ {{ name: s1, address: \"{a1}\" }} ]\n",
            fe = ports[0],
        )
    });
    let pid_of = |info: &str| info.lines().find_map(|l| l.strip_prefix("Pid: ").map(str::to_owned));
    let first = proxy.current_worker().await.expect("a worker");
    let info = ok(&proxy, "show info").await;
    assert_eq!(pid_of(&info), Some(first.to_string()));

    ok(&proxy, "set server be/s1 state drain").await;
    let reloaded = proxy.reload().await.expect("reload");
    assert_ne!(reloaded.pid, first);
    let info = ok(&proxy, "show info").await;
    assert_eq!(pid_of(&info), Some(reloaded.pid.to_string()), "the new worker answers");
    assert_eq!(servers_state(&proxy).await["s1"]["srv_admin_state"], "0", "the file is the reference");

    // The same commands on the loopback TCP address, HAProxy's way.
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", rt)).expect("runtime address");
    tcp.write_all(b"show info;show servers state be\n").expect("send");
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).expect("read until the daemon closes");
    assert!(answer.starts_with("Name: lb-proxy\n"), "{answer}");
    assert!(answer.contains("\n\n1\n# be_id be_name"), "{answer}");
    assert!(answer.ends_with("\n\n"), "{answer}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sessions_closes_the_servers_connections() {
    let s1 = TestServer::start("s1");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    let slow = tokio::spawn({
        let addr = proxy.addr();
        async move { client::get(addr, "/slow?ms=8000").await }
    });
    assert!(wait_until(Duration::from_secs(5), || s1.in_flight() == 1).await);
    let started = std::time::Instant::now();
    assert_eq!(ok(&proxy, "shutdown sessions server be/s1").await, "");
    let outcome = slow.await.expect("join");
    assert!(started.elapsed() < Duration::from_secs(5), "closed at once, not after the 8 s response");
    if let Ok(response) = outcome {
        assert!(response.status >= 500, "the cut request is not a success: {}", response.status);
    }
    assert!(wait_until(Duration::from_secs(5), || s1.open_connections() == 0).await, "the server connection is closed");
    // The server keeps taking new requests.
    assert_eq!(traffic(&proxy, 3).await.get("s1"), Some(&3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sessions_closes_tcp_sessions() {
    use std::io::{Read, Write};
    let echo = lb_testkit::TcpEchoServer::start();
    let addr = echo.addr();
    let proxy = ProxyProcess::start_with(1, move |ports: &[u16]| {
        format!(
            "frontends:\n  - name: fe\n    mode: tcp\n    bind: [\"127.0.0.1:{fe}\"]\n    default_backend: be\nbackends:\n  \
             - name: be\n    mode: tcp\n    servers: [ {{ name: e1, address: \"{addr}\" }} ]\n",
            fe = ports[0]
        )
    });
    let mut client = std::net::TcpStream::connect(proxy.addr()).expect("connect");
    client.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    client.write_all(b"ping").expect("write");
    let mut buf = [0u8; 4];
    client.read_exact(&mut buf).expect("echo");
    assert_eq!(&buf, b"ping");
    assert_eq!(ok(&proxy, "shutdown sessions server be/e1").await, "");
    let mut rest = Vec::new();
    let started = std::time::Instant::now();
    // The proxy closes the session: end of stream (or a reset), not the 5 s read timeout.
    if let Err(e) = client.read_to_end(&mut rest) {
        let timed_out = matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut);
        assert!(!timed_out, "the session was not closed: {e}");
    }
    assert!(started.elapsed() < Duration::from_secs(4));
    assert!(rest.is_empty(), "nothing more comes: {rest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_checks_follow_membership() {
    let s1 = TestServer::start("s1");
    let s3 = TestServer::start("s3");
    let proxy = ProxyProcess::start_with(1, config(&s1));
    ok(&proxy, &format!("add server be/s3 {} check", s3.addr())).await;
    // In maintenance: not checked.
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert_eq!(s3.hits_for("/ping"), 0, "a server in maintenance is not checked");
    ok(&proxy, "enable server be/s3").await;
    assert!(wait_until(Duration::from_secs(5), || s3.hits_for("/ping") >= 3).await, "checked once enabled");
    // Deleted from drain (where checks go on): its checks stop.
    ok(&proxy, "set server be/s3 state drain").await;
    ok(&proxy, "del server be/s3").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let after = s3.hits_for("/ping");
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(s3.hits_for("/ping"), after, "no check after the server was deleted (interval 200 ms)");
}
