//! Both directions of a connection until each has ended, as tokio's `copy_bidirectional` does
//! (a finished direction shuts the other side's write half: half-close is kept; an error ends
//! both), but holding no buffer while the connection is idle.
//!
//! Each read goes into the worker thread's scratch buffer and is written on at once; only the
//! bytes the other side does not take then are kept, in a buffer of the connection's own, until
//! they are written (so bytes are copied once more only when a peer is slower than the other).
//! A connection between requests holds nothing here, and the TLS library holds no record
//! buffer either (it frees them when empty): an idle connection costs its TLS state, its
//! task and its two sockets. HAProxy does the same with its buffers, taken from a pool while
//! bytes are in flight.

use std::cell::RefCell;
use std::future::poll_fn;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// The scratch buffer: the largest read of either direction.
const SCRATCH_BYTES: usize = 16 * 1024;

thread_local! {
    static SCRATCH: RefCell<Box<[u8]>> = RefCell::new(vec![0; SCRATCH_BYTES].into_boxed_slice());
}

/// Copies `a` to `b` and `b` to `a` until both directions are done: reads of `a` take at most
/// `a_to_b` bytes, reads of `b` at most `b_to_a` (each at most [`SCRATCH_BYTES`]).
pub(crate) async fn both_ways<A, B>(a: &mut A, b: &mut B, a_to_b: usize, b_to_a: usize) -> io::Result<()>
where
    A: AsyncRead + AsyncWrite + Unpin + ?Sized,
    B: AsyncRead + AsyncWrite + Unpin + ?Sized,
{
    let mut forth = Direction::new(a_to_b);
    let mut back = Direction::new(b_to_a);
    poll_fn(|cx| {
        let forth_done = forth.poll_copy(cx, &mut *a, &mut *b)?;
        let back_done = back.poll_copy(cx, &mut *b, &mut *a)?;
        match (forth_done, back_done) {
            (Poll::Ready(()), Poll::Ready(())) => Poll::Ready(Ok(())),
            _ => Poll::Pending,
        }
    })
    .await
}

/// One direction.
#[derive(Debug)]
struct Direction {
    /// The most one read takes.
    read_size: usize,
    /// Bytes read and not yet written (empty, with no allocation, while none wait).
    held: Vec<u8>,
    /// How many of `held` are written.
    written: usize,
    /// The reader reached its end.
    read_done: bool,
    /// Written since the last flush.
    need_flush: bool,
    done: bool,
}

/// What one read-and-write found.
enum Step {
    /// Read and written whole, or read and partly kept in `held`.
    Moved,
    Eof,
    ReadPending,
    Failed(io::Error),
}

impl Direction {
    fn new(read_size: usize) -> Direction {
        Direction {
            read_size: read_size.min(SCRATCH_BYTES),
            held: Vec::new(),
            written: 0,
            read_done: false,
            need_flush: false,
            done: false,
        }
    }

    fn poll_copy<R, W>(&mut self, cx: &mut Context<'_>, reader: &mut R, writer: &mut W) -> Poll<io::Result<()>>
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        if self.done {
            return Poll::Ready(Ok(()));
        }
        loop {
            // What waits goes first, the same bytes again (as a TLS write retried must be).
            while self.written < self.held.len() {
                let n = ready!(Pin::new(&mut *writer).poll_write(cx, &self.held[self.written..]))?;
                if n == 0 {
                    return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                }
                self.written += n;
                self.need_flush = true;
            }
            if !self.held.is_empty() {
                self.held = Vec::new();
                self.written = 0;
            }
            if self.read_done {
                ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                ready!(Pin::new(&mut *writer).poll_shutdown(cx))?;
                self.done = true;
                return Poll::Ready(Ok(()));
            }
            match self.read_and_write(cx, reader, writer) {
                Step::Moved => {}
                Step::Eof => self.read_done = true,
                Step::Failed(e) => return Poll::Ready(Err(e)),
                Step::ReadPending => {
                    if self.need_flush {
                        ready!(Pin::new(&mut *writer).poll_flush(cx))?;
                        self.need_flush = false;
                    }
                    return Poll::Pending;
                }
            }
        }
    }

    /// One read into the scratch buffer, written on at once; what the writer does not take is
    /// kept in `held`.
    fn read_and_write<R, W>(&mut self, cx: &mut Context<'_>, reader: &mut R, writer: &mut W) -> Step
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        SCRATCH.with(|scratch| match scratch.try_borrow_mut() {
            Ok(mut scratch) => self.move_through(cx, reader, writer, &mut scratch[..self.read_size]),
            // Never nested in practice (a read or write does not copy); a buffer of its own if so.
            Err(_) => self.move_through(cx, reader, writer, &mut vec![0; self.read_size]),
        })
    }

    fn move_through<R, W>(&mut self, cx: &mut Context<'_>, reader: &mut R, writer: &mut W, buf: &mut [u8]) -> Step
    where
        R: AsyncRead + Unpin + ?Sized,
        W: AsyncWrite + Unpin + ?Sized,
    {
        let mut read = ReadBuf::new(buf);
        match Pin::new(&mut *reader).poll_read(cx, &mut read) {
            Poll::Pending => return Step::ReadPending,
            Poll::Ready(Err(e)) => return Step::Failed(e),
            Poll::Ready(Ok(())) => {}
        }
        let data = read.filled();
        if data.is_empty() {
            return Step::Eof;
        }
        match Pin::new(&mut *writer).poll_write(cx, data) {
            Poll::Ready(Ok(0)) => Step::Failed(io::ErrorKind::WriteZero.into()),
            Poll::Ready(Ok(n)) => {
                self.need_flush = true;
                if n < data.len() {
                    self.held = data[n..].to_vec();
                }
                Step::Moved
            }
            Poll::Pending => {
                self.held = data.to_vec();
                Step::Moved
            }
            Poll::Ready(Err(e)) => Step::Failed(e),
        }
    }
}

#[cfg(test)]
mod tests;
