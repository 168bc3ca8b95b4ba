//! The client's bytes cut into requests beside hyper, so that the raw head of every request can
//! be checked for what hyper resolves silently instead of refusing: Content-Length together with
//! Transfer-Encoding (hyper drops the Content-Length and reads the body as chunked). Two parsers
//! that resolve it differently are how requests get smuggled, so we refuse it outright.
//!
//! hyper hands over parsed requests only, and a request pipelined behind another (in the same
//! read, or behind its body) begins wherever the previous one's body ends. So [`RawRequests`]
//! follows the framing hyper chose for each request (its length, or chunked, skipped without
//! being kept) and keeps only the bytes of heads not yet claimed: the next request's head always
//! starts at the front.

use hyper::body::Body;
use hyper::Request;

/// What follows a request's head on the wire, as hyper framed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum After {
    /// A body of this many bytes (0: none), then the next request.
    Length(u64),
    /// A chunked body, then the next request.
    Chunked,
}

impl After {
    /// An upgrade asked for is no tunnel yet: a server may refuse it, and the client's next
    /// request follows as usual (an attacker's `Upgrade` header must not stop the checks).
    /// Once a tunnel does begin, [`RawRequests::stop`] ends the following.
    pub(crate) fn of<B: Body>(req: &Request<B>) -> After {
        // hyper's body knows its length exactly unless it is chunked.
        req.body().size_hint().exact().map_or(After::Chunked, After::Length)
    }
}

/// What [`RawRequests::claim`] found in the head of the request hyper has just parsed.
#[derive(Debug, Default)]
pub(crate) struct Claimed {
    /// Why the request must be refused, if its raw head shows a framing conflict.
    pub(crate) conflict: Option<&'static str>,
    /// The raw head, when asked for (a refused request, for `show errors`) or when refused here.
    pub(crate) head: Option<Vec<u8>>,
    /// How many Content-Length lines the head has, when counted (see `count_lengths`).
    pub(crate) content_lengths: usize,
}

/// The client's bytes not yet claimed by a request, and the body being skipped.
#[derive(Debug)]
pub(crate) struct RawRequests {
    /// Unclaimed bytes: the head of the next request first (after `skip`), then whatever was
    /// read behind it.
    pending: Vec<u8>,
    /// How much `pending` may hold: twice hyper's read buffer (what hyper has read and not yet
    /// parsed, plus the head being claimed).
    limit: usize,
    skip: Skip,
    /// Following the stream stopped (a tunnel began, a head past the limit, a chunk size we
    /// cannot read): no more checks here; hyper's own checks still apply, and what it takes for a
    /// request after an unreadable body it refuses.
    lost: bool,
    /// Count each head's Content-Length lines: hyper merges identical ones into one header, and
    /// a rule that refuses duplicates (HAProxy's `req.hdr_cnt(content-length) gt 1`) needs the
    /// count the client sent.
    pub(crate) count_lengths: bool,
}

/// Initial room for a request head; a connection that saw a larger one gives it back after.
const MIN_CAPACITY: usize = 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Skip {
    Nothing,
    Length(u64),
    Chunked(Chunk),
}

/// Where a chunked body's reader stands (RFC 9112 §7.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// Reading a chunk size's hex digits: the value so far.
    Size(u64),
    /// After the size: extensions and whitespace up to the line's end; then this chunk's data.
    SizeLine(u64),
    /// Data left in this chunk.
    Data(u64),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// At the start of a trailer line (or of the empty line that ends the body).
    TrailerStart,
    /// Inside a trailer line.
    Trailer,
    /// A CR that may begin the final empty line.
    LastCr,
}

impl RawRequests {
    /// `buffer`: hyper's read buffer size (`max_buf_size`).
    pub(crate) fn new(buffer: usize) -> Self {
        RawRequests {
            pending: Vec::new(),
            limit: buffer.saturating_mul(2),
            skip: Skip::Nothing,
            lost: false,
            count_lengths: false,
        }
    }

    /// Bytes read from the client, in order.
    pub(crate) fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() && !self.lost {
            if self.skip == Skip::Nothing {
                let room = self.limit.saturating_sub(self.pending.len());
                if bytes.len() > room {
                    // Kept as far as it fits, for `show errors`; past it the stream is lost.
                    self.lost = true;
                }
                self.pending.extend_from_slice(&bytes[..bytes.len().min(room)]);
                return;
            }
            let used = self.skip(bytes);
            bytes = &bytes[used..];
        }
    }

    /// hyper has parsed the head at the front of `pending` (it parses the same bytes, in the
    /// same order): take it off, check it, and follow what comes after it as hyper will.
    /// `transfer_encoding`: the parsed request has `Transfer-Encoding` (without it there is no
    /// conflict and the head is not parsed again); `keep_head`: hand the raw head back.
    pub(crate) fn claim(&mut self, transfer_encoding: bool, keep_head: bool, after: After) -> Claimed {
        if self.lost {
            return Claimed { conflict: None, head: keep_head.then(|| self.take()), content_lengths: 0 };
        }
        let Some(end) = head_end(&self.pending) else {
            // hyper parsed a head we do not see whole: we lost track somewhere.
            self.lost = true;
            return Claimed { conflict: None, head: keep_head.then(|| self.take()), content_lengths: 0 };
        };
        let head = &self.pending[..end];
        let conflict = if transfer_encoding { framing_conflict(head) } else { None };
        let content_lengths = if self.count_lengths { count_lines(head, b"content-length:") } else { 0 };
        let head = (keep_head || conflict.is_some()).then(|| head.to_vec());
        self.pending.drain(..end);
        self.skip = match after {
            After::Length(0) => Skip::Nothing,
            After::Length(n) => Skip::Length(n),
            After::Chunked => Skip::Chunked(Chunk::Size(0)),
        };
        // Body bytes read along with the head.
        while self.skip != Skip::Nothing && !self.pending.is_empty() && !self.lost {
            let used = self.skip_pending();
            self.pending.drain(..used);
        }
        if self.pending.is_empty() && self.pending.capacity() > 2 * MIN_CAPACITY {
            self.pending.shrink_to(MIN_CAPACITY);
        }
        Claimed { conflict, head, content_lengths }
    }

    /// The connection became a tunnel (a 101): its bytes are no longer requests, and none is
    /// kept from now on.
    pub(crate) fn stop(&mut self) {
        self.lost = true;
        self.pending = Vec::new();
    }

    /// The unclaimed bytes: the head of a request hyper could not parse (for `show errors`).
    pub(crate) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.pending)
    }

    fn skip_pending(&mut self) -> usize {
        let pending = std::mem::take(&mut self.pending);
        let used = self.skip(&pending);
        self.pending = pending;
        used
    }

    /// Skips body bytes from the front of `bytes`: how many were the body's.
    fn skip(&mut self, bytes: &[u8]) -> usize {
        match self.skip {
            Skip::Nothing => 0,
            Skip::Length(left) => {
                let used = left.min(bytes.len() as u64);
                self.skip = if used == left { Skip::Nothing } else { Skip::Length(left - used) };
                used as usize
            }
            Skip::Chunked(mut at) => {
                let mut used = 0;
                while used < bytes.len() {
                    if let Chunk::Data(left) = at {
                        let n = left.min((bytes.len() - used) as u64);
                        used += n as usize;
                        at = if n == left { Chunk::DataEnd } else { Chunk::Data(left - n) };
                        continue;
                    }
                    let byte = bytes[used];
                    used += 1;
                    match step(at, byte) {
                        Step::Next(next) => at = next,
                        Step::Done => {
                            self.skip = Skip::Nothing;
                            return used;
                        }
                        Step::Lost => {
                            self.lost = true;
                            self.skip = Skip::Nothing;
                            return used;
                        }
                    }
                }
                self.skip = Skip::Chunked(at);
                used
            }
        }
    }
}

enum Step {
    Next(Chunk),
    Done,
    /// Not chunked framing: hyper refuses the body, and we stop following.
    Lost,
}

/// One byte of a chunked body's framing (the data itself is skipped by length).
fn step(at: Chunk, byte: u8) -> Step {
    match at {
        Chunk::Size(value) => match (byte as char).to_digit(16) {
            Some(digit) => match value.checked_mul(16).and_then(|v| v.checked_add(u64::from(digit))) {
                Some(v) => Step::Next(Chunk::Size(v)),
                None => Step::Lost,
            },
            None if byte == b'\n' => size_line_end(value),
            None => Step::Next(Chunk::SizeLine(value)),
        },
        Chunk::SizeLine(value) if byte == b'\n' => size_line_end(value),
        Chunk::SizeLine(value) => Step::Next(Chunk::SizeLine(value)),
        // Never reached: `skip` passes a chunk's data over by its length.
        Chunk::Data(_) => Step::Lost,
        Chunk::DataEnd if byte == b'\n' => Step::Next(Chunk::Size(0)),
        Chunk::DataEnd if byte == b'\r' => Step::Next(Chunk::DataEnd),
        Chunk::DataEnd => Step::Lost,
        Chunk::TrailerStart | Chunk::LastCr if byte == b'\n' => Step::Done,
        Chunk::TrailerStart if byte == b'\r' => Step::Next(Chunk::LastCr),
        Chunk::LastCr => Step::Lost,
        Chunk::TrailerStart | Chunk::Trailer if byte == b'\n' => Step::Next(Chunk::TrailerStart),
        Chunk::TrailerStart | Chunk::Trailer => Step::Next(Chunk::Trailer),
    }
}

fn size_line_end(size: u64) -> Step {
    Step::Next(if size == 0 { Chunk::TrailerStart } else { Chunk::Data(size) })
}

/// Where the head at the front of `bytes` ends (just past its empty line), if it is all there.
/// As httparse reads it: empty lines before the request line are skipped, and a line may end
/// with LF alone.
/// Header lines starting with `name` (lowercase, with its colon), in any case.
fn count_lines(head: &[u8], name: &[u8]) -> usize {
    head.split(|&b| b == b'\n')
        .filter(|line| line.len() >= name.len() && line[..name.len()].eq_ignore_ascii_case(name))
        .count()
}

fn head_end(bytes: &[u8]) -> Option<usize> {
    let start = bytes.iter().position(|&b| b != b'\r' && b != b'\n')?;
    let mut at = start;
    while let Some(lf) = bytes[at..].iter().position(|&b| b == b'\n') {
        let after = at + lf + 1;
        match bytes.get(after..) {
            Some([b'\n', ..]) => return Some(after + 1),
            Some([b'\r', b'\n', ..]) => return Some(after + 2),
            Some([b'\r']) | Some([]) | None => return None,
            Some(_) => at = after,
        }
    }
    None
}

/// Whether a complete raw head carries both Content-Length and Transfer-Encoding.
fn framing_conflict(head: &[u8]) -> Option<&'static str> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        // More header lines than hyper takes: hyper has refused it already.
        _ => return None,
    }
    let has = |name: &str| request.headers.iter().any(|h| h.name.eq_ignore_ascii_case(name));
    (has("content-length") && has("transfer-encoding")).then_some("both Content-Length and Transfer-Encoding")
}

#[cfg(test)]
mod tests;
