//! lbctl is the operator's command line for the lb daemons (lb-proxy, lb-tls): it asks the
//! master process, over its control socket, to reload, to show its processes, or to pass a
//! runtime command to the current worker.
//!
//! ```text
//! lbctl [-s SOCKET | -f CONFIG] [--json] COMMAND...
//! lbctl -f /etc/lb/lb-proxy.yaml reload
//! lbctl show proc
//! ```
//!
//! Operators use it by hand, and deploy scripts and service units use it to reload (a
//! systemd `ExecReload=lbctl -f … reload`, an SMF `refresh` method). The protocol and its
//! messages ([`lb_supervisor::Request`], [`lb_supervisor::Response`]) and the client
//! ([`lb_supervisor::control::call_blocking`]) live in lb-supervisor; lbctl only chooses the
//! socket, builds the request and prints the answer.
//!
//! # Exit status
//!
//! Scripts may rely on these (see [`exit::Exit`]):
//! - `0`: success.
//! - `1`: the command failed: the reload failed (the previous worker keeps serving, the
//!   errors are on stderr), or the master answered with an error.
//! - `2`: usage error: bad command line, or the `-f` configuration file cannot be read.
//! - `69` (`EX_UNAVAILABLE`): the master cannot be reached or did not answer; after a
//!   reload, its outcome is then unknown.
//!
//! `--json` changes what is printed (the master's answer as JSON, on stdout), not the status.
//!
//! # Layout
//! - `cli`: the command line ([`cli::Cli`]) and `--help`.
//! - `socket`: which control socket (`-s`, `-f`'s `global.control_socket`, `$LBCTL_SOCKET`,
//!   the default).
//! - `render`: the answer as text ([`render::Outcome`]), the `show proc` table.
//! - `tables`: `show stat`, `show servers state`, `show info` as tables or JSON objects.
//! - `exit`: the exit statuses.
//! - `register`: `lbctl register`, a registrar-style ZooKeeper registration (lb-watcher's side).
//! - `import_haproxy`: `lbctl import-haproxy FILE`, a haproxy.cfg translated into lb-proxy's
//!   configuration (and lb-tls's).
#![forbid(unsafe_code)]

mod cli;
mod exit;
mod import_haproxy;
mod register;
mod render;
mod socket;
mod tables;

use std::io::Write;
use std::process::ExitCode;

use lb_supervisor::control;

use crate::cli::Parsed;
use crate::exit::Exit;

fn main() -> ExitCode {
    // `lbctl register` talks to ZooKeeper, not to a master: its own command line.
    if std::env::args_os().nth(1).is_some_and(|a| a == "register") {
        return register::main(std::env::args_os().skip(2).collect());
    }
    // `lbctl import-haproxy` translates a file: no master involved either.
    if std::env::args_os().nth(1).is_some_and(|a| a == "import-haproxy") {
        return import_haproxy::main(std::env::args_os().skip(2).collect());
    }
    let cli = match cli::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Run(cli)) => cli,
        Ok(Parsed::Help) => return emit(&cli::help(), "", Exit::Success),
        Ok(Parsed::Version) => return emit(&format!("lbctl {}\n", env!("CARGO_PKG_VERSION")), "", Exit::Success),
        Err(usage) => {
            let message = format!("lbctl: {usage}\nTry 'lbctl --help' for more information.\n");
            return emit("", &message, Exit::Usage);
        }
    };
    let socket = match socket::resolve(&cli.socket, std::env::var_os(socket::ENV_SOCKET)) {
        Ok(socket) => socket,
        Err(e) => return emit("", &format!("lbctl: {e:#}\n"), Exit::Usage),
    };
    // No timeout: a reload answers once the new worker serves, however long that takes.
    match control::call_blocking(&socket, &cli.request, None) {
        Ok(response) => {
            let command = match &cli.request {
                lb_supervisor::Request::Runtime { line } => Some(line.as_str()),
                _ => None,
            };
            let outcome = render::response(&response, command, cli.json);
            emit(&outcome.stdout, &outcome.stderr, outcome.exit)
        }
        Err(e) => emit("", &render::unreachable(&socket, &e), Exit::Unavailable),
    }
}

/// Print and exit. Write errors are ignored rather than panicking (`lbctl show proc | head -1`):
/// the exit status must still say what the master answered.
fn emit(stdout: &str, stderr: &str, exit: Exit) -> ExitCode {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(stdout.as_bytes()).and_then(|()| out.flush());
    let _ = std::io::stderr().lock().write_all(stderr.as_bytes());
    exit.into()
}
