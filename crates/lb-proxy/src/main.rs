//! `lb-proxy`: the master (which keeps the sockets and the PID) and its workers, one binary.

use std::process::ExitCode;

fn main() -> ExitCode {
    lb_supervisor::main::<lb_proxy::ProxyDaemon>()
}

// A request allocates a few dozen small, short-lived blocks (mostly inside hyper); mimalloc
// serves them for about 5 % less CPU per request than glibc's malloc (see docs/benchmarks.md).
// It is linked as the process's `malloc` (the crate's `override` feature) rather than as
// `#[global_allocator]`: the crate's allocator sends every request down mimalloc's aligned
// path, whose generic, over-allocating branch serves blocks over 1 KiB (hyper's buffers,
// tasks) at several times the cost; Rust's default allocator calls plain `malloc` whenever the
// alignment allows (callgrind: 2,000 fewer instructions per one-request connection). Elsewhere
// (illumos) the system allocator stays.
#[cfg(target_os = "linux")]
use mimalloc as _;
