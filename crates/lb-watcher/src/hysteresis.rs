//! The hysteresis between what ZooKeeper says and what lb-proxy gets: a pure state machine, fed
//! observations and asked for decisions with the time (and a random source) passed in, so that
//! tests drive it deterministically.
//!
//! Rules (all durations from [`config::Hysteresis`](crate::config::Hysteresis)):
//! - A difference between the observed and the applied servers is acted on only after `collect`
//!   plus a random part of `collect_jitter`: a server that re-registers (its node deleted and
//!   created again) or a burst of changes makes one update or none, and a fleet of load
//!   balancers does not act in one wave. Two applies are at least `min_apply_interval` apart.
//! - A server no longer registered stays while it was seen within `hold`.
//! - At most `max_remove_percent` of a backend's servers (at least one) go per round, the least
//!   recently seen first; the rest wait for another round, `hold` plus jitter later.
//! - A backend is never emptied: when its servers would all go, the change is refused and the
//!   last full set kept (and said once, until the observation changes). The last full set is
//!   the one applied before the current run of removals began, when there is one: expiries
//!   that trickle in look like removals, and the throttle takes some of them, until the last
//!   one shows that every registration went; those are put back (Synapse's
//!   `use_previous_backends`). A run of removals ends when the backend is in step with
//!   ZooKeeper again.

use std::collections::{BTreeMap, HashMap};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::config;
use crate::node::Member;

/// Servers of one backend by name.
pub type Servers = BTreeMap<String, Member>;
/// Every watched backend's servers, by backend name.
pub type Sets = BTreeMap<String, Servers>;

#[derive(Debug)]
struct Backend {
    applied: Servers,
    observed: Servers,
    /// Servers that are applied but not observed: when they were last seen.
    last_seen: HashMap<String, Instant>,
    /// The empty set was refused for this observation: say so once.
    refused: bool,
    /// After a removal round that left removals for later: no removal before this.
    next_removal_round: Option<Instant>,
    /// The servers applied when the current run of removals began (its first round), until the
    /// backend is in step again: what an empty observation restores.
    before_removals: Option<Servers>,
}

/// What [`State::decide`] found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Decision {
    /// The new sets to render and apply (every watched backend), when something changes now.
    pub apply: Option<Sets>,
    /// Backends whose servers would all have gone: refused, the last set kept.
    pub refused: Vec<String>,
    /// Servers removed this round, and those throttled to a later round, by backend.
    pub removed: BTreeMap<String, Vec<String>>,
    pub throttled: BTreeMap<String, Vec<String>>,
    /// Servers put back by a refusal: removed earlier in the same run of removals, by backend.
    pub restored: BTreeMap<String, Vec<String>>,
}

/// A pending change, for the status endpoint.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Pending {
    pub backend: String,
    pub add: Vec<String>,
    pub update: Vec<String>,
    pub remove: Vec<String>,
}

/// The hysteresis over every watched backend (one file: one window for all).
#[derive(Debug)]
pub struct State {
    settings: config::Hysteresis,
    backends: BTreeMap<String, Backend>,
    /// When the pending differences are acted on; `None`: nothing pending.
    due: Option<Instant>,
    last_apply: Option<Instant>,
    /// Once set, only `observe` and `resynced` are known; decisions wait for the first complete
    /// observation of every backend.
    observed_all: bool,
    seen: Vec<String>,
}

impl State {
    /// Starts from what the file holds now (`initial`, every watched backend present, maybe
    /// empty); those servers count as seen `now`.
    pub fn new(settings: config::Hysteresis, initial: Sets, now: Instant) -> State {
        let backends = initial
            .into_iter()
            .map(|(name, applied)| {
                let last_seen = applied.keys().map(|n| (n.clone(), now)).collect();
                (
                    name,
                    Backend {
                        applied,
                        observed: Servers::new(),
                        last_seen,
                        refused: false,
                        next_removal_round: None,
                        before_removals: None,
                    },
                )
            })
            .collect();
        State { settings, backends, due: None, last_apply: None, observed_all: false, seen: Vec::new() }
    }

    /// The servers ZooKeeper lists now for `backend`.
    pub fn observe(&mut self, backend: &str, servers: Servers, now: Instant, rng: &mut impl Rng) {
        let Some(b) = self.backends.get_mut(backend) else { return };
        for name in b.observed.keys() {
            if !servers.contains_key(name) {
                // Present until this very observation.
                b.last_seen.insert(name.clone(), now);
            }
        }
        for name in servers.keys() {
            b.last_seen.remove(name);
        }
        let changed = b.observed != servers;
        b.observed = servers;
        self.observed(backend, changed, now, rng);
    }

    /// [`State::observe`] for a change: `changes` are the servers that changed since the last
    /// observation of `backend` (`None`: gone), patched in place rather than handed over whole,
    /// so that a change of a few servers among thousands costs what it touches.
    pub fn observe_changes(
        &mut self,
        backend: &str,
        changes: impl IntoIterator<Item = (String, Option<Member>)>,
        now: Instant,
        rng: &mut impl Rng,
    ) {
        let Some(b) = self.backends.get_mut(backend) else { return };
        let mut changed = false;
        for (name, member) in changes {
            match member {
                Some(member) => {
                    b.last_seen.remove(&name);
                    changed |= b.observed.get(&name) != Some(&member);
                    b.observed.insert(name, member);
                }
                None => {
                    if b.observed.remove(&name).is_some() {
                        changed = true;
                        b.last_seen.insert(name, now);
                    }
                }
            }
        }
        self.observed(backend, changed, now, rng);
    }

    /// After `backend`'s observation was taken in (`changed`: it differs from the one before).
    fn observed(&mut self, backend: &str, changed: bool, now: Instant, rng: &mut impl Rng) {
        if let Some(b) = self.backends.get_mut(backend) {
            if changed {
                b.refused = false;
            }
            b.end_of_removals();
        }
        if !self.seen.iter().any(|s| s == backend) {
            self.seen.push(backend.to_owned());
            self.observed_all = self.backends.keys().all(|k| self.seen.contains(k));
        }
        self.arm(now, rng);
    }

    /// ZooKeeper came back after a time we know nothing about: whatever was registered then
    /// counts as seen until `now` (the hold starts again), before the fresh observations.
    pub fn resynced(&mut self, now: Instant) {
        for b in self.backends.values_mut() {
            for (name, seen) in &mut b.last_seen {
                if b.applied.contains_key(name) {
                    *seen = now;
                }
            }
            for name in b.observed.keys() {
                if b.applied.contains_key(name) {
                    b.last_seen.insert(name.clone(), now);
                }
            }
        }
    }

    /// When [`State::decide`] should be called next (`None`: only after a new observation).
    pub fn due(&self) -> Option<Instant> {
        self.due
    }

    pub fn last_apply(&self) -> Option<Instant> {
        self.last_apply
    }

    /// Every backend's applied servers, without a copy.
    pub fn applied_iter(&self) -> impl Iterator<Item = (&String, &Servers)> {
        self.backends.iter().map(|(k, b)| (k, &b.applied))
    }

    /// How many servers ZooKeeper lists for `backend` as last observed.
    pub fn observed_len(&self, backend: &str) -> usize {
        self.backends.get(backend).map_or(0, |b| b.observed.len())
    }

    /// The servers applied now.
    pub fn applied(&self) -> Sets {
        self.backends.iter().map(|(k, b)| (k.clone(), b.applied.clone())).collect()
    }

    /// Backends whose emptying is refused now (until their observation changes).
    pub fn refused(&self) -> Vec<String> {
        self.backends.iter().filter(|(_, b)| b.refused && !b.applied.is_empty()).map(|(k, _)| k.clone()).collect()
    }

    /// Differences between observed and applied, by backend.
    pub fn pending(&self) -> Vec<Pending> {
        let mut out = Vec::new();
        for (name, b) in &self.backends {
            if !self.seen.contains(name) {
                continue;
            }
            let add = b.observed.keys().filter(|n| !b.applied.contains_key(*n)).cloned().collect::<Vec<_>>();
            let update = b
                .observed
                .iter()
                .filter(|(n, m)| b.applied.get(*n).is_some_and(|a| a != *m))
                .map(|(n, _)| n.clone())
                .collect::<Vec<_>>();
            let remove = b.applied.keys().filter(|n| !b.observed.contains_key(*n)).cloned().collect::<Vec<_>>();
            if !(add.is_empty() && update.is_empty() && remove.is_empty()) {
                out.push(Pending { backend: name.clone(), add, update, remove });
            }
        }
        out
    }

    fn differs(&self) -> bool {
        self.observed_all && self.backends.values().any(|b| b.observed != b.applied && !b.refused)
    }

    /// Opens the collect window if a difference appeared; closes it if none is left.
    fn arm(&mut self, now: Instant, rng: &mut impl Rng) {
        if !self.differs() {
            self.due = None;
        } else if self.due.is_none() {
            let at = now + self.settings.collect + jitter(self.settings.collect_jitter, rng);
            self.due = Some(self.not_before(at));
        }
    }

    fn not_before(&self, at: Instant) -> Instant {
        match self.last_apply {
            Some(last) => at.max(last + self.settings.min_apply_interval),
            None => at,
        }
    }

    /// At or after [`State::due`]: the sets to apply now, if any. The caller renders and applies
    /// them, then calls [`State::applied_ok`] (or [`State::apply_failed`]).
    pub fn decide(&mut self, now: Instant, rng: &mut impl Rng) -> Decision {
        let mut decision = Decision::default();
        if self.due.is_none_or(|due| now < due) || !self.observed_all {
            return decision;
        }
        let hold = self.settings.hold;
        let mut next_hold: Option<Instant> = None;
        let mut throttled_any = false;
        let mut next_round: Option<Instant> = None;
        let mut changed = false;
        let mut sets = Sets::new();
        for (name, b) in &mut self.backends {
            let mut target = b.applied.clone();
            for (server, member) in &b.observed {
                target.insert(server.clone(), member.clone());
            }
            let seen = |server: &String| b.last_seen.get(server).copied().unwrap_or(now);
            let mut eligible: Vec<(Instant, String)> = Vec::new();
            let removals = b.applied.keys().filter(|s| !b.observed.contains_key(*s)).count();
            for server in b.applied.keys().filter(|s| !b.observed.contains_key(*s)) {
                let last = seen(server);
                if now.saturating_duration_since(last) >= hold {
                    eligible.push((last, server.clone()));
                } else {
                    let expiry = last + hold;
                    next_hold = Some(next_hold.map_or(expiry, |n| n.min(expiry)));
                }
            }
            eligible.sort();
            let pct = usize::try_from(self.settings.max_remove_percent).unwrap_or(100);
            // Rounds are a hold (plus jitter) apart, however the removals were spread in time.
            let round_open = b.next_removal_round.is_none_or(|at| now >= at);
            let cap = if round_open { (b.applied.len() * pct / 100).max(1) } else { 0 };
            if let (false, Some(at)) = (round_open, b.next_removal_round) {
                if !eligible.is_empty() {
                    next_round = Some(next_round.map_or(at, |n: Instant| n.min(at)));
                }
            }
            let (now_gone, later) = eligible.split_at(eligible.len().min(cap));
            for (_, server) in now_gone {
                target.remove(server);
            }
            if b.observed.is_empty() || target.is_empty() {
                // Every server gone at once is a ZooKeeper or registrar failure far more often
                // than a real outage: keep the last full set. When the throttle already took
                // some in this run of removals (expiries trickling in), they come back too.
                if !b.refused && !b.applied.is_empty() {
                    decision.refused.push(name.clone());
                }
                b.refused = true;
                let mut keep = b.before_removals.clone().unwrap_or_default();
                keep.extend(b.applied.iter().map(|(k, m)| (k.clone(), m.clone())));
                let back: Vec<String> = keep.keys().filter(|s| !b.applied.contains_key(*s)).cloned().collect();
                if !back.is_empty() {
                    decision.restored.insert(name.clone(), back);
                    changed = true;
                }
                sets.insert(name.clone(), keep);
                continue;
            }
            let held = b.applied.keys().any(|s| !b.observed.contains_key(s)) && eligible.len() < removals;
            if !now_gone.is_empty() {
                if b.before_removals.is_none() {
                    b.before_removals = Some(b.applied.clone());
                }
                decision.removed.insert(name.clone(), now_gone.iter().map(|(_, s)| s.clone()).collect());
                if !later.is_empty() || held {
                    let at = now + hold + jitter(self.settings.collect_jitter, rng);
                    b.next_removal_round = Some(at);
                    if held {
                        // Held servers wait for the next round too, whenever their hold ends.
                        next_round = Some(next_round.map_or(at, |n: Instant| n.min(at)));
                    }
                }
            }
            if !later.is_empty() && round_open {
                throttled_any = true;
                decision.throttled.insert(name.clone(), later.iter().map(|(_, s)| s.clone()).collect());
            }
            changed |= target != b.applied;
            sets.insert(name.clone(), target);
        }
        if changed {
            decision.apply = Some(sets);
        }
        // The next round: throttled removals after the hold plus jitter, held ones when their
        // hold ends.
        let throttled_at = throttled_any.then(|| now + hold + jitter(self.settings.collect_jitter, rng));
        let next = [next_hold, throttled_at, next_round].into_iter().flatten().min();
        self.due = next.map(|at| {
            let at = at.max(now);
            if changed {
                at.max(now + self.settings.min_apply_interval)
            } else {
                self.not_before(at)
            }
        });
        decision
    }

    /// The sets of a decision are in the file and lb-proxy runs them.
    pub fn applied_ok(&mut self, sets: &Sets, now: Instant, rng: &mut impl Rng) {
        for (name, servers) in sets {
            if let Some(b) = self.backends.get_mut(name) {
                b.last_seen.retain(|s, _| servers.contains_key(s) && !b.observed.contains_key(s));
                for s in servers.keys() {
                    if !b.observed.contains_key(s) && !b.last_seen.contains_key(s) {
                        b.last_seen.insert(s.clone(), now);
                    }
                }
                b.applied = servers.clone();
                b.end_of_removals();
            }
        }
        self.last_apply = Some(now);
        if self.due.is_none() {
            self.arm(now, rng);
        }
    }

    /// Applying failed: try again after `retry` (the sets stay pending).
    pub fn apply_failed(&mut self, now: Instant, retry: Duration) {
        self.due = Some(now + retry);
    }
}

impl Backend {
    /// The run of removals is over once every applied server is registered (and some are):
    /// the set before it is forgotten.
    fn end_of_removals(&mut self) {
        if !self.observed.is_empty() && self.applied.keys().all(|s| self.observed.contains_key(s)) {
            self.before_removals = None;
        }
    }
}

fn jitter(max: Duration, rng: &mut impl Rng) -> Duration {
    let max = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    if max == 0 {
        Duration::ZERO
    } else {
        Duration::from_millis(rng.random_range(0..=max))
    }
}

#[cfg(test)]
mod tests;
