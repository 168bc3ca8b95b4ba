//! `global:` and `global.log:`.

use std::net::SocketAddr;

use crate::address::{parse_log_target, parse_socket_addr};
use crate::check::Checker;
use crate::defaults::{CLOSE_SPREAD, LOG_TAG, MAX_CONNECTIONS, RUNTIME_NAME, SOCKETS, STATS_REFRESH};
use crate::locate::child;
use crate::model::{Facility, Global, Log, LogFormat, LogHeader, LogTarget, Stats};
use crate::raw::{RawGlobal, RawLog, RawStats};
use crate::supervision::{supervision, RawSupervision};

/// RFC 5424 limits APP-NAME (the tag) to 48 printable characters.
const MAX_TAG_LEN: usize = 48;

pub(super) fn global(ctx: &mut Checker<'_>, raw: Option<&RawGlobal>) -> Global {
    let path = "global";
    let Some(raw) = raw else {
        return Global::default();
    };
    let lent = RawSupervision {
        control_socket: raw.control_socket.as_ref(),
        runtime_socket: raw.runtime_socket.as_ref(),
        runtime_address: raw.runtime_address.as_ref(),
        user: raw.user.as_ref(),
        group: raw.group.as_ref(),
        worker_threads: raw.worker_threads,
        max_old_workers: raw.max_old_workers,
        hard_stop_after: raw.hard_stop_after.as_ref(),
        worker_start_timeout: raw.worker_start_timeout.as_ref(),
        canary: raw.canary.as_ref(),
    };
    Global {
        max_connections: ctx.limit(path, "max_connections", raw.max_connections).unwrap_or(MAX_CONNECTIONS),
        // Both sockets have defaults: never `None`.
        supervision: supervision(ctx, &lent, SOCKETS).unwrap_or_else(|| Global::default().supervision),
        log: log(ctx, &child(path, "log"), raw.log.as_ref()),
        stats: stats(ctx, &child(path, "stats"), raw.stats.as_ref()),
        close_spread: ctx.duration(path, "close_spread", raw.close_spread.as_ref()).unwrap_or(CLOSE_SPREAD),
        runtime_name: ctx
            .word(path, "runtime_name", raw.runtime_name.as_ref())
            .unwrap_or_else(|| RUNTIME_NAME.to_owned()),
    }
}

/// An `IP:port` to listen on, reported at `field` when it is not one.
fn parsed(ctx: &mut Checker<'_>, field: &str, text: &str) -> Option<SocketAddr> {
    match parse_socket_addr(text, false) {
        Ok(address) => Some(address),
        Err(message) => {
            ctx.error(field, message);
            None
        }
    }
}

/// `global.stats`: off unless present; an explicit address (never a wildcard: the page
/// shows every server, it is not for the public side).
fn stats(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawStats>) -> Option<Stats> {
    let raw = raw?;
    let field = child(path, "address");
    let Some(text) = raw.address.as_ref() else {
        ctx.key_error(path, "`address` is required (a loopback or internal IP:port)");
        return None;
    };
    let address = parsed(ctx, &field, text)?;
    if address.ip().is_unspecified() {
        ctx.error(&field, format!("must name one address (loopback or internal), not a wildcard: {address}"));
        return None;
    }
    let refresh = ctx.duration(path, "refresh", raw.refresh.as_ref()).unwrap_or(STATS_REFRESH);
    Some(Stats { address, refresh })
}

fn log(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawLog>) -> Log {
    let Some(raw) = raw else {
        return Log::default();
    };
    let target = raw.target.as_ref().and_then(|text| match parse_log_target(text, ctx.base) {
        Ok(target) => Some(target),
        Err(message) => {
            ctx.error(&child(path, "target"), message);
            None
        }
    });
    let tag = ctx.word(path, "tag", raw.tag.as_ref());
    if let Some(tag) = &tag {
        if tag.len() > MAX_TAG_LEN || !tag.is_ascii() {
            ctx.error(&child(path, "tag"), "must be at most 48 ASCII characters");
        }
    }
    let format = ctx.keyword(path, "format", raw.format.as_ref(), LogFormat::KEYWORDS).unwrap_or(LogFormat::Haproxy);
    let default_header = match format {
        LogFormat::Haproxy => LogHeader::Rfc3164,
        LogFormat::Json => LogHeader::Raw,
    };
    Log {
        target: target.unwrap_or(LogTarget::Stdout),
        format,
        header: ctx.keyword(path, "header", raw.header.as_ref(), LogHeader::KEYWORDS).unwrap_or(default_header),
        tag: tag.unwrap_or_else(|| LOG_TAG.to_owned()),
        facility: ctx.keyword(path, "facility", raw.facility.as_ref(), Facility::KEYWORDS).unwrap_or(Facility::Local0),
        hostname: ctx.word(path, "hostname", raw.hostname.as_ref()),
    }
}
