//! `global:` and `global.log:`.

use std::net::SocketAddr;
use std::path::PathBuf;

use super::Ctx;
use crate::address::{parse_log_target, parse_socket_addr, resolve};
use crate::defaults::{
    CLOSE_SPREAD, CONTROL_SOCKET, LOG_TAG, MAX_CONNECTIONS, MAX_OLD_WORKERS, RUNTIME_NAME, RUNTIME_SOCKET,
    STATS_REFRESH, WORKER_START_TIMEOUT,
};
use crate::locate::child;
use crate::model::{Facility, Global, Log, LogFormat, LogHeader, LogTarget, Stats};
use crate::raw::{RawGlobal, RawLog, RawStats};

/// RFC 5424 limits APP-NAME (the tag) to 48 printable characters.
const MAX_TAG_LEN: usize = 48;

pub(super) fn global(ctx: &mut Ctx<'_>, raw: Option<&RawGlobal>) -> Global {
    let path = "global";
    let Some(raw) = raw else {
        return Global::default();
    };
    let worker_threads = ctx.int(path, "worker_threads", raw.worker_threads, 1..=1024);
    Global {
        max_connections: ctx.limit(path, "max_connections", raw.max_connections).unwrap_or(MAX_CONNECTIONS),
        worker_threads: worker_threads.and_then(|n| usize::try_from(n).ok()),
        user: ctx.word(path, "user", raw.user.as_ref()),
        group: ctx.word(path, "group", raw.group.as_ref()),
        log: log(ctx, &child(path, "log"), raw.log.as_ref()),
        control_socket: socket(ctx, path, "control_socket", raw.control_socket.as_ref())
            .unwrap_or_else(|| PathBuf::from(CONTROL_SOCKET)),
        runtime_socket: socket(ctx, path, "runtime_socket", raw.runtime_socket.as_ref())
            .unwrap_or_else(|| PathBuf::from(RUNTIME_SOCKET)),
        runtime_address: raw.runtime_address.as_ref().and_then(|text| {
            let field = child(path, "runtime_address");
            let address = parsed(ctx, &field, text)?;
            if !address.ip().is_loopback() {
                ctx.error(
                    &field,
                    format!("must be a loopback address (runtime commands change the servers), got {address}"),
                );
                return None;
            }
            Some(address)
        }),
        stats: stats(ctx, &child(path, "stats"), raw.stats.as_ref()),
        max_old_workers: ctx
            .int(path, "max_old_workers", raw.max_old_workers, 0..=1000)
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(MAX_OLD_WORKERS),
        worker_start_timeout: ctx
            .duration(path, "worker_start_timeout", raw.worker_start_timeout.as_ref())
            .unwrap_or(WORKER_START_TIMEOUT),
        hard_stop_after: ctx.duration(path, "hard_stop_after", raw.hard_stop_after.as_ref()),
        close_spread: ctx.duration(path, "close_spread", raw.close_spread.as_ref()).unwrap_or(CLOSE_SPREAD),
        runtime_name: ctx
            .word(path, "runtime_name", raw.runtime_name.as_ref())
            .unwrap_or_else(|| RUNTIME_NAME.to_owned()),
    }
}

/// An `IP:port` to listen on, reported at `field` when it is not one.
fn parsed(ctx: &mut Ctx<'_>, field: &str, text: &str) -> Option<SocketAddr> {
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
fn stats(ctx: &mut Ctx<'_>, path: &str, raw: Option<&RawStats>) -> Option<Stats> {
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

fn socket(ctx: &mut Ctx<'_>, parent: &str, key: &str, text: Option<&String>) -> Option<PathBuf> {
    let text = text?;
    if text.trim().is_empty() {
        ctx.error(&child(parent, key), "must not be empty");
        return None;
    }
    Some(resolve(ctx.base, text))
}

fn log(ctx: &mut Ctx<'_>, path: &str, raw: Option<&RawLog>) -> Log {
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
