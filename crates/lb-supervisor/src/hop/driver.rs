//! The one task that does a hop connection's I/O: it writes every frame queued since its last
//! write in one write (many client connections' bytes in one system call), and reads frames into
//! the streams' buffers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{Frame, HEADER_LEN, MAX_PAYLOAD, PREFACE};
use super::state::{Conn, Side};
use crate::Error;

/// Rounds of writing and reading before the driver lets its thread's other tasks run.
const BUDGET: usize = 32;

/// The largest frame, whole: the read buffer never needs more.
const READ_BUF: usize = HEADER_LEN + MAX_PAYLOAD;

/// A written buffer larger than this is given back rather than kept for the next batch. With
/// 256 KiB, fifty clients' 64 KiB responses made batches past it every time: the queue started
/// empty again and grew by doubling into fresh memory (pages the kernel zeroes), about a tenth
/// of the stack's CPU per 64 KiB response (docs/benchmarks.md). A hop connection is one per
/// worker thread, so keeping a few MiB each costs little.
const KEEP_SENDING: usize = 4 * 1024 * 1024;

/// Runs a hop connection: spawn it, and keep it running as long as the connection serves.
/// Resolves when the connection has ended: `Ok` once the peer closed it with no stream open
/// (the connecting side closes it first, once idle after a GOAWAY or when its
/// [`HopClient`](super::HopClient) is gone), an error for a broken connection or a peer that
/// broke the protocol. Dropped, it ends every stream of the connection with an error.
#[derive(Debug)]
#[must_use = "a hop connection does nothing unless its driver runs"]
pub struct Driver<IO> {
    conn: Arc<Conn>,
    io: IO,
    /// Frames taken from the shared queue, being written.
    sending: Vec<u8>,
    sent: usize,
    read: Box<[u8]>,
    /// The bytes of `read` not yet decoded.
    start: usize,
    filled: usize,
    /// The peer's preface is still to be read: on the connecting side, until it came (the
    /// accepting side's caller read it, to tell a hop from a connection with a PROXY header).
    preface_due: bool,
    /// Our write side is shut (connecting side, once idle).
    shut: bool,
}

impl<IO> Driver<IO> {
    pub(crate) fn new(conn: Arc<Conn>, io: IO) -> Driver<IO> {
        let preface_due = conn.lock().side == Side::Connecting;
        Driver {
            conn,
            io,
            sending: Vec::new(),
            sent: 0,
            read: vec![0; READ_BUF].into_boxed_slice(),
            start: 0,
            filled: 0,
            preface_due,
            shut: false,
        }
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Future for Driver<IO> {
    type Output = Result<(), Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        for _ in 0..BUDGET {
            let wrote = match this.poll_send(cx) {
                Ok(wrote) => wrote,
                Err(e) => return this.finish(Err(e)),
            };
            let read = match this.poll_receive(cx) {
                Poll::Ready(Ok(true)) => true,
                Poll::Ready(Ok(false)) => return this.finish(Ok(())),
                Poll::Ready(Err(e)) => return this.finish(Err(e)),
                Poll::Pending => false,
            };
            if !wrote && !read {
                return Poll::Pending;
            }
        }
        cx.waker().wake_by_ref();
        Poll::Pending
    }
}

impl<IO: AsyncRead + AsyncWrite + Unpin> Driver<IO> {
    fn finish(&mut self, result: Result<(), Error>) -> Poll<Result<(), Error>> {
        let why = match &result {
            Ok(()) => "closed by the peer".to_owned(),
            Err(e) => format!("failed: {e}"),
        };
        self.conn.lock().end(why);
        Poll::Ready(result)
    }

    /// Writes what is queued; whether anything was written.
    fn poll_send(&mut self, cx: &mut Context<'_>) -> Result<bool, Error> {
        let mut wrote = false;
        loop {
            if self.sent == self.sending.len() {
                if self.sending.capacity() > KEEP_SENDING {
                    self.sending = Vec::new();
                }
                self.sending.clear();
                self.sent = 0;
                let mut inner = self.conn.lock();
                if inner.out.is_empty() {
                    let done = inner.side == Side::Connecting
                        && !self.shut
                        && (inner.going_away || !inner.handle)
                        && inner.idle();
                    if !done {
                        inner.driver = Some(cx.waker().clone());
                        return Ok(wrote);
                    }
                    drop(inner);
                    // Idle and no new stream will come: the peer ends on our end of stream.
                    match Pin::new(&mut self.io).poll_shutdown(cx) {
                        Poll::Ready(Ok(())) => self.shut = true,
                        Poll::Ready(Err(e)) => return Err(Error::HopIo { source: e }),
                        Poll::Pending => {}
                    }
                    return Ok(wrote);
                }
                std::mem::swap(&mut inner.out, &mut self.sending);
            }
            match Pin::new(&mut self.io).poll_write(cx, &self.sending[self.sent..]) {
                Poll::Ready(Ok(0)) => return Err(Error::HopIo { source: std::io::ErrorKind::WriteZero.into() }),
                Poll::Ready(Ok(n)) => {
                    self.sent += n;
                    wrote = true;
                }
                Poll::Ready(Err(e)) => return Err(Error::HopIo { source: e }),
                Poll::Pending => return Ok(wrote),
            }
        }
    }

    /// One read, its frames handed to the streams: `Ok(true)` when bytes came, `Ok(false)` at
    /// the peer's end of stream.
    fn poll_receive(&mut self, cx: &mut Context<'_>) -> Poll<Result<bool, Error>> {
        if self.filled == self.read.len() && self.start > 0 {
            self.read.copy_within(self.start..self.filled, 0);
            self.filled -= self.start;
            self.start = 0;
        }
        let mut buf = ReadBuf::new(&mut self.read[self.filled..]);
        match Pin::new(&mut self.io).poll_read(cx, &mut buf) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(Err(e)) => return Poll::Ready(Err(Error::HopIo { source: e })),
            Poll::Ready(Ok(())) => {}
        }
        let n = buf.filled().len();
        if n == 0 {
            return Poll::Ready(self.at_end().map(|()| false));
        }
        self.filled += n;
        Poll::Ready(self.decode().map(|()| true))
    }

    fn decode(&mut self) -> Result<(), Error> {
        if self.preface_due {
            let Some(first) = self.read[self.start..self.filled].get(..PREFACE.len()) else { return Ok(()) };
            if first != PREFACE {
                return Err(Error::NotAHop(String::from_utf8_lossy(first).escape_debug().to_string()));
            }
            self.start += PREFACE.len();
            self.preface_due = false;
        }
        let mut inner = self.conn.lock();
        while let Some((frame, used)) = Frame::decode(&self.read[self.start..self.filled])? {
            inner.receive(frame)?;
            self.start += used;
        }
        if self.start == self.filled {
            self.start = 0;
            self.filled = 0;
        }
        Ok(())
    }

    /// The peer closed its side: a clean end only between frames and with no stream open.
    fn at_end(&mut self) -> Result<(), Error> {
        if self.preface_due {
            return Err(Error::HopNoPreface);
        }
        if self.filled > self.start {
            return Err(Error::HopTruncated(self.filled - self.start));
        }
        let inner = self.conn.lock();
        match inner.streams.len() {
            0 => Ok(()),
            open => Err(Error::HopClosedWithStreams(open)),
        }
    }
}

impl<IO> Drop for Driver<IO> {
    fn drop(&mut self) {
        self.conn.lock().end("stopped".to_owned());
    }
}
