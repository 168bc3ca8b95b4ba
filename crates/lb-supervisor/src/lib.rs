//! lb-supervisor runs an lb daemon (lb-proxy, lb-tls) as a master and its workers, so that a
//! reload never costs a client a connection.
//!
//! The master keeps the PID that SMF or systemd supervise and owns every listening socket. A
//! reload starts a new worker (the same binary, exec'd anew, so a new binary on disk is picked
//! up), hands it the very same sockets by fd over a private socketpair, and only once it reports
//! READY tells the older workers to drain. A configuration that does not load, a socket that
//! cannot be bound or a worker that crashes while starting leaves the current worker serving and
//! fails the reload, with the worker's own messages, for whoever asked.
//!
//! A daemon plugs in by implementing [`Daemon`] and calling [`main`] from its `main.rs`. The
//! control socket protocol ([`Request`], [`Response`]) is defined here once and spoken by lbctl
//! and lb-watcher through [`control::call`].
//!
//! A reload may run a canary ([`CanarySettings`]): the new worker takes a share of the new
//! connections for a window while the current one keeps the rest, and the master promotes it
//! or rolls it back by comparing their [`Figures`].
//!
//! Main types: [`Daemon`], [`Supervision`], [`Serving`], [`Runtime`], [`RuntimeEndpoints`],
//! [`MasterLink`], [`ListenAddr`], [`Listener`] / [`Listeners`], [`Shutdown`] /
//! [`ShutdownHandle`], [`Request`] / [`Response`], [`LineWriter`], [`Error`].
//!
//! # Layout
//! - `entry`: [`main`], the command line shared by every daemon: check, master or worker.
//! - `daemon`: the [`Daemon`] trait and what master and workers share, below both.
//! - `master`: the master: sockets, workers, reloads, signals, the control socket.
//! - `worker`: a worker's side: receive sockets, serve, report, drain.
//! - `channel`: framed JSON messages with file descriptors over a Unix socket.
//! - `fdpass`: `SCM_RIGHTS` send and receive (the one module with `unsafe`).
//! - `protocol`: every message, control and channel.
//! - `control`: the control socket, both ends.
//! - `runtime`: runtime commands: the [`Runtime`] handler a daemon provides, routing to the
//!   current worker, the HAProxy-style runtime socket, [`MasterLink`].
//! - `report`: HAProxy's `show info` fields and its typed and JSON forms of `show info` and
//!   `show stat`, for every daemon's runtime commands.
//! - `secret`: secrets the master makes, renews and hands to its workers ([`SecretSpec`],
//!   [`Secret`]), e.g. lb-tls's ticket keys.
//! - `lines`: [`LineWriter`], lines written without blocking their callers (lb-proxy's access
//!   log, the master's stderr).
//! - `notify`: systemd's `sd_notify`.
//! - `addr`, `listen`, `accept`: listening addresses and sockets; accepting on them in a worker.
//! - `canary`: canary reloads: their settings, the figures each worker reports, the verdict.
//! - `split`: a worker's side of a canary: new connections split with the other worker, handed
//!   over by fd.
//! - `privileges`: dropping to the configured user, resource limits.
//! - `shutdown`: drain, then stop.
//! - `quiet`: [`Quiet`], a wait beside a connection's work, polled only once woken.
//! - `hop`: the multiplexed hop between lb-tls and lb-proxy: frames, streams, the connection's
//!   I/O task.
//! - `fuzz`: the control socket's and the channel's readers fed a peer's bytes, for the fuzz
//!   targets in `fuzz/` (hidden).
#![deny(unsafe_code)]

mod accept;
mod addr;
mod canary;
mod channel;
pub mod control;
mod daemon;
mod entry;
mod error;
mod fdpass;
#[doc(hidden)]
pub mod fuzz;
pub mod hop;
mod lines;
mod listen;
mod master;
mod notify;
mod privileges;
mod protocol;
mod quiet;
pub mod report;
mod runtime;
mod secret;
mod shutdown;
mod split;
mod worker;

pub use accept::{back_off_after, Accepted, AsyncListener};
pub use addr::{ListenAddr, UnixAccess};
pub use canary::{judge, CanaryAsk, CanarySettings, Figures, Ratio, Share, TooLittleTraffic, Verdict};
pub use daemon::{Daemon, Serving, Supervision};
pub use entry::main;
pub use error::Error;
pub use lines::{LineWriter, Sent, Trouble};
pub use listen::{bind_all, bind_one, Listener, Listeners};
pub use protocol::{
    CanaryRecord, ProcEntry, ProcTable, Request, Response, Role, RuntimeResult, Settings, VerdictEntry,
};
pub use quiet::Quiet;
pub use runtime::{split_commands, unframe, MasterLink, Runtime, RuntimeEndpoints};
pub use secret::{Secret, SecretSpec};
pub use shutdown::{channel as shutdown_channel, finish_when_drained, Phase, Shutdown, ShutdownHandle};
