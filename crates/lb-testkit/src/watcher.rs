//! [`WatcherProcess`]: the real `lb-watcher` binary on a configuration the test wrote, with
//! its stderr captured (each line with the time it arrived, for timelines) and its `/status`
//! endpoint read. [`WatcherOptions`] run it with extra environment or under a wrapper command
//! (`unshare`, `prlimit`) for fault tests.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::{bin_path, free_port, wait_until, wait_until_blocking};

/// lb-watcher's `proxy.base` in the tests: frontend `fe` (never started: lb-watcher only renders
/// it) sending to backend `api`, which lb-watcher fills.
pub const WATCHED_BASE: &str = "\
frontends:
  - name: fe
    bind: [\"127.0.0.1:9\"]
    default_backend: api
backends:
  - name: api
    servers: []
";

/// The lb-proxy a watcher keeps in step in the tests: one thread, frontend `fe` on the first port
/// picked, backend `api` empty until the watcher adds servers; keep-alive long enough that a
/// client's connection outlives a change.
pub fn watched_proxy_yaml(ports: &[u16]) -> String {
    format!(
        "global:\n  worker_threads: 1\n\
         defaults:\n  timeouts: {{ connect: 2s, client: 30s, server: 30s, http_keep_alive: 30s }}\n\
         frontends:\n  - name: fe\n    bind: [\"127.0.0.1:{}\"]\n    default_backend: api\n\
         backends:\n  - name: api\n    servers: []\n",
        ports[0]
    )
}

type Lines = Arc<Mutex<Vec<(Instant, String)>>>;

/// How to start lb-watcher, beyond its configuration.
#[derive(Debug, Clone, Default)]
pub struct WatcherOptions {
    /// Extra environment, e.g. `LB_LOG` for debug lines (it replaces the default `LB_LOG`).
    pub env: Vec<(String, String)>,
    /// A command lb-watcher runs under, `[program, args…]`, followed by lb-watcher's path and
    /// arguments; it must end by exec'ing them, so that [`WatcherProcess::pid`] is lb-watcher's.
    pub wrapper: Vec<String>,
}

/// A running `lb-watcher -f FILE`; stopped (SIGTERM, then SIGKILL) on drop.
#[derive(Debug)]
pub struct WatcherProcess {
    child: Child,
    config_path: PathBuf,
    status: SocketAddr,
    stderr: Lines,
}

impl WatcherProcess {
    /// Writes `yaml` plus a `status:` section on a free port to `dir/lb-watcher.yaml` and
    /// starts lb-watcher on it; waits until `/status` answers.
    pub async fn start(dir: &Path, yaml: &str) -> WatcherProcess {
        WatcherProcess::start_with(dir, yaml, &WatcherOptions::default()).await
    }

    /// [`WatcherProcess::start`] with `options`.
    pub async fn start_with(dir: &Path, yaml: &str, options: &WatcherOptions) -> WatcherProcess {
        let status = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let config_path = dir.join("lb-watcher.yaml");
        std::fs::write(&config_path, format!("{yaml}\nstatus:\n  listen: {status}\n"))
            .expect("writing lb-watcher.yaml");
        let binary = bin_path("lb-watcher");
        let mut command = match options.wrapper.split_first() {
            Some((program, args)) => {
                let mut command = Command::new(program);
                command.args(args).arg(&binary);
                command
            }
            None => Command::new(&binary),
        };
        command
            .arg("-f")
            .arg(&config_path)
            .env("LB_LOG", std::env::var("LB_LOG").unwrap_or_else(|_| "info,zookeeper_client=warn".into()))
            .envs(options.env.iter().map(|(k, v)| (k, v)));
        let mut child = command
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawning lb-watcher");
        let stderr: Lines = Arc::default();
        if let Some(err) = child.stderr.take() {
            let into = stderr.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(err).lines() {
                    let Ok(line) = line else { return };
                    into.lock().unwrap_or_else(|e| e.into_inner()).push((Instant::now(), line));
                }
            });
        }
        let watcher = WatcherProcess { child, config_path, status, stderr };
        let up = wait_until(Duration::from_secs(10), || std::net::TcpStream::connect(status).is_ok()).await;
        assert!(up, "lb-watcher's status endpoint did not come up; stderr:\n{}", watcher.stderr().join("\n"));
        watcher
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn config_path(&self) -> &Path {
        &self.config_path
    }

    /// Every stderr line so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).iter().map(|(_, l)| l.clone()).collect()
    }

    /// Every stderr line so far, with the time it was read from the pipe.
    pub fn stderr_timed(&self) -> Vec<(Instant, String)> {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stderr lines containing `text`.
    pub fn stderr_count(&self, text: &str) -> usize {
        self.stderr.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|(_, l)| l.contains(text)).count()
    }

    /// Whether the process still runs (not exited, not a zombie).
    pub fn is_alive(&self) -> bool {
        crate::procfs::is_alive(self.child.id())
    }

    /// Resident set size now, and its peak (`VmRSS`, `VmHWM`), in KiB.
    pub fn rss_kib(&self) -> (Option<u64>, Option<u64>) {
        let pid = self.child.id();
        (crate::procfs::rss_kib(pid), crate::procfs::status_kib(pid, "VmHWM:"))
    }

    /// `/status` as JSON.
    pub async fn status(&self) -> serde_json::Value {
        match crate::client::get(self.status, "/status").await {
            Ok(response) => response.json(),
            Err(e) => panic!("GET /status: {e:#}; stderr:\n{}", self.stderr().join("\n")),
        }
    }

    /// `/metrics` as text.
    pub async fn metrics(&self) -> String {
        crate::client::get(self.status, "/metrics").await.map(|r| r.text()).unwrap_or_default()
    }

    /// The value of the Prometheus counter or gauge `name` (without labels).
    pub async fn metric(&self, name: &str) -> u64 {
        let text = self.metrics().await;
        text.lines()
            .find_map(|l| l.strip_prefix(name).and_then(|v| v.strip_prefix(' ')).and_then(|v| v.trim().parse().ok()))
            .unwrap_or(0)
    }

    /// Sends `signal` (SIGSTOP/SIGCONT for a session expiry).
    pub fn signal(&self, signal: Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), signal);
        }
    }

    /// Waits for a stderr line containing `text`; panics with stderr when none comes in `within`.
    pub async fn wait_for_stderr(&self, text: &str, within: Duration) -> String {
        let mut found = None;
        wait_until(within, || {
            found = self.stderr().into_iter().find(|l| l.contains(text));
            found.is_some()
        })
        .await;
        found.unwrap_or_else(|| {
            panic!("no stderr line with {text:?} within {within:?}; stderr:\n{}", self.stderr().join("\n"))
        })
    }
}

impl Drop for WatcherProcess {
    fn drop(&mut self) {
        self.signal(Signal::SIGCONT);
        self.signal(Signal::SIGTERM);
        if !wait_until_blocking(Duration::from_secs(3), || self.child.try_wait().ok().flatten().is_some()) {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("---- lb-watcher stderr:");
            for line in self.stderr() {
                eprintln!("{line}");
            }
        }
    }
}
