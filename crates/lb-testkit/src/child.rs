//! A daemon process a test started (lb-proxy's or lb-tls's master): signals, exit status, and
//! stopping it for good; and running one to completion (`-c`, a start that must fail).

use std::path::Path;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

use crate::proxy::{read_lines, snapshot, Lines};
use crate::{bin_path, wait_until_blocking};

/// How long a stopped daemon has between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(3);

/// The master has said that its first worker serves (its `… worker ready` line): a test may
/// ask the worker anything from then on. Listening alone does not say it: the master binds the
/// sockets before it starts the worker (connections wait in the backlog until the worker
/// accepts), so a test that asks `show proc` at once could find no current worker yet.
pub(crate) fn worker_ready(stderr: &Lines) -> bool {
    let lines = stderr.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    lines.iter().any(|line| line.contains(" worker ready"))
}

/// The `LB_LOG` filter a started daemon gets: the caller's own (to see more or less while
/// debugging a test) with the master's lifecycle lines kept, since [`worker_ready`] reads them.
pub(crate) fn log_filter() -> String {
    match std::env::var("LB_LOG") {
        Ok(filter) if !filter.trim().is_empty() => format!("{filter},lb_supervisor::master=info"),
        _ => "info".to_owned(),
    }
}

/// A started daemon and, once known, how it exited (reaped once, remembered). Dropping it stops
/// the process, however the test ends (a panic included).
#[derive(Debug)]
pub struct DaemonChild {
    child: Child,
    exit: Option<ExitStatus>,
}

impl DaemonChild {
    pub fn new(child: Child) -> DaemonChild {
        DaemonChild { child, exit: None }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal`, unless the process is known to have exited (its pid may be reused).
    pub fn kill_with(&self, signal: Signal) {
        if self.exit.is_none() {
            if let Ok(pid) = i32::try_from(self.child.id()) {
                let _ = kill(Pid::from_raw(pid), signal);
            }
        }
    }

    /// The exit status, if the process has exited (reaps it).
    pub fn try_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none() {
            self.exit = self.child.try_wait().ok().flatten();
        }
        self.exit
    }

    /// Stops the process now (SIGTERM, then SIGKILL after a grace) and returns its status.
    pub fn stop(&mut self) -> Option<ExitStatus> {
        if self.try_exit().is_none() {
            self.kill_with(Signal::SIGTERM);
            wait_until_blocking(STOP_GRACE, || self.child.try_wait().ok().flatten().is_some());
            if self.try_exit().is_none() {
                let _ = self.child.kill();
                self.exit = self.child.wait().ok();
            }
        }
        self.exit
    }
}

impl Drop for DaemonChild {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Runs the workspace binary `name` with `args` in `dir` to completion and returns its output;
/// kills it and panics if it is still running after `within`. Both pipes are drained while it
/// runs, so a chatty process cannot block on a full pipe.
pub(crate) fn run_to_completion(name: &str, args: &[&str], dir: &Path, within: Duration) -> std::process::Output {
    let mut child = Command::new(bin_path(name))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawning {name}: {e}"));
    let out: Lines = Arc::default();
    let err: Lines = Arc::default();
    let readers = [
        child.stdout.take().map(|o| read_lines(o, out.clone(), &format!("{name}-stdout"))),
        child.stderr.take().map(|e| read_lines(e, err.clone(), &format!("{name}-stderr"))),
    ];
    let exited = wait_until_blocking(within, || child.try_wait().ok().flatten().is_some());
    if !exited {
        let _ = child.kill();
        let _ = child.wait();
        panic!("`{name} {}` still running after {within:?}; stderr:\n{}", args.join(" "), snapshot(&err).join("\n"));
    }
    let status = child.wait().expect("exit status");
    for reader in readers.into_iter().flatten() {
        let _ = reader.join();
    }
    let join = |lines: &Lines| {
        let mut text = snapshot(lines).join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        text.into_bytes()
    };
    std::process::Output { status, stdout: join(&out), stderr: join(&err) }
}
