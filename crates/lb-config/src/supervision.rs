//! The `global` keys lb-supervisor reads (control and runtime sockets, user and group, worker
//! threads, the reload limits), checked once for every daemon's schema.
//!
//! Each schema's raw `global` struct still declares these keys itself: serde's `flatten`, the
//! one way to share a block of fields, buffers the whole map first, which loses every line
//! number under `global` and cannot list the expected keys of an unknown one. So each schema
//! lends its raw values through [`RawSupervision`], and [`supervision`] turns them into
//! lb-supervisor's [`Supervision`] with the same checks, defaults and messages for both.

use std::net::SocketAddr;
use std::path::PathBuf;

use lb_supervisor::{RuntimeEndpoints, Supervision};

use crate::check::Checker;
use crate::locate::child;

/// The supervisor's keys as one schema's raw `global` holds them.
#[derive(Debug, Clone, Copy, Default)]
pub struct RawSupervision<'a> {
    pub control_socket: Option<&'a String>,
    pub runtime_socket: Option<&'a String>,
    pub runtime_address: Option<&'a String>,
    pub user: Option<&'a String>,
    pub group: Option<&'a String>,
    pub worker_threads: Option<i64>,
    pub max_old_workers: Option<i64>,
    pub hard_stop_after: Option<&'a String>,
    pub worker_start_timeout: Option<&'a String>,
}

/// A daemon's sockets when `global` names none.
#[derive(Debug, Clone, Copy)]
pub struct SocketDefaults {
    /// `None`: `control_socket` is required (lb-tls: two daemons on one host need two).
    pub control_socket: Option<&'static str>,
    /// `None`: no runtime socket unless given.
    pub runtime_socket: Option<&'static str>,
}

/// Checks `raw` (under `global`), recording every problem in `ctx`. `None` only when a required
/// key is missing; a bad value is reported and replaced by its default, so that checking goes on.
pub fn supervision(ctx: &mut Checker<'_>, raw: &RawSupervision<'_>, defaults: SocketDefaults) -> Option<Supervision> {
    let path = "global";
    let socket = |ctx: &mut Checker<'_>, key: &str, text: Option<&String>, default: Option<&str>| match text {
        Some(text) => ctx.path(&child(path, key), text),
        None => default.map(PathBuf::from),
    };
    let control_socket = socket(ctx, "control_socket", raw.control_socket, defaults.control_socket);
    if raw.control_socket.is_none() && defaults.control_socket.is_none() {
        ctx.error(path, "control_socket is required (lb-tls and lb-proxy each need their own)");
    }
    let runtime = RuntimeEndpoints {
        socket: socket(ctx, "runtime_socket", raw.runtime_socket, defaults.runtime_socket),
        tcp: raw.runtime_address.and_then(|text| {
            loopback(ctx, &child(path, "runtime_address"), text, "runtime commands change the servers")
        }),
    };
    let count = |n: i64| usize::try_from(n).ok();
    // Every key is checked (and reported) before a missing control socket ends this.
    let supervision = Supervision {
        control_socket: PathBuf::new(),
        runtime,
        user: ctx.word(path, "user", raw.user),
        group: ctx.word(path, "group", raw.group),
        worker_threads: ctx.int(path, "worker_threads", raw.worker_threads, 1..=1024).and_then(count),
        max_old_workers: ctx
            .int(path, "max_old_workers", raw.max_old_workers, 0..=1000)
            .and_then(count)
            .unwrap_or(Supervision::DEFAULT_MAX_OLD_WORKERS),
        hard_stop_after: ctx.duration(path, "hard_stop_after", raw.hard_stop_after),
        worker_start_timeout: ctx
            .duration(path, "worker_start_timeout", raw.worker_start_timeout)
            .unwrap_or(Supervision::DEFAULT_WORKER_START_TIMEOUT),
    };
    Some(Supervision { control_socket: control_socket?, ..supervision })
}

/// An `IP:port` on loopback, for what is for this host only (`why`, in the message).
pub fn loopback(ctx: &mut Checker<'_>, field: &str, text: &str, why: &str) -> Option<SocketAddr> {
    match crate::address::parse_socket_addr(text, false) {
        Ok(address) if address.ip().is_loopback() => Some(address),
        Ok(address) => {
            ctx.error(field, format!("must be a loopback address ({why}), got {address}"));
            None
        }
        Err(message) => {
            ctx.error(field, message);
            None
        }
    }
}
