use std::net::SocketAddr;

use rand::rngs::StdRng;
use rand::SeedableRng;

use super::*;

const S: Duration = Duration::from_secs(1);

fn settings() -> config::Hysteresis {
    config::Hysteresis {
        collect: 15 * S,
        collect_jitter: Duration::ZERO,
        hold: 30 * S,
        max_remove_percent: 20,
        min_apply_interval: 5 * S,
    }
}

fn member(i: u16) -> Member {
    Member { address: SocketAddr::from(([10, 0, 0, 1], 8000 + i)), weight: 100 }
}

fn servers(range: std::ops::Range<u16>) -> Servers {
    range.map(|i| (format!("s{i}"), member(i))).collect()
}

fn one(backend: &str, set: Servers) -> Sets {
    [(backend.to_owned(), set)].into_iter().collect()
}

struct Sim {
    state: State,
    t0: Instant,
    rng: StdRng,
}

impl Sim {
    fn new(settings: config::Hysteresis, initial: Servers) -> Sim {
        let t0 = Instant::now();
        Sim { state: State::new(settings, one("api", initial), t0), t0, rng: StdRng::seed_from_u64(7) }
    }
    fn at(&self, secs: f64) -> Instant {
        self.t0 + Duration::from_secs_f64(secs)
    }
    fn observe(&mut self, secs: f64, set: Servers) {
        let now = self.at(secs);
        self.state.observe("api", set, now, &mut self.rng);
    }
    /// Decides at `secs` and, when there is something to apply, applies it.
    fn tick(&mut self, secs: f64) -> Decision {
        let now = self.at(secs);
        let d = self.state.decide(now, &mut self.rng);
        if let Some(sets) = &d.apply {
            self.state.applied_ok(sets, now, &mut self.rng);
        }
        d
    }
    fn applied(&self) -> Servers {
        self.state.applied().remove("api").unwrap_or_default()
    }
    fn due_secs(&self) -> Option<f64> {
        self.state.due().map(|d| d.duration_since(self.t0).as_secs_f64())
    }
}

#[test]
fn a_registration_applies_after_the_collect_window() {
    let mut sim = Sim::new(settings(), servers(0..2));
    sim.observe(0.0, servers(0..2));
    assert_eq!(sim.due_secs(), None, "nothing differs");
    sim.observe(1.0, servers(0..3));
    assert_eq!(sim.due_secs(), Some(16.0));
    assert_eq!(sim.tick(15.9).apply, None);
    let d = sim.tick(16.0);
    assert_eq!(d.apply, Some(one("api", servers(0..3))));
    assert_eq!(sim.applied(), servers(0..3));
    assert_eq!(sim.due_secs(), None);
}

#[test]
fn a_re_registration_inside_the_window_changes_nothing() {
    let mut sim = Sim::new(settings(), servers(0..3));
    sim.observe(0.0, servers(0..3));
    sim.observe(1.0, servers(0..2));
    assert!(sim.due_secs().is_some());
    sim.observe(1.5, servers(0..3));
    assert_eq!(sim.due_secs(), None, "the window closes when nothing differs any more");
    assert_eq!(sim.tick(20.0), Decision::default());
    assert_eq!(sim.applied(), servers(0..3));
}

#[test]
fn a_burst_of_changes_is_one_update() {
    let mut sim = Sim::new(settings(), servers(0..1));
    sim.observe(0.0, servers(0..1));
    for i in 2..10u16 {
        sim.observe(f64::from(i) * 0.5, servers(0..i));
    }
    assert_eq!(sim.due_secs(), Some(16.0), "the window started at the first change");
    assert_eq!(sim.tick(16.0).apply, Some(one("api", servers(0..9))));
}

#[test]
fn a_removed_server_is_held_while_seen_recently() {
    let mut s = settings();
    s.collect = 2 * S;
    let mut sim = Sim::new(s, servers(0..10));
    sim.observe(0.0, servers(0..10));
    sim.observe(1.0, servers(0..9));
    assert_eq!(sim.tick(3.0).apply, None, "s9 was seen 2 s ago: held");
    assert_eq!(sim.due_secs(), Some(31.0), "re-evaluated when the hold ends");
    let d = sim.tick(31.0);
    assert_eq!(d.apply, Some(one("api", servers(0..9))));
}

#[test]
fn ten_removals_are_throttled_to_a_fifth_per_round() {
    let mut s = settings();
    s.collect = S;
    s.hold = 2 * S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..20));
    sim.observe(0.0, servers(0..20));
    sim.observe(0.0, servers(10..20));
    let mut rounds = Vec::new();
    let mut t = 0.0;
    while let Some(due) = sim.due_secs() {
        t = due;
        let d = sim.tick(t);
        if d.apply.is_some() {
            rounds.push((t, d.removed.get("api").map_or(0, Vec::len), sim.applied().len()));
        }
        assert!(rounds.len() < 20, "no convergence: {rounds:?}");
    }
    // 20 servers: 4 per round; then 16 → 3; 13 → 2; 11 → 2 (one left to remove); 9… done.
    let sizes: Vec<usize> = rounds.iter().map(|r| r.2).collect();
    assert_eq!(sizes, vec![16, 13, 11, 10], "{rounds:?}");
    assert!(rounds.windows(2).all(|w| w[1].0 - w[0].0 >= 2.0), "rounds are a hold apart: {rounds:?}");
    assert_eq!(sim.applied(), servers(10..20));
    assert!(t > 0.0);
}

#[test]
fn the_least_recently_seen_go_first() {
    let mut s = settings();
    s.collect = S;
    s.hold = S;
    let mut sim = Sim::new(s, servers(0..5));
    sim.observe(0.0, servers(0..5));
    // s4 vanishes first, then s3.
    sim.observe(0.0, servers(0..4));
    sim.observe(0.5, servers(0..3));
    let d = sim.tick(10.0);
    assert_eq!(d.removed.get("api"), Some(&vec!["s4".to_owned()]));
    assert_eq!(d.throttled.get("api"), Some(&vec!["s3".to_owned()]));
}

#[test]
fn all_removed_is_refused_and_the_last_set_kept() {
    let mut s = settings();
    s.collect = S;
    s.hold = S;
    let mut sim = Sim::new(s, servers(0..3));
    sim.observe(0.0, servers(0..3));
    sim.observe(1.0, Servers::new());
    let d = sim.tick(5.0);
    assert_eq!(d.apply, None);
    assert_eq!(d.refused, vec!["api".to_owned()]);
    assert_eq!(sim.applied(), servers(0..3));
    assert_eq!(sim.state.refused(), vec!["api".to_owned()]);
    assert_eq!(sim.due_secs(), None, "refused once, not re-tried in a loop");
    assert_eq!(sim.tick(100.0), Decision::default(), "and said once");
    // A server registering again is taken as usual.
    sim.observe(200.0, servers(7..8));
    let d = sim.tick(202.0);
    assert!(d.apply.is_some());
    assert!(sim.applied().contains_key("s7"));
    assert!(sim.state.refused().is_empty());
}

#[test]
fn one_server_left_is_not_removed_when_it_would_empty_the_backend() {
    let mut s = settings();
    s.collect = S;
    s.hold = S;
    let mut sim = Sim::new(s, servers(0..1));
    sim.observe(0.0, servers(0..1));
    sim.observe(0.0, Servers::new());
    assert_eq!(sim.tick(5.0).refused, vec!["api".to_owned()]);
    assert_eq!(sim.applied(), servers(0..1));
}

#[test]
fn applies_are_min_interval_apart() {
    let mut s = settings();
    s.collect = S;
    s.min_apply_interval = 10 * S;
    let mut sim = Sim::new(s, servers(0..1));
    sim.observe(0.0, servers(0..2));
    assert!(sim.tick(1.0).apply.is_some());
    sim.observe(1.5, servers(0..3));
    assert_eq!(sim.due_secs(), Some(11.0), "not before 10 s after the last apply");
}

#[test]
fn jitter_spreads_the_window() {
    let mut s = settings();
    s.collect_jitter = 5 * S;
    let dues: Vec<f64> = (0..20u64)
        .map(|seed| {
            let t0 = Instant::now();
            let mut state = State::new(s, one("api", servers(0..1)), t0);
            let mut rng = StdRng::seed_from_u64(seed);
            state.observe("api", servers(0..2), t0, &mut rng);
            state.due().map_or(0.0, |d| d.duration_since(t0).as_secs_f64())
        })
        .collect();
    assert!(dues.iter().all(|d| (15.0..=20.0).contains(d)), "{dues:?}");
    assert!(dues.iter().any(|d| *d != dues[0]), "{dues:?}");
}

#[test]
fn nothing_is_decided_before_every_backend_was_observed() {
    let t0 = Instant::now();
    let mut rng = StdRng::seed_from_u64(1);
    let initial: Sets = [("a".to_owned(), servers(0..1)), ("b".to_owned(), servers(0..1))].into_iter().collect();
    let mut s = settings();
    s.collect = Duration::ZERO;
    let mut state = State::new(s, initial, t0);
    state.observe("a", servers(0..2), t0, &mut rng);
    assert_eq!(state.decide(t0 + S, &mut rng), Decision::default());
    state.observe("b", servers(0..1), t0 + S, &mut rng);
    assert!(state.decide(t0 + S, &mut rng).apply.is_some());
}

#[test]
fn a_resync_restarts_the_hold() {
    let mut s = settings();
    s.collect = S;
    let mut sim = Sim::new(s, servers(0..5));
    sim.observe(0.0, servers(0..5));
    // ZooKeeper away from 1 s to 100 s; on return s4 is gone: it may have left at any time.
    let now = sim.at(100.0);
    sim.state.resynced(now);
    sim.observe(100.0, servers(0..4));
    assert_eq!(sim.tick(101.0).apply, None, "held: seen (as far as we know) until 100 s");
    assert_eq!(sim.due_secs(), Some(130.0));
    assert!(sim.tick(130.0).apply.is_some());
}

#[test]
fn a_failed_apply_is_retried() {
    let mut s = settings();
    s.collect = S;
    let mut sim = Sim::new(s, servers(0..1));
    sim.observe(0.0, servers(0..2));
    let now = sim.at(1.0);
    let d = sim.state.decide(now, &mut sim.rng);
    assert!(d.apply.is_some());
    sim.state.apply_failed(now, 2 * S);
    assert_eq!(sim.due_secs(), Some(3.0));
    assert!(sim.tick(3.0).apply.is_some());
}

#[test]
fn removal_rounds_are_a_hold_apart_even_when_removals_are_spread() {
    let mut s = settings();
    s.collect = S;
    s.hold = S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..20));
    sim.observe(0.0, servers(0..20));
    // Ten servers vanish one by one, 20 ms apart.
    for i in 0..10u16 {
        sim.observe(f64::from(i) * 0.02, servers(i + 1..20));
    }
    let mut rounds: Vec<(f64, usize)> = Vec::new();
    while let Some(due) = sim.due_secs() {
        if sim.tick(due).apply.is_some() {
            rounds.push((due, sim.applied().len()));
        }
        assert!(rounds.len() < 20, "no convergence: {rounds:?}");
    }
    let sizes: Vec<usize> = rounds.iter().map(|r| r.1).collect();
    // At 1 s only s0's hold is over: one goes. Each later round a fifth, a hold apart.
    assert_eq!(sizes, vec![19, 16, 13, 11, 10], "{rounds:?}");
    assert!(rounds.windows(2).all(|w| w[1].0 - w[0].0 >= 1.0), "rounds a hold apart: {rounds:?}");
}

/// Feeds `observations` (at their times) and decides whenever due, in time order, until
/// nothing is due any more or `until` passes; every decision that did something, with its time.
fn play(sim: &mut Sim, mut observations: Vec<(f64, Servers)>, until: f64) -> Vec<(f64, Decision)> {
    observations.reverse();
    let mut decisions = Vec::new();
    loop {
        let next_observation = observations.last().map(|(t, _)| *t);
        match (next_observation, sim.due_secs()) {
            (Some(t), due) if due.is_none_or(|d| t <= d) => {
                if let Some((_, set)) = observations.pop() {
                    sim.observe(t, set);
                }
            }
            (_, Some(due)) if due <= until => {
                let d = sim.tick(due);
                if d != Decision::default() {
                    decisions.push((due, d));
                }
            }
            _ => return decisions,
        }
        assert!(decisions.len() < 100, "no convergence: {decisions:?}");
    }
}

/// Ten registrations expiring one by one, `every` seconds apart: servers(i+1..10) at i·every.
fn trickle(every: f64) -> Vec<(f64, Servers)> {
    (0..10u16).map(|i| (f64::from(i) * every, servers(i + 1..10))).collect()
}

#[test]
fn expiries_trickling_in_until_none_is_left_restore_the_set_before_the_removals() {
    let mut s = settings();
    s.collect = S / 2;
    s.hold = S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..10));
    sim.observe(0.0, servers(0..10));
    let decisions = play(&mut sim, trickle(0.5), 60.0);
    // The throttle takes some while the expiries look like removals…
    let removed: usize = decisions.iter().filter_map(|(_, d)| d.removed.get("api")).map(Vec::len).sum();
    assert!(removed >= 2, "the throttle had rounds first: {decisions:?}");
    // …and the empty observation puts them back: the backend ends with its full set.
    let (_, last) = decisions.last().expect("decisions");
    assert_eq!(last.refused, vec!["api".to_owned()]);
    assert_eq!(last.restored.get("api").map(Vec::len), Some(removed), "{decisions:?}");
    assert_eq!(last.apply, Some(one("api", servers(0..10))));
    assert_eq!(sim.applied(), servers(0..10));
    assert_eq!(sim.state.refused(), vec!["api".to_owned()]);
    assert_eq!(sim.due_secs(), None, "refused once, not re-tried in a loop");
}

#[test]
fn with_the_default_hysteresis_a_minute_long_trickle_ends_with_the_full_set() {
    let mut sim = Sim::new(settings(), servers(0..10));
    sim.observe(0.0, servers(0..10));
    // One expiry every 6 s: the first hold ends at 30 s, rounds take servers until 54 s.
    let decisions = play(&mut sim, trickle(6.0), 600.0);
    assert!(decisions.iter().any(|(_, d)| d.removed.contains_key("api")), "{decisions:?}");
    assert_eq!(sim.applied(), servers(0..10), "{decisions:?}");
}

#[test]
fn a_shrink_that_finished_is_not_undone_by_a_later_empty_set() {
    let mut s = settings();
    s.collect = S;
    s.hold = S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..20));
    sim.observe(0.0, servers(0..20));
    let decisions = play(&mut sim, vec![(0.0, servers(10..20))], 100.0);
    assert!(decisions.len() >= 4, "throttled rounds: {decisions:?}");
    assert_eq!(sim.applied(), servers(10..20), "in step with ZooKeeper again");
    // Much later every registration goes: the last full set is the 10, not the 20 of before.
    let decisions = play(&mut sim, vec![(200.0, Servers::new())], 300.0);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0].1.refused, vec!["api".to_owned()]);
    assert_eq!(decisions[0].1.apply, None, "nothing put back");
    assert_eq!(sim.applied(), servers(10..20));
}

#[test]
fn servers_added_during_a_run_of_removals_are_kept_when_it_ends_empty() {
    let mut s = settings();
    s.collect = S / 2;
    s.hold = S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..5));
    sim.observe(0.0, servers(0..5));
    // s0 goes, then s1 while s9 arrives; s0's round (at 1 s, s1 still held) adds s9; then
    // nothing is left.
    let mut with_s9 = servers(2..5);
    with_s9.extend(servers(9..10));
    let observations = vec![(0.0, servers(1..5)), (0.5, with_s9), (1.2, Servers::new())];
    let decisions = play(&mut sim, observations, 60.0);
    assert!(decisions.iter().any(|(_, d)| d.removed.get("api") == Some(&vec!["s0".to_owned()])), "{decisions:?}");
    let mut want = servers(0..5);
    want.extend(servers(9..10));
    assert_eq!(sim.applied(), want, "{decisions:?}");
}

#[test]
fn a_registration_coming_back_after_a_restore_is_followed_as_usual() {
    let mut s = settings();
    s.collect = S / 2;
    s.hold = S;
    s.min_apply_interval = Duration::ZERO;
    let mut sim = Sim::new(s, servers(0..10));
    sim.observe(0.0, servers(0..10));
    play(&mut sim, trickle(0.5), 60.0);
    assert_eq!(sim.applied(), servers(0..10));
    // Every registrar back: in step, nothing to apply, the refusal lifted.
    let decisions = play(&mut sim, vec![(100.0, servers(0..10))], 200.0);
    assert!(decisions.is_empty(), "{decisions:?}");
    assert!(sim.state.refused().is_empty());
    // Later all of them go at once: refused, and the 10 kept.
    let decisions = play(&mut sim, vec![(300.0, Servers::new())], 400.0);
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(sim.applied(), servers(0..10));
}

/// A change patched in (what lb-watcher does between whole reads) decides exactly as the whole
/// set observed: the same removal rounds, hold and window.
#[test]
fn changes_patched_in_decide_as_the_whole_set_observed() {
    let mut whole = Sim::new(settings(), servers(0..10));
    let mut patched = Sim::new(settings(), servers(0..10));
    for sim in [&mut whole, &mut patched] {
        sim.observe(0.0, servers(0..10));
    }
    whole.observe(1.0, servers(3..12));
    let gone = (0..3).map(|i| (format!("s{i}"), None));
    let joined = (10..12).map(|i| (format!("s{i}"), Some(member(i))));
    let moved = Member { weight: 50, ..member(5) };
    let now = patched.at(1.0);
    patched.state.observe_changes("api", gone.chain(joined), now, &mut patched.rng);
    assert_eq!(whole.state.pending(), patched.state.pending());
    assert_eq!(whole.due_secs(), patched.due_secs());
    for t in [16.0, 31.0, 46.0, 61.0, 76.0] {
        assert_eq!(whole.tick(t), patched.tick(t), "at {t} s");
    }
    assert_eq!(patched.applied(), servers(3..12));
    // A server changed in place, and a change that changes nothing.
    let now = patched.at(80.0);
    patched.state.observe_changes("api", [("s5".to_owned(), Some(moved.clone()))], now, &mut patched.rng);
    assert_eq!(patched.state.pending()[0].update, ["s5"]);
    patched.state.observe_changes("api", [("s5".to_owned(), Some(member(5)))], now, &mut patched.rng);
    assert_eq!(patched.state.due(), None, "back to what is applied: nothing pending");
    assert_eq!(patched.state.observed_len("api"), 9);
}
