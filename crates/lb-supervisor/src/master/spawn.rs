//! Starting a worker: the same binary exec'd anew with `--worker`, its end of a private
//! socketpair inherited, a clean environment, and three tasks that turn what it does into master
//! events (channel messages, stderr lines, its exit).

use std::collections::VecDeque;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::sync::mpsc::UnboundedSender;

use crate::channel::{Channel, ChannelSender};
use crate::daemon::say;
use crate::protocol::ToMaster;
use crate::worker::CHANNEL_FD_ENV;

/// Lines of a worker's stderr kept for the report of a failed start.
const TAIL_LINES: usize = 20;

/// Environment variables a worker inherits; everything else is cleared so that a worker's
/// behaviour does not depend on how the master was started (and never sees NOTIFY_SOCKET).
const PASSED_ENV: [&str; 4] = ["LB_LOG", "TZ", "LANG", "LC_ALL"];
const WORKER_PATH: &str = "/usr/sbin:/usr/bin:/sbin:/bin";

/// What a worker did, as the master's loop hears it.
#[derive(Debug)]
pub(crate) enum WorkerEvent {
    /// Workers never send fds; any that came are closed.
    Message(ToMaster),
    /// Its channel closed (it exited, or is about to).
    ChannelClosed,
    Exited(ExitStatus),
    /// Not the worker's own: the figures of both workers of a canary, gathered off the loop
    /// (the canary's generation).
    CanaryFigures {
        stage: super::canary::Stage,
        old: Option<crate::Figures>,
        new: Option<crate::Figures>,
    },
}

/// A running worker process, from the master's side.
#[derive(Debug)]
pub(crate) struct Spawned {
    pub(crate) pid: u32,
    pub(crate) tx: ChannelSender,
    /// The last lines it wrote to stderr.
    pub(crate) tail: Arc<Mutex<VecDeque<String>>>,
}

pub(crate) fn spawn(
    exe: &Path,
    config: &Path,
    generation: u64,
    events: UnboundedSender<(u64, WorkerEvent)>,
) -> std::io::Result<Spawned> {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()?;
    // Both ends are close-on-exec; only the worker's end must survive its exec. The master
    // runs on one thread and starts no other process meanwhile, so no other child inherits it.
    nix::fcntl::fcntl(&theirs, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty()))?;

    let mut command = tokio::process::Command::new(exe);
    command
        .arg("--worker")
        .arg("-f")
        .arg(config)
        .env_clear()
        .env("PATH", WORKER_PATH)
        .env(CHANNEL_FD_ENV, theirs.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .kill_on_drop(false);
    for name in PASSED_ENV {
        if let Some(value) = std::env::var_os(name) {
            command.env(name, value);
        }
    }
    // std spawns with posix_spawn where it can: signals stay blocked in the child until exec,
    // and the child starts with an empty signal mask and default dispositions.
    let mut child = command.spawn()?;
    drop(theirs);
    let pid = child.id().unwrap_or(0);

    ours.set_nonblocking(true)?;
    let (tx, mut rx) = Channel::new(tokio::net::UnixStream::from_std(ours)?).split();
    let tail = Arc::new(Mutex::new(VecDeque::with_capacity(TAIL_LINES)));

    let to_loop = events.clone();
    tokio::spawn(async move {
        loop {
            match rx.recv::<ToMaster>().await {
                Ok(Some((message, _fds))) => {
                    if to_loop.send((generation, WorkerEvent::Message(message))).is_err() {
                        return;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    tracing::warn!(pid, generation, "worker channel: {e}");
                    break;
                }
            }
        }
        let _ = to_loop.send((generation, WorkerEvent::ChannelClosed));
    });

    if let Some(stderr) = child.stderr.take() {
        let tail = tail.clone();
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            while let Ok(Some(line)) = lines.next_line().await {
                // Relayed as is: the master's stderr is the service's log.
                say(&line);
                let mut tail = tail.lock().unwrap_or_else(|e| e.into_inner());
                if tail.len() == TAIL_LINES {
                    tail.pop_front();
                }
                tail.push_back(line);
            }
        });
    }

    tokio::spawn(async move {
        let status = child.wait().await;
        let status = match status {
            Ok(status) => status,
            Err(e) => {
                tracing::error!(pid, "waiting for worker: {e}");
                return;
            }
        };
        let _ = events.send((generation, WorkerEvent::Exited(status)));
    });

    Ok(Spawned { pid, tx, tail })
}

/// Send `signal` to a worker we started.
pub(crate) fn signal(pid: u32, signal: nix::sys::signal::Signal) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid > 0 {
        let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), signal);
    }
}
