//! One stream of a hop connection as a byte stream: tokio's `AsyncRead` and `AsyncWrite`, with
//! `poll_shutdown` a half-close, so that code written for a socket serves it unchanged.

use std::io;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frame::{encode_data, Frame, MAX_DATA};
use super::state::{Conn, Inner, Slot, WINDOW_UPDATE_AT};

/// A stream of a hop connection: a client connection's bytes each way.
///
/// Dropped, it ends as a closed socket does: a SHUT when every byte received was read, a RESET
/// when some were not.
#[derive(Debug)]
pub struct HopStream {
    conn: Arc<Conn>,
    id: u32,
}

impl HopStream {
    pub(crate) fn new(conn: Arc<Conn>, id: u32) -> HopStream {
        HopStream { conn, id }
    }

    /// The stream's id on its connection (for logs).
    pub fn id(&self) -> u32 {
        self.id
    }

    fn gone() -> io::Error {
        io::Error::new(io::ErrorKind::ConnectionReset, "hop stream reset by the peer")
    }

    fn write_from(&self, cx: &mut Context<'_>, bufs: &[impl Deref<Target = [u8]>]) -> Poll<io::Result<usize>> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let mut inner = self.conn.lock();
        let slot = match writable(&mut inner, self.id) {
            Ok(slot) => slot,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if slot.sent_shut {
            return Poll::Ready(Err(io::Error::new(io::ErrorKind::BrokenPipe, "hop stream shut for writing")));
        }
        if total == 0 {
            return Poll::Ready(Ok(0));
        }
        if slot.send_credit == 0 {
            slot.writer = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let len = total.min(slot.send_credit as usize).min(MAX_DATA);
        slot.send_credit -= len as u32;
        encode_data(&mut inner.out, self.id, bufs, len);
        inner.wake_driver();
        Poll::Ready(Ok(len))
    }
}

impl AsyncRead for HopStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.conn.lock();
        let ended = inner.ended_error();
        let Some(slot) = inner.streams.get_mut(&self.id) else {
            return Poll::Ready(Err(ended.unwrap_or_else(HopStream::gone)));
        };
        if slot.unread() > 0 {
            let n = slot.unread().min(buf.remaining());
            buf.put_slice(&slot.recv[slot.recv_at..slot.recv_at + n]);
            slot.recv_at += n;
            if slot.recv_at == slot.recv.len() {
                // An idle stream holds no buffer.
                slot.recv = Vec::new();
                slot.recv_at = 0;
            }
            slot.unacked += n as u32;
            if slot.unacked >= WINDOW_UPDATE_AT && !slot.recv_shut {
                let credit = std::mem::take(&mut slot.unacked);
                slot.recv_window += credit;
                inner.send(Frame::Window { stream: self.id, credit });
            }
            return Poll::Ready(Ok(()));
        }
        if slot.recv_shut {
            return Poll::Ready(Ok(()));
        }
        if slot.reset {
            return Poll::Ready(Err(HopStream::gone()));
        }
        if let Some(e) = ended {
            return Poll::Ready(Err(e));
        }
        slot.reader = Some(cx.waker().clone());
        Poll::Pending
    }
}

impl AsyncWrite for HopStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.write_from(cx, &[buf])
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        // One DATA frame for a response head and its body.
        self.write_from(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Every write is already queued for the connection's writer, which writes at once.
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut inner = self.conn.lock();
        let slot = match writable(&mut inner, self.id) {
            Ok(slot) => slot,
            Err(e) => return Poll::Ready(Err(e)),
        };
        if !slot.sent_shut {
            slot.sent_shut = true;
            inner.send(Frame::Shut { stream: self.id });
        }
        Poll::Ready(Ok(()))
    }
}

/// The stream's state, while the connection lives and the peer has not reset it.
fn writable(inner: &mut Inner, id: u32) -> io::Result<&mut Slot> {
    if let Some(e) = inner.ended_error() {
        return Err(e);
    }
    match inner.streams.get_mut(&id) {
        Some(slot) if !slot.reset => Ok(slot),
        _ => Err(HopStream::gone()),
    }
}

impl Drop for HopStream {
    fn drop(&mut self) {
        self.conn.lock().release(self.id);
    }
}
