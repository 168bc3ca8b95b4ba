//! Limit tables: every key read, the errors a mistake gets (located), the round trip.

use std::time::Duration;

use super::{error, errors, parse_ok, MINIMAL};
use crate::policy::{Condition, Fetch, Guard, RequestAction};
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
    fleet: true
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
    assert!(ip.bucket.is_none());
    assert!(!ip.fleet);
    assert_eq!(api.key, KeyType::String { len: 64 });
    assert_eq!(
        api.bucket,
        Some(Bucket { rate: 600, per: Duration::from_secs(60), burst: 20, nodelay: false, delay: 5 })
    );
    assert!(api.fleet);
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

const RULES: &str = "\
tables:
  per_ip: { size: 1m, expire: 10m, store: [http_req_rate(10s), conn_cur, gpc0, gpt0] }
  api_keys: { type: string, size: 100k, expire: 1h, store: [http_req_cnt], limit_req: { rate: 10, burst: 5 } }
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: app
    http_request:
      - track: { table: per_ip }
      - track: { table: api_keys, key: { header: X-Api-Key }, slot: 1 }
      - deny: { status: 429 }
        if: { sc0: { name: http_req_rate, gt: 100 } }
      - tarpit: { delay: 5s, status: 429 }
        if: { sc0: { name: gpt0, eq: 1 } }
      - set_gpt: { slot: 0, index: 0, value: 1 }
        if: { sc0: { name: http_req_rate, gt: 500 } }
      - inc_gpc: { slot: 0 }
    rules:
      - backend: slow
        if: { sc0: { name: http_req_rate, gt: 50 } }
backends:
  - name: app
    servers: [{ name: a1, address: 10.0.0.1:80 }]
  - name: slow
    servers: [{ name: s1, address: 10.0.0.2:80 }]
";

#[test]
fn track_tarpit_marks_and_counter_conditions_are_read_and_written_back() {
    let config = parse_ok(RULES);
    let rules = &config.frontends[0].http_request;
    assert_eq!(
        rules[0].action,
        RequestAction::Track(Track { slot: 0, table: "per_ip".into(), key: Fetch::Src }),
        "key src and slot 0 by default"
    );
    assert_eq!(
        rules[1].action,
        RequestAction::Track(Track { slot: 1, table: "api_keys".into(), key: Fetch::Header("x-api-key".into()) })
    );
    let Some(Guard { condition: Condition::Test(test), .. }) = &rules[2].guard else { panic!("{:?}", rules[2]) };
    assert_eq!(test.fetch, Fetch::Sc { slot: 0, data: DataType::HttpReqRate });
    let RequestAction::Tarpit(tarpit) = &rules[3].action else { panic!("{:?}", rules[3]) };
    assert_eq!((tarpit.delay, tarpit.reply.status), (Duration::from_secs(5), 429));
    assert_eq!(rules[4].action, RequestAction::SetGpt(Mark { slot: 0, index: 0, value: 1 }));
    assert_eq!(rules[5].action, RequestAction::IncGpc(Mark { slot: 0, index: 0, value: 1 }));
    let again = parse_ok(&config.to_yaml());
    assert_eq!(again.frontends[0].http_request, config.frontends[0].http_request);
    assert_eq!(again.frontends[0].rules, config.frontends[0].rules);
}

#[test]
fn mistakes_in_limit_actions_are_located() {
    let text = RULES
        .replace("{ table: per_ip }", "{ table: per_pi }")
        .replace("slot: 1 }", "slot: 3 }")
        .replace("name: gpt0, eq: 1", "name: gpt9, eq: 1")
        .replace("tarpit: { delay: 5s, status: 429 }", "tarpit: { status: 429 }")
        .replace("inc_gpc: { slot: 0 }", "inc_gpc: { slot: 0, index: 8 }");
    let all = errors(&text);
    let expect = [
        "proxy.yaml:9:25: frontends[0].http_request[0].track.table: no table named `per_pi` (api_keys, per_ip)",
        "proxy.yaml:10:69: frontends[0].http_request[1].track.slot: must be between 0 and 2, got 3",
        "proxy.yaml:13:17: frontends[0].http_request[3].tarpit: missing `delay`",
        "proxy.yaml:14:28: frontends[0].http_request[3].if.sc0.name: `gpt9` is not a data type",
        "proxy.yaml:17:36: frontends[0].http_request[5].inc_gpc.index: must be between 0 and 7, got 8",
    ];
    assert_eq!(all.len(), expect.len(), "{all:#?}");
    for (got, want) in all.iter().zip(expect) {
        assert!(got.starts_with(want), "{got}\n  expected to start with {want}");
    }
}

#[test]
fn connection_rules_track_src_and_reject_on_what_is_known_at_accept() {
    let text = RULES.replace(
        "    http_request:\n",
        "    tcp_request:\n      - track: { table: per_ip, slot: 2 }\n      - reject: true\n        if: { sc2: { name: conn_cur, gt: 10 } }\n    http_request:\n",
    );
    let config = parse_ok(&text);
    let rules = &config.frontends[0].tcp_request;
    assert_eq!(rules[0].action, ConnectionAction::Track(Track { slot: 2, table: "per_ip".into(), key: Fetch::Src }));
    assert_eq!(rules[1].action, ConnectionAction::Reject);
    assert_eq!(parse_ok(&config.to_yaml()).frontends[0].tcp_request, *rules);
    let text = RULES.replace(
        "    http_request:\n",
        "    tcp_request:\n      - track: { table: per_ip, key: { header: x-forwarded-for } }\n      - reject: true\n        if: { path: /admin }\n    http_request:\n",
    );
    let all = errors(&text);
    assert_eq!(all.len(), 2, "{all:#?}");
    assert!(
        all[0].starts_with("proxy.yaml:9:38: frontends[0].tcp_request[0].track.key: at accept the key is"),
        "{}",
        all[0]
    );
    assert!(
        all[1].starts_with("proxy.yaml:10:9: frontends[0].tcp_request[1]: `path` is not known at accept"),
        "{}",
        all[1]
    );
}
