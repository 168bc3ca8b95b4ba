//! `-D`: run the master detached, for SMF's contract model, where the start method must return
//! once the service is up.
//!
//! Without fork (which a threaded Rust process must not do), the master re-executes itself
//! without `-D`, in a new session, with the write end of a pipe; the first process waits on the
//! pipe and exits 0 once the first worker serves, or 1 with the reason. stdout and stderr stay
//! where they were (SMF's log file).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Command, ExitCode, Stdio};

use crate::daemon::say;
use crate::fdpass;

const READY_FD_ENV: &str = "LB_SUPERVISOR_READY_FD";

/// Where the detached master says that it serves (or why it could not).
#[derive(Debug)]
pub(crate) struct ReadyPipe {
    pipe: File,
}

impl ReadyPipe {
    pub(crate) fn ready(mut self) {
        let _ = self.pipe.write_all(b"ok\n");
    }

    pub(crate) fn failed(mut self, error: &str) {
        let _ = self.pipe.write_all(error.as_bytes());
    }
}

/// In a master started by [`detach`]: leave the terminal's session and take the pipe.
pub(crate) fn inherited() -> Option<ReadyPipe> {
    let fd = std::env::var(READY_FD_ENV).ok()?.parse().ok()?;
    let pipe = fdpass::take_inherited(fd).ok()?;
    // A new session: no controlling terminal, no SIGHUP when the starting shell goes away.
    let _ = nix::unistd::setsid();
    Some(ReadyPipe { pipe: File::from(pipe) })
}

/// Start the detached master and wait until it serves: the exit status for the process that
/// was started with `-D`.
pub(crate) fn detach() -> ExitCode {
    match start_detached() {
        Ok(code) => code,
        Err(e) => {
            say(format_args!("cannot detach: {e}"));
            ExitCode::FAILURE
        }
    }
}

fn start_detached() -> std::io::Result<ExitCode> {
    let (read, write): (OwnedFd, OwnedFd) = nix::unistd::pipe()?;
    nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::FD_CLOEXEC))?;
    let args = std::env::args_os().skip(1).filter(|a| a != "-D");
    let mut child = Command::new(std::env::current_exe()?)
        .args(args)
        .env(READY_FD_ENV, write.as_raw_fd().to_string())
        .stdin(Stdio::null())
        .spawn()?;
    drop(write);
    let mut answer = String::new();
    File::from(read).read_to_string(&mut answer)?;
    if answer.starts_with("ok") {
        return Ok(ExitCode::SUCCESS);
    }
    if answer.is_empty() {
        // It died before saying anything: its stderr (inherited) has the reason.
        let status = child.try_wait()?;
        say(format_args!("the master exited before serving ({status:?})"));
    } else {
        say(&answer);
    }
    Ok(ExitCode::FAILURE)
}
