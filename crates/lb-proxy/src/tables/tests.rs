use std::net::IpAddr;
use std::time::Duration;

use lb_config::{Bucket, DataType, KeyType, Mark, Store, Table as TableConfig};

use super::*;
use crate::tables::handover;
use crate::tables::track::Held;

fn store(data: DataType, period: Option<u64>) -> Store {
    Store { data, period: period.map(Duration::from_secs) }
}

pub(crate) fn config(name: &str, size: usize, store: Vec<Store>) -> TableConfig {
    TableConfig {
        name: name.into(),
        key: KeyType::Ip { v4_prefix: 32, v6_prefix: 128 },
        size,
        expire: Duration::from_secs(600),
        store,
        bucket: None,
        fleet: false,
    }
}

fn ip(text: &str) -> Key {
    Key::ip(&KeyType::Ip { v4_prefix: 32, v6_prefix: 128 }, text.parse::<IpAddr>().expect("address"))
        .expect("an ip key")
}

const T0: u64 = 100 * 86_400_000;

#[test]
fn a_rate_is_the_current_period_plus_the_previous_one_weighted_by_what_is_left() {
    let table = Table::new(config("t", 10, vec![store(DataType::HttpReqRate, Some(10))]));
    let key = ip("192.0.2.1");
    for i in 0..30 {
        table.update(&key, Now(T0 + i * 100), |row, _| row.add(DataType::HttpReqRate, 1));
    }
    let rate = |at| table.read(&key, Now(at), |row| row.get(DataType::HttpReqRate)).flatten();
    assert_eq!(rate(T0 + 5_000), Some(30));
    // 2.5 s into the next period: 75 % of the previous period's 30.
    assert_eq!(rate(T0 + 12_500), Some(22));
    table.update(&key, Now(T0 + 12_500), |row, _| row.add(DataType::HttpReqRate, 4));
    assert_eq!(rate(T0 + 12_500), Some(26));
    // Two periods later nothing is left.
    assert_eq!(rate(T0 + 30_000), Some(0));
}

#[test]
fn counts_current_values_and_answers_land_where_they_belong() {
    let stored = vec![
        store(DataType::ConnCur, None),
        store(DataType::ConnCnt, None),
        store(DataType::HttpReqCur, None),
        store(DataType::HttpErrRate, Some(10)),
        store(DataType::HttpFailCnt, None),
        store(DataType::BytesOutCnt, None),
        store(DataType::BytesInRate, Some(10)),
        store(DataType::Gpc(0), None),
        store(DataType::Gpt(3), None),
    ];
    let table = Arc::new(Table::new(config("t", 10, stored)));
    let key = ip("2001:db8::7");
    let now = Now(T0);
    let conn = Held::connection(&table, key.clone(), now).expect("tracked");
    let first = Held::request(&table, key.clone(), now).expect("tracked");
    let req = Held::request(&table, key.clone(), now).expect("tracked");
    first.answered(now, 404, 100, 6_000_000_000);
    req.update(now, |row| {
        row.add(DataType::Gpc(0), 2);
        row.set(DataType::Gpt(3), 7);
    });
    let get = |data| table.read(&key, now, |row| row.get(data)).flatten();
    assert_eq!(get(DataType::ConnCur), Some(1));
    assert_eq!(get(DataType::HttpReqCur), Some(1), "the answered request is no longer in progress");
    req.answered(now, 503, 50, 1);
    assert_eq!(get(DataType::HttpReqCur), Some(0));
    drop(first);
    assert_eq!(get(DataType::HttpReqCur), Some(0), "let go once");
    assert_eq!(get(DataType::HttpErrRate), Some(1));
    assert_eq!(get(DataType::HttpFailCnt), Some(1));
    assert_eq!(get(DataType::BytesOutCnt), Some(6_000_000_001), "bytes are kept on 64 bits");
    assert_eq!(get(DataType::BytesInRate), Some(150));
    assert_eq!(get(DataType::Gpc(0)), Some(2));
    assert_eq!(get(DataType::Gpt(3)), Some(7));
    assert_eq!(get(DataType::HttpReqRate), None, "not stored");
    assert_eq!(table.remove(&key), Err(()), "in use");
    drop(req);
    drop(conn);
    assert_eq!(get(DataType::ConnCur), Some(0));
    assert_eq!(get(DataType::HttpReqCur), Some(0));
    assert_eq!(get(DataType::ConnCnt), Some(1));
    assert_eq!(table.remove(&key), Ok(true));
}

#[test]
fn a_full_table_evicts_the_least_recently_used_entry_not_in_use() {
    let table = Arc::new(Table::new(config("t", 3, vec![store(DataType::ConnCur, None)])));
    let held = Held::connection(&table, ip("10.0.0.1"), Now(T0)).expect("tracked");
    for (i, a) in ["10.0.0.2", "10.0.0.3"].into_iter().enumerate() {
        table.update(&ip(a), Now(T0 + i as u64), |_, _| ());
    }
    // .2 is touched again, so .3 is the oldest idle one.
    table.update(&ip("10.0.0.2"), Now(T0 + 5), |_, _| ());
    table.update(&ip("10.0.0.4"), Now(T0 + 6), |_, _| ());
    assert_eq!(table.used(), 3);
    assert!(table.read(&ip("10.0.0.3"), Now(T0 + 6), |_| ()).is_none(), "evicted");
    assert!(table.read(&ip("10.0.0.1"), Now(T0 + 6), |_| ()).is_some(), "in use: kept");
    assert_eq!(table.evictions.load(Ordering::Relaxed), 1);
    drop(held);
}

#[test]
fn a_table_full_of_entries_in_use_refuses_new_keys() {
    let table = Arc::new(Table::new(config("t", 2, vec![store(DataType::ConnCur, None)])));
    let _a = Held::connection(&table, ip("10.0.0.1"), Now(T0)).expect("tracked");
    let _b = Held::connection(&table, ip("10.0.0.2"), Now(T0)).expect("tracked");
    assert!(Held::connection(&table, ip("10.0.0.3"), Now(T0)).is_none());
    assert_eq!(table.full.load(Ordering::Relaxed), 1);
}

#[test]
fn expired_entries_go_and_come_back_empty() {
    let mut cfg = config("t", 10, vec![store(DataType::Gpc(0), None)]);
    cfg.expire = Duration::from_secs(10);
    let table = Table::new(cfg);
    table.update(&ip("10.0.0.2"), Now(T0), |_, _| ());
    table.update(&ip("10.0.0.1"), Now(T0), |row, _| row.add(DataType::Gpc(0), 5));
    assert!(table.read(&ip("10.0.0.1"), Now(T0 + 9_000), |_| ()).is_some());
    assert!(table.read(&ip("10.0.0.1"), Now(T0 + 11_000), |_| ()).is_none());
    let again = table.update(&ip("10.0.0.1"), Now(T0 + 11_000), |row, _| row.get(DataType::Gpc(0)));
    assert_eq!(again, Some(Some(0)));
    assert_eq!(table.purge(Now(T0 + 11_000)), 1);
    assert_eq!(table.used(), 1);
}

#[test]
fn addresses_group_by_prefix_and_read_back_as_networks() {
    let kind = KeyType::Ip { v4_prefix: 24, v6_prefix: 64 };
    let a = Key::ip(&kind, "198.51.100.7".parse().expect("v4")).expect("key");
    let b = Key::parse(&kind, "198.51.100.200").expect("key");
    assert_eq!(a, b);
    assert_eq!(a.display(&kind).to_string(), "198.51.100.0/24");
    let mapped = Key::ip(&kind, "::ffff:198.51.100.9".parse().expect("mapped")).expect("key");
    assert_eq!(mapped, a, "an IPv4-mapped address is its IPv4 address");
    let c = Key::parse(&kind, "2001:db8:1:2:3:4:5:6").expect("key");
    assert_eq!(c, Key::parse(&kind, "2001:db8:1:2::/64").expect("key"));
    assert_eq!(c.display(&kind).to_string(), "2001:db8:1:2::/64");
    assert!(Key::parse(&kind, "2001:db8:1:3::").expect("key") != c);
    assert!(Key::parse(&kind, "not-an-address").is_err());
    let text = KeyType::String { len: 4 };
    assert_eq!(Key::parse(&text, "abcdefg").expect("key").display(&text).to_string(), "abcd");
    assert_eq!(Key::bytes(&text, b"a\x01\\").expect("key").display(&text).to_string(), "a\\x01\\x5c");
    for key in [a, c, Key::Bytes(b"k\xff".as_slice().into()), Key::Int(42)] {
        let mut bytes = Vec::new();
        key.encode(&mut bytes);
        bytes.push(9);
        assert_eq!(Key::decode(&bytes), Some((key, &[9u8][..])));
    }
    assert_eq!(Key::decode(&[1, 200, 0, 0, 0, b'x']), None, "a length past the end");
}

fn bucket_table(bucket: Bucket) -> Table {
    let mut cfg = config("b", 10, Vec::new());
    cfg.bucket = Some(bucket);
    Table::new(cfg)
}

#[test]
fn the_bucket_follows_nginx_limit_req() {
    // 10 r/s, burst 5: the first request is within the rate; five more fit in the burst, each
    // held back to the rate without nodelay; the seventh is refused.
    let bucket = Bucket { rate: 10, per: Duration::from_secs(1), burst: 5, nodelay: false, delay: 0 };
    let table = bucket_table(bucket);
    let key = ip("10.0.0.1");
    let take = |at| table.update(&key, Now(at), |row, _| row.take(1)).flatten().expect("a bucket");
    assert_eq!(take(T0), Verdict::Pass);
    for n in 1..=5 {
        assert_eq!(take(T0), Verdict::Delay(n * 100));
    }
    assert_eq!(take(T0), Verdict::Refuse { retry_after_ms: 100 });
    // 100 ms later one request's worth has drained.
    assert_eq!(take(T0 + 100), Verdict::Delay(500));
    // Idle long enough, the bucket is empty again.
    assert_eq!(take(T0 + 60_000), Verdict::Pass);
    // nodelay: the burst passes at once; delay=2: the first two excess at once, then held.
    let nodelay = bucket_table(Bucket { nodelay: true, ..bucket });
    let take = |at| nodelay.update(&key, Now(at), |row, _| row.take(1)).flatten().expect("a bucket");
    assert!((0..6).all(|_| take(T0) == Verdict::Pass));
    assert!(matches!(take(T0), Verdict::Refuse { .. }));
    let delayed = bucket_table(Bucket { delay: 2, ..bucket });
    let take = |at| delayed.update(&key, Now(at), |row, _| row.take(1)).flatten().expect("a bucket");
    assert_eq!(
        [take(T0), take(T0), take(T0), take(T0)],
        [Verdict::Pass, Verdict::Pass, Verdict::Pass, Verdict::Delay(100)]
    );
}

#[test]
fn shards_spread_keys_and_the_bound_holds_over_random_keys() {
    let table = Table::new(config("t", 20_000, vec![store(DataType::HttpReqRate, Some(10))]));
    assert!(table.shards.len() > 1);
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    for i in 0..200_000u64 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        let key = Key::Ip((u128::from(state) << 64 | u128::from(i)).to_be_bytes());
        table.update(&key, Now(T0 + i), |row, _| row.add(DataType::HttpReqRate, 1));
    }
    assert!(table.used() <= 20_000, "used {}", table.used());
    assert!(table.used() >= 19_900, "used {}", table.used());
}

/// The issue's figure: a million IPv4 entries with three counters in at most 128 MiB. Run by
/// `scripts/bench-tables` (release), which also reads the process's resident memory.
#[test]
#[ignore = "a benchmark: scripts/bench-tables"]
fn a_million_ipv4_entries_with_three_counters() {
    let stored = vec![
        store(DataType::HttpReqRate, Some(10)),
        store(DataType::ConnCur, None),
        store(DataType::HttpErrRate, Some(10)),
    ];
    let tables = Tables::new(&[config("t", 1_000_000, stored)]);
    let table = tables.get("t").expect("table");
    let now = Now::read();
    let started = std::time::Instant::now();
    for i in 0..1_000_000u32 {
        let key = Key::ip(&table.config.key, IpAddr::from(i.wrapping_mul(2_654_435_761).to_be_bytes())).expect("key");
        table.update(&key, now, |row, _| row.add(DataType::HttpReqRate, 1));
    }
    let took = started.elapsed();
    let used = table.used();
    let bytes = table.allocated();
    let handed = handover::export(&tables).len();
    println!(
        "entries {used} table bytes {bytes} ({:.1} MiB) inserts {took:?} hand-over {:.1} MiB",
        bytes as f64 / 1048576.0,
        handed as f64 / 1048576.0
    );
    assert_eq!(used, 1_000_000);
    assert!(bytes <= 128 << 20);
    assert!(handed < 64 << 20, "a hand-over fits in one channel message");
}

#[test]
fn runtime_commands_read_and_write_entries_in_haproxys_words() {
    let mut cfg = config("per_ip", 100, vec![store(DataType::HttpReqRate, Some(10)), store(DataType::Gpc(0), None)]);
    cfg.key = KeyType::Ip { v4_prefix: 24, v6_prefix: 64 };
    let tables = Tables::new(&[cfg]);
    let run = |line: &str| command(&tables, &line.split_whitespace().collect::<Vec<_>>()).expect("a table command");
    assert_eq!(run("show table"), Ok("# table: per_ip, type: ip, size:100, used:0\n".into()));
    assert_eq!(run("set table per_ip key 192.0.2.7 data.gpc0 5 data.http_req_rate 40"), Ok(String::new()));
    assert_eq!(run("set table per_ip key 198.51.100.1 data.gpc0 1"), Ok(String::new()));
    let shown = run("show table per_ip data.gpc0 gt 1").expect("shown");
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines[0], "# table: per_ip, type: ip, size:100, used:2");
    assert_eq!(lines.len(), 2, "{shown}");
    let entry = regex::Regex::new(
        r"^0x[0-9a-f]+: key=192\.0\.2\.0/24 use=0 exp=\d+ shard=0 http_req_rate\(10000\)=\d+ gpc0=5$",
    )
    .expect("regex");
    assert!(entry.is_match(lines[1]), "{}", lines[1]);
    assert_eq!(run("show table per_ip key 192.0.2.99").expect("shown").lines().count(), 2, "same network");
    assert_eq!(run("show table nope"), Err("No such table.".into()));
    assert_eq!(run("show table per_ip data.gpc3 gt 1"), Err("Data type not stored in this table".into()));
    assert_eq!(run("show table per_ip data.sess_rate gt 1"), Err("Unknown data type".into()));
    assert!(run("show table per_ip data.gpc0 over 1").is_err_and(|e| e.starts_with("Require and operator")));
    assert!(run("show table per_ip data.gpc0 gt x").is_err_and(|e| e.starts_with("Require a valid integer")));
    assert!(run("set table per_ip key 10.0.0.1 data.gpc0 -1").is_err_and(|e| e.contains("to store")));
    assert!(run("set table per_ip key nope data.gpc0 1").is_err_and(|e| e.contains("not an IPv4 or IPv6")));
    assert_eq!(run("clear table per_ip data.gpc0 lt 2"), Ok(String::new()));
    assert_eq!(run("show table").expect("shown"), "# table: per_ip, type: ip, size:100, used:1\n");
    assert_eq!(run("clear table per_ip key 192.0.2.1"), Ok(String::new()));
    assert_eq!(run("show table").expect("shown"), "# table: per_ip, type: ip, size:100, used:0\n");
    assert_eq!(command(&tables, &["show", "stat"]), None, "not a table command");
}

#[test]
fn a_reload_hands_entries_over_and_then_what_was_counted_after() {
    let stored = vec![
        store(DataType::HttpReqRate, Some(10)),
        store(DataType::HttpReqCnt, None),
        store(DataType::ConnCur, None),
        store(DataType::BytesOutCnt, None),
        store(DataType::Gpt(0), None),
    ];
    let mut cfg = config("per_ip", 1000, stored);
    cfg.bucket = Some(Bucket { rate: 10, per: Duration::from_secs(1), burst: 50, nodelay: true, delay: 0 });
    let old = Tables::new(std::slice::from_ref(&cfg));
    let table = old.get("per_ip").expect("table").clone();
    let now = Now::read();
    for i in 0..300u32 {
        let key = Key::ip(&cfg.key, IpAddr::from((0x0a00_0000 + i).to_be_bytes())).expect("key");
        table.update(&key, now, |row, _| {
            row.add(DataType::HttpReqRate, u64::from(i % 7) + 1);
            row.add(DataType::HttpReqCnt, 3);
            row.add(DataType::BytesOutCnt, 5_000_000_000);
            row.set(DataType::Gpt(0), u64::from(i % 2));
        });
    }
    let held = Held::connection(&table, ip("10.0.0.1"), now).expect("held");
    let text = handover::export(&old);
    // The new worker starts from the old one's entries; a connection in progress stays with
    // the old worker.
    let new = Tables::new(std::slice::from_ref(&cfg));
    handover::import(&new, &text);
    let fresh = new.get("per_ip").expect("table");
    assert_eq!(fresh.used(), 300);
    let get = |t: &Table, key: &Key, data| t.read(key, Now::read(), |row| row.get(data)).flatten();
    let k7 = ip("10.0.0.7");
    assert_eq!(get(fresh, &k7, DataType::HttpReqCnt), Some(3));
    assert_eq!(get(fresh, &k7, DataType::BytesOutCnt), Some(5_000_000_000));
    assert_eq!(get(fresh, &k7, DataType::Gpt(0)), Some(1));
    assert_eq!(get(fresh, &ip("10.0.0.1"), DataType::ConnCur), Some(0));
    assert_eq!(get(&table, &ip("10.0.0.1"), DataType::ConnCur), Some(1));
    let rate = get(fresh, &k7, DataType::HttpReqRate).expect("rate");
    assert!(rate >= 1 && rate == get(&table, &k7, DataType::HttpReqRate).expect("rate"), "{rate}");
    // While the old worker drains it counts requests on its own connections, once, and
    // hands them over when it is done: nothing counted twice, nothing lost.
    table.update(&k7, Now::read(), |row, _| {
        row.add(DataType::HttpReqCnt, 2);
        row.add(DataType::HttpReqRate, 2);
        row.set(DataType::Gpt(0), 9);
    });
    table.update(&ip("10.9.9.9"), Now::read(), |row, _| row.add(DataType::HttpReqCnt, 1));
    fresh.update(&k7, Now::read(), |row, _| row.add(DataType::HttpReqCnt, 10));
    drop(held);
    let late = handover::late(&old);
    handover::import(&new, &late);
    assert_eq!(get(fresh, &k7, DataType::HttpReqCnt), Some(3 + 2 + 10));
    assert_eq!(get(fresh, &k7, DataType::Gpt(0)), Some(9));
    assert!(get(fresh, &k7, DataType::HttpReqRate).expect("rate") >= rate + 2);
    assert_eq!(get(fresh, &ip("10.9.9.9"), DataType::HttpReqCnt), Some(1));
    assert_eq!(get(fresh, &ip("10.0.0.8"), DataType::HttpReqCnt), Some(3), "unchanged entries: no late count");
    assert_eq!(handover::late(&old), "", "handed once");
    // A table whose stored data changed starts empty; garbage is refused whole.
    let mut changed = cfg.clone();
    changed.store.pop();
    let other = Tables::new(&[changed]);
    handover::import(&other, &text);
    assert_eq!(other.get("per_ip").expect("table").used(), 0);
    let same = Tables::new(std::slice::from_ref(&cfg));
    handover::import(&same, "not base64 at all!");
    handover::import(&same, &text[..text.len() / 2]);
    assert_eq!(same.get("per_ip").expect("table").used(), 0, "garbage is refused whole");
    // Another limit_req rate keeps the entries: the cells are the same.
    let mut faster = cfg.clone();
    faster.bucket = Some(Bucket { rate: 20, per: Duration::from_secs(1), burst: 50, nodelay: true, delay: 0 });
    let kept = Tables::new(&[faster]);
    handover::import(&kept, &text);
    assert_eq!(kept.get("per_ip").expect("table").used(), 300, "a changed rate keeps the counts");
}

fn fleet_tables() -> Tables {
    let mut fleet = config("fleet", 10, vec![store(DataType::HttpReqCnt, None), store(DataType::Gpt(0), None)]);
    fleet.fleet = true;
    fleet.bucket = Some(Bucket { rate: 10, per: Duration::from_secs(1), burst: 6, nodelay: true, delay: 0 });
    Tables::new(&[fleet, config("local", 10, vec![store(DataType::HttpReqCnt, None)])])
}

#[test]
fn the_fleet_share_divides_a_fleet_tables_bucket() {
    // 10 r/s with a burst of 6 for the fleet; over 3 nodes each lets 10/3 r/s and a burst of 2.
    let tables = fleet_tables();
    assert_eq!(command(&tables, &["set", "fleet", "share", "3"]), Some(Ok(String::new())));
    let table = tables.get("fleet").expect("the fleet table");
    let key = ip("10.0.0.1");
    let take = |at| table.update(&key, Now(at), |row, _| row.take(table.share())).flatten().expect("a bucket");
    assert!((0..3).all(|_| take(T0) == Verdict::Pass), "the first request and a burst of 2");
    assert_eq!(take(T0), Verdict::Refuse { retry_after_ms: 300 });
    // One request drains in 300 ms at 10/3 r/s.
    assert_eq!(take(T0 + 300), Verdict::Pass);
    assert!(matches!(take(T0 + 300), Verdict::Refuse { .. }));
    assert_eq!(tables.get("local").expect("the local table").share(), 1, "a table not `fleet` is whole");
}

#[test]
fn conditions_read_a_fleet_tables_figures_times_the_share() {
    let tables = fleet_tables();
    let fleet = tables.get("fleet").expect("the fleet table").clone();
    let local = tables.get("local").expect("the local table").clone();
    let mut tracked = Tracked::default();
    assert_eq!(tracked.track(0, &fleet, ip("10.0.0.1"), Now(T0)), TrackOutcome::Counted);
    assert_eq!(tracked.track(1, &local, ip("10.0.0.1"), Now(T0)), TrackOutcome::Counted);
    tracked.mark(&Mark { slot: 0, index: 0, value: 1 }, true, Now(T0));
    command(&tables, &["set", "fleet", "share", "4"]);
    assert_eq!(tracked.read(0, DataType::HttpReqCnt), Some(1), "the figure itself is this node's");
    assert_eq!(tracked.read_against_limit(0, DataType::HttpReqCnt), Some(4), "the fleet's, spread evenly");
    assert_eq!(tracked.read_against_limit(0, DataType::Gpt(0)), Some(1), "a tag is not a count");
    assert_eq!(tracked.read_against_limit(1, DataType::HttpReqCnt), Some(1), "a table not `fleet`");
}

#[test]
fn set_fleet_share_is_checked_and_shown_on_fleet_tables() {
    let tables = fleet_tables();
    let show = |tables: &Tables| command(tables, &["show", "table"]).expect("a table command").expect("shown");
    assert!(show(&tables).contains("# table: fleet, type: ip, size:10, used:0, share:1\n"), "{}", show(&tables));
    command(&tables, &["set", "fleet", "share", "7"]);
    let shown = show(&tables);
    assert!(shown.contains("used:0, share:7\n"), "{shown}");
    assert!(shown.contains("# table: local, type: ip, size:10, used:0\n"), "{shown}");
    for bad in ["0", "-1", "x", "4294967296"] {
        let refused = command(&tables, &["set", "fleet", "share", bad]).expect("a table command");
        assert!(refused.expect_err("refused").contains("number of live nodes"), "{bad}");
    }
    assert!(command(&tables, &["set", "fleet"]).expect("a table command").is_err());
    assert_eq!(tables.share(), 7, "a refused command changes nothing");
}
