//! Accepting connections on the listening sockets a worker was handed: the part every daemon
//! (lb-proxy, lb-tls) does the same way.

use std::io;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::time::Duration;

use crate::split::Port;
use crate::{ListenAddr, Listener};

/// A listening socket registered with the worker's Tokio runtime.
#[derive(Debug)]
pub struct AsyncListener {
    socket: Socket,
    /// Its part in a canary's split (client listeners in a supervised worker only).
    port: Option<Port>,
}

#[derive(Debug)]
pub(crate) enum Socket {
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
    /// Every connection accepted on it is this worker's (a stats or metrics listener).
    pub fn from_std(listener: Listener) -> io::Result<Self> {
        let socket = match listener {
            Listener::Tcp(l) => {
                l.set_nonblocking(true)?;
                Socket::Tcp(tokio::net::TcpListener::from_std(l)?)
            }
            Listener::Unix(l) => {
                l.set_nonblocking(true)?;
                Socket::Unix(tokio::net::UnixListener::from_std(l)?)
            }
            Listener::Udp(_) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "a UDP socket accepts no connections"))
            }
        };
        Ok(AsyncListener { socket, port: None })
    }

    /// [`from_std`](Self::from_std) for a listener of clients, bound for `address`: during a
    /// canary its new connections are split with the other worker (see `split`).
    pub fn for_clients(listener: Listener, address: &ListenAddr) -> io::Result<Self> {
        Ok(AsyncListener { port: Port::for_address(address), ..Self::from_std(listener)? })
    }

    /// Accepts one connection. TCP ones get `TCP_NODELAY` (what we write is written whole:
    /// Nagle would only add latency) and, with `keepalive`, TCP keepalive probes after that much
    /// idle time. Options that cannot be set are left as they are: the connection still works.
    /// Cancel-safe.
    pub async fn accept(&self, keepalive: Option<Duration>) -> io::Result<Accepted> {
        match &self.port {
            None => Ok(configure(self.socket.accept_raw().await?, keepalive)),
            Some(port) => port.accept(&self.socket, keepalive).await,
        }
    }
}

impl Socket {
    pub(crate) async fn accept_raw(&self) -> io::Result<Accepted> {
        Ok(match self {
            Socket::Tcp(l) => {
                let (stream, peer) = l.accept().await?;
                Accepted::Tcp { stream, peer }
            }
            Socket::Unix(l) => Accepted::Unix(l.accept().await?.0),
        })
    }

    /// A connection accepted on this socket by the other worker of a canary.
    pub(crate) fn adopt(&self, fd: OwnedFd, keepalive: Option<Duration>) -> io::Result<Accepted> {
        let accepted = match self {
            Socket::Tcp(_) => {
                let stream = std::net::TcpStream::from(fd);
                stream.set_nonblocking(true)?;
                let peer = stream.peer_addr()?;
                Accepted::Tcp { stream: tokio::net::TcpStream::from_std(stream)?, peer }
            }
            Socket::Unix(_) => {
                let stream = std::os::unix::net::UnixStream::from(fd);
                stream.set_nonblocking(true)?;
                Accepted::Unix(tokio::net::UnixStream::from_std(stream)?)
            }
        };
        Ok(configure(accepted, keepalive))
    }
}

impl Accepted {
    /// The connection as a plain fd, to hand to the other worker.
    pub(crate) fn into_fd(self) -> io::Result<OwnedFd> {
        Ok(match self {
            Accepted::Tcp { stream, .. } => OwnedFd::from(stream.into_std()?),
            Accepted::Unix(stream) => OwnedFd::from(stream.into_std()?),
        })
    }
}

/// The options every accepted TCP connection gets (see [`AsyncListener::accept`]).
pub(crate) fn configure(accepted: Accepted, keepalive: Option<Duration>) -> Accepted {
    if let Accepted::Tcp { stream, .. } = &accepted {
        let _ = stream.set_nodelay(true);
        if let Some(idle) = keepalive {
            let probes = socket2::TcpKeepalive::new().with_time(idle);
            let _ = socket2::SockRef::from(stream).set_tcp_keepalive(&probes);
        }
    }
    accepted
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
