//! For the fuzzer (`fuzz/`, target `table_handover`): what a new worker reads from the old one
//! at a reload (`handover`: a full hand-over or a late count), fed as the bytes before base64
//! so that the fuzzer works on the format itself, into tables of each key type and layout
//! built as a worker builds them. The checks of what the tables hold after are here, next to
//! the format.

use std::sync::OnceLock;

use super::{handover, Now, Tables};

/// Tables of each key type (addresses grouped by network, strings with a bucket, integers),
/// with rates, counts, tags and bytes. The seeds (fuzz/seeds/table_handover/) are hand-overs
/// of these tables as a worker writes them.
const TABLES: &str = r#"
per_ip: { size: 100, expire: 10m, prefix: { ipv4: 24, ipv6: 64 }, store: [http_req_rate(10s), conn_cur, gpc0, bytes_out_cnt] }
api_keys: { type: string, len: 16, size: 10, expire: 1m, store: [http_req_cnt, gpt0, http_err_rate(1m)], limit_req: { rate: 5, burst: 2 } }
ids: { type: integer, size: 3, expire: 1s, store: [gpc1, conn_rate(100ms), bytes_in_cnt] }
"#;

fn tables() -> &'static [lb_config::Table] {
    static PARSED: OnceLock<lb_config::Config> = OnceLock::new();
    let config = PARSED.get_or_init(|| {
        let text = format!(
            "frontends: [ {{ name: web, bind: [ \"127.0.0.1:8080\" ], default_backend: app }} ]\n\
             backends: [ {{ name: app, servers: [ {{ name: a1, address: \"10.0.0.1:80\" }} ] }} ]\ntables:{}",
            TABLES.replace('\n', "\n  ")
        );
        lb_config::Config::parse(&text, "table_handover.yaml")
            .unwrap_or_else(|e| panic!("the hand-over target's tables do not load:\n{e}"))
    });
    &config.tables
}

/// A worker's tables taking hand-overs (see the module's comment).
#[doc(hidden)]
#[derive(Debug)]
pub struct FuzzHandover {
    tables: Tables,
}

impl Default for FuzzHandover {
    fn default() -> FuzzHandover {
        FuzzHandover { tables: Tables::new(tables()) }
    }
}

impl FuzzHandover {
    /// One fuzz input: its first byte chooses between the format's bytes (an even byte, most
    /// inputs: [`import`](Self::import)) and the channel's text as it comes (an odd one).
    pub fn input(&self, data: &[u8]) {
        match data.split_first() {
            Some((&b, rest)) if b & 1 == 1 => self.import_text(&String::from_utf8_lossy(rest)),
            Some((_, rest)) => self.import(rest),
            None => {}
        }
    }

    /// Takes `bytes` as a predecessor's hand-over (base64'd, as the channel carries them).
    /// The hand-over's instant (the 8 bytes after the magic) is read as milliseconds before
    /// now, so that a seed's entries are as alive as when it was written.
    ///
    /// # Panics
    /// When the tables break a promise after it: more entries than a table's size, or what
    /// they hold, handed on to a next worker (its full hand-over, then its late count), not
    /// fitting in that worker's tables.
    pub fn import(&self, bytes: &[u8]) {
        let mut bytes = bytes.to_vec();
        if let Some(at) = bytes.strip_prefix(handover::MAGIC).and_then(|rest| rest.first_chunk::<8>()) {
            let at = Now::read().0.wrapping_sub(u64::from_le_bytes(*at));
            bytes[handover::MAGIC.len()..handover::MAGIC.len() + 8].copy_from_slice(&at.to_le_bytes());
        }
        let text = handover::base64(&bytes);
        handover::import(&self.tables, &text);
        self.check_bounds();
        let next = FuzzHandover::default();
        handover::import(&next.tables, &handover::export(&self.tables));
        // The same bytes again, as if counted after the hand-over: the late count has some.
        handover::import(&self.tables, &text);
        handover::import(&next.tables, &handover::late(&self.tables));
        next.check_bounds();
    }

    /// Takes `text` as the channel's field itself (anything, not only base64).
    pub fn import_text(&self, text: &str) {
        handover::import(&self.tables, text);
        self.check_bounds();
    }

    /// Every table within its size, and every entry shown as `show table` shows it.
    fn check_bounds(&self) {
        let now = Now::read();
        for table in self.tables.iter() {
            let used = table.used();
            assert!(used <= table.config.size, "table {}: {used} entries past its size", table.name());
            let mut shown = 0;
            table.for_each(now, |_, key, _, _, row| {
                let _ = key.display(&table.config.key).to_string();
                for data in row.layout.stored() {
                    let _ = row.get(data);
                }
                let _ = row.excess(table.share());
                shown += 1;
            });
            assert!(shown <= used, "table {}: {shown} entries shown, {used} counted", table.name());
        }
    }

    #[cfg(test)]
    fn used(&self) -> Vec<usize> {
        self.tables.iter().map(|t| t.used()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::super::{handover, Key};
    use super::FuzzHandover;

    fn seeds() -> Vec<(String, Vec<u8>)> {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/seeds/table_handover");
        let mut seeds: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| {
                let path = e.unwrap_or_else(|e| panic!("{e}")).path();
                let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                (path.display().to_string(), bytes)
            })
            .collect();
        seeds.sort();
        seeds
    }

    #[test]
    fn the_seeds_and_every_cut_of_them_are_taken_within_bounds() {
        let seeds = seeds();
        assert!(seeds.len() >= 4, "the seeds are there: {}", seeds.len());
        for (_, bytes) in &seeds {
            FuzzHandover::default().input(bytes);
            // A hand-over cut short is refused whole, never half-read.
            for cut in 0..bytes.len() {
                FuzzHandover::default().input(&bytes[..cut]);
            }
            let mut text = bytes.clone();
            text[0] |= 1;
            FuzzHandover::default().input(&text);
        }
    }

    /// The `full` seed is a hand-over of these tables as a worker writes it, an entry or more
    /// in each: the fuzzer starts from the real format.
    #[test]
    fn the_full_seed_is_a_real_hand_over() {
        let seeds = seeds();
        let (_, full) =
            seeds.iter().find(|(name, _)| name.ends_with("/full")).unwrap_or_else(|| panic!("no seed `full`"));
        let fuzz = FuzzHandover::default();
        fuzz.input(full);
        assert!(fuzz.used().iter().all(|&n| n > 0), "every table got entries: {:?}", fuzz.used());
    }

    /// An expiry and counts past any time or count (varints of 64 bits) are no panic.
    #[test]
    fn values_past_every_bound_are_taken_without_a_panic() {
        let fuzz = FuzzHandover::default();
        let mut out = handover::MAGIC.to_vec();
        out.extend_from_slice(&0u64.to_le_bytes());
        handover::varint(&mut out, 1);
        let Some(table) = fuzz.tables.get("ids") else { panic!("table ids") };
        handover::table_header(&mut out, table, handover::FULL);
        handover::varint(&mut out, 1);
        Key::Int(7).encode(&mut out);
        for _ in 0..=table.layout.width {
            handover::varint(&mut out, u64::MAX);
        }
        let mut input = vec![0];
        input.extend_from_slice(&out);
        fuzz.input(&input);
    }
}
