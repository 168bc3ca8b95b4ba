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
use zookeeper_client::Client;

use crate::apply::Applier;
use crate::config::{Fleet, Zookeeper};
use crate::register::Node;
use crate::zk::{wait_connected, Ended};

/// How often the share is read and sent again without a change.
const RECHECK: Duration = Duration::from_secs(5);

/// Keeps this node registered and lb-proxy's share up to date until `shutdown` turns true;
/// then deletes the node.
pub(crate) async fn run(settings: Zookeeper, fleet: Fleet, applier: Applier, mut shutdown: watch::Receiver<bool>) {
    let node = Node {
        connect_string: settings.connect_string(),
        session_timeout: settings.session_timeout,
        retry_max: settings.retry_max,
        dir: fleet.path.clone(),
        path: fleet.node_path(),
        data: Vec::new(),
        what: "fleet: ",
    };
    while let Some(client) = node.session(&mut shutdown).await {
        tracing::info!("fleet: registered {}", node.path);
        if follow(&client, &fleet, &applier, &mut shutdown).await {
            node.delete(&client).await;
            return;
        }
        tracing::warn!("fleet: session ended; registering {} again", node.path);
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
            // Disconnected: nothing is read until connected again; then read at once.
            _ = state.changed() => match wait_connected(&mut state, shutdown).await {
                None => {}
                Some(Ended::Shutdown) => return true,
                Some(_) => return false,
            },
            _ = shutdown.changed() => return true,
        }
    }
}
