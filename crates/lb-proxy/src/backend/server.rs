//! One server's run-time state: connection count, health, admin state, weight and slowstart.
//!
//! Written by connection tasks (lease counts, connect outcomes), by the server's health-check
//! task (up/down, last check) and by the runtime API (admin state, weight); read by all of them.

use std::fmt;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use lb_config::AdminState;
use tokio::sync::Notify;

use super::sessions::Sessions;
use super::CheckResult;
use crate::counters::Counters;

/// Largest weight a server can have (HAProxy's and the config's limit).
const MAX_WEIGHT: u32 = 256;

/// One server of a backend at run time; shared across tasks.
pub(crate) struct ServerState {
    index: usize,
    config: lb_config::Server,
    /// Connections held through leases (HAProxy's `srv_conn`).
    conns: AtomicUsize,
    admin: AtomicU8,
    weight: AtomicU32,
    /// Health: true when up, or when the server is not checked.
    up: AtomicBool,
    /// When the current slowstart ramp began; `None`: no ramp (full weight).
    ramp_start: Mutex<Option<Instant>>,
    /// Set by a failed connect on traffic, taken by the health-check task as one failure.
    observed_failure: AtomicBool,
    /// Wakes the health-check task: a failed connect to check at once, an admin state change.
    wake: Notify,
    last_check: Mutex<CheckResult>,
    /// When its operational or admin state last changed (stats' `lastchg`).
    last_change: Mutex<Instant>,
    /// Health checks that failed (`chkfail`), and UP → DOWN transitions (`chkdown`).
    failed_checks: AtomicU64,
    downs: AtomicU64,
    /// Time spent unable to take traffic, health DOWN or admin MAINT (`downtime`).
    downtime: Mutex<Downtime>,
    /// Deleted from its backend (`del server`): its health-check task ends.
    removed: AtomicBool,
    /// Its connections, to close them (`shutdown sessions`).
    pub(crate) sessions: Sessions,
    /// Where it is: the configured address until `set server … addr` changes it.
    address: Mutex<SocketAddr>,
    /// Bumped at each address change: a connection made before is not reused after.
    address_generation: AtomicU64,
    /// Health checks stopped at run time (`disable health`): the server counts as unchecked.
    checks_paused: AtomicBool,
    pub(crate) counters: Counters,
}

/// Time spent unavailable (a server DOWN or in MAINT, a backend without a usable server): the
/// periods that ended, and when the current one began.
#[derive(Debug, Default)]
pub(super) struct Downtime {
    total: Duration,
    since: Option<Instant>,
}

impl Downtime {
    /// Unavailable from `now` on when `unavailable`.
    pub(super) fn new(unavailable: bool, now: Instant) -> Downtime {
        Downtime { total: Duration::ZERO, since: unavailable.then_some(now) }
    }

    /// Begin or end a period at `now`, as `unavailable` says.
    pub(super) fn note(&mut self, unavailable: bool, now: Instant) {
        match (unavailable, self.since) {
            (true, None) => self.since = Some(now),
            (false, Some(since)) => {
                self.total += now.saturating_duration_since(since);
                self.since = None;
            }
            _ => {}
        }
    }

    /// The periods so far, the current one included.
    pub(super) fn so_far(&self) -> Duration {
        self.total + self.since.map_or(Duration::ZERO, |since| since.elapsed())
    }

    /// Count on from a predecessor's downtime.
    pub(super) fn inherit(&mut self, earlier: Duration) {
        self.total += earlier;
    }
}

impl fmt::Debug for ServerState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServerState")
            .field("index", &self.index)
            .field("name", &self.config.name)
            .field("addr", &self.config.address)
            .field("conns", &self.current_conns())
            .field("admin", &self.admin_state())
            .field("weight", &self.weight())
            .field("up", &self.is_up())
            .finish_non_exhaustive()
    }
}

/// A mutex's contents even if a panicking holder poisoned it: every value kept here is valid
/// whatever point a writer stopped at.
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

fn encode(s: AdminState) -> u8 {
    match s {
        AdminState::Ready => 0,
        AdminState::Drain => 1,
        AdminState::Maint => 2,
    }
}

fn decode(v: u8) -> AdminState {
    match v {
        0 => AdminState::Ready,
        1 => AdminState::Drain,
        _ => AdminState::Maint,
    }
}

impl ServerState {
    /// A server as at process start: full weight, health up, the configured admin state.
    pub(crate) fn new(index: usize, config: lb_config::Server) -> ServerState {
        ServerState {
            index,
            conns: AtomicUsize::new(0),
            admin: AtomicU8::new(encode(config.state)),
            weight: AtomicU32::new(config.weight.min(MAX_WEIGHT)),
            up: AtomicBool::new(true),
            ramp_start: Mutex::new(None),
            observed_failure: AtomicBool::new(false),
            wake: Notify::new(),
            last_check: Mutex::new(CheckResult::default()),
            last_change: Mutex::new(Instant::now()),
            failed_checks: AtomicU64::new(0),
            downs: AtomicU64::new(0),
            downtime: Mutex::new(Downtime::new(config.state == AdminState::Maint, Instant::now())),
            removed: AtomicBool::new(false),
            sessions: Sessions::default(),
            counters: Counters::default(),
            address: Mutex::new(config.address),
            address_generation: AtomicU64::new(0),
            checks_paused: AtomicBool::new(false),
            config,
        }
    }

    /// Position in its backend's server list.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    pub(crate) fn addr(&self) -> SocketAddr {
        *lock(&self.address)
    }

    /// The address and its generation, read together (for a new connection).
    pub(crate) fn addr_and_generation(&self) -> (SocketAddr, u64) {
        let address = lock(&self.address);
        (*address, self.address_generation.load(Ordering::Acquire))
    }

    pub(crate) fn addr_generation(&self) -> u64 {
        self.address_generation.load(Ordering::Acquire)
    }

    /// Move the server (`set server … addr`); returns the old address. Connections made to the
    /// old one finish what they carry and are not reused.
    pub(super) fn set_addr(&self, new: SocketAddr) -> SocketAddr {
        let mut address = lock(&self.address);
        let old = std::mem::replace(&mut *address, new);
        if old != new {
            self.address_generation.fetch_add(1, Ordering::AcqRel);
            *lock(&self.last_change) = Instant::now();
            self.wake.notify_one();
        }
        old
    }

    /// Health-checked: configured with `check` and not stopped by `disable health`.
    pub(crate) fn checked(&self) -> bool {
        self.config.check && !self.checks_paused.load(Ordering::Acquire)
    }

    /// Stop or resume health checks (`disable health`, `enable health`); true when that
    /// changed something. Stopped, the server counts as up, as HAProxy's unchecked servers do.
    pub(super) fn pause_checks(&self, paused: bool) -> bool {
        let was = self.checks_paused.swap(paused, Ordering::AcqRel);
        if was != paused {
            self.wake.notify_one();
        }
        was != paused
    }

    pub(crate) fn checks_paused(&self) -> bool {
        self.checks_paused.load(Ordering::Acquire)
    }

    pub(crate) fn config(&self) -> &lb_config::Server {
        &self.config
    }

    /// Connections held through leases (`srv_conn` in logs).
    pub(crate) fn current_conns(&self) -> usize {
        self.conns.load(Ordering::Acquire)
    }

    /// Health: up, or not checked at all.
    pub(crate) fn is_up(&self) -> bool {
        self.up.load(Ordering::Acquire)
    }

    pub(crate) fn admin_state(&self) -> AdminState {
        decode(self.admin.load(Ordering::Acquire))
    }

    /// Change the admin state. Back to Ready from Drain or Maint starts the slowstart ramp;
    /// the health-check task is woken (it stops checking in Maint and checks at once after).
    pub(super) fn set_admin_state(&self, s: AdminState) {
        let old = decode(self.admin.swap(encode(s), Ordering::AcqRel));
        if old != s {
            *lock(&self.last_change) = Instant::now();
            self.note_availability(Instant::now());
            if s == AdminState::Ready {
                self.start_ramp(Instant::now());
            }
            self.wake.notify_one();
        }
    }

    /// The configured weight, or the one last set at run time.
    pub(crate) fn weight(&self) -> u32 {
        self.weight.load(Ordering::Acquire)
    }

    /// Set the weight (at most 256).
    pub(super) fn set_weight(&self, w: u32) {
        self.weight.store(w.min(MAX_WEIGHT), Ordering::Release);
    }

    /// The weight with the slowstart ramp applied: during `slowstart` after the server came up,
    /// `max(1, weight × elapsed / slowstart)`; then `weight`. 0 when the weight is 0.
    pub(crate) fn effective_weight(&self, now: Instant) -> u32 {
        let weight = self.weight();
        let (Some(slowstart), Some(start)) = (self.config.slowstart, *lock(&self.ramp_start)) else {
            return weight;
        };
        let elapsed = now.saturating_duration_since(start);
        if weight == 0 || elapsed >= slowstart || slowstart.is_zero() {
            return weight;
        }
        let ramped = u128::from(weight) * elapsed.as_nanos() / slowstart.as_nanos();
        u32::try_from(ramped).unwrap_or(weight).clamp(1, weight)
    }

    /// A request already pinned to this server (client keep-alive with a tied server connection)
    /// may continue: admin state is not Maint and health is up (Drain keeps existing connections).
    pub(crate) fn accepts_existing(&self) -> bool {
        self.admin_state() != AdminState::Maint && self.is_up()
    }

    /// A connect to this server failed / succeeded on real traffic. A failure on a checked, up
    /// server counts as one failed check and makes its health-check task check at once (at most
    /// one such failure is counted per check). Successes change nothing: only checks bring a
    /// server up.
    pub(crate) fn observe_connect(&self, ok: bool) {
        if ok || !self.checked() || !self.is_up() {
            return;
        }
        if !self.observed_failure.swap(true, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }

    /// The last health check's outcome (`Init` status before the first).
    pub(crate) fn last_check(&self) -> CheckResult {
        lock(&self.last_check).clone()
    }

    // ---- for the balancer -------------------------------------------------------------------

    /// The effective weight when this server may take a new connection (admin Ready, health up,
    /// effective weight above 0), else `None`.
    pub(crate) fn usable_weight(&self, now: Instant) -> Option<u32> {
        if self.admin_state() != AdminState::Ready || !self.is_up() {
            return None;
        }
        Some(self.effective_weight(now)).filter(|&w| w > 0)
    }

    /// Below its max_connections (if any).
    pub(super) fn has_room(&self) -> bool {
        self.config.max_connections.is_none_or(|max| self.current_conns() < max)
    }

    /// Count one more connection unless that would pass max_connections.
    pub(super) fn try_acquire(&self) -> bool {
        let max = self.config.max_connections.unwrap_or(usize::MAX);
        self.conns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| (c < max).then_some(c + 1)).is_ok()
    }

    /// Count one connection less (a lease was dropped).
    pub(super) fn release(&self) {
        // Never below 0, even if a bug released twice.
        let _ = self.conns.fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| c.checked_sub(1));
    }

    // ---- for the health-check task -----------------------------------------------------------

    /// Set health after a check decided it. Coming up starts the slowstart ramp at `now`.
    pub(super) fn set_up(&self, up: bool, now: Instant) {
        let was = self.up.swap(up, Ordering::AcqRel);
        if up != was {
            *lock(&self.last_change) = now;
            self.note_availability(now);
        }
        if up && !was {
            self.start_ramp(now);
        }
        if was && !up {
            self.downs.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Start or end a period of downtime, as health and admin state now say.
    fn note_availability(&self, now: Instant) {
        let unavailable = !self.is_up() || self.admin_state() == AdminState::Maint;
        lock(&self.downtime).note(unavailable, now);
    }

    /// Time spent DOWN or in MAINT so far, the current period included.
    pub(crate) fn downtime(&self) -> Duration {
        lock(&self.downtime).so_far()
    }

    /// Count on from a predecessor's downtime.
    pub(crate) fn inherit_downtime(&self, earlier: Duration) {
        lock(&self.downtime).inherit(earlier);
    }

    /// How long since its state last changed.
    pub(crate) fn since_last_change(&self) -> std::time::Duration {
        lock(&self.last_change).elapsed()
    }

    /// Failed health checks, and times it went DOWN.
    pub(crate) fn check_counts(&self) -> (u64, u64) {
        (self.failed_checks.load(Ordering::Relaxed), self.downs.load(Ordering::Relaxed))
    }

    /// Count on from a predecessor's health-check counts.
    pub(crate) fn inherit_check_counts(&self, failed: u64, downs: u64) {
        self.failed_checks.fetch_add(failed, Ordering::Relaxed);
        self.downs.fetch_add(downs, Ordering::Relaxed);
    }

    /// Health DOWN until its checks say otherwise: a server added at run time with `check`
    /// takes no traffic before it has passed them.
    pub(super) fn assume_down(&self) {
        self.up.store(false, Ordering::Release);
        self.note_availability(Instant::now());
    }

    /// Taken out of its backend: its health checks end.
    pub(crate) fn mark_removed(&self) {
        self.removed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    pub(crate) fn is_removed(&self) -> bool {
        self.removed.load(Ordering::Acquire)
    }

    /// Close every connection to this server now (`shutdown sessions server`); how many.
    pub(crate) fn kill_sessions(&self) -> usize {
        self.sessions.close_all()
    }

    /// Take (and clear) the failure observed on traffic since the last call.
    pub(crate) fn take_observed_failure(&self) -> bool {
        self.observed_failure.swap(false, Ordering::AcqRel)
    }

    /// Resolves when the health-check task should look again (see `wake`).
    pub(crate) async fn woken(&self) {
        self.wake.notified().await;
    }

    pub(crate) fn record_check(&self, result: CheckResult) {
        if !result.status.passed() {
            self.failed_checks.fetch_add(1, Ordering::Relaxed);
        }
        *lock(&self.last_check) = result;
    }

    /// Begin a slowstart ramp at `now` (no effect without `slowstart`).
    pub(crate) fn start_ramp(&self, now: Instant) {
        if self.config.slowstart.is_some() {
            *lock(&self.ramp_start) = Some(now);
        }
    }
}
