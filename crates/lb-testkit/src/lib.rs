//! Helpers for the end-to-end tests of the lb stack (the root package's `tests/`): everything a
//! test needs to run the real `lb-proxy` binary against real servers and talk to it with real
//! clients, on loopback ports the test picks. Dev-only: nothing here ships.
//!
//! Main types and functions:
//! - [`ProxyProcess`]: a running `lb-proxy -f FILE` with its access log (stdout) and operational
//!   messages (stderr) captured line by line; killed (SIGTERM, then SIGKILL) on drop.
//!   [`run_lb_proxy`] runs it to completion instead (`-c`, or a start that must fail).
//! - [`TestServer`]: a sample API server (hyper) answering with its own name, with `/ping`,
//!   `/echo`, `/slow`, `/bytes` and `/upload`; it can be stopped and restarted on its port.
//! - [`TcpEchoServer`] and [`Blackhole`]: a TCP echo server for TCP mode, and a listener whose
//!   accept queue is full (connects to it hang) for connect timeouts.
//! - [`client`]: HTTP requests with hyper's client (one connection per request, or keep-alive),
//!   streamed uploads and downloads; [`raw`]: hand-written bytes on a `TcpStream` for malformed
//!   requests, smuggling attempts and PROXY protocol headers.
//! - [`log`]: the HAProxy `httplog` / `tcplog` line formats as strict regular expressions.
//! - [`bin_path`], [`free_port`], [`wait_until`]: finding binaries, picking ports, polling.
//! - [`load`]: a load generator (new-connection, keep-alive and slow clients) that classifies
//!   every request by how it ended: for reloads under load, and the `lb-load` benchmark tool.
//! - [`h3load`]: an HTTP/3 load generator (quinn + h3), the `h3-load` benchmark tool.
//! - [`lbctl`]: the master's control socket, through the real `lbctl` binary or directly.
//! - [`notify`]: a stand-in for systemd's `NOTIFY_SOCKET`, and `CLOCK_MONOTONIC`.
//! - [`procfs`]: children, fds, RSS, environment and listening sockets of a process.
//! - [`runtime`]: the runtime socket, and parsers for `show stat`'s CSV (HAProxy's documented
//!   format), `show servers state` and Prometheus' text format.
//! - [`WatcherProcess`]: the real `lb-watcher` with its stderr and `/status`; [`WatcherOptions`]:
//!   more environment, or a wrapper command (`unshare`, `prlimit`) for fault tests.
//! - [`zookeeper`]: a real ZooKeeper, standalone or a three-member ensemble, for lb-watcher.
//! - [`TlsProcess`], [`run_lb_tls`]: the real `lb-tls` ([`TlsChain`]: in front of lb-proxy);
//!   [`certs`]: a CA, server and client certificates and OCSP responses made with `openssl`;
//!   [`sclient`]: `openssl s_client` and `curl` runs.
//! - [`websocket`]: a real WebSocket echo server and client (python3-websockets); [`h2`]:
//!   hostile HTTP/2 clients (python3-h2).
//!
//! Timing rule for every test using this crate: never sleep to assert speed; poll a condition
//! with [`wait_until`] (every 20 ms, generous deadline) instead.
//!
//! # Layout
//! - `proxy`: [`ProxyProcess`] (spawn, readiness through `/proc`, log capture, signals, RSS) and
//!   [`run_lb_proxy`].
//! - `server`: [`TestServer`] on a runtime of its own, so that a test's blocking calls never stall it.
//! - `tcp`: [`TcpEchoServer`], [`Blackhole`].
//! - `runtime`: the runtime socket and the parsers of what it prints.
//! - `client`, `raw`: the HTTP client and the raw-socket client.
//! - `log`: access-log line parsing.
//! - this file: [`bin_path`], [`free_port`], [`wait_until`].
#![forbid(unsafe_code)]

pub mod certs;
mod child;
pub mod client;
pub mod h2;
pub mod h3load;
pub mod haproxy;
pub mod lbctl;
pub mod load;
pub mod log;
pub mod notify;
pub mod procfs;
mod proxy;
pub mod raw;
pub mod runtime;
pub mod sclient;
mod server;
mod tcp;
mod tls;
mod watcher;
pub mod websocket;
pub mod zookeeper;

use std::collections::HashSet;
use std::net::TcpListener;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// Debian's interpreter, where the test peers' packages (python3-websockets, python3-h2) are
/// installed: a `python3` found first on PATH, such as pyenv's, does not see Debian's packages.
pub(crate) const DEBIAN_PYTHON: &str = "/usr/bin/python3";

pub use child::DaemonChild;
/// Signals for [`ProxyProcess::kill_with`].
pub use nix::sys::signal::Signal;
pub use proxy::{run_lb_proxy, single_backend, write_config_in, ProxyProcess, StartError, StartOptions};
pub use server::{RecordedRequest, TestServer};
pub use tcp::{Blackhole, TcpEchoServer, ECHO_TRAILER};
pub use tls::{run_lb_tls, ChainOptions, TlsChain, TlsProcess};
pub use watcher::{watched_proxy_yaml, WatcherOptions, WatcherProcess, WATCHED_BASE};

/// The generous deadline used by helpers that wait for something that should happen "soon".
pub const DEFAULT_WAIT: Duration = Duration::from_secs(10);

/// How often [`wait_until`] checks its condition.
pub const POLL_EVERY: Duration = Duration::from_millis(20);

/// The path of a binary of this workspace, built in the same target directory and profile as
/// the running test: `<target>/<profile>/NAME`, found from the test executable, which lives in
/// `<target>/<profile>/deps/`. Panics with instructions when the binary has not been built
/// (`cargo test` builds only the tested package's binaries; `.ci/run` builds the workspace).
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("the path of the running test executable");
    let deps = exe.parent().expect("the test executable's directory");
    let profile_dir = if deps.ends_with("deps") { deps.parent().unwrap_or(deps) } else { deps };
    let path = profile_dir.join(name);
    assert!(
        path.is_file(),
        "binary `{name}` not found at {}: build it first with `cargo build -p {name}` \
         (the end-to-end tests run the real binary of the same profile)",
        path.display()
    );
    path
}

/// A loopback TCP port that was free a moment ago: bound on `127.0.0.1:0`, read, released.
/// Never hands out the same port twice in one test process, so parallel tests do not collide;
/// another process could still take it, which is why [`ProxyProcess::start_with`] retries.
pub fn free_port() -> u16 {
    static GIVEN: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let given = GIVEN.get_or_init(|| Mutex::new(HashSet::new()));
    for _ in 0..1000 {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding 127.0.0.1:0");
        let port = listener.local_addr().expect("local address of a bound listener").port();
        drop(listener);
        let mut given = given.lock().unwrap_or_else(|e| e.into_inner());
        if port != 8080 && given.insert(port) {
            return port;
        }
    }
    panic!("no free loopback port found in 1000 tries");
}

/// Polls `cond` every 20 ms until it holds (true) or `within` has passed (false, after one last
/// check). Async so that the test's other tasks keep running while it waits.
pub async fn wait_until(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return cond();
        }
        tokio::time::sleep(POLL_EVERY).await;
    }
}

/// [`wait_until`] for code that is not async (a plain `#[test]`, a `Drop`).
pub fn wait_until_blocking(within: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return cond();
        }
        std::thread::sleep(POLL_EVERY);
    }
}
