//! Listening sockets, bound once and named by their exact address.
//!
//! They are held as std sockets, not tokio ones, because whoever binds them may not be whoever
//! serves on them: the master of lb-supervisor binds (it may own privileged ports) and passes the
//! fds to each worker. [`run`](crate::run) converts them when it starts serving.

use std::io;
use std::net::SocketAddr;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::pin::Pin;
use std::task::{Context, Poll};

use lb_config::{Config, ListenAddr};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

use crate::Error;

/// How many connections the kernel may queue on a listener while we do not accept (at a
/// connection limit, or while a worker is being replaced). The kernel caps it at somaxconn.
const BACKLOG: i32 = 4096;

/// One bound listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
}

/// Every listening socket a serving process uses, each named by its address.
#[derive(Debug, Default)]
pub struct Listeners {
    sockets: Vec<(ListenAddr, Listener)>,
}

impl Listeners {
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a socket bound (or received) for `address`.
    pub fn insert(&mut self, address: ListenAddr, listener: Listener) {
        self.sockets.retain(|(a, _)| a != &address);
        self.sockets.push((address, listener));
    }

    /// Take the socket for `address`, if there is one.
    pub fn take(&mut self, address: &ListenAddr) -> Option<Listener> {
        let at = self.sockets.iter().position(|(a, _)| a == address)?;
        Some(self.sockets.swap_remove(at).1)
    }

    /// The addresses held, in order.
    pub fn addresses(&self) -> impl Iterator<Item = &ListenAddr> {
        self.sockets.iter().map(|(a, _)| a)
    }

    /// The address a TCP socket really got (a port-0 bind learns its port here).
    pub fn local_addr(&self, address: &ListenAddr) -> Option<SocketAddr> {
        self.sockets.iter().find(|(a, _)| a == address).and_then(|(_, l)| match l {
            Listener::Tcp(t) => t.local_addr().ok(),
            Listener::Unix(_) => None,
        })
    }

    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }
}

impl IntoIterator for Listeners {
    type Item = (ListenAddr, Listener);
    type IntoIter = std::vec::IntoIter<(ListenAddr, Listener)>;

    fn into_iter(self) -> Self::IntoIter {
        self.sockets.into_iter()
    }
}

/// Bind every address the config listens on.
pub fn bind(config: &Config) -> Result<Listeners, Error> {
    let mut listeners = Listeners::new();
    for address in config.listen_addrs() {
        let listener = bind_one(&address).map_err(|source| Error::Bind { address: address.clone(), source })?;
        listeners.insert(address, listener);
    }
    Ok(listeners)
}

/// Bind one address: TCP with `SO_REUSEADDR` (and v6-only for IPv6, so `[::]` and `0.0.0.0` can
/// both be bound), or a Unix socket path (a stale socket file left by a dead process is replaced;
/// a live one is an error).
pub fn bind_one(address: &ListenAddr) -> io::Result<Listener> {
    match address {
        ListenAddr::Tcp(addr) => {
            let socket = Socket::new(Domain::for_address(*addr), Type::STREAM, Some(Protocol::TCP))?;
            socket.set_reuse_address(true)?;
            if addr.is_ipv6() {
                socket.set_only_v6(true)?;
            }
            socket.bind(&(*addr).into())?;
            socket.listen(BACKLOG)?;
            socket.set_nonblocking(true)?;
            Ok(Listener::Tcp(socket.into()))
        }
        ListenAddr::Unix(path) => {
            remove_stale_socket(path)?;
            let listener = std::os::unix::net::UnixListener::bind(path)?;
            listener.set_nonblocking(true)?;
            Ok(Listener::Unix(listener))
        }
    }
}

fn remove_stale_socket(path: &Path) -> io::Result<()> {
    let Ok(meta) = std::fs::symlink_metadata(path) else { return Ok(()) };
    if !meta.file_type().is_socket() {
        return Err(io::Error::new(io::ErrorKind::AlreadyExists, "path exists and is not a socket"));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::new(io::ErrorKind::AddrInUse, "a live process listens on this socket")),
        Err(_) => std::fs::remove_file(path),
    }
}

/// An accepted client connection, TCP or Unix.
#[derive(Debug)]
pub(crate) enum ClientStream {
    Tcp(TcpStream),
    Unix(UnixStream),
}

impl AsyncRead for ClientStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_read(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for ClientStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_write(cx, buf),
            ClientStream::Unix(s) => Pin::new(s).poll_write(cx, buf),
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
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_flush(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            ClientStream::Tcp(s) => Pin::new(s).poll_shutdown(cx),
            ClientStream::Unix(s) => Pin::new(s).poll_shutdown(cx),
        }
    }
}
