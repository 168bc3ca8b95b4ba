//! Validation without certificates on disk: every problem located, certificate files named.

use std::path::Path;

use super::Config;

fn errors(text: &str) -> Vec<String> {
    match Config::parse_in(text, "t.yaml", Path::new("/nonexistent")) {
        Ok(_) => panic!("expected errors for:\n{text}"),
        Err(e) => e.to_string().lines().map(str::to_owned).collect(),
    }
}

#[test]
fn control_socket_backend_and_frontends_are_required() {
    let e = errors("tls: { certificates: [ a.pem ] }\n");
    assert!(e.iter().any(|l| l.contains("control_socket is required")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("backend.address is required")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("frontends: at least one frontend")), "{e:?}");
}

#[test]
fn a_missing_certificate_is_named_at_its_entry() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls:\n  certificates:\n    - missing.pem\nbackend: { address: \"127.0.0.1:1\" }\n\
         frontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert_eq!(e, ["t.yaml:4:7: tls.certificates[0]: cannot read /nonexistent/missing.pem: No such file or directory (os error 2)"]);
}

#[test]
fn a_certificate_path_that_is_no_file_is_refused_without_reading_it_whole() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls:\n  certificates:\n    - /dev/zero\nbackend: { address: \"127.0.0.1:1\" }\n\
         frontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert_eq!(e, ["t.yaml:4:7: tls.certificates[0]: /dev/zero: larger than 1 MiB: not a certificate file"]);
}

#[test]
fn frontend_settings_are_located_in_the_frontend() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\", write_proxy: v3 }\n\
         frontends:\n  - bind: \"127.0.0.1:2\"\n    tls: { protocols: [ TLSv2 ], client_cert: required }\
         \n  - { bind: \"127.0.0.1:2\", tls: { client_cert: always } }\n",
    );
    // The words accepted, listed from the same tables the configuration writer spells them by.
    assert!(e.iter().any(|l| l == "t.yaml:3:49: backend.write_proxy: `v3`: expected v2, v1 or none"), "{e:?}");
    let protocols =
        "t.yaml:6:25: frontends[0].tls.protocols[0]: `TLSv2`: expected TLSv1.0, TLSv1.1, TLSv1.2 or TLSv1.3";
    assert!(e.iter().any(|l| l == protocols), "{e:?}");
    let client_cert = "frontends[1].tls.client_cert: `always`: expected none, optional or required";
    assert!(e.iter().any(|l| l.ends_with(client_cert)), "{e:?}");
    assert!(
        e.iter().any(|l| l.contains("frontends[0]: client_cert optional or required needs tls.client_ca")),
        "{e:?}"
    );
    assert!(e.iter().any(|l| l.contains("frontends[1].bind: 127.0.0.1:2 is bound by an earlier frontend")), "{e:?}");
}

#[test]
fn the_example_configuration_is_valid_but_for_its_certificate_files() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/lb-tls.yaml");
    let e = match Config::load(&path) {
        Ok(_) => return, // a machine with those certificates installed
        Err(e) => e.to_string(),
    };
    for line in e.lines() {
        assert!(line.contains("cannot read /etc/lb/"), "only the certificate files are missing: {line}");
    }
}

#[test]
fn a_session_cache_size_out_of_range_is_located() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ], session_cache_size: -1 }\n\
         backend: { address: \"127.0.0.1:1\" }\nfrontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(
        e.iter()
            .any(|l| l.starts_with("t.yaml:2:53: tls.session_cache_size: must be between 0 (no cache) and 10000000")),
        "{e:?}"
    );
}

#[test]
fn ticket_key_schedules_that_keep_too_many_keys_are_refused() {
    let e = errors(
        "global: { control_socket: m.sock, ticket_key_rotation: 10s, ticket_lifetime: 1h }\n\
         tls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\nfrontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(e.iter().any(|l| l.contains("global.ticket_lifetime: keeps more than 100 ticket keys")), "{e:?}");
    let e = errors(
        "global: { control_socket: m.sock, ticket_key_rotation: 500ms }\n\
         tls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\nfrontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(e.iter().any(|l| l.contains("global.ticket_key_rotation: must be 1s or more")), "{e:?}");
}

#[test]
fn metrics_and_runtime_addresses_are_loopback_only_and_not_a_frontend() {
    let e = errors(
        "global:\n  control_socket: m.sock\n  metrics_address: \"127.0.0.1:2\"\n  runtime_address: \"0.0.0.0:9\"\n\
         tls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\nfrontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(
        e.iter().any(|l| l.starts_with("t.yaml:4:20: global.runtime_address: must be a loopback address")),
        "{e:?}"
    );
    assert!(
        e.iter().any(|l| l.starts_with("t.yaml:3:20: global.metrics_address: 127.0.0.1:2 is bound by a frontend")),
        "{e:?}"
    );
    let e = errors(
        "global: { control_socket: m.sock, metrics_address: localhost }\ntls: { certificates: [ a.pem ] }\n\
         backend: { address: \"127.0.0.1:1\" }\nfrontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(e.iter().any(|l| l.contains("global.metrics_address: expected IP:port, got `localhost`")), "{e:?}");
}

#[test]
fn a_missing_control_socket_does_not_hide_the_other_global_problems() {
    let e = errors("global: { worker_threads: 0, user: \"a b\" }\n");
    assert!(e.iter().any(|l| l.contains("control_socket is required")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("global.worker_threads: must be between 1 and 1024")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("global.user: `a b` must not contain spaces")), "{e:?}");
}

#[test]
fn a_udp_frontend_is_located_where_quic_cannot_follow() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\n\
         frontends:\n  - bind: \"udp:127.0.0.1:2\"\n    proxy_proxy: true\n    tls: { protocols: [ TLSv1.2 ] }\n\
         \x20 - bind: \"udp:example.test:443\"\n  - bind: \"127.0.0.1:2\"\n",
    );
    assert!(
        e.iter().any(
            |l| l.starts_with("t.yaml:6:18: frontends[0].proxy_proxy: a UDP (QUIC) frontend reads no PROXY header")
        ),
        "{e:?}"
    );
    assert!(e.iter().any(|l| l.contains("frontends[0]: a UDP (QUIC) frontend needs TLSv1.3")), "{e:?}");
    assert!(
        e.iter().any(|l| l.starts_with("t.yaml:8:11: frontends[1].bind: `udp:example.test:443`: expected udp:IP:port")),
        "{e:?}"
    );
    // The same port number over TCP is another address.
    assert!(!e.iter().any(|l| l.contains("bound by an earlier frontend")), "{e:?}");
}

#[test]
fn quic_settings_are_checked_and_located_and_only_on_a_udp_frontend() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\n\
         frontends:\n  - bind: \"udp:127.0.0.1:2\"\n    quic: { retry_threshold: -1, max_streams: 0 }\n\
         \x20 - bind: \"127.0.0.1:2\"\n    quic: { max_streams: 10 }\n",
    );
    assert!(e.iter().any(|l| l.contains("frontends[0].quic.retry_threshold")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("frontends[0].quic.max_streams")), "{e:?}");
    assert!(e.iter().any(|l| l.contains("frontends[1].quic: quic settings apply to a UDP frontend only")), "{e:?}");
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\nbackend: { address: \"127.0.0.1:1\" }\n\
         frontends:\n  - bind: \"udp:127.0.0.1:3\"\n    quic: { allow_0rtt: true }\n",
    );
    assert!(e.iter().any(|l| l.contains("allow_0rtt")), "an unknown key is refused: {e:?}");
}

#[test]
fn zero_rtt_without_session_tickets_is_refused() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ], session_tickets: false }\n\
         backend: { address: \"127.0.0.1:1\" }\nfrontends:\n  - bind: \"udp:127.0.0.1:3\"\n    quic: { zero_rtt: true }\n",
    );
    assert!(e.iter().any(|l| l.contains("frontends[0].quic.zero_rtt: 0-RTT needs resumption")), "{e:?}");
}

#[test]
fn multiplex_needs_a_proxy_header_for_each_stream() {
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\n\
         backend: { address: \"unix:/run/p.sock\", write_proxy: none, multiplex: true }\n\
         frontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(
        e.iter().any(|l| l.starts_with("t.yaml:3:71: backend.multiplex: needs a PROXY header for each stream")),
        "{e:?}"
    );
    let e = errors(
        "global: { control_socket: m.sock }\ntls: { certificates: [ a.pem ] }\n\
         backend: { address: \"unix:/run/p.sock\", multiplex: yes please }\n\
         frontends: [ { bind: \"127.0.0.1:2\" } ]\n",
    );
    assert!(e.iter().any(|l| l.starts_with("t.yaml:3:") && l.contains("backend.multiplex")), "{e:?}");
}
