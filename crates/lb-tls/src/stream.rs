//! The client's TLS stream under tokio: the openssl crate's `SslStream` over a socket that polls
//! with the waker of the task driving it (stored at each call; a waker that already wakes that
//! task is kept, not cloned again).
//!
//! It is lb-tls's own rather than tokio-openssl's so that a call the openssl crate does not
//! make can reach the socket: the zero-byte write that sends what AWS-LC holds back after a
//! handshake ([`TlsStream::poll_send_tickets`]).

use std::io::{self, Read, Write};
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

use openssl::ssl::{self, ErrorCode, ShutdownResult, Ssl, SslRef};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::ffi;

/// A socket as the TLS library's `Read` and `Write` see it: polled with the stored waker, a
/// poll that is not ready is `WouldBlock`.
#[derive(Debug)]
struct Bridge<S> {
    stream: S,
    waker: Option<Waker>,
}

impl<S: Unpin> Bridge<S> {
    fn poll<T>(&mut self, f: impl FnOnce(Pin<&mut S>, &mut Context<'_>) -> Poll<io::Result<T>>) -> io::Result<T> {
        let Some(waker) = &self.waker else { return Err(io::ErrorKind::WouldBlock.into()) };
        match f(Pin::new(&mut self.stream), &mut Context::from_waker(waker)) {
            Poll::Ready(result) => result,
            Poll::Pending => Err(io::ErrorKind::WouldBlock.into()),
        }
    }
}

impl<S: AsyncRead + Unpin> Read for Bridge<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.poll(|stream, cx| {
            let mut buf = ReadBuf::new(buf);
            stream.poll_read(cx, &mut buf).map_ok(|()| buf.filled().len())
        })
    }
}

impl<S: AsyncWrite + Unpin> Write for Bridge<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.poll(|stream, cx| stream.poll_write(cx, buf))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.poll(|stream, cx| stream.poll_flush(cx))
    }
}

/// A TLS stream over `S`.
#[derive(Debug)]
pub(crate) struct TlsStream<S>(ssl::SslStream<Bridge<S>>);

fn pending_io<T>(r: io::Result<T>) -> Poll<io::Result<T>> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Poll::Pending,
        r => Poll::Ready(r),
    }
}

impl<S> TlsStream<S> {
    pub(crate) fn ssl(&self) -> &SslRef {
        self.0.ssl()
    }

    pub(crate) fn get_ref(&self) -> &S {
        &self.0.get_ref().stream
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> TlsStream<S> {
    pub(crate) fn new(ssl: Ssl, stream: S) -> Result<Self, openssl::error::ErrorStack> {
        ssl::SslStream::new(ssl, Bridge { stream, waker: None }).map(TlsStream)
    }

    /// `f` on the library's stream, its socket polled with `cx`'s waker.
    fn with_waker<R>(&mut self, cx: &Context<'_>, f: impl FnOnce(&mut ssl::SslStream<Bridge<S>>) -> R) -> R {
        let bridge = self.0.get_mut();
        match &bridge.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => bridge.waker = Some(cx.waker().clone()),
        }
        f(&mut self.0)
    }

    /// The server's side of the handshake.
    pub(crate) async fn accept(&mut self) -> Result<(), ssl::Error> {
        std::future::poll_fn(|cx| {
            self.with_waker(cx, |s| match s.accept() {
                Err(e) if matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) => Poll::Pending,
                done => Poll::Ready(done),
            })
        })
        .await
    }

    /// Sends what the library holds back after a handshake: AWS-LC queues a TLS 1.3
    /// NewSessionTicket until the server's first write, so a client that sends nothing (`openssl
    /// s_client -sess_out FILE </dev/null`) would leave without one. (OpenSSL sends it within
    /// the handshake; this then sends nothing.) Ready when written or when the socket failed:
    /// the copy that follows meets the failure.
    pub(crate) async fn send_tickets(&mut self) {
        std::future::poll_fn(|cx| self.poll_send_tickets(cx)).await;
    }

    fn poll_send_tickets(&mut self, cx: &Context<'_>) -> Poll<()> {
        match self.with_waker(cx, |s| ffi::write_nothing(s.ssl())) {
            true => Poll::Pending,
            false => Poll::Ready(()),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncRead for TlsStream<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.with_waker(cx, |s| {
            let read = pending_io(s.read(buf.initialize_unfilled()));
            read.map_ok(|n| buf.advance(n))
        })
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> AsyncWrite for TlsStream<S> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        self.with_waker(cx, |s| pending_io(s.write(buf)))
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.with_waker(cx, |s| pending_io(s.flush()))
    }

    /// A close_notify, then the socket's write side shut.
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.with_waker(cx, |s| s.shutdown()) {
            Ok(ShutdownResult::Sent | ShutdownResult::Received) => {}
            Err(e) if e.code() == ErrorCode::ZERO_RETURN => {}
            Err(e) if matches!(e.code(), ErrorCode::WANT_READ | ErrorCode::WANT_WRITE) => return Poll::Pending,
            Err(e) => return Poll::Ready(Err(e.into_io_error().unwrap_or_else(io::Error::other))),
        }
        Pin::new(&mut self.0.get_mut().stream).poll_shutdown(cx)
    }
}
