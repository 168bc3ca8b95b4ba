//! What a connection or a request tracks: a held key ([`Held`]), and a request's three slots
//! ([`Tracked`], HAProxy's `sc0`–`sc2`) that the rules' `track` fills and their conditions read.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use lb_config::{DataType, Mark, SLOTS};

use super::{Key, Now, Reason, Row, Table, Verdict};

/// A key held by a connection or a request: its current values and use count go down when
/// this is dropped.
///
/// Not the key itself: an entry in use is never removed (eviction, expiry, `clear table` pass
/// it over), so while this holds it the entry stays in its slot, found again by the key's hash
/// (its shard) and the slot, without a search or a comparison of keys.
#[derive(Debug)]
pub(crate) struct Held {
    table: Arc<Table>,
    hash: u64,
    slot: u32,
    /// The current value this holder raised (`conn_cur` or `http_req_cur`).
    current: DataType,
    /// Let go already (with the request's answer): dropping does nothing more.
    released: AtomicBool,
}

impl Held {
    /// Tracks a new connection from `key`: `conn_cnt`, `conn_rate`, `conn_cur` go up.
    pub(crate) fn connection(table: &Arc<Table>, key: Key, now: Now) -> Option<Held> {
        Held::start(table, key, now, [DataType::ConnCnt, DataType::ConnRate, DataType::ConnCur], DataType::ConnCur)
    }

    /// Tracks a new request from `key`: `http_req_cnt`, `http_req_rate`, `http_req_cur` go up.
    #[cfg(test)]
    pub(crate) fn request(table: &Arc<Table>, key: Key, now: Now) -> Option<Held> {
        let counted = [DataType::HttpReqCnt, DataType::HttpReqRate, DataType::HttpReqCur];
        Held::start(table, key, now, counted, DataType::HttpReqCur)
    }

    fn start(table: &Arc<Table>, key: Key, now: Now, counted: [DataType; 3], current: DataType) -> Option<Held> {
        let hash = table.hash(&key);
        let ((), slot) = table.update_at(&key, hash, now, |row, meta| {
            for data in counted {
                row.add(data, 1);
            }
            meta.refs += 1;
        })?;
        Some(Held::new(table, hash, slot, current))
    }

    fn new(table: &Arc<Table>, hash: u64, slot: u32, current: DataType) -> Held {
        Held { table: table.clone(), hash, slot, current, released: AtomicBool::new(false) }
    }

    /// Runs `f` on the held entry (it is there: an entry in use is never removed).
    pub(crate) fn update<R>(&self, now: Now, f: impl FnOnce(&mut Row<'_>) -> R) -> Option<R> {
        self.table.update_held(self.hash, self.slot, now, |row, _| f(row))
    }

    fn read<R>(&self, now: Now, f: impl FnOnce(&Row<'_>) -> R) -> Option<R> {
        self.table.read_held(self.hash, self.slot, now, f)
    }

    /// A request's answer, its status class and bytes counted; the entry is let go at the same
    /// time (one visit instead of two).
    pub(crate) fn answered(&self, now: Now, status: u16, bytes_in: u64, bytes_out: u64) {
        if self.released.swap(true, Ordering::Relaxed) {
            return;
        }
        let current = self.current;
        self.table.update_held(self.hash, self.slot, now, |row, meta| {
            count_answer(row, status, bytes_in, bytes_out);
            row.sub(current);
            meta.refs = meta.refs.saturating_sub(1);
        });
    }
}

/// What an answer adds to an entry: a 4xx to `http_err_*`, a 5xx to `http_fail_*`, bytes.
pub(crate) fn count_answer(row: &mut Row<'_>, status: u16, bytes_in: u64, bytes_out: u64) {
    match status {
        400..=499 => {
            row.add(DataType::HttpErrCnt, 1);
            row.add(DataType::HttpErrRate, 1);
        }
        500..=599 => {
            row.add(DataType::HttpFailCnt, 1);
            row.add(DataType::HttpFailRate, 1);
        }
        _ => {}
    }
    for (n, cnt, rate) in [
        (bytes_in, DataType::BytesInCnt, DataType::BytesInRate),
        (bytes_out, DataType::BytesOutCnt, DataType::BytesOutRate),
    ] {
        if n > 0 {
            row.add(cnt, n);
            row.add(rate, n);
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        if self.released.load(Ordering::Relaxed) {
            return;
        }
        let mut shard = self.table.shard(self.hash);
        if shard.in_use(self.slot) {
            let (meta, cells) = shard.entry_mut(self.slot, self.table.layout.width);
            meta.refs = meta.refs.saturating_sub(1);
            Row { layout: &self.table.layout, cells, now: Now(0) }.sub(self.current);
        }
    }
}

/// A request's tracked entries, by slot; what the `limit_req` buckets said.
#[derive(Debug, Default)]
pub(crate) struct Tracked {
    slots: [Option<Held>; SLOTS as usize],
    /// Milliseconds the request is to wait (a bucket's delay without `nodelay`).
    pub(crate) delay_ms: u64,
    /// Slots the rule that refused the request read (a bit each), for the denials' counts.
    pub(crate) read_by_refusal: u8,
    /// When the first key was tracked: the request's figures are read as of then (a clock
    /// reading saved per condition; the rules run within microseconds).
    now: Now,
}

/// What tracking a key said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TrackOutcome {
    /// Counted (or the slot was taken already, or the table had no room: not counted).
    Counted,
    /// Past the table's `limit_req` burst: refuse, 429, retry after this many milliseconds.
    Refused { retry_after_ms: u64 },
}

impl Tracked {
    pub(crate) fn is_empty(&self) -> bool {
        self.slots.iter().all(Option::is_none)
    }

    /// `track`: counts the request in `table` under `key` in `slot`, unless the slot is
    /// tracked already (the first track wins, as HAProxy's); takes from its bucket.
    pub(crate) fn track(&mut self, slot: u8, table: &Arc<Table>, key: Key, now: Now) -> TrackOutcome {
        let Some(place) = self.slots.get_mut(usize::from(slot)) else { return TrackOutcome::Counted };
        if place.is_some() {
            return TrackOutcome::Counted;
        }
        self.now = now;
        let mut verdict = None;
        let counted = [DataType::HttpReqCnt, DataType::HttpReqRate, DataType::HttpReqCur];
        let hash = table.hash(&key);
        let share = table.share();
        let held = table.update_at(&key, hash, now, |row, meta| {
            verdict = row.take(share);
            if matches!(verdict, Some(Verdict::Refuse { .. })) {
                // nginx counts a refused request nowhere; HAProxy's rate counts every request
                // tracked: the rate goes on counting, the bucket does not fill.
                row.add(DataType::HttpReqCnt, 1);
                row.add(DataType::HttpReqRate, 1);
                return false;
            }
            for data in counted {
                row.add(data, 1);
            }
            meta.refs += 1;
            true
        });
        match verdict {
            Some(Verdict::Refuse { retry_after_ms }) => {
                table.denied(Reason::LimitReq);
                return TrackOutcome::Refused { retry_after_ms };
            }
            Some(Verdict::Delay(ms)) => self.delay_ms = self.delay_ms.max(ms),
            Some(Verdict::Pass) | None => {}
        }
        if let Some((true, slot)) = held {
            *place = Some(Held::new(table, hash, slot, DataType::HttpReqCur));
        }
        TrackOutcome::Counted
    }

    /// `track` at accept: counts the connection (`conn_cnt`, `conn_rate`, `conn_cur`) in
    /// `table` under `key`, held until this is dropped; a slot tracked already is left alone.
    pub(crate) fn track_connection(&mut self, slot: u8, table: &Arc<Table>, key: Key, now: Now) {
        let Some(place) = self.slots.get_mut(usize::from(slot)) else { return };
        if place.is_none() {
            self.now = now;
            *place = Held::connection(table, key, now);
        }
    }

    /// A figure of the entry tracked in `slot` (`sc0` …), `None` when untracked or not stored.
    pub(crate) fn read(&self, slot: u8, data: DataType) -> Option<u64> {
        let held = self.slots.get(usize::from(slot))?.as_ref()?;
        held.read(self.now, |row| row.get(data)).flatten()
    }

    /// [`read`](Self::read) as a condition's threshold sees it: a fleet table's figure times
    /// its share (the fleet's figure if the clients spread evenly over the nodes), so that a
    /// threshold reads as the fleet's; a tag (`gpt`) is a value, never scaled.
    pub(crate) fn read_against_limit(&self, slot: u8, data: DataType) -> Option<u64> {
        let held = self.slots.get(usize::from(slot))?.as_ref()?;
        let value = held.read(self.now, |row| row.get(data)).flatten()?;
        Some(match data {
            DataType::Gpt(_) => value,
            _ => value.saturating_mul(u64::from(held.table.share())),
        })
    }

    /// `set_gpt` / `inc_gpc` on the entry tracked in the mark's slot.
    pub(crate) fn mark(&self, mark: &Mark, set: bool, now: Now) {
        let Some(held) = self.slots.get(usize::from(mark.slot)).and_then(Option::as_ref) else { return };
        held.update(now, |row| {
            if set {
                row.set(DataType::Gpt(mark.index), u64::from(mark.value));
            } else {
                row.add(DataType::Gpc(mark.index), 1);
            }
        });
    }

    /// The request was refused by a rule that read `slots` (a bit each): counted per table.
    pub(crate) fn refused(&self, slots: u8, reason: Reason) {
        for (i, held) in self.slots.iter().enumerate() {
            if slots & (1 << i) != 0 {
                if let Some(held) = held {
                    held.table.denied(reason);
                }
            }
        }
    }

    /// When a refused client may come back: the longest period of the rates its entries
    /// store (after a whole period without requests a sliding rate is back at zero), at
    /// least a second.
    pub(crate) fn retry_after_secs(&self) -> u64 {
        let longest = self
            .slots
            .iter()
            .flatten()
            .flat_map(|h| h.table.config.store.iter().filter_map(|s| s.period))
            .max()
            .unwrap_or_default();
        longest.as_secs_f64().ceil().max(1.0) as u64
    }

    /// The request's answer, counted in each entry it tracks, as of `now` (the log's reading
    /// of the clock: one reading serves both).
    pub(crate) fn answered(&self, now: Now, status: u16, bytes_in: u64, bytes_out: u64) {
        for held in self.slots.iter().flatten() {
            held.answered(now, status, bytes_in, bytes_out);
        }
    }
}
