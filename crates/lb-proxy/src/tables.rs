//! Limit tables (HAProxy's stick tables, nginx's `limit_req` zones): per key (a client
//! address or its network, an API key, any fetched value), what that key did lately:
//! requests and connections over a sliding period, connections and requests in progress,
//! 4xx/5xx answers, bytes, general-purpose counters and tags, a token bucket.
//!
//! A table is bounded: at its size the least recently used entry not in use is evicted, and an
//! entry untouched for the table's `expire` is gone. It is split in shards, each behind its own
//! lock, chosen by the key's hash (keyed per process, so that nobody can aim every key at one
//! shard): requests on different threads meet on a lock only when their keys share a shard.
//! Least-recently-used is kept per shard, which is what a full table evicts.
//!
//! This module is the store; `http`'s rules decide what to track and what to do with the
//! figures, `runtime` shows and edits entries (`show table`), and a reload hands every entry
//! to the next worker (`handover`).
//!
//! # Layout
//! - this file: [`Tables`] (by name) and [`Table`] (shards, the track and update calls).
//! - `fuzz`: the hand-over's bytes for the fuzzer.
//! - `handover`: every entry to the next worker at a reload, and what was counted after.
//! - `key`: keys, from requests and from runtime commands.
//! - `row`: an entry's cells: counts, rates (HAProxy's `freq_ctr`), the token bucket.
//! - `shard`: the bounded map with its recency chain.
//! - `show`: `show table`, `clear table`, `set table`.
//! - `track`: what a connection or a request holds, and a request's slots (`sc0`–`sc2`).

pub(crate) mod fuzz;
pub(crate) mod handover;
mod key;
mod row;
mod shard;
mod show;
#[cfg(test)]
mod tests;
mod track;

use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use lb_config::Table as TableConfig;

pub(crate) use key::Key;
pub(crate) use row::{Layout, Now, Row, Verdict};
use shard::{Found, Meta, Shard};
pub(crate) use show::command;
pub(crate) use track::{TrackOutcome, Tracked};

/// Most shards a table is split in; one per 4096 entries of its size below that.
const MAX_SHARDS: usize = 64;

/// A shard may hold this much more than its even share (keys never spread exactly evenly),
/// so that the table as a whole fills to its size before evicting.
const SHARD_SLACK: f64 = 1.25;

/// Every table of the configuration, by name.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    tables: Vec<Arc<Table>>,
    /// What was handed to the next worker (`handover`), to tell what was counted after.
    handed: Mutex<Option<Vec<u8>>>,
    /// The live nodes of the fleet (`set fleet share`), shared by every table.
    share: Arc<AtomicU32>,
}

impl Tables {
    pub(crate) fn new(configs: &[TableConfig]) -> Tables {
        let share = Arc::new(AtomicU32::new(1));
        let tables = configs.iter().map(|c| Arc::new(Table::with_share(c.clone(), share.clone()))).collect();
        Tables { tables, handed: Mutex::default(), share }
    }

    /// The live nodes of the fleet, as last set (1 until told).
    pub(crate) fn share(&self) -> u32 {
        self.share.load(Ordering::Relaxed).max(1)
    }

    /// Divides every fleet table's limits by `n` (the live nodes) from now on.
    pub(crate) fn set_share(&self, n: u32) {
        self.share.store(n.max(1), Ordering::Relaxed);
    }

    pub(crate) fn get(&self, name: &str) -> Option<&Arc<Table>> {
        self.tables.iter().find(|t| t.config.name == name)
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<Table>> {
        self.tables.iter()
    }

    /// Removes expired entries every second, until the worker stops (lookups only remove a
    /// couple at a time, so an idle table would otherwise keep its dead entries).
    pub(crate) fn spawn_sweeper(&self, mut shutdown: lb_supervisor::Shutdown) {
        if self.tables.is_empty() {
            return;
        }
        let tables = self.tables.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
            loop {
                tokio::select! {
                    _ = tick.tick() => {
                        let now = Now::read();
                        for table in &tables {
                            table.purge(now);
                        }
                    }
                    () = shutdown.stopped() => return,
                }
            }
        });
    }
}

/// One table.
#[derive(Debug)]
pub(crate) struct Table {
    pub(crate) config: TableConfig,
    pub(crate) layout: Layout,
    shards: Box<[Mutex<Shard>]>,
    /// Entries per shard at most.
    shard_cap: usize,
    /// Entries in all shards: at the table's size a new one evicts an old one from its shard.
    len: AtomicUsize,
    hasher: hashbrown::DefaultHashBuilder,
    expire_secs: u32,
    /// Entries evicted to make room (not the expired ones).
    pub(crate) evictions: AtomicU64,
    /// Keys not tracked because every entry their shard could give up was in use.
    pub(crate) full: AtomicU64,
    /// Requests and connections refused on this table's figures, by [`Reason`].
    pub(crate) denials: [AtomicU64; Reason::ALL.len()],
    /// The fleet's live nodes ([`Tables::set_share`]); read only when the table is `fleet`.
    fleet_share: Arc<AtomicU32>,
}

/// Why a request or connection was refused on a table's figures (`/metrics`' `reason`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reason {
    /// Past the `limit_req` burst.
    LimitReq,
    /// A `deny` rule whose condition read the table.
    Deny,
    /// A `tarpit` rule whose condition read the table.
    Tarpit,
    /// A connection closed at accept.
    Reject,
}

impl Reason {
    pub(crate) const ALL: [Reason; 4] = [Reason::LimitReq, Reason::Deny, Reason::Tarpit, Reason::Reject];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Reason::LimitReq => "limit_req",
            Reason::Deny => "deny",
            Reason::Tarpit => "tarpit",
            Reason::Reject => "reject",
        }
    }
}

impl Table {
    #[cfg(test)]
    pub(crate) fn new(config: TableConfig) -> Table {
        Table::with_share(config, Arc::new(AtomicU32::new(1)))
    }

    fn with_share(config: TableConfig, fleet_share: Arc<AtomicU32>) -> Table {
        let shards = (config.size / 4096).clamp(1, MAX_SHARDS).next_power_of_two().min(MAX_SHARDS);
        Table {
            layout: Layout::new(&config),
            shards: (0..shards).map(|_| Mutex::new(Shard::new())).collect(),
            shard_cap: if shards == 1 {
                config.size.max(1)
            } else {
                (config.size as f64 / shards as f64 * SHARD_SLACK).ceil() as usize
            },
            len: AtomicUsize::new(0),
            hasher: hashbrown::DefaultHashBuilder::default(),
            expire_secs: u32::try_from(config.expire.as_secs()).unwrap_or(u32::MAX).max(1),
            evictions: AtomicU64::new(0),
            full: AtomicU64::new(0),
            denials: Default::default(),
            fleet_share,
            config,
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    /// What this table's limits are divided by: the fleet's live nodes for a `fleet` table,
    /// 1 otherwise.
    pub(crate) fn share(&self) -> u32 {
        if self.config.fleet {
            self.fleet_share.load(Ordering::Relaxed).max(1)
        } else {
            1
        }
    }

    pub(crate) fn denied(&self, reason: Reason) {
        self.denials[reason as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn hash(&self, key: &Key) -> u64 {
        self.hasher.hash_one(key)
    }

    pub(crate) fn shard(&self, hash: u64) -> MutexGuard<'_, Shard> {
        // Bits the index does not use for its own buckets or tags.
        let i = (hash >> 32) as usize & (self.shards.len() - 1);
        self.shards[i].lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs `f` on `key`'s entry (its cells, and its bookkeeping: use count, expiry), made when
    /// absent, and marks it just used; `None` when the table could not make room (its shard
    /// full of entries in use).
    pub(crate) fn update<R>(&self, key: &Key, now: Now, f: impl FnOnce(&mut Row<'_>, &mut Meta) -> R) -> Option<R> {
        self.update_at(key, self.hash(key), now, f).map(|(r, _)| r)
    }

    /// [`update`](Self::update) with the key's hash known; also says where the entry is.
    pub(crate) fn update_at<R>(
        &self,
        key: &Key,
        hash: u64,
        now: Now,
        f: impl FnOnce(&mut Row<'_>, &mut Meta) -> R,
    ) -> Option<(R, u32)> {
        let width = self.layout.width;
        let mut shard = self.shard(hash);
        let hash_of = |k: &Key| self.hash(k);
        let full = |_| self.len.load(Ordering::Relaxed) >= self.config.size;
        let slot = match shard.find_or_insert(hash, key, width, self.shard_cap, now.secs(), full, &hash_of) {
            Some(Found::Existing(slot)) => slot,
            Some(Found::New { slot, evicted, purged }) => {
                if evicted {
                    self.evictions.fetch_add(1, Ordering::Relaxed);
                } else {
                    self.len.fetch_add(1, Ordering::Relaxed);
                }
                self.len.fetch_sub(purged, Ordering::Relaxed);
                slot
            }
            None => {
                self.full.fetch_add(1, Ordering::Relaxed);
                return None;
            }
        };
        shard.touch(slot, now.secs(), self.expire_secs);
        let (meta, cells) = shard.entry_mut(slot, width);
        let mut row = Row { layout: &self.layout, cells, now };
        Some((f(&mut row, meta), slot))
    }

    /// [`update`](Self::update) of an entry held in use (`hash` its key's, `slot` where it is):
    /// an entry in use is never removed, so it is still there, found without its key.
    pub(crate) fn update_held<R>(
        &self,
        hash: u64,
        slot: u32,
        now: Now,
        f: impl FnOnce(&mut Row<'_>, &mut Meta) -> R,
    ) -> Option<R> {
        let width = self.layout.width;
        let mut shard = self.shard(hash);
        if !shard.in_use(slot) {
            return None;
        }
        shard.touch(slot, now.secs(), self.expire_secs);
        let (meta, cells) = shard.entry_mut(slot, width);
        let mut row = Row { layout: &self.layout, cells, now };
        Some(f(&mut row, meta))
    }

    /// Runs `f` on `key`'s entry if there is a live one, without touching it.
    #[cfg(test)]
    pub(crate) fn read<R>(&self, key: &Key, now: Now, f: impl FnOnce(&Row<'_>) -> R) -> Option<R> {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let slot = shard.find(hash, key)?;
        let (meta, cells) = shard.entry_mut(slot, self.layout.width);
        if meta.expire < now.secs() && meta.refs == 0 {
            return None;
        }
        Some(f(&Row { layout: &self.layout, cells, now }))
    }

    /// Runs `f` on an entry held in use (see [`update_held`](Self::update_held)), without
    /// touching it.
    pub(crate) fn read_held<R>(&self, hash: u64, slot: u32, now: Now, f: impl FnOnce(&Row<'_>) -> R) -> Option<R> {
        let mut shard = self.shard(hash);
        if !shard.in_use(slot) {
            return None;
        }
        let (_, cells) = shard.entry_mut(slot, self.layout.width);
        Some(f(&Row { layout: &self.layout, cells, now }))
    }

    /// Entries now, expired ones not yet removed included.
    pub(crate) fn used(&self) -> usize {
        // Kept equal to the shards' counts by every insert and removal: no shard is locked.
        self.len.load(Ordering::Relaxed)
    }

    /// `n` entries went.
    fn removed(&self, n: usize) -> usize {
        self.len.fetch_sub(n, Ordering::Relaxed);
        n
    }

    /// Removes the expired entries (a periodic sweep: lookups remove only a few at a time).
    pub(crate) fn purge(&self, now: Now) -> usize {
        let hash_of = |k: &Key| self.hash(k);
        let width = self.layout.width;
        let purged = self
            .shards
            .iter()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).purge(now.secs(), usize::MAX, width, &hash_of))
            .sum();
        self.removed(purged)
    }

    /// Bytes the table's storage holds now.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.shards.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).allocated()).sum()
    }

    /// Each live entry, shard by shard, most recently used first:
    /// `f(id, key, use, expires in ms, row)`, the id being the shard's number and the slot's.
    pub(crate) fn for_each(&self, now: Now, mut f: impl FnMut(u64, &Key, u32, u64, &Row<'_>)) {
        let width = self.layout.width;
        for (i, shard) in self.shards.iter().enumerate() {
            let mut shard = shard.lock().unwrap_or_else(PoisonError::into_inner);
            let slots: Vec<u32> = shard.slots().collect();
            for slot in slots {
                let (expire, refs) = (shard.metas[slot as usize].expire, shard.metas[slot as usize].refs);
                if expire < now.secs() && refs == 0 {
                    continue;
                }
                let expires_ms = (u64::from(expire) * 1000 + 999).saturating_sub(now.0);
                let (meta, cells) = shard.entry_mut(slot, width);
                let row = Row { layout: &self.layout, cells, now };
                f((i as u64) << 32 | u64::from(slot), &meta.key, refs, expires_ms, &row);
            }
        }
    }

    /// Removes `key`'s entry; `Err` when it is in use (HAProxy: "Entry currently in use").
    pub(crate) fn remove(&self, key: &Key) -> Result<bool, ()> {
        let hash = self.hash(key);
        let mut shard = self.shard(hash);
        let Some(slot) = shard.find(hash, key) else { return Ok(false) };
        if shard.metas[slot as usize].refs > 0 {
            return Err(());
        }
        shard.remove(slot, self.layout.width, &|k: &Key| self.hash(k));
        self.removed(1);
        Ok(true)
    }

    /// Removes every entry not in use; how many went.
    pub(crate) fn clear(&self) -> usize {
        let hash_of = |k: &Key| self.hash(k);
        let width = self.layout.width;
        let cleared =
            self.shards.iter().map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clear(width, &hash_of)).sum();
        self.removed(cleared)
    }
}
