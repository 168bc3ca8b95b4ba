//! Access-log tests: exact lines for fixed inputs (HAProxy formats, JSON, syslog framing), and
//! delivery to stdout (batching, dropping) and to syslog sockets.

use std::io::Write;
use std::net::{SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use chrono::FixedOffset;
use lb_config::{Facility, Log, LogFormat, LogHeader, LogTarget};

use super::format::{render_into, Framing, Ident, Record, Target};
use super::sink::{Sink, UnixSyslog};
use super::{HttpLog, Inner, Logger, TcpLog};
use crate::facts::{ConnFacts, TlsFacts};

pub(super) fn at(secs: u64, ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs) + Duration::from_millis(ms)
}

/// 2009-02-13T23:31:30.655Z
pub(super) fn accept() -> SystemTime {
    at(1_234_567_890, 655)
}

pub(super) fn facts(client: Option<&str>) -> ConnFacts {
    let mut f = ConnFacts::from_socket(client.map(|c| c.parse().expect("address")));
    f.accepted_at = accept();
    f
}

pub(super) fn ident() -> Ident {
    Ident::new("lb1".to_owned(), "haproxy".to_owned(), 4242)
}

pub(super) fn http<'a>(facts: &'a ConnFacts, request_line: &'a str) -> HttpLog<'a> {
    HttpLog {
        facts,
        accept_date: accept(),
        frontend: "http-in",
        backend: "static",
        server: "srv1",
        tr: 10,
        tw: 0,
        tc: 30,
        tresp: 69,
        ta: 109,
        status: 200,
        bytes_read: 2750,
        termination: *b"--",
        actconn: 1,
        feconn: 1,
        beconn: 1,
        srv_conn: 1,
        retries: 0,
        srv_queue: 0,
        backend_queue: 0,
        request_line,
        format: None,
        captured: None,
        unique_id: None,
        bytes_uploaded: 0,
    }
}

pub(super) fn tcp(facts: &ConnFacts) -> TcpLog<'_> {
    TcpLog {
        facts,
        accept_date: accept(),
        frontend: "fnt",
        backend: "bck",
        server: "srv1",
        tw: 0,
        tc: 5,
        tt: 5007,
        bytes_read: 212,
        termination: *b"--",
        actconn: 0,
        feconn: 0,
        beconn: 0,
        srv_conn: 0,
        retries: 3,
        srv_queue: 0,
        backend_queue: 0,
    }
}

pub(super) fn utc() -> FixedOffset {
    FixedOffset::east_opt(0).expect("offset")
}

/// `rec` rendered at `now` as the tests' host and program.
/// Lines on standard output with `header`, local0.info.
pub(super) fn stdout(header: LogHeader) -> Framing {
    Framing { header, pri: 134, target: Target::Line }
}

/// Datagrams to a remote syslog (with the host), local0.info.
fn syslog_udp(header: LogHeader) -> Framing {
    Framing { header, pri: 134, target: Target::Syslog { with_host: true } }
}

fn rendered(rec: Record<'_, '_>, format: LogFormat, framing: Framing, now: SystemTime, tz: &FixedOffset) -> String {
    let mut out = String::new();
    render_into(&mut out, rec, format, framing, &ident(), now, tz);
    out
}

pub(super) fn line(rec: Record<'_, '_>, format: LogFormat, framing: Framing, tz: &FixedOffset) -> String {
    rendered(rec, format, framing, at(1_234_567_890, 764), tz)
}

#[test]
fn httplog_exact_line() {
    let f = facts(Some("10.0.1.2:33317"));
    let rec = http(&f, "GET /index.html HTTP/1.1");
    assert_eq!(
        line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc()),
        "2009-02-13T23:31:30.764+00:00 lb1 haproxy[4242]: 10.0.1.2:33317 \
         [13/Feb/2009:23:31:30.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- \
         1/1/1/1/0 0/0 \"GET /index.html HTTP/1.1\"\n"
    );
    // Local time with an offset: both dates move, the offset is written.
    let cet = FixedOffset::east_opt(3600).expect("offset");
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &cet);
    assert!(
        l.starts_with("2009-02-14T00:31:30.764+01:00 lb1 haproxy[4242]: 10.0.1.2:33317 [14/Feb/2009:00:31:30.655] "),
        "{l}"
    );
}

#[test]
fn httplog_escapes_and_special_clients() {
    let f = facts(Some("[2001:db8::1]:50000"));
    let rec = http(&f, "GET /a\"b#c\n\u{e9} HTTP/1.1");
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(l.contains(" 2001:db8::1:50000 ["), "{l}");
    assert!(l.ends_with(" \"GET /a#22b#23c#0A#C3#A9 HTTP/1.1\"\n"), "{l}");
    let unix = facts(None);
    let rec = http(&unix, "GET / HTTP/1.1");
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(l.contains(": unix:0 [13/Feb/2009"), "{l}");
}

#[test]
fn tcplog_exact_line() {
    let f = facts(Some("10.0.0.1:5000"));
    let mut rec = tcp(&f);
    rec.termination = *b"sD";
    assert_eq!(
        line(Record::Tcp(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc()),
        "2009-02-13T23:31:30.764+00:00 lb1 haproxy[4242]: 10.0.0.1:5000 \
         [13/Feb/2009:23:31:30.655] fnt bck/srv1 0/5/5007 212 sD 0/0/0/0/3 0/0\n"
    );
}

#[test]
fn json_lines() {
    let mut f = facts(Some("[2001:db8::7]:443"));
    f.tls = Some(TlsFacts {
        version: Some("TLSv1.3".to_owned()),
        cipher: Some("TLS_AES_128_GCM_SHA256".to_owned()),
        client_cert: false,
        client_cert_verified: false,
    });
    f.alpn = Some("h2".to_owned());
    f.authority = Some("api.example.com".to_owned());
    let mut rec = http(&f, "GET /a b HTTP/1.1");
    rec.tresp = -1;
    let l = line(Record::Http(&rec), LogFormat::Json, stdout(LogHeader::Raw), &utc());
    assert!(l.ends_with("}\n") && l.matches('\n').count() == 1, "{l}");
    let v: serde_json::Value = serde_json::from_str(&l).expect("JSON");
    assert_eq!(v["client_ip"], "2001:db8::7");
    assert_eq!(v["client_port"], 443);
    assert_eq!(v["accept_date"], "2009-02-13T23:31:30.655+00:00");
    assert_eq!(v["server"], "srv1");
    assert_eq!(v["request_time_ms"], 10);
    assert_eq!(v["response_time_ms"], serde_json::Value::Null);
    assert_eq!(v["status"], 200);
    assert_eq!(v["bytes_read"], 2750);
    assert_eq!(v["termination_state"], "----");
    assert_eq!(v["request"], "GET /a b HTTP/1.1");
    assert_eq!((&v["method"], &v["uri"]), (&"GET".into(), &"/a".into()));
    assert_eq!(v["version"], "b HTTP/1.1");
    assert_eq!(v["tls_version"], "TLSv1.3");
    assert_eq!(v["tls_cipher"], "TLS_AES_128_GCM_SHA256");
    assert_eq!((&v["sni"], &v["alpn"]), (&"api.example.com".into(), &"h2".into()));

    let plain = facts(None);
    let mut bad = http(&plain, "<BADREQ>");
    bad.status = -1;
    let v: serde_json::Value =
        serde_json::from_str(&line(Record::Http(&bad), LogFormat::Json, stdout(LogHeader::Raw), &utc())).expect("JSON");
    assert!(v["client_ip"].is_null() && v["status"].is_null() && v["method"].is_null());
    assert!(v.get("tls_version").is_none() && v.get("sni").is_none());

    let t = tcp(&plain);
    let l = line(Record::Tcp(&t), LogFormat::Json, syslog_udp(LogHeader::Rfc3164), &utc());
    let json = l.strip_prefix("<134>Feb 13 23:31:30 lb1 haproxy[4242]: ").expect("syslog header");
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!((&v["mode"], &v["total_time_ms"]), (&"tcp".into(), &5007.into()));
    assert_eq!(v["termination_state"], "--");
}

#[test]
fn syslog_framing() {
    let f = facts(Some("10.0.1.2:33317"));
    let rec = http(&f, "GET / HTTP/1.1");
    // RFC 3164 pads the day with a space.
    let syslog = syslog_udp(LogHeader::Rfc3164);
    let l = rendered(Record::Http(&rec), LogFormat::Haproxy, syslog, at(1_233_446_400, 0), &utc()); // 2009-02-01
    assert!(l.starts_with("<134>Feb  1 00:00:00 lb1 haproxy[4242]: 10.0.1.2:33317 ["), "{l}");
    assert!(!l.ends_with('\n'));
    let long = "x".repeat(20_000);
    let rec = http(&f, &long);
    let l = line(Record::Http(&rec), LogFormat::Haproxy, syslog_udp(LogHeader::Rfc3164), &utc());
    assert_eq!(l.len(), super::format::MAX_DATAGRAM);
}

fn config(target: LogTarget) -> Log {
    Log {
        target,
        format: LogFormat::Haproxy,
        header: LogHeader::Rfc3164,
        tag: "haproxy".to_owned(),
        facility: Facility::Local0,
        hostname: Some("lb1".to_owned()),
    }
}

fn recv_unix(sock: &UnixDatagram) -> String {
    let mut buf = [0u8; 16 * 1024];
    let n = sock.recv(&mut buf).expect("datagram");
    String::from_utf8_lossy(&buf[..n]).into_owned()
}

#[test]
fn syslog_unix_datagrams() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.sock");
    let server = UnixDatagram::bind(&path).expect("bind");
    server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let logger = Logger::new(&config(LogTarget::SyslogUnix(path))).expect("logger");
    let f = facts(Some("10.0.1.2:33317"));
    logger.http(&http(&f, "GET /one HTTP/1.1"), SystemTime::now());
    let msg = recv_unix(&server);
    // local0 (16) * 8 + info (6)
    assert!(msg.starts_with("<134>"), "{msg}");
    let pid = std::process::id();
    // No host name for the local daemon (it adds its own).
    let header_end = msg.find(&format!(" haproxy[{pid}]: 10.0.1.2:33317 [13/Feb/2009:"));
    assert_eq!(header_end, Some("<134>Mmm dd HH:MM:SS".len()), "{msg}");
    assert!(msg.ends_with(" \"GET /one HTTP/1.1\""), "{msg}");
    logger.tcp(&tcp(&f));
    assert!(recv_unix(&server).ends_with(" fnt bck/srv1 0/5/5007 212 -- 0/0/0/0/3 0/0"));
}

#[test]
fn syslog_unix_reconnects() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("log.sock");
    let sink = Sink::Unix(UnixSyslog::new(path.clone(), Duration::ZERO));
    // Absent at start: dropped and counted.
    sink.send("<134>first");
    assert_eq!(sink.dropped(), 1);
    // Created later: found on the next line.
    let server = UnixDatagram::bind(&path).expect("bind");
    server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    sink.send("<134>second");
    assert_eq!(recv_unix(&server), "<134>second");
    // Recreated (the syslog daemon restarted): the old connection fails, a new one is made.
    drop(server);
    std::fs::remove_file(&path).expect("remove");
    let server = UnixDatagram::bind(&path).expect("bind again");
    server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    sink.send("<134>third");
    assert_eq!(recv_unix(&server), "<134>third");
    assert_eq!(sink.dropped(), 1);
}

#[test]
fn syslog_udp_datagrams() {
    let server = UdpSocket::bind("127.0.0.1:0").expect("bind");
    server.set_read_timeout(Some(Duration::from_secs(5))).expect("timeout");
    let addr: SocketAddr = server.local_addr().expect("addr");
    let mut cfg = config(LogTarget::SyslogUdp(addr));
    cfg.facility = Facility::Daemon;
    cfg.format = LogFormat::Json;
    let logger = Logger::new(&cfg).expect("logger");
    let f = facts(Some("10.0.1.2:33317"));
    logger.http(&http(&f, "GET /udp HTTP/1.1"), SystemTime::now());
    let mut buf = [0u8; 16 * 1024];
    let n = server.recv(&mut buf).expect("datagram");
    let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
    assert!(msg.starts_with("<30>"), "{msg}"); // daemon (3) * 8 + 6
    let json = &msg[msg.find(": {").expect("message") + 2..];
    let v: serde_json::Value = serde_json::from_str(json).expect("JSON");
    assert_eq!(v["uri"], "/udp");
}

#[test]
fn none_target_writes_nothing() {
    let logger = Logger::new(&config(LogTarget::None)).expect("logger");
    let f = facts(None);
    logger.http(&http(&f, "GET / HTTP/1.1"), SystemTime::now());
    logger.tcp(&tcp(&f));
}

/// A writer whose writes wait for the test to open the gate, and that says when one started.
struct Gated {
    entered: mpsc::Sender<()>,
    gate: mpsc::Receiver<()>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Write for Gated {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = self.entered.send(());
        let _ = self.gate.recv();
        self.out.lock().map_err(|_| std::io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn stdout_logger(out: impl Write + Send + 'static, queue: usize) -> Logger {
    Logger {
        inner: Arc::new(Inner {
            format: LogFormat::Haproxy,
            ident: ident(),
            framing: stdout(LogHeader::Iso),
            sink: Sink::stdout(out, queue).expect("writer thread"),
        }),
    }
}

#[test]
fn stdout_never_blocks_and_counts_drops() {
    let (entered_tx, entered) = mpsc::channel();
    let (open, gate) = mpsc::channel();
    let out = Arc::new(Mutex::new(Vec::new()));
    let logger = stdout_logger(Gated { entered: entered_tx, gate, out: out.clone() }, 4);
    let f = facts(Some("10.0.1.2:33317"));
    logger.http(&http(&f, "GET /0 HTTP/1.1"), SystemTime::now());
    entered.recv_timeout(Duration::from_secs(5)).expect("writer busy");
    // The writer is stuck: 4 lines queue, 16 are dropped, and nobody waits.
    let start = Instant::now();
    for i in 1..=20 {
        logger.http(&http(&f, &format!("GET /{i} HTTP/1.1")), SystemTime::now());
    }
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(logger.inner.sink.dropped(), 16);
    drop(open); // unblock every write from now on
    drop(logger); // the last logger waits (briefly) for the queue to be written
    let out = String::from_utf8(out.lock().expect("lock").clone()).expect("UTF-8");
    let paths: Vec<&str> = out.lines().filter_map(|l| l.split('"').nth(1)).collect();
    assert_eq!(paths, ["GET /0 HTTP/1.1", "GET /1 HTTP/1.1", "GET /2 HTTP/1.1", "GET /3 HTTP/1.1", "GET /4 HTTP/1.1"]);
}

#[test]
fn every_header_style_as_haproxy_names_them() {
    let f = facts(Some("10.0.1.2:33317"));
    let rec = http(&f, "GET / HTTP/1.1");
    let message = "10.0.1.2:33317 [13/Feb/2009:23:31:30.655] ";
    let head = |framing: Framing| {
        let l = line(Record::Http(&rec), LogFormat::Haproxy, framing, &utc());
        l[..l.find(message).unwrap_or_else(|| panic!("{l}"))].to_owned()
    };
    // On stdout, as a syslog daemon writes its file: what halog reads (the default).
    assert_eq!(head(stdout(LogHeader::Rfc3164)), "Feb 13 23:31:30 lb1 haproxy[4242]: ");
    assert_eq!(head(stdout(LogHeader::Iso)), "2009-02-13T23:31:30.764+00:00 lb1 haproxy[4242]: ");
    assert_eq!(head(stdout(LogHeader::Rfc5424)), "1 2009-02-13T23:31:30.764+00:00 lb1 haproxy 4242 - - ");
    assert_eq!(head(stdout(LogHeader::Raw)), "");
    assert_eq!(head(stdout(LogHeader::Short)), "<134>");
    // To a syslog daemon: with the priority in front.
    assert_eq!(head(syslog_udp(LogHeader::Rfc5424)), "<134>1 2009-02-13T23:31:30.764+00:00 lb1 haproxy 4242 - - ");
    assert_eq!(head(syslog_udp(LogHeader::Iso)), "<134>2009-02-13T23:31:30.764+00:00 lb1 haproxy[4242]: ");
    assert_eq!(head(syslog_udp(LogHeader::Raw)), "<134>");
    let local = Framing { header: LogHeader::Rfc5424, pri: 134, target: Target::Syslog { with_host: false } };
    assert_eq!(head(local), "<134>1 2009-02-13T23:31:30.764+00:00 - haproxy 4242 - - ");
}

/// HAProxy's example of `option httplog` with captures (configuration.txt §8.2.3): the request
/// and response blocks between the queues and the request line, as halog's `-hdr` reads them.
#[test]
fn httplog_with_capture_blocks() {
    let f = facts(Some("10.0.1.2:33317"));
    let captured = crate::policy::Captured {
        request: vec![Some("1wt.eu".to_owned()), None],
        response: vec![Some("text/html".to_owned())],
    };
    let mut rec = http(&f, "GET /index.html HTTP/1.1");
    rec.captured = Some(&captured);
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(l.ends_with(" 1/1/1/1/0 0/0 {1wt.eu|} {text/html} \"GET /index.html HTTP/1.1\"\n"), "{l}");
    // A value cannot break the line or the block apart (# escaping, as HAProxy's).
    let hostile = crate::policy::Captured { request: vec![Some("a\"b\nc".to_owned())], response: vec![] };
    rec.captured = Some(&hostile);
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(l.contains(" {a#22b#0Ac} \"GET"), "{l}");
}

#[test]
fn custom_text_and_json_formats() {
    let f = facts(Some("10.0.1.2:33317"));
    let captured = crate::policy::Captured { request: vec![Some("abc-123".to_owned())], response: vec![] };
    let mut rec = http(&f, "GET /a/b?x=1 HTTP/1.1");
    rec.captured = Some(&captured);
    rec.unique_id = Some("id-1");
    let text = lb_config::AccessLogFormat::Text(
        lb_config::Template::parse("%ci:%cp %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %hr %ID %HM %HP %HQ %{+Q}r")
            .expect("template"),
    );
    rec.format = Some(&text);
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Raw), &utc());
    assert_eq!(
        l,
        "10.0.1.2:33317 http-in static/srv1 10/0/30/69/109 200 2750 ---- {abc-123} id-1 GET /a/b ?x=1 \"GET /a/b?x=1 HTTP/1.1\"\n"
    );
    let json = lb_config::AccessLogFormat::Json(vec![
        ("client".to_owned(), lb_config::Template::parse("%ci").expect("t")),
        ("status".to_owned(), lb_config::Template::parse("%ST").expect("t")),
        ("connect_ms".to_owned(), lb_config::Template::parse("%Tc").expect("t")),
        ("request_id".to_owned(), lb_config::Template::parse("%ID").expect("t")),
        ("xid".to_owned(), lb_config::Template::parse("%hr").expect("t")),
    ]);
    rec.format = Some(&json);
    rec.tc = -1;
    let l = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Raw), &utc());
    let v: serde_json::Value = serde_json::from_str(&l).expect("JSON");
    assert_eq!(
        v,
        serde_json::json!({"client": "10.0.1.2", "status": 200, "connect_ms": null, "request_id": "id-1", "xid": "{abc-123}"})
    );
}
