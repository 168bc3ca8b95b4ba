//! `global.canary`: defaults, every key, its errors with their locations, and the round trip.

use std::time::Duration;

use lb_supervisor::{CanarySettings, TooLittleTraffic};

use super::{errors, parse_ok, MINIMAL};
use crate::Config;

fn with_canary(canary: &str) -> String {
    format!("global:\n  canary: {canary}\n{MINIMAL}")
}

#[test]
fn absent_is_off_and_an_empty_block_is_on_with_the_defaults() {
    assert_eq!(parse_ok(MINIMAL).global.supervision.canary, None);
    assert_eq!(parse_ok(&with_canary("{}")).global.supervision.canary, Some(CanarySettings::default()));
}

#[test]
fn every_key_is_read() {
    let text = with_canary(
        "{ share: 12.5%, duration: 45s, min_requests: 7, too_little_traffic: rollback, \
         max_error_ratio: 1.5, max_error_rate: 0.5%, max_p99_ratio: 3, max_p99_increase: 20ms }",
    );
    let canary = parse_ok(&text).global.supervision.canary.expect("a canary");
    assert_eq!(canary.share.ppm(), 125_000);
    assert_eq!((canary.duration, canary.min_requests), (Duration::from_secs(45), 7));
    assert_eq!(canary.too_little_traffic, TooLittleTraffic::Rollback);
    assert_eq!((canary.max_error_ratio.thousandths(), canary.max_error_rate.ppm()), (1500, 5000));
    assert_eq!((canary.max_p99_ratio.thousandths(), canary.max_p99_increase), (3000, Duration::from_millis(20)));
    let again = Config::parse(&parse_ok(&text).to_yaml(), "rendered.yaml").expect("the rendering parses");
    assert_eq!(again.global.supervision.canary, Some(canary));
}

#[test]
fn bad_values_are_named_with_their_place() {
    let text = with_canary("{ share: 0%, duration: 2h, too_little_traffic: maybe, max_error_ratio: 0.5, colour: red }");
    let all = errors(&text).join("\n");
    assert!(all.contains("proxy.yaml:2:87: global.canary: unknown field `colour`, expected one of `share`"), "{all}");
    let text = with_canary("{ share: 0%, duration: 2h, too_little_traffic: maybe, max_error_ratio: 0.5 }");
    let all = errors(&text);
    let expected = [
        "proxy.yaml:2:20: global.canary.share: invalid share `0%`",
        "proxy.yaml:2:34: global.canary.duration: the window must be at most 1h",
        "proxy.yaml:2:58: global.canary.too_little_traffic:",
        "proxy.yaml:2:82: global.canary.max_error_ratio: invalid ratio `0.5`",
    ];
    for start in expected {
        assert!(all.iter().any(|e| e.starts_with(start)), "no `{start}…` in {all:#?}");
    }
}
