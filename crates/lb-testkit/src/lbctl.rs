//! The master's control socket from a test: the real `lbctl` binary (what operators and service
//! units run), and a direct client of the same protocol for frequent sampling.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use anyhow::{anyhow, Context as _};
pub use lb_supervisor::{ProcEntry, ProcTable, Request, Response, Role};

use crate::bin_path;

/// An `lbctl` call gives up (and is killed) after this long: a reload answers within the
/// worker start timeout, which tests keep far below it.
pub const LBCTL_TIMEOUT: Duration = Duration::from_secs(60);

/// What an `lbctl` run printed, and how it exited.
#[derive(Debug, Clone)]
pub struct LbctlOutput {
    /// The exit code (`None`: killed by a signal).
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Display for LbctlOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "lbctl exited {:?}; stdout: {:?}; stderr: {:?}", self.code, self.stdout, self.stderr)
    }
}

/// A successful reload as `lbctl reload` reports it:
/// `reloaded: worker PID generation N serving (X ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reloaded {
    pub pid: u32,
    pub generation: u64,
    pub took_ms: u64,
}

impl Reloaded {
    /// Parses lbctl's success line.
    pub fn parse(stdout: &str) -> Option<Reloaded> {
        let line = stdout.lines().find(|l| l.starts_with("reloaded: "))?;
        let re = regex::Regex::new(r"^reloaded: worker (\d+) generation (\d+) serving \((\d+) ms\)$").ok()?;
        let caps = re.captures(line)?;
        Some(Reloaded { pid: caps[1].parse().ok()?, generation: caps[2].parse().ok()?, took_ms: caps[3].parse().ok()? })
    }
}

/// Runs `lbctl -s SOCKET ARGS…` (without `$LBCTL_SOCKET` from our environment), killed after
/// [`LBCTL_TIMEOUT`].
pub async fn lbctl(socket: &Path, args: &[&str]) -> LbctlOutput {
    let child = tokio::process::Command::new(bin_path("lbctl"))
        .arg("-s")
        .arg(socket)
        .args(args)
        .env_remove("LBCTL_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawning lbctl");
    let out = tokio::time::timeout(LBCTL_TIMEOUT, child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("lbctl {args:?} did not answer within {LBCTL_TIMEOUT:?}"))
        .expect("running lbctl");
    LbctlOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`lbctl`] for code that is not async.
pub fn lbctl_blocking(socket: &Path, args: &[&str]) -> LbctlOutput {
    let mut child = std::process::Command::new(bin_path("lbctl"))
        .arg("-s")
        .arg(socket)
        .args(args)
        .env_remove("LBCTL_SOCKET")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawning lbctl");
    let exited = crate::wait_until_blocking(LBCTL_TIMEOUT, || child.try_wait().ok().flatten().is_some());
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("lbctl {args:?} did not answer within {LBCTL_TIMEOUT:?}");
    }
    let out = child.wait_with_output().expect("lbctl's output");
    LbctlOutput {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// `lbctl reload`: `Ok` with the new worker when it exits 0 and prints the success line,
/// `Err` with everything it printed otherwise.
pub async fn reload(socket: &Path) -> Result<Reloaded, LbctlOutput> {
    let out = lbctl(socket, &["reload"]).await;
    match (out.code, Reloaded::parse(&out.stdout)) {
        (Some(0), Some(reloaded)) => Ok(reloaded),
        _ => Err(out),
    }
}

/// `lbctl --json show proc`, parsed.
pub async fn show_proc(socket: &Path) -> anyhow::Result<ProcTable> {
    let out = lbctl(socket, &["--json", "show", "proc"]).await;
    if out.code != Some(0) {
        return Err(anyhow!("{out}"));
    }
    match serde_json::from_str::<Response>(&out.stdout).with_context(|| format!("parsing {:?}", out.stdout))? {
        Response::Proc(table) => Ok(table),
        other => Err(anyhow!("show proc answered {other:?}")),
    }
}

/// `show proc` straight over the control socket (no process started: for sampling often).
pub async fn show_proc_direct(socket: &Path) -> anyhow::Result<ProcTable> {
    let answer =
        tokio::time::timeout(Duration::from_secs(10), lb_supervisor::control::call(socket, &Request::ShowProc))
            .await
            .context("show proc: no answer within 10 s")??;
    match answer {
        Response::Proc(table) => Ok(table),
        other => Err(anyhow!("show proc answered {other:?}")),
    }
}

/// The workers of `table` in `role`.
pub fn workers_in(table: &ProcTable, role: Role) -> Vec<&ProcEntry> {
    table.workers.iter().filter(|w| w.role == role).collect()
}
