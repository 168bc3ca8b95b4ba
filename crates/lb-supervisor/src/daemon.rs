//! The contract between lb-supervisor and a daemon, and the command line every daemon shares.
//!
//! ```text
//! lb-proxy -f FILE        master in the foreground (SMF's "child"/systemd's Type=notify)
//! lb-proxy -D -f FILE     master detached; returns once the first worker serves (SMF's contract)
//! lb-proxy -c -f FILE     check the configuration: exit 0, or 1 with the errors; binds nothing
//! ```
//! Workers are the same binary, started by the master as `--worker -f FILE`.

use std::ffi::OsString;
use std::future::Future;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use crate::runtime::{MasterLink, Runtime, RuntimeEndpoints};
use crate::{ListenAddr, Listeners, Settings, Shutdown, UnixAccess};

/// Exit status for a usage error or a configuration that does not load at start (sysexits'
/// EX_USAGE); `-c` exits 1 on a bad configuration, as `haproxy -c` does.
pub(crate) const EXIT_USAGE: u8 = 64;
const EXIT_CHECK_FAILED: u8 = 1;

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

#[derive(Debug, PartialEq, Eq)]
enum Mode {
    Master { config: PathBuf, detach: bool },
    Worker { config: PathBuf },
    Check { config: PathBuf },
    Version,
    Help,
}

fn usage(name: &str) -> String {
    format!(
        "usage: {name} -f FILE [-D] | -c -f FILE | -V
  -f FILE   the configuration file (YAML)
  -D        detach: return once the first worker serves (for SMF's contract model)
  -c        check the configuration and exit: 0 when valid, 1 with the errors; binds nothing
  -V        print the version and exit"
    )
}

fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Mode, String> {
    let (mut config, mut check, mut detach, mut worker) = (None, false, false, false);
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("-f") => config = Some(PathBuf::from(args.next().ok_or("-f needs a file")?)),
            Some("-c") => check = true,
            Some("-D") => detach = true,
            Some("--worker") => worker = true,
            Some("-V" | "--version") => return Ok(Mode::Version),
            Some("-h" | "--help") => return Ok(Mode::Help),
            _ => return Err(format!("unknown argument {arg:?}")),
        }
    }
    let config = config.ok_or("-f FILE is required")?;
    Ok(match (check, worker) {
        (true, _) => Mode::Check { config },
        (false, true) => Mode::Worker { config },
        (false, false) => Mode::Master { config, detach },
    })
}

/// The whole `main` of a daemon: parse the command line, then check, run the master, or run a
/// worker.
pub fn main<D: Daemon>() -> ExitCode {
    let mode = match parse(std::env::args_os().skip(1)) {
        Ok(mode) => mode,
        Err(e) => {
            say(format_args!("{}: {e}\n{}", D::NAME, usage(D::NAME)));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match mode {
        Mode::Help => {
            println!("{}", usage(D::NAME));
            ExitCode::SUCCESS
        }
        Mode::Version => {
            println!("{} {}", D::NAME, D::version());
            ExitCode::SUCCESS
        }
        Mode::Check { config } => match D::load(&config) {
            Ok(_) => {
                println!("Configuration file is valid");
                ExitCode::SUCCESS
            }
            Err(e) => {
                say(e);
                ExitCode::from(EXIT_CHECK_FAILED)
            }
        },
        Mode::Worker { config } => {
            init_tracing();
            crate::worker::run::<D>(&config)
        }
        Mode::Master { config, detach } => {
            init_tracing();
            crate::master::run::<D>(config, detach)
        }
    }
}

/// Operational messages go to stderr; `LB_LOG` sets the filter (`info` by default). Colours
/// only for a person at a terminal, never into journald or SMF's log files.
fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let ansi = std::io::stderr().is_terminal();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(ansi)
        .with_writer(std::io::stderr)
        // A log that cannot be written (the master that read a worker's stderr is gone) must
        // not take the process down: tracing would report it with eprintln!, which panics.
        .log_internal_errors(false)
        .try_init();
}

/// Write one line to stderr, ignoring failure: a process whose stderr is gone (a closed pipe)
/// keeps serving. eprintln! would panic there.
pub(crate) fn say(line: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_strs(args: &[&str]) -> Result<Mode, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn command_line() {
        assert_eq!(parse_strs(&["-f", "a"]), Ok(Mode::Master { config: "a".into(), detach: false }));
        assert_eq!(parse_strs(&["-D", "-f", "a"]), Ok(Mode::Master { config: "a".into(), detach: true }));
        assert_eq!(parse_strs(&["-c", "-f", "a"]), Ok(Mode::Check { config: "a".into() }));
        assert_eq!(parse_strs(&["--worker", "-f", "a"]), Ok(Mode::Worker { config: "a".into() }));
        assert_eq!(parse_strs(&["-V"]), Ok(Mode::Version));
        assert!(parse_strs(&[]).is_err());
        assert!(parse_strs(&["-x"]).is_err());
    }
}
