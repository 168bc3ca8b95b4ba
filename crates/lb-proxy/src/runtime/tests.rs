//! Parsing of the server commands' arguments.

use std::time::Duration;

use lb_config::AdminState;

use super::servers::{parse_duration, parse_weight, server_config, valid_name};

#[test]
fn add_server_arguments() {
    let s = server_config("a1", &["10.0.0.5:8080", "check", "weight", "20", "slowstart", "30s"]).expect("valid");
    assert_eq!((s.address.to_string(), s.check, s.weight), ("10.0.0.5:8080".to_owned(), true, 20));
    assert_eq!((s.slowstart, s.state), (Some(Duration::from_secs(30)), AdminState::Maint));
    let plain = server_config("a1", &["[2001:db8::1]:80"]).expect("valid");
    assert_eq!((plain.weight, plain.check, plain.slowstart), (1, false, None));
    assert!(server_config("a1", &[]).is_err());
    assert!(server_config("a1", &["10.0.0.5"]).is_err());
    assert!(server_config("a1", &["10.0.0.5:80", "weight", "257"]).is_err());
    assert!(server_config("a1", &["10.0.0.5:80", "maxconn", "3"]).is_err());
}

#[test]
fn durations_weights_names() {
    assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
    assert_eq!(parse_duration("250"), Ok(Duration::from_millis(250)));
    assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
    assert!(parse_duration("25h").is_err() && parse_duration("x").is_err() && parse_duration("").is_err());
    assert_eq!(parse_weight("0"), Ok(0));
    assert_eq!(parse_weight("256"), Ok(256));
    assert!(parse_weight("-1").is_err() && parse_weight("10%").is_err());
    assert!(valid_name("api-1.dc_2").is_ok());
    assert!(valid_name("").is_err() && valid_name("a b").is_err() && valid_name("a:1").is_err());
}
