//! A backend stream that counts the plaintext each way for a frontend's `bin`/`bout` as it
//! moves, so that `show stat` and `show info` follow a long keep-alive connection while it
//! lasts, and count it whatever way it ends (the copy's own totals are lost when it ends on an
//! error, the usual end of a client that resets).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::stats::FrontendStats;

/// `inner`, with what is written to it (the client's bytes) and read from it (the bytes for
/// the client) added to `stats` at each write and read.
pub(crate) struct Counted<'a, B> {
    inner: B,
    stats: &'a FrontendStats,
}

impl<'a, B> Counted<'a, B> {
    pub(crate) fn new(inner: B, stats: &'a FrontendStats) -> Self {
        Counted { inner, stats }
    }
}

impl<B: AsyncRead + Unpin> AsyncRead for Counted<'_, B> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        let read = buf.filled().len() - before;
        if read > 0 {
            self.stats.sent_to_client(read as u64);
        }
        polled
    }
}

impl<B: AsyncWrite + Unpin> AsyncWrite for Counted<'_, B> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.stats.received_from_client(n as u64);
        }
        polled
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}
