//! Reading a TLS stream only when there may be something to read.
//!
//! The copy between client and backend polls the client direction again after each write to
//! the backend, and whenever the backend's answer wakes the connection. Most of those reads
//! cannot make progress: the library holds no complete record and the socket has nothing new.
//! Yet each costs a thousand instructions: the library clears its error queue, allocates its
//! read buffer, asks the socket, and frees the buffer again. [`Drained`] asks the socket's
//! readiness instead (which also registers the wake-up the read would have) when it knows the
//! read would find nothing:
//! - the socket's last read found nothing (the library reads only when it holds no complete
//!   record, and nothing has been read since), or
//! - the socket's last read was short (the socket is drained: tokio cleared its readiness)
//!   and every complete record read from it has been consumed: [`Socket`] counts the records
//!   in the bytes it hands to the library, [`Drained`] the records the library returned.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::stream::TlsStream;

/// A TLS record's header: content type, version, length of the body (big-endian).
const RECORD_HEADER: usize = 5;

/// A client socket's readiness to read, as its reactor registration knows it.
pub(crate) trait ReadReady {
    fn poll_ready_to_read(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>>;
}

impl ReadReady for TcpStream {
    fn poll_ready_to_read(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

impl ReadReady for UnixStream {
    fn poll_ready_to_read(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.poll_read_ready(cx)
    }
}

/// How the socket's last read went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LastRead {
    /// Nothing yet, a full buffer, the end of the stream or an error: nothing is known.
    Unknown,
    /// Fewer bytes than asked for: the socket had no more.
    Short,
    /// Nothing to read.
    WouldBlock,
}

/// The client socket beneath the TLS library: how its last read went, and how many complete
/// records the bytes read so far hold.
#[derive(Debug)]
pub(crate) struct Socket<S> {
    inner: S,
    last: LastRead,
    records: Records,
}

impl<S> Socket<S> {
    pub(crate) fn new(inner: S) -> Self {
        Socket { inner, last: LastRead::Unknown, records: Records::default() }
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Socket<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let (before, asked) = (buf.filled().len(), buf.remaining());
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let this = &mut *self;
        this.last = match &polled {
            Poll::Pending => LastRead::WouldBlock,
            Poll::Ready(Ok(())) => {
                let read = &buf.filled()[before..];
                this.records.feed(read);
                if !read.is_empty() && read.len() < asked {
                    LastRead::Short
                } else {
                    LastRead::Unknown
                }
            }
            Poll::Ready(Err(_)) => LastRead::Unknown,
        };
        polled
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Socket<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// The TLS records in a byte stream: how many are complete, and where the current one stands.
#[derive(Debug, Default)]
struct Records {
    complete: u64,
    header: [u8; RECORD_HEADER],
    header_len: usize,
    body_left: usize,
}

impl Records {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.header_len < RECORD_HEADER {
                let take = (RECORD_HEADER - self.header_len).min(bytes.len());
                self.header[self.header_len..self.header_len + take].copy_from_slice(&bytes[..take]);
                self.header_len += take;
                bytes = &bytes[take..];
                if self.header_len < RECORD_HEADER {
                    return;
                }
                self.body_left = usize::from(u16::from_be_bytes([self.header[3], self.header[4]]));
            }
            let take = self.body_left.min(bytes.len());
            self.body_left -= take;
            bytes = &bytes[take..];
            if self.body_left == 0 {
                self.complete += 1;
                self.header_len = 0;
            }
        }
    }
}

/// The TLS stream for the copy: a read goes to the library only when it may find something.
#[derive(Debug)]
pub(crate) struct Drained<S> {
    tls: TlsStream<Socket<S>>,
    /// At most the number of records the library has consumed (a read that returned data and
    /// left none pending finished at least one).
    consumed: u64,
}

impl<S> Drained<S> {
    pub(crate) fn new(tls: TlsStream<Socket<S>>) -> Self {
        Drained { tls, consumed: 0 }
    }

    /// Whether a read now would find nothing: neither the library nor the socket has anything.
    fn nothing_to_read(&mut self) -> bool {
        let socket = self.tls.get_ref();
        if socket.last == LastRead::WouldBlock {
            // The library asked the socket only because it held no complete record: every
            // complete record has been consumed.
            self.consumed = socket.records.complete;
            return true;
        }
        socket.last == LastRead::Short && self.consumed >= socket.records.complete && self.tls.ssl().pending() == 0
    }
}

impl<S: AsyncRead + AsyncWrite + ReadReady + Unpin> AsyncRead for Drained<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        // An error of the socket is left for the read to find and report.
        if self.nothing_to_read() && self.tls.get_ref().inner.poll_ready_to_read(cx).is_pending() {
            return Poll::Pending;
        }
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.tls).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before && self.tls.ssl().pending() == 0 {
            self.consumed += 1;
        }
        polled
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for Drained<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tls).poll_write(cx, data)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tls).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests;
