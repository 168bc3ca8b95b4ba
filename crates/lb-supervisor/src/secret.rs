//! Secrets the master makes for its workers: random blobs, renewed on a schedule, each kept for a
//! while after it stops being current, handed to every worker over the private channel. lb-tls
//! uses them as its session-ticket keys, so that a ticket issued by one worker is still read by
//! the next one after a reload; the supervisor knows nothing of what they are for.
//!
//! A secret lives in the master's and the workers' memory only: never in a file, the
//! environment, argv or a log ([`Secret`]'s `Debug` prints its length, not its bytes).

use std::collections::VecDeque;
use std::io::Read as _;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// What a daemon asks of the master (in [`Settings`](crate::Settings)): `len` random bytes,
/// a new one every `rotate_every_ms`, each kept for `keep_for_ms` once it is no longer current.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretSpec {
    pub len: usize,
    pub rotate_every_ms: u64,
    pub keep_for_ms: u64,
}

/// One secret's bytes. Zeroed when dropped; `Debug` shows only the length.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(Vec<u8>);

impl Secret {
    pub fn new(bytes: Vec<u8>) -> Secret {
        Secret(bytes)
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Secret({} bytes)", self.0.len())
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.fill(0);
        std::hint::black_box(&self.0);
    }
}

/// On the channel: lowercase hex (the channel's messages are JSON).
impl Serialize for Secret {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut hex = String::with_capacity(self.0.len() * 2);
        for b in &self.0 {
            hex.push(char::from(HEX[usize::from(b >> 4)]));
            hex.push(char::from(HEX[usize::from(b & 15)]));
        }
        s.serialize_str(&hex)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let hex = String::deserialize(d)?;
        let digit = |c: u8| (c as char).to_digit(16).and_then(|v| u8::try_from(v).ok());
        hex.as_bytes()
            .chunks(2)
            .map(|pair| match pair {
                [hi, lo] => Some((digit(*hi)? << 4) | digit(*lo)?),
                _ => None,
            })
            .collect::<Option<Vec<u8>>>()
            .map(Secret)
            .ok_or_else(|| serde::de::Error::custom("a secret is an even number of hex digits"))
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// The master's secrets: the current one first, then those still kept.
#[derive(Debug)]
pub(crate) struct SecretRing {
    spec: SecretSpec,
    /// The current secret and when it became current.
    current: (Secret, Instant),
    /// Older secrets and when each may be forgotten.
    kept: VecDeque<(Secret, Instant)>,
}

impl SecretRing {
    /// A ring with a fresh current secret.
    pub(crate) fn new(spec: SecretSpec, now: Instant) -> std::io::Result<SecretRing> {
        Ok(SecretRing { spec, current: (random(spec.len)?, now), kept: VecDeque::new() })
    }

    /// The secrets a worker needs: the current one first.
    pub(crate) fn set(&self) -> Vec<Secret> {
        std::iter::once(&self.current.0).chain(self.kept.iter().map(|(s, _)| s)).cloned().collect()
    }

    /// When something is next due: a rotation, or forgetting a kept secret.
    pub(crate) fn next_change(&self) -> Instant {
        let rotation = self.current.1 + Duration::from_millis(self.spec.rotate_every_ms);
        self.kept.iter().map(|(_, until)| *until).chain([rotation]).min().unwrap_or(rotation)
    }

    /// Rotate and forget what is due at `now`; true when the set changed (tell the workers).
    pub(crate) fn advance(&mut self, now: Instant) -> std::io::Result<bool> {
        let before = self.kept.len();
        self.kept.retain(|(_, until)| *until > now);
        let mut changed = self.kept.len() != before;
        if self.current.1 + Duration::from_millis(self.spec.rotate_every_ms) <= now {
            let fresh = (random(self.spec.len)?, now);
            let (old, _) = std::mem::replace(&mut self.current, fresh);
            self.kept.push_front((old, now + Duration::from_millis(self.spec.keep_for_ms)));
            changed = true;
        }
        Ok(changed)
    }

    /// A reload's configuration may ask for another schedule: the times change at once; a new
    /// length makes a fresh set (the old secrets could not serve the new use).
    pub(crate) fn adopt(&mut self, spec: SecretSpec, now: Instant) -> std::io::Result<bool> {
        if spec == self.spec {
            return Ok(false);
        }
        if spec.len != self.spec.len {
            *self = SecretRing::new(spec, now)?;
        } else {
            self.spec = spec;
        }
        Ok(true)
    }
}

/// `len` bytes from the operating system's random source.
fn random(len: usize) -> std::io::Result<Secret> {
    let mut bytes = vec![0; len];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(Secret(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SPEC: SecretSpec = SecretSpec { len: 80, rotate_every_ms: 1000, keep_for_ms: 2500 };

    #[test]
    fn secrets_rotate_and_are_kept_for_their_time_then_forgotten() {
        let t0 = Instant::now();
        let mut ring = SecretRing::new(SPEC, t0).expect("random");
        let first = ring.set();
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].bytes().len(), 80);
        assert_eq!(ring.next_change(), t0 + Duration::from_millis(1000));
        assert!(!ring.advance(t0 + Duration::from_millis(999)).expect("random"));
        assert!(ring.advance(t0 + Duration::from_millis(1000)).expect("random"));
        let second = ring.set();
        assert_eq!(second.len(), 2);
        assert_ne!(second[0], first[0], "a fresh current secret");
        assert_eq!(second[1], first[0], "the old one is kept, second");
        // Kept until 1000 + 2500 ms; rotations at 2000 and 3000 come before.
        for at in [2000, 3000] {
            assert!(ring.advance(t0 + Duration::from_millis(at)).expect("random"));
        }
        assert_eq!(ring.set().len(), 4);
        assert!(ring.advance(t0 + Duration::from_millis(3500)).expect("random"));
        assert!(!ring.set().contains(&first[0]), "forgotten after keep_for");
        assert_eq!(ring.set().len(), 3);
    }

    #[test]
    fn a_new_schedule_applies_and_a_new_length_starts_afresh() {
        let t0 = Instant::now();
        let mut ring = SecretRing::new(SPEC, t0).expect("random");
        let first = ring.set();
        assert!(!ring.adopt(SPEC, t0).expect("random"));
        assert!(ring.adopt(SecretSpec { rotate_every_ms: 5000, ..SPEC }, t0).expect("random"));
        assert_eq!(ring.set(), first, "same secrets, new times");
        assert_eq!(ring.next_change(), t0 + Duration::from_millis(5000));
        assert!(ring.adopt(SecretSpec { len: 48, ..SPEC }, t0).expect("random"));
        assert_eq!(ring.set()[0].bytes().len(), 48);
    }

    #[test]
    fn secrets_travel_as_hex_and_never_show_in_debug() {
        let secret = Secret(vec![0, 1, 0xab, 0xff]);
        let json = serde_json::to_string(&secret).expect("json");
        assert_eq!(json, "\"0001abff\"");
        assert_eq!(serde_json::from_str::<Secret>(&json).expect("back"), secret);
        assert!(serde_json::from_str::<Secret>("\"abc\"").is_err());
        assert!(serde_json::from_str::<Secret>("\"zz\"").is_err());
        assert_eq!(format!("{secret:?}"), "Secret(4 bytes)");
    }
}
