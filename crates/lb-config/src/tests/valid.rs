//! Valid configurations: defaults, overrides, and every form a value may take.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{load_rich, parse_ok, MINIMAL};
use crate::*;

fn addr(text: &str) -> SocketAddr {
    text.parse().expect("test address")
}

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

#[test]
fn a_minimal_config_gets_every_default() {
    let config = parse_ok(MINIMAL);
    assert_eq!(config.global, Global::default());
    assert_eq!(config.global.max_connections, 4096);
    assert_eq!(config.global.supervision.control_socket, PathBuf::from("/var/run/lb/lb-proxy.sock"));
    assert_eq!(config.global.supervision.runtime.socket, Some(PathBuf::from("/var/run/lb/lb-proxy-runtime.sock")));
    assert_eq!(config.global.log.target, LogTarget::Stdout);
    assert_eq!(config.global.log.format, LogFormat::Haproxy);
    assert_eq!(config.global.log.tag, "haproxy");
    assert_eq!(config.global.log.facility, Facility::Local0);

    let web = config.frontend("web").expect("frontend web");
    assert_eq!(web.mode, Mode::Http);
    assert!(!web.tls);
    assert_eq!(
        web.binds,
        vec![Bind {
            address: ListenAddr::Tcp(addr("127.0.0.1:8080")),
            accept_proxy: false,
            mode: None,
            user: None,
            group: None
        }]
    );
    assert_eq!(web.max_connections, None);
    assert_eq!(web.max_header_size, 16 * 1024);
    assert!(web.forward_for);
    assert_eq!(web.error_pages, ErrorPages::defaults());
    let expected = Timeouts {
        connect: secs(5),
        client: secs(30),
        server: secs(30),
        http_request: secs(10),
        http_keep_alive: secs(10),
        check: secs(2),
        tunnel: secs(3600),
    };
    assert_eq!(web.timeouts, expected);

    let app = config.backend("app").expect("backend app");
    assert_eq!(app.mode, Mode::Http);
    assert_eq!(app.balance, Balance::LeastConn);
    assert_eq!(app.retries, 3);
    assert!(app.redispatch);
    assert_eq!(app.http_reuse, HttpReuse::Never);
    assert_eq!(app.timeouts, expected);
    assert_eq!(app.health_check, HealthCheck { kind: CheckKind::Tcp, interval: secs(2), rise: 2, fall: 3 });
    let server = &app.servers[0];
    assert_eq!(server.address, addr("10.0.0.1:80"));
    assert_eq!(server.weight, 1);
    assert!(!server.check);
    assert_eq!(server.slowstart, None);
    assert_eq!(server.max_connections, None);
    assert_eq!(server.state, AdminState::Ready);
}

#[test]
fn the_rich_config_resolves_every_key() {
    let (dir, config) = load_rich();
    let base = dir.path();
    let g = &config.global;
    assert_eq!(g.max_connections, 10_000);
    assert_eq!(g.supervision.worker_threads, Some(2));
    assert_eq!(g.supervision.user.as_deref(), Some("nobody"));
    assert_eq!(g.supervision.group.as_deref(), Some("nogroup"));
    assert_eq!(g.supervision.control_socket, base.join("run/master.sock"));
    assert_eq!(g.log.target, LogTarget::SyslogUdp(addr("[::1]:1514")));
    assert_eq!(g.log.format, LogFormat::Json);
    assert_eq!(g.log.tag, "lb");
    assert_eq!(g.log.facility, Facility::Local3);
    assert_eq!(g.log.facility.code(), 19);
    assert_eq!(g.log.hostname.as_deref(), Some("lb1"));

    let https = config.frontend("https_in").expect("https_in");
    let binds: Vec<(String, bool)> = https.binds.iter().map(|b| (b.address.to_string(), b.accept_proxy)).collect();
    let unix = format!("unix:{}", base.join("run/in.sock").display());
    let expected = [
        ("127.0.0.1:8443".to_owned(), true),
        ("[::1]:8443".to_owned(), true),
        (unix, true),
        ("127.0.0.1:8444".to_owned(), false),
    ];
    assert_eq!(binds, expected);
    assert!(https.tls);
    assert_eq!(https.default_backend.as_deref(), Some("secure_api"));
    assert_eq!(https.max_connections, Some(2000));
    assert_eq!(https.max_header_size, 32 * 1024);
    assert!(!https.forward_for);
    assert_eq!(https.rules.len(), 3);
    assert_eq!(
        https.rules[2],
        Rule {
            path_prefix: Some("/v2".to_owned()),
            host: Some("x.example.com".to_owned()),
            guard: None,
            backend: RouteTarget::Backend("v2".to_owned()),
        }
    );

    let tcp_in = config.frontend("tcp_in").expect("tcp_in");
    assert_eq!(tcp_in.mode, Mode::Tcp);
    assert_eq!(tcp_in.binds[0].address, ListenAddr::Tcp(addr("0.0.0.0:9000")));

    let api = config.backend("secure_api").expect("secure_api");
    assert_eq!(api.balance, Balance::RoundRobin);
    assert_eq!(api.retries, 2);
    assert!(!api.redispatch);
    assert_eq!(api.http_reuse, HttpReuse::Safe);
    let kind = CheckKind::Http {
        method: "HEAD".to_owned(),
        path: "/health".to_owned(),
        host: Some("api.example.com".to_owned()),
        expect_status: 204,
    };
    assert_eq!(api.health_check, HealthCheck { kind, interval: secs(5), rise: 3, fall: 4 });
    let api1 = &api.servers[0];
    assert_eq!((api1.weight, api1.check, api1.slowstart), (10, true, Some(secs(30))));
    assert_eq!((api1.max_connections, api1.state), (Some(100), AdminState::Ready));
    assert_eq!(api.servers[1].address, addr("[2001:db8::2]:8080"));
    assert_eq!(api.servers[1].state, AdminState::Drain);
    assert_eq!((api.servers[2].weight, api.servers[2].state), (0, AdminState::Maint));

    assert!(config.backend("admin_api").expect("admin_api").servers.is_empty());
    assert!(config.backend("v2").expect("v2").servers.is_empty());
    let pool = config.backend("tcp_pool").expect("tcp_pool");
    assert_eq!(pool.mode, Mode::Tcp);
    assert_eq!(pool.health_check.interval, Duration::from_millis(250));
    // The frontends' five addresses and the stats listener.
    assert_eq!(config.listen_addrs().len(), 6);
    let stats = config.global.stats.clone().expect("stats");
    assert_eq!((stats.address, stats.refresh), (addr("127.0.0.1:8404"), secs(3)));
    assert_eq!(config.global.supervision.runtime.tcp, Some(addr("127.0.0.1:9999")));
}

#[test]
fn defaults_merge_under_each_section_override() {
    let (_dir, config) = load_rich();
    let https = config.frontend("https_in").expect("https_in");
    // client from the frontend, the rest from defaults, untouched keys from the built-ins.
    let frontend_expected = Timeouts {
        connect: secs(4),
        client: secs(60),
        server: secs(31),
        http_request: secs(10),
        http_keep_alive: secs(9),
        check: Duration::from_millis(1500),
        tunnel: secs(3600),
    };
    assert_eq!(https.timeouts, frontend_expected);
    let api = config.backend("secure_api").expect("secure_api");
    assert_eq!(api.timeouts, Timeouts { client: secs(30), server: secs(60), tunnel: secs(7200), ..frontend_expected });
    let v2 = config.backend("v2").expect("v2");
    assert_eq!(v2.retries, 4, "retries from defaults");
    assert_eq!(v2.timeouts.server, secs(31));
    assert_eq!(v2.balance, Balance::LeastConn);
}

#[test]
fn defaults_mode_applies_to_sections_that_do_not_set_one() {
    let config = parse_ok(
        "defaults: { mode: tcp, balance: roundrobin, retries: 0, redispatch: false, \
         http_reuse: safe, max_header_size: 8192, forward_for: false }\n\
         frontends: [{ name: f, bind: ['127.0.0.1:1'], default_backend: b }]\n\
         backends: [{ name: b }]\n",
    );
    let (f, b) = (&config.frontends[0], &config.backends[0]);
    assert_eq!((f.mode, b.mode), (Mode::Tcp, Mode::Tcp));
    assert_eq!((f.max_header_size, f.forward_for), (8192, false));
    assert_eq!((b.balance, b.retries, b.redispatch), (Balance::RoundRobin, 0, false));
    assert_eq!(b.http_reuse, HttpReuse::Safe);
    assert_eq!(f.max_body_size, None, "no body limit unless one is set");
}

#[test]
fn max_body_size_comes_from_defaults_unless_a_frontend_sets_its_own() {
    let config = parse_ok(
        "defaults: { max_body_size: 10m }\n\
         frontends: [{ name: f, bind: ['127.0.0.1:1'], default_backend: b },\n\
                     { name: g, bind: ['127.0.0.1:2'], default_backend: b, max_body_size: 512k }]\n\
         backends: [{ name: b }]\n",
    );
    assert_eq!(config.frontends[0].max_body_size, Some(10 * 1024 * 1024));
    assert_eq!(config.frontends[1].max_body_size, Some(512 * 1024));
}

#[test]
fn a_frontend_and_a_backend_may_share_a_name() {
    let config = parse_ok(
        "frontends: [{ name: api, bind: ['127.0.0.1:1'], default_backend: api }]\n\
         backends: [{ name: api }]\n",
    );
    assert_eq!(config.frontends[0].name, config.backends[0].name);
}

#[test]
fn rules_alone_are_enough_to_route() {
    let config = parse_ok(
        "frontends: [{ name: f, bind: ['127.0.0.1:1'], rules: [{ host: a.example, backend: b }] }]\n\
         backends: [{ name: b }]\n",
    );
    assert_eq!(config.frontends[0].default_backend, None);
}

#[test]
fn bind_and_log_address_forms() {
    let config = parse_ok(
        "global: { log: { target: 'udp:10.0.0.9' } }\n\
         frontends: [{ name: f, bind: [':81', '*:82', '[::]:83', 'unix:/run/x.sock'], default_backend: b }]\n\
         backends: [{ name: b }]\n",
    );
    let binds: Vec<String> = config.frontends[0].binds.iter().map(|b| b.address.to_string()).collect();
    assert_eq!(binds, ["0.0.0.0:81", "0.0.0.0:82", "[::]:83", "unix:/run/x.sock"]);
    assert_eq!(config.global.log.target, LogTarget::SyslogUdp(addr("10.0.0.9:514")));
    for (target, expected) in [
        ("stdout", LogTarget::Stdout),
        ("none", LogTarget::None),
        ("unix:/dev/log", LogTarget::SyslogUnix(PathBuf::from("/dev/log"))),
        ("'udp:[::1]:514'", LogTarget::SyslogUdp(addr("[::1]:514"))),
    ] {
        let text = MINIMAL.replace("frontends:", &format!("global: {{ log: {{ target: {target} }} }}\nfrontends:"));
        let config = parse_ok(&text);
        assert_eq!(config.global.log.target, expected);
        assert_eq!(config.global.log.target.to_string(), target.trim_matches('\''));
    }
}

#[test]
fn relative_paths_in_parsed_text_are_taken_from_the_current_directory() {
    let config = parse_ok(&MINIMAL.replace("[127.0.0.1:8080]", "['unix:in.sock']"));
    let cwd = std::env::current_dir().expect("current directory");
    assert_eq!(config.frontends[0].binds[0].address, ListenAddr::Unix(cwd.join("in.sock")));
}

#[test]
fn enumerated_values_display_as_written() {
    assert_eq!(Mode::Tcp.to_string(), "tcp");
    assert_eq!(Balance::LeastConn.to_string(), "leastconn");
    assert_eq!(HttpReuse::Safe.as_str(), "safe");
    assert_eq!(AdminState::Maint.to_string(), "maint");
    assert_eq!(LogFormat::Json.to_string(), "json");
    assert_eq!(Facility::Daemon.to_string(), "daemon");
    assert_eq!(Facility::Kern.code(), 0);
    assert_eq!(Facility::Local7.code(), 23);
}

#[test]
fn keywords_are_case_insensitive() {
    let config = parse_ok(&MINIMAL.replace("  - name: app\n", "  - name: app\n    balance: RoundRobin\n"));
    assert_eq!(config.backends[0].balance, Balance::RoundRobin);
}
