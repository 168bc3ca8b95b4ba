//! Limit tables: every key read, the errors a mistake gets (located), the round trip.

use std::time::Duration;

use super::{error, errors, parse_ok, MINIMAL};
use crate::*;

const TABLES: &str = "\
tables:
  per_ip:
    type: ip
    prefix: { ipv4: 24, ipv6: 64 }
    size: 1m
    expire: 10m
    store: [http_req_rate(10s), conn_cur, http_err_rate(10000), gpc0, gpt1, bytes_out_rate(1m)]
  api_keys:
    type: string
    len: 64
    size: 100000
    expire: 1h
    store: [http_req_cnt]
    limit_req: { rate: 600, per: 1m, burst: 20, delay: 5 }
    global: true
";

#[test]
fn every_table_key_is_read() {
    let config = parse_ok(&format!("{TABLES}{MINIMAL}"));
    let [api, ip] = &config.tables[..] else { panic!("two tables, got {:?}", config.tables) };
    assert_eq!(ip.name, "per_ip");
    assert_eq!(ip.key, KeyType::Ip { v4_prefix: 24, v6_prefix: 64 });
    assert_eq!(ip.size, 1 << 20);
    assert_eq!(ip.expire, Duration::from_secs(600));
    let stored: Vec<String> = ip.store.iter().map(ToString::to_string).collect();
    assert_eq!(
        stored,
        ["http_req_rate(10000)", "conn_cur", "http_err_rate(10000)", "gpc0", "gpt1", "bytes_out_rate(60000)"]
    );
    assert!(!ip.global && ip.bucket.is_none());
    assert_eq!(api.key, KeyType::String { len: 64 });
    assert_eq!(
        api.bucket,
        Some(Bucket { rate: 600, per: Duration::from_secs(60), burst: 20, nodelay: false, delay: 5 })
    );
    assert!(api.global);
}

#[test]
fn tables_survive_the_round_trip() {
    let config = parse_ok(&format!("{TABLES}{MINIMAL}"));
    let again = parse_ok(&config.to_yaml());
    assert_eq!(again.tables, config.tables);
}

#[test]
fn table_mistakes_are_located() {
    let text = "\
tables:
  t:
    type: ipv4
    size: 0
    expire: 10m
    store: [http_req_rate, conn_cur(10s), sess_rate(1s), gpc9, conn_cur, conn_cur, http_req_rate(10ms)]
    limit_req: { rate: 10, burst: 2, delay: 5 }
";
    let all = errors(&format!("{text}{MINIMAL}"));
    let expect = [
        "proxy.yaml:3:11: tables.t.type: ",
        "proxy.yaml:4:11: tables.t.size: must be between 1 and",
        "proxy.yaml:6:13: tables.t.store[0]: `http_req_rate` is a rate: give its period",
        "proxy.yaml:6:28: tables.t.store[1]: `conn_cur` is not a rate",
        "proxy.yaml:6:43: tables.t.store[2]: unknown data type `sess_rate`",
        "proxy.yaml:6:58: tables.t.store[3]: unknown data type `gpc9`",
        "proxy.yaml:6:74: tables.t.store[5]: `conn_cur` is stored twice",
        "proxy.yaml:6:84: tables.t.store[6]: `http_req_rate`: the period must be between 100ms and 24h",
        "proxy.yaml:7:45: tables.t.limit_req.delay: at most the burst (2)",
    ];
    assert_eq!(all.len(), expect.len(), "{all:#?}");
    for (got, want) in all.iter().zip(expect) {
        assert!(got.starts_with(want), "{got}\n  expected to start with {want}");
    }
}

#[test]
fn a_table_needs_size_expire_and_something_to_store() {
    let e = error(&format!("tables:\n  t: {{ size: 10, expire: 1m }}\n{MINIMAL}"));
    assert!(e.starts_with("proxy.yaml:2:6: tables.t: the table stores nothing"), "{e}");
    let all = errors(&format!("tables:\n  t: {{ store: [gpc0] }}\n{MINIMAL}"));
    assert!(all.iter().any(|e| e.contains("missing `size`")), "{all:#?}");
    assert!(all.iter().any(|e| e.contains("missing `expire`")), "{all:#?}");
    let e = error(&format!(
        "tables:\n  t: {{ type: string, prefix: {{ ipv4: 24 }}, size: 1, expire: 1s, store: [gpc0] }}\n{MINIMAL}"
    ));
    assert!(e.contains("tables.t.prefix: only an `ip` table"), "{e}");
    let e = error(&format!("tables:\n  t: {{ size: 1, expire: 1s, store: [gpc0], colour: red }}\n{MINIMAL}"));
    assert!(e.contains("unknown field `colour`"), "{e}");
}
