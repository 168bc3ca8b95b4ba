//! The client stream type: an accepted TCP or Unix connection, or a stream of lb-tls's
//! multiplexed hop (one client connection of many on one Unix or TCP connection).
//!
//! Listening sockets are lb-supervisor's ([`lb_supervisor::Listener`]): its master binds them
//! and passes them to workers by fd.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use lb_supervisor::hop::HopStream;
use tokio::io::{AsyncRead, AsyncWrite, Interest, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

/// An accepted client connection: TCP, Unix, or a stream of a multiplexed hop.
#[derive(Debug)]
pub(crate) enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
    Hop(HopStream),
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Hop(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Hop(s) => Pin::new(s).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Hop(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Hop(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Hop(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}

/// A write after which more of the same message follows at once: over TCP it goes with
/// `MSG_MORE`, and the kernel holds a last partial segment until the next write, an
/// acknowledgement from the peer, or at the latest its probe timer (200 ms or more) sends it.
/// Used for a response head whose body is due (see `http::body::BodyDue`).
pub(crate) trait SendMore {
    fn poll_send_more(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>>;
}

impl SendMore for ClientStream {
    fn poll_send_more(self: Pin<&mut Self>, cx: &mut Context<'_>, bufs: &[io::IoSlice<'_>]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => loop {
                std::task::ready!(s.poll_write_ready(cx))?;
                let sent = s.try_io(Interest::WRITABLE, || {
                    socket2::SockRef::from(&*s).send_vectored_with_flags(bufs, nix::libc::MSG_MORE)
                });
                match sent {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                    done => return Poll::Ready(done),
                }
            },
            // Nothing to gain on a Unix socket (lb-tls's hop): no segments. On a multiplexed
            // hop the bytes wait in its queue until the driver writes them all anyway.
            ClientStream::Unix(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            ClientStream::Hop(s) => Pin::new(s).poll_write_vectored(cx, bufs),
        }
    }
}
