//! Plain TCP peers: an echo server for TCP mode, and a listener nobody can connect to.

use std::fmt;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream as StdStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use socket2::{Domain, Socket, Type};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;

use crate::server::{bind, runtime};

/// What [`TcpEchoServer`] writes after the client's end of stream, before closing: proof that
/// the server → client direction still works after the client half-closed.
pub const ECHO_TRAILER: &[u8] = b"<eof>";

/// A TCP server that echoes every byte back; when the client shuts down its writing side, it
/// writes [`ECHO_TRAILER`] and then closes.
pub struct TcpEchoServer {
    addr: SocketAddr,
    connections: Arc<AtomicU64>,
    stop: watch::Sender<bool>,
}

impl fmt::Debug for TcpEchoServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpEchoServer").field("addr", &self.addr).finish()
    }
}

impl TcpEchoServer {
    pub fn start() -> TcpEchoServer {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("binding an echo server");
        let addr = listener.local_addr().expect("a bound listener's address");
        let connections = Arc::new(AtomicU64::new(0));
        let (stop, mut stop_rx) = watch::channel(false);
        let counter = connections.clone();
        runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("registering an echo listener");
            loop {
                tokio::select! {
                    _ = stop_rx.wait_for(|s| *s) => return,
                    accepted = listener.accept() => {
                        let Ok((mut stream, _)) = accepted else { continue };
                        counter.fetch_add(1, Ordering::SeqCst);
                        tokio::spawn(async move {
                            let mut buf = vec![0u8; 64 * 1024];
                            loop {
                                match stream.read(&mut buf).await {
                                    Ok(0) => {
                                        let _ = stream.write_all(ECHO_TRAILER).await;
                                        let _ = stream.shutdown().await;
                                        return;
                                    }
                                    Ok(n) => {
                                        if stream.write_all(&buf[..n]).await.is_err() {
                                            return;
                                        }
                                    }
                                    Err(_) => return,
                                }
                            }
                        });
                    }
                }
            }
        });
        TcpEchoServer { addr, connections, stop }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TcpEchoServer {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// A listening socket whose accept queue is full and that never accepts: a connect to it gets
/// no answer (the kernel drops the SYN), which is how a connect timeout is provoked without
/// leaving loopback.
pub struct Blackhole {
    addr: SocketAddr,
    _listener: StdListener,
    _fillers: Vec<StdStream>,
}

impl fmt::Debug for Blackhole {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blackhole").field("addr", &self.addr).finish()
    }
}

impl Blackhole {
    /// Binds with a backlog of 0 and fills the accept queue; panics if connects still succeed.
    pub fn start() -> Blackhole {
        let socket = Socket::new(Domain::IPV4, Type::STREAM, None).expect("a socket");
        socket.bind(&SocketAddr::from(([127, 0, 0, 1], 0)).into()).expect("binding a blackhole");
        socket.listen(0).expect("listening with backlog 0");
        let listener: StdListener = socket.into();
        let addr = listener.local_addr().expect("a bound listener's address");
        let mut fillers = Vec::new();
        for _ in 0..16 {
            match StdStream::connect_timeout(&addr, Duration::from_millis(300)) {
                Ok(stream) => fillers.push(stream),
                Err(_) => return Blackhole { addr, _listener: listener, _fillers: fillers },
            }
        }
        panic!("the blackhole at {addr} still accepts connections after 16 queued ones");
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}
