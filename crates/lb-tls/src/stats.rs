//! What lb-tls counts, per frontend: connections, handshakes (resumed or not, by protocol and
//! cipher), failed handshakes by reason, backend connections refused, bytes each way; on a UDP
//! (QUIC) frontend also Retry packets sent, 0-RTT accepted and refused, packets lost and
//! connection migrations (`Quic`). The
//! counters are atomics bumped once per connection or handshake; the runtime commands and
//! /metrics read them (`render`).
//!
//! Across a reload the totals go on: the old worker hands its counters to the new one
//! ([`Snapshot`], through lb-supervisor's `Runtime::snapshot`), and once drained, what it counted
//! after that (`Snapshot::since`).

mod render;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use serde::{Deserialize, Serialize};

pub(crate) use render::{info, metrics, show_ciphers, show_stat, Process};

/// Why a handshake did not complete, as counted (and as /metrics labels it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// No handshake within `handshake_timeout`.
    Timeout,
    /// The client closed or reset the connection during the handshake.
    Closed,
    /// No protocol version in common (a client too old, or too new for the settings).
    Protocol,
    /// No cipher in common.
    Cipher,
    /// A client certificate missing or not verified, or the client refused ours (its alert).
    Certificate,
    /// No certificate for the name asked (`sni_nomatch_abort`).
    Sni,
    /// Not TLS at all (plain HTTP sent to the TLS port, say).
    NotTls,
    /// A PROXY header expected (`proxy_proxy`) and not valid.
    ProxyHeader,
    Other,
}

impl Failure {
    pub(crate) const ALL: [Failure; 9] = [
        Failure::Timeout,
        Failure::Closed,
        Failure::Protocol,
        Failure::Cipher,
        Failure::Certificate,
        Failure::Sni,
        Failure::NotTls,
        Failure::ProxyHeader,
        Failure::Other,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Failure::Timeout => "timeout",
            Failure::Closed => "closed",
            Failure::Protocol => "protocol",
            Failure::Cipher => "cipher",
            Failure::Certificate => "certificate",
            Failure::Sni => "sni",
            Failure::NotTls => "not_tls",
            Failure::ProxyHeader => "proxy_header",
            Failure::Other => "other",
        }
    }

    /// The kind of a failure from the library's reasons, as `conn` words them.
    pub(crate) fn of_reason(reason: &str) -> Failure {
        let r = reason.to_ascii_lowercase();
        let has = |words: &[&str]| words.iter().any(|w| r.contains(w));
        if has(&["http request", "https proxy request", "wrong version number", "record layer failure"]) {
            Failure::NotTls
        } else if has(&["no shared cipher", "no_shared_cipher", "no cipher"]) {
            Failure::Cipher
        } else if has(&["unsupported protocol", "version too low", "version too high", "protocol version"]) {
            Failure::Protocol
        } else if has(&["unrecognized name", "servername", "parse tlsext"]) {
            // AWS-LC words the refusal of `sni_nomatch_abort` (the servername callback's fatal
            // alert) "clienthello tlsext; parse tlsext".
            Failure::Sni
        } else if has(&["certificate", "unknown ca", "bad certificate", "peer did not return"]) {
            Failure::Certificate
        } else if has(&["client closed", "connection error", "connection reset", "unexpected eof"]) {
            Failure::Closed
        } else {
            Failure::Other
        }
    }
}

/// TLS versions counted, oldest first (`SslRef::version_str` words).
pub(crate) const VERSIONS: [&str; 4] = ["TLSv1", "TLSv1.1", "TLSv1.2", "TLSv1.3"];

/// One frontend's counters.
#[derive(Debug, Default)]
pub(crate) struct FrontendStats {
    /// Client connections open now, and the most at once.
    pub(crate) current: AtomicU64,
    pub(crate) max: AtomicU64,
    connections: AtomicU64,
    handshakes: AtomicU64,
    resumed: AtomicU64,
    failures: [AtomicU64; Failure::ALL.len()],
    versions: [AtomicU64; VERSIONS.len()],
    /// Handshakes by cipher: a few names, each a `&'static str` of the library's; a handshake
    /// costs far more than this lock.
    ciphers: Mutex<BTreeMap<&'static str, u64>>,
    backend_failures: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    quic: [AtomicU64; Quic::ALL.len()],
}

/// What only a UDP (QUIC) frontend counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Quic {
    /// Retry packets sent: a new client's address checked before any state is kept for it.
    Retries,
    /// Handshakes whose early data (0-RTT) was taken.
    ZeroRttAccepted,
    /// Handshakes that offered early data and were not given it (0-RTT off, a session unknown
    /// here or used already): their requests wait for the handshake.
    ZeroRttRefused,
    /// Packets sent to clients and declared lost by QUIC's loss detection.
    LostPackets,
    /// Clients seen on a new address (port or IP) in the middle of a connection.
    Migrations,
}

impl Quic {
    pub(crate) const ALL: [Quic; 5] =
        [Quic::Retries, Quic::ZeroRttAccepted, Quic::ZeroRttRefused, Quic::LostPackets, Quic::Migrations];
}

impl FrontendStats {
    pub(crate) fn opened(&self) {
        self.connections.fetch_add(1, Ordering::Relaxed);
        let now = self.current.fetch_add(1, Ordering::Relaxed) + 1;
        self.max.fetch_max(now, Ordering::Relaxed);
    }

    pub(crate) fn closed(&self) {
        self.current.fetch_sub(1, Ordering::Relaxed);
    }

    pub(crate) fn handshake(&self, resumed: bool, version: &str, cipher: Option<&'static str>) {
        self.handshakes.fetch_add(1, Ordering::Relaxed);
        if resumed {
            self.resumed.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(i) = VERSIONS.iter().position(|v| *v == version) {
            self.versions[i].fetch_add(1, Ordering::Relaxed);
        }
        if let Some(cipher) = cipher {
            *self.ciphers.lock().unwrap_or_else(PoisonError::into_inner).entry(cipher).or_default() += 1;
        }
    }

    pub(crate) fn failed(&self, why: Failure) {
        let i = Failure::ALL.iter().position(|f| *f == why).unwrap_or(Failure::ALL.len() - 1);
        self.failures[i].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn backend_failed(&self) {
        self.backend_failures.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn quic(&self, what: Quic, n: u64) {
        if n > 0 {
            self.quic[what as usize].fetch_add(n, Ordering::Relaxed);
        }
    }

    pub(crate) fn received_from_client(&self, bytes: u64) {
        self.bytes_in.fetch_add(bytes, Ordering::Relaxed);
    }

    pub(crate) fn sent_to_client(&self, bytes: u64) {
        self.bytes_out.fetch_add(bytes, Ordering::Relaxed);
    }

    fn totals(&self) -> Totals {
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Totals {
            connections: load(&self.connections),
            handshakes: load(&self.handshakes),
            resumed: load(&self.resumed),
            failures: self.failures.iter().map(load).collect(),
            versions: self.versions.iter().map(load).collect(),
            ciphers: self
                .ciphers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .iter()
                .map(|(k, v)| ((*k).to_owned(), *v))
                .collect(),
            backend_failures: load(&self.backend_failures),
            bytes_in: load(&self.bytes_in),
            bytes_out: load(&self.bytes_out),
            max: load(&self.max),
            quic: self.quic.iter().map(load).collect(),
        }
    }
}

/// A frontend's totals, as handed across a reload and as rendered (a worker's own counts plus
/// its predecessors').
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Totals {
    pub(crate) connections: u64,
    pub(crate) handshakes: u64,
    pub(crate) resumed: u64,
    /// In [`Failure::ALL`]'s order.
    pub(crate) failures: Vec<u64>,
    /// In [`VERSIONS`]' order.
    pub(crate) versions: Vec<u64>,
    pub(crate) ciphers: BTreeMap<String, u64>,
    pub(crate) backend_failures: u64,
    pub(crate) bytes_in: u64,
    pub(crate) bytes_out: u64,
    /// The most connections at once (the larger of the two: a peak, not a sum).
    pub(crate) max: u64,
    /// In [`Quic::ALL`]'s order (absent from an older worker's snapshot).
    #[serde(default)]
    pub(crate) quic: Vec<u64>,
}

impl Totals {
    fn add(&mut self, other: &Totals) {
        self.connections += other.connections;
        self.handshakes += other.handshakes;
        self.resumed += other.resumed;
        add_all(&mut self.failures, &other.failures);
        add_all(&mut self.versions, &other.versions);
        for (k, v) in &other.ciphers {
            *self.ciphers.entry(k.clone()).or_default() += v;
        }
        self.backend_failures += other.backend_failures;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
        self.max = self.max.max(other.max);
        add_all(&mut self.quic, &other.quic);
    }

    /// What was counted since `earlier` (counters only grow; a peak stays a peak).
    fn since(&self, earlier: &Totals) -> Totals {
        let less = |a: &[u64], b: &[u64]| -> Vec<u64> {
            a.iter().enumerate().map(|(i, v)| v.saturating_sub(b.get(i).copied().unwrap_or(0))).collect()
        };
        Totals {
            connections: self.connections.saturating_sub(earlier.connections),
            handshakes: self.handshakes.saturating_sub(earlier.handshakes),
            resumed: self.resumed.saturating_sub(earlier.resumed),
            failures: less(&self.failures, &earlier.failures),
            versions: less(&self.versions, &earlier.versions),
            ciphers: self
                .ciphers
                .iter()
                .map(|(k, v)| (k.clone(), v.saturating_sub(earlier.ciphers.get(k).copied().unwrap_or(0))))
                .filter(|(_, v)| *v > 0)
                .collect(),
            backend_failures: self.backend_failures.saturating_sub(earlier.backend_failures),
            bytes_in: self.bytes_in.saturating_sub(earlier.bytes_in),
            bytes_out: self.bytes_out.saturating_sub(earlier.bytes_out),
            max: self.max,
            quic: less(&self.quic, &earlier.quic),
        }
    }

    pub(crate) fn failed(&self) -> u64 {
        self.failures.iter().sum()
    }

    pub(crate) fn quic(&self, what: Quic) -> u64 {
        self.quic.get(what as usize).copied().unwrap_or(0)
    }
}

fn add_all(into: &mut Vec<u64>, more: &[u64]) {
    if into.len() < more.len() {
        into.resize(more.len(), 0);
    }
    for (a, b) in into.iter_mut().zip(more) {
        *a += b;
    }
}

/// Every frontend's totals, by its `bind` as written (what a reload keeps the same).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Snapshot(pub(crate) BTreeMap<String, Totals>);

impl Snapshot {
    pub(crate) fn since(&self, earlier: &Snapshot) -> Snapshot {
        Snapshot(
            self.0
                .iter()
                .map(|(k, now)| (k.clone(), now.since(earlier.0.get(k).unwrap_or(&Totals::default()))))
                .collect(),
        )
    }
}

/// The counters of a serving worker: its frontends', in configuration order, and what its
/// predecessors counted.
#[derive(Debug)]
pub(crate) struct Stats {
    pub(crate) started: Instant,
    /// Each frontend's `bind`, as the snapshot keys it.
    names: Vec<String>,
    frontends: Vec<FrontendStats>,
    inherited: Mutex<Snapshot>,
}

impl Stats {
    pub(crate) fn new(names: Vec<String>) -> Stats {
        let frontends = names.iter().map(|_| FrontendStats::default()).collect();
        Stats { started: Instant::now(), names, frontends, inherited: Mutex::new(Snapshot::default()) }
    }

    pub(crate) fn frontend(&self, index: usize) -> &FrontendStats {
        &self.frontends[index]
    }

    /// The totals to hand to the next worker: this one's counts and its predecessors'.
    pub(crate) fn snapshot(&self) -> Snapshot {
        Snapshot(self.rows().into_iter().map(|(name, totals, _)| (name.to_owned(), totals)).collect())
    }

    /// What a canary's verdict is judged by: connections, handshake failures by reason
    /// (`handshake: no certificate for the name`, `handshake: protocol`, `handshake: cipher`, …)
    /// and backend connect
    /// failures, summed over the frontends (cumulative; the master takes differences).
    pub(crate) fn figures(&self) -> lb_supervisor::Figures {
        let mut sum = Totals::default();
        for totals in self.snapshot().0.values() {
            sum.add(totals);
        }
        let mut failures: std::collections::BTreeMap<String, u64> = Failure::ALL
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let reason = if *f == Failure::Sni { "no certificate for the name" } else { f.name() };
                (format!("handshake: {reason}"), sum.failures.get(i).copied().unwrap_or(0))
            })
            .collect();
        failures.insert("backend connect failures".to_owned(), sum.backend_failures);
        lb_supervisor::Figures { requests: sum.connections, failures, ..Default::default() }
    }

    /// Counts of earlier workers to add to every total from now on.
    pub(crate) fn inherit(&self, earlier: &Snapshot) {
        let mut inherited = self.inherited.lock().unwrap_or_else(PoisonError::into_inner);
        for (name, totals) in &earlier.0 {
            // A frontend no longer configured has nowhere to go.
            if self.names.contains(name) {
                inherited.0.entry(name.clone()).or_default().add(totals);
            }
        }
    }

    /// Each frontend's name, totals (its predecessors' included) and current connections.
    pub(crate) fn rows(&self) -> Vec<(&str, Totals, u64)> {
        let inherited = self.inherited.lock().unwrap_or_else(PoisonError::into_inner);
        self.names
            .iter()
            .zip(&self.frontends)
            .map(|(name, fe)| {
                let mut totals = fe.totals();
                if let Some(earlier) = inherited.0.get(name) {
                    totals.add(earlier);
                }
                (name.as_str(), totals, fe.current.load(Ordering::Relaxed))
            })
            .collect()
    }
}
