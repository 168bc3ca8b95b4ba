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
use std::time::SystemTime;

use chrono::{DateTime, SecondsFormat, TimeZone};
use lb_config::{LogFormat, LogHeader};
use serde_json::{json, Value};

use super::stamp::{datetime, push_accept_date, push_rfc3164_time, push_rfc3339_millis};
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
    host: String,
    tag: String,
    pid: u32,
    /// `tag[pid]: `, the same in every line: written once.
    tag_pid: String,
}

impl Ident {
    pub(super) fn new(host: String, tag: String, pid: u32) -> Self {
        let mut tag_pid = String::with_capacity(tag.len() + 14);
        tag_pid.push_str(&tag);
        tag_pid.push('[');
        push_u64(&mut tag_pid, u64::from(pid));
        tag_pid.push_str("]: ");
        Ident { host, tag, pid, tag_pid }
    }
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
        (_, Record::Http(rec)) if rec.format.is_some() => {
            if let Some(custom) = rec.format {
                super::custom::render_custom(out, rec, custom, tz);
            }
        }
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
    let tag_pid = |out: &mut String| out.push_str(&ident.tag_pid);
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
    // HAProxy's capture blocks, each only when the frontend captures on that side.
    if let Some(c) = rec.captured {
        for values in [&c.request, &c.response] {
            if !values.is_empty() {
                out.push(' ');
                super::custom::block(out, values);
            }
        }
    }
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
        // Room for any IPv4 client and its port: the text is written without growing.
        let mut text = String::with_capacity(24);
        push_client(&mut text, facts.client);
        (facts.client, text)
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
    if let Some(obj) = v.as_object_mut() {
        if let Some(c) = rec.captured {
            obj.insert("captured_request_headers".into(), json!(c.request));
            obj.insert("captured_response_headers".into(), json!(c.response));
        }
        if let Some(id) = rec.unique_id {
            obj.insert("unique_id".into(), id.into());
        }
    }
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

/// The two termination characters, `?` for anything that is not printable ASCII.
pub(super) fn termination(t: [u8; 2]) -> String {
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

/// Writes `s` with HAProxy's log escaping: control bytes, bytes ≥ 0x7f, `"` and `#` as `#XX`
/// (and spaces too for names, which are single fields). No log line can be split or forged.
pub(super) fn push_escaped(out: &mut String, s: &str, escape_space: bool) {
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
    //! The escaping and the client addresses against `Display`.
    use super::*;
    use chrono::Utc;
    use std::time::UNIX_EPOCH;

    #[test]
    fn escape_tables_follow_the_rule() {
        for b in 0..=255u8 {
            let rule = !(0x20..0x7f).contains(&b) || b == b'"' || b == b'#';
            assert_eq!(ESCAPED[usize::from(b)], rule, "{b:#x}");
            assert_eq!(ESCAPED_IN_NAMES[usize::from(b)], rule || b == b' ', "{b:#x}");
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
