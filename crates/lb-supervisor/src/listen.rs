//! Listening sockets, bound once and named by their exact address.
//!
//! They are held as std sockets, not tokio ones, because whoever binds them is not whoever
//! serves on them: the master binds (it may own privileged ports and keeps every socket across
//! reloads) and passes the fds to each worker, which registers them with its runtime.

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

use socket2::{Domain, Protocol, Socket, Type};

use crate::ListenAddr;

/// How many connections the kernel may queue on a listener while we do not accept (at a
/// connection limit, or while a worker is being replaced). The kernel caps it at somaxconn.
const BACKLOG: i32 = 4096;

/// One bound listening socket.
#[derive(Debug)]
pub enum Listener {
    Tcp(std::net::TcpListener),
    Unix(std::os::unix::net::UnixListener),
    /// An unconnected UDP socket (QUIC's frontend); it has no `accept`, its daemon reads it.
    Udp(std::net::UdpSocket),
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
            Listener::Udp(u) => u.local_addr().ok(),
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

/// Bind every address, in order; the first failure is the error.
pub fn bind_all(addresses: &[ListenAddr]) -> Result<Listeners, crate::Error> {
    let mut listeners = Listeners::new();
    for address in addresses {
        let listener = bind_one(address).map_err(|source| crate::Error::Bind { address: address.clone(), source })?;
        listeners.insert(address.clone(), listener);
    }
    Ok(listeners)
}

/// Bind one address: TCP with `SO_REUSEADDR` (and v6-only for IPv6, so `[::]` and `0.0.0.0` can
/// both be bound), a Unix socket path (a stale socket file left by a dead process is replaced;
/// a live one is an error), or UDP, also with `SO_REUSEADDR`: a QUIC worker binds one connected
/// socket per connection to the same address, which the kernel prefers over this one for that
/// client's datagrams, so a connection stays with the worker that owns it across reloads.
pub fn bind_one(address: &ListenAddr) -> io::Result<Listener> {
    match address {
        ListenAddr::Tcp(addr) => {
            let socket = bind_inet(*addr, Type::STREAM, Protocol::TCP)?;
            socket.listen(BACKLOG)?;
            Ok(Listener::Tcp(socket.into()))
        }
        ListenAddr::Udp(addr) => Ok(Listener::Udp(bind_inet(*addr, Type::DGRAM, Protocol::UDP)?.into())),
        ListenAddr::Unix(path) => {
            remove_stale_socket(path)?;
            let listener = std::os::unix::net::UnixListener::bind(path)?;
            listener.set_nonblocking(true)?;
            Ok(Listener::Unix(listener))
        }
    }
}

/// A non-blocking socket bound to `addr` with `SO_REUSEADDR`, v6-only for IPv6.
fn bind_inet(addr: SocketAddr, kind: Type, protocol: Protocol) -> io::Result<Socket> {
    let socket = Socket::new(Domain::for_address(addr), kind, Some(protocol))?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.set_nonblocking(true)?;
    Ok(socket)
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

impl Listener {
    /// The socket as an owned fd, to pass to another process.
    pub fn into_fd(self) -> OwnedFd {
        match self {
            Listener::Tcp(l) => l.into(),
            Listener::Unix(l) => l.into(),
            Listener::Udp(u) => u.into(),
        }
    }

    /// A socket received as a fd for `address`, checked to be a listening socket of the
    /// family the address says (a mix-up here would serve the wrong port).
    pub fn from_fd(address: &ListenAddr, fd: OwnedFd) -> io::Result<Listener> {
        let socket = Socket::from(fd);
        let domain = socket.local_addr()?.domain();
        let listening = is_listening(&socket)?;
        let listener = match address {
            ListenAddr::Tcp(want) if listening && domain == Domain::for_address(*want) => {
                bound_to(&socket, want)?;
                Listener::Tcp(socket.into())
            }
            ListenAddr::Unix(_) if listening && domain == Domain::UNIX => Listener::Unix(socket.into()),
            ListenAddr::Udp(want) if socket.r#type()? == Type::DGRAM && domain == Domain::for_address(*want) => {
                bound_to(&socket, want)?;
                Listener::Udp(socket.into())
            }
            _ => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("not a listening socket for {address}"),
                ))
            }
        };
        Ok(listener)
    }

    /// A new fd for the same socket (both stay open).
    pub fn try_clone(&self) -> io::Result<Listener> {
        Ok(match self {
            Listener::Tcp(l) => Listener::Tcp(l.try_clone()?),
            Listener::Unix(l) => Listener::Unix(l.try_clone()?),
            Listener::Udp(u) => Listener::Udp(u.try_clone()?),
        })
    }
}

impl AsFd for Listener {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Listener::Tcp(l) => l.as_fd(),
            Listener::Unix(l) => l.as_fd(),
            Listener::Udp(u) => u.as_fd(),
        }
    }
}

/// An error unless `socket` is bound to `want` (any port when `want`'s is 0).
fn bound_to(socket: &Socket, want: &SocketAddr) -> io::Result<()> {
    let got = socket.local_addr()?.as_socket();
    if got.is_some_and(|got| got.ip() != want.ip() || (want.port() != 0 && got.port() != want.port())) {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("socket is bound to {got:?}, not {want}")));
    }
    Ok(())
}

/// Whether a socket listens (SO_ACCEPTCONN). Where the option cannot be read portably, the
/// family and address checks above still hold.
#[cfg(any(target_os = "linux", target_os = "android", target_os = "fuchsia"))]
fn is_listening(socket: &Socket) -> io::Result<bool> {
    socket.is_listener()
}

#[cfg(not(any(target_os = "linux", target_os = "android", target_os = "fuchsia")))]
fn is_listening(_socket: &Socket) -> io::Result<bool> {
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_udp_socket_passes_by_fd_and_is_checked() {
        let address = ListenAddr::Udp(SocketAddr::from(([127, 0, 0, 1], 0)));
        let bound = bind_one(&address).expect("bind");
        let Listener::Udp(socket) = bound.try_clone().expect("clone") else { panic!("not UDP") };
        let port = socket.local_addr().expect("local address").port();
        let received = Listener::from_fd(&address, bound.into_fd()).expect("a UDP socket for a UDP address");
        assert!(matches!(received, Listener::Udp(_)));
        // The same port number over TCP is not this socket.
        let tcp = ListenAddr::Tcp(SocketAddr::from(([127, 0, 0, 1], port)));
        assert!(Listener::from_fd(&tcp, received.into_fd()).is_err());
    }
}
