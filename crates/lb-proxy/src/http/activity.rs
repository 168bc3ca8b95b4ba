//! The client side of one HTTP connection as seen between requests: idle since when, when the
//! first byte of the next request came, and the two ways we end it from outside hyper.
//!
//! hyper has a single header-read timeout that mixes "idle between requests" with "slow
//! headers", and cannot answer 408. So the connection's IO goes through [`ActivityIo`], which
//! notes the first byte of each request, and a watchdog in `http::serve` decides:
//! - idle too long (or draining while idle): end the connection *without racing a request*:
//!   the next read returns end-of-file only if the socket has nothing to read right now;
//! - headers too slow: write the 408 page straight to the socket and fail the read.

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

use super::body::BodyDue;
use super::framing::{After, RawRequests};
use crate::counters::Transfer;
use crate::listener::SendMore;

/// While draining, an idle connection is closed only after this long without a request.
const DRAIN_QUIET: Duration = Duration::from_secs(1);

/// Shared between the IO wrapper, the request handler and the watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    /// The response head being written waits for its body: the write tells the kernel so.
    body_due: Arc<BodyDue>,
    /// Wakes the watchdog when a change brings its deadline before the one its timer is set
    /// for. Later deadlines need no wake-up: the watchdog re-reads the state when its timer
    /// fires, so a request costs no wake-up at all in the usual case.
    changed: Notify,
    /// The frontend's `http_request` and `http_keep_alive` timeouts.
    request_timeout: Duration,
    keep_alive_timeout: Duration,
}

struct State {
    in_request: bool,
    idle_since: Instant,
    first_byte: Option<Instant>,
    requests: u64,
    ending: Ending,
    read_waker: Option<Waker>,
    /// Bytes written to the client so far, and at the start of the current response.
    written: u64,
    response_base: u64,
    /// Bytes read from the client so far, and how many of them a log line has accounted for.
    read: u64,
    read_logged: u64,
    /// The client's bytes cut into requests beside hyper, for the checks hyper cannot make on
    /// the raw head.
    raw: RawRequests,
    /// Content-Length lines of the last request's raw head (when counted).
    content_lengths: usize,
    /// The log line of the last response, written once hyper has flushed it: only then is the
    /// count of bytes sent (head and body, HAProxy's bytes_read) known.
    pending_log: Option<PendingLog>,
    io_closed: bool,
    /// Bytes were written since the last completed flush: hyper may still hold some of the
    /// response in its buffer, so the count is not final yet.
    unflushed: bool,
    /// What the watchdog's timer is set for (`None`: not yet set).
    armed: Option<Instant>,
    /// Draining: close the connection at this moment if it is idle then.
    drain_at: Option<Instant>,
}

/// A log line waiting for its byte count (the exchange itself: no box made for the wait).
pub(crate) trait LogWhenSent: Send {
    /// Write the line: what this request moved, its response sent whole or abandoned.
    fn log(self: Box<Self>, bytes: Transfer);
}

type PendingLog = Box<dyn LogWhenSent>;

impl std::fmt::Debug for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("State")
            .field("in_request", &self.in_request)
            .field("requests", &self.requests)
            .field("ending", &self.ending)
            .field("written", &self.written)
            .finish_non_exhaustive()
    }
}

/// How the watchdog asked the connection to end.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Ending {
    No,
    /// End at the next read that finds nothing waiting.
    WhenIdle,
    /// Write these bytes (a 408 response), then fail.
    Reply(Vec<u8>, usize),
}

/// What the watchdog should wait for next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// A request is being served: its bodies carry their own timeouts.
    Busy,
    /// Idle since this instant, after this many requests; `drain_at`: when a drain wants it
    /// closed.
    Idle { since: Instant, requests: u64, drain_at: Option<Instant> },
    /// The first byte of a request arrived at this instant; its headers are not complete.
    Reading { since: Instant },
}

impl Watch {
    /// When the watchdog must act, given the frontend's `http_request` and `http_keep_alive`
    /// timeouts; `None` while a request is served.
    pub(crate) fn deadline(self, request_timeout: Duration, keep_alive_timeout: Duration) -> Option<Instant> {
        match self {
            Watch::Busy => None,
            Watch::Idle { since, requests, drain_at } => {
                let limit = if requests == 0 { request_timeout } else { keep_alive_timeout };
                // A client quiet for a while is unlikely to be sending right now: a drain never
                // closes a connection that was busy less than DRAIN_QUIET ago.
                let drain = drain_at.map(|at| at.max(since + DRAIN_QUIET));
                Some(drain.map_or(since + limit, |at| at.min(since + limit)))
            }
            Watch::Reading { since } => Some(since + request_timeout),
        }
    }
}

impl Activity {
    /// For the response bodies of this connection (see [`BodyDue`]).
    pub(crate) fn body_due(&self) -> &Arc<BodyDue> {
        &self.body_due
    }

    /// `read_buffer`: hyper's read buffer size (the frontend's max header size, at least 8 KiB).
    /// `request_timeout`, `keep_alive_timeout`: the frontend's `http_request` and
    /// `http_keep_alive`, for [`Watch::deadline`].
    pub(crate) fn new(
        accepted: Instant,
        read_buffer: usize,
        request_timeout: Duration,
        keep_alive_timeout: Duration,
    ) -> Arc<Self> {
        Arc::new(Activity {
            body_due: Arc::default(),
            state: Mutex::new(State {
                in_request: false,
                idle_since: accepted,
                first_byte: None,
                requests: 0,
                ending: Ending::No,
                read_waker: None,
                written: 0,
                response_base: 0,
                read: 0,
                read_logged: 0,
                raw: RawRequests::new(read_buffer),
                content_lengths: 0,
                pending_log: None,
                io_closed: false,
                unflushed: false,
                armed: None,
                drain_at: None,
            }),
            changed: Notify::new(),
            request_timeout,
            keep_alive_timeout,
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state itself stays consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves after a change that brought the deadline of [`watch`](Self::watch) before the
    /// one last [`arm`](Self::arm)ed (or any change with a deadline, while none is armed).
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    pub(crate) fn watch(&self) -> Watch {
        Self::watch_of(&self.lock())
    }

    fn watch_of(s: &State) -> Watch {
        match (s.in_request, s.first_byte) {
            (true, _) => Watch::Busy,
            (false, Some(since)) => Watch::Reading { since },
            (false, None) => Watch::Idle { since: s.idle_since, requests: s.requests, drain_at: s.drain_at },
        }
    }

    /// The watchdog's timer is now set for `at`: changes that bring the deadline before it
    /// wake [`changed`](Self::changed).
    pub(crate) fn arm(&self, at: Instant) {
        self.lock().armed = Some(at);
    }

    /// What the state now watches changed: wake the watchdog if its timer would be late.
    fn deadline_changed(&self, s: &State) {
        let deadline = Self::watch_of(s).deadline(self.request_timeout, self.keep_alive_timeout);
        if let Some(deadline) = deadline {
            if s.armed.is_none_or(|armed| deadline < armed) {
                self.changed.notify_one();
            }
        }
    }

    /// Headers of a request are complete: returns when its first byte came and, when its raw
    /// head shows a framing conflict hyper papered over, why to refuse it.
    /// `has_transfer_encoding`: whether the parsed request has `Transfer-Encoding` (hyper keeps
    /// it; without it there is no conflict to look for and the raw head is not parsed again).
    /// `refused`: the request is refused already. A refused request, or one with a conflict,
    /// hands its raw head back too (for `show errors`). `after`: how hyper frames what follows.
    pub(crate) fn request_started(
        &self,
        has_transfer_encoding: bool,
        refused: bool,
        after: After,
    ) -> (Instant, Option<&'static str>, Option<Vec<u8>>) {
        // A pipelined request can start before the last response's log was written.
        self.flush_log(false);
        let mut s = self.lock();
        s.in_request = true;
        s.requests += 1;
        // An idle close that a request beat is void: the connection lives on.
        if s.ending == Ending::WhenIdle {
            s.ending = Ending::No;
        }
        s.response_base = s.written;
        let claimed = s.raw.claim(has_transfer_encoding, refused, after);
        s.content_lengths = claimed.content_lengths;
        // Busy: no deadline, nothing for the watchdog to do sooner.
        let at = s.first_byte.take().unwrap_or_else(Instant::now);
        (at, claimed.conflict, claimed.head)
    }

    /// Count the Content-Length lines of each request's raw head (a rule tests their number).
    pub(crate) fn count_content_lengths(&self) {
        self.lock().raw.count_lengths = true;
    }

    /// The Content-Length lines of the request just started, as the client sent them.
    pub(crate) fn content_lengths(&self) -> usize {
        self.lock().content_lengths
    }

    /// The connection is a tunnel from now on: its bytes are no longer requests to check.
    pub(crate) fn tunnel_began(&self) {
        self.lock().raw.stop();
    }

    /// The raw head of a request that hyper could not parse (for `show errors`).
    pub(crate) fn take_head(&self) -> Vec<u8> {
        self.lock().raw.take()
    }

    /// Write `log` with the bytes sent for the current response once hyper has flushed it.
    pub(crate) fn log_when_sent(&self, log: PendingLog) {
        let mut s = self.lock();
        if s.io_closed {
            let bytes = Self::transfer_for_log(&mut s);
            drop(s);
            log.log(bytes);
        } else if let Some(previous) = s.pending_log.replace(log) {
            let bytes = Self::transfer_for_log(&mut s);
            drop(s);
            previous.log(bytes);
        }
    }

    /// The bytes of the request a line is about to be written for: those sent since its
    /// response began, and those received since the last line (its head and body; a client
    /// sends the next request only after this response, or pipelines it, which is rare).
    fn transfer_for_log(s: &mut State) -> Transfer {
        let from_client = s.read - s.read_logged;
        s.read_logged = s.read;
        Transfer { from_client, to_client: s.written - s.response_base }
    }

    /// The bytes received since the last log line, now accounted for: those of a request that
    /// could not be parsed.
    pub(crate) fn take_received(&self) -> u64 {
        Self::transfer_for_log(&mut self.lock()).from_client
    }

    /// Run the pending log line, if any and if its byte count is final: everything written
    /// has been flushed (or the connection is gone).
    fn flush_log(&self, closed: bool) {
        let mut s = self.lock();
        s.io_closed |= closed;
        if s.unflushed && !s.io_closed {
            return;
        }
        let Some(log) = s.pending_log.take() else { return };
        let bytes = Self::transfer_for_log(&mut s);
        drop(s);
        log.log(bytes);
    }

    /// The response has been sent (or abandoned): idle again.
    pub(crate) fn request_done(&self) {
        let mut s = self.lock();
        s.in_request = false;
        s.idle_since = Instant::now();
        self.deadline_changed(&s);
    }

    /// End the connection at its next idle read.
    /// A drain began: busy, the connection ends after its response (which says `Connection:
    /// close`); idle, it is closed at `at` (spread over close_spread so that clients do not all
    /// reconnect at once), after DRAIN_QUIET without a request, when nothing is arriving.
    pub(crate) fn drain(&self, at: Instant) {
        let mut s = self.lock();
        s.drain_at = Some(at);
        self.deadline_changed(&s);
    }

    pub(crate) fn end_when_idle(&self) {
        let mut s = self.lock();
        if s.ending == Ending::No {
            s.ending = Ending::WhenIdle;
        }
        if let Some(w) = s.read_waker.take() {
            w.wake();
        }
    }

    /// Answer the request being read with `response` and end the connection.
    pub(crate) fn reply_and_end(&self, response: Vec<u8>) {
        let mut s = self.lock();
        s.ending = Ending::Reply(response, 0);
        if let Some(w) = s.read_waker.take() {
            w.wake();
        }
    }
}

/// The client stream as hyper sees it.
#[derive(Debug)]
pub(crate) struct ActivityIo<S> {
    io: S,
    activity: Arc<Activity>,
}

impl<S> ActivityIo<S> {
    pub(crate) fn new(io: S, activity: Arc<Activity>) -> Self {
        ActivityIo { io, activity }
    }

    fn count_written(&self, r: &Poll<io::Result<usize>>) {
        if let Poll::Ready(Ok(n)) = r {
            let mut s = self.activity.lock();
            s.written += *n as u64;
            s.unflushed |= *n > 0;
        }
    }
}

impl<S> Drop for ActivityIo<S> {
    fn drop(&mut self) {
        self.activity.flush_log(true);
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ActivityIo<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        // hyper also reads while a response is being written (to notice a client that went
        // away), so a read says nothing about the response; flush_log checks it is all out.
        this.activity.flush_log(false);
        let mut s = this.activity.lock();
        if let Ending::Reply(bytes, written) = &mut s.ending {
            while *written < bytes.len() {
                match Pin::new(&mut this.io).poll_write(cx, &bytes[*written..]) {
                    Poll::Ready(Ok(0)) | Poll::Ready(Err(_)) => break,
                    Poll::Ready(Ok(n)) => *written += n,
                    Poll::Pending => return Poll::Pending,
                }
            }
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "request header timeout")));
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut this.io).poll_read(cx, buf);
        match polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                s.read += (buf.filled().len() - before) as u64;
                if !s.in_request && s.first_byte.is_none() {
                    s.first_byte = Some(Instant::now());
                    this.activity.deadline_changed(&s);
                }
                s.raw.feed(&buf.filled()[before..]);
                Poll::Ready(Ok(()))
            }
            Poll::Pending if s.ending == Ending::WhenIdle && !s.in_request && s.first_byte.is_none() => {
                // Nothing is waiting on the socket and no request is under way: end-of-file
                // now cannot cut a request short.
                Poll::Ready(Ok(()))
            }
            Poll::Pending => {
                s.read_waker = Some(cx.waker().clone());
                Poll::Pending
            }
            other => other,
        }
    }
}

impl<S: AsyncWrite + SendMore + Unpin> AsyncWrite for ActivityIo<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = if this.activity.body_due.is_due() {
            Pin::new(&mut this.io).poll_send_more(cx, &[io::IoSlice::new(buf)])
        } else {
            Pin::new(&mut this.io).poll_write(cx, buf)
        };
        this.count_written(&r);
        r
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let r = if this.activity.body_due.is_due() {
            Pin::new(&mut this.io).poll_send_more(cx, bufs)
        } else {
            Pin::new(&mut this.io).poll_write_vectored(cx, bufs)
        };
        this.count_written(&r);
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let r = Pin::new(&mut this.io).poll_flush(cx);
        if let Poll::Ready(Ok(())) = r {
            // hyper flushes its own buffer through poll_write before flushing the stream:
            // everything it was given has been written.
            this.activity.lock().unflushed = false;
            this.activity.flush_log(false);
        }
        r
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
