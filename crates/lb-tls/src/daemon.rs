//! lb-tls as lb-supervisor runs it.

use std::path::Path;
use std::sync::Arc;

use lb_supervisor::{Daemon, Listeners, Plan, Serving, Settings, Shutdown};

use crate::config::Config;

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
            settings: Settings::new(global.max_old_workers, global.hard_stop_after, global.worker_start_timeout),
        }
    }

    async fn start(config: Arc<Config>, listeners: Listeners, shutdown: Shutdown) -> Result<Serving, String> {
        let server = crate::start(listeners, shutdown, config).await.map_err(|e| e.to_string())?;
        let connections = server.connections_counter();
        Ok(Serving { connections: Box::new(connections), done: Box::pin(server.wait()) })
    }
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
