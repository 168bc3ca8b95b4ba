//! `lb-proxy`: the master (which keeps the sockets and the PID) and its workers, one binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    lb_supervisor::main::<lb_proxy::ProxyDaemon>()
}

/// A request allocates a few dozen small, short-lived blocks (mostly inside hyper); mimalloc
/// serves them for about 5 % less CPU per request than glibc's malloc (see docs/benchmarks.md).
/// Elsewhere (illumos) the system allocator stays.
#[cfg(target_os = "linux")]
use mimalloc as _;
