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
use std::time::{Instant, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;

/// Shared between the IO wrapper, the request handler and the watchdog.
#[derive(Debug)]
pub(crate) struct Activity {
    state: Mutex<State>,
    /// Wakes the watchdog whenever what it watches changes.
    changed: Notify,
}

#[derive(Debug)]
struct State {
    in_request: bool,
    idle_since: Instant,
    first_byte: Option<(Instant, SystemTime)>,
    requests: u64,
    ending: Ending,
    read_waker: Option<Waker>,
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
    /// Idle since this instant, after this many requests.
    Idle { since: Instant, requests: u64 },
    /// The first byte of a request arrived at this instant; its headers are not complete.
    Reading { since: Instant },
}

impl Activity {
    pub(crate) fn new(accepted: Instant) -> Arc<Self> {
        Arc::new(Activity {
            state: Mutex::new(State {
                in_request: false,
                idle_since: accepted,
                first_byte: None,
                requests: 0,
                ending: Ending::No,
                read_waker: None,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere; the state itself stays consistent.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Resolves after the next change of what [`watch`](Self::watch) returns.
    pub(crate) async fn changed(&self) {
        self.changed.notified().await;
    }

    pub(crate) fn watch(&self) -> Watch {
        let s = self.lock();
        match (s.in_request, s.first_byte) {
            (true, _) => Watch::Busy,
            (false, Some((since, _))) => Watch::Reading { since },
            (false, None) => Watch::Idle { since: s.idle_since, requests: s.requests },
        }
    }

    /// Headers of a request are complete: returns when its first byte came (monotonic, wall).
    pub(crate) fn request_started(&self) -> (Instant, SystemTime) {
        let mut s = self.lock();
        s.in_request = true;
        s.requests += 1;
        self.changed.notify_one();
        s.first_byte.take().unwrap_or_else(|| (Instant::now(), SystemTime::now()))
    }

    /// The response has been sent (or abandoned): idle again.
    pub(crate) fn request_done(&self) {
        let mut s = self.lock();
        s.in_request = false;
        s.idle_since = Instant::now();
        self.changed.notify_one();
    }

    /// End the connection at its next idle read.
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
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for ActivityIo<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
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
                if !s.in_request && s.first_byte.is_none() {
                    s.first_byte = Some((Instant::now(), SystemTime::now()));
                    this.activity.changed.notify_one();
                }
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

impl<S: AsyncWrite + Unpin> AsyncWrite for ActivityIo<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}
