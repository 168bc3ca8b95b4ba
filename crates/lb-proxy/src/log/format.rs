//! Rendering access-log lines. Pure: the current time and the time zone are arguments, so tests
//! pin exact lines.
//!
//! The HAProxy formats follow `doc/configuration.txt` §8.2.2 (tcplog) and §8.2.3 (httplog),
//! without the optional captures, and with HAProxy's own conventions: IPv6 client addresses
//! without brackets (`2001:db8::1:50000`), a Unix-socket client as `unix:<listener id>`, the
//! request line with `"`, `#`, control and non-ASCII bytes written `#XX`. The header in front
//! is what a syslog daemon writes for the message (RFC 3339 time, host, `tag[pid]:`), or, for
//! syslog targets, the RFC 3164 header the daemon expects to receive.

use std::fmt::{Display, Write as _};
use std::net::SocketAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use lb_config::LogFormat;
use serde_json::{json, Value};

use super::{HttpLog, TcpLog};
use crate::facts::ConnFacts;

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

/// How a message is wrapped for its destination.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// A line for stdout, ending in `\n`: `<RFC 3339 time> <host> <tag>[<pid>]: <message>`, or
    /// the bare JSON object.
    Line,
    /// An RFC 3164 datagram: `<PRI>Mmm dd HH:MM:SS <host> <tag>[<pid>]: <message>`. Without
    /// the host for the local daemon's socket, as glibc's `syslog(3)` and HAProxy write there:
    /// rsyslog's imuxsock and journald do not parse a host name from their socket (they would
    /// take it for the tag), and add their own.
    Syslog { pri: u8, with_host: bool },
}

/// What is logged.
#[derive(Debug, Clone, Copy)]
pub(super) enum Record<'r, 'a> {
    Http(&'r HttpLog<'a>),
    Tcp(&'r TcpLog<'a>),
}

/// Renders one record, framed for its destination.
pub(super) fn render<Tz>(
    rec: Record<'_, '_>,
    format: LogFormat,
    framing: Framing,
    ident: &Ident,
    now: SystemTime,
    tz: &Tz,
) -> String
where
    Tz: TimeZone,
    Tz::Offset: Display,
{
    let mut out = String::with_capacity(256);
    let now = datetime(now, tz);
    match framing {
        Framing::Line if format == LogFormat::Json => {}
        Framing::Line => {
            out.push_str(&now.to_rfc3339_opts(SecondsFormat::Millis, false));
            let _ = write!(out, " {} {}[{}]: ", ident.host, ident.tag, ident.pid);
        }
        Framing::Syslog { pri, with_host } => {
            let _ = write!(out, "<{pri}>{} ", now.format("%b %e %H:%M:%S"));
            if with_host {
                let _ = write!(out, "{} ", ident.host);
            }
            let _ = write!(out, "{}[{}]: ", ident.tag, ident.pid);
        }
    }
    match (format, rec) {
        (LogFormat::Haproxy, Record::Http(rec)) => http_message(&mut out, rec, tz),
        (LogFormat::Haproxy, Record::Tcp(rec)) => tcp_message(&mut out, rec, tz),
        (LogFormat::Json, Record::Http(rec)) => out.push_str(&http_json(rec, tz).to_string()),
        (LogFormat::Json, Record::Tcp(rec)) => out.push_str(&tcp_json(rec, tz).to_string()),
    }
    match framing {
        Framing::Line => out.push('\n'),
        Framing::Syslog { .. } => truncate(&mut out, MAX_DATAGRAM),
    }
    out
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
    let _ = write!(
        out,
        " {}/{}/{}/{}/{} {} {} - - ",
        rec.tr, rec.tw, rec.tc, rec.tresp, rec.ta, rec.status, rec.bytes_read
    );
    push_termination(out, rec.termination);
    out.push_str("--");
    let _ = write!(
        out,
        " {}/{}/{}/{}/{} {}/{} \"",
        rec.actconn, rec.feconn, rec.beconn, rec.srv_conn, rec.retries, rec.srv_queue, rec.backend_queue
    );
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
    let _ = write!(out, " {}/{}/{} {} ", rec.tw, rec.tc, rec.tt, rec.bytes_read);
    push_termination(out, rec.termination);
    let _ = write!(
        out,
        " {}/{}/{}/{}/{} {}/{}",
        rec.actconn, rec.feconn, rec.beconn, rec.srv_conn, rec.retries, rec.srv_queue, rec.backend_queue
    );
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
    match facts.client {
        Some(client) => {
            let _ = write!(out, "{}:{}", client.ip(), client.port());
        }
        None => out.push_str(UNIX_CLIENT),
    }
    let _ = write!(out, " [{}] ", datetime(accept_date, tz).format("%d/%b/%Y:%H:%M:%S%.3f"));
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
    out.push_str(&termination(t));
}

/// Writes `s` with HAProxy's log escaping: control bytes, bytes ≥ 0x7f, `"` and `#` as `#XX`
/// (and spaces too for names, which are single fields). No log line can be split or forged.
fn push_escaped(out: &mut String, s: &str, escape_space: bool) {
    for &b in s.as_bytes() {
        if !(0x20..0x7f).contains(&b) || b == b'"' || b == b'#' || (escape_space && b == b' ') {
            let _ = write!(out, "#{b:02X}");
        } else {
            out.push(char::from(b));
        }
    }
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
