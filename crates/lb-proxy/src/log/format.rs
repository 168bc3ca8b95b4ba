//! Rendering access-log lines. Pure: the current time and the time zone are arguments, so tests
//! pin exact lines.
//!
//! The HAProxy formats follow `doc/configuration.txt` §8.2.2 (tcplog) and §8.2.3 (httplog),
//! without the optional captures, and with HAProxy's own conventions: IPv6 client addresses
//! without brackets (`2001:db8::1:50000`), a Unix-socket client as `unix:<listener id>`, the
//! request line with `"`, `#`, control and non-ASCII bytes written `#XX`. The header in front
//! is what a syslog daemon writes for the message (RFC 3339 time, host, `tag[pid]:`), or, for
//! syslog targets, the RFC 3164 header the daemon expects to receive.

use std::cell::Cell;
use std::fmt::{Display, Write as _};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Datelike, NaiveDateTime, Offset, SecondsFormat, TimeZone, Timelike, Utc};
use lb_config::{LogFormat, LogHeader};
use serde_json::{json, Value};

use super::{HttpLog, TcpLog};
use crate::facts::ConnFacts;
use crate::text::{push_i64, push_ipv4, push_u64};

/// Longest syslog datagram we send (the tail of a longer message is cut). RFC 5426 receivers
/// take at least 2048 bytes; rsyslog and journald take 8 KiB by default.
pub(super) const MAX_DATAGRAM: usize = 8192;

/// HAProxy writes `unix:<listener id>` for a client on a Unix socket. lb-proxy does not number
/// its listeners; 0 is a number HAProxy never gives (its ids start at 1).
const UNIX_CLIENT: &str = "unix:0";

/// Who writes the lines: the header's host, tag and pid.
#[derive(Debug, Clone)]
pub(super) struct Ident {
    pub(super) host: String,
    pub(super) tag: String,
    pub(super) pid: u32,
}

/// How a message is wrapped for its destination: the header style (`global.log.header`), and
/// whether it is a line or a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Framing {
    pub(super) header: LogHeader,
    pub(super) pri: u8,
    pub(super) target: Target,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Target {
    /// A line for stdout, ending in `\n`, headed as a syslog daemon writes it to a file (no
    /// `<PRI>`, except in the `short` form, where it is the whole header).
    Line,
    /// A datagram with its `<PRI>`. Without the host for the local daemon's socket, as glibc's
    /// `syslog(3)` and HAProxy write there: rsyslog's imuxsock and journald do not parse a host
    /// name from their socket (they would take it for the tag), and add their own.
    Syslog { with_host: bool },
}

/// What is logged.
#[derive(Debug, Clone, Copy)]
pub(super) enum Record<'r, 'a> {
    Http(&'r HttpLog<'a>),
    Tcp(&'r TcpLog<'a>),
}

/// Renders one record, framed for its destination, into `out` in place of what it held (its
/// room is kept: one buffer serves every line of a thread).
pub(super) fn render_into<Tz>(
    out: &mut String,
    rec: Record<'_, '_>,
    format: LogFormat,
    framing: Framing,
    ident: &Ident,
    now: SystemTime,
    tz: &Tz,
) where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    out.clear();
    let now = datetime(now, tz);
    header(out, framing, ident, &now);
    match (format, rec) {
        (LogFormat::Haproxy, Record::Http(rec)) => http_message(out, rec, tz),
        (LogFormat::Haproxy, Record::Tcp(rec)) => tcp_message(out, rec, tz),
        (LogFormat::Json, Record::Http(rec)) => out.push_str(&http_json(rec, tz).to_string()),
        (LogFormat::Json, Record::Tcp(rec)) => out.push_str(&tcp_json(rec, tz).to_string()),
    }
    match framing.target {
        Target::Line => out.push('\n'),
        Target::Syslog { .. } => truncate(out, MAX_DATAGRAM),
    }
}

/// The header in front of a message, in the configured style.
fn header<Tz>(out: &mut String, framing: Framing, ident: &Ident, now: &DateTime<Tz>)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let (syslog, with_host) = match framing.target {
        Target::Line => (false, true),
        Target::Syslog { with_host } => (true, with_host),
    };
    if syslog || framing.header == LogHeader::Short {
        let _ = write!(out, "<{}>", framing.pri);
    }
    let host = |out: &mut String| {
        if with_host {
            out.push_str(&ident.host);
            out.push(' ');
        }
    };
    let tag_pid = |out: &mut String| {
        out.push_str(&ident.tag);
        out.push('[');
        push_u64(out, u64::from(ident.pid));
        out.push_str("]: ");
    };
    match framing.header {
        LogHeader::Raw | LogHeader::Short => {}
        LogHeader::Rfc3164 => {
            push_rfc3164_time(out, now);
            out.push(' ');
            host(out);
            tag_pid(out);
        }
        LogHeader::Iso => {
            push_rfc3339_millis(out, now);
            out.push(' ');
            host(out);
            tag_pid(out);
        }
        LogHeader::Rfc5424 => {
            out.push_str("1 ");
            push_rfc3339_millis(out, now);
            out.push(' ');
            // RFC 5424 has a field for the host either way: `-` when it is left to the daemon.
            out.push_str(if with_host { &ident.host } else { "-" });
            out.push(' ');
            out.push_str(&ident.tag);
            out.push(' ');
            push_u64(out, u64::from(ident.pid));
            out.push_str(" - - ");
        }
    }
}

/// `Nov 24 16:26:59`, `Nov  4 …` for single-digit days (RFC 3164's `Mmm dd hh:mm:ss`).
fn push_rfc3164_time<Tz: TimeZone>(out: &mut String, t: &DateTime<Tz>) {
    const MONTHS: [&str; 12] = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"];
    out.push_str(MONTHS[t.month0() as usize % 12]);
    out.push(' ');
    if t.day() < 10 {
        out.push(' ');
    }
    push_u64(out, u64::from(t.day()));
    out.push(' ');
    push_2(out, t.hour());
    out.push(':');
    push_2(out, t.minute());
    out.push(':');
    push_2(out, t.second());
}

fn push_2(out: &mut String, n: u32) {
    if n < 10 {
        out.push('0');
    }
    push_u64(out, u64::from(n));
}

/// `<ip>:<port> [<accept date>] <frontend> <backend>/<server> <TR>/<Tw>/<Tc>/<Tr>/<Ta> <status>
/// <bytes> - - <termination>-- <actconn>/<feconn>/<beconn>/<srv_conn>/<retries>
/// <srv_queue>/<backend_queue> "<request line>"`
fn http_message<Tz>(out: &mut String, rec: &HttpLog<'_>, tz: &Tz)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    common_start(out, rec.facts, rec.accept_date, tz, rec.frontend, rec.backend, rec.server);
    // Written piece by piece: `write!` with a dozen integers cost more than the rest of the line.
    out.push(' ');
    push_joined(out, '/', &[rec.tr, rec.tw, rec.tc, rec.tresp, rec.ta]);
    out.push(' ');
    push_i64(out, i64::from(rec.status));
    out.push(' ');
    push_u64(out, rec.bytes_read);
    out.push_str(" - - ");
    push_termination(out, rec.termination);
    out.push_str("--");
    push_counters(
        out,
        &[rec.actconn, rec.feconn, rec.beconn, rec.srv_conn],
        rec.retries,
        rec.srv_queue,
        rec.backend_queue,
    );
    out.push_str(" \"");
    push_escaped(out, rec.request_line, false);
    out.push('"');
}

/// `<ip>:<port> [<accept date>] <frontend> <backend>/<server> <Tw>/<Tc>/<Tt> <bytes>
/// <termination> <actconn>/<feconn>/<beconn>/<srv_conn>/<retries> <srv_queue>/<backend_queue>`
fn tcp_message<Tz>(out: &mut String, rec: &TcpLog<'_>, tz: &Tz)
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    common_start(out, rec.facts, rec.accept_date, tz, rec.frontend, rec.backend, rec.server);
    out.push(' ');
    push_joined(out, '/', &[rec.tw, rec.tc, rec.tt]);
    out.push(' ');
    push_u64(out, rec.bytes_read);
    out.push(' ');
    push_termination(out, rec.termination);
    push_counters(
        out,
        &[rec.actconn, rec.feconn, rec.beconn, rec.srv_conn],
        rec.retries,
        rec.srv_queue,
        rec.backend_queue,
    );
}

/// `<ip>:<port>`, or HAProxy's name for a Unix-socket client.
fn push_client(out: &mut String, client: Option<SocketAddr>) {
    match client {
        Some(SocketAddr::V4(client)) => {
            push_ipv4(out, *client.ip());
            out.push(':');
            push_u64(out, u64::from(client.port()));
        }
        Some(client) => {
            let _ = write!(out, "{}:{}", client.ip(), client.port());
        }
        None => out.push_str(UNIX_CLIENT),
    }
}

/// `<ip>:<port> [<accept date>] <frontend> <backend>/<server>`
fn common_start<Tz>(
    out: &mut String,
    facts: &ConnFacts,
    accept_date: SystemTime,
    tz: &Tz,
    frontend: &str,
    backend: &str,
    server: &str,
) where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let (rendered_for, text) = facts.log_client.get_or_init(|| {
        let mut text = String::new();
        push_client(&mut text, facts.client);
        (facts.client, text.into())
    });
    if *rendered_for == facts.client {
        out.push_str(text);
    } else {
        push_client(out, facts.client);
    }
    out.push_str(" [");
    push_accept_date(out, &datetime(accept_date, tz));
    out.push_str("] ");
    push_escaped(out, frontend, true);
    out.push(' ');
    push_escaped(out, backend, true);
    out.push('/');
    push_escaped(out, server, true);
}

fn http_json<Tz>(rec: &HttpLog<'_>, tz: &Tz) -> Value
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let mut v = json!({
        "mode": "http",
        "accept_date": iso8601(rec.accept_date, tz),
        "frontend": rec.frontend,
        "backend": rec.backend,
        "server": rec.server,
        "request_time_ms": timer(rec.tr),
        "queue_time_ms": timer(rec.tw),
        "connect_time_ms": timer(rec.tc),
        "response_time_ms": timer(rec.tresp),
        "total_time_ms": timer(rec.ta),
        "status": (rec.status >= 0).then_some(rec.status),
        "bytes_read": rec.bytes_read,
        "termination_state": format!("{}--", termination(rec.termination)),
        "actconn": rec.actconn,
        "feconn": rec.feconn,
        "beconn": rec.beconn,
        "srv_conn": rec.srv_conn,
        "retries": rec.retries,
        "srv_queue": rec.srv_queue,
        "backend_queue": rec.backend_queue,
        "request": rec.request_line,
    });
    let mut parts = rec.request_line.splitn(3, ' ');
    if let (Some(method), Some(uri), Some(version)) = (parts.next(), parts.next(), parts.next()) {
        if let Some(obj) = v.as_object_mut() {
            obj.insert("method".into(), method.into());
            obj.insert("uri".into(), uri.into());
            obj.insert("version".into(), version.into());
        }
    }
    add_conn_facts(&mut v, rec.facts);
    v
}

fn tcp_json<Tz>(rec: &TcpLog<'_>, tz: &Tz) -> Value
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let mut v = json!({
        "mode": "tcp",
        "accept_date": iso8601(rec.accept_date, tz),
        "frontend": rec.frontend,
        "backend": rec.backend,
        "server": rec.server,
        "queue_time_ms": timer(rec.tw),
        "connect_time_ms": timer(rec.tc),
        "total_time_ms": timer(rec.tt),
        "bytes_read": rec.bytes_read,
        "termination_state": termination(rec.termination),
        "actconn": rec.actconn,
        "feconn": rec.feconn,
        "beconn": rec.beconn,
        "srv_conn": rec.srv_conn,
        "retries": rec.retries,
        "srv_queue": rec.srv_queue,
        "backend_queue": rec.backend_queue,
    });
    add_conn_facts(&mut v, rec.facts);
    v
}

/// Client address (null for a Unix-socket client) and, when known, the TLS facts.
fn add_conn_facts(v: &mut Value, facts: &ConnFacts) {
    let Some(obj) = v.as_object_mut() else {
        return;
    };
    let client: Option<SocketAddr> = facts.client;
    obj.insert("client_ip".into(), json!(client.map(|c| c.ip().to_string())));
    obj.insert("client_port".into(), json!(client.map(|c| c.port())));
    if let Some(tls) = &facts.tls {
        if let Some(version) = &tls.version {
            obj.insert("tls_version".into(), version.as_str().into());
        }
        if let Some(cipher) = &tls.cipher {
            obj.insert("tls_cipher".into(), cipher.as_str().into());
        }
        obj.insert("tls_client_cert".into(), tls.client_cert.into());
        obj.insert("tls_client_cert_verified".into(), tls.client_cert_verified.into());
    }
    if let Some(sni) = &facts.authority {
        obj.insert("sni".into(), sni.as_str().into());
    }
    if let Some(alpn) = &facts.alpn {
        obj.insert("alpn".into(), alpn.as_str().into());
    }
}

/// A timer for JSON: null when it did not happen (-1 in HAProxy's format).
fn timer(ms: i64) -> Option<i64> {
    (ms >= 0).then_some(ms)
}

fn iso8601<Tz>(t: SystemTime, tz: &Tz) -> String
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    datetime(t, tz).to_rfc3339_opts(SecondsFormat::Millis, false)
}

/// `t` in `tz`; times before 1970 or after 9999 (which no clock gives) are clamped.
pub(super) fn datetime<Tz: TimeZone>(t: SystemTime, tz: &Tz) -> DateTime<Tz> {
    const MAX_SECS: u64 = 253_402_300_799; // 9999-12-31T23:59:59Z
    let since_epoch = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = i64::try_from(since_epoch.as_secs().min(MAX_SECS)).unwrap_or_default();
    Utc.timestamp_opt(secs, since_epoch.subsec_nanos()).single().unwrap_or_default().with_timezone(tz)
}

/// The two termination characters, `?` for anything that is not printable ASCII.
fn termination(t: [u8; 2]) -> String {
    t.iter().map(|&b| if b.is_ascii_graphic() { char::from(b) } else { '?' }).collect()
}

fn push_termination(out: &mut String, t: [u8; 2]) {
    for b in t {
        out.push(if b.is_ascii_graphic() { char::from(b) } else { '?' });
    }
}

/// ` <actconn>/<feconn>/<beconn>/<srv_conn>/<retries> <srv_queue>/<backend_queue>`
fn push_counters(out: &mut String, conns: &[usize; 4], retries: u32, srv_queue: usize, backend_queue: usize) {
    out.push(' ');
    for &n in conns {
        push_u64(out, n as u64);
        out.push('/');
    }
    push_u64(out, u64::from(retries));
    out.push(' ');
    push_u64(out, srv_queue as u64);
    out.push('/');
    push_u64(out, backend_queue as u64);
}

/// The numbers in decimal, `sep` between them.
fn push_joined(out: &mut String, sep: char, numbers: &[i64]) {
    for (i, &n) in numbers.iter().enumerate() {
        if i > 0 {
            out.push(sep);
        }
        push_i64(out, n);
    }
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

/// Appends a cached rendering (ASCII).
fn push_ascii(out: &mut String, ascii: &[u8]) {
    out.push_str(std::str::from_utf8(ascii).unwrap_or_default());
}

/// Which time stamp prefix a [`PREFIXES`] slot holds.
const ACCEPT_DATE: usize = 0;
const RFC3339: usize = 1;

/// A cached time stamp prefix: (local time in whole seconds, offset, its length, its bytes).
type Prefix = (i64, i32, u8, [u8; 24]);

thread_local! {
    /// Per kind of time stamp, its rendering up to the seconds. Lines come by the thousand per
    /// second, all with the same few prefixes: each is rendered once a second.
    static PREFIXES: Cell<[Option<Prefix>; 2]> = const { Cell::new([None, None]) };
}

/// Appends the rendering of `t` up to its seconds (as `render` writes it), from the cache of
/// `slot` when `t` is in the second rendered last. Leap seconds (which share their key with the
/// second before) and renderings longer than the cache holds are not cached.
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
    PREFIXES.with(|cache| {
        let mut all = cache.get();
        if let Some((k, o, len, bytes)) = all[slot] {
            if k == key && o == offset {
                push_ascii(out, &bytes[..usize::from(len)]);
                return;
            }
        }
        let start = out.len();
        render(out, t);
        let rendered = &out.as_bytes()[start..];
        if rendered.len() <= 24 {
            let mut bytes = [0u8; 24];
            bytes[..rendered.len()].copy_from_slice(rendered);
            all[slot] = Some((key, offset, rendered.len() as u8, bytes));
            cache.set(all);
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
    out.push('.');
    push_padded(out, t.nanosecond() % 1_000_000_000 / 1_000_000, 3);
}

/// HAProxy's accept date, `%d/%b/%Y:%H:%M:%S%.3f`.
fn push_accept_date<Tz>(out: &mut String, t: &DateTime<Tz>)
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
fn push_rfc3339_millis<Tz>(out: &mut String, t: &DateTime<Tz>)
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

/// Writes `s` with HAProxy's log escaping: control bytes, bytes ≥ 0x7f, `"` and `#` as `#XX`
/// (and spaces too for names, which are single fields). No log line can be split or forged.
fn push_escaped(out: &mut String, s: &str, escape_space: bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let table = if escape_space { &ESCAPED_IN_NAMES } else { &ESCAPED };
    // Runs of bytes that stay as they are go in whole (they are ASCII: on character boundaries).
    let mut run = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        if table[usize::from(b)] {
            out.push_str(s.get(run..i).unwrap_or_default());
            out.push('#');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xf)]));
            run = i + 1;
        }
    }
    out.push_str(s.get(run..).unwrap_or_default());
}

/// Per byte, whether [`push_escaped`] writes it `#XX`: one look-up per byte of a request line.
static ESCAPED: [bool; 256] = escape_table(false);
static ESCAPED_IN_NAMES: [bool; 256] = escape_table(true);

const fn escape_table(escape_space: bool) -> [bool; 256] {
    let mut table = [false; 256];
    let mut b = 0;
    while b < 256 {
        table[b] =
            b < 0x20 || b >= 0x7f || b == b'"' as usize || b == b'#' as usize || (escape_space && b == b' ' as usize);
        b += 1;
    }
    table
}

/// Cuts `s` to at most `max` bytes, on a character boundary.
fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut end = max;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
}

#[cfg(test)]
mod direct_tests {
    //! The hand-written date and number formatting against chrono's and `Display`.
    use super::*;
    use chrono::FixedOffset;

    #[test]
    fn escape_tables_follow_the_rule() {
        for b in 0..=255u8 {
            let rule = !(0x20..0x7f).contains(&b) || b == b'"' || b == b'#';
            assert_eq!(ESCAPED[usize::from(b)], rule, "{b:#x}");
            assert_eq!(ESCAPED_IN_NAMES[usize::from(b)], rule || b == b' ', "{b:#x}");
        }
    }

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
                push_rfc3339_millis(&mut out, &t);
                assert_eq!(out, t.to_rfc3339_opts(SecondsFormat::Millis, false));
                out.clear();
                push_accept_date(&mut out, &t);
                assert_eq!(out, t.format("%d/%b/%Y:%H:%M:%S%.3f").to_string());
            }
        }
    }

    #[test]
    fn client_addresses_as_display_writes_them() {
        for addr in ["0.0.0.0:0", "255.255.255.255:65535", "10.0.1.2:33317", "[2001:db8::1]:50000"] {
            let client: SocketAddr = addr.parse().expect("address");
            let mut facts = ConnFacts::from_socket(Some(client));
            facts.accepted_at = UNIX_EPOCH;
            let mut out = String::new();
            common_start(&mut out, &facts, UNIX_EPOCH, &Utc, "f", "b", "s");
            assert_eq!(out, format!("{}:{} [01/Jan/1970:00:00:00.000] f b/s", client.ip(), client.port()));
        }
    }
}
