//! Durations (`250ms`, `30s`, `5m`, `1h`) and byte sizes (`16384`, `16k`, `1m`): parsing and
//! the canonical spelling `Config::to_yaml` writes.

use std::time::Duration;

/// Parses `<integer><unit>` with unit `ms`, `s`, `m` or `h`; a bare integer is milliseconds,
/// as in HAProxy. The range (1ms..=24h) is checked by the caller, which knows the field.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let expected = || {
        format!(
            "invalid duration `{text}`: expected an integer followed by ms, s, m or h \
             (e.g. 250ms, 30s, 5m); a bare integer is milliseconds"
        )
    };
    if number.is_empty() {
        return Err(expected());
    }
    let millis_per_unit: u64 = match unit.trim_start() {
        "" | "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        _ => return Err(expected()),
    };
    number
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(millis_per_unit))
        .map(Duration::from_millis)
        .ok_or_else(|| format!("duration `{text}` is too large (at most 24h)"))
}

/// The shortest exact spelling in the largest unit that divides the duration. Durations are
/// kept to the millisecond; anything finer (only possible for hand-built values) is rounded up
/// so that a positive timeout never renders as zero.
pub fn format_duration(d: Duration) -> String {
    let mut millis = d.as_millis();
    if d.as_nanos() % 1_000_000 != 0 {
        millis += 1;
    }
    for (unit, size) in [("h", 3_600_000u128), ("m", 60_000), ("s", 1_000)] {
        if millis != 0 && millis % size == 0 {
            return format!("{}{unit}", millis / size);
        }
    }
    format!("{millis}ms")
}

/// Parses a size (bytes, or a table's entries: `what` names them in the error): a plain integer,
/// or an integer followed by `k` (×1024) or `m` (×1048576).
pub(crate) fn parse_size(text: &str, what: &str) -> Result<usize, String> {
    let text = text.trim();
    let digits_end = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let multiplier: usize = match unit.trim_start() {
        "" => 1,
        "k" | "K" => 1024,
        "m" | "M" => 1024 * 1024,
        _ => 0,
    };
    if number.is_empty() || multiplier == 0 {
        return Err(format!(
            "invalid size `{text}`: expected a number of {what}, optionally followed by k or m \
             (e.g. 16384, 16k, 1m)"
        ));
    }
    number
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(multiplier))
        .ok_or_else(|| format!("size `{text}` is too large"))
}

/// `16k` or `1m` when exact, else the plain byte count.
pub(crate) fn format_size(bytes: usize) -> String {
    const MIB: usize = 1024 * 1024;
    if bytes != 0 && bytes % MIB == 0 {
        format!("{}m", bytes / MIB)
    } else if bytes != 0 && bytes % 1024 == 0 {
        format!("{}k", bytes / 1024)
    } else {
        bytes.to_string()
    }
}
