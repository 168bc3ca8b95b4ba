//! Health checks: one task per checked server decides whether it is up, as HAProxy does.
//!
//! A server that stops answering must stop getting new requests quickly, and one that comes back
//! must get them again, without a person noticing. So each server with `check: true` has a task
//! that probes it (a TCP connect, or an HTTP request whose status must match) every `interval`,
//! with HAProxy's rise/fall counting: a checked server starts UP, `fall` consecutive failures
//! bring it DOWN, `rise` consecutive successes bring it back UP (with the slowstart ramp).
//!
//! Detection is sped up two ways, also as HAProxy: after a failed check on an UP server (and a
//! successful one on a DOWN server) the next checks run at the faster `interval / fall` (at
//! least 100 ms) until the transition is confirmed or abandoned; and a failed connect on real
//! traffic ([`ServerState::observe_connect`]) counts as one failure and triggers a check at once.
//! Checks are jittered so that a big fleet is not checked in waves. State changes are logged at
//! warn level in HAProxy's words, which existing log tooling knows.

mod probe;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_config::AdminState;
use rand::Rng;

use crate::backend::{BackendState, Backends, ServerState};
pub(crate) use crate::backend::{CheckResult, CheckStatus};
use lb_supervisor::Shutdown;

/// No two checks of a server closer than this, however often it is woken; also the floor of
/// the fast interval.
const MIN_GAP: Duration = Duration::from_millis(100);
/// The floor of the configured interval, so that a zero interval cannot spin.
const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Start one task per server with `check: true`: the backend's `health_check` settings,
/// `timeouts.check` for connect + response. Tasks end when `shutdown.draining()` resolves.
///
/// Servers in Maint get a task too, which checks nothing until the server leaves Maint (the
/// runtime API may do that later); then it checks at once.
pub(crate) fn spawn_health_checks(backends: &Backends, shutdown: Shutdown) {
    let Ok(runtime) = tokio::runtime::Handle::try_current() else {
        tracing::error!("health checks not started: not within a tokio runtime");
        return;
    };
    for backend in backends.iter() {
        for server in backend.servers().iter().filter(|s| s.config().check) {
            runtime.spawn(check_loop(Arc::clone(backend), Arc::clone(server), shutdown.clone()));
        }
    }
}

/// Start checking a server added at run time (`add server … check`): at once, then every
/// `interval`, until it is deleted or the worker drains.
pub(crate) fn spawn_health_check(backend: &Arc<BackendState>, server: &Arc<ServerState>, shutdown: Shutdown) {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => {
            runtime.spawn(check_loop(Arc::clone(backend), Arc::clone(server), shutdown));
        }
        Err(_) => tracing::error!(server = server.name(), "health check not started: not within a tokio runtime"),
    }
}

/// HAProxy's rise/fall counting for one server.
#[derive(Debug)]
struct Counter {
    rise: u32,
    fall: u32,
    /// Consecutive successes while DOWN.
    successes: u32,
    /// Consecutive failures while UP.
    failures: u32,
}

impl Counter {
    fn new(rise: u32, fall: u32) -> Counter {
        Counter { rise: rise.max(1), fall: fall.max(1), successes: 0, failures: 0 }
    }

    fn reset(&mut self) {
        self.successes = 0;
        self.failures = 0;
    }

    /// Count a check on a server that is `up`, plus (when `up`) a failure seen on traffic since
    /// the last check. Returns the new health when it changes.
    fn record(&mut self, up: bool, passed: bool, observed_failure: bool) -> Option<bool> {
        if up {
            self.successes = 0;
            if passed {
                self.failures = 0;
                return None;
            }
            self.failures += 1 + u32::from(observed_failure);
            if self.failures >= self.fall {
                self.reset();
                return Some(false);
            }
        } else {
            self.failures = 0;
            if !passed {
                self.successes = 0;
                return None;
            }
            self.successes += 1;
            if self.successes >= self.rise {
                self.reset();
                return Some(true);
            }
        }
        None
    }

    /// Between UP and DOWN: the next checks run at the fast interval.
    fn transitioning(&self) -> bool {
        self.failures > 0 || self.successes > 0
    }
}

/// One server's check task.
async fn check_loop(backend: Arc<BackendState>, server: Arc<ServerState>, mut shutdown: Shutdown) {
    let settings = &backend.config().health_check;
    let timeout = backend.config().timeouts.check;
    let interval = settings.interval.max(MIN_INTERVAL);
    let mut counter = Counter::new(settings.rise, settings.fall);
    let fast = (interval / counter.fall).max(MIN_GAP).min(interval);
    // A server added at run time starts DOWN: check it at once rather than after a while.
    let mut delay = if server.is_up() { random_below(interval) } else { Duration::ZERO };
    let mut last_start: Option<Instant> = None;
    loop {
        if server.is_removed() {
            return;
        }
        if server.admin_state() == AdminState::Maint || server.checks_paused() {
            // Not checked in maintenance or with checks stopped (`disable health`): wait to be
            // told it changed (or to stop).
            tokio::select! {
                () = shutdown.draining() => return,
                () = server.woken() => {}
            }
            // Start afresh on leaving: nothing seen before counts.
            counter.reset();
            let _ = server.take_observed_failure();
            delay = Duration::ZERO;
            continue;
        }
        let woken = tokio::select! {
            () = shutdown.draining() => return,
            () = tokio::time::sleep(delay) => false,
            () = server.woken() => true,
        };
        if woken {
            if let Some(gap_end) = last_start.map(|t| t + MIN_GAP) {
                tokio::select! {
                    () = shutdown.draining() => return,
                    () = tokio::time::sleep_until(gap_end.into()) => {}
                }
            }
            if server.admin_state() == AdminState::Maint || server.checks_paused() || server.is_removed() {
                continue;
            }
        }
        let observed = server.take_observed_failure();
        last_start = Some(Instant::now());
        let result = tokio::select! {
            () = shutdown.draining() => return,
            r = probe::run(&settings.kind, server.addr(), timeout) => r,
        };
        let up = server.is_up();
        if let Some(now_up) = counter.record(up, result.status.passed(), observed) {
            backend.set_up(&server, now_up, Instant::now());
            log_transition(&backend, &server, now_up, &result);
        }
        server.record_check(result);
        delay = jittered(if counter.transitioning() { fast } else { interval });
    }
}

/// Log a health transition as HAProxy does (and, when no server is left, say so).
fn log_transition(backend: &BackendState, server: &ServerState, up: bool, result: &CheckResult) {
    let active = backend.active_servers();
    tracing::warn!("{}", transition_line(backend.name(), server.name(), up, result, active));
    if !up && active == 0 {
        tracing::error!("backend {} has no server available!", backend.name());
    }
}

/// `Server b/s is DOWN, reason: …, info: "…", check duration: 3ms. 1 active servers left.`
fn transition_line(backend: &str, server: &str, up: bool, result: &CheckResult, active: usize) -> String {
    let mut line =
        format!("Server {backend}/{server} is {}, reason: {}", if up { "UP" } else { "DOWN" }, result.status.reason());
    if let Some(code) = result.code {
        line.push_str(&format!(", code: {code}"));
    }
    if let Some(info) = &result.info {
        line.push_str(&format!(", info: \"{info}\""));
    }
    line.push_str(&format!(
        ", check duration: {}ms. {active} active servers {}.",
        result.duration.as_millis(),
        if up { "online" } else { "left" }
    ));
    line
}

/// A random duration in `[0, d)` (zero for zero).
fn random_below(d: Duration) -> Duration {
    let nanos = u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
    if nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(rand::rng().random_range(0..nanos))
}

/// `d` shortened by up to 10 %, so checks of many servers drift apart instead of lining up.
fn jittered(d: Duration) -> Duration {
    d.saturating_sub(random_below(d / 10))
}
