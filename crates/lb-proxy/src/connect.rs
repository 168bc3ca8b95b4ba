//! Connecting to a server of a backend: pick, connect within `timeouts.connect`, and on failure
//! retry up to `retries` times, on another server when `redispatch` is set (HAProxy's
//! `option redispatch`), else on the same one. Shared by HTTP and TCP mode.

use std::io;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;

use crate::backend::{BackendState, PickFailure, ServerLease, ServerState};

/// A connected server socket and the lease that counts it.
#[derive(Debug)]
pub(crate) struct Connected {
    pub(crate) stream: TcpStream,
    pub(crate) lease: ServerLease,
    /// Time spent connecting on the successful attempt (the log's Tc).
    pub(crate) connect_time: Duration,
    /// Time spent waiting in the backend's queue for a server slot (the log's Tw).
    pub(crate) queue_time: Duration,
    /// The server's address generation connected to (see `ServerState::addr_generation`).
    pub(crate) addr_generation: u64,
}

/// Why no connection could be made.
#[derive(Debug)]
pub(crate) enum ConnectFailure {
    /// No server is usable (all down, in maintenance, draining): 503 with `<NOSRV>`.
    NoServer,
    /// Every usable server stayed at its max_connections for `timeouts.connect`: 503.
    QueueTimeout,
    /// Every attempt failed; the last one's server and cause.
    Failed { server: Arc<ServerState>, timed_out: bool, error: io::Error },
}

/// Connect to a server of `backend`, counting retries into `retries`.
pub(crate) async fn connect(backend: &Arc<BackendState>, retries: &mut u32) -> Result<Connected, ConnectFailure> {
    let config = backend.config();
    let mut avoid: Vec<usize> = Vec::new();
    let queued = Instant::now();
    // HAProxy's `timeout queue` defaults to `timeout connect`; we do the same.
    let mut lease = backend.pick_queued(&avoid, config.timeouts.connect).await.map_err(|f| match f {
        PickFailure::NoServer => ConnectFailure::NoServer,
        PickFailure::QueueTimeout => ConnectFailure::QueueTimeout,
    })?;
    let queue_time = queued.elapsed();
    loop {
        let server = lease.server().clone();
        let started = Instant::now();
        let (addr, addr_generation) = server.addr_and_generation();
        let result = match tokio::time::timeout(config.timeouts.connect, TcpStream::connect(addr)).await {
            Ok(Ok(stream)) => Ok(stream),
            Ok(Err(e)) => Err((false, e)),
            Err(_) => Err((true, io::Error::new(io::ErrorKind::TimedOut, "connect timeout"))),
        };
        match result {
            Ok(stream) => {
                server.observe_connect(true);
                let _ = stream.set_nodelay(true);
                return Ok(Connected { stream, lease, connect_time: started.elapsed(), queue_time, addr_generation });
            }
            Err((timed_out, error)) => {
                server.observe_connect(false);
                server.counters.connect_errors.fetch_add(1, Ordering::Relaxed);
                backend.counters.connect_errors.fetch_add(1, Ordering::Relaxed);
                tracing::debug!(backend = backend.name(), server = server.name(), "connect failed: {error}");
                if *retries >= config.retries {
                    return Err(ConnectFailure::Failed { server, timed_out, error });
                }
                *retries += 1;
                server.counters.retries.fetch_add(1, Ordering::Relaxed);
                backend.counters.retries.fetch_add(1, Ordering::Relaxed);
                if config.redispatch {
                    server.counters.redispatches.fetch_add(1, Ordering::Relaxed);
                    backend.counters.redispatches.fetch_add(1, Ordering::Relaxed);
                    avoid.push(server.index());
                    drop(lease);
                    lease = match backend.pick(&avoid) {
                        Some(next) => next,
                        None => return Err(ConnectFailure::Failed { server, timed_out, error }),
                    };
                }
            }
        }
    }
}
