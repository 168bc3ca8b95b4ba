//! HAProxy access-log lines, matched strictly.
//!
//! The layout is HAProxy's `option httplog` (configuration manual §8.2.3) and `option tcplog`
//! (§8.2.2) without captures, behind the header a syslog daemon writes to its file (RFC 3164's
//! `Mmm dd HH:MM:SS <host> <tag>[<pid>]: `, what halog reads), as lb-proxy writes them to stdout
//! by default. The message is what log tooling such as node-haproxy-log's matcher expects
//! (`HOST haproxy[PID]: ip:port [date] fe be/srv
//! Tq/Tw/Tc/Tr/Tt status bytes - - TERM act/fe/be/srv/retries sq/bq "request"`), with each field
//! narrowed to what HAProxy can write there: timers are a number or -1 (the total never -1),
//! the status three digits or -1, the termination state's four characters each from HAProxy's
//! own list, the accept date `dd/Mmm/yyyy:HH:MM:SS.mmm`.

use std::sync::OnceLock;

use regex::Regex;

/// The header in front of every stdout line by default: RFC 3164 time (the day padded with a
/// space), host, tag, pid.
pub const LINE_HEADER: &str = r"(?P<log_date>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 1-3]\d \d{2}:\d{2}:\d{2}) (?P<host>[^ ]+) (?P<tag>[^ \[\]]+)\[(?P<pid>\d+)\]: ";

/// The RFC 3164 header of a syslog datagram: `<PRI>Mmm dd HH:MM:SS host tag[pid]: `, the day
/// padded with a space; the host may be left out (as glibc's `syslog()` does for the local
/// socket, whose daemon adds it).
pub const SYSLOG_HEADER: &str = r"<(?P<pri>\d{1,3})>(?P<log_date>(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) [ 1-3]\d \d{2}:\d{2}:\d{2}) (?:(?P<host>[^ ]+) )?(?P<tag>[^ \[\]]+)\[(?P<pid>\d+)\]: ";

/// Client address, accept date, frontend, backend/server: the start shared by both formats.
const COMMON: &str = r"(?:(?P<client_ip>[0-9a-fA-F:.]+):(?P<client_port>\d{1,5})|unix:\d+) \[(?P<accept_date>\d{2}/(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)/\d{4}:\d{2}:\d{2}:\d{2}\.\d{3})\] (?P<frontend>[^ ~]+)~? (?P<backend>[^ /]+)/(?P<server>[^ ]+) ";

/// The four characters of an httplog termination state: cause, state, two cookie flags.
const TERMINATION_HTTP: &str = r"(?P<termination>[-CSPLRIDKUcs][-RQCHDLT][-NIDVEO][-NPDKUIR])";

/// The httplog message, after the header.
fn httplog_message() -> String {
    format!(
        r#"{COMMON}(?P<tr>-1|\d+)/(?P<tw>-1|\d+)/(?P<tc>-1|\d+)/(?P<tresp>-1|\d+)/(?P<ta>\d+) (?P<status>-1|[1-5]\d\d) (?P<bytes>\d+) - - {TERMINATION_HTTP} (?P<actconn>\d+)/(?P<feconn>\d+)/(?P<beconn>\d+)/(?P<srv_conn>\d+)/(?P<retries>\d+) (?P<srv_queue>\d+)/(?P<backend_queue>\d+) "(?P<request>[^"]*)"$"#
    )
}

/// The full httplog line as written to stdout (header included).
pub fn httplog_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| Regex::new(&format!("^{LINE_HEADER}{}", httplog_message())).expect("the httplog regex compiles"))
}

/// The full httplog syslog datagram (RFC 3164 header included).
pub fn httplog_syslog_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        Regex::new(&format!("^{SYSLOG_HEADER}{}", httplog_message())).expect("the httplog regex compiles")
    })
}

/// The full tcplog line (header included).
pub fn tcplog_regex() -> &'static Regex {
    static RE: OnceLock<Regex> = OnceLock::new();
    RE.get_or_init(|| {
        let pattern = format!(
            r"^{LINE_HEADER}{COMMON}(?P<tw>-1|\d+)/(?P<tc>-1|\d+)/(?P<tt>\d+) (?P<bytes>\d+) (?P<termination>[-CSPLRIDKUcs][-RQCHDLT]) (?P<actconn>\d+)/(?P<feconn>\d+)/(?P<beconn>\d+)/(?P<srv_conn>\d+)/(?P<retries>\d+) (?P<srv_queue>\d+)/(?P<backend_queue>\d+)$"
        );
        Regex::new(&pattern).expect("the tcplog regex compiles")
    })
}

/// One httplog line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpLogLine {
    pub tag: String,
    pub pid: u32,
    /// `None` for a Unix-socket client.
    pub client_ip: Option<String>,
    pub client_port: Option<u16>,
    pub accept_date: String,
    pub frontend: String,
    pub backend: String,
    /// `<NOSRV>` when no server was chosen.
    pub server: String,
    pub tr: i64,
    pub tw: i64,
    pub tc: i64,
    pub tresp: i64,
    pub ta: i64,
    pub status: i32,
    pub bytes: u64,
    /// Four characters, e.g. `----`, `sH--`, `CR--`.
    pub termination: String,
    pub actconn: u64,
    pub feconn: u64,
    pub beconn: u64,
    pub srv_conn: u64,
    pub retries: u32,
    pub srv_queue: u64,
    pub backend_queue: u64,
    /// The request line, or `<BADREQ>`.
    pub request: String,
}

/// One tcplog line, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpLogLine {
    pub client_ip: Option<String>,
    pub client_port: Option<u16>,
    pub frontend: String,
    pub backend: String,
    pub server: String,
    pub tw: i64,
    pub tc: i64,
    pub tt: i64,
    pub bytes: u64,
    /// Two characters, e.g. `--`, `CD`.
    pub termination: String,
    pub retries: u32,
}

fn num<T: std::str::FromStr>(caps: &regex::Captures<'_>, name: &str) -> Option<T> {
    caps.name(name)?.as_str().parse().ok()
}

fn text(caps: &regex::Captures<'_>, name: &str) -> String {
    caps.name(name).map_or_else(String::new, |m| m.as_str().to_owned())
}

impl HttpLogLine {
    /// Parses a stdout `line` strictly; `None` when it is not an httplog line.
    pub fn parse(line: &str) -> Option<HttpLogLine> {
        Self::from_captures(&httplog_regex().captures(line)?)
    }

    /// Parses a syslog datagram strictly; `None` when it is not an httplog message.
    pub fn parse_syslog(datagram: &str) -> Option<HttpLogLine> {
        Self::from_captures(&httplog_syslog_regex().captures(datagram)?)
    }

    fn from_captures(c: &regex::Captures<'_>) -> Option<HttpLogLine> {
        Some(HttpLogLine {
            tag: text(c, "tag"),
            pid: num(c, "pid")?,
            client_ip: c.name("client_ip").map(|m| m.as_str().to_owned()),
            client_port: c.name("client_port").and_then(|m| m.as_str().parse().ok()),
            accept_date: text(c, "accept_date"),
            frontend: text(c, "frontend"),
            backend: text(c, "backend"),
            server: text(c, "server"),
            tr: num(c, "tr")?,
            tw: num(c, "tw")?,
            tc: num(c, "tc")?,
            tresp: num(c, "tresp")?,
            ta: num(c, "ta")?,
            status: num(c, "status")?,
            bytes: num(c, "bytes")?,
            termination: text(c, "termination"),
            actconn: num(c, "actconn")?,
            feconn: num(c, "feconn")?,
            beconn: num(c, "beconn")?,
            srv_conn: num(c, "srv_conn")?,
            retries: num(c, "retries")?,
            srv_queue: num(c, "srv_queue")?,
            backend_queue: num(c, "backend_queue")?,
            request: text(c, "request"),
        })
    }

    /// The request path (second word of the request line), if there is one.
    pub fn path(&self) -> Option<&str> {
        self.request.split(' ').nth(1)
    }
}

impl TcpLogLine {
    /// Parses `line` strictly; `None` when it is not a tcplog line.
    pub fn parse(line: &str) -> Option<TcpLogLine> {
        let c = tcplog_regex().captures(line)?;
        Some(TcpLogLine {
            client_ip: c.name("client_ip").map(|m| m.as_str().to_owned()),
            client_port: c.name("client_port").and_then(|m| m.as_str().parse().ok()),
            frontend: text(&c, "frontend"),
            backend: text(&c, "backend"),
            server: text(&c, "server"),
            tw: num(&c, "tw")?,
            tc: num(&c, "tc")?,
            tt: num(&c, "tt")?,
            bytes: num(&c, "bytes")?,
            termination: text(&c, "termination"),
            retries: num(&c, "retries")?,
        })
    }
}

/// Parses every line of `lines` as httplog; panics naming the first line that is not one.
pub fn parse_all_http(lines: &[String]) -> Vec<HttpLogLine> {
    lines.iter().map(|l| HttpLogLine::parse(l).unwrap_or_else(|| panic!("not a strict httplog line: {l:?}"))).collect()
}

/// `halog ARGS…` (Debian's haproxy package) on these lines: its standard output.
pub fn halog(args: &[&str], lines: &[String]) -> String {
    use std::io::Write as _;
    let mut child = std::process::Command::new("halog")
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("halog (Debian's haproxy package)");
    let mut input = child.stdin.take().expect("stdin");
    for line in lines {
        writeln!(input, "{line}").expect("to halog");
    }
    drop(input);
    let out = child.wait_with_output().expect("halog");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documented_lines_match() {
        let http = "May  1 12:00:00 lb1 haproxy[14389]: 10.0.1.2:33317 \
            [06/Feb/2009:12:14:14.655] http-in static/srv1 10/0/30/69/109 200 2750 - - ---- \
            1/1/1/1/0 0/0 \"GET /index.html HTTP/1.1\"";
        let parsed = HttpLogLine::parse(http).expect("the manual's example parses");
        assert_eq!(parsed.server, "srv1");
        assert_eq!(parsed.ta, 109);
        assert_eq!(parsed.request, "GET /index.html HTTP/1.1");
        let badreq = "May 11 12:00:00 h haproxy[1]: 127.0.0.1:1 [06/Feb/2009:12:14:14.655] fe \
            fe/<NOSRV> -1/-1/-1/-1/0 400 187 - - PR-- 1/1/0/0/0 0/0 \"<BADREQ>\"";
        assert!(HttpLogLine::parse(badreq).is_some());
        let tcp = "Nov 24 16:26:59 h haproxy[1]: 10.0.1.2:33313 [06/Feb/2009:12:12:51.443] \
            fnt bck/srv1 0/0/5007 212 -- 0/0/0/0/3 0/0";
        assert!(TcpLogLine::parse(tcp).is_some());
        assert!(HttpLogLine::parse(tcp).is_none());
        // No header, or a junk termination state: not httplog.
        assert!(HttpLogLine::parse(&http[http.find("10.0.1.2").unwrap_or(0)..]).is_none());
        assert!(HttpLogLine::parse(&http.replace("----", "XX--")).is_none());
        let syslog = "<134>Feb  6 12:14:14 lb1 haproxy[14389]: 10.0.1.2:33317 [06/Feb/2009:12:14:14.655] \
            http-in static/srv1 10/0/30/69/109 200 2750 - - ---- 1/1/1/1/0 0/0 \"GET / HTTP/1.1\"";
        assert!(HttpLogLine::parse_syslog(syslog).is_some());
        assert!(HttpLogLine::parse(syslog).is_none());
    }
}
