//! The watcher's main loop: ZooKeeper events in, hysteresis decisions, rendering, writing and
//! applying out, drift repair on a timer, status kept up to date.

mod apply_change;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_config::Config as ProxyConfig;
use rand::rngs::StdRng;
use rand::SeedableRng;
use tokio::sync::{mpsc, watch};

use crate::apply::Applier;
use crate::config::{Config, Service};
use crate::hysteresis::{Servers, Sets, State};
use crate::node::Member;
use crate::status::{unix_now, Metrics, Shared};
use crate::zk::{self, ZkEvent};
use crate::{node, render, Error};

/// Runs lb-watcher until `shutdown` turns true. Errors only for what makes starting pointless
/// (the base configuration, the status address); everything later is logged, counted, retried.
pub async fn run(config: Config, shutdown: watch::Receiver<bool>) -> Result<(), Error> {
    let shared = Arc::new(Shared::default());
    run_with(config, shutdown, shared).await
}

/// [`run`], with the status shared with the caller (tests read it directly).
pub async fn run_with(config: Config, mut shutdown: watch::Receiver<bool>, shared: Arc<Shared>) -> Result<(), Error> {
    let base = render::load_base(&config.proxy.base, &config.services)?;
    let existing = existing_file(&config.proxy.config);
    let control_socket = control_socket(&config, &base);
    let applier = Applier { control_socket, settings: config.proxy.clone() };
    let initial: Sets = match &existing {
        Some(file) => render::sets_of(file, &config.services),
        None => config.services.iter().map(|s| (s.backend.clone(), Servers::new())).collect(),
    };
    // The non-server part of the running file differs from the base (or there is no file):
    // the first apply must be a reload.
    let base_changed = existing.as_ref().is_none_or(|file| strip(file, &config) != strip(&base, &config));
    if let Some(addr) = config.status_listen {
        let listener = crate::status::bind(addr).await?;
        tokio::spawn(crate::status::serve(listener, shared.clone(), shutdown.clone()));
    }
    let mut paths: Vec<String> = config.services.iter().map(|s| s.path.clone()).collect();
    paths.sort();
    paths.dedup();
    let (tx, mut events) = mpsc::channel(64);
    let fleet_task = config.fleet.clone().map(|fleet| {
        tokio::spawn(crate::fleet::run(config.zookeeper.clone(), fleet, applier.clone(), shutdown.clone()))
    });
    let zk_task = tokio::spawn(zk::run(config.zookeeper.clone(), paths, tx, shutdown.clone(), shared.clone()));

    let now = Instant::now();
    let mut engine = Engine {
        state: State::new(config.hysteresis, initial, now),
        config,
        base,
        applier,
        shared,
        rng: StdRng::from_os_rng(),
        frozen: true,
        was_disconnected: false,
        base_changed,
        warned: HashMap::new(),
        applied_changed: true,
        pending_deletes: false,
        checked_whole: false,
        retry: RETRY_MIN,
    };
    engine.publish();
    shared_state(&engine.shared, "connecting", None);
    let mut drift = tokio::time::interval(engine.config.proxy.drift_check);
    drift.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    drift.tick().await;
    loop {
        let due = if engine.frozen { None } else { engine.state.due() };
        let sleep = async {
            match due {
                Some(at) => tokio::time::sleep_until(at.into()).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            event = events.recv() => match event {
                Some(event) => engine.on_zk(event).await,
                None => break,
            },
            () = sleep => engine.decide().await,
            _ = drift.tick() => engine.drift().await,
            _ = shutdown.changed() => break,
        }
        engine.publish();
    }
    zk_task.abort();
    if let Some(task) = fleet_task {
        // Its node deleted on the way out (the shutdown it saw), so the others' share moves now
        // rather than at the session's expiry.
        let _ = tokio::time::timeout(Duration::from_secs(2), task).await;
    }
    Ok(())
}

const RETRY_MIN: Duration = Duration::from_secs(1);
const RETRY_MAX: Duration = Duration::from_secs(60);

pub(crate) struct Engine {
    pub(crate) config: Config,
    pub(crate) base: ProxyConfig,
    pub(crate) applier: Applier,
    pub(crate) shared: Arc<Shared>,
    pub(crate) state: State,
    rng: StdRng,
    /// ZooKeeper is away: nothing is concluded, nothing written.
    frozen: bool,
    was_disconnected: bool,
    /// The base configuration changed since the file was written: the next apply reloads.
    pub(crate) base_changed: bool,
    /// Bad nodes already warned about, with the data they had: one warning per bad node.
    warned: HashMap<(String, String), Vec<u8>>,
    /// The applied servers changed since `/status` last listed them: the list (a formatted
    /// line per server, 10,000 at scale) is made once per apply, not after every event.
    applied_changed: bool,
    /// Servers drained but not deleted yet: the drift check deletes them once idle.
    pub(crate) pending_deletes: bool,
    /// An apply of this run succeeded, its file read back whole: from then on only the servers
    /// a change adds are checked (`check`).
    pub(crate) checked_whole: bool,
    retry: Duration,
}

impl Engine {
    async fn on_zk(&mut self, event: ZkEvent) {
        let now = Instant::now();
        match event {
            ZkEvent::Connected { session_id, new_session } => {
                tracing::info!("ZooKeeper connected, session {session_id}{}", if new_session { " (new)" } else { "" });
                if self.was_disconnected || new_session {
                    self.state.resynced(now);
                }
                self.frozen = false;
                shared_state(&self.shared, "connected", Some(session_id));
                if self.base_changed && self.state.applied().values().all(|s| !s.is_empty()) {
                    let sets = self.state.applied();
                    self.apply(sets, now).await;
                }
            }
            ZkEvent::Disconnected => {
                tracing::warn!("ZooKeeper connection lost: keeping every server, writing nothing until it is back");
                self.frozen = true;
                self.was_disconnected = true;
                Metrics::add(&self.shared.metrics.zk_disconnects);
                shared_state(&self.shared, "disconnected", None);
            }
            ZkEvent::Expired => {
                tracing::warn!("ZooKeeper session expired: new session, full re-read");
                self.frozen = true;
                self.was_disconnected = true;
                Metrics::add(&self.shared.metrics.zk_expirations);
                shared_state(&self.shared, "expired", None);
            }
            ZkEvent::ConnectFailed { error, retry_in } => {
                tracing::warn!(
                    "ZooKeeper unreachable ({error}); the configuration stays as it is; retry in {retry_in:?}"
                );
                self.shared.update(|s| s.zookeeper.last_error = Some(error));
            }
            ZkEvent::Snapshot { path, exists, children } => {
                if !exists {
                    tracing::warn!("ZooKeeper path {path} does not exist: no server registered there");
                }
                let services: Vec<_> = self.config.services.iter().filter(|s| s.path == path).cloned().collect();
                for service in services {
                    let mut servers = Servers::new();
                    for (name, data) in &children {
                        if let Some(member) = self.member(&service, &path, name, data) {
                            servers.insert(name.clone(), member);
                        }
                    }
                    let prefix = format!("{}:{path}", service.backend);
                    self.warned.retain(|(k, n), _| *k != prefix || children.contains_key(n));
                    let read = format!("{path}: {} nodes", children.len());
                    self.observe(&service, &read, servers, now);
                }
            }
            ZkEvent::Changes { path, nodes } => {
                let services: Vec<_> = self.config.services.iter().filter(|s| s.path == path).cloned().collect();
                for service in services {
                    let mut changes = Vec::with_capacity(nodes.len());
                    for (name, data) in &nodes {
                        let member = data.as_ref().and_then(|data| self.member(&service, &path, name, data));
                        if data.is_none() {
                            self.warned.remove(&(format!("{}:{path}", service.backend), name.clone()));
                        }
                        changes.push((name.clone(), member));
                    }
                    self.state.observe_changes(&service.backend, changes, now, &mut self.rng);
                    tracing::debug!(
                        "{path}: {} nodes changed, {} servers for backend {}",
                        nodes.len(),
                        self.state.observed_len(&service.backend),
                        service.backend
                    );
                }
            }
        }
    }

    /// `service`'s servers as ZooKeeper has them now, after `read`, to the hysteresis.
    fn observe(&mut self, service: &Service, read: &str, servers: Servers, now: Instant) {
        tracing::debug!("{read}, {} servers for backend {}", servers.len(), service.backend);
        self.state.observe(&service.backend, servers, now, &mut self.rng);
    }

    /// The server node `name` under `path` stands for, if it is one for `service`; a bad node
    /// is warned about once for as long as its data stays the same.
    fn member(&mut self, service: &Service, path: &str, name: &str, data: &[u8]) -> Option<Member> {
        match node::parse(service, name, data) {
            Ok(member) => Some(member),
            Err(skip) => {
                let key = (format!("{}:{path}", service.backend), name.to_owned());
                if self.warned.get(&key).map(Vec::as_slice) != Some(data) {
                    // ZooKeeper allows long node names: the line stays short.
                    tracing::warn!(
                        "skipping node {path}/{} for backend {}: {skip}",
                        node::printable(name, 128),
                        service.backend
                    );
                    Metrics::add(&self.shared.metrics.skipped_nodes);
                    self.warned.insert(key, data.to_vec());
                }
                None
            }
        }
    }

    async fn decide(&mut self) {
        let now = Instant::now();
        let decision = self.state.decide(now, &mut self.rng);
        for backend in &decision.refused {
            // What is kept: the set about to be applied when removed servers are put back.
            let kept = match decision.apply.as_ref().and_then(|sets| sets.get(backend)) {
                Some(set) => set.len(),
                None => self.state.applied().get(backend).map_or(0, BTreeMap::len),
            };
            tracing::warn!(
                "refusing to empty backend {backend}: ZooKeeper lists no server for it; keeping its last {kept} servers"
            );
            Metrics::add(&self.shared.metrics.refused);
        }
        for (backend, names) in &decision.restored {
            tracing::warn!(
                "backend {backend}: putting back {} servers removed since its last full set: {}",
                names.len(),
                names.join(" ")
            );
        }
        for (backend, names) in &decision.throttled {
            tracing::info!(
                "backend {backend}: removal of {} throttled to a later round: {}",
                names.len(),
                names.join(" ")
            );
        }
        if let Some(sets) = decision.apply {
            self.apply(sets, now).await;
        }
    }

    /// After an apply: succeeded or failed, with retry backoff.
    pub(crate) fn after_apply(&mut self, sets: &Sets, result: Result<(), ()>, now: Instant) {
        match result {
            Ok(()) => {
                self.retry = RETRY_MIN;
                self.applied_changed = true;
                self.state.applied_ok(sets, now, &mut self.rng);
            }
            Err(()) => {
                self.state.apply_failed(now, self.retry);
                self.retry = (self.retry * 2).min(RETRY_MAX);
            }
        }
    }

    fn publish(&mut self) {
        let pending = self.state.pending();
        let refused = self.state.refused();
        let due = if self.frozen { None } else { self.state.due() };
        let listed = std::mem::take(&mut self.applied_changed).then(|| {
            self.state
                .applied_iter()
                .map(|(b, servers)| {
                    let list = servers.iter().map(|(n, m)| (n.clone(), format!("{} weight {}", m.address, m.weight)));
                    (b.clone(), list.collect())
                })
                .collect()
        });
        self.shared.update(|s| {
            if let Some(listed) = listed {
                s.servers = listed;
            }
            s.pending = pending;
            s.refused = refused;
            s.pending_due_in_ms =
                due.map(|d| u64::try_from(d.saturating_duration_since(Instant::now()).as_millis()).unwrap_or(u64::MAX));
        });
    }
}

fn shared_state(shared: &Shared, state: &str, session: Option<String>) {
    shared.update(|s| {
        if s.zookeeper.state != state {
            s.zookeeper.since = unix_now();
        }
        s.zookeeper.state = state.to_owned();
        if session.is_some() {
            s.zookeeper.session_id = session;
            s.zookeeper.last_error = None;
        }
    });
}

/// The file lb-proxy runs on now, if there is one that loads.
fn existing_file(path: &Path) -> Option<ProxyConfig> {
    if !path.exists() {
        return None;
    }
    match ProxyConfig::load(path) {
        Ok(config) => Some(config),
        Err(e) => {
            tracing::warn!("{}: does not load ({e}); it will be replaced at the first apply", path.display());
            None
        }
    }
}

/// The configuration without the watched backends' servers: what the base decides.
fn strip(config: &ProxyConfig, watcher: &Config) -> ProxyConfig {
    let mut config = config.clone();
    for b in &mut config.backends {
        if watcher.services.iter().any(|s| s.backend == b.name) {
            b.servers.clear();
        }
    }
    config
}

/// lb-watcher's `proxy.control_socket`, else the base's `global.control_socket` (relative to
/// the directory of the file lb-proxy runs on).
fn control_socket(config: &Config, base: &ProxyConfig) -> PathBuf {
    if let Some(socket) = &config.proxy.control_socket {
        return socket.clone();
    }
    let socket = &base.global.supervision.control_socket;
    match config.proxy.config.parent() {
        Some(dir) if socket.is_relative() => dir.join(socket),
        _ => socket.clone(),
    }
}
