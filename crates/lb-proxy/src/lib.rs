//! lb-proxy balances HTTP and plain TCP across API servers: the middle daemon of the lb stack,
//! behind lb-tls (which hands it plaintext with a PROXY v2 header) and in front of the servers.
//!
//! The binary `lb-proxy` is a thin `main.rs` over this library. Whoever starts a serving process
//! binds the listening sockets first ([`bind`]) or receives them already bound (the master of
//! lb-supervisor passes them by fd), then calls [`run`] with them, a [`Shutdown`] to stop it
//! softly or at once, and a validated [`lb_config::Config`]. Tests call [`run`] the same way with
//! port-0 sockets.
//!
//! Main types: [`Listeners`] (the bound sockets, named by address), [`Shutdown`] /
//! [`ShutdownHandle`] (drain, then stop), [`Error`].
//!
//! # Layout
//! - `listener`: binding and holding listening sockets, the client stream type.
//! - `serve`: the running proxy: accept loops with connection limits, dispatch by mode, drain.
//! - `http`: HTTP mode (hyper on both sides): routing, forwarding headers, timeouts, errors.
//! - `tcp`: TCP mode: bidirectional copy with half-close.
//! - `connect`: connecting to a server with retries and redispatch.
//! - `backend`, `health`: server state, balancing, slowstart, health checks.
//! - `proxy_protocol`, `facts`: PROXY v1/v2 headers and what they tell about a connection.
//! - `log`: HAProxy-compatible (and JSON) access logs to stdout or syslog.
//! - `cli`: command-line arguments of the binary.
#![forbid(unsafe_code)]

mod backend;
mod cli;
mod connect;
mod error;
mod facts;
mod health;
mod http;
mod listener;
mod log;
mod proxy_protocol;
mod serve;
mod shutdown;
mod tcp;

pub use cli::{Args, USAGE};
pub use error::Error;
pub use listener::{bind, bind_one, Listener, Listeners};
pub use serve::run;
pub use shutdown::{channel as shutdown_channel, Phase, Shutdown, ShutdownHandle};

#[doc(hidden)]
pub use proxy_protocol::fuzz_parse;
