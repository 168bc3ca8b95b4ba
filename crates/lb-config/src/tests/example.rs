//! The shipped example, etc/lb-proxy.yaml, loads and says what its comments promise.

use std::path::Path;

use crate::{Config, ListenAddr, Mode};

#[test]
fn the_example_config_loads() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/lb-proxy.yaml");
    let config = match Config::load(&path) {
        Ok(config) => config,
        Err(e) => panic!("{} does not load:\n{e}", path.display()),
    };
    let https = config.frontend("https_in").expect("frontend https_in");
    assert!(https.tls);
    assert_eq!(https.binds.len(), 1);
    // lb-tls reaches it over a Unix socket only its group may open.
    assert_eq!(https.binds[0].address, ListenAddr::Unix("/var/run/lb/proxy-tls.sock".into()));
    assert_eq!(https.binds[0].mode, Some(0o660));
    assert!(https.binds[0].accept_proxy);
    assert_eq!(https.default_backend.as_deref(), Some("secure_api"));

    let http = config.frontend("http_in").expect("frontend http_in");
    assert!(!http.tls);
    assert_eq!(http.binds[0].address, ListenAddr::Tcp("0.0.0.0:80".parse().expect("addr")));
    assert_eq!(http.default_backend.as_deref(), Some("insecure_api"));

    let internal = config.frontend("internal_in").expect("frontend internal_in");
    assert_eq!(internal.default_backend.as_deref(), Some("secure_api"));

    for name in ["secure_api", "insecure_api"] {
        let backend = config.backend(name).expect("backend");
        assert_eq!(backend.mode, Mode::Http);
        assert!(!backend.servers.is_empty(), "{name} lists example servers");
    }
    // Stats on the internal address, beside the internal frontend, never on a public one.
    let stats = config.global.stats.as_ref().expect("the example serves stats");
    let ListenAddr::Tcp(internal_addr) = &internal.binds[0].address else { panic!("internal_in binds TCP") };
    assert_eq!(stats.address.ip(), internal_addr.ip(), "stats on the internal address");
    assert!(!stats.address.ip().is_unspecified());
    assert_eq!(config.global.supervision.user.as_deref(), Some("lb"));
    // What lb-watcher would write from this: the same configuration.
    assert_eq!(Config::parse(&config.to_yaml(), "rendered.yaml").expect("round trip"), config);
}
