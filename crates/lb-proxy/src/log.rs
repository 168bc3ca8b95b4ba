//! Access logs: one line per HTTP request or TCP connection, in HAProxy's `option httplog` /
//! `option tcplog` format (so that existing HAProxy log tooling reads them) or as JSON.
//!
//! Operational messages go through `tracing` to stderr; access logs are a separate stream with
//! their own destination: stdout, a syslog Unix socket (`/dev/log`) or syslog over UDP.
//!
//! Why the request path never waits on a log: stdout lines are appended to a bounded batch that
//! one writer thread takes whole, and syslog datagrams are sent without blocking. When the batch
//! is full or a send fails the line is dropped and counted, and the count is reported (via
//! `tracing`) at most once per 10 seconds: a slow log reader costs log lines, never latency.
//!
//! Layout: `custom` renders a frontend's own `log_format` and the capture blocks; `format` renders lines from a record, a time and a time zone (no clock inside, so tests
//! pin exact lines), with their time stamps from `stamp`; `sink` moves rendered lines to their
//! destination.

use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::SystemTime;

use chrono::{FixedOffset, LocalResult, NaiveDate, NaiveDateTime, TimeZone};

use lb_config::{AccessLogFormat, Log, LogFormat, LogTarget};

use crate::facts::ConnFacts;
use crate::policy::Captured;

mod custom;
mod format;
#[cfg(test)]
mod regex_tests;
mod sink;
mod stamp;
#[cfg(test)]
mod tests;

use format::{Framing, Ident, Record, Target};
use sink::Sink;

/// Lines waiting for the stdout writer; past this many, new lines are dropped.
const STDOUT_QUEUE: usize = 8192;

/// Writes access logs as configured (`global.log`). Cheap to clone.
#[derive(Debug, Clone)]
pub(crate) struct Logger {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    format: LogFormat,
    ident: Ident,
    framing: Framing,
    sink: Sink,
}

/// One HTTP request, as HAProxy's httplog tells it.
#[derive(Debug)]
pub(crate) struct HttpLog<'a> {
    pub(crate) facts: &'a ConnFacts,
    /// When this request began (HAProxy's accept_date).
    pub(crate) accept_date: SystemTime,
    pub(crate) frontend: &'a str,
    pub(crate) backend: &'a str,
    /// `<NOSRV>` when no server was chosen.
    pub(crate) server: &'a str,
    /// Timers in milliseconds, -1 for "did not happen": TR (request received), Tw (queue),
    /// Tc (connect), Tr (response headers), Ta (whole request).
    pub(crate) tr: i64,
    pub(crate) tw: i64,
    pub(crate) tc: i64,
    pub(crate) tresp: i64,
    pub(crate) ta: i64,
    /// -1 when no status was sent.
    pub(crate) status: i32,
    /// Bytes sent to the client (HAProxy's bytes_read).
    pub(crate) bytes_read: u64,
    /// Session state at disconnection, e.g. `*b"--"`, `*b"CD"`, `*b"sH"`; written with `--`
    /// (no persistence cookies) after it.
    pub(crate) termination: [u8; 2],
    pub(crate) actconn: usize,
    pub(crate) feconn: usize,
    pub(crate) beconn: usize,
    pub(crate) srv_conn: usize,
    pub(crate) retries: u32,
    pub(crate) srv_queue: usize,
    pub(crate) backend_queue: usize,
    /// `<BADREQ>` for an unparsable request.
    pub(crate) request_line: &'a str,
    /// The frontend's own line format (`log_format`); `None`: `global.log.format`.
    pub(crate) format: Option<&'a AccessLogFormat>,
    /// Headers captured by the frontend's rules, for the `{…}` blocks.
    pub(crate) captured: Option<&'a Captured>,
    /// The request's ID (`unique_id`, `%ID`).
    pub(crate) unique_id: Option<&'a str>,
    /// Bytes received from the client (`%U`).
    pub(crate) bytes_uploaded: u64,
}

/// One TCP connection, as HAProxy's tcplog tells it.
#[derive(Debug)]
pub(crate) struct TcpLog<'a> {
    pub(crate) facts: &'a ConnFacts,
    pub(crate) accept_date: SystemTime,
    pub(crate) frontend: &'a str,
    pub(crate) backend: &'a str,
    pub(crate) server: &'a str,
    /// Tw (queue), Tc (connect), Tt (whole session), in ms; -1 for "did not happen".
    pub(crate) tw: i64,
    pub(crate) tc: i64,
    pub(crate) tt: i64,
    pub(crate) bytes_read: u64,
    pub(crate) termination: [u8; 2],
    pub(crate) actconn: usize,
    pub(crate) feconn: usize,
    pub(crate) beconn: usize,
    pub(crate) srv_conn: usize,
    pub(crate) retries: u32,
    pub(crate) srv_queue: usize,
    pub(crate) backend_queue: usize,
}

impl Logger {
    /// Opens the destination: starts the stdout writer thread, or the syslog socket. A syslog
    /// Unix socket that does not exist yet is not an error (it is retried, at most once a second).
    pub(crate) fn new(cfg: &Log) -> std::io::Result<Logger> {
        let ident =
            Ident::new(cfg.hostname.clone().unwrap_or_else(machine_hostname), cfg.tag.clone(), std::process::id());
        let pri = (cfg.facility as u8) * 8 + 6; // severity 6: info
        let (target, sink) = match &cfg.target {
            LogTarget::Stdout => (Target::Line, Sink::stdout(std::io::stdout(), STDOUT_QUEUE)?),
            LogTarget::SyslogUnix(path) => (Target::Syslog { with_host: false }, Sink::unix(path)),
            LogTarget::SyslogUdp(addr) => (Target::Syslog { with_host: true }, Sink::udp(*addr)?),
            LogTarget::None => (Target::Line, Sink::None),
        };
        let framing = Framing { header: cfg.header, pri, target };
        Ok(Logger { inner: Arc::new(Inner { format: cfg.format, ident, framing, sink }) })
    }

    /// Lines dropped so far (`show info`'s DroppedLogs).
    pub(crate) fn dropped(&self) -> u64 {
        self.inner.sink.dropped()
    }

    /// Logs one HTTP request; `now` is the line's time stamp.
    pub(crate) fn http(&self, rec: &HttpLog<'_>, now: SystemTime) {
        self.emit(Record::Http(rec), now);
    }

    /// Logs one TCP connection.
    pub(crate) fn tcp(&self, rec: &TcpLog<'_>) {
        self.emit(Record::Tcp(rec), SystemTime::now());
    }

    fn emit(&self, rec: Record<'_, '_>, now: SystemTime) {
        let inner = &*self.inner;
        if matches!(inner.sink, Sink::None) {
            return;
        }
        LINE.with_borrow_mut(|line| {
            format::render_into(line, rec, inner.format, inner.framing, &inner.ident, now, &LocalTime);
            inner.sink.send(line);
            if line.capacity() > MAX_KEPT_LINE {
                *line = String::with_capacity(LINE_CAPACITY);
            }
        });
    }
}

/// Room for a usual line; a thread's line buffer that grew past `MAX_KEPT_LINE` for a long
/// one is given back.
const LINE_CAPACITY: usize = 512;
const MAX_KEPT_LINE: usize = 16 * 1024;

thread_local! {
    /// Each line is rendered here, then copied to its destination: no allocation per line.
    static LINE: RefCell<String> = RefCell::new(String::with_capacity(LINE_CAPACITY));
}

/// `chrono::Local`, with the offset of the last two UTC seconds asked remembered per thread:
/// `Local` looks the zone's rules up on every call (and now and then stats `/etc/localtime`),
/// which cost more than the rest of a log line. A change of zone shows from the next second on.
#[derive(Debug, Clone, Copy)]
struct LocalTime;

thread_local! {
    /// (UTC second, its offset), the latest first.
    static OFFSETS: Cell<[Option<(i64, FixedOffset)>; 2]> = const { Cell::new([None, None]) };
}

impl TimeZone for LocalTime {
    type Offset = FixedOffset;

    fn from_offset(_: &FixedOffset) -> LocalTime {
        LocalTime
    }

    fn offset_from_local_date(&self, local: &NaiveDate) -> LocalResult<FixedOffset> {
        chrono::Local.offset_from_local_date(local)
    }

    fn offset_from_local_datetime(&self, local: &NaiveDateTime) -> LocalResult<FixedOffset> {
        chrono::Local.offset_from_local_datetime(local)
    }

    fn offset_from_utc_date(&self, utc: &NaiveDate) -> FixedOffset {
        chrono::Local.offset_from_utc_date(utc)
    }

    fn offset_from_utc_datetime(&self, utc: &NaiveDateTime) -> FixedOffset {
        let second = utc.and_utc().timestamp();
        OFFSETS.with(|cache| {
            let [latest, before] = cache.get();
            for (s, offset) in [latest, before].into_iter().flatten() {
                if s == second {
                    return offset;
                }
            }
            let offset = chrono::Local.offset_from_utc_datetime(utc);
            cache.set([Some((second, offset)), latest]);
            offset
        })
    }
}

/// The machine's host name, for the syslog header.
fn machine_hostname() -> String {
    nix::unistd::gethostname()
        .ok()
        .and_then(|name| name.into_string().ok())
        .filter(|name| !name.is_empty() && !name.contains(char::is_whitespace))
        .unwrap_or_else(|| "-".to_owned())
}
