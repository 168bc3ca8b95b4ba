//! Response times: HAProxy's averages over the last 1024 requests and their maxima (`qtime`,
//! `ctime`, `rtime`, `ttime` and `*_max` in `show stat`), and histograms of the connect, first
//! byte and total times for `/metrics`.
//!
//! Both are a handful of relaxed atomic operations per request, no lock and no allocation: the
//! average is HAProxy's sliding sum (`swrate`): the sum of the last N samples, each new sample
//! replacing one average sample, so `sum / N` is the average without keeping the samples.

use std::sync::atomic::{AtomicU64, Ordering};

use serde::{Deserialize, Serialize};

/// How many requests the averages describe, as HAProxy's `TIME_STATS_SAMPLES`.
const SAMPLES: u64 = 1024;

/// One request's times, in milliseconds: waiting for a server slot, connecting (0 on a reused
/// connection), from sending the request to the response's headers, from its first byte to the
/// end of the response.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Sample {
    pub(crate) queue_ms: u64,
    pub(crate) connect_ms: u64,
    pub(crate) response_ms: u64,
    pub(crate) total_ms: u64,
}

/// A sliding average and the maximum of one time.
#[derive(Debug, Default)]
struct Average {
    sum: AtomicU64,
    max: AtomicU64,
}

impl Average {
    /// `full`: N samples are in the sum already, so the new one replaces an average one;
    /// before that, samples only add up.
    fn add(&self, full: bool, value: u64) {
        if full {
            let _ =
                self.sum.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |sum| Some(sum - sum / SAMPLES + value));
        } else {
            self.sum.fetch_add(value, Ordering::Relaxed);
        }
        if value > self.max.load(Ordering::Relaxed) {
            self.max.fetch_max(value, Ordering::Relaxed);
        }
    }

    fn average(&self, window: u64) -> u64 {
        self.sum.load(Ordering::Relaxed).checked_div(window).unwrap_or(0)
    }
}

/// The four averages of a backend or server.
#[derive(Debug, Default)]
pub(crate) struct Times {
    samples: AtomicU64,
    queue: Average,
    connect: Average,
    response: Average,
    total: Average,
}

impl Times {
    pub(crate) fn add(&self, s: &Sample) {
        // Fewer than N samples so far: the sum is over those, as HAProxy's window.
        let full = self.samples.fetch_add(1, Ordering::Relaxed) >= SAMPLES;
        self.queue.add(full, s.queue_ms);
        self.connect.add(full, s.connect_ms);
        self.response.add(full, s.response_ms);
        self.total.add(full, s.total_ms);
    }

    fn window(&self) -> u64 {
        self.samples.load(Ordering::Relaxed).min(SAMPLES)
    }

    /// Averages in ms: queue, connect, response, total.
    pub(crate) fn averages(&self) -> [u64; 4] {
        let w = self.window();
        [&self.queue, &self.connect, &self.response, &self.total].map(|a| a.average(w))
    }

    pub(crate) fn clear_maxima(&self) {
        for a in [&self.queue, &self.connect, &self.response, &self.total] {
            a.max.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn clear(&self) {
        self.samples.store(0, Ordering::Relaxed);
        for a in [&self.queue, &self.connect, &self.response, &self.total] {
            a.sum.store(0, Ordering::Relaxed);
            a.max.store(0, Ordering::Relaxed);
        }
    }

    /// Maxima in ms, in the same order.
    pub(crate) fn maxima(&self) -> [u64; 4] {
        [&self.queue, &self.connect, &self.response, &self.total].map(|a| a.max.load(Ordering::Relaxed))
    }
}

/// Upper bounds of the histogram buckets, in ms (`le` in seconds: 0.001 … 10, then +Inf).
pub(crate) const BUCKETS_MS: [u64; 13] = [1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10_000];

/// The phases a histogram is kept for, with their `phase` label.
pub(crate) const PHASES: [&str; 3] = ["connect", "first_byte", "total"];

/// One histogram: a count per bucket (not cumulative; +Inf last) and the sum in ms.
#[derive(Debug, Default)]
struct Histogram {
    counts: [AtomicU64; BUCKETS_MS.len() + 1],
    sum_ms: AtomicU64,
}

impl Histogram {
    /// `ms` is a truncated millisecond count: the time was in `[ms, ms + 1)`, so it is within a
    /// bound `b` exactly when `ms < b`.
    fn add(&self, ms: u64) {
        let bucket = BUCKETS_MS.iter().position(|&b| ms < b).unwrap_or(BUCKETS_MS.len());
        self.counts[bucket].fetch_add(1, Ordering::Relaxed);
        if ms > 0 {
            self.sum_ms.fetch_add(ms, Ordering::Relaxed);
        }
    }
}

/// A backend's histograms of connect, first-byte and total times.
#[derive(Debug, Default)]
pub(crate) struct Durations {
    phases: [Histogram; 3],
}

impl Durations {
    pub(crate) fn add(&self, s: &Sample) {
        self.phases[0].add(s.connect_ms);
        self.phases[1].add(s.response_ms);
        self.phases[2].add(s.total_ms);
    }

    pub(crate) fn clear(&self) {
        for h in &self.phases {
            for c in &h.counts {
                c.store(0, Ordering::Relaxed);
            }
            h.sum_ms.store(0, Ordering::Relaxed);
        }
    }

    pub(crate) fn totals(&self) -> DurationTotals {
        DurationTotals {
            phases: self.phases.iter().map(|h| h.counts.iter().map(|c| c.load(Ordering::Relaxed)).collect()).collect(),
            sums_ms: self.phases.iter().map(|h| h.sum_ms.load(Ordering::Relaxed)).collect(),
        }
    }

    /// Count on from a predecessor's (histograms are counters, carried across reloads).
    pub(crate) fn inherit(&self, base: &DurationTotals) {
        for (h, counts) in self.phases.iter().zip(&base.phases) {
            for (c, n) in h.counts.iter().zip(counts) {
                c.fetch_add(*n, Ordering::Relaxed);
            }
        }
        for (h, n) in self.phases.iter().zip(&base.sums_ms) {
            h.sum_ms.fetch_add(*n, Ordering::Relaxed);
        }
    }
}

/// The carried part of [`Durations`]: per phase, counts per bucket (+Inf last) and the sum.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DurationTotals {
    pub(crate) phases: Vec<Vec<u64>>,
    pub(crate) sums_ms: Vec<u64>,
}

impl DurationTotals {
    pub(crate) fn is_empty(&self) -> bool {
        self.sums_ms.iter().all(|&s| s == 0) && self.phases.iter().flatten().all(|&c| c == 0)
    }

    /// What was counted since `earlier`.
    pub(crate) fn since(&self, earlier: &DurationTotals) -> DurationTotals {
        let minus = |now: &[u64], then: Option<&Vec<u64>>| -> Vec<u64> {
            now.iter()
                .enumerate()
                .map(|(i, n)| n.saturating_sub(then.and_then(|t| t.get(i)).copied().unwrap_or(0)))
                .collect()
        };
        DurationTotals {
            phases: self.phases.iter().enumerate().map(|(i, p)| minus(p, earlier.phases.get(i))).collect(),
            sums_ms: minus(&self.sums_ms, Some(&earlier.sums_ms)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ms: u64) -> Sample {
        Sample { queue_ms: 0, connect_ms: ms, response_ms: ms * 2, total_ms: ms * 3 }
    }

    #[test]
    fn averages_over_the_samples_so_far_then_a_sliding_window() {
        let t = Times::default();
        assert_eq!(t.averages(), [0; 4]);
        t.add(&sample(10));
        t.add(&sample(20));
        assert_eq!(t.averages(), [0, 15, 30, 45]);
        assert_eq!(t.maxima(), [0, 20, 40, 60]);
        for _ in 0..5000 {
            t.add(&sample(4));
        }
        assert_eq!(t.averages(), [0, 4, 8, 12], "old samples have slid out");
        assert_eq!(t.maxima(), [0, 20, 40, 60], "the maxima stay");
    }

    #[test]
    fn histogram_buckets_take_truncated_milliseconds() {
        let d = Durations::default();
        for ms in [0, 1, 4, 9_999, 10_000, 60_000] {
            d.add(&Sample { connect_ms: ms, ..Sample::default() });
        }
        let t = d.totals();
        // 0 (under 1 ms) → le 0.001; 1 → le 0.002; 4 → le 0.005; 9999 → le 10; the rest +Inf.
        assert_eq!(t.phases[0], [1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2]);
        assert_eq!(t.sums_ms[0], 1 + 4 + 9_999 + 10_000 + 60_000);
        let later = Durations::default();
        later.inherit(&t);
        later.add(&Sample::default());
        assert_eq!(later.totals().since(&t).phases[0][0], 1);
        assert!(!t.is_empty() && DurationTotals::default().is_empty());
    }
}
