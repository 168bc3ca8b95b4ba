//! `defaults:`, and the pieces frontends and backends override from it: timeouts and error
//! files.

use std::collections::BTreeMap;

use crate::address::resolve;
use crate::check::Checker;
use crate::defaults::{MAX_BODY_SIZE_RANGE, MAX_HEADER_SIZE, MAX_MAX_HEADER_SIZE, MIN_HEADER_SIZE, RETRIES};
use crate::error_pages::{load_error_file, merged, parse_status_key};
use crate::locate::child;
use crate::model::{Balance, ErrorPage, ErrorPages, HttpReuse, Mode, Timeouts};
use crate::policy::AccessLogFormat;
use crate::raw::{RawDefaults, RawTimeouts, StatusKey};

/// `defaults:` resolved: what each frontend and backend starts from.
#[derive(Debug)]
pub(super) struct Defaults {
    pub(super) mode: Mode,
    pub(super) balance: Balance,
    pub(super) retries: u32,
    pub(super) redispatch: bool,
    pub(super) http_reuse: HttpReuse,
    pub(super) max_header_size: usize,
    pub(super) max_body_size: Option<usize>,
    pub(super) forward_for: bool,
    pub(super) timeouts: Timeouts,
    pub(super) error_pages: ErrorPages,
    pub(super) log_format: Option<AccessLogFormat>,
}

pub(super) fn defaults(ctx: &mut Checker<'_>, raw: Option<&RawDefaults>) -> Defaults {
    let path = "defaults";
    let empty = RawDefaults::default();
    let raw = raw.unwrap_or(&empty);
    let timeouts = timeouts(ctx, &child(path, "timeouts"), raw.timeouts.as_ref(), Timeouts::default());
    let files = error_files(ctx, &child(path, "error_files"), raw.error_files.as_ref());
    Defaults {
        mode: ctx.keyword(path, "mode", raw.mode.as_ref(), Mode::KEYWORDS).unwrap_or(Mode::Http),
        balance: ctx.keyword(path, "balance", raw.balance.as_ref(), Balance::KEYWORDS).unwrap_or(Balance::LeastConn),
        retries: retries(ctx, path, raw.retries).unwrap_or(RETRIES),
        redispatch: raw.redispatch.unwrap_or(true),
        http_reuse: ctx
            .keyword(path, "http_reuse", raw.http_reuse.as_ref(), HttpReuse::KEYWORDS)
            .unwrap_or(HttpReuse::Never),
        max_header_size: header_size(ctx, path, raw.max_header_size.as_ref()).unwrap_or(MAX_HEADER_SIZE),
        max_body_size: body_size(ctx, path, raw.max_body_size.as_ref()),
        forward_for: raw.forward_for.unwrap_or(true),
        timeouts,
        error_pages: merged(&ErrorPages::defaults(), files),
        log_format: super::policy::log_format(ctx, path, raw.log_format.as_ref()),
    }
}

pub(super) fn retries(ctx: &mut Checker<'_>, parent: &str, value: Option<i64>) -> Option<u32> {
    ctx.int(parent, "retries", value, 0..=100).and_then(|n| u32::try_from(n).ok())
}

pub(super) fn header_size(ctx: &mut Checker<'_>, parent: &str, text: Option<&String>) -> Option<usize> {
    ctx.size(parent, "max_header_size", text, MIN_HEADER_SIZE..=MAX_MAX_HEADER_SIZE, "bytes")
}

pub(super) fn body_size(ctx: &mut Checker<'_>, parent: &str, text: Option<&String>) -> Option<usize> {
    ctx.size(parent, "max_body_size", text, MAX_BODY_SIZE_RANGE, "bytes")
}

/// `base` with each timeout given in `raw` replaced.
pub(super) fn timeouts(ctx: &mut Checker<'_>, path: &str, raw: Option<&RawTimeouts>, base: Timeouts) -> Timeouts {
    let Some(raw) = raw else { return base };
    Timeouts {
        connect: ctx.duration(path, "connect", raw.connect.as_ref()).unwrap_or(base.connect),
        client: ctx.duration(path, "client", raw.client.as_ref()).unwrap_or(base.client),
        server: ctx.duration(path, "server", raw.server.as_ref()).unwrap_or(base.server),
        http_request: ctx.duration(path, "http_request", raw.http_request.as_ref()).unwrap_or(base.http_request),
        http_keep_alive: ctx
            .duration(path, "http_keep_alive", raw.http_keep_alive.as_ref())
            .unwrap_or(base.http_keep_alive),
        check: ctx.duration(path, "check", raw.check.as_ref()).unwrap_or(base.check),
        tunnel: ctx.duration(path, "tunnel", raw.tunnel.as_ref()).unwrap_or(base.tunnel),
    }
}

/// Reads every errorfile configured at `path`; problems point at the status key.
pub(super) fn error_files(
    ctx: &mut Checker<'_>,
    path: &str,
    raw: Option<&BTreeMap<StatusKey, String>>,
) -> BTreeMap<u16, ErrorPage> {
    let mut pages = BTreeMap::new();
    for (StatusKey(key), file) in raw.into_iter().flatten() {
        let field = child(path, key);
        let status = match parse_status_key(key) {
            Ok(status) => status,
            Err(message) => {
                ctx.key_error(&field, message);
                continue;
            }
        };
        if file.trim().is_empty() {
            ctx.key_error(&field, "expected the path of an error file");
            continue;
        }
        match load_error_file(&resolve(ctx.base, file), status) {
            Ok(page) => {
                pages.insert(status, page);
            }
            Err(message) => ctx.key_error(&field, message),
        }
    }
    pages
}
