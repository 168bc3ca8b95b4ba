//! TCP mode: connect to a server (same balancing, retries and checks as HTTP) and copy both ways.
//!
//! Half-close is kept: when one side finishes sending, the other side's write half is shut down
//! and the opposite direction goes on until it finishes too. The connection ends when both
//! directions are done, after `timeouts.client`/`timeouts.server` of silence in both directions
//! (the larger one: either side may legitimately wait for the other), or on a hard stop.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::backend::{ServerState, SessionGuard};
use crate::connect::{connect, ConnectFailure};
use crate::counters::Transfer;
use crate::facts::ConnFacts;
use crate::listener::ClientStream;
use crate::log::TcpLog;
use crate::state::{FrontendState, Proxy};
use lb_supervisor::Shutdown;

pub(crate) async fn serve(
    proxy: &Arc<Proxy>,
    fe: &Arc<FrontendState>,
    client: ClientStream,
    facts: ConnFacts,
    mut shutdown: Shutdown,
) {
    let accept_date = facts.accepted_at;
    let started = facts.accepted;
    let Some(backend) = fe.default_backend() else { return };
    let mut retries = 0;
    let mut log = Pending {
        proxy,
        fe,
        facts: &facts,
        accept_date,
        backend: backend.name(),
        server: None,
        tw: -1,
        tc: -1,
        bytes: Transfer::default(),
        termination: *b"--",
        retries: 0,
        beconn: 0,
        srv_conn: 0,
        backend_queue: 0,
    };
    let connected = match connect(backend, &mut retries).await {
        Ok(c) => c,
        Err(failure) => {
            log.retries = retries;
            log.termination = match failure {
                ConnectFailure::NoServer => *b"SC",
                ConnectFailure::QueueTimeout => *b"sQ",
                ConnectFailure::Failed { server, timed_out, .. } => {
                    log.server = Some(server);
                    if timed_out {
                        *b"sC"
                    } else {
                        *b"SC"
                    }
                }
            };
            log.write(started);
            return;
        }
    };
    log.server = Some(connected.lease.server().clone());
    log.tc = connected.connect_time.as_millis() as i64;
    log.tw = connected.queue_time.as_millis() as i64;
    log.retries = retries;
    log.beconn = backend.current_conns();
    log.srv_conn = connected.lease.server().current_conns();
    log.backend_queue = backend.queued();

    let idle_limit = fe.config.timeouts.client.max(backend.config().timeouts.server);
    let activity = Arc::new(Activity::new());
    let mut client = Tracked { io: client, activity: activity.clone() };
    let mut server = Tracked { io: connected.stream, activity: activity.clone() };
    let killer = connected.lease.server().clone();
    let session = killer.sessions.id();
    let _registered = SessionGuard { sessions: &killer.sessions, id: session };
    let mut killed = killer.sessions.signal(session);
    let copy = tokio::io::copy_bidirectional(&mut client, &mut server);
    tokio::pin!(copy);
    let outcome = loop {
        let quiet_until = activity.last() + idle_limit;
        tokio::select! {
            r = &mut copy => break r.map(|(_, to_client)| to_client),
            _ = tokio::time::sleep_until(quiet_until.into()) => {
                if activity.last() + idle_limit <= Instant::now() {
                    break Err(io::Error::new(io::ErrorKind::TimedOut, "idle"));
                }
            }
            _ = shutdown.stopped() => break Err(io::Error::new(io::ErrorKind::Interrupted, "stopped")),
            _ = &mut killed => break Err(io::Error::new(io::ErrorKind::Interrupted, "shutdown sessions")),
        }
    };
    log.bytes = Transfer {
        from_client: activity.to_server.load(Ordering::Relaxed),
        to_client: activity.to_client.load(Ordering::Relaxed),
    };
    log.termination = match &outcome {
        Ok(_) => *b"--",
        Err(e) if e.kind() == io::ErrorKind::TimedOut => *b"cD",
        Err(e) if e.kind() == io::ErrorKind::Interrupted => *b"KD",
        Err(_) => *b"SD",
    };
    drop(connected.lease);
    log.write(started);
}

/// What the tcplog line needs, filled in as the connection goes.
struct Pending<'a> {
    proxy: &'a Proxy,
    fe: &'a FrontendState,
    facts: &'a ConnFacts,
    accept_date: SystemTime,
    backend: &'a str,
    server: Option<Arc<ServerState>>,
    tw: i64,
    tc: i64,
    bytes: Transfer,
    termination: [u8; 2],
    retries: u32,
    beconn: usize,
    srv_conn: usize,
    backend_queue: usize,
}

impl Pending<'_> {
    fn write(&self, started: Instant) {
        self.fe.counters.ended(self.bytes, self.termination);
        if let Some(backend) = self.fe.default_backend() {
            backend.counters.ended(self.bytes, self.termination);
        }
        if let Some(server) = &self.server {
            server.counters.ended(self.bytes, self.termination);
        }
        self.proxy.logger.tcp(&TcpLog {
            facts: self.facts,
            accept_date: self.accept_date,
            frontend: self.fe.name(),
            backend: self.backend,
            server: self.server.as_deref().map_or("<NOSRV>", |s| s.name()),
            tw: self.tw,
            tc: self.tc,
            tt: started.elapsed().as_millis() as i64,
            bytes_read: self.bytes.to_client,
            termination: self.termination,
            actconn: self.proxy.actconn(),
            feconn: self.fe.feconn(),
            beconn: self.beconn,
            srv_conn: self.srv_conn,
            retries: self.retries,
            srv_queue: 0,
            backend_queue: self.backend_queue,
        });
    }
}

/// When bytes last moved in either direction, and how many went each way.
#[derive(Debug)]
struct Activity {
    since: Instant,
    last_ms: AtomicU64,
    to_client: AtomicU64,
    /// The client's bytes, counted as they are written to the server.
    to_server: AtomicU64,
}

impl Activity {
    fn new() -> Self {
        Activity {
            since: Instant::now(),
            last_ms: AtomicU64::new(0),
            to_client: AtomicU64::new(0),
            to_server: AtomicU64::new(0),
        }
    }

    fn touch(&self) {
        let ms = self.since.elapsed().as_millis() as u64;
        self.last_ms.fetch_max(ms, Ordering::Relaxed);
    }

    fn last(&self) -> Instant {
        self.since + std::time::Duration::from_millis(self.last_ms.load(Ordering::Relaxed))
    }
}

/// A stream that records activity; writes to the client side count its bytes.
struct Tracked<S> {
    io: S,
    activity: Arc<Activity>,
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.io).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked<ClientStream> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.activity.to_client.fetch_add(n as u64, Ordering::Relaxed);
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl AsyncWrite for Tracked<tokio::net::TcpStream> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = r {
            self.activity.to_server.fetch_add(n as u64, Ordering::Relaxed);
            self.activity.touch();
        }
        r
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}
