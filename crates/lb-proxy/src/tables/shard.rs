//! One shard of a table: at most `cap` entries in a slab, found through a hash index of slab
//! numbers, chained from most to least recently touched.
//!
//! Compact on purpose (a million entries must fit in 128 MiB): the index holds 4-byte slab
//! numbers, an entry's bookkeeping is its key, two links, its expiry and its use count, and
//! its data are `width` 32-bit cells in one vector for the whole shard.
//!
//! Because every touch moves an entry to the front and pushes its expiry to `now + expire`,
//! the chain is also in expiry order: expired entries are found from the back, and the back is
//! what gets evicted when the shard is full. An entry in use (a connection or a request holds
//! it) is never removed; it is moved to the front instead.

use hashbrown::HashTable;

use super::key::Key;

/// "No entry" in a link.
const END: u32 = u32::MAX;

/// Entries looked at from the back for one that may go, before giving up on a full shard.
const EVICTION_TRIES: usize = 8;

#[derive(Debug)]
pub(crate) struct Meta {
    pub(crate) key: Key,
    prev: u32,
    next: u32,
    /// Seconds since the epoch of [`Now`](super::Now) after which the entry is gone.
    pub(crate) expire: u32,
    /// Connections and requests holding it (HAProxy's `use`).
    pub(crate) refs: u32,
}

#[derive(Debug, Default)]
pub(crate) struct Shard {
    index: HashTable<u32>,
    pub(crate) metas: Vec<Meta>,
    cells: Vec<u32>,
    free: Vec<u32>,
    head: u32,
    tail: u32,
    len: usize,
}

/// What [`Shard::find_or_insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Found {
    Existing(u32),
    /// A new entry (`evicted`: an older one made room for it; `purged` expired ones went).
    New {
        slot: u32,
        evicted: bool,
        purged: usize,
    },
}

impl Shard {
    pub(crate) fn new() -> Shard {
        Shard { head: END, tail: END, ..Shard::default() }
    }

    /// Whether `slot` holds an entry in use (which nothing removes: its holder's slot).
    pub(crate) fn in_use(&self, slot: u32) -> bool {
        self.metas.get(slot as usize).is_some_and(|m| m.refs > 0)
    }

    pub(crate) fn find(&self, hash: u64, key: &Key) -> Option<u32> {
        self.index.find(hash, |&slot| self.metas[slot as usize].key == *key).copied()
    }

    /// The entry for `key`, created (with zero data) when absent or expired; `None` when room
    /// was needed and the shard is full of entries in use. `full(len)` says whether a new
    /// entry needs room made first (`cap` entries at most in any case); `hash_of` hashes a key
    /// as `hash` was.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn find_or_insert(
        &mut self,
        hash: u64,
        key: &Key,
        width: usize,
        cap: usize,
        now_secs: u32,
        full: impl FnOnce(usize) -> bool,
        hash_of: &impl Fn(&Key) -> u64,
    ) -> Option<Found> {
        if let Some(slot) = self.find(hash, key) {
            let meta = &self.metas[slot as usize];
            if meta.expire < now_secs && meta.refs == 0 {
                self.cells_mut(slot, width).fill(0);
            }
            return Some(Found::Existing(slot));
        }
        // Two expired entries go for each one made: the back never grows stale.
        let purged = self.purge(now_secs, 2, width, hash_of);
        let mut evicted = false;
        if self.len >= cap || full(self.len) {
            evicted = self.evict_one(width, hash_of);
            // The table is full but this shard has nothing to give: it may still take one,
            // up to its own bound.
            if !evicted && self.len >= cap {
                return None;
            }
        }
        let slot = match self.free.pop() {
            Some(slot) => {
                self.metas[slot as usize] = Meta { key: key.clone(), prev: END, next: END, expire: 0, refs: 0 };
                self.cells_mut(slot, width).fill(0);
                slot
            }
            None => {
                let slot = u32::try_from(self.metas.len()).ok()?;
                if self.metas.len() == self.metas.capacity() {
                    // Grow towards the cap, never past it.
                    let more = self.metas.len().max(16).min(cap.saturating_sub(self.metas.len()).max(1));
                    self.metas.reserve_exact(more);
                    self.cells.reserve_exact(more * width);
                }
                self.metas.push(Meta { key: key.clone(), prev: END, next: END, expire: 0, refs: 0 });
                self.cells.resize(self.cells.len() + width, 0);
                slot
            }
        };
        let metas = &self.metas;
        self.index.insert_unique(hash, slot, |&s| hash_of(&metas[s as usize].key));
        self.push_front(slot);
        self.len += 1;
        Some(Found::New { slot, evicted, purged })
    }

    pub(crate) fn cells_mut(&mut self, slot: u32, width: usize) -> &mut [u32] {
        let at = slot as usize * width;
        &mut self.cells[at..at + width]
    }

    pub(crate) fn cells(&self, slot: u32, width: usize) -> &[u32] {
        let at = slot as usize * width;
        &self.cells[at..at + width]
    }

    /// An entry's bookkeeping and its data, together.
    pub(crate) fn entry_mut(&mut self, slot: u32, width: usize) -> (&mut Meta, &mut [u32]) {
        let at = slot as usize * width;
        (&mut self.metas[slot as usize], &mut self.cells[at..at + width])
    }

    /// Most recently touched now, living `expire_secs` from `now_secs`.
    pub(crate) fn touch(&mut self, slot: u32, now_secs: u32, expire_secs: u32) {
        self.metas[slot as usize].expire = now_secs.saturating_add(expire_secs);
        if self.head != slot {
            self.unlink(slot);
            self.push_front(slot);
        }
    }

    /// Removes up to `budget` expired entries not in use, from the back; how many went.
    pub(crate) fn purge(
        &mut self,
        now_secs: u32,
        budget: usize,
        width: usize,
        hash_of: &impl Fn(&Key) -> u64,
    ) -> usize {
        let mut removed = 0;
        while removed < budget && self.tail != END {
            let slot = self.tail;
            let meta = &self.metas[slot as usize];
            if meta.expire >= now_secs {
                break;
            }
            if meta.refs > 0 {
                // In use past its expiry: it lives on, and no longer hides the others.
                self.touch(slot, now_secs, 0);
                continue;
            }
            self.remove(slot, width, hash_of);
            removed += 1;
        }
        removed
    }

    /// Makes room by removing the least recently touched entry not in use.
    fn evict_one(&mut self, width: usize, hash_of: &impl Fn(&Key) -> u64) -> bool {
        for _ in 0..EVICTION_TRIES.min(self.len) {
            let slot = self.tail;
            if self.metas[slot as usize].refs == 0 {
                self.remove(slot, width, hash_of);
                return true;
            }
            let expire = self.metas[slot as usize].expire;
            self.unlink(slot);
            self.push_front(slot);
            self.metas[slot as usize].expire = expire;
        }
        false
    }

    /// Removes the entry in `slot` (its key's memory is given back at once).
    pub(crate) fn remove(&mut self, slot: u32, width: usize, hash_of: &impl Fn(&Key) -> u64) {
        let hash = hash_of(&self.metas[slot as usize].key);
        if let Ok(entry) = self.index.find_entry(hash, |&s| s == slot) {
            entry.remove();
        }
        self.unlink(slot);
        self.metas[slot as usize].key = Key::Int(0);
        self.cells_mut(slot, width).fill(0);
        self.free.push(slot);
        self.len -= 1;
    }

    /// Every entry from the most recently touched on.
    pub(crate) fn slots(&self) -> impl Iterator<Item = u32> + '_ {
        std::iter::successors((self.head != END).then_some(self.head), |&slot| {
            let next = self.metas[slot as usize].next;
            (next != END).then_some(next)
        })
    }

    /// Removes every entry not in use; how many went.
    pub(crate) fn clear(&mut self, width: usize, hash_of: &impl Fn(&Key) -> u64) -> usize {
        let idle: Vec<u32> = self.slots().filter(|&s| self.metas[s as usize].refs == 0).collect();
        for &slot in &idle {
            self.remove(slot, width, hash_of);
        }
        idle.len()
    }

    /// Bytes held, for the memory figures.
    #[cfg(test)]
    pub(crate) fn allocated(&self) -> usize {
        self.index.capacity() * (std::mem::size_of::<u32>() + 1)
            + self.metas.capacity() * std::mem::size_of::<Meta>()
            + self.cells.capacity() * std::mem::size_of::<u32>()
            + self.free.capacity() * std::mem::size_of::<u32>()
    }

    fn unlink(&mut self, slot: u32) {
        let (prev, next) = {
            let meta = &self.metas[slot as usize];
            (meta.prev, meta.next)
        };
        match prev {
            END => self.head = next,
            p => self.metas[p as usize].next = next,
        }
        match next {
            END => self.tail = prev,
            n => self.metas[n as usize].prev = prev,
        }
        let meta = &mut self.metas[slot as usize];
        meta.prev = END;
        meta.next = END;
    }

    fn push_front(&mut self, slot: u32) {
        let old = self.head;
        {
            let meta = &mut self.metas[slot as usize];
            meta.prev = END;
            meta.next = old;
        }
        match old {
            END => self.tail = slot,
            o => self.metas[o as usize].prev = slot,
        }
        self.head = slot;
    }
}
