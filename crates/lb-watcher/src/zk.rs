//! The ZooKeeper side: one session at a time, a persistent recursive watch on every service
//! path, and reads in proportion to what changed, sent to the engine as [`ZkEvent`]s.
//!
//! A path is read whole (children listed, every child's data read) when a session starts,
//! after each reconnection (zookeeper-client does not re-arm persistent watches, and events
//! during the disconnection are lost anyway), and at each audit. In between, the watch's events
//! name the nodes that changed: a node created or changed has its data read, a node deleted is
//! dropped unread. The events of one transaction come as a burst; after the first, one stat of
//! the path serves as a barrier (ZooKeeper sends every notification of a change before the
//! answer to any request it handles after it, on the same connection), so that every node of
//! the transaction is read together, once.
//!
//! The audit, every `audit_interval` plus up to a quarter of it at random (a fleet's watchers
//! do not audit together), reads every path whole, counts the nodes that differ from what the
//! watches said, and repairs them. Faults are reported, never turned into "no servers": the
//! engine freezes on [`ZkEvent::Disconnected`]. Connection attempts back off exponentially up
//! to `retry_max`.

mod read;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::{select_all, FutureExt};
use rand::{Rng, SeedableRng};
use tokio::sync::{mpsc, watch};
use tokio::time::Instant;
use zookeeper_client::{AddWatchMode, Client, EventType, PersistentWatcher, SessionState, WatchedEvent};

use crate::config::Zookeeper;
use crate::status::{Metrics, Shared};
use crate::Error;
use read::{Change, Pending};

/// Data of every child of a path, by child name.
pub type Children = BTreeMap<String, Vec<u8>>;

/// What the session loop reports to the engine.
#[derive(Debug)]
pub enum ZkEvent {
    /// Connected (first time, after a reconnection, or on a new session): full snapshots of
    /// every path follow.
    Connected { session_id: String, new_session: bool },
    /// Connection lost; the session may still be alive. Nothing may be concluded.
    Disconnected,
    /// The session expired; a new one is being established.
    Expired,
    /// A connection attempt failed (ZooKeeper unreachable).
    ConnectFailed { error: String, retry_in: Duration },
    /// Everything under `path` now (a whole read). `exists` is false when the path is missing.
    Snapshot { path: String, exists: bool, children: Children },
    /// The children of `path` that changed since the last event for it: their data now,
    /// `None` for those gone.
    Changes { path: String, nodes: BTreeMap<String, Option<Vec<u8>>> },
}

/// After a change, further changes for this long are read in the same pass.
const SETTLE: Duration = Duration::from_millis(20);
const RETRY_MIN: Duration = Duration::from_millis(200);
const ARM_RETRY: Duration = Duration::from_secs(1);

/// One connection attempt with the configured timeouts; `None` when `shutdown` turned true
/// first.
pub(crate) async fn connect(
    session_timeout: Duration,
    connect_string: &str,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Result<Client, zookeeper_client::Error>> {
    let connecting = Client::connector()
        .with_session_timeout(session_timeout)
        .with_connection_timeout(session_timeout.min(Duration::from_secs(5)))
        .connect(connect_string);
    tokio::select! {
        r = connecting => Some(r),
        _ = shutdown.changed() => None,
    }
}

/// Runs until `shutdown` turns true or the engine goes away.
pub async fn run(
    settings: Zookeeper,
    paths: Vec<String>,
    events: mpsc::Sender<ZkEvent>,
    mut shutdown: watch::Receiver<bool>,
    shared: Arc<Shared>,
) {
    let mut retry = RETRY_MIN;
    let mut first = true;
    let connect_string = settings.connect_string();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(client) = connect(settings.session_timeout, &connect_string, &mut shutdown).await else { return };
        let client = match client {
            Ok(client) => client,
            Err(e) => {
                let event = ZkEvent::ConnectFailed { error: e.to_string(), retry_in: retry };
                if events.send(event).await.is_err() {
                    return;
                }
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    _ = shutdown.changed() => return,
                }
                retry = (retry * 2).min(settings.retry_max);
                continue;
            }
        };
        retry = RETRY_MIN;
        let session_id = format!("{:#x}", client.session_id().0);
        if events.send(ZkEvent::Connected { session_id, new_session: !first }).await.is_err() {
            return;
        }
        first = false;
        let session = Session { client: &client, paths: &paths, events: &events, metrics: &shared.metrics };
        match session.serve(&mut shutdown, settings.audit_interval).await {
            Ended::Shutdown | Ended::EngineGone => return,
            Ended::Expired => {
                if events.send(ZkEvent::Expired).await.is_err() {
                    return;
                }
            }
        }
    }
}

pub(crate) enum Ended {
    Shutdown,
    EngineGone,
    Expired,
}

/// Why following stopped short.
enum Failure {
    EngineGone,
    /// A read failed: the connection is going, or ZooKeeper refused it.
    Read(Error),
}

fn connected(state: SessionState) -> bool {
    matches!(state, SessionState::SyncConnected | SessionState::ConnectedReadOnly)
}

/// One session's client and what it reports to.
struct Session<'a> {
    client: &'a Client,
    paths: &'a [String],
    events: &'a mpsc::Sender<ZkEvent>,
    metrics: &'a Metrics,
}

impl Session<'_> {
    /// Watch, read, follow changes; re-watch and read whole again after each reconnection.
    async fn serve(&self, shutdown: &mut watch::Receiver<bool>, audit: Duration) -> Ended {
        let client = self.client;
        let mut state = client.state_watcher();
        let mut rng = rand::rngs::StdRng::from_os_rng();
        loop {
            // (Re-)arm the watches before reading, so that no change between the read and the
            // watch goes unnoticed.
            let watchers = match arm(client, self.paths).await {
                Ok(w) => w,
                Err(e) => {
                    tracing::warn!("{e}");
                    // Refused while connected (a ZooKeeper without addWatch): not in a tight loop.
                    tokio::select! {
                        () = tokio::time::sleep(ARM_RETRY) => {}
                        _ = shutdown.changed() => return Ended::Shutdown,
                    }
                    match wait_connected(&mut state, shutdown).await {
                        Some(ended) => return ended,
                        None => continue,
                    }
                }
            };
            let mut follow = Follow::new(self, watchers);
            let mut next_audit = Instant::now() + jittered(audit, &mut rng);
            let lost = loop {
                match follow.flush().await {
                    Ok(()) => {}
                    Err(Failure::EngineGone) => return Ended::EngineGone,
                    Err(Failure::Read(e)) => {
                        tracing::warn!("{e}");
                        if !connected(client.state()) {
                            break client.state();
                        }
                        tokio::select! {
                            () = tokio::time::sleep(RETRY_MIN) => continue,
                            _ = shutdown.changed() => return Ended::Shutdown,
                        }
                    }
                }
                tokio::select! {
                    event = follow.next_event() => {
                        if let Some(s) = follow.take(event) {
                            break s;
                        }
                        tokio::time::sleep(SETTLE).await;
                        if let Some(s) = follow.barrier().await {
                            break s;
                        }
                    }
                    () = tokio::time::sleep_until(next_audit) => {
                        next_audit = Instant::now() + jittered(audit, &mut rng);
                        match follow.audit().await {
                            Ok(None) => {}
                            Ok(Some(s)) => break s,
                            Err(Failure::EngineGone) => return Ended::EngineGone,
                            // The path is marked for a whole read: the next pass retries it.
                            Err(Failure::Read(e)) => tracing::warn!("audit: {e}"),
                        }
                    }
                    s = state.changed() => {
                        if !connected(s) {
                            break s;
                        }
                    }
                    _ = shutdown.changed() => return Ended::Shutdown,
                }
            };
            drop(follow);
            if matches!(lost, SessionState::Expired | SessionState::AuthFailed | SessionState::Closed) {
                return Ended::Expired;
            }
            if self.events.send(ZkEvent::Disconnected).await.is_err() {
                return Ended::EngineGone;
            }
            if let Some(ended) = wait_connected(&mut state, shutdown).await {
                return ended;
            }
            let session_id = format!("{:#x}", client.session_id().0);
            if self.events.send(ZkEvent::Connected { session_id, new_session: false }).await.is_err() {
                return Ended::EngineGone;
            }
        }
    }
}

/// `interval` plus up to a quarter of it.
fn jittered(interval: Duration, rng: &mut impl Rng) -> Duration {
    interval + interval.mul_f64(rng.random_range(0.0..0.25))
}

/// One connection's following: what each path holds as far as reads and events tell.
struct Follow<'a> {
    session: &'a Session<'a>,
    watchers: Vec<PersistentWatcher>,
    /// Every path's children with their data, as read and patched since; `None`: no such path.
    trees: Vec<Option<Children>>,
    /// What each path's events ask for; every path starts with a whole read.
    pending: Vec<Pending>,
}

impl<'a> Follow<'a> {
    fn new(session: &'a Session<'a>, watchers: Vec<PersistentWatcher>) -> Self {
        let n = session.paths.len();
        let pending = (0..n).map(|_| Pending { whole: true, nodes: BTreeMap::new() }).collect();
        Follow { session, watchers, trees: vec![None; n], pending }
    }

    /// The next event of any watch. Cancel-safe: an event not returned stays queued.
    async fn next_event(&mut self) -> (usize, WatchedEvent) {
        match self.watchers.as_mut_slice() {
            [] => return std::future::pending().await,
            // One path (the usual case): waited on in place, nothing allocated per event.
            [watcher] => return (0, watcher.changed().await),
            _ => {}
        }
        let waits = self.watchers.iter_mut().enumerate().map(|(i, w)| async move { (i, w.changed().await) }.boxed());
        select_all(waits).await.0
    }

    /// Takes in an event; the session state when it says the connection is going (the watches
    /// are then not polled again: zookeeper-client ends them).
    fn take(&mut self, (i, event): (usize, WatchedEvent)) -> Option<SessionState> {
        if event.event_type == EventType::Session {
            return (!connected(event.session_state)).then_some(event.session_state);
        }
        if !fault::deaf() {
            self.pending[i].record(&self.session.paths[i], &event);
        }
        None
    }

    /// Every event already received, taken in without waiting.
    fn drain(&mut self) -> Option<SessionState> {
        while let Some(event) = self.next_event().now_or_never() {
            if let Some(s) = self.take(event) {
                return Some(s);
            }
        }
        None
    }

    /// Waits until every event of the change under way is in: ZooKeeper sends a transaction's
    /// notifications before the answer to any request it handles after it, so once a stat of
    /// the path is answered they are all queued here.
    async fn barrier(&mut self) -> Option<SessionState> {
        let i = self.pending.iter().position(|p| !p.is_empty()).unwrap_or(0);
        if let Some(path) = self.session.paths.get(i) {
            if let Err(e) = self.session.client.check_stat(path).await {
                tracing::debug!("stat of {path}: {e}");
            }
        }
        self.drain()
    }

    async fn send(&self, event: ZkEvent) -> Result<(), Failure> {
        self.session.events.send(event).await.map_err(|_| Failure::EngineGone)
    }

    /// Reads what the events ask for and reports it: whole paths as snapshots, changed nodes
    /// as changes (only those that differ from what was reported before).
    async fn flush(&mut self) -> Result<(), Failure> {
        let (client, metrics, paths) = (self.session.client, self.session.metrics, self.session.paths);
        for (i, path) in paths.iter().enumerate() {
            let pending = std::mem::take(&mut self.pending[i]);
            if pending.is_empty() {
                continue;
            }
            if pending.whole || self.trees[i].is_none() {
                let read = read::whole(client, path, metrics).await.map_err(|e| {
                    self.pending[i].whole = true;
                    Failure::Read(e)
                })?;
                self.trees[i].clone_from(&read);
                let exists = read.is_some();
                self.send(ZkEvent::Snapshot { path: path.clone(), exists, children: read.unwrap_or_default() }).await?;
                continue;
            }
            let names: Vec<String> =
                pending.nodes.iter().filter(|(_, c)| **c == Change::Read).map(|(n, _)| n.clone()).collect();
            let mut nodes = read::nodes(client, path, &names, metrics).await.map_err(|e| {
                self.pending[i].whole = true;
                Failure::Read(e)
            })?;
            nodes.extend(pending.nodes.iter().filter(|(_, c)| **c == Change::Gone).map(|(n, _)| (n.clone(), None)));
            let tree = self.trees[i].get_or_insert_with(Children::new);
            nodes.retain(|name, data| tree.get(name) != data.as_ref());
            for (name, data) in &nodes {
                match data {
                    Some(data) => tree.insert(name.clone(), data.clone()),
                    None => tree.remove(name),
                };
            }
            if !nodes.is_empty() {
                self.send(ZkEvent::Changes { path: path.clone(), nodes }).await?;
            }
        }
        Ok(())
    }

    /// Reads every path whole and compares it with what the watches reported; repairs and
    /// counts the differences. Nodes whose events come in during the read are left out of the
    /// comparison and read again just after.
    async fn audit(&mut self) -> Result<Option<SessionState>, Failure> {
        if let Some(s) = self.drain() {
            return Ok(Some(s));
        }
        self.flush().await?;
        let (client, metrics, paths) = (self.session.client, self.session.metrics, self.session.paths);
        Metrics::add(&metrics.zk_audits);
        for (i, path) in paths.iter().enumerate() {
            let read = read::whole(client, path, metrics).await.map_err(|e| {
                self.pending[i].whole = true;
                Failure::Read(e)
            })?;
            if let Some(s) = self.drain() {
                return Ok(Some(s));
            }
            if self.pending[i].whole {
                continue;
            }
            let differ = match (&self.trees[i], &read) {
                (Some(known), Some(read)) => read::differences(known, read, &self.pending[i].nodes),
                (None, None) => 0,
                (Some(tree), None) | (None, Some(tree)) => tree.len().max(1),
            };
            if differ == 0 {
                tracing::debug!("audit of {path}: in step with ZooKeeper");
                continue;
            }
            tracing::warn!(
                "audit of {path}: {differ} nodes differed from what ZooKeeper's watch had reported; repaired"
            );
            Metrics::add_n(&metrics.zk_audit_repairs, differ as u64);
            self.trees[i].clone_from(&read);
            let exists = read.is_some();
            self.send(ZkEvent::Snapshot { path: path.clone(), exists, children: read.unwrap_or_default() }).await?;
        }
        Ok(None)
    }
}

/// Waits for the session to be connected again: `None` when it is, else why it ended.
pub(crate) async fn wait_connected(
    state: &mut zookeeper_client::StateWatcher,
    shutdown: &mut watch::Receiver<bool>,
) -> Option<Ended> {
    loop {
        match state.peek_state() {
            SessionState::SyncConnected | SessionState::ConnectedReadOnly => return None,
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => return Some(Ended::Expired),
            SessionState::Disconnected => {}
        }
        tokio::select! {
            _ = state.changed() => {}
            _ = shutdown.changed() => return Some(Ended::Shutdown),
        }
    }
}

async fn arm(client: &Client, paths: &[String]) -> Result<Vec<PersistentWatcher>, Error> {
    let mut watchers = Vec::new();
    for path in paths {
        let watcher = client
            .watch(path, AddWatchMode::PersistentRecursive)
            .await
            .map_err(|source| Error::Zookeeper { what: format!("watching {path}"), source })?;
        watchers.push(watcher);
    }
    Ok(watchers)
}

/// Fault injection for the test suite, in debug builds only: while the file named by
/// `LB_WATCHER_FAULT_DEAF` exists, node events are ignored, as by a watch that misses changes
/// (what the audit is there to find).
mod fault {
    pub(super) fn deaf() -> bool {
        cfg!(debug_assertions)
            && std::env::var_os("LB_WATCHER_FAULT_DEAF").is_some_and(|f| std::path::Path::new(&f).exists())
    }
}
