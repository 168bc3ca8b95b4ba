//! Each kind of problem, with its exact location and message.

use super::{error, errors, MINIMAL};
use crate::{Config, Error};

#[test]
fn a_bad_port_is_located_at_the_value() {
    let text = "\
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: a
backends:
  - name: a
  - name: b
    servers:
      - { name: s0, address: 10.0.0.1:80 }
      - { name: s1, address: 10.0.0.2:80 }
      - { name: s2, address: 10.0.0.3:80 }
      - name: s3
        address: 10.0.0.4:99999
";
    assert_eq!(error(text), "proxy.yaml:13:18: backends[1].servers[3].address: invalid port 99999");
}

#[test]
fn server_addresses_must_be_ip_and_port() {
    let cases = [
        ("api.local:80", "expected IP:port (no host names), got `api.local:80`"),
        ("10.0.0.1", "expected IP:port, got `10.0.0.1`"),
        ("'10.0.0.1:'", "expected IP:port, got `10.0.0.1:` (the port is missing)"),
        ("10.0.0.1:http", "invalid port http"),
        ("10.0.0.1:0", "invalid port 0"),
        ("'::1:80'", "expected IP:port, got `::1:80` (write an IPv6 address in brackets: [::1]:80)"),
    ];
    for (address, message) in cases {
        let text = MINIMAL.replace("10.0.0.1:80", address);
        let expected = format!("proxy.yaml:8:30: backends[0].servers[0].address: {message}");
        assert_eq!(error(&text), expected, "{address}");
    }
}

#[test]
fn unknown_keys_are_rejected_where_they_are_written() {
    let text = MINIMAL.replace("      - { name: a1,", "      - { nmae: a1,");
    assert_eq!(
        error(&text),
        "proxy.yaml:8:11: backends[0].servers[0]: unknown field `nmae`, expected one of `name`, \
         `address`, `weight`, `check`, `slowstart`, `max_connections`, `state`"
    );
    let text = format!("{MINIMAL}listen: {{}}\n");
    assert!(error(&text).starts_with("proxy.yaml:9:1: unknown field `listen`, expected one of"));
    let text = MINIMAL.replace("    default_backend", "    timeouts: { clinet: 1s }\n    default_backend");
    assert!(
        error(&text).starts_with("proxy.yaml:4:17: frontends[0].timeouts: unknown field `clinet`"),
        "{}",
        error(&text)
    );
}

#[test]
fn bind_entries_are_an_address_or_a_map_of_known_keys() {
    let text = MINIMAL.replace("[127.0.0.1:8080]", "[{ address: '127.0.0.1:8080', bogus: 1 }]");
    assert_eq!(
        error(&text),
        "proxy.yaml:3:41: frontends[0].bind[0]: unknown field `bogus`, expected one of `address`, `accept_proxy`, `mode`, `user`, `group`"
    );
    let text = MINIMAL.replace("[127.0.0.1:8080]", "[[1]]");
    assert_eq!(
        error(&text),
        "proxy.yaml:3:12: frontends[0].bind[0]: invalid type: sequence, expected an address such \
         as 127.0.0.1:80, or a map with `address` and `accept_proxy`"
    );
    let text = MINIMAL.replace("[127.0.0.1:8080]", "[8080]");
    assert_eq!(error(&text), "proxy.yaml:3:12: frontends[0].bind[0]: expected IP:port, got `8080`");
}

#[test]
fn wrong_types_are_reported_by_path() {
    let text = MINIMAL.replace("address: 10.0.0.1:80", "address: 10.0.0.1:80, weight: heavy");
    assert_eq!(
        error(&text),
        "proxy.yaml:8:51: backends[0].servers[0].weight: invalid type: string \"heavy\", expected \
         an integer"
    );
    let text = MINIMAL.replace("bind: [127.0.0.1:8080]", "bind: 127.0.0.1:8080");
    assert_eq!(
        error(&text),
        "proxy.yaml:3:11: frontends[0].bind: invalid type: string \"127.0.0.1:8080\", expected a \
         sequence"
    );
    assert_eq!(
        error("- a\n"),
        "proxy.yaml:1:1: invalid type: sequence, expected a map with `global`, `defaults`, \
         `frontends` and `backends`"
    );
}

#[test]
fn syntax_errors_carry_their_location() {
    let message = error("frontends: [\n");
    assert!(message.starts_with("proxy.yaml:2:1: "), "{message}");
    let message = error("frontends:\n  - name: a\n   bad: indentation\n");
    assert!(message.starts_with("proxy.yaml:3:"), "{message}");
}

#[test]
fn duplicate_keys_are_reported_at_the_second() {
    let text = MINIMAL.replace("    default_backend: app\n", "    default_backend: app\n    default_backend: web\n");
    assert_eq!(error(&text), "proxy.yaml:5:5: frontends[0].default_backend: duplicate key (first written at line 4)");
}

#[test]
fn out_of_range_numbers_say_the_range() {
    let text = "\
global:
  max_connections: 0
  worker_threads: 1025
defaults:
  retries: 101
  max_header_size: 4k
  timeouts: { connect: 0, client: 25h }
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: app
    max_header_size: 2m
    max_connections: -1
    max_body_size: 0
backends:
  - name: app
    health_check: { rise: 0, fall: 101, interval: 0ms, expect_status: 99, type: http }
    servers:
      - { name: a1, address: 10.0.0.1:80, weight: 257, max_connections: 0, slowstart: 86400001 }
";
    let expected = [
        "proxy.yaml:2:20: global.max_connections: must be at least 1, got 0",
        "proxy.yaml:3:19: global.worker_threads: must be between 1 and 1024, got 1025",
        "proxy.yaml:5:12: defaults.retries: must be between 0 and 100, got 101",
        "proxy.yaml:6:20: defaults.max_header_size: must be between 8192 and 1048576 bytes, got 4096",
        "proxy.yaml:7:24: defaults.timeouts.connect: must be between 1ms and 24h, got 0ms",
        "proxy.yaml:7:35: defaults.timeouts.client: must be between 1ms and 24h, got 25h",
        "proxy.yaml:12:22: frontends[0].max_header_size: must be between 8192 and 1048576 bytes, got 2097152",
        "proxy.yaml:13:22: frontends[0].max_connections: must be at least 1, got -1",
        "proxy.yaml:14:20: frontends[0].max_body_size: must be between 1 and 1099511627776 bytes, got 0",
        "proxy.yaml:17:27: backends[0].health_check.rise: must be between 1 and 100, got 0",
        "proxy.yaml:17:36: backends[0].health_check.fall: must be between 1 and 100, got 101",
        "proxy.yaml:17:51: backends[0].health_check.interval: must be between 1ms and 24h, got 0ms",
        "proxy.yaml:17:71: backends[0].health_check.expect_status: must be between 100 and 599, got 99",
        "proxy.yaml:19:51: backends[0].servers[0].weight: must be between 0 and 256, got 257",
        "proxy.yaml:19:73: backends[0].servers[0].max_connections: must be at least 1, got 0",
        "proxy.yaml:19:87: backends[0].servers[0].slowstart: must be between 1ms and 24h, got 86400001ms",
    ];
    assert_eq!(errors(text), expected);
}

#[test]
fn unknown_keywords_list_the_accepted_values() {
    let text = "\
global:
  log: { target: syslog, format: xml, facility: local8 }
defaults:
  mode: udp
  balance: random
  http_reuse: always
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: app
backends:
  - name: app
    health_check: { type: icmp }
    servers: [{ name: a1, address: 10.0.0.1:80, state: down }]
";
    let expected = [
        "proxy.yaml:2:18: global.log.target: unknown log target `syslog`: expected one of stdout, none, unix:/path, udp:IP:port",
        "proxy.yaml:2:34: global.log.format: unknown format `xml`: expected one of haproxy, json",
        "proxy.yaml:2:49: global.log.facility: unknown facility `local8`: expected one of kern, user, daemon, local0, local1, local2, local3, local4, local5, local6, local7",
        "proxy.yaml:4:9: defaults.mode: unknown mode `udp`: expected one of http, tcp",
        "proxy.yaml:5:12: defaults.balance: unknown balance `random`: expected one of leastconn, roundrobin",
        "proxy.yaml:6:15: defaults.http_reuse: unknown http reuse `always`: expected one of never, safe",
        "proxy.yaml:13:27: backends[0].health_check.type: unknown type `icmp`: expected one of tcp, http",
        "proxy.yaml:14:56: backends[0].servers[0].state: unknown state `down`: expected one of ready, drain, maint",
    ];
    assert_eq!(errors(text), expected);
}

#[test]
fn names_and_words_are_checked() {
    let text = "\
global: { user: '', group: 'wheel users' }
frontends:
  - name: 'web front'
    bind: [127.0.0.1:8080]
    default_backend: app
  - bind: [127.0.0.1:8081]
    default_backend: app
backends:
  - name: ''
  - name: app
";
    let expected = [
        "proxy.yaml:1:17: global.user: must not be empty",
        "proxy.yaml:1:28: global.group: `wheel users` must not contain spaces",
        "proxy.yaml:3:11: frontends[0].name: invalid name `web front`: use only letters, digits, `_`, `.` and `-`",
        "proxy.yaml:6:5: frontends[1]: missing `name`",
        "proxy.yaml:9:11: backends[0].name: must not be empty",
    ];
    assert_eq!(errors(text), expected);
}

#[test]
fn health_check_details_only_apply_to_http_checks() {
    let text = MINIMAL.replace("    servers:", "    health_check: { path: /ping }\n    servers:");
    assert_eq!(error(&text), "proxy.yaml:7:27: backends[0].health_check.path: only applies to `type: http` checks");
    let text =
        MINIMAL.replace("    servers:", "    health_check: { type: http, path: ping, method: 'GE T' }\n    servers:");
    assert_eq!(
        errors(&text),
        [
            "proxy.yaml:7:39: backends[0].health_check.path: `ping` must start with `/` and contain no spaces",
            "proxy.yaml:7:53: backends[0].health_check.method: invalid HTTP method `GE T`",
        ]
    );
}

#[test]
fn every_problem_is_reported_in_file_order() {
    let text = "\
frontends:
  - name: web
    bind: [127.0.0.1:99999]
    default_backend: nowhere
backends:
  - name: app
    retries: -1
    servers:
      - { name: a, address: 10.0.0.1:80 }
      - { name: a, address: 10.0.0.2 }
";
    let expected = [
        "proxy.yaml:3:12: frontends[0].bind[0]: invalid port 99999",
        "proxy.yaml:4:22: frontends[0].default_backend: no backend named `nowhere`",
        "proxy.yaml:7:14: backends[0].retries: must be between 0 and 100, got -1",
        "proxy.yaml:10:17: backends[0].servers[1].name: duplicate server name `a` (first at line 9)",
        "proxy.yaml:10:29: backends[0].servers[1].address: expected IP:port, got `10.0.0.2`",
    ];
    assert_eq!(errors(text), expected);
}

#[test]
fn the_error_lists_every_diagnostic_one_per_line() {
    let text = MINIMAL.replace("10.0.0.1:80", "10.0.0.1:x").replace("app\n    servers", "nope\n    servers");
    let e = Config::parse(&text, "p.yaml").expect_err("invalid");
    assert_eq!(e.diagnostics().len(), 2);
    let shown = e.to_string();
    assert_eq!(shown.lines().count(), 2, "{shown}");
    assert!(shown.lines().all(|l| l.starts_with("p.yaml:")), "{shown}");
}

#[test]
fn a_missing_file_is_a_read_error() {
    let missing = std::path::Path::new("/nonexistent/lb-proxy.yaml");
    match Config::load(missing) {
        Err(Error::Read { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), std::io::ErrorKind::NotFound);
        }
        other => panic!("expected Error::Read, got {other:?}"),
    }
}

#[test]
fn diagnostics_from_a_file_name_it_as_given() {
    let dir = tempfile::tempdir().expect("temporary directory");
    let path = dir.path().join("bad.yaml");
    std::fs::write(&path, "frontends: []\n").expect("write");
    let e = Config::load(&path).expect_err("invalid");
    assert_eq!(e.to_string(), format!("{}:1:12: frontends: at least one frontend is required", path.display()));
}

#[test]
fn an_empty_document_needs_a_frontend() {
    assert_eq!(error(""), "proxy.yaml:1:1: frontends: at least one frontend is required");
    assert_eq!(error("# nothing\n"), "proxy.yaml:1:1: frontends: at least one frontend is required");
}

#[test]
fn stats_and_runtime_address_settings() {
    let with = |global: &str| format!("global:\n{global}{MINIMAL}");
    let ok =
        Config::parse(&with("  stats: { address: 127.0.0.1:8404 }\n  runtime_address: 127.0.0.1:9999\n"), "p.yaml");
    let config = ok.unwrap_or_else(|e| panic!("{e}"));
    let stats = config.global.stats.clone().unwrap_or_else(|| panic!("stats"));
    assert_eq!((stats.address.port(), stats.refresh.as_secs()), (8404, 5));
    assert_eq!(config.global.supervision.runtime.tcp.map(|a| a.port()), Some(9999));
    assert!(config.listen_addrs().contains(&crate::ListenAddr::Tcp(stats.address)), "the master holds it");

    let cases = [
        ("  stats: { address: 0.0.0.0:8404 }\n", "2:21: global.stats.address: must name one address (loopback or internal), not a wildcard: 0.0.0.0:8404"),
        ("  stats: { refresh: 2s }\n", "2:3: global.stats: `address` is required (a loopback or internal IP:port)"),
        ("  stats: { address: 127.0.0.1:8404, colour: red }\n", "colour"),
        ("  runtime_address: 10.1.2.3:9999\n", "2:20: global.runtime_address: must be a loopback address (runtime commands change the servers), got 10.1.2.3:9999"),
        ("  stats: { address: 127.0.0.1:8080 }\n", "global.stats.address: `127.0.0.1:8080` is also bound by frontend `web`"),
    ];
    for (global, message) in cases {
        let text = with(global);
        let got = errors(&text).join("\n");
        assert!(got.contains(message), "{global}: {got}");
    }
}

#[test]
fn a_unix_bind_takes_a_mode_user_and_group_and_a_tcp_bind_does_not() {
    let text = "\
frontends:
  - name: web
    bind:
      - { address: unix:/run/lb/in.sock, mode: \"0640\", user: lb, group: www }
      - { address: unix:/run/lb/other.sock, mode: 660 }
    default_backend: app
backends:
  - name: app
";
    let config = super::parse_ok(text);
    let binds = &config.frontends[0].binds;
    assert_eq!(
        (binds[0].mode, binds[0].user.as_deref(), binds[0].group.as_deref()),
        (Some(0o640), Some("lb"), Some("www"))
    );
    assert_eq!(binds[1].mode, Some(0o660), "a YAML number is read as octal digits, as HAProxy's `mode 660`");
    let text = "\
frontends:
  - name: web
    bind:
      - { address: 127.0.0.1:8080, mode: \"0600\" }
      - { address: unix:/run/lb/in.sock, mode: \"0999\" }
    default_backend: app
backends:
  - name: app
";
    let all = errors(text);
    assert!(
        all.iter()
            .any(|e| e.contains("frontends[0].bind[0].mode: only for a Unix socket (unix:/path), not 127.0.0.1:8080")),
        "{all:#?}"
    );
    assert!(all.iter().any(|e| e.contains("frontends[0].bind[1].mode: `0999` is not a mode")), "{all:#?}");
}

#[test]
fn http2_settings_are_checked_where_written() {
    let text = "\
frontends:
  - name: web
    bind: [127.0.0.1:8080]
    default_backend: app
    http2: { max_concurrent_streams: 0, stream_window: 1k, connection_window: 3000m }
backends:
  - name: app
    servers: [ { name: a1, address: 10.0.0.1:80 } ]
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:5:38: frontends[0].http2.max_concurrent_streams: must be between 1 and 10000, got 0",
            "proxy.yaml:5:56: frontends[0].http2.stream_window: must be between 65535 and 2147483647 bytes, got 1024",
            "proxy.yaml:5:79: frontends[0].http2.connection_window: must be between 65535 and 2147483647 bytes, \
             got 3145728000",
        ]
    );
    let unknown =
        "frontends: [ { name: web, bind: [127.0.0.1:8080], default_backend: app, http2: { streams: 10 } } ]\n\
backends: [ { name: app, servers: [ { name: a1, address: 10.0.0.1:80 } ] } ]\n";
    assert_eq!(
        error(unknown),
        "proxy.yaml:1:82: frontends[0].http2: unknown field `streams`, expected one of `enabled`, \
         `max_concurrent_streams`, `stream_window`, `connection_window`"
    );
}
