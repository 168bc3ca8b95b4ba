//! The open QUIC connections of a frontend in this worker, looked at once a second by one task
//! ([`sweep`]) rather than each on a timer of its own: an idle connection costs no wake-up and
//! no timer. The look adds their UDP bytes and lost packets to the frontend's statistics, so
//! that a long-lived connection's traffic shows while it lasts (HAProxy counts as bytes move),
//! and gives a client seen at a new address on an idle connection its connected socket there
//! (a request looks at once: [`Registered::follow`]).

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::Duration;

use super::sockets::Owned;
use super::Door;
use crate::stats::{FrontendStats, Quic};

/// How often the open connections are looked at.
const SWEEP: Duration = Duration::from_secs(1);

/// The open connections of a frontend in this worker, by quinn's `stable_id` (unique among
/// the live connections).
#[derive(Default)]
pub(super) struct Open(Mutex<HashMap<usize, Arc<Tracked>>>);

impl std::fmt::Debug for Open {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Open").field("connections", &lock(&self.0).len()).finish()
    }
}

/// One connection, as the look sees it.
struct Tracked {
    conn: quinn::Connection,
    local_ip: Option<IpAddr>,
    state: Mutex<State>,
}

struct State {
    home: Home,
    counted: Counted,
}

impl Tracked {
    /// Counts what is new of the connection's traffic and follows its client.
    fn look(&self, door: &Door, stats: &FrontendStats) {
        let mut state = lock(&self.state);
        state.home.follow(door, &self.conn, self.local_ip, stats);
        state.counted.update(&self.conn, stats);
    }
}

/// A connection in its frontend's [`Open`] while this lives: its last traffic is counted and
/// it leaves the registry when dropped.
pub(super) struct Registered {
    door: Arc<Door>,
    tracked: Arc<Tracked>,
}

impl Registered {
    /// `conn`, whose client is at `home`, in `door`'s open connections.
    pub(super) fn new(door: Arc<Door>, conn: quinn::Connection, home: Home, local_ip: Option<IpAddr>) -> Registered {
        let state = Mutex::new(State { home, counted: Counted::default() });
        let tracked = Arc::new(Tracked { conn, local_ip, state });
        lock(&door.open.0).insert(tracked.conn.stable_id(), tracked.clone());
        Registered { door, tracked }
    }

    /// Whether the client moved (a request looks at once, not at the next sweep).
    pub(super) fn follow(&self) {
        let stats = self.door.shared.stats.frontend(self.door.frontend);
        let tracked = &self.tracked;
        lock(&tracked.state).home.follow(&self.door, &tracked.conn, tracked.local_ip, stats);
    }
}

impl Drop for Registered {
    fn drop(&mut self) {
        lock(&self.door.open.0).remove(&self.tracked.conn.stable_id());
        let stats = self.door.shared.stats.frontend(self.door.frontend);
        lock(&self.tracked.state).counted.update(&self.tracked.conn, stats);
    }
}

/// Looks at `door`'s open connections once a second until the door is gone (its accept loop
/// and every connection of it ended).
pub(super) async fn sweep(door: Weak<Door>) {
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + SWEEP, SWEEP);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(door) = door.upgrade() else { return };
        // Taken out of the lock: connections opening and closing meanwhile do not wait.
        let open: Vec<Arc<Tracked>> = lock(&door.open.0).values().cloned().collect();
        let stats = door.shared.stats.frontend(door.frontend);
        for tracked in open {
            tracked.look(&door, stats);
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the client is, and the connected socket towards it (none when this worker may not
/// bind the port).
pub(super) struct Home {
    pub(super) address: SocketAddr,
    pub(super) owned: Option<Owned>,
}

impl Home {
    /// Counts a move of the client and takes a connected socket at its new address.
    fn follow(&mut self, door: &Door, conn: &quinn::Connection, local_ip: Option<IpAddr>, stats: &FrontendStats) {
        let now = conn.remote_address();
        if now == self.address {
            return;
        }
        stats.quic(Quic::Migrations, 1);
        self.address = now;
        if self.owned.is_some() {
            self.owned = door.adopt(now, local_ip);
        }
    }
}

/// What of the connection's UDP bytes and lost packets the frontend's statistics already have.
#[derive(Default)]
struct Counted {
    received: u64,
    sent: u64,
    lost: u64,
}

impl Counted {
    fn update(&mut self, conn: &quinn::Connection, stats: &FrontendStats) {
        let now = conn.stats();
        stats.received_from_client(now.udp_rx.bytes.saturating_sub(self.received));
        stats.sent_to_client(now.udp_tx.bytes.saturating_sub(self.sent));
        // A new path (the client moved) counts its losses from zero: all of its count is new.
        let lost = now.path.lost_packets;
        stats.quic(Quic::LostPackets, if lost >= self.lost { lost - self.lost } else { lost });
        (self.received, self.sent, self.lost) = (now.udp_rx.bytes, now.udp_tx.bytes, now.path.lost_packets);
    }
}
