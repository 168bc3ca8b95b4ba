//! lb-proxy as lb-supervisor runs it: how to load its configuration, what the master must bind
//! and keep, and how a worker starts serving.

use std::path::Path;
use std::sync::Arc;

use lb_config::Config;
use lb_supervisor::{Daemon, ListenAddr, Listeners, MasterLink, Runtime, Serving, Shutdown, Supervision, UnixAccess};

/// A Unix bind's mode unless the configuration says otherwise: the service's user and group
/// (lb-tls runs as the same) may connect, nobody else.
const UNIX_SOCKET_MODE: u32 = 0o660;

/// The lb-proxy daemon, for [`lb_supervisor::main`].
#[derive(Debug)]
pub struct ProxyDaemon;

impl Daemon for ProxyDaemon {
    const NAME: &'static str = "lb-proxy";
    const VERSION: &'static str = env!("CARGO_PKG_VERSION");
    type Config = Config;

    fn load(path: &Path) -> Result<Config, String> {
        Config::load(path).map_err(|e| e.to_string())
    }

    fn supervision(config: &Config) -> &Supervision {
        &config.global.supervision
    }

    fn listen(config: &Config) -> (Vec<ListenAddr>, Vec<UnixAccess>) {
        let supervision = &config.global.supervision;
        let unix_access = config
            .frontends
            .iter()
            .flat_map(|f| &f.binds)
            .filter_map(|b| match &b.address {
                ListenAddr::Unix(path) => Some(UnixAccess {
                    path: path.clone(),
                    mode: b.mode.unwrap_or(UNIX_SOCKET_MODE),
                    user: b.user.clone().or_else(|| supervision.user.clone()),
                    group: b.group.clone().or_else(|| supervision.group.clone()),
                }),
                ListenAddr::Tcp(_) | ListenAddr::Udp(_) => None,
            })
            .collect();
        (config.listen_addrs(), unix_access)
    }

    async fn start(config: Arc<Config>, listeners: Listeners, shutdown: Shutdown) -> Result<Serving, String> {
        Self::start_supervised(config, listeners, shutdown, MasterLink::detached()).await.map(|(serving, _)| serving)
    }

    async fn start_supervised(
        config: Arc<Config>,
        listeners: Listeners,
        shutdown: Shutdown,
        master: MasterLink,
    ) -> Result<(Serving, Option<Arc<dyn Runtime>>), String> {
        let server = crate::start_supervised(listeners, shutdown, config, master).await.map_err(|e| e.to_string())?;
        let connections = server.connections_counter();
        let runtime = server.runtime();
        Ok((Serving { connections: Box::new(connections), done: Box::pin(server.wait()) }, Some(runtime)))
    }
}
