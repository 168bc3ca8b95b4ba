//! Canary reloads: what a canary is asked to do ([`CanarySettings`], [`CanaryAsk`]), what each
//! worker reports over its window ([`Figures`]), and the verdict ([`judge`]).
//!
//! The split of connections between the two workers is `split`'s; the master's side of the
//! phase (when it starts, when it is judged, what promotion and rollback do) is
//! `master::canary`'s. The design is in docs/architecture.md, "Canary reloads".

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

#[cfg(test)]
mod tests;

/// A share of connections, in parts per million (`10%` is 100,000).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Share(u32);

impl Share {
    pub const WHOLE: u32 = 1_000_000;

    /// `10%`, `12.5%`, `0.5%`: more than 0 and at most 100 %, to a hundredth of a percent.
    pub fn parse(text: &str) -> Result<Share, String> {
        let bad = || format!("invalid share `{text}`: expected a percentage above 0 and at most 100%, e.g. 10%");
        let number = text.trim().strip_suffix('%').ok_or_else(bad)?;
        let hundredths = fixed(number.trim(), 2).ok_or_else(bad)?;
        if hundredths == 0 || hundredths > 10_000 {
            return Err(bad());
        }
        Ok(Share(u32::try_from(hundredths * 100).map_err(|_| bad())?))
    }

    pub fn from_ppm(ppm: u32) -> Share {
        Share(ppm.min(Self::WHOLE))
    }

    pub fn ppm(self) -> u32 {
        self.0
    }

    fn fraction(self) -> f64 {
        f64::from(self.0) / f64::from(Self::WHOLE)
    }
}

impl fmt::Display for Share {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        decimal(f, u64::from(self.0 / 100), 2)?;
        f.write_str("%")
    }
}

/// A ratio to the old worker's figure (`2`, `1.5`), in thousandths.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Ratio(u32);

impl Ratio {
    /// At least 1 (a new worker is never asked to be better than the old one), up to 1000.
    pub fn parse(text: &str) -> Result<Ratio, String> {
        let bad = || format!("invalid ratio `{text}`: expected a number from 1 to 1000, e.g. 2 or 1.5");
        let thousandths = fixed(text.trim(), 3).ok_or_else(bad)?;
        if !(1000..=1_000_000).contains(&thousandths) {
            return Err(bad());
        }
        Ok(Ratio(u32::try_from(thousandths).map_err(|_| bad())?))
    }

    pub fn from_thousandths(n: u32) -> Ratio {
        Ratio(n.max(1000))
    }

    pub fn thousandths(self) -> u32 {
        self.0
    }

    fn factor(self) -> f64 {
        f64::from(self.0) / 1000.0
    }
}

impl fmt::Display for Ratio {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        decimal(f, u64::from(self.0), 3)
    }
}

/// `12.5` with `places` = 2 → 1250; at most `places` decimals, digits only.
fn fixed(text: &str, places: u32) -> Option<u64> {
    let (whole, frac) = text.split_once('.').unwrap_or((text, ""));
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(whole) || (!frac.is_empty() && !digits(frac)) || frac.len() > places as usize || whole.len() > 9 {
        return None;
    }
    let scale = 10u64.pow(places);
    let frac_value =
        if frac.is_empty() { 0 } else { frac.parse::<u64>().ok()? * 10u64.pow(places - frac.len() as u32) };
    whole.parse::<u64>().ok()?.checked_mul(scale)?.checked_add(frac_value)
}

/// `value` / 10^places, without trailing zeros.
fn decimal(f: &mut fmt::Formatter<'_>, value: u64, places: u32) -> fmt::Result {
    let scale = 10u64.pow(places);
    let (whole, frac) = (value / scale, value % scale);
    if frac == 0 {
        return write!(f, "{whole}");
    }
    let text = format!("{frac:0width$}", width = places as usize);
    write!(f, "{whole}.{}", text.trim_end_matches('0'))
}

/// What to do when the canary saw fewer than `min_requests` in its window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TooLittleTraffic {
    Promote,
    Rollback,
}

/// `global.canary`, validated: a canary for every reload (unless the reload says otherwise).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanarySettings {
    /// The new worker's share of new connections during the window.
    pub share: Share,
    /// How long the window lasts.
    pub duration: Duration,
    /// Fewer requests than this on the new worker: judged by `too_little_traffic`.
    pub min_requests: u64,
    pub too_little_traffic: TooLittleTraffic,
    /// A failure rate is worse when above `max_error_ratio` × the old worker's rate…
    pub max_error_ratio: Ratio,
    /// …and above this rate (a share of the requests).
    pub max_error_rate: Share,
    /// The p99 total time is worse when above `max_p99_ratio` × the old worker's p99…
    pub max_p99_ratio: Ratio,
    /// …and above the old p99 by more than this.
    pub max_p99_increase: Duration,
}

impl CanarySettings {
    pub const DEFAULT_SHARE: Share = Share(100_000);
    pub const DEFAULT_DURATION: Duration = Duration::from_secs(30);
    pub const DEFAULT_MIN_REQUESTS: u64 = 100;
    pub const DEFAULT_MAX_ERROR_RATIO: Ratio = Ratio(2000);
    pub const DEFAULT_MAX_ERROR_RATE: Share = Share(10_000);
    pub const DEFAULT_MAX_P99_RATIO: Ratio = Ratio(1500);
    pub const DEFAULT_MAX_P99_INCREASE: Duration = Duration::from_millis(50);
}

impl Default for CanarySettings {
    fn default() -> Self {
        CanarySettings {
            share: Self::DEFAULT_SHARE,
            duration: Self::DEFAULT_DURATION,
            min_requests: Self::DEFAULT_MIN_REQUESTS,
            too_little_traffic: TooLittleTraffic::Promote,
            max_error_ratio: Self::DEFAULT_MAX_ERROR_RATIO,
            max_error_rate: Self::DEFAULT_MAX_ERROR_RATE,
            max_p99_ratio: Self::DEFAULT_MAX_P99_RATIO,
            max_p99_increase: Self::DEFAULT_MAX_P99_INCREASE,
        }
    }
}

/// What one reload asks (`lbctl reload --canary 10% --for 30s`, `--canary off`); a plain
/// reload uses the new configuration's `global.canary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "canary", rename_all = "snake_case")]
pub enum CanaryAsk {
    /// No canary for this reload, whatever the configuration says.
    Off,
    /// This share and window; the other settings from `global.canary` (or their defaults).
    On { share: Share, duration_ms: u64 },
}

impl CanaryAsk {
    /// The canary a worker with `configured` settings runs for this ask (`None`: none).
    pub(crate) fn plan(ask: Option<CanaryAsk>, configured: Option<&CanarySettings>) -> Option<CanarySettings> {
        match ask {
            Some(CanaryAsk::Off) => None,
            Some(CanaryAsk::On { share, duration_ms }) => Some(CanarySettings {
                share,
                duration: Duration::from_millis(duration_ms),
                ..configured.cloned().unwrap_or_default()
            }),
            None => configured.cloned(),
        }
    }
}

/// What a worker counted since it started, for a canary's verdict: cumulative, so that the
/// master judges the difference over the window ([`Figures::since`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Figures {
    /// What the rates are per: requests (lb-proxy), connections (lb-tls).
    pub requests: u64,
    /// Failures by kind, each judged on its own (`503 no server`, `handshake: no certificate`).
    pub failures: BTreeMap<String, u64>,
    /// The total time of each request: upper bounds of buckets in ms, and a count per bucket
    /// with one more for what is above the last bound. Empty: not measured.
    #[serde(default)]
    pub latency_bounds_ms: Vec<u64>,
    #[serde(default)]
    pub latency_counts: Vec<u64>,
}

impl Figures {
    /// What was counted since `earlier` (the same worker's figures, taken before).
    pub fn since(&self, earlier: &Figures) -> Figures {
        let failures = self
            .failures
            .iter()
            .map(|(k, n)| (k.clone(), n.saturating_sub(*earlier.failures.get(k).unwrap_or(&0))))
            .collect();
        let latency_counts = self
            .latency_counts
            .iter()
            .enumerate()
            .map(|(i, n)| n.saturating_sub(earlier.latency_counts.get(i).copied().unwrap_or(0)))
            .collect();
        Figures {
            requests: self.requests.saturating_sub(earlier.requests),
            failures,
            latency_bounds_ms: self.latency_bounds_ms.clone(),
            latency_counts,
        }
    }

    /// The 99th percentile of the total time, as the upper bound of its bucket (`None`: nothing
    /// measured; `u64::MAX`: above the last bound).
    pub fn p99_ms(&self) -> Option<u64> {
        let total: u64 = self.latency_counts.iter().sum();
        if total == 0 {
            return None;
        }
        // The smallest bucket holding the ceil(99 %) -th time.
        let rank = total - total / 100;
        let mut seen = 0;
        for (i, n) in self.latency_counts.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(self.latency_bounds_ms.get(i).copied().unwrap_or(u64::MAX));
            }
        }
        Some(u64::MAX)
    }
}

/// A canary's outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub promote: bool,
    /// Judged by its figures; `false`: too little traffic, decided by `too_little_traffic`.
    pub judged: bool,
    /// One line: the figures that decided it.
    pub summary: String,
}

/// Judge the new worker's figures over the window against the old worker's over the same one.
pub fn judge(settings: &CanarySettings, old: &Figures, new: &Figures) -> Verdict {
    let counted = format!("canary {} requests, previous worker {}", new.requests, old.requests);
    if new.requests < settings.min_requests {
        let promote = settings.too_little_traffic == TooLittleTraffic::Promote;
        let verb = if promote { "promoted" } else { "rolled back" };
        return Verdict {
            promote,
            judged: false,
            summary: format!(
                "{verb} with too little traffic to judge: {counted} (min_requests {}, too_little_traffic {})",
                settings.min_requests,
                if promote { "promote" } else { "rollback" }
            ),
        };
    }
    let rate = |n: u64, of: u64| if of == 0 { 0.0 } else { n as f64 / of as f64 };
    let mut worse = Vec::new();
    let kinds: std::collections::BTreeSet<&String> = old.failures.keys().chain(new.failures.keys()).collect();
    for kind in kinds {
        let (n_new, n_old) =
            (new.failures.get(kind).copied().unwrap_or(0), old.failures.get(kind).copied().unwrap_or(0));
        let (r_new, r_old) = (rate(n_new, new.requests), rate(n_old, old.requests));
        if r_new > r_old * settings.max_error_ratio.factor() && r_new > settings.max_error_rate.fraction() {
            worse.push(format!(
                "{kind}: {n_new} of {} ({}) on the canary vs {n_old} of {} ({}) (max_error_ratio {}, max_error_rate {})",
                new.requests,
                percent(r_new),
                old.requests,
                percent(r_old),
                settings.max_error_ratio,
                settings.max_error_rate
            ));
        }
    }
    let p99 = (old.p99_ms(), new.p99_ms());
    if let (Some(p_old), Some(p_new)) = p99 {
        let increase = u64::try_from(settings.max_p99_increase.as_millis()).unwrap_or(u64::MAX);
        if p_new as f64 > p_old as f64 * settings.max_p99_ratio.factor() && p_new > p_old.saturating_add(increase) {
            worse.push(format!(
                "p99 total time {} on the canary vs {} (max_p99_ratio {}, max_p99_increase {}ms)",
                millis(p_new),
                millis(p_old),
                settings.max_p99_ratio,
                increase
            ));
        }
    }
    if worse.is_empty() {
        let p99 = match p99 {
            (Some(o), Some(n)) => format!(", p99 {} vs {}", millis(n), millis(o)),
            _ => String::new(),
        };
        let failed: u64 = new.failures.values().sum();
        let failed_old: u64 = old.failures.values().sum();
        Verdict {
            promote: true,
            judged: true,
            summary: format!("promoted: {counted}, failures {failed} vs {failed_old}{p99}"),
        }
    } else {
        Verdict { promote: false, judged: true, summary: format!("rolled back: {counted}; {}", worse.join("; ")) }
    }
}

fn percent(rate: f64) -> String {
    format!("{:.2}%", rate * 100.0)
}

fn millis(ms: u64) -> String {
    if ms == u64::MAX {
        "above the last bucket".to_owned()
    } else {
        format!("≤{ms}ms")
    }
}
