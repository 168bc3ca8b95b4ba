//! Server connections in HTTP mode.
//!
//! By default (`http_reuse: never`) a client connection keeps its own server connection, pinned
//! for as long as both live and the server still takes its traffic: API servers may cache facts
//! per connection (such as the forwarded address), so two clients never share one. With
//! `http_reuse: safe`, idle server connections go to a pool shared by all client connections.

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tokio::time::Sleep;

use super::body::RequestBody;
use crate::backend::{BackendState, ServerLease, ServerState, SessionGuard};
use crate::connect::{connect, ConnectFailure};
use crate::pool::{Idle, Pool};

pub(crate) type Sender = SendRequest<RequestBody>;

/// How long a new connection's response timer is set for before its first request sets it.
const UNSET: Duration = Duration::from_secs(86_400);

/// The request side of a server connection, and the timer that bounds the wait for each of its
/// response heads. One timer per connection, moved later for each request: a timer made per
/// request is an insert into and a removal from tokio's timer wheel, while moving an armed timer
/// later is one atomic exchange (the wheel finds the new deadline when the old one comes). An
/// idle connection's timer still fires once, a server timeout after its last request, and wakes
/// the client connection's task for nothing: one spurious poll, then it is not armed again.
#[derive(Debug)]
pub(crate) struct ServerConn {
    pub(crate) sender: Sender,
    pub(crate) response_timer: Pin<Box<Sleep>>,
    /// The server's address generation it was made to: after `set server … addr`, it is not
    /// reused.
    pub(crate) addr_generation: u64,
}

/// A server connection ready for a request.
#[derive(Debug)]
pub(crate) struct Upstream {
    pub(crate) conn: ServerConn,
    pub(crate) server: Arc<ServerState>,
    pub(crate) backend: Arc<BackendState>,
    /// Counts this connection on its server while in use (and, when pinned, while idle).
    pub(crate) _lease: ServerLease,
    /// An existing connection: a failure before the request was taken may be retried on a new one.
    pub(crate) reused: bool,
    /// Connect time of a new connection, in ms (the log's Tc); 0 for a reused one.
    pub(crate) connect_ms: i64,
    /// Time waited in the backend's queue for a server slot, in ms (the log's Tw).
    pub(crate) queue_ms: i64,
}

impl Idle for ServerConn {
    fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }
    fn addr_generation(&self) -> u64 {
        self.addr_generation
    }
}

/// A server connection for a request to `backend`: the pinned one when it still may be used,
/// else (for `safe`) an idle pooled one of the chosen server, else a new connection.
pub(crate) async fn acquire(
    backend: &Arc<BackendState>,
    pinned: Option<Upstream>,
    pool: &Pool,
    retries: &mut u32,
) -> Result<Upstream, ConnectFailure> {
    if let Some(up) = pinned {
        if Arc::ptr_eq(&up.backend, backend)
            && up.server.accepts_existing()
            && !up.conn.sender.is_closed()
            && up.conn.addr_generation == up.server.addr_generation()
        {
            return Ok(Upstream { reused: true, connect_ms: 0, queue_ms: 0, ..up });
        }
    }
    if backend.config().http_reuse == lb_config::HttpReuse::Safe {
        if let Some(lease) = backend.pick(&[]) {
            let server = lease.server().clone();
            // Older than the server timeout, a pooled connection is likely closed by the server.
            let (max_idle, generation) = (backend.config().timeouts.server, server.addr_generation());
            if let Some(conn) = pool.take::<ServerConn>(backend.name(), server.index(), max_idle, generation) {
                return Ok(Upstream {
                    conn,
                    server,
                    backend: backend.clone(),
                    _lease: lease,
                    reused: true,
                    connect_ms: 0,
                    queue_ms: 0,
                });
            }
        }
    }
    fresh(backend, retries).await
}

/// A new connection, with the backend's retries and redispatch.
pub(crate) async fn fresh(backend: &Arc<BackendState>, retries: &mut u32) -> Result<Upstream, ConnectFailure> {
    let connected = connect(backend, retries).await?;
    let server = connected.lease.server().clone();
    let addr_generation = connected.addr_generation;
    match handshake(connected.stream, server.clone(), backend.head_buffer()).await {
        Ok(sender) => Ok(Upstream {
            conn: ServerConn { sender, response_timer: Box::pin(tokio::time::sleep(UNSET)), addr_generation },
            server,
            backend: backend.clone(),
            _lease: connected.lease,
            reused: false,
            connect_ms: connected.connect_time.as_millis() as i64,
            queue_ms: connected.queue_time.as_millis() as i64,
        }),
        Err(e) => Err(ConnectFailure::Failed { server, timed_out: false, error: std::io::Error::other(e) }),
    }
}

async fn handshake(stream: TcpStream, server: Arc<ServerState>, buffer: usize) -> Result<Sender, hyper::Error> {
    // No writev: a request without a body is one buffer, sent with one send() instead of a
    // writev() of one iovec (the vectored path costs more in the kernel); a body is copied
    // into hyper's buffer (requests through a load balancer are mostly small). `buffer` bounds
    // the response head and what one streaming exchange holds in each direction.
    let (sender, conn) =
        http1::Builder::new().writev(false).max_buf_size(buffer).handshake(TokioIo::new(stream)).await?;
    // Ends when either side closes, or when the server's sessions are shut down (the task is
    // aborted, dropping the connection); errors are seen by the request that hit them.
    let id = server.sessions.id();
    let tracked = server.clone();
    // With upgrades: after a 101 the socket goes to the tunnel (see `tunnel`).
    let mut conn = conn.with_upgrades();
    // Boxed: tokio copies a task's future while spawning and finishing it, and a pointer is
    // cheaper to copy than hyper's connection state.
    let task = tokio::spawn(Box::pin(async move {
        let _registered = SessionGuard { sessions: &tracked.sessions, id };
        // Polled where it lies (it is Unpin): moved into the await, hyper's connection would
        // take its room twice in this future, for the life of the connection.
        let _ = (&mut conn).await;
    }));
    server.sessions.track(id, task.abort_handle());
    Ok(sender)
}
