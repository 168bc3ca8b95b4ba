//! `Config::to_yaml` → `Config::parse` gives back an equal value.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{load_rich, parse_ok, MINIMAL};
use crate::*;

fn round_trip(config: &Config) -> Config {
    let yaml = config.to_yaml();
    match Config::parse(&yaml, "rendered.yaml") {
        Ok(again) => again,
        Err(e) => panic!("rendered YAML does not parse:\n{e}\n---\n{yaml}"),
    }
}

#[test]
fn the_rich_config_survives_a_round_trip() {
    let (_dir, config) = load_rich();
    let again = round_trip(&config);
    assert_eq!(again, config);
    // Rendering is stable: the second rendering is the first.
    assert_eq!(again.to_yaml(), config.to_yaml());
}

#[test]
fn the_rendering_is_explicit_and_readable() {
    let (dir, config) = load_rich();
    let yaml = config.to_yaml();
    for expected in [
        "connect: 4s",
        "check: 1500ms",
        "client: 1m",
        "max_header_size: 32k",
        "slowstart: 30s",
        "interval: 250ms",
        "target: udp:[::1]:1514",
        "address: 127.0.0.1:8443",
        "accept_proxy: true",
        "state: drain",
        "type: http",
        "expect_status: 204",
        "facility: local3",
    ] {
        assert!(yaml.contains(expected), "missing `{expected}` in:\n{yaml}");
    }
    let file = dir.path().join("errors/503-https.http");
    assert!(yaml.contains(&format!("503: {}", file.display())), "{yaml}");
    assert!(!yaml.contains("defaults:"), "{yaml}");
    // Built-in pages are what an absent key means; they are not written.
    assert!(!yaml.contains("504:"), "{yaml}");
}

#[test]
fn a_minimal_config_survives_a_round_trip() {
    let config = parse_ok(MINIMAL);
    assert_eq!(round_trip(&config), config);
}

#[test]
fn a_hand_built_config_survives_a_round_trip() {
    let addr = |s: &str| s.parse::<SocketAddr>().expect("address");
    let mut config = parse_ok(MINIMAL);
    config.global.supervision.worker_threads = Some(8);
    config.global.supervision.user = Some("123".to_owned());
    config.global.log.target = LogTarget::SyslogUnix(PathBuf::from("/dev/log"));
    config.global.log.hostname = Some("true".to_owned());
    config.frontends[0].binds.push(Bind {
        address: ListenAddr::Unix(PathBuf::from("/run/x y.sock")),
        accept_proxy: true,
        mode: Some(0o640),
        user: Some("lb".into()),
        group: None,
    });
    config.frontends[0].max_header_size = 10_000;
    config.frontends[0].max_body_size = Some(3 * 1024 * 1024 + 1);
    config.frontends[0].timeouts.client = Duration::from_millis(90_061);
    let backend = &mut config.backends[0];
    backend.name = "0x10".to_owned();
    config.frontends[0].default_backend = Some("0x10".to_owned());
    let backend = &mut config.backends[0];
    backend.servers.push(Server {
        name: "null".to_owned(),
        address: addr("[fe80::1]:443"),
        weight: 256,
        check: true,
        slowstart: Some(Duration::from_secs(3600)),
        max_connections: Some(1),
        state: AdminState::Maint,
    });
    backend.health_check.kind =
        CheckKind::Http { method: "OPTIONS".to_owned(), path: "/".to_owned(), host: None, expect_status: 599 };
    assert_eq!(round_trip(&config), config);
}
