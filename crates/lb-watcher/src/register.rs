//! Registration, the API servers' side, registrar style: an ephemeral node `<path>/<name>`
//! holding the registrar JSON, kept while the process runs, created again after a session
//! expiry, deleted on shutdown. Used by `lbctl register` (for operators, demos and tests).

use std::net::IpAddr;
use std::time::Duration;

use tokio::sync::watch;
use zookeeper_client::{Acls, Client, CreateMode};

use crate::node::registrar_json;
use crate::zk::{wait_connected, Ended};
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
    let node = Node {
        connect_string: registration.zookeeper.clone(),
        session_timeout: registration.session_timeout,
        retry_max: Duration::from_secs(30),
        dir: registration.path.clone(),
        path: registration.node_path(),
        data: registration.data().into_bytes(),
        what: "",
    };
    while let Some(client) = node.session(&mut shutdown).await {
        tracing::info!("registered {} as {}", registration.node_path(), registration.data());
        if let Some(tx) = &registered {
            let _ = tx.send(());
        }
        let mut state = client.state_watcher();
        let ended = loop {
            tokio::select! {
                // Disconnected: the session may yet come back; ended: a new one, a new node.
                _ = state.changed() => match wait_connected(&mut state, &mut shutdown).await {
                    None => {}
                    Some(Ended::Shutdown) => break true,
                    Some(_) => {
                        tracing::warn!("session ended ({:?}): registering again", state.peek_state());
                        break false;
                    }
                },
                _ = shutdown.changed() => break true,
            }
        };
        if ended {
            node.delete(&client).await;
            return Ok(());
        }
    }
    Ok(())
}

/// An ephemeral node kept registered across sessions: what `lbctl register` and lb-watcher's
/// fleet membership share.
pub(crate) struct Node {
    pub(crate) connect_string: String,
    pub(crate) session_timeout: Duration,
    pub(crate) retry_max: Duration,
    /// The node's parent (created persistent if missing), the node, its data.
    pub(crate) dir: String,
    pub(crate) path: String,
    pub(crate) data: Vec<u8>,
    /// Before each warning (`"fleet: "`).
    pub(crate) what: &'static str,
}

impl Node {
    /// A new session with the node created in it, retried with backoff up to `retry_max`;
    /// `None` when `shutdown` turned true first.
    pub(crate) async fn session(&self, shutdown: &mut watch::Receiver<bool>) -> Option<Client> {
        let mut retry = Duration::from_millis(200);
        loop {
            if *shutdown.borrow() {
                return None;
            }
            let client = crate::zk::connect(self.session_timeout, &self.connect_string, shutdown).await?;
            let created = match client {
                Ok(client) => create_ephemeral(&client, &self.dir, &self.path, &self.data).await.map(|()| client),
                Err(source) => Err(Error::Zookeeper { what: format!("connecting to {}", self.connect_string), source }),
            };
            match created {
                Ok(client) => return Some(client),
                Err(e) => tracing::warn!("{}{e}; retrying in {retry:?}", self.what),
            }
            tokio::select! {
                () = tokio::time::sleep(retry) => {}
                _ = shutdown.changed() => return None,
            }
            retry = (retry * 2).min(self.retry_max);
        }
    }

    /// Deletes the node on the way out, so that others see it gone now rather than at the
    /// session's expiry.
    pub(crate) async fn delete(&self, client: &Client) {
        if let Err(e) = client.delete(&self.path, None).await {
            tracing::warn!("{}deleting {}: {e}", self.what, self.path);
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
