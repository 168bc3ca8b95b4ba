//! The `global` keys lb-supervisor reads (control and runtime sockets, user and group, worker
//! threads, the reload limits, `canary`), checked once for every daemon's schema.
//!
//! Each schema's raw `global` struct still declares these keys itself: serde's `flatten`, the
//! one way to share a block of fields, buffers the whole map first, which loses every line
//! number under `global` and cannot list the expected keys of an unknown one. So each schema
//! lends its raw values through [`RawSupervision`], and [`supervision`] turns them into
//! lb-supervisor's [`Supervision`] with the same checks, defaults and messages for both.

use std::net::SocketAddr;
use std::path::PathBuf;

use lb_supervisor::{CanarySettings, Ratio, RuntimeEndpoints, Share, Supervision, TooLittleTraffic};
use serde::{Deserialize, Serialize};

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
    pub canary: Option<&'a RawCanary>,
}

/// `global.canary:` as written, the same block in every daemon's schema.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, expecting = "a map of canary settings")]
pub struct RawCanary {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub min_requests: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub too_little_traffic: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_error_ratio: Option<RawNumber>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_error_rate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_p99_ratio: Option<RawNumber>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_p99_increase: Option<String>,
}

/// A number as YAML gives it (`2`, `1.5`), or as text.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(untagged, expecting = "a number")]
pub enum RawNumber {
    Int(i64),
    Float(f64),
    Text(String),
}

impl RawNumber {
    fn text(&self) -> String {
        match self {
            RawNumber::Int(n) => n.to_string(),
            RawNumber::Float(x) => x.to_string(),
            RawNumber::Text(t) => t.clone(),
        }
    }
}

impl RawCanary {
    /// The raw form of validated settings (`Config::to_yaml`).
    pub fn of(settings: &CanarySettings) -> RawCanary {
        let duration = |d| Some(crate::units::format_duration(d));
        RawCanary {
            share: Some(settings.share.to_string()),
            duration: duration(settings.duration),
            min_requests: Some(i64::try_from(settings.min_requests).unwrap_or(i64::MAX)),
            too_little_traffic: Some(
                match settings.too_little_traffic {
                    TooLittleTraffic::Promote => "promote",
                    TooLittleTraffic::Rollback => "rollback",
                }
                .to_owned(),
            ),
            max_error_ratio: Some(RawNumber::Text(settings.max_error_ratio.to_string())),
            max_error_rate: Some(settings.max_error_rate.to_string()),
            max_p99_ratio: Some(RawNumber::Text(settings.max_p99_ratio.to_string())),
            max_p99_increase: duration(settings.max_p99_increase),
        }
    }
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
        canary: raw.canary.map(|raw| canary(ctx, &child(path, "canary"), raw)),
    };
    Some(Supervision { control_socket: control_socket?, ..supervision })
}

/// `global.canary`: every key optional, with the defaults lb-supervisor documents.
fn canary(ctx: &mut Checker<'_>, path: &str, raw: &RawCanary) -> CanarySettings {
    let defaults = CanarySettings::default();
    let mut parsed = |key: &str, text: Option<String>, parse: &dyn Fn(&str) -> Result<u32, String>| {
        let text = text?;
        parse(&text).map_err(|message| ctx.error(&child(path, key), message)).ok()
    };
    let share = parsed("share", raw.share.clone(), &|t| Share::parse(t).map(Share::ppm)).map(Share::from_ppm);
    let rate = parsed("max_error_rate", raw.max_error_rate.clone(), &|t| Share::parse(t).map(Share::ppm));
    let error_ratio = parsed("max_error_ratio", raw.max_error_ratio.as_ref().map(RawNumber::text), &thousandths);
    let p99_ratio = parsed("max_p99_ratio", raw.max_p99_ratio.as_ref().map(RawNumber::text), &thousandths);
    let duration = ctx.duration(path, "duration", raw.duration.as_ref());
    if duration.is_some_and(|d| d > std::time::Duration::from_secs(3600)) {
        ctx.error(&child(path, "duration"), "the window must be at most 1h (a canary holds two workers)");
    }
    let table = [("promote", TooLittleTraffic::Promote), ("rollback", TooLittleTraffic::Rollback)];
    CanarySettings {
        share: share.unwrap_or(defaults.share),
        duration: duration.unwrap_or(defaults.duration),
        min_requests: ctx
            .int(path, "min_requests", raw.min_requests, 0..=i64::MAX)
            .and_then(|n| u64::try_from(n).ok())
            .unwrap_or(defaults.min_requests),
        too_little_traffic: ctx
            .keyword(path, "too_little_traffic", raw.too_little_traffic.as_ref(), &table)
            .unwrap_or(defaults.too_little_traffic),
        max_error_ratio: error_ratio.map_or(defaults.max_error_ratio, Ratio::from_thousandths),
        max_error_rate: rate.map_or(defaults.max_error_rate, Share::from_ppm),
        max_p99_ratio: p99_ratio.map_or(defaults.max_p99_ratio, Ratio::from_thousandths),
        max_p99_increase: ctx
            .duration(path, "max_p99_increase", raw.max_p99_increase.as_ref())
            .unwrap_or(defaults.max_p99_increase),
    }
}

fn thousandths(text: &str) -> Result<u32, String> {
    Ratio::parse(text).map(|r| r.thousandths())
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
