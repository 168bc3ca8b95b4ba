//! lb-proxy balances HTTP and plain TCP across API servers: the middle daemon of the lb stack,
//! behind lb-tls (which hands it plaintext with a PROXY v2 header) and in front of the servers.
//!
//! The binary `lb-proxy` is lb-supervisor's master and workers ([`ProxyDaemon`]): the master
//! binds the listening sockets and passes them by fd to each worker, which serves them with
//! [`start`]. Anyone may serve without a master: bind ([`lb_supervisor::bind_all`] of
//! [`lb_config::Config::listen_addrs`]), then [`run`] with the sockets, a [`Shutdown`] to stop softly or at once, and a validated [`lb_config::Config`].
//! Tests call [`run`] the same way with port-0 sockets.
//!
//! Main types: [`ProxyDaemon`], [`Server`] (a started proxy), lb-supervisor's [`Listeners`]
//! (the bound sockets, named by address) and [`Shutdown`] / [`ShutdownHandle`] (drain, then
//! stop), [`Error`].
//!
//! # Layout
//! - `daemon`: [`ProxyDaemon`], what lb-supervisor runs.
//! - `listener`: the client stream type.
//! - `serve`: the running proxy: accept loops with connection limits, dispatch by mode, drain.
//! - `state`: what the connections of a process share (`Proxy`, `FrontendState`), below the
//!   modules that serve and report.
//! - `http`: HTTP mode (hyper on both sides): routing, forwarding headers, timeouts, errors.
//! - `tcp`: TCP mode: bidirectional copy with half-close.
//! - `connect`: connecting to a server with retries and redispatch; `pool`: idle server
//!   connections shared by a process (`http_reuse: safe`).
//! - `backend`, `health`: server state, balancing, slowstart, health checks.
//! - `facts`: what a connection's socket and PROXY header (crate `lb-proxy-protocol`) tell.
//! - `policy`: the edge policy (conditions, routing rules, `http_request` / `http_response`
//!   actions, lists and maps changed at run time), compiled per frontend and run by `http`.
//! - `capture`: the last refused request of each frontend (`show errors`).
//! - `log`: HAProxy-compatible (and JSON) access logs to stdout or syslog.
//! - `text`: numbers and IPv4 addresses as text, cheaply (log lines, X-Forwarded-For).
//! - `runtime`: the runtime commands (HAProxy's CLI: `show stat`, `set server`, `add server` …).
//! - `tables`: limit tables (HAProxy's stick tables): bounded, sharded, per-key counters.
//! - `counters`, `stats`: traffic counters; `show stat`'s CSV, `show info`, the stats page and
//!   `/metrics` over HTTP.
//! - `http::fuzz`, `runtime::fuzz`: entry points for the fuzz targets in `fuzz/` (hidden).
#![forbid(unsafe_code)]

mod backend;
mod capture;
mod connect;
mod counters;
mod daemon;
mod error;
mod facts;
mod health;
mod http;
mod limit;
mod listener;
mod log;
mod policy;
mod pool;
mod runtime;
mod serve;
mod state;
mod stats;
mod tables;
mod tcp;
mod text;

pub use daemon::ProxyDaemon;
pub use error::Error;
pub use lb_supervisor::{shutdown_channel, Listener, Listeners, Phase, Shutdown, ShutdownHandle};
pub use serve::{run, start, start_supervised, Server};

// For the fuzz targets in `fuzz/` only: `proxy_header`, `http_request_head`, `runtime_command`,
// `policy`, `table_handover`.
#[doc(hidden)]
pub use http::fuzz::fuzz_request_head;
#[doc(hidden)]
pub use lb_proxy_protocol::fuzz_parse;
#[doc(hidden)]
pub use policy::fuzz::fuzz_policy;
#[doc(hidden)]
pub use runtime::fuzz::FuzzRuntime;
#[doc(hidden)]
pub use tables::fuzz::FuzzHandover;
