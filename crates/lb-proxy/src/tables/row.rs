//! One entry's data: where each stored data type sits among the entry's 32-bit cells
//! ([`Layout`]), and what reading and updating each kind means ([`Row`]).
//!
//! - a count (`http_req_cnt`) is one cell, wrapping as HAProxy's do; a byte count two;
//! - a current value (`conn_cur`, `http_req_cur`) one cell, never below 0;
//! - a rate over a period (`http_req_rate(10s)`) is HAProxy's `freq_ctr`: the number of the
//!   current period, its count and the previous period's count. Read, it is the current count
//!   plus the previous one weighted by the part of the period still to run: a sliding window
//!   estimated from two fixed ones, exact when events are spread evenly;
//! - `gpc*` and `gpt*` one cell each;
//! - the bucket (nginx's `limit_req`) two cells: the excess in thousandths of a request and
//!   the time of the last request let through.

use lb_config::{Bucket, DataType, Store, Table};

/// Milliseconds since 2025-01-01 UTC: cells keep times as 32-bit offsets from it (period
/// numbers, expiry seconds), the same in every worker, so that entries keep their meaning
/// when handed to the next one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) struct Now(pub(crate) u64);

const EPOCH_UNIX_MS: u64 = 1_735_689_600_000;

impl Now {
    pub(crate) fn read() -> Now {
        Now::at(std::time::SystemTime::now())
    }

    /// The time `wall` read (a caller that has read the clock already).
    pub(crate) fn at(wall: std::time::SystemTime) -> Now {
        let unix = wall.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| {
            // Seconds and milliseconds apart: `as_millis` is 128-bit arithmetic.
            d.as_secs().saturating_mul(1000).saturating_add(u64::from(d.subsec_millis()))
        });
        Now(unix.saturating_sub(EPOCH_UNIX_MS))
    }

    pub(crate) fn secs(self) -> u32 {
        u32::try_from(self.0 / 1000).unwrap_or(u32::MAX)
    }

    /// The time in milliseconds, wrapping every 49 days (only differences are read).
    fn wrapping_ms(self) -> u32 {
        self.0 as u32
    }
}

const NONE: u16 = u16::MAX;

/// Where each data type of a table sits in an entry's cells.
#[derive(Debug, Clone)]
pub(crate) struct Layout {
    offsets: [u16; DataType::COUNT],
    /// Each rate's period in milliseconds (0 for the others).
    periods: [u32; DataType::COUNT],
    bucket: Option<(u16, Bucket)>,
    /// Cells per entry.
    pub(crate) width: usize,
}

impl Layout {
    pub(crate) fn new(table: &Table) -> Layout {
        let mut layout =
            Layout { offsets: [NONE; DataType::COUNT], periods: [0; DataType::COUNT], bucket: None, width: 0 };
        for store in &table.store {
            let i = store.data.index();
            if layout.offsets[i] != NONE {
                continue;
            }
            layout.offsets[i] = layout.width as u16;
            layout.periods[i] = store.period.map_or(0, |p| u32::try_from(p.as_millis()).unwrap_or(u32::MAX).max(1));
            layout.width += cells_of(store);
        }
        if let Some(bucket) = table.bucket {
            layout.bucket = Some((layout.width as u16, bucket));
            layout.width += 2;
        }
        layout
    }

    pub(crate) fn stores(&self, data: DataType) -> bool {
        self.offsets[data.index()] != NONE
    }

    /// What each cell holds, for a hand-over to carry it.
    pub(crate) fn cells(&self) -> Vec<Cell> {
        let mut kinds = vec![Cell::Plain; self.width];
        for data in DataType::all() {
            let Some(at) = self.offset(data) else { continue };
            if matches!(data, DataType::ConnCur | DataType::HttpReqCur) {
                kinds[at] = Cell::Current;
            } else if data.is_rate() {
                kinds[at] = Cell::Tick { period: self.period_ms(data) };
            }
        }
        if let Some((at, _)) = self.bucket {
            kinds[usize::from(at) + 1] = Cell::LastMs;
        }
        kinds
    }

    /// A rate's period in milliseconds (1 for what is not a rate).
    pub(crate) fn period_ms(&self, data: DataType) -> u32 {
        self.periods[data.index()].max(1)
    }

    /// The data types stored.
    pub(crate) fn stored(&self) -> impl Iterator<Item = DataType> + '_ {
        DataType::all().filter(|d| self.stores(*d))
    }

    fn offset(&self, data: DataType) -> Option<usize> {
        let offset = self.offsets[data.index()];
        (offset != NONE).then_some(usize::from(offset))
    }

    /// What identifies the layout: entries handed over between two tables of the same name
    /// are taken only when it is the same (the key type and what is stored, not size or expiry).
    pub(crate) fn signature(table: &Table) -> String {
        let store: Vec<String> = table.store.iter().map(ToString::to_string).collect();
        // Whether there is a bucket, not its figures: a changed rate keeps the same cells.
        let bucket = if table.bucket.is_some() { "bucket" } else { "None" };
        format!("{:?};{};{bucket}", table.key, store.join(","))
    }
}

fn cells_of(store: &Store) -> usize {
    let wide = if store.data.is_bytes() { 2 } else { 1 };
    if store.data.is_rate() {
        1 + 2 * wide
    } else {
        wide
    }
}

/// What one 32-bit cell of an entry holds, as a hand-over sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Cell {
    /// A value carried as it is.
    Plain,
    /// Connections or requests in progress: the worker that has them keeps them.
    Current,
    /// A rate's period number: carried relative to the time of the hand-over (small).
    Tick { period: u32 },
    /// The bucket's last request (milliseconds, wrapping): relative, too.
    LastMs,
}

/// nginx's answer for one request against the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Within the rate, or within the burst with `nodelay`/`delay`.
    Pass,
    /// Within the burst: let through after this many milliseconds.
    Delay(u64),
    /// Past the burst: refused; a request would pass again after this many milliseconds.
    Refuse { retry_after_ms: u64 },
}

/// One entry's cells, read and updated at `now`.
#[derive(Debug)]
pub(crate) struct Row<'a> {
    pub(crate) layout: &'a Layout,
    pub(crate) cells: &'a mut [u32],
    pub(crate) now: Now,
}

impl Row<'_> {
    fn at(&self, data: DataType) -> Option<usize> {
        let offset = self.layout.offsets[data.index()];
        (offset != NONE).then_some(usize::from(offset))
    }

    fn period_number(&self, data: DataType) -> u32 {
        let period = u64::from(self.layout.periods[data.index()].max(1));
        (self.now.0 / period) as u32
    }

    /// The value `show table` prints and conditions compare; `None` when not stored.
    pub(crate) fn get(&self, data: DataType) -> Option<u64> {
        let at = self.at(data)?;
        let wide = data.is_bytes();
        if !data.is_rate() {
            return Some(read(self.cells, at, wide));
        }
        let period = u64::from(self.layout.periods[data.index()].max(1));
        let (stored, now_number) = (self.cells[at], self.period_number(data));
        let step = if wide { 2 } else { 1 };
        let (current, previous) = match now_number.wrapping_sub(stored) {
            0 => (read(self.cells, at + 1, wide), read(self.cells, at + 1 + step, wide)),
            1 => (0, read(self.cells, at + 1, wide)),
            _ => (0, 0),
        };
        let remaining = period - self.now.0 % period;
        // A 32-bit count times a remainder below a 32-bit period fits in 64 bits (a call to
        // 128-bit division saved per read); only a huge count of bytes needs 128.
        let weighted = match previous.checked_mul(remaining) {
            Some(product) => product / period,
            None => (u128::from(previous) * u128::from(remaining) / u128::from(period)) as u64,
        };
        Some(current + weighted)
    }

    /// Counts `n` events: a count or a rate goes up by `n`, a current value or a counter too.
    pub(crate) fn add(&mut self, data: DataType, n: u64) {
        let Some(at) = self.at(data) else { return };
        let wide = data.is_bytes();
        if !data.is_rate() {
            let value = read(self.cells, at, wide).wrapping_add(n);
            write(self.cells, at, wide, value);
            return;
        }
        let now_number = self.period_number(data);
        let step = if wide { 2 } else { 1 };
        match now_number.wrapping_sub(self.cells[at]) {
            0 => {}
            gap => {
                let previous = if gap == 1 { read(self.cells, at + 1, wide) } else { 0 };
                write(self.cells, at + 1 + step, wide, previous);
                write(self.cells, at + 1, wide, 0);
                self.cells[at] = now_number;
            }
        }
        let current = read(self.cells, at + 1, wide).saturating_add(n);
        write(self.cells, at + 1, wide, current);
    }

    /// A current value goes down by one (a connection or a request ended).
    pub(crate) fn sub(&mut self, data: DataType) {
        if let Some(at) = self.at(data) {
            self.cells[at] = self.cells[at].saturating_sub(1);
        }
    }

    /// `set table … data.gpc0 5`, a tag set by an action: a count, current value or tag takes
    /// the value; a rate's current period does (the previous one is forgotten).
    pub(crate) fn set(&mut self, data: DataType, value: u64) {
        let Some(at) = self.at(data) else { return };
        let wide = data.is_bytes();
        if data.is_rate() {
            let step = if wide { 2 } else { 1 };
            self.cells[at] = self.period_number(data);
            write(self.cells, at + 1, wide, value);
            write(self.cells, at + 1 + step, wide, 0);
        } else {
            write(self.cells, at, wide, value);
        }
    }

    /// A rate's raw parts: its period number, current and previous counts.
    pub(crate) fn rate_parts(&self, data: DataType) -> Option<(u32, u64, u64)> {
        let at = self.at(data).filter(|_| data.is_rate())?;
        let wide = data.is_bytes();
        let step = if wide { 2 } else { 1 };
        Some((self.cells[at], read(self.cells, at + 1, wide), read(self.cells, at + 1 + step, wide)))
    }

    /// Adds what another worker counted in a rate's period `tick` (and the one before),
    /// aligned with this entry's periods; counts older than the previous period are dropped.
    pub(crate) fn merge_rate(&mut self, data: DataType, tick: u32, current: u64, previous: u64) {
        let Some(at) = self.at(data).filter(|_| data.is_rate()) else { return };
        let wide = data.is_bytes();
        let step = if wide { 2 } else { 1 };
        let mine = self.cells[at];
        // Bring this entry to the later of the two periods first.
        if (tick.wrapping_sub(mine) as i32) > 0 {
            let kept = if tick.wrapping_sub(mine) == 1 { read(self.cells, at + 1, wide) } else { 0 };
            write(self.cells, at + 1 + step, wide, kept);
            write(self.cells, at + 1, wide, 0);
            self.cells[at] = tick;
        }
        let (cur_add, prev_add) = match self.cells[at].wrapping_sub(tick) {
            0 => (current, previous),
            1 => (0, current),
            _ => (0, 0),
        };
        let cur = read(self.cells, at + 1, wide).saturating_add(cur_add);
        write(self.cells, at + 1, wide, cur);
        let prev = read(self.cells, at + 1 + step, wide).saturating_add(prev_add);
        write(self.cells, at + 1 + step, wide, prev);
    }

    /// nginx's `limit_req` for one request: the excess drains at the rate, a request adds one;
    /// past the burst it is refused and the bucket is left as it was. `share` divides the rate,
    /// the burst and the delay (a fleet table's share of the fleet's limit; 1 otherwise).
    pub(crate) fn take(&mut self, share: u32) -> Option<Verdict> {
        let (offset, bucket) = self.layout.bucket?;
        let at = usize::from(offset);
        let share = u64::from(share.max(1));
        // A rate divided by the share: the same requests over a period `share` times longer.
        let per_ms = u64::try_from(bucket.per.as_millis()).unwrap_or(u64::MAX).max(1).saturating_mul(share);
        let rate = u64::from(bucket.rate).max(1);
        let (excess, last) = (u64::from(self.cells[at]), self.cells[at + 1]);
        let elapsed = u64::from(self.now.wrapping_ms().wrapping_sub(last));
        let drained = rate.saturating_mul(elapsed).saturating_mul(1000) / per_ms;
        // nginx: the excess drains at the rate and a request adds one, never below zero; a new
        // entry starts at zero (its first request is within the rate).
        let fresh = excess == 0 && last == 0;
        let excess = if fresh { 0 } else { (excess + 1000).saturating_sub(drained) };
        let burst = u64::from(bucket.burst) * 1000 / share;
        if excess > burst {
            // Time until the excess has drained enough for one more request to fit.
            let over = excess - burst;
            let retry_after_ms = over.saturating_mul(per_ms).div_ceil(rate * 1000);
            return Some(Verdict::Refuse { retry_after_ms });
        }
        self.cells[at] = u32::try_from(excess).unwrap_or(u32::MAX);
        self.cells[at + 1] = self.now.wrapping_ms();
        let free = if bucket.nodelay { burst } else { u64::from(bucket.delay) * 1000 / share };
        if excess <= free {
            return Some(Verdict::Pass);
        }
        Some(Verdict::Delay((excess - free).saturating_mul(per_ms) / (rate * 1000)))
    }

    /// Takes another worker's bucket (`cells`, laid out as this row's) when this one is
    /// untouched.
    pub(crate) fn take_bucket_from(&mut self, cells: &[u32]) {
        let Some((offset, _)) = self.layout.bucket else { return };
        let at = usize::from(offset);
        if self.cells[at] == 0 && self.cells[at + 1] == 0 {
            self.cells[at..at + 2].copy_from_slice(&cells[at..at + 2]);
        }
    }

    /// The bucket's excess in requests (what `show table` prints as `limit_req`), draining at
    /// the rate divided by `share`.
    pub(crate) fn excess(&self, share: u32) -> Option<u64> {
        let (offset, bucket) = self.layout.bucket?;
        let at = usize::from(offset);
        let per_ms =
            u64::try_from(bucket.per.as_millis()).unwrap_or(u64::MAX).max(1).saturating_mul(u64::from(share.max(1)));
        let elapsed = u64::from(self.now.wrapping_ms().wrapping_sub(self.cells[at + 1]));
        let drained = u64::from(bucket.rate).saturating_mul(elapsed).saturating_mul(1000) / per_ms;
        Some(u64::from(self.cells[at]).saturating_sub(drained).div_ceil(1000))
    }
}

fn read(cells: &[u32], at: usize, wide: bool) -> u64 {
    if wide {
        u64::from(cells[at]) | u64::from(cells[at + 1]) << 32
    } else {
        u64::from(cells[at])
    }
}

fn write(cells: &mut [u32], at: usize, wide: bool, value: u64) {
    if wide {
        cells[at] = value as u32;
        cells[at + 1] = (value >> 32) as u32;
    } else {
        cells[at] = u32::try_from(value).unwrap_or(u32::MAX);
    }
}
