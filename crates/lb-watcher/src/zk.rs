//! The ZooKeeper side: one session at a time, persistent recursive watches on every service
//! path, and a full read of a path whenever anything under it changes, sent as a [`ZkEvent`].
//!
//! Faults are reported, never turned into "no servers": the engine freezes on
//! [`ZkEvent::Disconnected`]. After a reconnection the watches are added again and every path
//! read again (zookeeper-client does not re-arm persistent watches, and events during the
//! disconnection are lost anyway); after an expiry, a new client and session do the same.
//! Connection attempts back off exponentially up to `retry_max`.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::sync::{mpsc, watch};
use zookeeper_client::{AddWatchMode, Client, EventType, PersistentWatcher, SessionState};

use crate::config::Zookeeper;
use crate::Error;

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
    /// Everything under `path` now. `exists` is false when the path itself is missing.
    Snapshot { path: String, exists: bool, children: Children },
}

/// Multi-reads per request: keeps a response well under ZooKeeper's 1 MB packet limit.
const BATCH: usize = 500;
/// After a change, further changes for this long are read in the same pass.
const SETTLE: Duration = Duration::from_millis(20);
const RETRY_MIN: Duration = Duration::from_millis(200);

/// Runs until `shutdown` turns true or the engine goes away.
pub async fn run(
    settings: Zookeeper,
    paths: Vec<String>,
    events: mpsc::Sender<ZkEvent>,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut retry = RETRY_MIN;
    let mut first = true;
    let connect_string = settings.connect_string();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let connecting = Client::connector()
            .with_session_timeout(settings.session_timeout)
            .with_connection_timeout(settings.session_timeout.min(Duration::from_secs(5)))
            .connect(&connect_string);
        let client = tokio::select! {
            r = connecting => r,
            _ = shutdown.changed() => return,
        };
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
        match serve(&client, &paths, &events, &mut shutdown).await {
            Ended::Shutdown | Ended::EngineGone => return,
            Ended::Expired => {
                if events.send(ZkEvent::Expired).await.is_err() {
                    return;
                }
            }
        }
    }
}

enum Ended {
    Shutdown,
    EngineGone,
    Expired,
}

/// One session: watch, read, follow changes; re-watch and re-read after each reconnection.
async fn serve(
    client: &Client,
    paths: &[String],
    events: &mpsc::Sender<ZkEvent>,
    shutdown: &mut watch::Receiver<bool>,
) -> Ended {
    let mut state = client.state_watcher();
    loop {
        // (Re-)arm the watches before reading, so that no change between the read and the
        // watch goes unnoticed.
        let watchers = match arm(client, paths).await {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("{e}");
                match wait_connected(&mut state, shutdown).await {
                    Some(ended) => return ended,
                    None => continue,
                }
            }
        };
        let (changed_tx, mut changed_rx) = mpsc::unbounded_channel::<usize>();
        let mut watch_tasks = Vec::new();
        for (i, mut watcher) in watchers.into_iter().enumerate() {
            let tx = changed_tx.clone();
            watch_tasks.push(tokio::spawn(async move {
                loop {
                    let event = watcher.changed().await;
                    if event.event_type == EventType::Session {
                        // Any change of connection ends this watch: the session loop arms a new
                        // one after reconnecting (and the client may drop this one's sender).
                        if event.session_state != SessionState::SyncConnected {
                            return;
                        }
                        continue;
                    }
                    if tx.send(i).is_err() {
                        return;
                    }
                }
            }));
        }
        let abort = || watch_tasks.iter().for_each(tokio::task::JoinHandle::abort);
        let mut dirty: Vec<bool> = vec![true; paths.len()];
        let lost = loop {
            if dirty.iter().any(|d| *d) {
                for (i, path) in paths.iter().enumerate() {
                    if !std::mem::take(&mut dirty[i]) {
                        continue;
                    }
                    match read(client, path).await {
                        Ok(Some(children)) => {
                            let ev = ZkEvent::Snapshot { path: path.clone(), exists: true, children };
                            if events.send(ev).await.is_err() {
                                abort();
                                return Ended::EngineGone;
                            }
                        }
                        Ok(None) => {
                            let ev = ZkEvent::Snapshot { path: path.clone(), exists: false, children: Children::new() };
                            if events.send(ev).await.is_err() {
                                abort();
                                return Ended::EngineGone;
                            }
                        }
                        Err(e) => {
                            tracing::warn!("{e}");
                            dirty[i] = true;
                            break;
                        }
                    }
                }
            }
            if dirty.iter().any(|d| *d) {
                // A read failed: the connection is going; the state watcher says how.
                match client.state() {
                    SessionState::SyncConnected | SessionState::ConnectedReadOnly => {
                        tokio::time::sleep(RETRY_MIN).await;
                        continue;
                    }
                    _ => break client.state(),
                }
            }
            tokio::select! {
                Some(i) = changed_rx.recv() => {
                    dirty[i] = true;
                    tokio::time::sleep(SETTLE).await;
                    while let Ok(i) = changed_rx.try_recv() {
                        dirty[i] = true;
                    }
                }
                s = state.changed() => {
                    if !matches!(s, SessionState::SyncConnected | SessionState::ConnectedReadOnly) {
                        break s;
                    }
                }
                _ = shutdown.changed() => {
                    abort();
                    return Ended::Shutdown;
                }
            }
        };
        abort();
        match lost {
            SessionState::Expired | SessionState::AuthFailed | SessionState::Closed => return Ended::Expired,
            _ => {}
        }
        if events.send(ZkEvent::Disconnected).await.is_err() {
            return Ended::EngineGone;
        }
        if let Some(ended) = wait_connected(&mut state, shutdown).await {
            return ended;
        }
        let session_id = format!("{:#x}", client.session_id().0);
        if events.send(ZkEvent::Connected { session_id, new_session: false }).await.is_err() {
            return Ended::EngineGone;
        }
    }
}

/// Waits for the session to be connected again: `None` when it is, else why it ended.
async fn wait_connected(
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

/// Every child of `path` with its data; `None` when `path` does not exist. A child that goes
/// between the listing and the read is simply not there.
pub async fn read(client: &Client, path: &str) -> Result<Option<Children>, Error> {
    let names = match client.list_children(path).await {
        Ok(names) => names,
        Err(zookeeper_client::Error::NoNode) => return Ok(None),
        Err(source) => return Err(Error::Zookeeper { what: format!("listing {path}"), source }),
    };
    let mut children = Children::new();
    for batch in names.chunks(BATCH) {
        let mut reader = client.new_multi_reader();
        for name in batch {
            let child = format!("{}/{name}", path.trim_end_matches('/'));
            reader
                .add_get_data(&child)
                .map_err(|source| Error::Zookeeper { what: format!("reading {child}"), source })?;
        }
        let results = reader
            .commit()
            .await
            .map_err(|source| Error::Zookeeper { what: format!("reading under {path}"), source })?;
        for (name, result) in batch.iter().zip(results) {
            match result {
                zookeeper_client::MultiReadResult::Data { data, .. } => {
                    children.insert(name.clone(), data);
                }
                zookeeper_client::MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => {}
                zookeeper_client::MultiReadResult::Error { err } => {
                    return Err(Error::Zookeeper { what: format!("reading {path}/{name}"), source: err });
                }
                _ => {}
            }
        }
    }
    Ok(Some(children))
}
