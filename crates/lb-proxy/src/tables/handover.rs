//! Tables across a reload, through lb-supervisor's counters channel (the one that carries the
//! traffic counters): no `peers` section, nothing to configure.
//!
//! 1. When the new worker is ready, the old one hands it every entry ([`export`]): keys, expiry,
//!    counts and rates as they are at that instant. The new worker starts from them
//!    ([`import`]); a table whose key type or stored data changed starts empty.
//! 2. From then on each request is counted by the worker that serves it, once: the new worker
//!    counts what it accepts, the old one what still comes on its open connections.
//! 3. When the old worker has drained, it hands over what it counted after step 1 ([`late`]:
//!    the differences, entry by entry), and the new worker adds them.
//!
//! So no request is counted twice and none is lost. What is in progress (`conn_cur`,
//! `http_req_cur`) stays with the worker that has it: during the drain each worker counts
//! its own open connections.
//!
//! The hand-over is binary (base64 in the channel's JSON): per entry its key, then each cell
//! as a variable-length integer, times relative to the hand-over's instant, so that a
//! million IPv4 entries with three counters take 20 MiB of base64 (the million-entry test in
//! `tests` prints it). At most [`BUDGET`] bytes are handed over: past it, each shard's least
//! recently used entries stay behind.

use std::collections::HashMap;

use lb_config::DataType;

use super::row::Cell;
use super::{Key, Layout, Now, Row, Table, Tables};

/// The most bytes (before base64) the tables may take in one hand-over: the channel carries
/// messages of at most 64 MiB.
const BUDGET: usize = 40 << 20;

pub(super) const MAGIC: &[u8; 4] = b"LBT1";
pub(super) const FULL: u8 = 0;
const DELTA: u8 = 1;

/// Every table's entries, for the next worker; kept to tell later what was counted after.
pub(crate) fn export(tables: &Tables) -> String {
    let now = Now::read();
    let per_table = BUDGET / tables.iter().count().max(1);
    let mut out = header(now);
    varint(&mut out, tables.iter().count() as u64);
    let mut entries = Vec::new();
    for table in tables.iter() {
        table_header(&mut out, table, FULL);
        entries.clear();
        let n = table.export_entries(now, per_table, &mut entries);
        varint(&mut out, n as u64);
        out.extend_from_slice(&entries);
    }
    let text = base64(&out);
    *tables.handed.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(out);
    text
}

/// What was counted since [`export`], entry by entry; empty when nothing was handed over.
pub(crate) fn late(tables: &Tables) -> String {
    let handed = tables.handed.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
    let Some(handed) = handed else { return String::new() };
    let before = parse(&handed).unwrap_or_default();
    let now = Now::read();
    let mut out = header(now);
    varint(&mut out, tables.iter().count() as u64);
    // One buffer for every entry's bytes and one for the cells it had: nothing allocated per entry.
    let (mut entries, mut old) = (Vec::new(), Vec::new());
    for table in tables.iter() {
        table_header(&mut out, table, DELTA);
        let then: HashMap<&Key, &[u32]> = before
            .iter()
            .find(|t| t.name == table.name() && t.signature == Layout::signature(&table.config))
            .map(|t| t.entries.iter().enumerate().map(|(i, (k, _))| (k, t.cells_of(i))).collect())
            .unwrap_or_default();
        entries.clear();
        let mut n = 0u64;
        table.for_each(now, |_, key, _, _, row| {
            let start = entries.len();
            key.encode(&mut entries);
            old.clear();
            match then.get(key) {
                Some(cells) => old.extend_from_slice(cells),
                None => old.resize(row.layout.width, 0),
            }
            let before = Row { layout: row.layout, cells: &mut old, now };
            if delta(&mut entries, row, &before) {
                n += 1;
            } else {
                entries.truncate(start);
            }
        });
        varint(&mut out, n);
        out.extend_from_slice(&entries);
    }
    base64(&out)
}

/// Takes a predecessor's [`export`] or [`late`]: entries of tables of the same name and layout.
pub(crate) fn import(tables: &Tables, text: &str) {
    let Some(bytes) = unbase64(text) else {
        tracing::warn!("the previous worker's tables were not understood: starting empty");
        return;
    };
    let Some(parsed) = parse(&bytes) else {
        tracing::warn!("the previous worker's tables were not understood: starting empty");
        return;
    };
    let now = Now::read();
    for mut handed in parsed {
        let Some(table) = tables.get(&handed.name) else { continue };
        if handed.signature != Layout::signature(&table.config) {
            tracing::warn!(table = handed.name, "table's key type or stored data changed: its entries start empty");
            continue;
        }
        let per = handed.per;
        for ((key, expire), cells) in handed.entries.iter().zip(handed.cells.chunks_mut(per.max(1))) {
            if handed.kind == FULL {
                table.restore(key, *expire, cells, now);
            } else {
                table.update(key, now, |row, _| add_delta(row, cells));
            }
        }
    }
}

#[derive(Debug, Default)]
struct Handed {
    name: String,
    signature: String,
    kind: u8,
    /// Key and expiry (seconds since the epoch of [`Now`]) of each entry.
    entries: Vec<(Key, u32)>,
    /// The entries' cells one after the other, `per` each: absolute for a full hand-over, a
    /// delta's values in order for a late one.
    cells: Vec<u32>,
    per: usize,
}

impl Handed {
    fn cells_of(&self, i: usize) -> &[u32] {
        self.cells.get(i * self.per..(i + 1) * self.per).unwrap_or_default()
    }
}

fn header(now: Now) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&now.0.to_le_bytes());
    out
}

pub(super) fn table_header(out: &mut Vec<u8>, table: &Table, kind: u8) {
    for text in [table.name().to_owned(), Layout::signature(&table.config)] {
        varint(out, text.len() as u64);
        out.extend_from_slice(text.as_bytes());
    }
    out.push(kind);
}

impl Table {
    /// Each shard's entries, oldest first, encoded into `out` (the most recent ones when they do
    /// not all fit in `budget` bytes); how many.
    fn export_entries(&self, now: Now, budget: usize, out: &mut Vec<u8>) -> usize {
        let kinds = self.layout.cells();
        let per_shard = budget / self.shards.len();
        // A shard's entries are met newest first: written into one buffer, handed oldest first.
        let (mut newest_first, mut ends) = (Vec::new(), Vec::new());
        let mut count = 0;
        for shard in self.shards.iter() {
            let shard = shard.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            newest_first.clear();
            ends.clear();
            for slot in shard.slots() {
                let meta = &shard.metas[slot as usize];
                if meta.expire < now.secs() && meta.refs == 0 {
                    continue;
                }
                let e = &mut newest_first;
                meta.key.encode(e);
                varint(e, u64::from(meta.expire.saturating_sub(now.secs())));
                let cells = shard.cells(slot, self.layout.width);
                for (cell, kind) in cells.iter().zip(&kinds) {
                    match kind {
                        Cell::Plain => varint(e, u64::from(*cell)),
                        Cell::Current => {}
                        Cell::Tick { period } => {
                            varint(e, u64::from(((now.0 / u64::from(*period)) as u32).wrapping_sub(*cell)))
                        }
                        Cell::LastMs => varint(e, u64::from((now.0 as u32).wrapping_sub(*cell))),
                    }
                }
                if newest_first.len() > per_shard {
                    newest_first.truncate(ends.last().copied().unwrap_or(0));
                    break;
                }
                ends.push(newest_first.len());
            }
            for i in (0..ends.len()).rev() {
                let start = if i == 0 { 0 } else { ends[i - 1] };
                out.extend_from_slice(&newest_first[start..ends[i]]);
            }
            count += ends.len();
        }
        count
    }

    /// An entry handed over, added to what this worker counted already for the key (it serves
    /// from the moment it is ready, before the hand-over reaches it): counts and rates add up,
    /// a tag or a bucket this worker has not touched is taken. Taking it is a touch: it lives
    /// this table's `expire` from now (not longer: an old worker's longer `expire` is not
    /// this configuration's). One visit of the entry, and `cells` read where they are.
    fn restore(&self, key: &Key, expire: u32, cells: &mut [u32], now: Now) {
        if expire < now.secs() {
            return;
        }
        self.update(key, now, |row, _| {
            let handed = Row { layout: row.layout, cells, now };
            let layout = row.layout;
            for data in layout.stored() {
                match data {
                    DataType::ConnCur | DataType::HttpReqCur => {}
                    DataType::Gpt(_) if row.get(data) == Some(0) => row.set(data, handed.get(data).unwrap_or(0)),
                    DataType::Gpt(_) => {}
                    d if d.is_rate() => {
                        let (tick, cur, prev) = handed.rate_parts(d).unwrap_or_default();
                        row.merge_rate(d, tick, cur, prev);
                    }
                    d => row.add(d, handed.get(d).unwrap_or(0)),
                }
            }
            row.take_bucket_from(handed.cells);
        });
    }
}

/// Writes what `now` counted since `before`, data type by data type; false when nothing.
fn delta(out: &mut Vec<u8>, now: &Row<'_>, before: &Row<'_>) -> bool {
    let start = out.len();
    varint(out, 0); // expiry: a late count keeps the new worker's
    let mut any = false;
    for data in now.layout.stored() {
        match data {
            DataType::ConnCur | DataType::HttpReqCur => {}
            DataType::Gpt(_) => {
                let (v, was) = (now.get(data).unwrap_or(0), before.get(data).unwrap_or(0));
                // 0: unchanged; else the tag's new value plus one.
                varint(out, if v == was { 0 } else { v + 1 });
                any |= v != was;
            }
            d if d.is_rate() => {
                let (tick, cur, prev) = now.rate_parts(d).unwrap_or_default();
                let (then_tick, then_cur, then_prev) = before.rate_parts(d).unwrap_or_default();
                let (dc, dp) = match tick.wrapping_sub(then_tick) {
                    0 => (cur.saturating_sub(then_cur), prev.saturating_sub(then_prev)),
                    1 => (cur, prev.saturating_sub(then_cur)),
                    _ => (cur, prev),
                };
                let period = u64::from(now.layout.period_ms(d));
                varint(out, u64::from(((now.now.0 / period) as u32).wrapping_sub(tick)));
                varint(out, dc);
                varint(out, dp);
                any |= dc + dp > 0;
            }
            d => {
                let n = now.get(d).unwrap_or(0).saturating_sub(before.get(d).unwrap_or(0));
                varint(out, n);
                any |= n > 0;
            }
        }
    }
    if !any {
        out.truncate(start);
    }
    any
}

/// Adds a late count (`values` as [`delta`] wrote them, times made absolute) to an entry.
fn add_delta(row: &mut Row<'_>, values: &[u32]) {
    let mut v = values.iter().map(|&x| u64::from(x));
    let layout = row.layout;
    for data in layout.stored() {
        match data {
            DataType::ConnCur | DataType::HttpReqCur => {}
            DataType::Gpt(_) => {
                if let Some(n) = v.next().filter(|&n| n > 0) {
                    row.set(data, n - 1);
                }
            }
            d if d.is_rate() => {
                let (tick, cur, prev) = (v.next().unwrap_or(0), v.next().unwrap_or(0), v.next().unwrap_or(0));
                row.merge_rate(d, tick as u32, cur, prev);
            }
            d => row.add(d, v.next().unwrap_or(0)),
        }
    }
}

fn parse(bytes: &[u8]) -> Option<Vec<Handed>> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let (now, mut rest) = rest.split_first_chunk::<8>()?;
    let now = u64::from_le_bytes(*now);
    let count = take_varint(&mut rest)?;
    let mut out = Vec::new();
    for _ in 0..count {
        let name = take_text(&mut rest)?;
        let signature = take_text(&mut rest)?;
        let (&kind, r) = rest.split_first()?;
        rest = r;
        let n = take_varint(&mut rest)?;
        let layout = signature_layout(&name, &signature);
        let (mut entries, mut cells) = (Vec::new(), Vec::new());
        for _ in 0..n {
            let (key, r) = Key::decode(rest)?;
            rest = r;
            let expire = u32::try_from((now / 1000).saturating_add(take_varint(&mut rest)?)).unwrap_or(u32::MAX);
            match (&layout, kind) {
                (Some(kinds), FULL) => full_cells(&mut rest, kinds, now, &mut cells)?,
                (Some(stored), _) => delta_values(&mut rest, stored, now, &mut cells)?,
                // A table this worker does not have: its entries are read past.
                (None, _) => return Some(out),
            }
            entries.push((key, expire));
        }
        // Every entry of a table has as many cells (its layout's).
        let per = cells.len().checked_div(entries.len()).unwrap_or(0);
        out.push(Handed { name, signature, kind, entries, cells, per });
    }
    Some(out)
}

/// What the cells of a table's entries hold, and the data types stored with their periods.
type Shape = (Vec<Cell>, Vec<(DataType, u32)>);

/// The [`Shape`] of a table of this signature, read back from the signature itself.
fn signature_layout(name: &str, signature: &str) -> Option<Shape> {
    let mut parts = signature.splitn(3, ';');
    let (_, store, bucket) = (parts.next()?, parts.next()?, parts.next()?);
    let mut stores = Vec::new();
    for word in store.split(',').filter(|w| !w.is_empty()) {
        let (name, period) = match word.split_once('(') {
            Some((n, p)) => (n, Some(std::time::Duration::from_millis(p.trim_end_matches(')').parse().ok()?))),
            None => (word, None),
        };
        stores.push(lb_config::Store { data: DataType::parse(name)?, period });
    }
    let config = lb_config::Table {
        name: name.to_owned(),
        key: lb_config::KeyType::Integer,
        size: 1,
        expire: std::time::Duration::from_secs(1),
        store: stores,
        bucket: (bucket != "None").then_some(lb_config::Bucket {
            rate: 1,
            per: std::time::Duration::from_secs(1),
            burst: 0,
            nodelay: false,
            delay: 0,
        }),
        fleet: false,
    };
    let layout = Layout::new(&config);
    let stored = layout.stored().map(|d| (d, layout.period_ms(d))).collect();
    Some((layout.cells(), stored))
}

fn full_cells(rest: &mut &[u8], kinds: &Shape, now: u64, out: &mut Vec<u32>) -> Option<()> {
    for kind in &kinds.0 {
        out.push(match kind {
            Cell::Plain => take_varint(rest)? as u32,
            Cell::Current => 0,
            Cell::Tick { period } => ((now / u64::from(*period)) as u32).wrapping_sub(take_varint(rest)? as u32),
            Cell::LastMs => (now as u32).wrapping_sub(take_varint(rest)? as u32),
        });
    }
    Some(())
}

fn delta_values(rest: &mut &[u8], kinds: &Shape, now: u64, out: &mut Vec<u32>) -> Option<()> {
    for &(data, period) in &kinds.1 {
        match data {
            DataType::ConnCur | DataType::HttpReqCur => {}
            d if d.is_rate() => {
                let tick = ((now / u64::from(period.max(1))) as u32).wrapping_sub(take_varint(rest)? as u32);
                out.push(tick);
                out.push(u32::try_from(take_varint(rest)?).unwrap_or(u32::MAX));
                out.push(u32::try_from(take_varint(rest)?).unwrap_or(u32::MAX));
            }
            _ => out.push(u32::try_from(take_varint(rest)?).unwrap_or(u32::MAX)),
        }
    }
    Some(())
}

pub(super) fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut n = 0u64;
    for shift in (0..64).step_by(7) {
        let (&b, rest) = input.split_first()?;
        *input = rest;
        n |= u64::from(b & 0x7f) << shift;
        if b < 0x80 {
            return Some(n);
        }
    }
    None
}

fn take_text(input: &mut &[u8]) -> Option<String> {
    let len = usize::try_from(take_varint(input)?).ok()?;
    if input.len() < len {
        return None;
    }
    let (text, rest) = input.split_at(len);
    *input = rest;
    String::from_utf8(text.to_vec()).ok()
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

pub(super) fn base64(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], chunk.get(1).copied().unwrap_or(0), chunk.get(2).copied().unwrap_or(0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub(super) fn unbase64(text: &str) -> Option<Vec<u8>> {
    let mut value = [u8::MAX; 256];
    for (i, &c) in ALPHABET.iter().enumerate() {
        value[usize::from(c)] = i as u8;
    }
    let text = text.trim_end_matches('=').as_bytes();
    let mut out = Vec::with_capacity(text.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0);
    for &c in text {
        let v = u32::from(value[usize::from(c)]);
        if v == u32::from(u8::MAX) {
            return None;
        }
        acc = acc << 6 | v;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}
