//! The two bodies lb-proxy streams, frame by frame and never whole: the request body on its way
//! to the server ([`RequestBody`]) and the response body on its way to the client
//! ([`ResponseBody`]). Each enforces the inactivity timeout of the side it reads from; the
//! response body also reports how the exchange ended, once, for the log and the connection state,
//! and says when its head is waiting for it ([`BodyDue`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tokio::time::{Instant, Sleep};

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// How the client side of a request body ended badly, for the handler to classify a failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClientFailure {
    TimedOut,
    Aborted,
    /// More than the frontend's `max_body_size`.
    TooLarge,
}

/// What the handler learns from the request body as it goes: how it failed, if it did, and its
/// bytes (the log's count for an HTTP/2 stream, whose connection carries other streams too).
#[derive(Debug, Default)]
pub(crate) struct ClientSide {
    pub(crate) failure: Mutex<Option<ClientFailure>>,
    pub(crate) received: AtomicU64,
}

/// The client's request body, forwarded to the server.
#[derive(Debug)]
pub(crate) struct RequestBody {
    inner: Incoming,
    idle: IdleTimer,
    side: Arc<ClientSide>,
    /// The frontend's `max_body_size` (`u64::MAX`: none).
    limit: u64,
}

impl RequestBody {
    pub(crate) fn new(inner: Incoming, timeout: Duration, limit: Option<u64>) -> (Self, Arc<ClientSide>) {
        let side = Arc::new(ClientSide::default());
        let limit = limit.unwrap_or(u64::MAX);
        (RequestBody { inner, idle: IdleTimer::new(timeout), side: side.clone(), limit }, side)
    }

    fn fail(&self, why: ClientFailure) {
        if let Ok(mut f) = self.side.failure.lock() {
            f.get_or_insert(why);
        }
    }
}

impl Body for RequestBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                this.idle.activity();
                if let Some(data) = frame.data_ref() {
                    let before = this.side.received.fetch_add(data.len() as u64, Ordering::Relaxed);
                    // A body whose length was not announced (chunked, HTTP/2) is stopped once
                    // past the limit; an announced one was refused before it was read.
                    if before.saturating_add(data.len() as u64) > this.limit {
                        this.fail(ClientFailure::TooLarge);
                        return Poll::Ready(Some(Err("request body larger than max_body_size".into())));
                    }
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                this.fail(ClientFailure::Aborted);
                Poll::Ready(Some(Err(e.into())))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                if this.idle.expired(cx) {
                    this.fail(ClientFailure::TimedOut);
                    return Poll::Ready(Some(Err("client timeout while sending the request body".into())));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// How a response body ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BodyEnd {
    /// Sent whole.
    Complete,
    /// The client went away (hyper dropped the body before its end).
    ClientGone,
    /// The server failed or closed early.
    ServerError,
    /// The server went silent for `timeouts.server`.
    ServerTimeout,
}

/// Told once how the response body ended, and how many body bytes were sent.
pub(crate) trait OnEnd: Send + Sync + 'static {
    fn end(self: Box<Self>, how: BodyEnd, body_bytes: u64);
}

/// Whether the response head being written waits for the first bytes of a body whose length
/// it announced (`Content-Length`): the body says so while it waits for the server, the client
/// connection's writes read it. One per HTTP/1 connection, which has one response at a time.
///
/// Why: a server that writes its head and its body apart (nginx: the head, then the file) often
/// has them read apart, the body microseconds behind; hyper then writes the head alone. Over TCP
/// such a head goes with `MSG_MORE` (see `listener::SendMore`), as HAProxy does: the kernel holds
/// it until the body's write and both leave as one segment, with no timer or wake-up of ours.
/// Measured (plain HTTP keep-alive, nginx behind): a tenth to a third of responses were read
/// apart, each a segment more for the client to take and acknowledge (1.3 segments per response
/// before, 1.0 after); the proxy's own CPU time per request did not move measurably.
/// A body of unknown length (chunked: a stream of events, maybe) never holds its head back, and
/// only the head waits: once body bytes went, every write goes as it comes.
#[derive(Debug, Default)]
pub(crate) struct BodyDue(AtomicBool);

impl BodyDue {
    pub(crate) fn is_due(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn set(&self, due: bool) {
        self.0.store(due, Ordering::Relaxed);
    }
}

#[derive(Debug)]
enum Source {
    Full(Option<Bytes>),
    Upstream { inner: Incoming, idle: IdleTimer },
}

/// A response body for the client: a fixed one (error pages) or the server's, streamed.
pub(crate) struct ResponseBody {
    source: Source,
    on_end: Option<Box<dyn OnEnd>>,
    /// Body bytes handed to hyper so far.
    sent: u64,
    /// The client connection's, told while the head waits for this body.
    due: Option<Arc<BodyDue>>,
}

impl std::fmt::Debug for ResponseBody {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseBody").field("source", &self.source).finish_non_exhaustive()
    }
}

impl ResponseBody {
    /// No body, and nothing to tell at its end (a 101: the tunnel logs the exchange).
    pub(crate) fn empty() -> Self {
        ResponseBody { source: Source::Full(None), on_end: None, sent: 0, due: None }
    }

    pub(crate) fn full(bytes: Bytes, on_end: Box<dyn OnEnd>) -> Self {
        ResponseBody { source: Source::Full(Some(bytes)), on_end: Some(on_end), sent: 0, due: None }
    }

    pub(crate) fn upstream(inner: Incoming, timeout: Duration, on_end: Box<dyn OnEnd>) -> Self {
        ResponseBody {
            source: Source::Upstream { inner, idle: IdleTimer::new(timeout) },
            on_end: Some(on_end),
            sent: 0,
            due: None,
        }
    }

    /// Tells `due` while the head waits for this body (HTTP/1: see [`BodyDue`]).
    pub(crate) fn telling(mut self, due: Arc<BodyDue>) -> Self {
        self.due = Some(due);
        self
    }

    fn body_due(&self, due: bool) {
        if let Some(d) = &self.due {
            d.set(due);
        }
    }

    fn finish(&mut self, how: BodyEnd) {
        if let Some(on_end) = self.on_end.take() {
            on_end.end(how, self.sent);
        }
    }
}

impl Drop for ResponseBody {
    fn drop(&mut self) {
        self.body_due(false);
        // hyper never polls a body that is empty from the start (HEAD, 204, 304).
        let how = if self.is_end_stream() { BodyEnd::Complete } else { BodyEnd::ClientGone };
        self.finish(how);
    }
}

impl Body for ResponseBody {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        // The head waits only until the body is polled again (then its bytes, its end or its
        // failure go out); only a Pending before the first byte sets it anew.
        if this.sent == 0 {
            this.body_due(false);
        }
        let polled = match &mut this.source {
            Source::Full(bytes) => Poll::Ready(bytes.take().map(|b| Ok(Frame::data(b)))),
            Source::Upstream { inner, idle } => match Pin::new(&mut *inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) => {
                    idle.activity();
                    Poll::Ready(Some(Ok(frame)))
                }
                Poll::Ready(Some(Err(e))) => {
                    this.finish(BodyEnd::ServerError);
                    return Poll::Ready(Some(Err(e.into())));
                }
                Poll::Ready(None) => Poll::Ready(None),
                Poll::Pending => {
                    if idle.expired(cx) {
                        this.finish(BodyEnd::ServerTimeout);
                        return Poll::Ready(Some(Err("server timeout while sending the response body".into())));
                    }
                    if this.sent == 0 && this.due.is_some() && inner.size_hint().exact().is_some_and(|n| n > 0) {
                        this.body_due(true);
                    }
                    Poll::Pending
                }
            },
        };
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    this.sent += data.len() as u64;
                }
                if this.is_end_stream() {
                    this.finish(BodyEnd::Complete);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(None) => {
                this.finish(BodyEnd::Complete);
                Poll::Ready(None)
            }
            other => other,
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.source {
            Source::Full(bytes) => bytes.is_none(),
            Source::Upstream { inner, .. } => inner.is_end_stream(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.source {
            Source::Full(Some(bytes)) => SizeHint::with_exact(bytes.len() as u64),
            Source::Full(None) => SizeHint::with_exact(0),
            Source::Upstream { inner, .. } => inner.size_hint(),
        }
    }
}

/// An inactivity timeout for a body, cheap on the hot path: data only sets a flag; the clock is
/// read and the timer created only once the body has to wait, and the timer moved only when it
/// waits again after new data (never on every frame). A body that never waits (a small one that
/// came with its head) costs no clock reading and no timer at all.
#[derive(Debug)]
struct IdleTimer {
    timeout: Duration,
    /// Data came since the deadline was last set (or the body was never waited on).
    fresh: bool,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl IdleTimer {
    fn new(timeout: Duration) -> Self {
        IdleTimer { timeout, fresh: true, sleep: None }
    }

    fn activity(&mut self) {
        self.fresh = true;
    }

    /// Polled while the body waits: true once `timeout` has passed without data. The silence
    /// counts from the first wait after the last data, which is when that data was taken.
    fn expired(&mut self, cx: &mut Context<'_>) -> bool {
        if std::mem::take(&mut self.fresh) {
            let deadline = Instant::now() + self.timeout;
            match &mut self.sleep {
                Some(sleep) => sleep.as_mut().reset(deadline),
                None => self.sleep = Some(Box::pin(tokio::time::sleep_until(deadline))),
            }
        }
        self.sleep.as_mut().is_some_and(|sleep| sleep.as_mut().poll(cx).is_ready())
    }
}
