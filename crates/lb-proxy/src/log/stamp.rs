//! The time stamps of log lines, written directly rather than through chrono's formatting, and
//! cached per second: lines come by the thousand per second, all with the same few prefixes.

use std::cell::RefCell;
use std::fmt::{Display, Write as _};
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, NaiveDateTime, Offset, SecondsFormat, TimeZone, Timelike, Utc};

use crate::text::push_u64;

/// `t` in `tz`; times before 1970 or after 9999 (which no clock gives) are clamped.
pub(super) fn datetime<Tz: TimeZone>(t: SystemTime, tz: &Tz) -> DateTime<Tz> {
    const MAX_SECS: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let since_epoch = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since_epoch.as_secs().min(MAX_SECS)).unwrap_or_default();
    Utc.timestamp_opt(secs, since_epoch.subsec_nanos()).single().unwrap_or_default().with_timezone(tz)
}

/// `Nov 24 16:26:59`, `Nov  4 …` for single-digit days (RFC 3164's `Mmm dd hh:mm:ss`): whole
/// seconds, so the cached prefix is all of it.
pub(super) fn push_rfc3164_time<Tz>(out: &mut String, t: &DateTime<Tz>)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let offset = t.offset().fix().local_minus_utc();
    push_second_prefix(out, RFC3164, &t.naive_local(), offset, |out, t| {
        out.push_str(MONTHS[t.month0() as usize % 12]);
        out.push(' ');
        if t.day() < 10 {
            out.push(' ');
        }
        push_u64(out, u64::from(t.day()));
        out.push(' ');
        push_padded(out, t.hour(), 2);
        out.push(':');
        push_padded(out, t.minute(), 2);
        out.push(':');
        push_padded(out, t.second(), 2);
    });
}

fn push_digit(out: &mut String, d: u64) {
    out.push(char::from(b'0' + (d % 10) as u8));
}

/// `n` (below 10^width) in decimal, zero-padded to `width` digits.
fn push_padded(out: &mut String, n: u32, width: u32) {
    if width > 1 {
        push_padded(out, n / 10, width - 1);
    }
    push_digit(out, u64::from(n % 10));
}

/// Which time stamp prefix a [`PREFIXES`] slot holds.
const ACCEPT_DATE: usize = 0;
const RFC3339: usize = 1;
const RFC3164: usize = 2;

/// A cached time stamp prefix: (local time in whole seconds, offset, its rendering).
type Prefix = (i64, i32, String);

thread_local! {
    /// Per kind of time stamp, its rendering up to the seconds. Lines come by the thousand per
    /// second, all with the same few prefixes: each is rendered once a second.
    static PREFIXES: RefCell<[Option<Prefix>; 3]> = const { RefCell::new([None, None, None]) };
}

/// Appends the rendering of `t` up to its seconds (as `render` writes it), from the cache of
/// `slot` when `t` is in the second rendered last. Leap seconds (which share their key with the
/// second before) are not cached.
fn push_second_prefix(
    out: &mut String,
    slot: usize,
    t: &NaiveDateTime,
    offset: i32,
    render: fn(&mut String, &NaiveDateTime),
) {
    if t.nanosecond() >= 1_000_000_000 {
        render(out, t);
        return;
    }
    let key = t.and_utc().timestamp();
    PREFIXES.with_borrow_mut(|cache| {
        let Some(entry) = cache.get_mut(slot) else {
            render(out, t);
            return;
        };
        if let Some((k, o, text)) = entry {
            if *k == key && *o == offset {
                out.push_str(text);
                return;
            }
        }
        let start = out.len();
        render(out, t);
        let rendered = out.get(start..).unwrap_or_default();
        match entry {
            Some((k, o, text)) => {
                (*k, *o) = (key, offset);
                text.clear();
                text.push_str(rendered);
            }
            None => *entry = Some((key, offset, rendered.to_owned())),
        }
    });
}

const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];

/// `%H:%M:%S`, as chrono writes it (a leap second as second 60).
fn push_time_seconds(out: &mut String, t: &NaiveDateTime) {
    push_padded(out, t.hour(), 2);
    out.push(':');
    push_padded(out, t.minute(), 2);
    out.push(':');
    push_padded(out, t.second() + t.nanosecond() / 1_000_000_000, 2);
}

/// `%.3f` of the seconds, as chrono writes it.
fn push_millis(out: &mut String, t: &NaiveDateTime) {
    let ms = u64::from(t.nanosecond() % 1_000_000_000 / 1_000_000);
    out.push('.');
    push_digit(out, ms / 100);
    push_digit(out, ms / 10);
    push_digit(out, ms);
}

/// HAProxy's accept date, `%d/%b/%Y:%H:%M:%S%.3f`.
pub(super) fn push_accept_date<Tz>(out: &mut String, t: &DateTime<Tz>)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let t = t.naive_local();
    if !(0..=9999).contains(&t.year()) {
        // Past 9999 in a zone east of UTC: as chrono writes it (`+10000`).
        let _ = write!(out, "{}", t.format("%d/%b/%Y:%H:%M:%S%.3f"));
        return;
    }
    push_second_prefix(out, ACCEPT_DATE, &t, 0, |out, t| {
        push_padded(out, t.day(), 2);
        out.push('/');
        out.push_str(MONTHS[t.month0() as usize % 12]);
        out.push('/');
        push_padded(out, t.year().unsigned_abs(), 4);
        out.push(':');
        push_time_seconds(out, t);
    });
    push_millis(out, &t);
}

/// `t.to_rfc3339_opts(SecondsFormat::Millis, false)`, written directly (no allocation).
pub(super) fn push_rfc3339_millis<Tz>(out: &mut String, t: &DateTime<Tz>)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let offset = t.offset().fix().local_minus_utc();
    if offset % 60 != 0 || t.nanosecond() >= 1_000_000_000 || !(0..=9999).contains(&t.naive_local().year()) {
        // Offsets with seconds (historic zones), leap seconds, years past 9999: as chrono
        // writes them.
        out.push_str(&t.to_rfc3339_opts(SecondsFormat::Millis, false));
        return;
    }
    let t = t.naive_local();
    push_second_prefix(out, RFC3339, &t, offset, |out, t| {
        push_padded(out, t.year().unsigned_abs(), 4);
        out.push('-');
        push_padded(out, t.month(), 2);
        out.push('-');
        push_padded(out, t.day(), 2);
        out.push('T');
        push_time_seconds(out, t);
    });
    push_millis(out, &t);
    out.push(if offset < 0 { '-' } else { '+' });
    let minutes = offset.unsigned_abs() / 60;
    push_padded(out, minutes / 60, 2);
    out.push(':');
    push_padded(out, minutes % 60, 2);
}

#[cfg(test)]
mod tests {
    //! The hand-written dates against chrono's.
    use super::*;
    use chrono::FixedOffset;

    #[test]
    fn dates_as_chrono_writes_them() {
        let offsets = [
            0,
            3600,
            -3600,
            5 * 3600 + 30 * 60,
            5 * 3600 + 45 * 60,
            -(3 * 3600 + 30 * 60),
            14 * 3600,
            -12 * 3600,
            561,
            -37,
        ];
        let times = [
            0,
            1,
            59_999,
            951_782_400_123,
            1_234_567_890_655,
            1_709_210_096_999,
            4_102_444_799_500,
            253_402_300_799_999,
        ];
        for secs_east in offsets {
            let tz = FixedOffset::east_opt(secs_east).expect("offset");
            for ms in times {
                let t = datetime(UNIX_EPOCH + std::time::Duration::from_millis(ms), &tz);
                let mut out = String::new();
                // Twice each: rendered, then from the cache.
                for _ in 0..2 {
                    out.clear();
                    push_rfc3339_millis(&mut out, &t);
                    assert_eq!(out, t.to_rfc3339_opts(SecondsFormat::Millis, false));
                    out.clear();
                    push_accept_date(&mut out, &t);
                    assert_eq!(out, t.format("%d/%b/%Y:%H:%M:%S%.3f").to_string());
                    out.clear();
                    push_rfc3164_time(&mut out, &t);
                    assert_eq!(out, t.format("%b %e %H:%M:%S").to_string());
                }
            }
        }
    }
}
