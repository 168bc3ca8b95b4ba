//! lb-tls as lb-supervisor runs it.

use std::path::Path;
use std::sync::Arc;

use lb_supervisor::{
    Daemon, ListenAddr, Listeners, MasterLink, Plan, Runtime, RuntimeEndpoints, SecretSpec, Serving, Settings,
    Shutdown, UnixAccess,
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

    fn plan(config: &Config) -> Plan {
        let global = &config.global;
        Plan {
            listen: config.listen_addrs(),
            control_socket: global.control_socket.clone(),
            user: global.user.clone(),
            group: global.group.clone(),
            worker_threads: global.worker_threads,
            // A Unix frontend (behind a local load balancer): its user and group may connect.
            unix_access: config
                .frontends
                .iter()
                .filter_map(|f| match &f.bind {
                    ListenAddr::Unix(path) => Some(UnixAccess {
                        path: path.clone(),
                        mode: 0o660,
                        user: global.user.clone(),
                        group: global.group.clone(),
                    }),
                    ListenAddr::Tcp(_) => None,
                })
                .collect(),
            settings: Settings {
                secret: ticket_keys_from_master(config),
                ..Settings::new(global.max_old_workers, global.hard_stop_after, global.worker_start_timeout)
            },
        }
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

    fn runtime_endpoints(config: &Config) -> RuntimeEndpoints {
        RuntimeEndpoints { socket: config.global.runtime_socket.clone(), tcp: config.global.runtime_address }
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
