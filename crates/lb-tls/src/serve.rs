//! The running terminator: one accept loop per frontend socket, a global connection limit
//! taken *before* `accept()` (at the limit, connections wait in the kernel's backlog), and the
//! drain: stop accepting, let every connection finish, or end them all on a hard stop.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lb_supervisor::{Accepted, AsyncListener, ListenAddr, Listener, Listeners, Shutdown};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio_util::task::TaskTracker;

use crate::config::Config;
use crate::conn::{self, Client};
use crate::hops::Hops;
use crate::ratelog::RateLimited;
use crate::runtime::Handler;
use crate::stats::{Process, Stats};
use crate::Error;

/// What every connection of a serving process shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) config: Arc<Config>,
    pub(crate) handshake_log: RateLimited,
    pub(crate) backend_log: RateLimited,
    pub(crate) stats: Arc<Stats>,
    conns: AtomicUsize,
    pub(crate) limit: Arc<Semaphore>,
    /// The multiplexed hop connections (`backend.multiplex`).
    pub(crate) hops: Option<Hops>,
}

/// A started terminator.
#[derive(Debug)]
pub struct Server {
    shared: Arc<Shared>,
    done: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Client connections open now (handshaking or forwarding).
    pub fn connections(&self) -> usize {
        self.shared.conns.load(Ordering::Relaxed)
    }

    /// A counter of open client connections that outlives `self`.
    pub fn connections_counter(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let shared = self.shared.clone();
        move || shared.conns.load(Ordering::Relaxed) as u64
    }

    /// The runtime commands' handler over this server's counters.
    pub(crate) fn runtime(&self) -> Arc<Handler> {
        Arc::new(Handler::new(self.shared.stats.clone(), process(&self.shared.config), self.shared.config.clone()))
    }

    /// Resolves once the shutdown has been carried out.
    pub async fn wait(self) {
        let _ = self.done.await;
    }
}

/// Held for the life of one client connection.
#[derive(Debug)]
pub(crate) struct Admission {
    shared: Arc<Shared>,
    frontend: usize,
    _permit: OwnedSemaphorePermit,
}

impl Admission {
    /// A connection of `frontend` admitted with `permit`: counted open until dropped.
    pub(crate) fn new(shared: Arc<Shared>, frontend: usize, permit: OwnedSemaphorePermit) -> Admission {
        shared.conns.fetch_add(1, Ordering::Relaxed);
        shared.stats.frontend(frontend).opened();
        Admission { shared, frontend, _permit: permit }
    }
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.shared.conns.fetch_sub(1, Ordering::Relaxed);
        self.shared.stats.frontend(self.frontend).closed();
    }
}

/// What `show info` and /metrics say of this process.
fn process(config: &Config) -> Process {
    Process {
        version: format!("{} ({})", env!("CARGO_PKG_VERSION"), crate::tls_library()),
        library: crate::tls_library().to_owned(),
        threads: config
            .global
            .supervision
            .worker_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, usize::from)),
        max_connections: config.global.max_connections,
    }
}

/// Serve `config` on `listeners` until `shutdown` says to stop.
pub async fn run(listeners: Listeners, shutdown: Shutdown, config: Arc<Config>) -> Result<(), Error> {
    start(listeners, shutdown, config).await?.wait().await;
    Ok(())
}

/// Start serving; returns once every frontend socket accepts. Every frontend must find its
/// socket in `listeners`.
pub async fn start(mut listeners: Listeners, shutdown: Shutdown, config: Arc<Config>) -> Result<Server, Error> {
    let mut sockets = Vec::new();
    let mut endpoints = Vec::new();
    for (index, fe) in config.frontends.iter().enumerate() {
        let listener = listeners.take(&fe.bind).ok_or_else(|| Error::MissingListener { address: fe.bind.clone() })?;
        let listener_error = |source| Error::Listener { address: fe.bind.clone(), source };
        let listener = match (listener, &fe.quic) {
            (Listener::Udp(socket), Some(quic)) => {
                endpoints.push((index, crate::quic::endpoint(socket, quic).map_err(listener_error)?));
                continue;
            }
            (listener, _) => listener,
        };
        if let (Some(backlog), Listener::Tcp(l)) = (config.global.backlog, &listener) {
            // listen() again on a listening socket only changes its backlog.
            socket2::SockRef::from(l).listen(backlog).map_err(listener_error)?;
        }
        sockets.push((index, AsyncListener::for_clients(listener, &fe.bind).map_err(listener_error)?));
    }
    let metrics = match config.global.metrics_address {
        Some(address) => {
            let address = ListenAddr::Tcp(address);
            let listener =
                listeners.take(&address).ok_or_else(|| Error::MissingListener { address: address.clone() })?;
            Some(AsyncListener::from_std(listener).map_err(|source| Error::Listener { address, source })?)
        }
        None => None,
    };
    drop(listeners);
    let stats = Arc::new(Stats::new(config.frontends.iter().map(|f| f.bind.to_string()).collect()));
    let shared = Arc::new(Shared {
        handshake_log: RateLimited::new(config.global.log_rate),
        backend_log: RateLimited::new(config.global.log_rate),
        stats: stats.clone(),
        conns: AtomicUsize::new(0),
        limit: Arc::new(Semaphore::new(config.global.max_connections)),
        hops: config.backend.multiplex.then(|| {
            Hops::new(config.backend.address.clone(), config.global.backend_connect_timeout, process(&config).threads)
        }),
        config,
    });
    let tracker = TaskTracker::new();
    let mut loops: Vec<_> = sockets
        .into_iter()
        .map(|(index, listener)| {
            tokio::spawn(accept_loop(shared.clone(), index, listener, shutdown.clone(), tracker.clone()))
        })
        .collect();
    loops.extend(endpoints.into_iter().map(|(index, endpoint)| {
        tokio::spawn(crate::quic::accept_loop(shared.clone(), index, endpoint, shutdown.clone(), tracker.clone()))
    }));
    if let Some(listener) = metrics {
        let process = process(&shared.config);
        loops.push(tokio::spawn(crate::metrics::serve(listener, stats, process, shutdown.clone(), tracker.clone())));
    }
    let done = lb_supervisor::finish_when_drained(loops, tracker, shutdown);
    Ok(Server { shared, done })
}

async fn accept_loop(
    shared: Arc<Shared>,
    frontend: usize,
    listener: AsyncListener,
    mut shutdown: Shutdown,
    tracker: TaskTracker,
) {
    let keepalive = shared.config.global.tcp_keepalive;
    loop {
        let permit = tokio::select! {
            biased;
            _ = shutdown.draining() => break,
            p = shared.limit.clone().acquire_owned() => match p { Ok(p) => p, Err(_) => break },
        };
        let accepted = tokio::select! {
            biased;
            _ = shutdown.draining() => break,
            r = accept(&listener, keepalive) => r,
        };
        match accepted {
            Ok(client) => {
                let admission = Admission::new(shared.clone(), frontend, permit);
                tracker.spawn(conn::handle(admission, shared.clone(), frontend, client, shutdown.clone()));
            }
            Err(e) => {
                drop(permit);
                let bind = &shared.config.frontends[frontend].bind;
                tracing::warn!(frontend = %bind, "accept failed: {e}");
                lb_supervisor::back_off_after(&e).await;
            }
        }
    }
}

async fn accept(listener: &AsyncListener, keepalive: Option<Duration>) -> std::io::Result<Client> {
    Ok(match listener.accept(keepalive).await? {
        Accepted::Tcp { stream, peer } => {
            // The PROXY header's destination.
            let local = stream.local_addr().ok();
            Client::Tcp { stream, peer, local }
        }
        Accepted::Unix(stream) => Client::Unix(stream),
    })
}
