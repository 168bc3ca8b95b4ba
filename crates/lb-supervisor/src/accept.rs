//! Accepting connections on the listening sockets a worker was handed: the part every daemon
//! (lb-proxy, lb-tls) does the same way.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use crate::Listener;

/// A listening socket registered with the worker's Tokio runtime.
#[derive(Debug)]
pub enum AsyncListener {
    Tcp(tokio::net::TcpListener),
    Unix(tokio::net::UnixListener),
}

/// One accepted client connection.
#[derive(Debug)]
pub enum Accepted {
    /// The local address is not looked up here (one `getsockname()` per connection): a daemon
    /// that needs it asks the stream.
    Tcp {
        stream: tokio::net::TcpStream,
        peer: SocketAddr,
    },
    Unix(tokio::net::UnixStream),
}

impl AsyncListener {
    /// Registers a socket received from the master. Must be called within a Tokio runtime.
    pub fn from_std(listener: Listener) -> io::Result<Self> {
        Ok(match listener {
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                AsyncListener::Tcp(tokio::net::TcpListener::from_std(l)?)
            }
            Listener::Unix(l) => {
                l.set_nonblocking(true)?;
                AsyncListener::Unix(tokio::net::UnixListener::from_std(l)?)
            }
            Listener::Udp(_) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "a UDP socket accepts no connections"))
            }
        })
    }

    /// Accepts one connection. TCP ones get `TCP_NODELAY` (what we write is written whole:
    /// Nagle would only add latency) and, with `keepalive`, TCP keepalive probes after that much
    /// idle time. Options that cannot be set are left as they are: the connection still works.
    pub async fn accept(&self, keepalive: Option<Duration>) -> io::Result<Accepted> {
        match self {
            AsyncListener::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                let _ = stream.set_nodelay(true);
                if let Some(idle) = keepalive {
                    let probes = socket2::TcpKeepalive::new().with_time(idle);
                    let _ = socket2::SockRef::from(&stream).set_tcp_keepalive(&probes);
                }
                Ok(Accepted::Tcp { stream, peer })
            }
            AsyncListener::Unix(l) => Ok(Accepted::Unix(l.accept().await?.0)),
        }
    }
}

/// After a failed `accept()`: out of file descriptors or memory, wait a little instead of
/// spinning on the same error (the kernel keeps queueing connections meanwhile); any other
/// error (a connection reset before it was accepted) needs no wait.
pub async fn back_off_after(error: &io::Error) {
    let exhausted = matches!(
        error.raw_os_error(),
        Some(code) if code == nix::libc::EMFILE || code == nix::libc::ENFILE
            || code == nix::libc::ENOBUFS || code == nix::libc::ENOMEM
    );
    if exhausted {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
