//! The balance algorithms, over a list of candidates already filtered for usability.
//!
//! Kept apart from the server state so each algorithm is a small pure function of
//! `(index, effective weight)` candidates (plus, for round robin, its per-backend memory).

use std::sync::{Mutex, PoisonError};

/// Weighted least connections: the candidate with the smallest `(conns + 1) / weight`.
/// Ties go to the first tied candidate after index `after` (the last one chosen), wrapping
/// around, so equal servers take turns instead of the first always winning.
pub(super) fn least_conn(
    candidates: &[(usize, u32)],
    after: usize,
    conns_of: impl Fn(usize) -> usize,
) -> Option<usize> {
    // Visit order: indexes above `after` first, then the rest, each by increasing index.
    let order = |i: usize| (i <= after, i);
    let mut best: Option<(usize, u64, u64)> = None; // (index, conns + 1, weight)
    for &(i, w) in candidates {
        if w == 0 {
            continue;
        }
        let load = conns_of(i) as u64 + 1;
        let weight = u64::from(w);
        best = match best {
            None => Some((i, load, weight)),
            Some((bi, bload, bweight)) => {
                // load / weight < bload / bweight, without division.
                let lhs = u128::from(load) * u128::from(bweight);
                let rhs = u128::from(bload) * u128::from(weight);
                if lhs < rhs || (lhs == rhs && order(i) < order(bi)) {
                    Some((i, load, weight))
                } else {
                    Some((bi, bload, bweight))
                }
            }
        };
    }
    best.map(|(i, _, _)| i)
}

/// nginx's smooth weighted round robin: on each pick every candidate's current weight grows by
/// its effective weight, the highest is chosen and loses the total. Over any run of picks with
/// fixed weights each server gets exactly its share, interleaved rather than in bursts.
#[derive(Debug)]
pub(super) struct SmoothRoundRobin {
    /// Current weight per server index.
    current: Mutex<Vec<i64>>,
}

impl SmoothRoundRobin {
    pub(super) fn new(servers: usize) -> SmoothRoundRobin {
        SmoothRoundRobin { current: Mutex::new(vec![0; servers]) }
    }

    /// The next candidate (by server index); `None` when there is none with a weight.
    pub(super) fn next(&self, candidates: &[(usize, u32)]) -> Option<usize> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        // Servers added at run time have ids past the end: make room for them.
        if let Some(top) = candidates.iter().map(|&(i, _)| i).max().filter(|&top| top >= current.len()) {
            current.resize(top + 1, 0);
        }
        let mut total: i64 = 0;
        let mut best: Option<(usize, i64)> = None;
        for &(i, w) in candidates {
            let Some(c) = current.get_mut(i) else {
                continue;
            };
            if w == 0 {
                continue;
            }
            *c += i64::from(w);
            total += i64::from(w);
            if best.is_none_or(|(_, bc)| *c > bc) {
                best = Some((i, *c));
            }
        }
        let (chosen, _) = best?;
        if let Some(c) = current.get_mut(chosen) {
            *c -= total;
        }
        Some(chosen)
    }
}
