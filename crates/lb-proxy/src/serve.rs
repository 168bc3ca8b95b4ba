//! The running proxy: accept loops with connection limits, dispatch by mode, and the drain. The
//! state its connections share is `state`'s.
//!
//! Limits are enforced *before* `accept()`: a loop first takes a permit from the global and the
//! frontend limit, and only then accepts. At a limit nothing is accepted, so new connections wait
//! in the kernel's backlog instead of being accepted and reset.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lb_config::{Bind, Config, Mode};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::TaskTracker;

use crate::backend::Backends;
use crate::counters::Counters;
use crate::facts::ConnFacts;
use crate::limit::Limit;
use crate::listener::ClientStream;
use crate::log::Logger;
use crate::policy::Patterns;
use crate::pool::Pool;
use crate::runtime::ProxyRuntime;
use crate::state::{FrontendState, Proxy};
use crate::tables::Tables;
use crate::{health, Error, Listeners};
use lb_proxy_protocol::read_proxy_header_or;
use lb_supervisor::MasterLink;
use lb_supervisor::{Accepted, AsyncListener, Listener};
use lb_supervisor::{Quiet, Shutdown};

mod hop;

/// Held for the life of one client connection: its permits and its place in the counters.
#[derive(Debug)]
struct Admission {
    proxy: Arc<Proxy>,
    frontend: Arc<FrontendState>,
    _permits: Permits,
}

impl Drop for Admission {
    fn drop(&mut self) {
        self.proxy.actconn.fetch_sub(1, Ordering::Relaxed);
        self.frontend.feconn.fetch_sub(1, Ordering::Relaxed);
    }
}

/// A started proxy: accepting on its sockets until its [`Shutdown`] says to stop.
#[derive(Debug)]
pub struct Server {
    proxy: Arc<Proxy>,
    runtime: ProxyRuntime,
    done: tokio::task::JoinHandle<()>,
}

impl Server {
    /// Client connections open now.
    pub fn connections(&self) -> usize {
        self.proxy.actconn()
    }

    /// A counter of open client connections that outlives `self` (for lb-supervisor's status).
    pub fn connections_counter(&self) -> impl Fn() -> u64 + Send + Sync + 'static {
        let proxy = self.proxy.clone();
        move || proxy.actconn() as u64
    }

    /// The runtime commands (`show stat`, `set server …`) and the counters across reloads,
    /// for lb-supervisor.
    pub fn runtime(&self) -> Arc<dyn lb_supervisor::Runtime> {
        Arc::new(crate::runtime::Handler(self.runtime.clone()))
    }

    /// Run one runtime command, as the runtime socket would (for embedding and tests).
    pub fn command(&self, command: &str) -> lb_supervisor::RuntimeResult {
        self.runtime.run(command)
    }

    /// Resolves when the shutdown has been carried out: after a drain, once the last
    /// connection has ended; after a hard stop, at once.
    pub async fn wait(self) {
        let _ = self.done.await;
    }
}

/// Serve `config` on `listeners` until `shutdown` says to stop (see [`start`]).
pub async fn run(listeners: Listeners, shutdown: Shutdown, config: Arc<Config>) -> Result<(), Error> {
    start(listeners, shutdown, config).await?.wait().await;
    Ok(())
}

/// Start serving `config` on `listeners`; returns once every socket accepts.
///
/// Every bind of every frontend must find its socket in `listeners` (by exact address); a
/// missing one is an error before anything is served. Sockets that no frontend uses are closed.
/// Once `shutdown` begins draining, the accept loops end and close their sockets, connections
/// finish what they are doing, and the server is done when the last one has ended (or at once
/// on a hard stop).
pub async fn start(listeners: Listeners, shutdown: Shutdown, config: Arc<Config>) -> Result<Server, Error> {
    start_supervised(listeners, shutdown, config, MasterLink::detached()).await
}

/// [`start`] under lb-supervisor: `master` answers `show proc` (old workers, for `/metrics`),
/// and stats wait for the counters of the previous worker (see [`Server::runtime`]).
pub async fn start_supervised(
    mut listeners: Listeners,
    shutdown: Shutdown,
    config: Arc<Config>,
    master: MasterLink,
) -> Result<Server, Error> {
    let logger = Logger::new(&config.global.log).map_err(|source| Error::Log { source })?;
    let backends = Backends::new(&config);
    let patterns = Arc::new(Patterns::new(&config.policy));
    let tables = Tables::new(&config.tables);
    let mut accepts = Vec::new();
    let mut frontends = Vec::new();
    for fe in &config.frontends {
        let state =
            FrontendState::new(fe, &backends, config.global.max_connections, &config.policy, &patterns, &tables)
                .map_err(Error::Policy)?;
        let state = Arc::new(state);
        frontends.push(state.clone());
        for bind in &fe.binds {
            let listener = listeners
                .take(&bind.address)
                .ok_or_else(|| Error::MissingListener { frontend: fe.name.clone(), address: bind.address.clone() })?;
            let listener = AsyncListener::for_clients(listener, &bind.address)
                .map_err(|source| Error::Listener { address: bind.address.clone(), source })?;
            accepts.push((state.clone(), bind.clone(), listener));
        }
    }
    let stats = match &config.global.stats {
        Some(stats) => {
            let address = lb_config::ListenAddr::Tcp(stats.address);
            let listener = listeners
                .take(&address)
                .ok_or_else(|| Error::MissingListener { frontend: "stats".into(), address: address.clone() })?;
            let tcp = match listener {
                Listener::Tcp(tcp) => tcp.set_nonblocking(true).and_then(|()| tokio::net::TcpListener::from_std(tcp)),
                Listener::Unix(_) | Listener::Udp(_) => Err(std::io::Error::other("not a TCP socket")),
            };
            Some((tcp.map_err(|source| Error::Listener { address, source })?, stats.clone()))
        }
        None => None,
    };
    drop(listeners);

    let proxy = Arc::new(Proxy {
        backends,
        logger,
        pool: Pool::default(),
        close_spread: config.global.close_spread,
        actconn: AtomicUsize::new(0),
        limit: Limit::new(config.global.max_connections),
        hard_max_connections: config.global.max_connections,
        conn_rate_limit: AtomicU64::new(0),
        counters: Counters::default(),
        frontends,
        tables,
        patterns,
        threads: config
            .global
            .supervision
            .worker_threads
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        started: std::time::Instant::now(),
        started_at: std::time::SystemTime::now(),
        runtime_name: config.global.runtime_name.clone(),
        shutdown: shutdown.clone(),
        // Without a master there is no predecessor to wait for.
        counters_ready: tokio::sync::watch::Sender::new(!master.is_attached()),
    });
    health::spawn_health_checks(&proxy.backends, shutdown.clone());
    proxy.tables.spawn_sweeper(shutdown.clone());
    let runtime = ProxyRuntime::new(proxy.clone(), shutdown.clone());

    let tracker = TaskTracker::new();
    let loops: Vec<_> = accepts
        .into_iter()
        .map(|(fe, bind, listener)| {
            tokio::spawn(accept_loop(proxy.clone(), fe, bind, listener, shutdown.clone(), tracker.clone()))
        })
        .collect();
    if let Some((listener, settings)) = stats {
        let serving =
            crate::stats::serve_http(proxy.clone(), master, listener, settings, shutdown.clone(), tracker.clone());
        tokio::spawn(serving);
    }
    let done = lb_supervisor::finish_when_drained(loops, tracker, shutdown);
    Ok(Server { proxy, runtime, done })
}

/// One accepted connection as lb-proxy handles it: the stream and what the socket says.
fn client_of(accepted: Accepted) -> (ClientStream, ConnFacts) {
    match accepted {
        Accepted::Tcp { stream, peer } => (ClientStream::Tcp(stream), ConnFacts::from_socket(Some(peer))),
        Accepted::Unix(stream) => (ClientStream::Unix(stream), ConnFacts::from_socket(None)),
    }
}

/// The permits for one more connection: taken before `accept()`, so that at a limit we do not
/// accept at all.
#[derive(Debug)]
struct Permits {
    _global: OwnedSemaphorePermit,
    _frontend: OwnedSemaphorePermit,
}

async fn permits(proxy: &Proxy, fe: &FrontendState) -> Option<Permits> {
    if fe.is_paused() {
        let _ = fe.paused.subscribe().wait_for(|paused| !paused).await;
    }
    let global = proxy.limit.acquire().await?;
    let frontend = fe.limit.acquire().await?;
    let rate_limit = proxy.conn_rate_limit.load(Ordering::Relaxed);
    if rate_limit > 0 {
        // At the global rate limit: accept again in the next second.
        while proxy.counters.session_rate.this_second(crate::counters::unix_now()) >= rate_limit {
            let into = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
            tokio::time::sleep(Duration::from_nanos(1_000_000_000 - u64::from(into.subsec_nanos()))).await;
        }
    }
    Some(Permits { _global: global, _frontend: frontend })
}

impl Admission {
    /// Count an accepted connection; it is uncounted when the admission drops.
    fn new(proxy: &Arc<Proxy>, fe: &Arc<FrontendState>, permits: Permits) -> Self {
        let actconn = proxy.actconn.fetch_add(1, Ordering::Relaxed) + 1;
        let feconn = fe.feconn.fetch_add(1, Ordering::Relaxed) + 1;
        let now = crate::counters::unix_now();
        proxy.counters.session(now, actconn);
        fe.counters.session(now, feconn);
        Admission { proxy: proxy.clone(), frontend: fe.clone(), _permits: permits }
    }
}

/// Resolves when the frontend is (or becomes) paused.
fn pause_wait(fe: &FrontendState) -> Pin<Box<Quiet<impl Future<Output = ()>>>> {
    let mut paused = fe.paused.subscribe();
    Box::pin(Quiet::new(async move {
        let _ = paused.wait_for(|paused| *paused).await;
    }))
}

async fn accept_loop(
    proxy: Arc<Proxy>,
    fe: Arc<FrontendState>,
    bind: Bind,
    listener: AsyncListener,
    shutdown: Shutdown,
    tracker: TaskTracker,
) {
    // One wait for the drain for the whole loop: made anew for each connection, it registered
    // with and left the shutdown channel twice per connection (900 instructions of 71,000).
    // Polled only once it has been woken (see `Quiet`): both selects below poll it for every
    // connection accepted. The wait for `disable frontend` likewise, made anew only after it
    // has ended.
    let mut drain_watch = shutdown.clone();
    let draining = Quiet::new(drain_watch.draining());
    tokio::pin!(draining);
    let mut pausing = pause_wait(&fe);
    loop {
        let permits = tokio::select! {
            biased;
            () = &mut draining => break,
            p = permits(&proxy, &fe) => match p { Some(p) => p, None => break },
        };
        let accepted = tokio::select! {
            biased;
            () = &mut draining => break,
            // `disable frontend` while waiting for a connection: stop waiting at once.
            () = &mut pausing => {
                pausing = pause_wait(&fe);
                continue;
            }
            r = listener.accept(None) => r.map(client_of),
        };
        match accepted {
            Ok((stream, facts)) => {
                let admission = Admission::new(&proxy, &fe, permits);
                // The task's future is a few words (see `handle`): tokio moves it whole while
                // spawning it and again while finishing it (1,300 instructions per connection
                // went to those copies when it held the accept-time state inline).
                let arrival = Arrival {
                    admission,
                    accept_proxy: bind.accept_proxy,
                    stream,
                    facts,
                    shutdown: shutdown.clone(),
                    tracker: tracker.clone(),
                };
                tracker.spawn(handle(Box::new(arrival)));
            }
            Err(e) => {
                drop(permits);
                // Out of fds or memory: back off instead of spinning; the kernel keeps queueing.
                tracing::warn!(frontend = fe.name(), address = %bind.address, "accept failed: {e}");
                lb_supervisor::back_off_after(&e).await;
            }
        }
    }
    // Dropping the listener closes this process's copy of the socket; never shutdown(): the
    // socket may be shared with the next worker.
}

/// What a connection arrives with, until it is served.
struct Arrival {
    admission: Admission,
    accept_proxy: bool,
    stream: ClientStream,
    facts: ConnFacts,
    shutdown: Shutdown,
    /// For a multiplexed hop, whose streams are served as tasks of their own.
    tracker: TaskTracker,
}

/// A connection past its accept-time steps: what it holds until it ends.
struct Served {
    serving: Serving,
    /// `None` for a multiplexed hop: each of its streams holds its own.
    admission: Option<Admission>,
    /// What `tcp_request` tracks, held until the connection ends.
    tracked: Option<Box<crate::tables::Tracked>>,
}

impl Served {
    async fn run(self) {
        let Served { serving, admission, tracked } = self;
        serving.await;
        drop(admission);
        drop(tracked);
    }
}

/// The future that serves one connection for the rest of its life.
pub(crate) type Serving = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One client connection's task. Its accept-time steps (the PROXY header, `tcp_request`, for
/// HTTP the protocol) run as a boxed future of their own, freed once the connection is served:
/// a future keeps room for every argument and every state of its whole life, so done inline
/// they held about 1.5 KiB per idle connection; the task now holds a few words besides the
/// future that serves the connection.
async fn handle(arrival: Box<Arrival>) {
    // Out of its box, which goes at the end of this block (a box moved out of is freed only
    // where its binding ends, here the end of the connection).
    let arrival = {
        let boxed = arrival;
        *boxed
    };
    let Some(served) = Box::pin(prepare(arrival)).await else { return };
    served.run().await;
}

async fn prepare(arrival: Arrival) -> Option<Served> {
    let Arrival { admission, accept_proxy, mut stream, mut facts, shutdown, tracker } = arrival;
    let fe = admission.frontend.clone();
    if accept_proxy {
        let wait = fe.config.timeouts.http_request.min(fe.config.timeouts.client);
        match tokio::time::timeout(wait, read_proxy_header_or(&mut stream, lb_supervisor::hop::PREFACE)).await {
            Ok(Ok(Some(header))) => facts.take_header(header),
            Ok(Ok(None)) => {
                // lb-tls's multiplexed hop: its streams are the connections, each admitted
                // and counted on its own.
                let proxy = admission.proxy.clone();
                drop(admission);
                let serving: Serving = Box::pin(hop::serve(proxy, fe, stream, facts.client, shutdown, tracker));
                return Some(Served { serving, admission: None, tracked: None });
            }
            Ok(Err(e)) => {
                tracing::warn!(frontend = fe.name(), client = ?facts.client, "closing connection: {e}");
                return None;
            }
            Err(_) => {
                tracing::warn!(frontend = fe.name(), client = ?facts.client, "closing connection: no PROXY header within {wait:?}");
                return None;
            }
        }
    }
    open(admission, stream, facts, shutdown).await
}

/// One client connection (a hop stream, or a connection whose PROXY header was read), served
/// to its end.
async fn serve_connection(admission: Admission, stream: ClientStream, facts: ConnFacts, shutdown: Shutdown) {
    let Some(served) = Box::pin(open(admission, stream, facts, shutdown)).await else { return };
    served.run().await;
}

/// `tcp_request`, then HTTP or TCP: the future that serves the connection, with what it holds.
async fn open(admission: Admission, stream: ClientStream, facts: ConnFacts, shutdown: Shutdown) -> Option<Served> {
    let fe = admission.frontend.clone();
    let proxy = admission.proxy.clone();
    // `tcp_request`: what the connection tracks is held until it ends.
    let Ok(tracked) = fe.policy.on_connection(&facts, fe.name()) else {
        tracing::debug!(frontend = fe.name(), client = ?facts.client, "connection rejected (tcp_request)");
        return None;
    };
    let serving: Serving = match fe.config.mode {
        Mode::Http => crate::http::serve(&proxy, &fe, stream, facts, shutdown).await?,
        Mode::Tcp => Box::pin(async move { crate::tcp::serve(&proxy, &fe, stream, facts, shutdown).await }),
    };
    Some(Served { serving, admission: Some(admission), tracked })
}
