//! [`ProxyProcess`]: the real `lb-proxy` binary, started on a configuration the test wrote.

use std::ffi::OsString;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use lb_config::{Config, ListenAddr};
use nix::sys::signal::Signal;

use crate::child::DaemonChild;
use crate::{bin_path, free_port, wait_until, DEFAULT_WAIT};

mod setup;
pub(crate) use setup::listening_tcp_ports;
use setup::{listening_unix_paths, with_private_control_socket};

/// How long a start may take before the proxy is considered broken.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// How many times [`ProxyProcess::start_with`] picks new ports after a bind conflict.
const START_TRIES: usize = 5;

pub(crate) type Lines = Arc<Mutex<Vec<String>>>;

/// A running `lb-proxy -f FILE`. Its stdout (the access log) and stderr (operational messages)
/// are read line by line by background threads into shared lists. Dropping it stops the process
/// (SIGTERM, then SIGKILL after a grace period); when the test is panicking, the captured lines
/// are printed to help the diagnosis.
pub struct ProxyProcess {
    child: DaemonChild,
    /// Holds the configuration file; removed on drop.
    dir: tempfile::TempDir,
    config_path: PathBuf,
    tcp_ports: Vec<u16>,
    /// The master's control socket (`global.control_socket`).
    control_socket: PathBuf,
    /// The master's runtime socket (`global.runtime_socket`).
    runtime_socket: PathBuf,
    stdout: Lines,
    stderr: Lines,
    /// Set: the stderr reader stops reading (a log collector that is stuck).
    stderr_paused: Arc<AtomicBool>,
    readers: Vec<JoinHandle<()>>,
}

/// How to start the master, beyond its configuration: [`ProxyProcess::start_with_options`].
#[derive(Debug, Clone, Default)]
pub struct StartOptions {
    /// The binary to run instead of this build's `lb-proxy` (a copy, to replace it later: a
    /// reload execs the path the master was started from).
    pub binary: Option<PathBuf>,
    /// Environment variables added to the master's (e.g. `NOTIFY_SOCKET`).
    pub env: Vec<(OsString, OsString)>,
    /// The capacity in bytes of the pipe the master's stderr goes to (Linux's `F_SETPIPE_SZ`,
    /// rounded up to a page), to fill it in a few lines.
    pub stderr_pipe_bytes: Option<i32>,
}

impl StartOptions {
    /// Options that add `name=value` to the master's environment.
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> StartOptions {
        self.env.push((name.into(), value.into()));
        self
    }

    /// Options that give the master's stderr a pipe of `bytes`.
    pub fn stderr_pipe_bytes(mut self, bytes: i32) -> StartOptions {
        self.stderr_pipe_bytes = Some(bytes);
        self
    }

    /// Options that run `binary` instead of this build's `lb-proxy`.
    pub fn binary(mut self, binary: impl Into<PathBuf>) -> StartOptions {
        self.binary = Some(binary.into());
        self
    }
}

impl fmt::Debug for ProxyProcess {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ProxyProcess")
            .field("pid", &self.child.pid())
            .field("config", &self.config_path)
            .field("ports", &self.tcp_ports)
            .finish_non_exhaustive()
    }
}

/// Why a proxy did not start.
#[derive(Debug)]
pub enum StartError {
    /// The configuration does not load (the test wrote a bad one).
    Config(String),
    /// A listening address was taken by someone else between picking and binding it.
    AddressInUse { stderr: String },
    /// The process exited during start.
    Exited { status: ExitStatus, stderr: String },
    /// The process runs but did not listen on every frontend address, or have a ready worker,
    /// in time.
    NotListening { missing: String, stderr: String },
}

impl fmt::Display for StartError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StartError::Config(e) => write!(f, "the test's configuration does not load:\n{e}"),
            StartError::AddressInUse { stderr } => {
                write!(f, "lb-proxy could not bind (address in use); stderr:\n{stderr}")
            }
            StartError::Exited { status, stderr } => {
                write!(f, "lb-proxy exited during start ({status}); stderr:\n{stderr}")
            }
            StartError::NotListening { missing, stderr } => {
                write!(f, "lb-proxy did not listen on {missing} within {START_TIMEOUT:?}; stderr:\n{stderr}")
            }
        }
    }
}

impl std::error::Error for StartError {}

impl ProxyProcess {
    /// Starts lb-proxy on `yaml` and waits until it listens on every frontend address.
    /// Panics when it cannot (see [`StartError`]); prefer [`ProxyProcess::start_with`], which
    /// retries with fresh ports when a picked port was taken meanwhile.
    pub fn start(yaml: &str) -> ProxyProcess {
        ProxyProcess::try_start(yaml).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Picks `ports` free ports, builds the configuration with `yaml(&ports)` and starts it;
    /// when lb-proxy reports an address in use, tries again with new ports (5 tries).
    pub fn start_with(ports: usize, yaml: impl Fn(&[u16]) -> String) -> ProxyProcess {
        ProxyProcess::start_with_options(ports, &StartOptions::default(), yaml)
    }

    /// [`ProxyProcess::start_with`], the master started with `env` added to its environment.
    pub fn start_with_env(ports: usize, env: &[(&str, &str)], yaml: impl Fn(&[u16]) -> String) -> ProxyProcess {
        let options = env.iter().fold(StartOptions::default(), |o, (name, value)| o.env(*name, *value));
        ProxyProcess::start_with_options(ports, &options, yaml)
    }

    /// [`ProxyProcess::start_with`] with [`StartOptions`] (another binary, more environment).
    pub fn start_with_options(ports: usize, options: &StartOptions, yaml: impl Fn(&[u16]) -> String) -> ProxyProcess {
        let mut last = None;
        for _ in 0..START_TRIES {
            let picked: Vec<u16> = (0..ports).map(|_| free_port()).collect();
            match ProxyProcess::try_start_with_options(&yaml(&picked), options) {
                Ok(proxy) => return proxy,
                Err(e @ StartError::AddressInUse { .. }) => last = Some(e),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{}", last.map_or_else(String::new, |e| e.to_string()));
    }

    /// Starts lb-proxy on `yaml`, written to `lb-proxy.yaml` in a temporary directory (relative
    /// paths in it are taken from there), and waits until every frontend address listens.
    pub fn try_start(yaml: &str) -> Result<ProxyProcess, StartError> {
        ProxyProcess::try_start_with_options(yaml, &StartOptions::default())
    }

    /// [`ProxyProcess::try_start`] with [`StartOptions`].
    pub fn try_start_with_options(yaml: &str, options: &StartOptions) -> Result<ProxyProcess, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("lb-proxy-test-")
            .tempdir()
            .map_err(|e| StartError::Config(format!("creating a temporary directory: {e}")))?;
        let config_path = dir.path().join("lb-proxy.yaml");
        let yaml = with_private_control_socket(yaml, dir.path());
        std::fs::write(&config_path, yaml)
            .map_err(|e| StartError::Config(format!("writing {}: {e}", config_path.display())))?;
        let config = Config::load(&config_path).map_err(|e| StartError::Config(e.to_string()))?;
        let mut tcp_ports = Vec::new();
        let mut unix_paths = Vec::new();
        for address in config.listen_addrs() {
            match address {
                ListenAddr::Tcp(a) | ListenAddr::Udp(a) => tcp_ports.push(a.port()),
                ListenAddr::Unix(p) => unix_paths.push(p),
            }
        }

        let control_socket = dir.path().join(&config.global.supervision.control_socket);
        let runtime_socket =
            dir.path().join(config.global.supervision.runtime.socket.as_deref().unwrap_or(Path::new("")));
        let binary = options.binary.clone().unwrap_or_else(|| bin_path("lb-proxy"));
        let mut child = Command::new(binary)
            .arg("-f")
            .arg(&config_path)
            .env("LB_LOG", crate::child::log_filter())
            .envs(options.env.iter().map(|(k, v)| (k, v)))
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StartError::Config(format!("spawning lb-proxy: {e}")))?;
        let stdout: Lines = Arc::default();
        let stderr: Lines = Arc::default();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(read_lines(out, stdout.clone(), "lb-proxy-stdout"));
        }
        let stderr_paused = Arc::new(AtomicBool::new(false));
        if let Some(err) = child.stderr.take() {
            if let Some(bytes) = options.stderr_pipe_bytes {
                nix::fcntl::fcntl(err.as_fd(), nix::fcntl::FcntlArg::F_SETPIPE_SZ(bytes))
                    .map_err(|e| StartError::Config(format!("resizing the stderr pipe: {e}")))?;
            }
            readers.push(read_lines_unless_paused(err, stderr.clone(), "lb-proxy-stderr", Some(stderr_paused.clone())));
        }
        let mut proxy = ProxyProcess {
            child: DaemonChild::new(child),
            dir,
            config_path,
            tcp_ports,
            control_socket,
            runtime_socket,
            stdout,
            stderr,
            stderr_paused,
            readers,
        };

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = proxy.try_exit() {
                // Let the reader threads take in everything the process wrote.
                for reader in proxy.readers.drain(..) {
                    let _ = reader.join();
                }
                let stderr = proxy.stderr().join("\n");
                let lower = stderr.to_ascii_lowercase();
                return Err(if lower.contains("address already in use") || lower.contains("os error 98") {
                    StartError::AddressInUse { stderr }
                } else {
                    StartError::Exited { status, stderr }
                });
            }
            let mut missing = proxy.missing_listeners(&unix_paths);
            if !crate::child::worker_ready(&proxy.stderr) {
                missing.push("(a ready worker)".to_owned());
            }
            if missing.is_empty() {
                return Ok(proxy);
            }
            if Instant::now() >= deadline {
                let stderr = proxy.stderr().join("\n");
                return Err(StartError::NotListening { missing: missing.join(", "), stderr });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// The addresses lb-proxy should listen on but does not (yet), judged from `/proc`: a socket
    /// in LISTEN state on the port (or path) whose inode is one of this process's fds.
    fn missing_listeners(&self, unix_paths: &[PathBuf]) -> Vec<String> {
        let inodes = crate::procfs::socket_inodes(self.pid());
        let tcp = listening_tcp_ports(&inodes);
        let unix = listening_unix_paths(&inodes);
        let mut missing: Vec<String> =
            self.tcp_ports.iter().filter(|p| !tcp.contains(p)).map(|p| format!("port {p}")).collect();
        missing
            .extend(unix_paths.iter().filter(|p| !unix.contains(p.as_path())).map(|p| format!("unix:{}", p.display())));
        missing
    }

    /// The first TCP frontend port, in the order the configuration lists them.
    pub fn port(&self) -> u16 {
        *self.tcp_ports.first().expect("the configuration has no TCP bind")
    }

    /// `127.0.0.1:` + [`ProxyProcess::port`].
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port()))
    }

    /// Every TCP frontend port, in configuration order.
    pub fn ports(&self) -> &[u16] {
        &self.tcp_ports
    }

    /// The temporary directory holding the configuration file.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The master's control socket (the private one [`ProxyProcess`] put in the configuration,
    /// unless the test named one).
    pub fn control_socket(&self) -> &Path {
        &self.control_socket
    }

    /// The master's runtime socket (`global.runtime_socket`).
    pub fn runtime_socket(&self) -> &Path {
        &self.runtime_socket
    }

    /// Replaces the configuration file with `yaml` (given the same private control socket as at
    /// start), atomically: written beside it, then renamed over it. Takes effect at the next
    /// reload.
    pub fn write_config(&self, yaml: &str) {
        let yaml = with_private_control_socket(yaml, self.dir.path());
        let temporary = self.dir.path().join(".lb-proxy.yaml.new");
        std::fs::write(&temporary, yaml).expect("writing the new configuration");
        std::fs::rename(&temporary, &self.config_path).expect("renaming the new configuration into place");
    }

    /// `lbctl reload` on this master (see [`crate::lbctl::reload`]).
    pub async fn reload(&self) -> Result<crate::lbctl::Reloaded, crate::lbctl::LbctlOutput> {
        crate::lbctl::reload(&self.control_socket).await
    }

    /// `lbctl ARGS…` on this master.
    pub async fn lbctl(&self, args: &[&str]) -> crate::lbctl::LbctlOutput {
        crate::lbctl::lbctl(&self.control_socket, args).await
    }

    /// `show proc`, straight over the control socket.
    pub async fn show_proc(&self) -> crate::lbctl::ProcTable {
        crate::lbctl::show_proc_direct(&self.control_socket).await.unwrap_or_else(|e| panic!("show proc: {e:#}"))
    }

    /// The current worker's pid, from `show proc` (None while there is none).
    pub async fn current_worker(&self) -> Option<u32> {
        let table = self.show_proc().await;
        table.workers.iter().find(|w| w.role == crate::lbctl::Role::Current).map(|w| w.pid)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Every access-log line (stdout) so far.
    pub fn access_log(&self) -> Vec<String> {
        snapshot(&self.stdout)
    }

    /// Every stderr line so far.
    pub fn stderr(&self) -> Vec<String> {
        snapshot(&self.stderr)
    }

    /// Waits (10 s) for an access-log line matching `pred` and returns it; panics with the log
    /// so far when none comes.
    pub async fn wait_for_log(&self, pred: impl Fn(&str) -> bool) -> String {
        match self.wait_for_log_within(DEFAULT_WAIT, pred).await {
            Some(line) => line,
            None => panic!(
                "no matching access-log line within {DEFAULT_WAIT:?}; access log:\n{}\nstderr:\n{}",
                self.access_log().join("\n"),
                self.stderr().join("\n")
            ),
        }
    }

    /// An access-log line matching `pred` within `within`, or `None`.
    pub async fn wait_for_log_within(&self, within: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        first_line_within(&self.stdout, within, pred).await
    }

    /// Waits (10 s) for a stderr line matching `pred` and returns it; panics when none comes.
    pub async fn wait_for_stderr(&self, pred: impl Fn(&str) -> bool) -> String {
        first_line_within(&self.stderr, DEFAULT_WAIT, pred).await.unwrap_or_else(|| {
            panic!("no matching stderr line within {DEFAULT_WAIT:?}; stderr:\n{}", self.stderr().join("\n"))
        })
    }

    /// Waits (10 s) until the access log has at least `n` lines; returns them all.
    pub async fn wait_for_log_lines(&self, n: usize) -> Vec<String> {
        if !wait_until(DEFAULT_WAIT, || lock(&self.stdout).len() >= n).await {
            panic!(
                "expected at least {n} access-log lines within {DEFAULT_WAIT:?}, got {}:\n{}",
                self.access_log().len(),
                self.access_log().join("\n")
            );
        }
        self.access_log()
    }

    /// Sends `signal` to the process.
    pub fn kill_with(&self, signal: Signal) {
        self.child.kill_with(signal);
    }

    /// The exit status, if the process has exited (reaps it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_exit()
    }

    /// Waits up to `within` for the process to exit.
    pub async fn wait_exit(&mut self, within: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.try_exit() {
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            tokio::time::sleep(crate::POLL_EVERY).await;
        }
    }

    /// The resident set size now (`VmRSS`), in KiB.
    pub fn rss_kib(&self) -> Option<u64> {
        crate::procfs::status_kib(self.pid(), "VmRSS:")
    }

    /// The peak resident set size so far (`VmHWM`), in KiB: no sampling can miss a spike.
    pub fn peak_rss_kib(&self) -> Option<u64> {
        // The master serves nothing: its workers hold the connections.
        std::iter::once(self.pid())
            .chain(self.worker_pids())
            .filter_map(|pid| crate::procfs::status_kib(pid, "VmHWM:"))
            .max()
    }

    /// The worker processes of this master now (its children).
    pub fn worker_pids(&self) -> Vec<u32> {
        crate::procfs::children_of(self.pid())
    }

    /// `pid` is this master or one of its workers (access-log lines carry the worker's pid).
    pub fn is_own_pid(&self, pid: u32) -> bool {
        pid == self.pid() || crate::procfs::parent_of(pid) == Some(self.pid())
    }

    /// Stops the process now (SIGTERM, then SIGKILL after a grace) and returns its status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.child.stop()
    }

    /// Stops reading the master's stderr, as a stuck log collector would: once its pipe is full,
    /// the master's writes to stderr cannot complete.
    pub fn pause_stderr(&self) {
        self.stderr_paused.store(true, Ordering::Relaxed);
    }

    /// Reads the master's stderr again.
    pub fn resume_stderr(&self) {
        self.stderr_paused.store(false, Ordering::Relaxed);
    }
}

/// Runs `lb-proxy ARGS` in `dir` to completion (for `-c`, or a start expected to fail) and
/// returns its output; kills it and panics if it is still running after `within`.
pub fn run_lb_proxy(args: &[&str], dir: &Path, within: Duration) -> std::process::Output {
    crate::child::run_to_completion("lb-proxy", args, dir, within)
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        self.resume_stderr();
        self.stop();
        if std::thread::panicking() {
            eprintln!("---- lb-proxy (pid {}) config {}:", self.pid(), self.config_path.display());
            eprintln!("{}", std::fs::read_to_string(&self.config_path).unwrap_or_default());
            eprintln!("---- lb-proxy stderr (last 60 lines):");
            for line in tail(&self.stderr(), 60) {
                eprintln!("{line}");
            }
            eprintln!("---- lb-proxy access log (last 60 lines):");
            for line in tail(&self.access_log(), 60) {
                eprintln!("{line}");
            }
        }
    }
}

pub(crate) fn tail(lines: &[String], n: usize) -> &[String] {
    &lines[lines.len().saturating_sub(n)..]
}

pub(crate) fn lock(lines: &Lines) -> std::sync::MutexGuard<'_, Vec<String>> {
    lines.lock().unwrap_or_else(|e| e.into_inner())
}

pub(crate) fn snapshot(lines: &Lines) -> Vec<String> {
    lock(lines).clone()
}

/// The first of `lines` matching `pred`, waiting up to `within` for one to come.
pub(crate) async fn first_line_within(lines: &Lines, within: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
    let mut found = None;
    wait_until(within, || {
        found = lock(lines).iter().find(|l| pred(l)).cloned();
        found.is_some()
    })
    .await;
    found
}

pub(crate) fn read_lines(from: impl Read + Send + 'static, into: Lines, name: &str) -> JoinHandle<()> {
    read_lines_unless_paused(from, into, name, None)
}

/// [`read_lines`], reading nothing while `paused` is set.
fn read_lines_unless_paused(
    from: impl Read + Send + 'static,
    into: Lines,
    name: &str,
    paused: Option<Arc<AtomicBool>>,
) -> JoinHandle<()> {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let mut reader = BufReader::new(from);
            let mut buf = Vec::new();
            loop {
                while paused.as_ref().is_some_and(|p| p.load(Ordering::Relaxed)) {
                    std::thread::sleep(Duration::from_millis(10));
                }
                buf.clear();
                match reader.read_until(b'\n', &mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {
                        let line = String::from_utf8_lossy(&buf);
                        let line = line.strip_suffix('\n').unwrap_or(&line);
                        let line = line.strip_suffix('\r').unwrap_or(line);
                        lock(&into).push(line.to_owned());
                    }
                }
            }
        })
        .expect("spawning a log reader thread")
}

/// For tests that start lb-proxy themselves (as another user, with its output in a file):
/// `dir/lb-proxy.yaml` with its control socket `dir/master.sock` and runtime socket
/// `dir/runtime.sock`, one thread, frontend `fe` on `127.0.0.1:port`, backend `be` with server
/// `s1` at `server`. Returns the file's path.
pub fn write_config_in(dir: &Path, port: u16, server: SocketAddr) -> PathBuf {
    let config = dir.join("lb-proxy.yaml");
    let yaml = format!(
        "global: {{ worker_threads: 1, control_socket: {}, runtime_socket: {} }}\n\
         frontends: [ {{ name: fe, bind: [\"127.0.0.1:{port}\"], default_backend: be }} ]\n\
         backends: [ {{ name: be, servers: [ {{ name: s1, address: \"{server}\" }} ] }} ]\n",
        dir.join("master.sock").display(),
        dir.join("runtime.sock").display(),
    );
    std::fs::write(&config, yaml).unwrap_or_else(|e| panic!("writing {}: {e}", config.display()));
    config
}

/// The configuration most end-to-end tests start from: `head` (sections such as `global:` and
/// `defaults:`, written first), frontend `fe` on the first port picked with `frontend` added to it
/// (YAML lines, may be empty), and backend `be` with one server, `(name, address)`.
pub fn single_backend(head: &str, frontend: &str, server: (&str, SocketAddr)) -> impl Fn(&[u16]) -> String {
    let head = head.to_owned();
    let frontend: String = frontend.lines().map(|line| format!("    {line}\n")).collect();
    let (name, address) = (server.0.to_owned(), server.1);
    move |ports: &[u16]| {
        format!(
            "{head}frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{fe}\"]\n    default_backend: be\n{frontend}\
             backends:\n  - name: be\n    servers: [ {{ name: {name}, address: \"{address}\" }} ]\n",
            fe = ports[0]
        )
    }
}
