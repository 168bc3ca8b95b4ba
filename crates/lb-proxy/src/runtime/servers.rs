//! The runtime commands that change servers: admin state, weight, membership, sessions.
//!
//! `add server` follows HAProxy: the new server starts in maintenance, so that whoever adds it
//! decides when it takes traffic (`enable server` or `set server … state ready`); with `check`
//! it is also health DOWN until its checks pass. `del server` takes a server in maintenance or
//! drain that holds no connection: drain first, wait for `scur` to reach 0, then delete.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use lb_config::AdminState;
use lb_supervisor::RuntimeResult;

use super::ProxyRuntime;
use crate::backend::{BackendState, ServerState};
use crate::health;

/// Largest weight (HAProxy's and the configuration's).
const MAX_WEIGHT: u32 = 256;

pub(super) fn command(rt: &ProxyRuntime, words: &[&str]) -> RuntimeResult {
    match words {
        ["disable", "server", target] => with_server(rt, target, |b, s| set_state(b, s, AdminState::Maint)),
        ["enable", "server", target] => with_server(rt, target, |b, s| set_state(b, s, AdminState::Ready)),
        ["disable" | "enable", "server", ..] => RuntimeResult::refused("Require 'backend/server'."),
        ["set", "server", target, "state", state] => {
            let Some(state) = parse_state(state) else {
                return RuntimeResult::refused("'set server <srv> state' expects 'ready', 'drain' and 'maint'.");
            };
            with_server(rt, target, |b, s| set_state(b, s, state))
        }
        ["set", "server", target, "weight", weight] | ["set", "weight", target, weight] => {
            with_server(rt, target, |b, s| match parse_weight_for(weight, s.config().weight) {
                Ok(w) => {
                    b.set_weight(s, w);
                    RuntimeResult::ok("")
                }
                Err(message) => RuntimeResult::refused(message),
            })
        }
        ["set", "server", target, "addr", addr, rest @ ..] => {
            with_server(rt, target, |b, s| set_addr(rt, b, s, addr, rest))
        }
        ["set", "server", target, "health", health] => with_server(rt, target, |b, s| match *health {
            "up" | "down" => {
                if s.checked() {
                    b.set_up(s, *health == "up", std::time::Instant::now());
                }
                RuntimeResult::ok("")
            }
            // HAProxy's NOLB: up but taking no new traffic. lb-proxy has no such health state.
            "stopping" => RuntimeResult::refused("'stopping' is not supported here: use 'set server <srv> state drain'."),
            _ => RuntimeResult::refused("'set server <srv> health' expects 'up', 'stopping', or 'down'."),
        }),
        ["set", "server", target, "agent", _] => {
            with_server(rt, target, |_, _| RuntimeResult::refused("agent checks are not enabled on this server."))
        }
        ["enable", "health", target] => with_server(rt, target, |b, s| {
            if !s.config().check {
                return RuntimeResult::refused("Health checks are not configured on this server, cannot enable.");
            }
            b.pause_checks(s, false);
            RuntimeResult::ok("")
        }),
        ["disable", "health", target] => with_server(rt, target, |b, s| {
            b.pause_checks(s, true);
            RuntimeResult::ok("")
        }),
        ["enable", "agent", target] => with_server(rt, target, |_, _| {
            RuntimeResult::refused("Agent was not configured on this server, cannot enable.")
        }),
        // Nothing to stop: HAProxy answers nothing either.
        ["disable", "agent", target] => with_server(rt, target, |_, _| RuntimeResult::ok("")),
        ["enable" | "disable", "health" | "agent", ..] => RuntimeResult::refused("Require 'backend/server'."),
        ["set", "server", _, "state"] => {
            RuntimeResult::refused("'set server <srv> state' expects 'ready', 'drain' and 'maint'.")
        }
        ["set", "server", ..] => RuntimeResult::refused(
            "usage: set server <backend>/<server> state <ready|drain|maint> | weight <0-256>[%] | addr <ip> [port <port>] | health <up|down>",
        ),
        ["set", "weight", ..] => RuntimeResult::refused("usage: set weight <backend>/<server> <0-256>"),
        ["get", "weight", target] => {
            with_server(rt, target, |_, s| RuntimeResult::ok(format!("{} (initial {})", s.weight(), s.config().weight)))
        }
        ["shutdown", "sessions", "server", target] => with_server(rt, target, |b, s| {
            let closed = s.kill_sessions();
            tracing::warn!("Server {}/{}: {closed} connections shut down (runtime).", b.name(), s.name());
            RuntimeResult::ok("")
        }),
        ["add", "server", target, rest @ ..] => add(rt, target, rest),
        ["del", "server", target] => {
            let Some((backend, server)) = target.split_once('/') else {
                return RuntimeResult::refused("Require 'backend/server'.");
            };
            let Some(backend) = rt.proxy.backends.get(backend) else {
                return RuntimeResult::refused("No such backend.");
            };
            match backend.remove_server(server) {
                Ok(removed) => {
                    tracing::warn!("Server {}/{} deleted (runtime).", backend.name(), removed.name());
                    RuntimeResult::ok("Server deleted.")
                }
                Err(message) => RuntimeResult::refused(message),
            }
        }
        _ => RuntimeResult::refused(format!("Unknown command: '{}'. Type 'help' for the list.", words.join(" "))),
    }
}

/// Run `f` on `backend/server`, or say which part does not exist.
fn with_server(
    rt: &ProxyRuntime,
    target: &str,
    f: impl FnOnce(&Arc<BackendState>, &Arc<ServerState>) -> RuntimeResult,
) -> RuntimeResult {
    let Some((backend, server)) = target.split_once('/') else {
        return RuntimeResult::refused("Require 'backend/server'.");
    };
    let Some(backend) = rt.proxy.backends.get(backend) else {
        return RuntimeResult::refused("No such backend.");
    };
    let Some(server) = backend.server(server) else {
        return RuntimeResult::refused("No such server.");
    };
    f(backend, &server)
}

fn set_state(backend: &BackendState, server: &ServerState, state: AdminState) -> RuntimeResult {
    backend.set_admin_state(server, state);
    RuntimeResult::ok("")
}

fn parse_state(text: &str) -> Option<AdminState> {
    match text {
        "ready" => Some(AdminState::Ready),
        "drain" => Some(AdminState::Drain),
        "maint" => Some(AdminState::Maint),
        _ => None,
    }
}

/// A weight, or with `%` a share of the configured (`initial`) one, as HAProxy takes it.
pub(super) fn parse_weight_for(text: &str, initial: u32) -> Result<u32, String> {
    let Some(percent) = text.strip_suffix('%') else {
        return parse_weight(text);
    };
    match percent.parse::<u64>() {
        Ok(p) => Ok(u32::try_from(u64::from(initial) * p / 100).unwrap_or(MAX_WEIGHT).min(MAX_WEIGHT)),
        Err(_) => Err(format!("Relative weight must be a number followed by '%', got '{text}'.")),
    }
}

/// `set server B/S addr IP [port PORT]`, answered with HAProxy's words.
fn set_addr(rt: &ProxyRuntime, backend: &BackendState, server: &ServerState, ip: &str, rest: &[&str]) -> RuntimeResult {
    const BY: &str = "by 'stats socket command'";
    let Ok(ip) = ip.parse::<std::net::IpAddr>() else {
        return RuntimeResult::refused(format!("Invalid addr '{ip}' {BY}"));
    };
    let old = server.addr();
    let port = match rest {
        [] => old.port(),
        ["port", port] => match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return RuntimeResult::refused(format!("Invalid port '{port}' {BY}")),
        },
        _ => return RuntimeResult::refused("usage: set server <backend>/<server> addr <ip> [port <port>]"),
    };
    let new = SocketAddr::new(ip, port);
    if new == old {
        return RuntimeResult::ok(format!("no need to change the addr {BY}"));
    }
    backend.set_addr(server, new);
    rt.proxy.pool.forget(backend.name(), server.index());
    let mut changes = Vec::new();
    if new.ip() != old.ip() {
        changes.push(format!("IP changed from '{}' to '{}'", old.ip(), new.ip()));
    }
    if new.port() != old.port() {
        changes.push(format!("port changed from '{}' to '{}'", old.port(), new.port()));
    }
    let message = format!("{} {BY}", changes.join(", "));
    tracing::warn!("Server {}/{}: {message}.", backend.name(), server.name());
    RuntimeResult::ok(message)
}

pub(super) fn parse_weight(text: &str) -> Result<u32, String> {
    match text.parse::<u32>() {
        Ok(w) if w <= MAX_WEIGHT => Ok(w),
        Ok(_) => Err("Absolute weight can only be between 0 and 256 inclusive.".into()),
        Err(_) => Err(format!("Weight must be a number between 0 and 256, got '{text}'.")),
    }
}

/// `add server B/S ADDR:PORT [check] [weight N] [slowstart T]`.
fn add(rt: &ProxyRuntime, target: &str, args: &[&str]) -> RuntimeResult {
    let Some((backend_name, name)) = target.split_once('/') else {
        return RuntimeResult::refused("Require 'backend/server'.");
    };
    let Some(backend) = rt.proxy.backends.get(backend_name) else {
        return RuntimeResult::refused("No such backend.");
    };
    if let Err(message) = valid_name(name) {
        return RuntimeResult::refused(message);
    }
    let config = match server_config(name, args) {
        Ok(config) => config,
        Err(message) => return RuntimeResult::refused(message),
    };
    let check = config.check;
    match backend.add_server(config) {
        Ok(server) => {
            if check {
                health::spawn_health_check(backend, &server, rt.shutdown().clone());
            }
            tracing::warn!("Server {}/{} added (runtime), in maintenance.", backend.name(), server.name());
            RuntimeResult::ok("New server registered.")
        }
        Err(message) => RuntimeResult::refused(message),
    }
}

/// A server name as the configuration allows it (so that lb-watcher can write it to the file).
pub(super) fn valid_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("A server name must not be empty.".into());
    }
    if !name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')) {
        return Err(format!("Invalid server name '{name}' (letters, digits, '_', '.' and '-')."));
    }
    Ok(())
}

pub(super) fn server_config(name: &str, args: &[&str]) -> Result<lb_config::Server, String> {
    let Some((address, mut rest)) = args.split_first() else {
        return Err("'add server' expects an address: add server <bk>/<srv> <addr>:<port> [check] [weight <w>] [slowstart <time>]".into());
    };
    let address: SocketAddr = address
        .parse()
        .map_err(|_| format!("Invalid address '{address}': expected IP:port (no host names), e.g. 10.0.0.5:8080."))?;
    if address.port() == 0 {
        return Err(format!("Invalid address '{address}': port 0."));
    }
    let mut server = lb_config::Server {
        name: name.to_owned(),
        address,
        weight: 1,
        check: false,
        slowstart: None,
        max_connections: None,
        state: AdminState::Maint,
    };
    while let Some((word, after)) = rest.split_first() {
        rest = after;
        match *word {
            "check" => server.check = true,
            "weight" | "slowstart" => {
                let Some((value, after)) = rest.split_first() else {
                    return Err(format!("'{word}' needs a value."));
                };
                rest = after;
                if *word == "weight" {
                    server.weight = parse_weight(value)?;
                } else {
                    server.slowstart = Some(parse_duration(value)?);
                }
            }
            other => return Err(format!("Unknown keyword '{other}' (expected check, weight or slowstart).")),
        }
    }
    Ok(server)
}

/// `10s`, `500ms`, `2m`, or a number of milliseconds as HAProxy takes it.
pub(super) fn parse_duration(text: &str) -> Result<Duration, String> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().map_err(|_| format!("Invalid time '{text}' (e.g. 500ms, 10s, 2m)."))?;
    let d = match unit {
        "" | "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n.saturating_mul(60)),
        "h" => Duration::from_secs(n.saturating_mul(3600)),
        _ => return Err(format!("Invalid time '{text}' (e.g. 500ms, 10s, 2m).")),
    };
    if d > Duration::from_secs(24 * 3600) {
        return Err(format!("Invalid time '{text}': at most 24h."));
    }
    Ok(d)
}
