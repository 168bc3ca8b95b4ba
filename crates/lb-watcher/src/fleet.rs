//! The fleet: this lb-proxy registers as an ephemeral node `<fleet.path>/<fleet.name>`, and
//! the number of nodes there (the live lb-proxies) is sent to lb-proxy as `set fleet share N`,
//! which divides the limits of its `fleet: true` tables by N.
//!
//! Its own ZooKeeper session, apart from the services' (a slow read of a big service does not
//! hold the share back, and a lost session here means exactly "this node is gone"). The
//! children are listed with a one-shot watch, listed again when it fires, after each
//! reconnection (events during a disconnection are lost), and every `RECHECK` (a restarted
//! lb-proxy starts whole, at share 1; the same share sent again costs one runtime command). An
//! expired session registers again. The share is never sent from a session that is not
//! connected: while ZooKeeper is away, lb-proxy keeps the last share.

use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::{Client, SessionState};

use crate::apply::Applier;
use crate::config::{Fleet, Zookeeper};
use crate::register::create_ephemeral;

/// How often the share is read and sent again without a change.
const RECHECK: Duration = Duration::from_secs(5);
const RETRY_MIN: Duration = Duration::from_millis(200);

/// Keeps this node registered and lb-proxy's share up to date until `shutdown` turns true;
/// then deletes the node.
pub(crate) async fn run(settings: Zookeeper, fleet: Fleet, applier: Applier, mut shutdown: watch::Receiver<bool>) {
    let mut retry = RETRY_MIN;
    let connect_string = settings.connect_string();
    let node = fleet.node_path();
    loop {
        if *shutdown.borrow() {
            return;
        }
        let Some(client) = crate::zk::connect(&settings, &connect_string, &mut shutdown).await else { return };
        let created = match client {
            Ok(client) => create_ephemeral(&client, &fleet.path, &node, b"").await.map(|()| client),
            Err(source) => Err(crate::Error::Zookeeper { what: format!("connecting to {connect_string}"), source }),
        };
        let client = match created {
            Ok(client) => client,
            Err(e) => {
                tracing::warn!("fleet: {e}; retrying in {retry:?}");
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    _ = shutdown.changed() => return,
                }
                retry = (retry * 2).min(settings.retry_max);
                continue;
            }
        };
        retry = RETRY_MIN;
        tracing::info!("fleet: registered {node}");
        if follow(&client, &fleet, &applier, &mut shutdown).await {
            if let Err(e) = client.delete(&node, None).await {
                tracing::warn!("fleet: deleting {node}: {e}");
            }
            return;
        }
        tracing::warn!("fleet: session ended; registering {node} again");
    }
}

/// Follows the fleet's nodes within one session: `true` at shutdown, `false` when the session
/// ended.
async fn follow(client: &Client, fleet: &Fleet, applier: &Applier, shutdown: &mut watch::Receiver<bool>) -> bool {
    let mut state = client.state_watcher();
    let mut sent: Option<usize> = None;
    loop {
        let watcher = match client.list_and_watch_children(&fleet.path).await {
            Ok((children, watcher)) => {
                let n = children.len().max(1);
                if sent != Some(n) {
                    tracing::info!("fleet: {n} live nodes under {}", fleet.path);
                }
                match applier.runtime(&format!("set fleet share {n}")).await {
                    Ok(_) => sent = Some(n),
                    Err(e) => {
                        tracing::warn!("fleet: {e}");
                        sent = None;
                    }
                }
                Some(watcher)
            }
            Err(e) => {
                tracing::warn!("fleet: listing {}: {e}", fleet.path);
                None
            }
        };
        let fired = async {
            match watcher {
                Some(w) => {
                    w.changed().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = fired => {}
            () = tokio::time::sleep(RECHECK) => {}
            s = state.changed() => match s {
                SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => return false,
                // Disconnected: nothing is read until connected again; then read at once.
                _ => {
                    while !matches!(client.state(), SessionState::SyncConnected | SessionState::ConnectedReadOnly) {
                        tokio::select! {
                            s = state.changed() => if matches!(s, SessionState::Expired | SessionState::Closed | SessionState::AuthFailed) {
                                return false;
                            },
                            _ = shutdown.changed() => return true,
                        }
                    }
                }
            },
            _ = shutdown.changed() => return true,
        }
    }
}
