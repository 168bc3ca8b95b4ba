//! Limit tables end to end (lb-proxy as a real process, real TCP clients): per-address request
//! rates refused with 429 and `Retry-After`, an API key's `limit_req` bucket, a connection cap
//! at accept, a tarpit, a slow lane chosen by a tag, a bucket holding its excess to the rate
//! (nginx's delay), IPv6 networks as keys, three keys at once (an IPv6 client's network, a query
//! parameter, a cookie), the size bound, the runtime commands and `/metrics`, and the counts
//! carried across a hundred reloads under load.

use std::io::{Read, Write};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lb_testkit::raw::{self, RawConn};
use lb_testkit::runtime::parse_prometheus;
use lb_testkit::{client, wait_until, ProxyProcess, TestServer};

/// `tables`, the frontend's extra lines, two backends (`be`, and `slow` for the slow lane), and
/// a stats listener on the second port.
fn config(tables: &str, frontend: &str, be: &TestServer, slow: &TestServer) -> impl Fn(&[u16]) -> String {
    let (tables, frontend) = (tables.to_owned(), frontend.to_owned());
    let (be, slow) = (be.addr(), slow.addr());
    move |ports: &[u16]| {
        let frontend: String = frontend.lines().map(|l| format!("    {l}\n")).collect();
        format!(
            "global:\n  stats: {{ address: \"127.0.0.1:{stats}\" }}\n\
             defaults:\n  timeouts: {{ connect: 1s, client: 20s, server: 20s }}\n\
             tables:\n{tables}\
             frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{fe}\"]\n    default_backend: be\n{frontend}\
             backends:\n  - name: be\n    servers: [ {{ name: s1, address: \"{be}\" }} ]\n\
             \x20 - name: slow\n    servers: [ {{ name: s2, address: \"{slow}\" }} ]\n",
            fe = ports[0],
            stats = ports[1]
        )
    }
}

fn start(tables: &str, frontend: &str) -> (ProxyProcess, TestServer, TestServer) {
    let (be, slow) = (TestServer::start("s1"), TestServer::start("s2"));
    let proxy = ProxyProcess::start_with(2, config(tables, frontend, &be, &slow));
    (proxy, be, slow)
}

async fn get_with(addr: SocketAddr, path: &str, headers: &[(&str, &str)]) -> client::Response {
    let mut req = client::get_request(addr, path);
    for (name, value) in headers {
        req.headers_mut().insert(
            http::HeaderName::from_bytes(name.as_bytes()).expect("name"),
            http::HeaderValue::from_str(value).expect("value"),
        );
    }
    client::send(addr, req).await.expect("request")
}

/// One `show table NAME` entry line's `name=value` fields, for the entry whose key is `key`.
fn entry(proxy: &ProxyProcess, table: &str, key: &str) -> Option<Vec<(String, String)>> {
    let text = proxy.runtime(&format!("show table {table}"));
    let line = text.lines().find(|l| l.contains(&format!(" key={key} ")))?;
    Some(line.split_whitespace().skip(1).filter_map(|f| f.split_once('=')).map(|(k, v)| (k.into(), v.into())).collect())
}

fn field(fields: &[(String, String)], name: &str) -> u64 {
    fields
        .iter()
        .find(|(k, _)| k == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("{name} in {fields:?}"))
}

fn used(proxy: &ProxyProcess, table: &str) -> usize {
    let text = proxy.runtime("show table");
    let line = text.lines().find(|l| l.starts_with(&format!("# table: {table},"))).unwrap_or_else(|| panic!("{text}"));
    line.rsplit("used:").next().and_then(|n| n.trim().parse().ok()).unwrap_or_else(|| panic!("{line}"))
}

fn metrics(proxy: &ProxyProcess) -> lb_testkit::runtime::Metrics {
    let addr = SocketAddr::from(([127, 0, 0, 1], proxy.ports()[1]));
    let mut stream = std::net::TcpStream::connect(addr).expect("stats");
    write!(stream, "GET /metrics HTTP/1.1\r\nHost: stats\r\nConnection: close\r\n\r\n").expect("send");
    let mut text = String::new();
    stream.read_to_string(&mut text).expect("read");
    let body = text.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    parse_prometheus(body).unwrap_or_else(|e| panic!("{e}\n{body}"))
}

const PER_IP: &str = "  per_ip: { size: 1000, expire: 10m, store: [http_req_rate(10s), http_req_cnt, http_err_rate(10s), http_fail_cnt, bytes_out_cnt, bytes_in_rate(10s), http_req_cur, gpc0] }\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_address_past_its_rate_gets_429_with_retry_after_and_every_counter_counts() {
    let frontend = "http_request:\n  - track: { table: per_ip }\n  - deny: { status: 429 }\n    if: { sc0: { name: http_req_rate, gt: 10 } }\n  - inc_gpc: { slot: 0, index: 0 }\n    if: { path: /count }";
    let (proxy, be, _slow) = start(PER_IP, frontend);
    let addr = proxy.addr();
    let mut statuses = Vec::new();
    for _ in 0..15 {
        statuses.push(client::get(addr, "/count").await.expect("request"));
    }
    // The rate counts the request being decided: the 11th is the first past 10.
    let ok = statuses.iter().filter(|r| r.status == 200).count();
    assert_eq!(ok, 10, "{:?}", statuses.iter().map(|r| r.status).collect::<Vec<_>>());
    let refused: Vec<_> = statuses.iter().filter(|r| r.status == 429).collect();
    assert_eq!(refused.len(), 5);
    assert!(refused.iter().all(|r| r.header("retry-after") == Some("10")), "{:?}", refused[0].headers);
    assert_eq!(be.hits(), 10, "refused requests never reach the server");

    let e = entry(&proxy, "per_ip", "127.0.0.1").expect("an entry for 127.0.0.1");
    assert_eq!(field(&e, "http_req_rate(10000)"), 15);
    assert_eq!(field(&e, "http_req_cnt"), 15);
    assert_eq!(field(&e, "http_err_rate(10000)"), 5, "the 429s are the client's errors");
    assert_eq!(field(&e, "gpc0"), 10, "inc_gpc ran for the requests let through");
    assert_eq!(field(&e, "http_req_cur"), 0, "none in progress");
    assert!(field(&e, "bytes_out_cnt") > 15 * 50, "{e:?}");
    assert!(field(&e, "bytes_in_rate(10000)") > 15 * 20, "{e:?}");

    // 5xx count as failures; a filter shows only what matches.
    proxy.runtime("clear table per_ip");
    assert_eq!(used(&proxy, "per_ip"), 0);
    for _ in 0..3 {
        assert_eq!(client::get(addr, "/status?code=503").await.expect("request").status, 503);
    }
    let e = entry(&proxy, "per_ip", "127.0.0.1").expect("entry");
    assert_eq!(field(&e, "http_fail_cnt"), 3);
    assert_eq!(
        proxy.runtime("show table per_ip data.http_fail_cnt gt 3").lines().count(),
        2,
        "header only, then the empty line"
    );
    assert!(proxy.runtime("show table per_ip data.http_fail_cnt ge 3").contains("key=127.0.0.1 "));
    assert_eq!(proxy.runtime("show table nope"), "No such table.\n\n");

    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_entries", &[("table", "per_ip")]), Some(1.0));
    assert_eq!(m.value("lb_proxy_table_size", &[("table", "per_ip")]), Some(1000.0));
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "per_ip"), ("reason", "deny")]), Some(5.0));
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "per_ip"), ("reason", "limit_req")]), Some(0.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_key_past_its_burst_gets_429_and_other_keys_do_not() {
    let tables = "  api_keys: { type: string, size: 100, expire: 1m, store: [http_req_cnt], limit_req: { rate: 1, per: 10s, burst: 3, nodelay: true } }\n";
    let frontend = "http_request:\n  - track: { table: api_keys, key: { header: X-Api-Key } }";
    let (proxy, be, _slow) = start(tables, frontend);
    let addr = proxy.addr();
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(get_with(addr, "/", &[("x-api-key", "k-abuser")]).await);
    }
    let codes: Vec<u16> = statuses.iter().map(|r| r.status).collect();
    // One at the rate and three of burst pass at once (nodelay); then refused.
    assert_eq!(codes, [200, 200, 200, 200, 429, 429]);
    let retry: u64 = statuses[4].header("retry-after").and_then(|v| v.parse().ok()).expect("Retry-After");
    assert!((1..=10).contains(&retry), "the bucket drains one request per 10 s: {retry}");
    assert_eq!(get_with(addr, "/", &[("x-api-key", "k-other")]).await.status, 200);
    assert_eq!(client::get(addr, "/").await.expect("no key").status, 200, "no key: not tracked");
    assert_eq!(be.hits(), 6);
    let e = entry(&proxy, "api_keys", "k-abuser").expect("entry");
    assert_eq!(field(&e, "limit_req"), 3, "the bucket's excess, in requests");
    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "api_keys"), ("reason", "limit_req")]), Some(2.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_past_the_cap_is_closed_at_accept() {
    let tables = "  conns: { size: 100, expire: 1m, store: [conn_cur, conn_cnt, conn_rate(10s)] }\n";
    let frontend =
        "tcp_request:\n  - track: { table: conns }\n  - reject: true\n    if: { sc0: { name: conn_cur, gt: 2 } }";
    let (proxy, _be, _slow) = start(tables, frontend);
    let addr = proxy.addr();
    let mut open = Vec::new();
    for _ in 0..2 {
        let mut conn = client::Connection::open(addr).await.expect("connect");
        assert_eq!(conn.get("/").await.expect("request").status, 200);
        open.push(conn);
    }
    let e = entry(&proxy, "conns", "127.0.0.1").expect("entry");
    assert_eq!((field(&e, "conn_cur"), field(&e, "conn_cnt")), (2, 2));
    // The third is closed before any request is read.
    let started = Instant::now();
    let third = client::get(addr, "/").await;
    assert!(third.is_err(), "the third connection was served: {third:?}");
    assert!(started.elapsed() < Duration::from_secs(2));
    let e = entry(&proxy, "conns", "127.0.0.1").expect("entry");
    assert_eq!((field(&e, "conn_cur"), field(&e, "conn_cnt")), (2, 3), "counted, then closed");
    assert_eq!(field(&e, "conn_rate(10000)"), 3, "the closed one is in the rate too");
    drop(open.pop());
    assert!(
        wait_until(Duration::from_secs(5), || entry(&proxy, "conns", "127.0.0.1")
            .is_some_and(|e| field(&e, "conn_cur") == 1))
        .await
    );
    assert_eq!(client::get(addr, "/").await.expect("room again").status, 200);
    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "conns"), ("reason", "reject")]), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tagged_client_is_tarpitted_or_sent_to_the_slow_lane() {
    let tables = "  per_ip: { size: 100, expire: 1m, store: [http_req_rate(10s), gpt0, gpt1] }\n";
    let frontend = "http_request:\n  - track: { table: per_ip }\n  - set_gpt: { slot: 0, index: 1, value: 1 }\n    if: { sc0: { name: http_req_rate, gt: 3 } }\n  - tarpit: { delay: 1s, status: 429 }\n    if: { sc0: { name: gpt0, eq: 1 } }\nrules:\n  - backend: slow\n    if: { sc0: { name: gpt1, eq: 1 } }";
    let (proxy, be, slow) = start(tables, frontend);
    let addr = proxy.addr();
    // Three requests at a normal rate go to `be`; past 3 the action tags the address, and the
    // routing rule sends it to the slow lane.
    let mut served_by = Vec::new();
    for _ in 0..5 {
        served_by.push(client::get(addr, "/").await.expect("request").server().unwrap_or_default().to_owned());
    }
    assert_eq!(served_by, ["s1", "s1", "s1", "s2", "s2"]);
    assert_eq!((be.hits(), slow.hits()), (3, 2));
    // An operator marks it for the tarpit: held a second, then refused.
    proxy.runtime("set table per_ip key 127.0.0.1 data.gpt0 1");
    let started = Instant::now();
    let r = client::get(addr, "/").await.expect("tarpitted");
    assert_eq!(r.status, 429);
    assert!(started.elapsed() >= Duration::from_millis(950), "held {:?}", started.elapsed());
    assert_eq!(r.header("retry-after"), Some("10"));
    assert_eq!(slow.hits(), 2, "nothing reached a server");
    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "per_ip"), ("reason", "tarpit")]), Some(1.0));
    // Cleared, the address starts afresh.
    proxy.runtime("clear table per_ip key 127.0.0.1");
    assert_eq!(client::get(addr, "/").await.expect("request").server(), Some("s1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ipv6_networks_are_one_key_and_random_keys_stay_within_the_size() {
    let tables = "  nets: { size: 1000, expire: 1m, prefix: { ipv4: 24, ipv6: 64 }, store: [http_req_cnt] }\n  keys: { type: string, size: 50, expire: 1m, store: [http_req_cnt] }\n";
    let frontend = "http_request:\n  - track: { table: nets, key: { header: X-Client } }\n  - track: { table: keys, key: { header: X-Api-Key }, slot: 1 }";
    let (proxy, _be, _slow) = start(tables, frontend);
    let addr = proxy.addr();
    for client_ip in ["2001:db8:1:2::1", "2001:db8:1:2:ffff::9", "2001:db8:1:3::1", "192.0.2.7", "192.0.2.200"] {
        assert_eq!(get_with(addr, "/", &[("x-client", client_ip)]).await.status, 200);
    }
    let shown = proxy.runtime("show table nets");
    let e = entry(&proxy, "nets", "2001:db8:1:2::/64").unwrap_or_else(|| panic!("{shown}"));
    assert_eq!(field(&e, "http_req_cnt"), 2, "two addresses of one /64");
    assert_eq!(field(&entry(&proxy, "nets", "2001:db8:1:3::/64").expect("entry"), "http_req_cnt"), 1);
    assert_eq!(field(&entry(&proxy, "nets", "192.0.2.0/24").expect("entry"), "http_req_cnt"), 2);
    assert_eq!(used(&proxy, "nets"), 3);
    // 500 random API keys through a table of 50: never more than 50 entries, the last keys kept.
    for i in 0..500u32 {
        let key = format!("k{:08x}", i.wrapping_mul(2_654_435_761));
        assert_eq!(get_with(addr, "/", &[("x-api-key", &key)]).await.status, 200);
        if i % 100 == 99 {
            assert!(used(&proxy, "keys") <= 50);
        }
    }
    assert_eq!(used(&proxy, "keys"), 50);
    let last = format!("k{:08x}", 499u32.wrapping_mul(2_654_435_761));
    assert!(entry(&proxy, "keys", &last).is_some(), "the most recent key is kept");
    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_evictions_total", &[("table", "keys")]), Some(450.0));
}

/// A request from `src` (given by a PROXY v2 header, as lb-tls or an L4 balancer sends it):
/// its status.
async fn status_from(proxy: &ProxyProcess, src: &str, request: &str) -> u16 {
    let src: SocketAddr = src.parse().expect("a socket address");
    let mut conn = RawConn::connect(proxy.addr()).await.expect("connect");
    let mut bytes = raw::proxy_v2(src, "[2001:db8::1]:443".parse().expect("address"), &[]);
    bytes.extend_from_slice(request.as_bytes());
    conn.send(&bytes).await.expect("send");
    conn.read_response(Duration::from_secs(10)).await.expect("a response").status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_keys_at_once_an_ipv6_clients_network_a_query_parameter_and_a_cookie() {
    let tables = "  nets: { size: 100, expire: 1m, prefix: { ipv4: 24, ipv6: 64 }, store: [http_req_cnt] }\n  keys: { type: string, size: 100, expire: 1m, store: [http_req_cnt] }\n  sessions: { type: string, size: 100, expire: 1m, store: [http_req_cnt] }\n";
    let frontend = "accept_proxy: true\nhttp_request:\n  - track: { table: nets }\n  - track: { table: keys, key: { query: key }, slot: 1 }\n  - track: { table: sessions, key: { cookie: id }, slot: 2 }\n  - deny: { status: 429 }\n    if: { sc2: { name: http_req_cnt, gt: 2 } }";
    let (proxy, be, _slow) = start(tables, frontend);
    let request = |key: &str, session: &str| {
        format!("GET /?key={key} HTTP/1.1\r\nHost: x\r\nCookie: lang=en; id={session}\r\n\r\n")
    };
    // Two addresses of one /64 and one of another; the third request of session s1 is past
    // the limit on slot 2, whichever network and API key it comes with.
    assert_eq!(status_from(&proxy, "[2001:db8:1:2::1]:40000", &request("k1", "s1")).await, 200);
    assert_eq!(status_from(&proxy, "[2001:db8:1:2:ffff::9]:40001", &request("k1", "s1")).await, 200);
    assert_eq!(status_from(&proxy, "[2001:db8:1:3::1]:40002", &request("k2", "s1")).await, 429);
    assert_eq!(status_from(&proxy, "[2001:db8:1:3::1]:40003", &request("k2", "s2")).await, 200);
    assert_eq!(be.hits(), 3);
    let count = |table: &str, key: &str| {
        let shown = proxy.runtime(&format!("show table {table}"));
        field(&entry(&proxy, table, key).unwrap_or_else(|| panic!("{key} in {shown}")), "http_req_cnt")
    };
    assert_eq!((count("nets", "2001:db8:1:2::/64"), count("nets", "2001:db8:1:3::/64")), (2, 2));
    assert_eq!((count("keys", "k1"), count("keys", "k2")), (2, 2));
    assert_eq!((count("sessions", "s1"), count("sessions", "s2")), (3, 1));
    assert_eq!(used(&proxy, "nets"), 2);
    let m = metrics(&proxy);
    assert_eq!(m.value("lb_proxy_table_denials_total", &[("table", "sessions"), ("reason", "deny")]), Some(1.0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counts_carry_across_a_hundred_reloads_under_load() {
    let tables = "  per_ip: { size: 1000, expire: 10m, store: [http_req_cnt, http_req_rate(1m), gpc0] }\n";
    let frontend = "http_request:\n  - track: { table: per_ip }\n  - inc_gpc: { slot: 0, index: 0 }";
    let (proxy, _be, _slow) = start(tables, frontend);
    let addr = proxy.addr();
    // A kept-alive client sends all along: the old worker of each reload serves its requests
    // until the connection moves, so counts come over both ways (entries, then late counts).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = tokio::spawn({
        let stop = stop.clone();
        async move {
            let mut ok = 0u64;
            let deadline = Instant::now() + Duration::from_secs(240);
            while !stop.load(std::sync::atomic::Ordering::SeqCst) && Instant::now() < deadline {
                let Ok(mut conn) = client::Connection::open(addr).await else { continue };
                for _ in 0..20 {
                    match conn.get("/").await {
                        Ok(r) if r.status == 200 => ok += 1,
                        Ok(r) => panic!("status {}", r.status),
                        Err(_) => break,
                    }
                }
            }
            ok
        }
    });
    let mut fresh = 0u64;
    for i in 0..100 {
        proxy.reload().await.unwrap_or_else(|e| panic!("reload {i}: {e:?}"));
        assert_eq!(client::get(addr, "/").await.expect("request").status, 200);
        fresh += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let loaded = load.await.expect("load");
    assert!(loaded > 100, "the load ran: {loaded}");
    let total = loaded + fresh;
    // Every old worker drained and handed its late counts over.
    let counted = || entry(&proxy, "per_ip", "127.0.0.1").map(|e| (field(&e, "http_req_cnt"), field(&e, "gpc0")));
    let settled = wait_until(Duration::from_secs(30), || counted() == Some((total, total))).await;
    assert!(settled, "after 100 reloads: counted {:?}, sent {total}", counted());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bucket_without_nodelay_holds_the_excess_to_its_rate_and_the_other_counters_count() {
    // nginx's `limit_req` without `nodelay`: within the burst, each request past the rate waits
    // its turn (the n-th excess one n / rate), none is refused.
    let tables = "  per_key: { type: string, size: 100, expire: 1m, store: [http_req_cur, http_fail_rate(10s), bytes_in_cnt, bytes_out_rate(10s)], limit_req: { rate: 10, per: 1s, burst: 5 } }\n";
    let frontend = "http_request:\n  - track: { table: per_key, key: { header: X-Client } }";
    let (proxy, be, _slow) = start(tables, frontend);
    let addr = proxy.addr();
    let started = Instant::now();
    let requests: Vec<_> =
        (0..6).map(|_| tokio::spawn(async move { get_with(addr, "/", &[("x-client", "c1")]).await })).collect();
    let mut answers = Vec::new();
    for request in requests {
        answers.push(request.await.expect("a request"));
    }
    let took = started.elapsed();
    assert!(answers.iter().all(|r| r.status == 200), "{:?}", answers.iter().map(|r| r.status).collect::<Vec<_>>());
    assert_eq!(be.hits(), 6);
    // Six at once: the first within the rate, five past it held 100 ms apart (what drained
    // while they arrived aside): the last answered after about 0.5 s, never sooner than 0.4 s.
    assert!(took >= Duration::from_millis(400), "the excess was not held: all answered in {took:?}");

    // A request in progress counts in http_req_cur; a 5xx in http_fail_rate; bytes both ways.
    let slow = tokio::spawn(async move { get_with(addr, "/slow?ms=1500", &[("x-client", "c2")]).await });
    assert!(
        wait_until(Duration::from_secs(5), || entry(&proxy, "per_key", "c2")
            .is_some_and(|e| field(&e, "http_req_cur") == 1))
        .await,
        "{}",
        proxy.runtime("show table per_key")
    );
    assert_eq!(slow.await.expect("the slow request").status, 200);
    let e = entry(&proxy, "per_key", "c2").expect("entry");
    assert_eq!(field(&e, "http_req_cur"), 0, "ended");
    assert_eq!(get_with(addr, "/status?code=502", &[("x-client", "c2")]).await.status, 502);
    let e = entry(&proxy, "per_key", "c2").expect("entry");
    assert_eq!(field(&e, "http_fail_rate(10000)"), 1);
    assert!(field(&e, "bytes_in_cnt") > 2 * 20, "{e:?}");
    assert!(field(&e, "bytes_out_rate(10000)") > 2 * 50, "{e:?}");
}
