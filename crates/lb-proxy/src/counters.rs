//! Traffic counters of frontends, backends and servers, as HAProxy's stats name them.
//!
//! Counted where the event happens, with relaxed atomics (a counter is read for stats only,
//! never to decide anything): sessions when a connection is accepted or a server connection
//! leased, the rest when a request or TCP session is logged, which is where its status, bytes
//! and termination state are known. Reading a counter while traffic runs gives a value that
//! was true at some instant during the read.
//!
//! Across a reload the new worker adds its predecessor's totals ([`Snapshot`]) to its own, so
//! the counters a monitoring system scrapes keep growing.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

mod timing;

pub(crate) use timing::{DurationTotals, Sample, BUCKETS_MS, PHASES};
use timing::{Durations, Times};

/// One frontend's, backend's or server's counters.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Sessions: connections accepted (frontend), server connections opened (backend, server).
    pub(crate) sessions: AtomicU64,
    /// Highest number of concurrent sessions seen.
    pub(crate) max_sessions: AtomicU64,
    /// HTTP requests (frontend, backend, server).
    pub(crate) requests: AtomicU64,
    /// Bytes received from clients (`bin`) and sent to them (`bout`).
    pub(crate) bytes_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    /// Responses by status class: 1xx, 2xx, 3xx, 4xx, 5xx, other.
    pub(crate) responses: [AtomicU64; 6],
    /// Requests that could not be parsed (frontend: `ereq`).
    pub(crate) request_errors: AtomicU64,
    /// Requests denied by a rule (`dreq`), and answered by lb-proxy itself through a `return`
    /// or `redirect` rule (`intercepted`), as HAProxy counts them.
    pub(crate) denied_requests: AtomicU64,
    pub(crate) intercepted: AtomicU64,
    /// Failed connects to a server (`econ`).
    pub(crate) connect_errors: AtomicU64,
    /// Responses that failed or timed out before their headers (`eresp`).
    pub(crate) response_errors: AtomicU64,
    /// Connect retries (`wretr`) and redispatches to another server (`wredis`).
    pub(crate) retries: AtomicU64,
    pub(crate) redispatches: AtomicU64,
    /// Transfers aborted by the client (`cli_abrt`) or by the server (`srv_abrt`).
    pub(crate) client_aborts: AtomicU64,
    pub(crate) server_aborts: AtomicU64,
    /// Unix time of the last session (`lastsess`), 0 for never.
    pub(crate) last_session: AtomicU64,
    /// Sessions and requests per second, over the last complete second.
    pub(crate) session_rate: Rate,
    pub(crate) request_rate: Rate,
    /// Response times (backends and servers): averages over the last 1024 requests, maxima.
    pub(crate) times: Times,
    /// Histograms of connect, first-byte and total times (backends).
    pub(crate) durations: Durations,
}

/// Events in the current second and in the one before.
#[derive(Debug, Default)]
pub(crate) struct Rate {
    second: AtomicU64,
    current: AtomicU64,
    previous: AtomicU64,
    /// The highest per-second count seen.
    max: AtomicU64,
}

impl Rate {
    fn tick(&self, now: u64) {
        let second = self.second.load(Ordering::Relaxed);
        if second != now && self.second.compare_exchange(second, now, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            let done = self.current.swap(0, Ordering::Relaxed);
            self.previous.store(if now == second + 1 { done } else { 0 }, Ordering::Relaxed);
            self.max.fetch_max(done, Ordering::Relaxed);
        }
        self.current.fetch_add(1, Ordering::Relaxed);
    }

    /// Events per second: the last complete second's count (HAProxy's `rate`).
    pub(crate) fn per_second(&self) -> u64 {
        let now = unix_now();
        let second = self.second.load(Ordering::Relaxed);
        if second == now {
            self.previous.load(Ordering::Relaxed)
        } else if second + 1 == now {
            self.current.load(Ordering::Relaxed)
        } else {
            0
        }
    }

    pub(crate) fn max(&self) -> u64 {
        self.max.load(Ordering::Relaxed).max(self.per_second())
    }

    /// Events so far in the second `now`.
    pub(crate) fn this_second(&self, now: u64) -> u64 {
        if self.second.load(Ordering::Relaxed) == now {
            self.current.load(Ordering::Relaxed)
        } else {
            0
        }
    }
}

pub(crate) fn unix_now() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

fn get(a: &AtomicU64) -> u64 {
    a.load(Ordering::Relaxed)
}

fn add(a: &AtomicU64, n: u64) {
    if n > 0 {
        a.fetch_add(n, Ordering::Relaxed);
    }
}

/// The bytes of one request (from its first byte to the next request's) or TCP session.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub(crate) from_client: u64,
    pub(crate) to_client: u64,
}

impl Counters {
    /// A session began at `now` ([`unix_now`], read once by the caller for every level);
    /// `concurrent` is how many are open now, this one included.
    pub(crate) fn session(&self, now: u64, concurrent: usize) {
        self.sessions.fetch_add(1, Ordering::Relaxed);
        self.max_sessions.fetch_max(concurrent as u64, Ordering::Relaxed);
        if self.last_session.load(Ordering::Relaxed) != now {
            self.last_session.store(now, Ordering::Relaxed);
        }
        self.session_rate.tick(now);
    }

    /// An HTTP request ended with `status` (-1: none sent) after moving `bytes`.
    /// `now`: given where the request rate is kept (frontends, the process), as HAProxy does.
    pub(crate) fn request(&self, now: Option<u64>, status: i32, bytes: Transfer, termination: [u8; 2]) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if let Some(now) = now {
            self.request_rate.tick(now);
        }
        if status >= 0 {
            let class = match status / 100 {
                1..=5 => (status / 100 - 1) as usize,
                _ => 5,
            };
            self.responses[class].fetch_add(1, Ordering::Relaxed);
        }
        self.ended(bytes, termination);
    }

    /// A TCP session or HTTP request ended: bytes and how it ended.
    pub(crate) fn ended(&self, bytes: Transfer, termination: [u8; 2]) {
        add(&self.bytes_in, bytes.from_client);
        add(&self.bytes_out, bytes.to_client);
        match termination {
            [b'C', _] => self.client_aborts.fetch_add(1, Ordering::Relaxed),
            [b'S' | b's', b'H'] => self.response_errors.fetch_add(1, Ordering::Relaxed),
            [b'S' | b's', b'D'] => self.server_aborts.fetch_add(1, Ordering::Relaxed),
            _ => 0,
        };
    }

    pub(crate) fn responses(&self, class: usize) -> u64 {
        self.responses.get(class).map_or(0, get)
    }

    /// The totals (not the rates or maxima, which describe this process only).
    pub(crate) fn totals(&self) -> Totals {
        Totals {
            sessions: get(&self.sessions),
            requests: get(&self.requests),
            bytes_in: get(&self.bytes_in),
            bytes_out: get(&self.bytes_out),
            responses: [0, 1, 2, 3, 4, 5].map(|i| self.responses(i)),
            request_errors: get(&self.request_errors),
            denied_requests: get(&self.denied_requests),
            intercepted: get(&self.intercepted),
            connect_errors: get(&self.connect_errors),
            response_errors: get(&self.response_errors),
            retries: get(&self.retries),
            redispatches: get(&self.redispatches),
            client_aborts: get(&self.client_aborts),
            server_aborts: get(&self.server_aborts),
            max_sessions: get(&self.max_sessions),
            last_session: get(&self.last_session),
            durations: self.durations.totals(),
        }
    }

    /// `clear counters`: the maxima and peak rates start again from now.
    pub(crate) fn clear_maxima(&self) {
        self.max_sessions.store(0, Ordering::Relaxed);
        self.session_rate.max.store(0, Ordering::Relaxed);
        self.request_rate.max.store(0, Ordering::Relaxed);
        self.times.clear_maxima();
    }

    /// `clear counters all`: every counter back to 0.
    pub(crate) fn clear_all(&self) {
        self.clear_maxima();
        for counter in [
            &self.sessions,
            &self.requests,
            &self.bytes_in,
            &self.bytes_out,
            &self.request_errors,
            &self.denied_requests,
            &self.intercepted,
            &self.connect_errors,
            &self.response_errors,
            &self.retries,
            &self.redispatches,
            &self.client_aborts,
            &self.server_aborts,
            &self.last_session,
        ]
        .into_iter()
        .chain(&self.responses)
        {
            counter.store(0, Ordering::Relaxed);
        }
        self.times.clear();
        self.durations.clear();
    }

    /// Count on from a predecessor's totals.
    pub(crate) fn inherit(&self, base: &Totals) {
        add(&self.sessions, base.sessions);
        add(&self.requests, base.requests);
        add(&self.bytes_in, base.bytes_in);
        add(&self.bytes_out, base.bytes_out);
        for (counter, n) in self.responses.iter().zip(base.responses) {
            add(counter, n);
        }
        add(&self.request_errors, base.request_errors);
        add(&self.denied_requests, base.denied_requests);
        add(&self.intercepted, base.intercepted);
        add(&self.connect_errors, base.connect_errors);
        add(&self.response_errors, base.response_errors);
        add(&self.retries, base.retries);
        add(&self.redispatches, base.redispatches);
        add(&self.client_aborts, base.client_aborts);
        add(&self.server_aborts, base.server_aborts);
        self.max_sessions.fetch_max(base.max_sessions, Ordering::Relaxed);
        self.last_session.fetch_max(base.last_session, Ordering::Relaxed);
        self.durations.inherit(&base.durations);
    }
}

/// The carried part of [`Counters`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Totals {
    pub(crate) sessions: u64,
    pub(crate) requests: u64,
    /// Absent from the totals of a worker from before it was counted: 0.
    #[serde(default)]
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    pub(crate) responses: [u64; 6],
    pub(crate) request_errors: u64,
    /// Absent from the totals of a worker from before they were counted: 0.
    #[serde(default)]
    pub(crate) denied_requests: u64,
    #[serde(default)]
    pub(crate) intercepted: u64,
    pub(crate) connect_errors: u64,
    pub(crate) response_errors: u64,
    pub(crate) retries: u64,
    pub(crate) redispatches: u64,
    pub(crate) client_aborts: u64,
    pub(crate) server_aborts: u64,
    pub(crate) max_sessions: u64,
    pub(crate) last_session: u64,
    /// Histograms (backends only; absent when empty, and from workers from before them).
    #[serde(default, skip_serializing_if = "DurationTotals::is_empty")]
    pub(crate) durations: DurationTotals,
}

/// Every counter of a worker, by name, handed to the next worker at a reload. Frontends,
/// backends and servers are matched by name; those the new configuration no longer has are
/// dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Snapshot {
    /// Connections and requests of the whole process (`show info`'s CumConns, CumReq).
    pub(crate) connections: u64,
    pub(crate) requests: u64,
    pub(crate) frontends: BTreeMap<String, Totals>,
    pub(crate) backends: BTreeMap<String, Totals>,
    /// By `backend/server`.
    pub(crate) servers: BTreeMap<String, ServerTotals>,
    /// Backends' seconds without a usable server, by name (absent from a worker from before
    /// it was counted). Not part of what is counted late: the new worker keeps its own clock
    /// for the same wall-clock time.
    #[serde(default)]
    pub(crate) backend_downtime_secs: BTreeMap<String, u64>,
}

impl Totals {
    /// What was counted since `earlier` (maxima and times are kept as they are now).
    fn since(&self, earlier: &Totals) -> Totals {
        let d = |now: u64, then: u64| now.saturating_sub(then);
        let mut responses = self.responses;
        for (r, e) in responses.iter_mut().zip(earlier.responses) {
            *r = r.saturating_sub(e);
        }
        Totals {
            sessions: d(self.sessions, earlier.sessions),
            requests: d(self.requests, earlier.requests),
            bytes_in: d(self.bytes_in, earlier.bytes_in),
            bytes_out: d(self.bytes_out, earlier.bytes_out),
            responses,
            request_errors: d(self.request_errors, earlier.request_errors),
            denied_requests: d(self.denied_requests, earlier.denied_requests),
            intercepted: d(self.intercepted, earlier.intercepted),
            connect_errors: d(self.connect_errors, earlier.connect_errors),
            response_errors: d(self.response_errors, earlier.response_errors),
            retries: d(self.retries, earlier.retries),
            redispatches: d(self.redispatches, earlier.redispatches),
            client_aborts: d(self.client_aborts, earlier.client_aborts),
            server_aborts: d(self.server_aborts, earlier.server_aborts),
            max_sessions: self.max_sessions,
            last_session: self.last_session,
            durations: self.durations.since(&earlier.durations),
        }
    }
}

impl Snapshot {
    /// What was counted since `earlier` (a snapshot of the same process), item by item; items
    /// added since are counted whole.
    pub(crate) fn since(&self, earlier: &Snapshot) -> Snapshot {
        let zero = Totals::default();
        let map = |now: &BTreeMap<String, Totals>, then: &BTreeMap<String, Totals>| {
            now.iter().map(|(k, t)| (k.clone(), t.since(then.get(k).unwrap_or(&zero)))).collect()
        };
        let servers = self
            .servers
            .iter()
            .map(|(k, s)| {
                let then = earlier.servers.get(k).cloned().unwrap_or_default();
                let late = ServerTotals {
                    traffic: s.traffic.since(&then.traffic),
                    failed_checks: s.failed_checks.saturating_sub(then.failed_checks),
                    downs: s.downs.saturating_sub(then.downs),
                    // The new worker keeps its own clock for the same wall-clock time.
                    downtime_secs: 0,
                };
                (k.clone(), late)
            })
            .collect();
        Snapshot {
            connections: self.connections.saturating_sub(earlier.connections),
            requests: self.requests.saturating_sub(earlier.requests),
            frontends: map(&self.frontends, &earlier.frontends),
            backends: map(&self.backends, &earlier.backends),
            servers,
            backend_downtime_secs: BTreeMap::new(),
        }
    }
}

/// A server's totals and health-check counts.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ServerTotals {
    pub(crate) traffic: Totals,
    pub(crate) failed_checks: u64,
    pub(crate) downs: u64,
    /// Absent from the totals of a worker from before it was counted: 0.
    #[serde(default)]
    pub(crate) downtime_secs: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_by_class_and_termination() {
        let c = Counters::default();
        let moved = |from_client, to_client| Transfer { from_client, to_client };
        c.request(Some(unix_now()), 200, moved(80, 10), *b"--");
        c.request(None, 503, moved(70, 5), *b"SH");
        c.request(None, -1, moved(3, 0), *b"CD");
        c.request(None, 99, Transfer::default(), *b"SD");
        let t = c.totals();
        assert_eq!(t.requests, 4);
        assert_eq!(t.responses, [0, 1, 0, 0, 1, 1]);
        assert_eq!((t.bytes_in, t.bytes_out), (153, 15));
        assert_eq!((t.client_aborts, t.response_errors, t.server_aborts), (1, 1, 1));
    }

    #[test]
    fn inherit_adds() {
        let c = Counters::default();
        c.session(unix_now(), 3);
        let base =
            Totals { sessions: 10, requests: 7, max_sessions: 9, responses: [0, 7, 0, 0, 0, 0], ..Totals::default() };
        c.inherit(&base);
        let t = c.totals();
        assert_eq!((t.sessions, t.requests, t.max_sessions, t.responses[1]), (11, 7, 9, 7));
    }

    #[test]
    fn late_counts_are_the_difference() {
        let mut earlier = Snapshot { connections: 5, requests: 4, ..Snapshot::default() };
        earlier
            .frontends
            .insert("fe".into(), Totals { requests: 4, responses: [0, 4, 0, 0, 0, 0], ..Totals::default() });
        let mut now = Snapshot { connections: 6, requests: 6, ..Snapshot::default() };
        now.frontends.insert("fe".into(), Totals { requests: 6, responses: [0, 5, 0, 0, 1, 0], ..Totals::default() });
        now.backends.insert("new".into(), Totals { requests: 2, ..Totals::default() });
        let late = now.since(&earlier);
        assert_eq!((late.connections, late.requests), (1, 2));
        assert_eq!(late.frontends["fe"].responses, [0, 1, 0, 0, 1, 0]);
        assert_eq!(late.backends["new"].requests, 2);
    }

    #[test]
    fn rate_counts_the_last_second() {
        let r = Rate::default();
        let now = unix_now();
        r.tick(now - 1);
        r.tick(now - 1);
        r.tick(now);
        assert_eq!(r.per_second(), 2);
        assert!(r.max() >= 2);
    }
}
