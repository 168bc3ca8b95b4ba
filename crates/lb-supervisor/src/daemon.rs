//! The contract between lb-supervisor and a daemon ([`Daemon`], [`Supervision`], [`Serving`]),
//! the [`Plan`] built from it, and what the master and the workers both use (the usage exit
//! status, `say`). Below `master` and `worker`; the command line that picks between them is
//! `entry`'s.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::canary::CanarySettings;
use crate::runtime::{MasterLink, Runtime, RuntimeEndpoints};
use crate::{ListenAddr, Listeners, SecretSpec, Settings, Shutdown, UnixAccess};

/// Exit status for a usage error or a configuration that does not load at start (sysexits'
/// EX_USAGE); `-c` exits 1 on a bad configuration, as `haproxy -c` does.
pub(crate) const EXIT_USAGE: u8 = 64;

/// A daemon run by the supervisor: lb-proxy, lb-tls.
pub trait Daemon: 'static {
    /// The program name, for messages (`lb-proxy`).
    const NAME: &'static str;
    /// The version reported in `show proc`.
    const VERSION: &'static str;
    type Config: Send + Sync + 'static;

    /// The version as `-V` prints it and a worker reports it to `show proc`: [`VERSION`](Self::VERSION)
    /// and, by default, nothing else; a daemon adds what it is built with (lb-tls: its TLS library).
    fn version() -> String {
        Self::VERSION.to_owned()
    }

    /// Read and validate a configuration file. The error is shown to the operator as is, so it
    /// names the file, line and field.
    fn load(path: &Path) -> Result<Self::Config, String>;

    /// The supervisor's own settings in a loaded configuration: the `global` keys every daemon
    /// shares (sockets, user, threads, reload limits).
    fn supervision(config: &Self::Config) -> &Supervision;

    /// Every address to listen on, and the mode and owner of the Unix sockets among them.
    fn listen(config: &Self::Config) -> (Vec<ListenAddr>, Vec<UnixAccess>);

    /// Secrets the master makes, renews and hands to every worker (lb-tls: its ticket keys).
    /// None by default.
    fn secret(config: &Self::Config) -> Option<SecretSpec> {
        let _ = config;
        None
    }

    /// Start serving on `listeners` (exactly the addresses [`listen`](Self::listen) named): return
    /// once accepting, with a way to count connections and a future that ends when `shutdown`
    /// has been carried out (a drain completes when the last connection has ended).
    fn start(
        config: Arc<Self::Config>,
        listeners: Listeners,
        shutdown: Shutdown,
    ) -> impl Future<Output = Result<Serving, String>> + Send;

    /// What a worker calls: [`start`](Self::start), plus the daemon's answers to runtime
    /// commands (`None`: it has none, every command is refused). `master` lets the daemon ask
    /// the master for `show proc`. By default: `start`, and no runtime commands.
    fn start_supervised(
        config: Arc<Self::Config>,
        listeners: Listeners,
        shutdown: Shutdown,
        master: MasterLink,
    ) -> impl Future<Output = Result<(Serving, Option<Arc<dyn Runtime>>), String>> + Send {
        let _ = master;
        async move { Ok((Self::start(config, listeners, shutdown).await?, None)) }
    }
}

/// The `global` keys every supervised daemon has, validated: each daemon's configuration holds
/// one (lb-config's `supervision` checks them the same way for both schemas) and hands it over
/// through [`Daemon::supervision`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Supervision {
    /// The master's control socket. Read at master start; a change needs a restart.
    pub control_socket: PathBuf,
    /// The runtime socket and TCP address (HAProxy's CLI: `show stat`, `set server …`), read
    /// once when the master starts.
    pub runtime: RuntimeEndpoints,
    /// The user and group workers run as once they hold their sockets.
    pub user: Option<String>,
    pub group: Option<String>,
    /// Runtime threads of a worker; `None`: one per core.
    pub worker_threads: Option<usize>,
    /// Old workers kept draining at most; beyond, the oldest is stopped.
    pub max_old_workers: usize,
    /// An old worker still draining after this long is stopped (`None`: never).
    pub hard_stop_after: Option<Duration>,
    /// A new worker not serving within this long is a failed reload.
    pub worker_start_timeout: Duration,
    /// `global.canary`: every reload starts with a canary (`None`: only when asked).
    pub canary: Option<CanarySettings>,
}

impl Supervision {
    pub const DEFAULT_MAX_OLD_WORKERS: usize = 10;
    pub const DEFAULT_WORKER_START_TIMEOUT: Duration = Duration::from_secs(10);
}

/// What a configuration asks of the supervisor: built here only, from [`Daemon::supervision`],
/// [`Daemon::listen`] and [`Daemon::secret`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Plan {
    /// Every listening address, each bound once by the master.
    pub(crate) listen: Vec<ListenAddr>,
    pub(crate) control_socket: PathBuf,
    pub(crate) runtime: RuntimeEndpoints,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) worker_threads: Option<usize>,
    /// Mode, owner and group of the Unix sockets in `listen`, set by each new worker.
    pub(crate) unix_access: Vec<UnixAccess>,
    pub(crate) settings: Settings,
}

impl Plan {
    pub(crate) fn of<D: Daemon>(config: &D::Config) -> Plan {
        let supervision = D::supervision(config);
        let (listen, unix_access) = D::listen(config);
        let millis = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        Plan {
            listen,
            control_socket: supervision.control_socket.clone(),
            runtime: supervision.runtime.clone(),
            user: supervision.user.clone(),
            group: supervision.group.clone(),
            worker_threads: supervision.worker_threads,
            unix_access,
            settings: Settings {
                max_old_workers: supervision.max_old_workers,
                hard_stop_after_ms: supervision.hard_stop_after.map(millis),
                worker_start_timeout_ms: millis(supervision.worker_start_timeout),
                secret: D::secret(config),
                canary: supervision.canary.clone(),
            },
        }
    }
}

/// A started daemon, as the worker sees it.
pub struct Serving {
    /// Client connections open now (for `show proc`).
    pub connections: Box<dyn Fn() -> u64 + Send + Sync>,
    /// Ends once the shutdown asked for has been carried out.
    pub done: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl std::fmt::Debug for Serving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Serving").field("connections", &(self.connections)()).finish_non_exhaustive()
    }
}

/// Write one line to stderr, ignoring failure: a process whose stderr is gone (a closed pipe)
/// keeps serving (eprintln! would panic there), and a master whose stderr is slow does not wait
/// for it (see `lines`).
pub(crate) fn say(line: impl std::fmt::Display) {
    crate::lines::write_stderr(format!("{line}\n").as_bytes());
}
