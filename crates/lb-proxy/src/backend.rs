//! Backends and their servers at run time: who is usable, how many connections each holds, and
//! which one takes the next server connection.
//!
//! The typed config says what a backend is; this module keeps what changes while serving: each
//! server's connection count, health (set by `health`), admin state and weight (set by the
//! runtime API), and the slowstart ramp that follows a server coming back. Everything here is
//! shared by every connection task, so it is made of atomics and a few short-held mutexes.
//!
//! The server list of a backend changes at run time (`add server`, `del server`): it is an
//! immutable list behind a lock held only to clone its `Arc`, so a pick never waits on a change
//! and a change never waits on traffic. Each server has an id (`index`) unique in its backend
//! for the life of the process, never reused, and the list is kept in increasing id order.
//!
//! A connection to a server is accounted by a [`ServerLease`], handed out by
//! [`BackendState::pick`] and released on drop, so a count can never leak on an error path.
//! Picking and counting happen together: a server at its `max_connections` is never over-filled
//! by two tasks racing for its last slot.

mod balance;
mod check;
mod server;
mod sessions;
#[cfg(test)]
pub(crate) mod tests;

use std::collections::HashMap;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use lb_config::Balance;

use crate::counters::Counters;
use balance::SmoothRoundRobin;
pub(crate) use check::{CheckResult, CheckStatus};
use server::Downtime;
pub(crate) use server::ServerState;
pub(crate) use sessions::SessionGuard;

/// hyper's buffer on server connections when no frontend says otherwise: lb-config's default
/// `max_header_size`, HAProxy's default `tune.bufsize`.
const DEFAULT_HEAD_BUFFER: usize = lb_config::DEFAULT_MAX_HEADER_SIZE;

/// Every backend of one config, by name. A new config (reload) gets new `Backends`.
#[derive(Debug)]
pub(crate) struct Backends {
    /// In config order.
    list: Vec<Arc<BackendState>>,
    by_name: HashMap<String, usize>,
}

impl Backends {
    pub(crate) fn new(config: &lb_config::Config) -> Backends {
        // One bound for every server's response head, the largest any frontend accepts for a
        // request head (HAProxy's one `tune.bufsize` serves both directions the same way): a
        // pooled server connection may serve any frontend.
        // (lb-config keeps every `max_header_size` at or above hyper's 8 KiB smallest.)
        let head_buffer = config.frontends.iter().map(|f| f.max_header_size).max().unwrap_or(DEFAULT_HEAD_BUFFER);
        let list: Vec<Arc<BackendState>> = config
            .backends
            .iter()
            .map(|b| Arc::new(BackendState { head_buffer, ..BackendState::new(b.clone()) }))
            .collect();
        let by_name = list.iter().enumerate().map(|(i, b)| (b.name().to_owned(), i)).collect();
        Backends { list, by_name }
    }

    /// The backend named `name`.
    pub(crate) fn get(&self, name: &str) -> Option<&Arc<BackendState>> {
        self.by_name.get(name).and_then(|&i| self.list.get(i))
    }

    /// Every backend, in config order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<BackendState>> {
        self.list.iter()
    }
}

/// One backend at run time: its config, its servers and the balancer's state.
pub(crate) struct BackendState {
    config: lb_config::Backend,
    /// In increasing id order (config order, then servers added at run time).
    servers: RwLock<Arc<Vec<Arc<ServerState>>>>,
    /// The id of the next server added at run time.
    next_id: AtomicUsize,
    /// Connections held through leases on all servers (HAProxy's `beconn`).
    conns: AtomicUsize,
    pub(crate) counters: Counters,
    /// The server last chosen by leastconn: ties are broken starting after it.
    last_pick: AtomicUsize,
    /// Smooth weighted round robin's per-server current weights.
    round_robin: SmoothRoundRobin,
    /// Connections waiting for a server below its max_connections (HAProxy's backend queue).
    queued: AtomicUsize,
    /// Woken when a lease is released while connections are queued.
    slot_freed: Notify,
    /// Time without a usable server (`downtime`), noted at every change that can make or undo
    /// that: a server's health, admin state or weight, a server added or deleted.
    downtime: Mutex<Downtime>,
    /// hyper's buffer on this backend's server connections: the largest response head taken,
    /// and the most read from or queued for a server at once while a body streams (hyper's own
    /// default, about 400 KiB, held that much per streaming connection).
    head_buffer: usize,
}

/// Why [`BackendState::pick_queued`] found no server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PickFailure {
    /// No server is usable at all (down, maintenance, draining, weight 0).
    NoServer,
    /// Usable servers stayed at their max_connections for the whole queue timeout.
    QueueTimeout,
}

impl fmt::Debug for BackendState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BackendState")
            .field("name", &self.config.name)
            .field("balance", &self.config.balance)
            .field("conns", &self.conns)
            .field("servers", &self.servers())
            .finish_non_exhaustive()
    }
}

impl BackendState {
    pub(crate) fn new(config: lb_config::Backend) -> BackendState {
        let servers: Vec<Arc<ServerState>> =
            config.servers.iter().enumerate().map(|(i, s)| Arc::new(ServerState::new(i, s.clone()))).collect();
        let round_robin = SmoothRoundRobin::new(servers.len());
        let backend = BackendState {
            config,
            next_id: AtomicUsize::new(servers.len()),
            servers: RwLock::new(Arc::new(servers)),
            conns: AtomicUsize::new(0),
            counters: Counters::default(),
            last_pick: AtomicUsize::new(usize::MAX),
            round_robin,
            queued: AtomicUsize::new(0),
            slot_freed: Notify::new(),
            downtime: Mutex::new(Downtime::default()),
            head_buffer: DEFAULT_HEAD_BUFFER,
        };
        // Down from the start when it has no usable server (none configured, all in MAINT).
        backend.note_availability();
        backend
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    pub(crate) fn config(&self) -> &lb_config::Backend {
        &self.config
    }

    /// hyper's buffer size for a new connection to one of this backend's servers.
    pub(crate) fn head_buffer(&self) -> usize {
        self.head_buffer
    }

    /// The servers now (a change made after this call is not seen in the returned list).
    pub(crate) fn servers(&self) -> Arc<Vec<Arc<ServerState>>> {
        self.servers.read().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// The server named `name`.
    pub(crate) fn server(&self, name: &str) -> Option<Arc<ServerState>> {
        self.servers().iter().find(|s| s.name() == name).cloned()
    }

    /// Add a server at the end of the list (`add server`); refused when the name is taken.
    pub(crate) fn add_server(&self, config: lb_config::Server) -> Result<Arc<ServerState>, String> {
        let mut list = self.servers.write().unwrap_or_else(PoisonError::into_inner);
        if list.iter().any(|s| s.name() == config.name) {
            return Err("Already exists a server with the same name in backend.".into());
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let server = Arc::new(ServerState::new(id, config));
        if server.config().check {
            server.assume_down();
        }
        let mut next = Vec::with_capacity(list.len() + 1);
        next.extend(list.iter().cloned());
        next.push(server.clone());
        *list = Arc::new(next);
        drop(list);
        self.note_availability();
        Ok(server)
    }

    /// Remove a server (`del server`): only in maintenance or drain, and only once it holds no
    /// connection, so that no request is cut. Its health checks stop.
    pub(crate) fn remove_server(&self, name: &str) -> Result<Arc<ServerState>, String> {
        let mut list = self.servers.write().unwrap_or_else(PoisonError::into_inner);
        let Some(server) = list.iter().find(|s| s.name() == name).cloned() else {
            return Err("No such server.".into());
        };
        if server.admin_state() == lb_config::AdminState::Ready {
            return Err("Only servers in maintenance or drain mode can be deleted (set server B/S state maint).".into());
        }
        let conns = server.current_conns();
        if conns > 0 {
            return Err(format!(
                "Server still has {conns} connections attached to it, cannot remove it (wait for the drain to end)."
            ));
        }
        *list = Arc::new(list.iter().filter(|s| !Arc::ptr_eq(s, &server)).cloned().collect());
        drop(list);
        server.mark_removed();
        self.note_availability();
        Ok(server)
    }

    /// Choose a server for a new server connection, per the balance algorithm, skipping servers
    /// in `avoid` (by index) when any other is usable (redispatch after a failed connect),
    /// servers at their max_connections, servers not usable (admin state not Ready, health down,
    /// effective weight 0). None = no server can take it (the caller answers 503).
    pub(crate) fn pick(self: &Arc<Self>, avoid: &[usize]) -> Option<ServerLease> {
        self.pick_at(avoid, Instant::now())
    }

    /// [`pick`](Self::pick) with the clock given (slowstart depends on it).
    pub(crate) fn pick_at(self: &Arc<Self>, avoid: &[usize], now: Instant) -> Option<ServerLease> {
        let servers = self.servers();
        // (id, effective weight) of every server that could take one more connection now.
        let mut candidates: Vec<(usize, u32)> = servers
            .iter()
            .filter(|s| s.has_room())
            .filter_map(|s| s.usable_weight(now).map(|w| (s.index(), w)))
            .collect();
        if candidates.iter().any(|(i, _)| !avoid.contains(i)) {
            candidates.retain(|(i, _)| !avoid.contains(i));
        }
        // A chosen server can lose its last slot to a racing task: drop it and choose again.
        while !candidates.is_empty() {
            let by_id = |id: usize| servers.binary_search_by_key(&id, |s| s.index()).ok().and_then(|i| servers.get(i));
            let chosen = match self.config.balance {
                Balance::LeastConn => {
                    let after = self.last_pick.load(Ordering::Relaxed);
                    balance::least_conn(&candidates, after, |i| by_id(i).map_or(usize::MAX, |s| s.current_conns()))
                }
                Balance::RoundRobin => self.round_robin.next(&candidates),
            }?;
            let server = by_id(chosen)?;
            if server.try_acquire() {
                self.last_pick.store(chosen, Ordering::Relaxed);
                let conns = self.conns.fetch_add(1, Ordering::AcqRel) + 1;
                let now = crate::counters::unix_now();
                self.counters.session(now, conns);
                server.counters.session(now, server.current_conns());
                return Some(ServerLease { backend: Arc::clone(self), server: Arc::clone(server) });
            }
            candidates.retain(|&(i, _)| i != chosen);
        }
        None
    }

    /// [`pick`](Self::pick), but when every usable server is at its max_connections, wait in
    /// the backend's queue for a slot, up to `timeout`, as HAProxy's `maxconn` does.
    pub(crate) async fn pick_queued(
        self: &Arc<Self>,
        avoid: &[usize],
        timeout: std::time::Duration,
    ) -> Result<ServerLease, PickFailure> {
        if let Some(lease) = self.pick(avoid) {
            return Ok(lease);
        }
        let deadline = tokio::time::Instant::now() + timeout;
        // Counted in the queue before listening, so that every release from now on wakes us.
        let _slot = QueueSlot::new(&self.queued);
        loop {
            let freed = self.slot_freed.notified();
            tokio::pin!(freed);
            freed.as_mut().enable();
            if let Some(lease) = self.pick(avoid) {
                return Ok(lease);
            }
            if !self.has_usable_server() {
                return Err(PickFailure::NoServer);
            }
            if tokio::time::timeout_at(deadline, freed).await.is_err() {
                return Err(PickFailure::QueueTimeout);
            }
        }
    }

    /// Connections waiting in this backend's queue now.
    pub(crate) fn queued(&self) -> usize {
        self.queued.load(Ordering::Relaxed)
    }

    /// Current connections held through leases on all its servers (HAProxy's beconn).
    pub(crate) fn current_conns(&self) -> usize {
        self.conns.load(Ordering::Acquire)
    }

    /// Any server usable right now: admin state Ready, health up, effective weight above 0
    /// (whether it has room under its max_connections is not considered).
    pub(crate) fn has_usable_server(&self) -> bool {
        let now = Instant::now();
        self.servers().iter().any(|s| s.usable_weight(now).is_some())
    }

    // ---- changes to a server: through its backend, which notes whether one is still usable ----

    /// Set `server`'s admin state (runtime API): see [`ServerState::set_admin_state`].
    pub(crate) fn set_admin_state(&self, server: &ServerState, state: lb_config::AdminState) {
        server.set_admin_state(state);
        self.note_availability();
    }

    /// Set `server`'s weight (runtime API), at most 256.
    pub(crate) fn set_weight(&self, server: &ServerState, weight: u32) {
        server.set_weight(weight);
        self.note_availability();
    }

    /// Move `server` (runtime API); returns its old address.
    pub(crate) fn set_addr(&self, server: &ServerState, addr: std::net::SocketAddr) -> std::net::SocketAddr {
        server.set_addr(addr)
    }

    /// Stop or resume `server`'s health checks (runtime API). Stopped, it counts as up.
    pub(crate) fn pause_checks(&self, server: &ServerState, paused: bool) {
        if server.pause_checks(paused) && paused {
            server.set_up(true, Instant::now());
        }
        self.note_availability();
    }

    /// Set `server`'s health, as its checks decided at `now`: see [`ServerState::set_up`].
    pub(crate) fn set_up(&self, server: &ServerState, up: bool, now: Instant) {
        server.set_up(up, now);
        self.note_availability();
    }

    /// A server's health, admin state or weight changed, or the list did: begin or end a period
    /// without a usable server.
    fn note_availability(&self) {
        let usable = self.has_usable_server();
        self.downtime.lock().unwrap_or_else(PoisonError::into_inner).note(!usable, Instant::now());
    }

    /// Time without a usable server so far, the current period included.
    pub(crate) fn downtime(&self) -> Duration {
        self.downtime.lock().unwrap_or_else(PoisonError::into_inner).so_far()
    }

    /// Count on from a predecessor's downtime.
    pub(crate) fn inherit_downtime(&self, earlier: Duration) {
        self.downtime.lock().unwrap_or_else(PoisonError::into_inner).inherit(earlier);
    }

    /// Servers health-up and not in maintenance (drain included): HAProxy's "active servers" of
    /// its UP/DOWN log lines.
    pub(crate) fn active_servers(&self) -> usize {
        self.servers().iter().filter(|s| s.accepts_existing()).count()
    }
}

/// Holding a lease counts one connection on the server and its backend; dropping it releases.
pub(crate) struct ServerLease {
    backend: Arc<BackendState>,
    server: Arc<ServerState>,
}

impl fmt::Debug for ServerLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerLease")
            .field("backend", &self.backend.name())
            .field("server", &self.server.name())
            .finish()
    }
}

impl ServerLease {
    pub(crate) fn server(&self) -> &Arc<ServerState> {
        &self.server
    }

    #[allow(dead_code, reason = "backend API, not used by every build of the crate yet")]
    pub(crate) fn backend(&self) -> &Arc<BackendState> {
        &self.backend
    }
}

impl Drop for ServerLease {
    fn drop(&mut self) {
        self.server.release();
        self.backend.conns.fetch_sub(1, Ordering::AcqRel);
        if self.backend.queued.load(Ordering::Relaxed) > 0 {
            self.backend.slot_freed.notify_waiters();
        }
    }
}

/// Counts one connection in a backend's queue while it lives.
struct QueueSlot<'a>(&'a AtomicUsize);

impl<'a> QueueSlot<'a> {
    fn new(queued: &'a AtomicUsize) -> Self {
        queued.fetch_add(1, Ordering::Relaxed);
        QueueSlot(queued)
    }
}

impl Drop for QueueSlot<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}
