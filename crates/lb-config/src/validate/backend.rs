//! One `backends[i]` entry: its settings, health check and servers.

use std::collections::HashMap;

use super::sections::{retries, timeouts, Defaults};
use crate::address::parse_socket_addr;
use crate::check::Checker;
use crate::defaults::{
    CHECK_FALL, CHECK_INTERVAL, CHECK_METHOD, CHECK_PATH, CHECK_RISE, CHECK_STATUS, MAX_WEIGHT, WEIGHT,
};
use crate::locate::{child, item};
use crate::model::{AdminState, Backend, Balance, CheckKind, HealthCheck, HttpReuse, Mode, Server};
use crate::raw::{RawBackend, RawHealthCheck, RawServer};

pub(super) fn backend(ctx: &mut Checker<'_>, path: &str, raw: &RawBackend, d: &Defaults) -> Backend {
    let servers_path = child(path, "servers");
    let mut servers = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, raw_server) in raw.servers.iter().flatten().enumerate() {
        let server_path = item(&servers_path, i);
        let server = server(ctx, &server_path, raw_server);
        if !server.name.is_empty() {
            if let Some(first) = names.get(&server.name) {
                let line = ctx.line_of(first);
                let message = format!("duplicate server name `{}` (first at line {line})", server.name);
                ctx.error(&child(&server_path, "name"), message);
            } else {
                names.insert(server.name.clone(), child(&server_path, "name"));
            }
        }
        servers.push(server);
    }
    Backend {
        name: ctx.name(path, raw.name.as_ref()),
        mode: ctx.keyword(path, "mode", raw.mode.as_ref(), Mode::KEYWORDS).unwrap_or(d.mode),
        balance: ctx.keyword(path, "balance", raw.balance.as_ref(), Balance::KEYWORDS).unwrap_or(d.balance),
        servers,
        health_check: health_check(ctx, &child(path, "health_check"), raw.health_check.as_ref()),
        timeouts: timeouts(ctx, &child(path, "timeouts"), raw.timeouts.as_ref(), d.timeouts),
        retries: retries(ctx, path, raw.retries).unwrap_or(d.retries),
        redispatch: raw.redispatch.unwrap_or(d.redispatch),
        http_reuse: ctx
            .keyword(path, "http_reuse", raw.http_reuse.as_ref(), HttpReuse::KEYWORDS)
            .unwrap_or(d.http_reuse),
    }
}

/// One server entry, checked on its own: lb-watcher relies on it. Once an apply of its run
/// succeeded, it checks only the servers a change adds or moves, in a file of the base and
/// those servers (lb-watcher's `render::added`), trusting that entries which each loaded in
/// some file of the same base load together; names are unique there by construction. A check
/// that looks at a server with the others (beyond duplicate names) breaks that: lb-watcher
/// would then have to check its files whole.
fn server(ctx: &mut Checker<'_>, path: &str, raw: &RawServer) -> Server {
    let address = match &raw.address {
        None => {
            ctx.error(path, "missing `address`");
            None
        }
        Some(text) => match parse_socket_addr(text, false) {
            Ok(address) => Some(address),
            Err(message) => {
                ctx.error(&child(path, "address"), message);
                None
            }
        },
    };
    let weight = ctx.int(path, "weight", raw.weight, 0..=i64::from(MAX_WEIGHT));
    Server {
        name: ctx.name(path, raw.name.as_ref()),
        address: address.unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
        weight: weight.and_then(|w| u32::try_from(w).ok()).unwrap_or(WEIGHT),
        check: raw.check.unwrap_or(false),
        slowstart: ctx.duration(path, "slowstart", raw.slowstart.as_ref()),
        max_connections: ctx.limit(path, "max_connections", raw.max_connections),
        state: ctx.keyword(path, "state", raw.state.as_ref(), AdminState::KEYWORDS).unwrap_or(AdminState::Ready),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Tcp,
    Http,
}

const KINDS: &[(&str, Kind)] = &[("tcp", Kind::Tcp), ("http", Kind::Http)];

fn health_check(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawHealthCheck>) -> HealthCheck {
    let Some(raw) = raw else {
        return HealthCheck::default();
    };
    let kind = ctx.keyword(path, "type", raw.kind.as_ref(), KINDS).unwrap_or(Kind::Tcp);
    let count =
        |ctx: &mut Checker<'_>, key, value| ctx.int(path, key, value, 1..=100).and_then(|n| u32::try_from(n).ok());
    let interval = ctx.duration(path, "interval", raw.interval.as_ref());
    let rise = count(ctx, "rise", raw.rise);
    let fall = count(ctx, "fall", raw.fall);
    let kind = match kind {
        Kind::Tcp => {
            let http_only = [
                ("method", raw.method.is_some()),
                ("path", raw.path.is_some()),
                ("host", raw.host.is_some()),
                ("expect_status", raw.expect_status.is_some()),
            ];
            for (key, given) in http_only {
                if given {
                    ctx.error(&child(path, key), "only applies to `type: http` checks");
                }
            }
            CheckKind::Tcp
        }
        Kind::Http => http_check(ctx, path, raw),
    };
    HealthCheck {
        kind,
        interval: interval.unwrap_or(CHECK_INTERVAL),
        rise: rise.unwrap_or(CHECK_RISE),
        fall: fall.unwrap_or(CHECK_FALL),
    }
}

fn http_check(ctx: &mut Checker<'_>, path: &str, raw: &RawHealthCheck) -> CheckKind {
    let method = raw.method.clone().unwrap_or_else(|| CHECK_METHOD.to_owned());
    // The method goes on the request line as is: it must be an HTTP token.
    if method.is_empty() || !method.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)) {
        ctx.error(&child(path, "method"), format!("invalid HTTP method `{method}`"));
    }
    let check_path = raw.path.clone().unwrap_or_else(|| CHECK_PATH.to_owned());
    if !check_path.starts_with('/') || check_path.chars().any(|c| c.is_whitespace() || c.is_control()) {
        ctx.error(&child(path, "path"), format!("`{check_path}` must start with `/` and contain no spaces"));
    }
    let expect_status = ctx.int(path, "expect_status", raw.expect_status, 100..=599);
    CheckKind::Http {
        method,
        path: check_path,
        host: ctx.word(path, "host", raw.host.as_ref()),
        expect_status: expect_status.and_then(|s| u16::try_from(s).ok()).unwrap_or(CHECK_STATUS),
    }
}
