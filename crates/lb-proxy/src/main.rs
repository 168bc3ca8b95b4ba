//! `lb-proxy`: the master (which keeps the sockets and the PID) and its workers, one binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    lb_supervisor::main::<lb_proxy::ProxyDaemon>()
}

#[cfg(target_os = "linux")]
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;
