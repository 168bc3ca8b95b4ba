//! lb-tls as lb-supervisor runs it.

use std::path::Path;
use std::sync::Arc;

use lb_supervisor::{
    Daemon, ListenAddr, Listeners, MasterLink, Runtime, SecretSpec, Serving, Shutdown, Supervision, UnixAccess,
};

use crate::config::Config;
use crate::tickets::KEY_BYTES;

/// The lb-tls daemon, for [`lb_supervisor::main`].
#[derive(Debug)]
pub struct TlsDaemon;

impl Daemon for TlsDaemon {
    const NAME: &'static str = "lb-tls";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    type Config = Config;

    /// `0.1.0 (OpenSSL 1.1.1 (compatible; AWS-LC 1.55.0))`: which library terminates TLS.
    fn version() -> String {
        format!("{} ({})", Self::VERSION, crate::tls_library())
    }

    fn load(path: &Path) -> Result<Config, String> {
        let config = Config::load(path).map_err(|e| e.to_string())?;
        for warning in &config.warnings {
            warn(warning);
        }
        Ok(config)
    }

    fn supervision(config: &Config) -> &Supervision {
        &config.global.supervision
    }

    fn listen(config: &Config) -> (Vec<ListenAddr>, Vec<UnixAccess>) {
        let supervision = &config.global.supervision;
        // A Unix frontend (behind a local load balancer): its user and group may connect.
        let unix_access = config
            .frontends
            .iter()
            .filter_map(|f| match &f.bind {
                ListenAddr::Unix(path) => Some(UnixAccess {
                    path: path.clone(),
                    mode: 0o660,
                    user: supervision.user.clone(),
                    group: supervision.group.clone(),
                }),
                ListenAddr::Tcp(_) | ListenAddr::Udp(_) => None,
            })
            .collect();
        (config.listen_addrs(), unix_access)
    }

    fn secret(config: &Config) -> Option<SecretSpec> {
        ticket_keys_from_master(config)
    }

    /// [`start`](Self::start), with the master's ticket keys in place before the first
    /// handshake and swapped in at every rotation while the worker serves.
    async fn start_supervised(
        config: Arc<Config>,
        listeners: Listeners,
        shutdown: Shutdown,
        master: MasterLink,
    ) -> Result<(Serving, Option<Arc<dyn Runtime>>), String> {
        if let Some(mut secrets) = master.secrets() {
            let store = config.tickets.clone();
            store.take_secrets(&secrets.borrow_and_update());
            tokio::spawn(async move {
                while secrets.changed().await.is_ok() {
                    let set = secrets.borrow_and_update().clone();
                    store.take_secrets(&set);
                }
            });
        }
        let server = crate::start(listeners, shutdown, config).await.map_err(|e| e.to_string())?;
        let runtime: Arc<dyn Runtime> = server.runtime();
        Ok((serving(server), Some(runtime)))
    }

    async fn start(config: Arc<Config>, listeners: Listeners, shutdown: Shutdown) -> Result<Serving, String> {
        Ok(serving(crate::start(listeners, shutdown, config).await.map_err(|e| e.to_string())?))
    }
}

fn serving(server: crate::Server) -> Serving {
    let connections = server.connections_counter();
    Serving { connections: Box::new(connections), done: Box::pin(server.wait()) }
}

/// What the master makes for ticket keys: an 80-byte key every `ticket_key_rotation`, each
/// kept `ticket_lifetime` after it is replaced (a ticket it made stays good for its whole
/// lifetime); nothing when tickets are off everywhere or the keys come from files.
fn ticket_keys_from_master(config: &Config) -> Option<SecretSpec> {
    let used = config.frontends.iter().any(|f| f.tls.session_tickets);
    let millis = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
    (used && config.tickets.follows_master()).then(|| SecretSpec {
        len: KEY_BYTES,
        rotate_every_ms: millis(config.global.ticket_key_rotation),
        keep_for_ms: millis(config.global.ticket_lifetime),
    })
}

/// A warning while loading: through tracing when the process logs (master, worker), else
/// straight to stderr (`-c`), never panicking on a closed stderr.
fn warn(line: &str) {
    if tracing::dispatcher::has_been_set() {
        tracing::warn!("{line}");
    } else {
        use std::io::Write;
        let _ = writeln!(std::io::stderr().lock(), "lb-tls: warning: {line}");
    }
}
