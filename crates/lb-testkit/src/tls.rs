//! [`TlsProcess`]: the real `lb-tls` binary, started on a configuration the test wrote, with
//! its stderr (handshake failures, reload messages) captured line by line.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use crate::child::DaemonChild;
use crate::proxy::{first_line_within, listening_tcp_ports, read_lines, snapshot, tail, Lines};
use crate::{bin_path, free_port, StartError, DEFAULT_WAIT};

const START_TIMEOUT: Duration = Duration::from_secs(10);
const START_TRIES: usize = 5;

/// A running `lb-tls -f FILE` in a temporary directory of its own (relative paths in the
/// configuration, such as `control_socket: master.sock`, are taken from there). Dropping it
/// stops the process (SIGTERM, then SIGKILL).
#[derive(Debug)]
pub struct TlsProcess {
    child: DaemonChild,
    dir: tempfile::TempDir,
    config_path: PathBuf,
    ports: Vec<u16>,
    stderr: Lines,
    readers: Vec<JoinHandle<()>>,
}

impl TlsProcess {
    /// Picks `ports` free ports, builds the configuration with `yaml(&ports)` (every picked port
    /// must be a frontend) and starts lb-tls; picks new ports when one was taken meanwhile.
    /// The configuration should say `control_socket: master.sock`.
    pub fn start_with(ports: usize, yaml: impl Fn(&[u16]) -> String) -> TlsProcess {
        let mut last = None;
        for _ in 0..START_TRIES {
            let picked: Vec<u16> = (0..ports).map(|_| free_port()).collect();
            match TlsProcess::try_start(&yaml(&picked), &picked) {
                Ok(p) => return p,
                Err(e @ StartError::AddressInUse { .. }) => last = Some(e),
                Err(e) => panic!("{e}"),
            }
        }
        panic!("{}", last.map_or_else(String::new, |e| e.to_string()));
    }

    /// Starts lb-tls on `yaml` and waits until it listens on every port of `ports`.
    pub fn try_start(yaml: &str, ports: &[u16]) -> Result<TlsProcess, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("lb-tls-test-")
            .tempdir()
            .map_err(|e| StartError::Config(format!("creating a temporary directory: {e}")))?;
        let config_path = dir.path().join("lb-tls.yaml");
        std::fs::write(&config_path, yaml)
            .map_err(|e| StartError::Config(format!("writing the configuration: {e}")))?;
        let mut child = Command::new(bin_path("lb-tls"))
            .arg("-f")
            .arg(&config_path)
            .env("LB_LOG", crate::child::log_filter())
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StartError::Config(format!("spawning lb-tls: {e}")))?;
        let stderr: Lines = Arc::default();
        let readers = child.stderr.take().map(|e| read_lines(e, stderr.clone(), "lb-tls-stderr")).into_iter().collect();
        let mut tls =
            TlsProcess { child: DaemonChild::new(child), dir, config_path, ports: ports.to_vec(), stderr, readers };
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Some(status) = tls.try_exit() {
                for reader in tls.readers.drain(..) {
                    let _ = reader.join();
                }
                let stderr = tls.stderr().join("\n");
                return Err(if stderr.contains("Address already in use") || stderr.contains("os error 98") {
                    StartError::AddressInUse { stderr }
                } else {
                    StartError::Exited { status, stderr }
                });
            }
            let listening = listening_tcp_ports(&crate::procfs::socket_inodes(tls.pid()));
            let mut missing: Vec<String> =
                tls.ports.iter().filter(|p| !listening.contains(p)).map(|p| format!("port {p}")).collect();
            if !crate::child::worker_ready(&tls.stderr) {
                missing.push("(a ready worker)".to_owned());
            }
            if missing.is_empty() {
                return Ok(tls);
            }
            if Instant::now() >= deadline {
                return Err(StartError::NotListening { missing: missing.join(", "), stderr: tls.stderr().join("\n") });
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// `127.0.0.1:` the first port.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.ports[0]))
    }

    pub fn ports(&self) -> &[u16] {
        &self.ports
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// The control socket, `master.sock` in the directory (as the configuration should say).
    pub fn control_socket(&self) -> PathBuf {
        self.dir.path().join("master.sock")
    }

    /// Replaces the configuration file atomically; takes effect at the next reload.
    pub fn write_config(&self, yaml: &str) {
        let temporary = self.dir.path().join(".lb-tls.yaml.new");
        std::fs::write(&temporary, yaml).expect("writing the new configuration");
        std::fs::rename(&temporary, &self.config_path).expect("renaming the new configuration into place");
    }

    /// `lbctl reload` on this master.
    pub async fn reload(&self) -> Result<crate::lbctl::Reloaded, crate::lbctl::LbctlOutput> {
        crate::lbctl::reload(&self.control_socket()).await
    }

    /// The current worker's pid, from `show proc`.
    pub async fn current_worker(&self) -> Option<u32> {
        let table = crate::lbctl::show_proc_direct(&self.control_socket()).await.ok()?;
        table.workers.iter().find(|w| w.role == crate::lbctl::Role::Current).map(|w| w.pid)
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// The worker processes now.
    pub fn worker_pids(&self) -> Vec<u32> {
        crate::procfs::children_of(self.pid())
    }

    /// Every stderr line so far.
    pub fn stderr(&self) -> Vec<String> {
        snapshot(&self.stderr)
    }

    /// A stderr line matching `pred` within `within`, or `None`.
    pub async fn wait_for_stderr_within(&self, within: Duration, pred: impl Fn(&str) -> bool) -> Option<String> {
        first_line_within(&self.stderr, within, pred).await
    }

    /// Waits (10 s) for a stderr line matching `pred`; panics with stderr when none comes.
    pub async fn wait_for_stderr(&self, pred: impl Fn(&str) -> bool) -> String {
        match self.wait_for_stderr_within(DEFAULT_WAIT, pred).await {
            Some(line) => line,
            None => panic!("no matching stderr line within {DEFAULT_WAIT:?}; stderr:\n{}", self.stderr().join("\n")),
        }
    }

    /// Sends `signal` to the process.
    pub fn kill_with(&self, signal: Signal) {
        self.child.kill_with(signal);
    }

    /// The exit status, if the process has exited (reaps it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        self.child.try_exit()
    }

    /// Stops the process now (SIGTERM, then SIGKILL after a grace) and returns its status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        self.child.stop()
    }
}

impl Drop for TlsProcess {
    fn drop(&mut self) {
        self.stop();
        if std::thread::panicking() {
            eprintln!("---- lb-tls (pid {}) config {}:", self.pid(), self.config_path.display());
            eprintln!("{}", std::fs::read_to_string(&self.config_path).unwrap_or_default());
            eprintln!("---- lb-tls stderr (last 60 lines):");
            for line in tail(&self.stderr(), 60) {
                eprintln!("{line}");
            }
        }
    }
}

/// Runs `lb-tls ARGS` in `dir` to completion (`-c`, or a start that must fail).
pub fn run_lb_tls(args: &[&str], dir: &Path, within: Duration) -> std::process::Output {
    crate::child::run_to_completion("lb-tls", args, dir, within)
}

/// lb-tls in front of lb-proxy in front of one server, as deployed: lb-tls writes PROXY v2 to
/// an `accept_proxy`, `tls: true` frontend (`fe`, backend `be`, server `s1`).
#[derive(Debug)]
pub struct TlsChain {
    pub proxy: crate::ProxyProcess,
    pub tls: TlsProcess,
    /// The CA and the `api.example.test` certificate lb-tls serves; kept for as long as it runs.
    pub certs: crate::certs::TestCerts,
}

/// What [`TlsChain::start_with`] adds to the chain it builds.
#[derive(Debug, Clone, Copy, Default)]
pub struct ChainOptions<'a> {
    /// lb-tls's `backend.multiplex: true`: client connections as streams of one hop connection
    /// per lb-tls worker thread.
    pub multiplex: bool,
    /// lb-proxy's configuration before its frontends (`global:`, `defaults:`), e.g. JSON logs.
    pub proxy_head: &'a str,
    /// More keys of lb-tls's `global:`, one a line, e.g. `worker_threads: 2`.
    pub tls_global: &'a str,
}

impl TlsChain {
    /// `alpn`: what lb-tls offers, e.g. `"[ h2, http/1.1 ]"`.
    pub fn start(server: SocketAddr, alpn: &str) -> TlsChain {
        TlsChain::start_with(server, alpn, ChainOptions::default())
    }

    /// [`TlsChain::start`] with lb-tls's `backend.multiplex: true`.
    pub fn start_multiplexed(server: SocketAddr, alpn: &str) -> TlsChain {
        TlsChain::start_with(server, alpn, ChainOptions { multiplex: true, ..ChainOptions::default() })
    }

    /// [`TlsChain::start`] with `options`.
    pub fn start_with(server: SocketAddr, alpn: &str, options: ChainOptions<'_>) -> TlsChain {
        let proxy = crate::ProxyProcess::start_with(
            1,
            crate::single_backend(options.proxy_head, "accept_proxy: true\ntls: true", ("s1", server)),
        );
        let certs = crate::certs::TestCerts::new();
        let cert = certs.server("api", &["api.example.test"]).display().to_string();
        let hop = proxy.addr();
        let alpn = alpn.to_owned();
        let global: String = options.tls_global.lines().map(|line| format!("\n  {line}")).collect();
        let backend_extra = if options.multiplex { "\n  multiplex: true" } else { "" };
        let tls = TlsProcess::start_with(1, move |ports| {
            format!(
                r#"global:
  control_socket: master.sock{global}
tls:
  certificates: [ {cert} ]
  alpn_protocols: {alpn}
backend:
  address: "{hop}"
  write_proxy: v2{backend_extra}
frontends:
  - bind: "127.0.0.1:{port}"
"#,
                port = ports[0]
            )
        });
        TlsChain { proxy, tls, certs }
    }
}
