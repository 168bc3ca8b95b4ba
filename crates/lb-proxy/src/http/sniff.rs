//! Which HTTP a plain connection speaks: HTTP/2 with prior knowledge opens with a fixed preface
//! (RFC 9113 §3.4), anything else is HTTP/1.x. The first read is ours, not an extra one: its
//! bytes are handed back, first, to whichever protocol serves the connection ([`Prefixed`]).

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

use crate::listener::ClientStream;

/// HTTP/2's connection preface.
pub(crate) const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Room for the first read: a whole usual request head in one system call, as hyper's own first
/// read would have taken it.
const FIRST_READ: usize = 4096;

/// What the first bytes say.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Sniffed {
    Http1,
    Http2,
    /// The client closed (or failed) before sending anything: nothing to serve.
    Closed,
}

/// Reads until the bytes tell HTTP/2's preface from anything else (usually one read: the first
/// byte of an HTTP/1 request already differs, unless it is `P`).
pub(crate) async fn sniff(stream: &mut ClientStream, read: &mut BytesMut) -> Sniffed {
    read.reserve(FIRST_READ);
    loop {
        match stream.read_buf(read).await {
            Ok(0) | Err(_) => return if read.is_empty() { Sniffed::Closed } else { Sniffed::Http1 },
            Ok(_) => {}
        }
        let n = read.len().min(PREFACE.len());
        if read[..n] != PREFACE[..n] {
            return Sniffed::Http1;
        }
        if n == PREFACE.len() {
            return Sniffed::Http2;
        }
    }
}

/// A client stream whose first bytes were already read: they are read again first.
#[derive(Debug)]
pub(crate) struct Prefixed {
    prefix: BytesMut,
    stream: ClientStream,
}

impl Prefixed {
    pub(crate) fn new(prefix: BytesMut, stream: ClientStream) -> Self {
        Prefixed { prefix, stream }
    }
}

impl AsyncRead for Prefixed {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if !this.prefix.is_empty() {
            let n = this.prefix.len().min(buf.remaining());
            buf.put_slice(&this.prefix[..n]);
            this.prefix.advance(n);
            if this.prefix.is_empty() {
                // Give the buffer back: the connection may live for hours.
                this.prefix = BytesMut::new();
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.stream).poll_read(cx, buf)
    }
}

impl crate::listener::SendMore for Prefixed {
    fn poll_send_more(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_send_more(cx, bufs)
    }
}

impl AsyncWrite for Prefixed {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn sniffed(bytes: &[u8]) -> (Sniffed, Vec<u8>) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let bytes = bytes.to_vec();
        let client = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
            // One byte at a time: the sniffer must wait for enough of them.
            for b in bytes {
                s.write_all(&[b]).await.expect("write");
                s.flush().await.expect("flush");
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
        });
        let (stream, _) = listener.accept().await.expect("accept");
        let mut stream = ClientStream::Tcp(stream);
        let mut read = BytesMut::new();
        let what = sniff(&mut stream, &mut read).await;
        client.await.expect("client");
        let mut again = Prefixed::new(read, stream);
        let mut all = Vec::new();
        again.read_to_end(&mut all).await.expect("read again");
        (what, all)
    }

    #[tokio::test]
    async fn the_preface_is_http2_and_every_byte_is_read_again() {
        let mut h2 = PREFACE.to_vec();
        h2.extend_from_slice(b"\x00\x00\x00\x04\x00\x00\x00\x00\x00");
        assert_eq!(sniffed(&h2).await, (Sniffed::Http2, h2.clone()));
        let h1 = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec();
        assert_eq!(sniffed(&h1).await, (Sniffed::Http1, h1.clone()));
        let almost = b"PRI * HTTP/1.1\r\n\r\n".to_vec();
        assert_eq!(sniffed(&almost).await, (Sniffed::Http1, almost.clone()));
        assert_eq!(sniffed(b"").await, (Sniffed::Closed, Vec::new()));
        assert_eq!(sniffed(b"PRI").await, (Sniffed::Http1, b"PRI".to_vec()), "closed mid-preface: HTTP/1's to refuse");
    }
}
