use super::*;

fn figures(requests: u64, failures: &[(&str, u64)], latency: &[u64]) -> Figures {
    Figures {
        requests,
        failures: failures.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect(),
        latency_bounds_ms: vec![10, 100, 1000],
        latency_counts: latency.to_vec(),
    }
}

#[test]
fn shares_and_ratios_parse_as_operators_write_them() {
    assert_eq!(Share::parse("10%").map(Share::ppm), Ok(100_000));
    assert_eq!(Share::parse("12.5%").map(Share::ppm), Ok(125_000));
    assert_eq!(Share::parse(" 0.01% ").map(Share::ppm), Ok(100));
    assert_eq!(Share::parse("100%").map(Share::ppm), Ok(1_000_000));
    for bad in ["0%", "101%", "10", "ten%", "1.234%", "-5%", "%", ""] {
        assert!(Share::parse(bad).is_err(), "{bad} accepted");
    }
    assert_eq!(Share::parse("12.5%").map(|s| s.to_string()), Ok("12.5%".to_owned()));
    assert_eq!(Ratio::parse("1.5").map(|r| r.to_string()), Ok("1.5".to_owned()));
    assert_eq!(Ratio::parse("2").map(|r| r.to_string()), Ok("2".to_owned()));
    for bad in ["0.5", "0", "x", "1.2345", "1001"] {
        assert!(Ratio::parse(bad).is_err(), "{bad} accepted");
    }
}

#[test]
fn the_ask_of_a_reload_overrides_share_and_window_only() {
    let configured = CanarySettings { min_requests: 7, ..CanarySettings::default() };
    let ask = CanaryAsk::On { share: Share::from_ppm(500_000), duration_ms: 1500 };
    let plan = CanaryAsk::plan(Some(ask), Some(&configured)).expect("a canary");
    assert_eq!((plan.share.ppm(), plan.duration, plan.min_requests), (500_000, Duration::from_millis(1500), 7));
    assert_eq!(CanaryAsk::plan(Some(CanaryAsk::Off), Some(&configured)), None);
    assert_eq!(CanaryAsk::plan(None, Some(&configured)), Some(configured));
    assert_eq!(CanaryAsk::plan(None, None), None);
}

#[test]
fn p99_is_the_bound_of_its_bucket() {
    assert_eq!(figures(0, &[], &[0, 0, 0, 0]).p99_ms(), None);
    assert_eq!(figures(100, &[], &[99, 1, 0, 0]).p99_ms(), Some(10));
    assert_eq!(figures(100, &[], &[98, 2, 0, 0]).p99_ms(), Some(100));
    assert_eq!(figures(100, &[], &[0, 0, 0, 100]).p99_ms(), Some(u64::MAX));
}

#[test]
fn figures_since_subtract_kind_by_kind() {
    let before = figures(10, &[("503 no server", 2)], &[5, 5, 0, 0]);
    let after = figures(30, &[("503 no server", 5), ("retries", 1)], &[15, 10, 0, 0]);
    let since = after.since(&before);
    assert_eq!(since.requests, 20);
    assert_eq!(since.failures["503 no server"], 3);
    assert_eq!(since.failures["retries"], 1);
    assert_eq!(since.latency_counts, vec![10, 5, 0, 0]);
}

#[test]
fn a_failure_rate_above_both_thresholds_rolls_back_naming_its_figures() {
    let s = CanarySettings::default();
    let old = figures(9000, &[("503 no server", 0)], &[9000, 0, 0, 0]);
    let new = figures(1000, &[("503 no server", 412)], &[1000, 0, 0, 0]);
    let verdict = judge(&s, &old, &new);
    assert!(!verdict.promote);
    assert!(verdict.summary.contains("503 no server: 412 of 1000 (41.20%)"), "{}", verdict.summary);
    assert!(verdict.summary.contains("0 of 9000 (0.00%)"), "{}", verdict.summary);
}

#[test]
fn a_rate_within_either_threshold_is_promoted() {
    let s = CanarySettings::default();
    // Under the absolute floor (1 %), though infinitely worse than 0.
    let new = figures(1000, &[("502/504 by lb-proxy", 5)], &[]);
    assert!(judge(&s, &figures(9000, &[], &[]), &new).promote);
    // A sick backend: 10 % on both sides is no fault of the new configuration.
    let old = figures(9000, &[("5xx from servers", 900)], &[]);
    let new = figures(1000, &[("5xx from servers", 150)], &[]);
    assert!(judge(&s, &old, &new).promote);
    let new = figures(1000, &[("5xx from servers", 250)], &[]);
    assert!(!judge(&s, &old, &new).promote);
}

#[test]
fn a_slower_p99_rolls_back_only_beyond_ratio_and_increase() {
    let s = CanarySettings::default();
    let old = figures(1000, &[], &[1000, 0, 0, 0]);
    // 10 ms → 100 ms: 10 × and +90 ms.
    let verdict = judge(&s, &old, &figures(1000, &[], &[0, 1000, 0, 0]));
    assert!(!verdict.promote);
    assert!(verdict.summary.contains("p99 total time ≤100ms on the canary vs ≤10ms"), "{}", verdict.summary);
    let s = CanarySettings { max_p99_increase: Duration::from_millis(100), ..s };
    assert!(judge(&s, &old, &figures(1000, &[], &[0, 1000, 0, 0])).promote);
}

#[test]
fn too_little_traffic_follows_its_setting() {
    let s = CanarySettings::default();
    let bad = figures(10, &[("503 no server", 10)], &[]);
    let verdict = judge(&s, &figures(1000, &[], &[]), &bad);
    assert!(verdict.promote);
    assert!(verdict.summary.contains("too little traffic"), "{}", verdict.summary);
    let s = CanarySettings { too_little_traffic: TooLittleTraffic::Rollback, ..s };
    assert!(!judge(&s, &figures(1000, &[], &[]), &bad).promote);
}
