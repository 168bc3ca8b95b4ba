//! What this worker reports for a canary's verdict (lb-supervisor's `Figures`), from the same
//! counters as `show stat`: requests, and failures by kind, and the total times of requests.
//!
//! The kinds, summed over every frontend, backend and server:
//! - `503 no server`: answers a backend gave without any server (its 5xx that no server has);
//! - `502/504 by lb-proxy`: a server's response failed or timed out before its headers (`eresp`);
//! - `5xx from servers`: 5xx the servers sent (their 5xx, less those of `eresp`);
//! - `connect failures` (`econ`), `retries` (`wretr`), `denials` (`dreq`).

use lb_config::Mode;
use lb_supervisor::Figures;

use crate::counters::{DurationTotals, Snapshot, BUCKETS_MS, PHASES};
use crate::state::Proxy;

/// The histogram phase of the total time.
const TOTAL: &str = "total";

pub(crate) fn figures(proxy: &Proxy) -> Figures {
    of(&super::snapshot(proxy), |name| proxy.frontends.iter().find(|f| f.name() == name).map(|f| f.config.mode))
}

/// `mode_of`: a frontend's mode (HTTP frontends count requests, TCP ones connections).
fn of(snapshot: &Snapshot, mode_of: impl Fn(&str) -> Option<Mode>) -> Figures {
    let requests = snapshot
        .frontends
        .iter()
        .map(|(name, t)| if mode_of(name) == Some(Mode::Tcp) { t.sessions } else { t.requests })
        .sum();
    let servers_5xx: u64 = snapshot.servers.values().map(|s| s.traffic.responses[4]).sum();
    let backends_5xx: u64 = snapshot.backends.values().map(|t| t.responses[4]).sum();
    let sum = |f: fn(&crate::counters::Totals) -> u64| snapshot.backends.values().map(f).sum::<u64>();
    let eresp = sum(|t| t.response_errors);
    let failures = [
        ("503 no server", backends_5xx.saturating_sub(servers_5xx)),
        ("502/504 by lb-proxy", eresp),
        ("5xx from servers", servers_5xx.saturating_sub(eresp)),
        ("connect failures", sum(|t| t.connect_errors)),
        ("retries", sum(|t| t.retries)),
        ("denials", snapshot.frontends.values().map(|t| t.denied_requests).sum()),
    ];
    let mut latency_counts = vec![0; BUCKETS_MS.len() + 1];
    let total = PHASES.iter().position(|&p| p == TOTAL);
    for durations in snapshot.backends.values().map(|t| &t.durations) {
        add_phase(&mut latency_counts, durations, total);
    }
    Figures {
        requests,
        failures: failures.into_iter().map(|(k, n)| (k.to_owned(), n)).collect(),
        latency_bounds_ms: BUCKETS_MS.to_vec(),
        latency_counts,
    }
}

fn add_phase(into: &mut [u64], durations: &DurationTotals, phase: Option<usize>) {
    let Some(counts) = phase.and_then(|p| durations.phases.get(p)) else { return };
    for (sum, n) in into.iter_mut().zip(counts) {
        *sum += n;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::counters::{ServerTotals, Totals};

    #[test]
    fn kinds_come_from_the_counters_of_show_stat() {
        let mut s = Snapshot::default();
        s.frontends.insert("web".into(), Totals { requests: 100, denied_requests: 3, ..Totals::default() });
        s.frontends.insert("raw".into(), Totals { sessions: 7, requests: 0, ..Totals::default() });
        let mut responses = [0; 6];
        responses[4] = 20;
        let durations = DurationTotals { phases: vec![vec![], vec![], vec![5, 0, 1]], sums_ms: vec![] };
        s.backends.insert(
            "api".into(),
            Totals { responses, response_errors: 4, connect_errors: 2, retries: 1, durations, ..Totals::default() },
        );
        let mut server = [0; 6];
        server[4] = 12;
        let traffic = Totals { responses: server, ..Totals::default() };
        s.servers.insert("api/a".into(), ServerTotals { traffic, ..ServerTotals::default() });
        let f = of(&s, |name| Some(if name == "raw" { Mode::Tcp } else { Mode::Http }));
        assert_eq!(f.requests, 107);
        let kind = |k: &str| f.failures[k];
        assert_eq!([kind("503 no server"), kind("502/504 by lb-proxy"), kind("5xx from servers")], [8, 4, 8]);
        assert_eq!([kind("connect failures"), kind("retries"), kind("denials")], [2, 1, 3]);
        assert_eq!(&f.latency_counts[..3], &[5, 0, 1]);
    }
}
