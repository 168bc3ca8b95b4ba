//! Durations and sizes.

use std::time::Duration;

use crate::units::{format_duration, format_size, parse_duration, parse_size};

#[test]
fn durations_take_a_unit_or_default_to_milliseconds() {
    let cases = [
        ("250ms", 250),
        ("30s", 30_000),
        ("5m", 300_000),
        ("1h", 3_600_000),
        ("100", 100),
        ("0", 0),
        (" 7s ", 7_000),
        ("10 s", 10_000),
    ];
    for (text, millis) in cases {
        assert_eq!(parse_duration(text), Ok(Duration::from_millis(millis)), "{text}");
    }
}

#[test]
fn malformed_durations_are_explained() {
    for text in ["", "s", "1.5s", "-1s", "10x", "10 sec", "1h30m", "ms10"] {
        let message = parse_duration(text).expect_err(text);
        assert!(message.contains("expected an integer followed by ms, s, m or h"), "{message}");
    }
    let message = parse_duration("99999999999999999999h").expect_err("overflow");
    assert!(message.contains("too large"), "{message}");
    assert!(parse_duration("18446744073709551615h").is_err());
}

#[test]
fn durations_render_in_the_largest_exact_unit() {
    let cases = [
        (250, "250ms"),
        (1_000, "1s"),
        (1_500, "1500ms"),
        (90_000, "90s"),
        (120_000, "2m"),
        (7_200_000, "2h"),
        (0, "0ms"),
    ];
    for (millis, text) in cases {
        assert_eq!(format_duration(Duration::from_millis(millis)), text);
        assert_eq!(parse_duration(text), Ok(Duration::from_millis(millis)));
    }
    // Sub-millisecond values (only from hand-built configs) round up, never to zero.
    assert_eq!(format_duration(Duration::from_micros(1)), "1ms");
    assert_eq!(format_duration(Duration::from_micros(1_500)), "2ms");
}

#[test]
fn sizes_accept_bytes_kilobytes_and_megabytes() {
    let cases = [("16384", 16_384), ("16k", 16_384), ("16K", 16_384), ("1m", 1_048_576), ("2M", 2_097_152)];
    for (text, bytes) in cases {
        assert_eq!(parse_size(text, "bytes"), Ok(bytes), "{text}");
    }
    for text in ["", "k", "16kb", "1.5k", "-1", "16 kilobytes"] {
        let message = parse_size(text, "bytes").expect_err(text);
        assert!(message.contains("expected a number of bytes"), "{message}");
    }
    assert!(parse_size("99999999999999999999999m", "bytes").expect_err("overflow").contains("too large"));
}

#[test]
fn sizes_render_with_a_unit_when_exact() {
    assert_eq!(format_size(16_384), "16k");
    assert_eq!(format_size(1_048_576), "1m");
    assert_eq!(format_size(10_000), "10000");
    assert_eq!(format_size(0), "0");
    for bytes in [8_192, 10_000, 1_048_576, 32_768] {
        assert_eq!(parse_size(&format_size(bytes), "bytes"), Ok(bytes));
    }
}
