//! The session-ID cache handed across a reload. TLS 1.2 clients that take no ticket resume from
//! the cache of the context that made their session, which belongs to one worker. [`Mirror`]
//! follows what the library puts in and takes out of a frontend's cache (its new- and
//! removed-session callbacks, the same sessions, not copies); at a reload the old worker
//! serialises the live ones into the snapshot lb-supervisor hands the new worker with the
//! counters ([`crate::runtime`]), and the new worker adds them to its own cache. The bytes hold
//! the sessions' secrets: they travel only over the master's channel to its workers, as the
//! ticket keys do.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{SystemTime, UNIX_EPOCH};

use lb_supervisor::Secret;
use openssl::ssl::{SslContext, SslContextBuilder, SslSession};

use crate::ffi;

/// The most session bytes (as hex on the channel) all frontends together hand on: a reload's snapshot is one
/// message of the master's channel (64 MiB at most), counters included, whatever the number of
/// frontends. Each frontend gets an equal part; the newest sessions go first.
pub(crate) const HANDED_BYTES: usize = 16 << 20;

/// The sessions in a frontend's cache, by ID, and their order of arrival.
#[derive(Debug, Default)]
pub(crate) struct Mirror {
    inner: Mutex<Cached>,
    limit: usize,
}

#[derive(Default)]
struct Cached {
    sessions: HashMap<Vec<u8>, SslSession>,
    /// IDs, oldest first; some may be gone from `sessions` already.
    order: VecDeque<Vec<u8>>,
}

impl std::fmt::Debug for Cached {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} sessions", self.sessions.len())
    }
}

impl Mirror {
    /// A mirror of the cache of `b`, a context whose cache holds at most `limit` sessions.
    pub(crate) fn install(b: &mut SslContextBuilder, limit: usize) -> Arc<Mirror> {
        let mirror = Arc::new(Mirror { inner: Mutex::default(), limit });
        let added = mirror.clone();
        b.set_new_session_callback(move |_, session| added.add(session));
        let removed = mirror.clone();
        b.set_remove_session_callback(move |_, session| removed.remove(session.id()));
        mirror
    }

    fn add(&self, session: SslSession) {
        let id = session.id().to_vec();
        if id.is_empty() {
            return;
        }
        let mut cached = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        cached.order.push_back(id.clone());
        cached.sessions.insert(id, session);
        // The library drops its oldest when full; so does the mirror, whether or not it is told.
        while cached.sessions.len() > self.limit {
            let Some(oldest) = cached.order.pop_front() else { break };
            cached.sessions.remove(&oldest);
        }
        if cached.order.len() > 2 * self.limit.max(16) {
            let Cached { sessions, order } = &mut *cached;
            order.retain(|id| sessions.contains_key(id));
        }
    }

    fn remove(&self, id: &[u8]) {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).sessions.remove(id);
    }

    /// The sessions still good now, newest first, each in its DER form (a [`Secret`]: zeroed
    /// when dropped, hex on the channel), within `budget` bytes of hex (this frontend's part of
    /// [`HANDED_BYTES`]).
    pub(crate) fn export(&self, budget: usize) -> Vec<Secret> {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let cached = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::new();
        let mut bytes = 0;
        for id in cached.order.iter().rev() {
            let Some(session) = cached.sessions.get(id) else { continue };
            // The time's type is the library's (signed with OpenSSL, unsigned with AWS-LC).
            #[allow(clippy::useless_conversion)]
            let ends = u64::try_from(session.time()).unwrap_or(0).saturating_add(session.timeout().max(0) as u64);
            if ends <= now {
                continue;
            }
            let Ok(der) = session.to_der() else { continue };
            bytes += 2 * der.len();
            if bytes > budget {
                break;
            }
            out.push(Secret::new(der));
        }
        out
    }

    /// Adds to `ctx`'s cache (the one this mirror follows) and to the mirror the sessions
    /// [`export`](Self::export) made in the previous worker, oldest first so that the newest
    /// are the last to go; how many it took (a session the library does not read, or one
    /// already there, is skipped).
    pub(crate) fn import(&self, ctx: &SslContext, handed: &[Secret]) -> usize {
        let mut taken = 0;
        for der in handed.iter().rev() {
            let Ok(session) = SslSession::from_der(der.bytes()) else { continue };
            if ffi::add_session(ctx, &session) {
                self.add(session);
                taken += 1;
            }
        }
        taken
    }
}
