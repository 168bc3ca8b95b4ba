//! The contract between lb-supervisor and a daemon ([`Daemon`], [`Plan`], [`Serving`]) and what
//! the master and the workers both use (the usage exit status, `say`). Below `master` and
//! `worker`; the command line that picks between them is `entry`'s.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;

use crate::runtime::{MasterLink, Runtime, RuntimeEndpoints};
use crate::{ListenAddr, Listeners, Settings, Shutdown, UnixAccess};

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

    /// What the supervisor needs from a loaded configuration.
    fn plan(config: &Self::Config) -> Plan;

    /// Start serving on `listeners` (exactly the addresses [`plan`](Self::plan) named): return
    /// once accepting, with a way to count connections and a future that ends when `shutdown`
    /// has been carried out (a drain completes when the last connection has ended).
    fn start(
        config: Arc<Self::Config>,
        listeners: Listeners,
        shutdown: Shutdown,
    ) -> impl Future<Output = Result<Serving, String>> + Send;

    /// Where the master serves the runtime socket (HAProxy's CLI: `show stat`, `set server …`),
    /// read once when the master starts. None by default.
    fn runtime_endpoints(config: &Self::Config) -> RuntimeEndpoints {
        let _ = config;
        RuntimeEndpoints::default()
    }

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

/// What a configuration asks of the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Every listening address, each bound once by the master.
    pub listen: Vec<ListenAddr>,
    /// The master's control socket. Read at master start; a change needs a restart.
    pub control_socket: PathBuf,
    /// The user and group workers run as once they hold their sockets.
    pub user: Option<String>,
    pub group: Option<String>,
    /// Runtime threads of a worker; `None`: one per core.
    pub worker_threads: Option<usize>,
    /// Mode, owner and group of the Unix sockets in `listen`, set by each new worker.
    pub unix_access: Vec<UnixAccess>,
    pub settings: Settings,
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
