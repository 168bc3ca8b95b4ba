//! The last invalid request of each frontend, kept for `show errors` (HAProxy's error capture):
//! what a client sent that was refused, so that an operator can see it without a packet trace.
//!
//! Written only when a request is refused as malformed (hyper could not parse its head, or a
//! framing conflict was found), never on the request path of a valid request. The head bytes
//! are those the connection already keeps while a head is read (for the smuggling checks), up
//! to the frontend's `max_header_size`.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::SystemTime;

use chrono::{DateTime, Local};

/// One refused request.
#[derive(Debug, Clone)]
pub(crate) struct Capture {
    pub(crate) at: SystemTime,
    pub(crate) client: Option<SocketAddr>,
    /// Why it was refused (hyper's parse error, or the framing conflict found).
    pub(crate) reason: String,
    /// The head as received (possibly cut at the frontend's header size limit).
    pub(crate) head: Vec<u8>,
    /// Its number among all the frontend's captures since start (HAProxy's `event #`).
    pub(crate) event: u64,
}

/// A frontend's captures: the last one, and how many there were.
#[derive(Debug, Default)]
pub(crate) struct Captures {
    last: Mutex<Option<Capture>>,
    events: AtomicU64,
}

impl Captures {
    pub(crate) fn record(&self, client: Option<SocketAddr>, reason: String, head: Vec<u8>) {
        let event = self.events.fetch_add(1, Ordering::Relaxed);
        let capture = Capture { at: SystemTime::now(), client, reason, head, event };
        *self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(capture);
    }

    pub(crate) fn last(&self) -> Option<Capture> {
        self.last.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::Relaxed)
    }
}

/// HAProxy's `[25/Nov/2026:22:39:58.001]`, in local time.
fn date(at: SystemTime) -> String {
    DateTime::<Local>::from(at).format("[%d/%b/%Y:%H:%M:%S%.3f]").to_string()
}

/// `show errors`: the header line, then a block per frontend with a capture, in the layout of
/// HAProxy's (`[date] frontend NAME (#ID): invalid request`, the `src` line, the bytes with
/// their offsets). `frontends`: (name, id, captures), in configuration order.
pub(crate) fn render(now: SystemTime, frontends: &[(&str, usize, &Captures)]) -> String {
    let total: u64 = frontends.iter().map(|(_, _, c)| c.events()).sum();
    // HAProxy's separator lines, spaces included.
    let mut out = format!("Total events captured on {} : {total}\n \n", date(now));
    for (name, id, captures) in frontends {
        let Some(c) = captures.last() else { continue };
        let src = c.client.map_or_else(|| "unix".to_owned(), |a| a.to_string());
        let _ = writeln!(out, "{} frontend {name} (#{id}): invalid request", date(c.at));
        let _ = writeln!(out, "  backend <NONE> (#-1), server <NONE> (#-1), event #{}, src {src}", c.event);
        let _ = match error_position(&c.head) {
            Some(at) => writeln!(out, "  len {}, error at position {at}", c.head.len()),
            None => writeln!(out, "  len {}", c.head.len()),
        };
        let _ = writeln!(out, "  reason: {}\n  ", c.reason);
        dump(&mut out, &c.head);
        out.push('\n');
    }
    out
}

/// Where an HTTP/1 parser first finds the head invalid: the length of the longest prefix it
/// still takes as incomplete. `None` when the whole head parses (a framing conflict) or is
/// only incomplete (cut at the size limit, or the client stopped).
fn error_position(head: &[u8]) -> Option<usize> {
    let fails = |n: usize| {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        httparse::Request::new(&mut headers).parse(&head[..n]).is_err()
    };
    if !fails(head.len()) {
        return None;
    }
    // The first length that fails; every longer one fails too.
    let (mut ok, mut bad) = (0, head.len());
    while bad - ok > 1 {
        let mid = ok + (bad - ok) / 2;
        if fails(mid) {
            bad = mid;
        } else {
            ok = mid;
        }
    }
    Some(ok)
}

/// The bytes as HAProxy shows them: a line per line of input (at most 70 bytes, the rest on
/// lines marked `+`), each with its offset; `\r`, `\n`, `\t`, `\\` and other unprintable bytes
/// escaped (`\xFF`).
fn dump(out: &mut String, bytes: &[u8]) {
    let mut start = 0;
    let mut continued = false;
    while start < bytes.len() {
        let line_end = bytes[start..].iter().position(|&b| b == b'\n').map_or(bytes.len(), |i| start + i + 1);
        let end = line_end.min(start + 70);
        let _ = write!(out, "  {start:05}{} ", if continued { '+' } else { ' ' });
        for &b in &bytes[start..end] {
            match b {
                b'\r' => out.push_str("\\r"),
                b'\n' => out.push_str("\\n"),
                b'\t' => out.push_str("\\t"),
                b'\\' => out.push_str("\\\\"),
                0x20..=0x7e => out.push(char::from(b)),
                _ => {
                    let _ = write!(out, "\\x{b:02X}");
                }
            }
        }
        out.push('\n');
        continued = end < line_end;
        start = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_error_position_is_where_the_parser_stops() {
        assert_eq!(error_position(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"), None, "valid");
        assert_eq!(error_position(b"GET / HTTP/1.1\r\nHo"), None, "incomplete");
        assert_eq!(error_position(b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n"), Some(19));
        assert_eq!(error_position(b"GET /a b HTTP/1.1\r\n\r\n"), Some(7));
    }

    #[test]
    fn shows_the_last_capture_of_each_frontend() {
        let (a, b) = (Captures::default(), Captures::default());
        let client = Some("127.0.0.1:40000".parse().expect("address"));
        a.record(client, "first".into(), b"x".to_vec());
        a.record(client, "invalid HTTP header parsed".into(), b"GET / HTTP/1.1\r\nBad Header: x\r\n\r\n".to_vec());
        let text = render(SystemTime::now(), &[("http_in", 1, &a), ("other", 2, &b)]);
        assert!(text.starts_with("Total events captured on ["), "{text}");
        assert!(text.contains(" : 2\n \n["), "{text}");
        assert!(text.contains("] frontend http_in (#1): invalid request\n"), "{text}");
        assert!(
            text.contains("  backend <NONE> (#-1), server <NONE> (#-1), event #1, src 127.0.0.1:40000\n"),
            "{text}"
        );
        assert!(text.contains("  len 33, error at position 19\n  reason: invalid HTTP header parsed\n  \n"), "{text}");
        assert!(
            text.ends_with("\n  00000  GET / HTTP/1.1\\r\\n\n  00016  Bad Header: x\\r\\n\n  00031  \\r\\n\n\n"),
            "{text}"
        );
        assert!(!text.contains("other"), "{text}");
    }

    #[test]
    fn long_lines_and_unprintable_bytes() {
        // As haproxy 2.6 showed these bytes.
        let mut line = b"GET /".to_vec();
        line.extend_from_slice(&[b'a'; 70]);
        line.extend_from_slice(b"\t\\\x01\xff HTTP/1.1\r\nHost: a\r\n\r\n");
        let mut out = String::new();
        dump(&mut out, &line);
        let expected = format!(
            "  00000  GET /{}\n  00070+ aaaaa\\t\\\\\\x01\\xFF HTTP/1.1\\r\\n\n  00090  Host: a\\r\\n\n  00099  \\r\\n\n",
            "a".repeat(65)
        );
        assert_eq!(out, expected);
    }
}
