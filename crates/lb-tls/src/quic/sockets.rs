//! The UDP sockets under one QUIC endpoint: the frontend's socket, which the master bound and
//! every worker shares, and one connected socket per QUIC connection this worker accepted.
//!
//! Why: across a reload the draining worker and the new one both hold the shared socket, and
//! the kernel hands each datagram to whichever reads first, so a connection's datagrams would
//! be split between a worker that knows it and one that does not. A socket bound to the same
//! address and `connect()`ed to the client is preferred by the kernel for that client's
//! datagrams (the more specific match), so a connection's datagrams reach the worker that owns
//! it; and a draining worker stops reading the shared socket, so new connections reach the new
//! worker only. A client that changes address (migration, NAT rebinding) comes back through
//! the shared socket.
//!
//! Binding a connected socket takes the right to bind the port: a worker that lacks it (port
//! 443 without `CAP_NET_BIND_SERVICE` or `net.ipv4.ip_unprivileged_port_start` ≤ 443) serves its
//! connections on the shared socket alone, as quinn does by itself.

use std::collections::HashMap;
use std::io::{self, IoSliceMut};
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{ready, Context, Poll};

use bytes::{Bytes, BytesMut};
use quinn::udp::{RecvMeta, Transmit, UdpSocketState};
use quinn::{AsyncUdpSocket, UdpPoller};
use socket2::{Domain, Protocol, Socket, Type};
use tokio::io::Interest;
use tokio::sync::mpsc;

/// Datagrams read on connected sockets, waiting for the endpoint.
const INBOX: usize = 1024;
/// The largest datagram a client sends us: the endpoint's `max_udp_payload_size`.
pub(crate) const MAX_DATAGRAM: usize = 1472;
/// Datagrams read into one block before a new one is taken.
const DATAGRAMS_PER_BLOCK: usize = 8;

type Datagram = (SocketAddr, Bytes);

#[derive(Debug)]
pub(crate) struct Sockets {
    shared: tokio::net::UdpSocket,
    state: UdpSocketState,
    local: SocketAddr,
    /// Off once the worker drains: new connections are the next worker's.
    listening: AtomicBool,
    owned: Mutex<HashMap<SocketAddr, Arc<tokio::net::UdpSocket>>>,
    inbox_tx: mpsc::Sender<Datagram>,
    inbox: Mutex<mpsc::Receiver<Datagram>>,
}

/// One connection's connected socket, closed when dropped.
#[derive(Debug)]
pub(crate) struct Owned {
    sockets: Arc<Sockets>,
    peer: SocketAddr,
    socket: Arc<tokio::net::UdpSocket>,
    reader: tokio::task::AbortHandle,
}

impl Drop for Owned {
    fn drop(&mut self) {
        self.reader.abort();
        // Only if the entry is still ours: a client port reused while this connection lingered
        // has a newer connection's socket there.
        let mut owned = lock(&self.sockets.owned);
        if owned.get(&self.peer).is_some_and(|s| Arc::ptr_eq(s, &self.socket)) {
            owned.remove(&self.peer);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

impl Sockets {
    pub(crate) fn new(socket: std::net::UdpSocket) -> io::Result<Sockets> {
        socket.set_nonblocking(true)?;
        let state = UdpSocketState::new((&socket).into())?;
        let local = socket.local_addr()?;
        let (inbox_tx, inbox) = mpsc::channel(INBOX);
        Ok(Sockets {
            shared: tokio::net::UdpSocket::from_std(socket)?,
            state,
            local,
            listening: AtomicBool::new(true),
            owned: Mutex::default(),
            inbox_tx,
            inbox: Mutex::new(inbox),
        })
    }

    /// Stop reading the shared socket (the drain): only owned connections' datagrams come in.
    pub(crate) fn stop_listening(&self) {
        self.listening.store(false, Ordering::Relaxed);
    }

    /// A socket connected to `peer`, bound to the address it reached (`local_ip`, when the
    /// frontend binds a wildcard), whose datagrams go to the endpoint until the guard drops.
    pub(crate) fn adopt(self: &Arc<Self>, peer: SocketAddr, local_ip: Option<IpAddr>) -> io::Result<Owned> {
        let ip = local_ip.filter(|_| self.local.ip().is_unspecified()).unwrap_or(self.local.ip());
        let socket = Socket::new(Domain::for_address(self.local), Type::DGRAM, Some(Protocol::UDP))?;
        socket.set_reuse_address(true)?;
        if self.local.is_ipv6() {
            socket.set_only_v6(true)?;
        }
        socket.bind(&SocketAddr::new(ip, self.local.port()).into())?;
        socket.connect(&peer.into())?;
        socket.set_nonblocking(true)?;
        Ok(self.attach(tokio::net::UdpSocket::from_std(socket.into())?, peer))
    }

    /// Takes `socket`, connected to `peer`, as that connection's own: its datagrams go to the
    /// endpoint until the guard drops.
    fn attach(self: &Arc<Self>, socket: tokio::net::UdpSocket, peer: SocketAddr) -> Owned {
        let socket = Arc::new(socket);
        lock(&self.owned).insert(peer, socket.clone());
        let inbox = self.inbox_tx.clone();
        let own = socket.clone();
        let reader = tokio::spawn(async move {
            // Datagrams are read straight into shared blocks, handed on without another copy
            // until quinn's own buffer. A block is taken once the socket is readable and let
            // go once it has nothing more: an idle connection holds none.
            loop {
                if socket.readable().await.is_err() {
                    return;
                }
                let mut block = BytesMut::new();
                loop {
                    // A block holds several datagrams (one allocation for them, then each split
                    // off); a new one only when the rest cannot hold a whole datagram.
                    if block.capacity() < MAX_DATAGRAM {
                        block = BytesMut::with_capacity(DATAGRAMS_PER_BLOCK * MAX_DATAGRAM);
                    }
                    // Each with its real source, not `peer`: between bind() and connect() the
                    // socket is as unconnected as the shared one, and the kernel may queue there
                    // any client's datagram (another client's Initial, say), still read after
                    // connect(). Told it came from `peer`, quinn would answer that client's
                    // handshake at the wrong address and drop its packets from the right one
                    // until it times out. Errors other than "nothing more" are the ICMP ones a
                    // connected socket reports (port unreachable): the connection's own timers
                    // deal with a client gone.
                    match socket.try_recv_buf_from(&mut block) {
                        Ok((_, from)) => {
                            if inbox.send((from, block.split().freeze())).await.is_err() {
                                return;
                            }
                        }
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                        Err(_) => {}
                    }
                }
            }
        });
        Owned { sockets: self.clone(), peer, socket: own, reader: reader.abort_handle() }
    }

    fn owned(&self, peer: &SocketAddr) -> Option<Arc<tokio::net::UdpSocket>> {
        lock(&self.owned).get(peer).cloned()
    }
}

impl AsyncUdpSocket for Sockets {
    fn create_io_poller(self: Arc<Self>) -> Pin<Box<dyn UdpPoller>> {
        Box::pin(Writable { sockets: self, waiting: None })
    }

    fn try_send(&self, transmit: &Transmit<'_>) -> io::Result<()> {
        // Through the connection's own socket when it has one: the same address and port
        // either way, but a full send buffer there is its own.
        if let Some(socket) = self.owned(&transmit.destination) {
            if let Ok(()) = socket.try_io(Interest::WRITABLE, || self.state.send((&*socket).into(), transmit)) {
                return Ok(());
            }
        }
        self.shared.try_io(Interest::WRITABLE, || self.state.send((&self.shared).into(), transmit))
    }

    fn poll_recv(
        &self,
        cx: &mut Context<'_>,
        bufs: &mut [IoSliceMut<'_>],
        meta: &mut [RecvMeta],
    ) -> Poll<io::Result<usize>> {
        // As many of the connected sockets' datagrams as quinn has buffers for, in one call.
        let mut inbox = lock(&self.inbox);
        let mut filled = 0;
        for (buf, slot) in bufs.iter_mut().zip(meta.iter_mut()) {
            let next = if filled == 0 { inbox.poll_recv(cx) } else { Poll::Ready(inbox.try_recv().ok()) };
            let Poll::Ready(Some((peer, data))) = next else { break };
            let len = data.len().min(buf.len());
            buf[..len].copy_from_slice(&data[..len]);
            *slot = RecvMeta { addr: peer, len, stride: len, ecn: None, dst_ip: None };
            filled += 1;
        }
        drop(inbox);
        if filled > 0 {
            return Poll::Ready(Ok(filled));
        }
        if !self.listening.load(Ordering::Relaxed) {
            return Poll::Pending;
        }
        loop {
            ready!(self.shared.poll_recv_ready(cx))?;
            if let Ok(n) = self.shared.try_io(Interest::READABLE, || self.state.recv((&self.shared).into(), bufs, meta))
            {
                return Poll::Ready(Ok(n));
            }
        }
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        Ok(self.local)
    }

    fn may_fragment(&self) -> bool {
        self.state.may_fragment()
    }

    fn max_transmit_segments(&self) -> usize {
        self.state.max_gso_segments()
    }

    fn max_receive_segments(&self) -> usize {
        self.state.gro_segments()
    }
}

/// Waits until the shared socket takes datagrams again (connected sockets share its fate
/// closely enough: the same interface and the same kernel send path).
struct Writable {
    sockets: Arc<Sockets>,
    waiting: Option<Pin<Box<dyn std::future::Future<Output = io::Result<()>> + Send + Sync>>>,
}

impl std::fmt::Debug for Writable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writable").finish_non_exhaustive()
    }
}

impl UdpPoller for Writable {
    fn poll_writable(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let sockets = self.sockets.clone();
        let waiting = self.waiting.get_or_insert_with(|| Box::pin(async move { sockets.shared.writable().await }));
        let result = waiting.as_mut().poll(cx);
        if result.is_ready() {
            self.waiting = None;
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::future::poll_fn;
    use std::time::Duration;

    /// Another client's datagram, queued on a connection's socket before its connect(),
    /// reaches the endpoint with that client's address, not the connected peer's.
    #[tokio::test]
    async fn datagram_queued_before_connect_keeps_its_source() -> io::Result<()> {
        let bind = || std::net::UdpSocket::bind("127.0.0.1:0");
        let sockets = Arc::new(Sockets::new(bind()?)?);
        let (own, other, peer) = (bind()?, bind()?, bind()?);
        other.send_to(b"initial", own.local_addr()?)?;
        own.connect(peer.local_addr()?)?;
        own.set_nonblocking(true)?;
        let _owned = sockets.attach(tokio::net::UdpSocket::from_std(own)?, peer.local_addr()?);
        let mut buf = [0u8; MAX_DATAGRAM];
        let mut meta = [RecvMeta::default()];
        let received = poll_fn(|cx| sockets.poll_recv(cx, &mut [IoSliceMut::new(&mut buf)], &mut meta));
        let n = tokio::time::timeout(Duration::from_secs(10), received).await.map_err(io::Error::other)??;
        let from = meta[0].addr;
        assert_eq!((n, from, &buf[..meta[0].len]), (1, other.local_addr()?, &b"initial"[..]));
        Ok(())
    }

    /// A client port reused while the old connection lingers: the old one's end leaves the new
    /// connection's socket in place.
    #[tokio::test]
    async fn an_ended_connection_leaves_a_newer_socket_for_the_same_client() -> io::Result<()> {
        let bind = || std::net::UdpSocket::bind("127.0.0.1:0");
        let sockets = Arc::new(Sockets::new(bind()?)?);
        let peer = bind()?.local_addr()?;
        let attach = |socket: std::net::UdpSocket| -> io::Result<Owned> {
            socket.connect(peer)?;
            socket.set_nonblocking(true)?;
            Ok(sockets.attach(tokio::net::UdpSocket::from_std(socket)?, peer))
        };
        let old = attach(bind()?)?;
        let new = attach(bind()?)?;
        drop(old);
        let kept = lock(&sockets.owned).get(&peer).cloned();
        assert!(kept.is_some_and(|s| Arc::ptr_eq(&s, &new.socket)), "the newer connection's socket is kept");
        drop(new);
        assert!(lock(&sockets.owned).is_empty());
        Ok(())
    }
}
