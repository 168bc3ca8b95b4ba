//! HAProxy-format lines against a strict third-party parser: node-haproxy-log's regex, used
//! verbatim. Needs `regex` in lb-proxy's `[dev-dependencies]`.

use lb_config::{LogFormat, LogHeader};

use super::format::Record;
use super::tests::{facts, http, line, stdout, utc};

/// node-haproxy-log's matcher (TritonDataCenter/node-haproxy-log, lib/haproxy_log_parser.js,
/// `build_matcher()`), assembled from its pieces exactly as that function concatenates them.
/// It takes HAProxy's httplog without optional captures, and demands the tag `haproxy` and a
/// one-word time stamp (`global.log.header: iso`, as Triton's rsyslog writes it).
const NODE_HAPROXY_LOG_RE: &str = concat!(
    r"^([^ ]+) ([^ ]+) haproxy\[([0-9]+)\]: ([:a-f0-9\.]+):([0-9]+) \[([^ ]+)\] ",
    r"([^ ]+) ([^ /]+)/([^ ]+) ([-0-9]+)/([-0-9]+)/([-0-9]+)/([-0-9]+)/([-0-9]+) ",
    r"([0-9]+) ([0-9]+) - - (....) ([-0-9]+)/([-0-9]+)/([-0-9]+)/([-0-9]+)/([-0-9]+) ",
    r#"([-0-9]+)/([-0-9]+) "([^"]*)"$"#,
);

#[test]
fn httplog_matches_node_haproxy_log_regex() {
    let re = regex::Regex::new(NODE_HAPROXY_LOG_RE).expect("regex");
    let f = facts(Some("10.0.1.2:33317"));
    let ok = http(&f, "GET /index.html HTTP/1.1");
    let mut nosrv = http(&f, "GET /x HTTP/1.1");
    nosrv.server = "<NOSRV>";
    (nosrv.tc, nosrv.tresp, nosrv.status, nosrv.termination) = (-1, -1, 503, *b"SC");
    let mut badreq = http(&f, "<BADREQ>");
    badreq.server = "<NOSRV>";
    badreq.backend = "http-in";
    (badreq.tr, badreq.tw, badreq.tc, badreq.tresp) = (-1, -1, -1, -1);
    (badreq.status, badreq.termination) = (400, *b"PR");
    let v6 = facts(Some("[::ffff:192.0.2.9]:1234"));
    let mapped = http(&v6, "POST /q?\"x\" HTTP/1.0");
    for rec in [&ok, &nosrv, &badreq, &mapped] {
        let full = line(Record::Http(rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
        let l = full.trim_end_matches('\n');
        let caps = re.captures(l).unwrap_or_else(|| panic!("no match: {l}"));
        assert_eq!(&caps[2], "lb1");
        assert_eq!(&caps[3], "4242");
        assert_eq!(&caps[6], "13/Feb/2009:23:31:30.655");
        assert_eq!(&caps[9], rec.server);
        assert_eq!(caps[15].parse::<i32>().ok(), Some(rec.status));
        assert_eq!(&caps[17][..2], std::str::from_utf8(&rec.termination).ok().unwrap_or(""));
        assert_eq!(&caps[17][2..], "--");
    }
    let full = line(Record::Http(&badreq), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    let caps = re.captures(full.trim_end()).expect("match");
    assert_eq!(&caps[25], "<BADREQ>");
    assert_eq!(&caps[10], "-1", "{full}");
}

/// What the strict regex refuses from HAProxy itself too: a line without status (`-1`: no
/// response was sent) and a client on a Unix socket (`unix:<listener id>`).
#[test]
fn node_haproxy_log_regex_limits() {
    let re = regex::Regex::new(NODE_HAPROXY_LOG_RE).expect("regex");
    let f = facts(Some("10.0.1.2:33317"));
    let mut aborted = http(&f, "GET / HTTP/1.1");
    (aborted.tresp, aborted.status, aborted.termination) = (-1, -1, *b"CH");
    let full = line(Record::Http(&aborted), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(!re.is_match(full.trim_end()), "{full}");
    let unix = facts(None);
    let rec = http(&unix, "GET / HTTP/1.1");
    let full = line(Record::Http(&rec), LogFormat::Haproxy, stdout(LogHeader::Iso), &utc());
    assert!(!re.is_match(full.trim_end()), "{full}");
}
