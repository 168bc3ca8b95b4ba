//! `lb-tls`: the master (which keeps the sockets and the PID) and its workers, one binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    lb_supervisor::main::<lb_tls::TlsDaemon>()
}
