//! Registration, the API servers' side, registrar style: an ephemeral node `<path>/<name>`
//! holding the registrar JSON, kept while the process runs, created again after a session
//! expiry, deleted on shutdown. Used by `lbctl register` (for operators, demos and tests).

use std::net::IpAddr;
use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::{Acls, Client, CreateMode, SessionState};

use crate::node::registrar_json;
use crate::Error;

/// What to register.
#[derive(Debug, Clone)]
pub struct Registration {
    /// `host:port,…[/chroot]`.
    pub zookeeper: String,
    pub path: String,
    pub name: String,
    pub address: IpAddr,
    pub record_type: String,
    pub ports: Vec<u16>,
    pub session_timeout: Duration,
}

impl Registration {
    pub fn node_path(&self) -> String {
        format!("{}/{}", self.path.trim_end_matches('/'), self.name)
    }

    pub fn data(&self) -> String {
        registrar_json(&self.record_type, self.address, &self.ports, 60)
    }
}

/// Registers and keeps the registration until `shutdown` turns true, then deletes it.
/// `registered` is told each time the node is (re)created.
pub async fn run(
    registration: Registration,
    mut shutdown: watch::Receiver<bool>,
    registered: Option<tokio::sync::mpsc::UnboundedSender<()>>,
) -> Result<(), Error> {
    let mut retry = Duration::from_millis(200);
    loop {
        let client = tokio::select! {
            c = Client::connector().with_session_timeout(registration.session_timeout).connect(&registration.zookeeper) => c,
            _ = shutdown.changed() => return Ok(()),
        };
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("ZooKeeper {}: {e}; retrying in {retry:?}", registration.zookeeper);
                tokio::select! {
                    () = tokio::time::sleep(retry) => {}
                    _ = shutdown.changed() => return Ok(()),
                }
                retry = (retry * 2).min(Duration::from_secs(30));
                continue;
            }
        };
        retry = Duration::from_millis(200);
        let (node, data) = (registration.node_path(), registration.data());
        if let Err(e) = create_ephemeral(&client, &registration.path, &node, data.as_bytes()).await {
            tracing::warn!("{e}; retrying");
            tokio::time::sleep(retry).await;
            continue;
        }
        tracing::info!("registered {} as {}", registration.node_path(), registration.data());
        if let Some(tx) = &registered {
            let _ = tx.send(());
        }
        let mut state = client.state_watcher();
        loop {
            tokio::select! {
                s = state.changed() => match s {
                    SessionState::Expired | SessionState::Closed | SessionState::AuthFailed => {
                        tracing::warn!("session ended ({s:?}): registering again");
                        break;
                    }
                    _ => {}
                },
                _ = shutdown.changed() => {
                    let deleted = client.delete(&registration.node_path(), None).await;
                    if let Err(e) = deleted {
                        tracing::warn!("deleting {}: {e}", registration.node_path());
                    }
                    return Ok(());
                }
            }
        }
    }
}

/// Creates `dir` and its parents (persistent) and the ephemeral node `path` in it; a node left
/// by an earlier session of ours (or anyone) is replaced.
pub(crate) async fn create_ephemeral(client: &Client, dir: &str, path: &str, data: &[u8]) -> Result<(), Error> {
    let zk = |what: String| move |source| Error::Zookeeper { what, source };
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match client.mkdir(dir, &persistent).await {
        Ok(()) | Err(zookeeper_client::Error::NodeExists) => {}
        Err(e) => return Err(zk(format!("creating {dir}"))(e)),
    }
    let ephemeral = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    loop {
        match client.create(path, data, &ephemeral).await {
            Ok(_) => return Ok(()),
            Err(zookeeper_client::Error::NodeExists) => match client.delete(path, None).await {
                Ok(()) | Err(zookeeper_client::Error::NoNode) => {}
                Err(e) => return Err(zk(format!("replacing {path}"))(e)),
            },
            Err(e) => return Err(zk(format!("creating {path}"))(e)),
        }
    }
}
