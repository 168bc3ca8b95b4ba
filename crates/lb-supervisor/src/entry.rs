//! The command line every daemon shares, and the entry point that runs the check, the master or
//! a worker (above `master` and `worker`, which sit on `daemon`).
//!
//! ```text
//! lb-proxy -f FILE        master in the foreground (SMF's "child"/systemd's Type=notify)
//! lb-proxy -D -f FILE     master detached; returns once the first worker serves (SMF's contract)
//! lb-proxy -c -f FILE     check the configuration: exit 0, or 1 with the errors; binds nothing
//! ```
//! Workers are the same binary, started by the master as `--worker -f FILE`.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::daemon::{say, Daemon, EXIT_USAGE};

/// `-c` exits 1 on a bad configuration, as `haproxy -c` does.
const EXIT_CHECK_FAILED: u8 = 1;

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
            crate::lines::use_for_stderr(D::NAME);
            init_tracing();
            let code = crate::master::run::<D>(config, detach);
            crate::lines::finish_stderr();
            code
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
        // Inline in a worker (the master reads it at once), queued in the master.
        .with_writer(|| crate::lines::StderrLines)
        // A log that cannot be written (the master that read a worker's stderr is gone) must
        // not take the process down: tracing would report it with eprintln!, which panics.
        .log_internal_errors(false)
        .try_init();
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
