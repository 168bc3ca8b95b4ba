//! The connections to one server, so that `shutdown sessions server` can close them.
//!
//! Nothing here is touched per request: a connection registers once when it opens and leaves
//! when it closes. An HTTP server connection runs in a task of its own, which is aborted
//! (dropping the connection closes it); a TCP session holds a signal it watches next to its
//! copy loop.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

use tokio::sync::oneshot;
use tokio::task::AbortHandle;

/// How a registered connection is closed.
#[derive(Debug)]
enum Closer {
    Abort(AbortHandle),
    /// Dropping the sender resolves the session's receiver.
    Signal(oneshot::Sender<()>),
    /// The connection ended before its task was registered (see [`Sessions::track`]).
    Gone,
}

/// The registered connections by id.
type Live = HashMap<u64, Closer, BuildHasherDefault<IdHasher>>;

#[derive(Debug, Default)]
pub(crate) struct Sessions {
    next: AtomicU64,
    live: Mutex<Live>,
}

/// Hashes an id with one multiplication (Fibonacci hashing: consecutive ids spread over the
/// high bits the table reads first). The ids are ours, not a peer's: nothing to defend against,
/// and the default SipHash cost 150 instructions a look-up, three look-ups a server connection.
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(self.0.rotate_left(8) ^ u64::from(b));
        }
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

impl Sessions {
    fn live(&self) -> MutexGuard<'_, Live> {
        self.live.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// An id for a connection about to start.
    pub(crate) fn id(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    /// Register the task serving connection `id` (spawned already: it may even have ended).
    pub(crate) fn track(&self, id: u64, task: AbortHandle) {
        let mut live = self.live();
        match live.remove(&id) {
            Some(Closer::Gone) => {}
            _ => {
                live.insert(id, Closer::Abort(task));
            }
        }
    }

    /// A TCP session: a receiver that resolves when the server's sessions are shut down.
    pub(crate) fn signal(&self, id: u64) -> oneshot::Receiver<()> {
        let (tx, rx) = oneshot::channel();
        self.live().insert(id, Closer::Signal(tx));
        rx
    }

    /// Connection `id` ended.
    pub(crate) fn ended(&self, id: u64) {
        let mut live = self.live();
        if live.remove(&id).is_none() {
            // Its task has not been registered yet: tell `track` not to.
            live.insert(id, Closer::Gone);
        }
    }

    /// Close every registered connection now.
    pub(crate) fn close_all(&self) -> usize {
        let closers: Vec<Closer> = self.live().drain().map(|(_, c)| c).collect();
        let mut closed = 0;
        for closer in closers {
            match closer {
                Closer::Abort(task) => {
                    task.abort();
                    closed += 1;
                }
                Closer::Signal(tx) => {
                    drop(tx);
                    closed += 1;
                }
                Closer::Gone => {}
            }
        }
        closed
    }
}

/// Unregisters a connection when dropped (whatever way its task ends).
#[derive(Debug)]
pub(crate) struct SessionGuard<'a> {
    pub(crate) sessions: &'a Sessions,
    pub(crate) id: u64,
}

impl Drop for SessionGuard<'_> {
    fn drop(&mut self) {
        self.sessions.ended(self.id);
    }
}
