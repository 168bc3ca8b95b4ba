//! The pattern lists and maps of a configuration, as the request path reads them and the runtime
//! API changes them (`add acl`, `del acl`, `clear acl`, `add map`, `set map`, `del map`,
//! `clear map`).
//!
//! Each list or map is a cell holding its current compiled form behind an `Arc`: a lookup takes
//! a read lock for the length of one lookup; a change builds the new form apart and swaps it in,
//! so every connection sees it from its next lookup on. A list that came from a file is written
//! back to that file after each change (a temporary file, then a rename), so that the next
//! reload, which reads the file, keeps the change: HAProxy loses runtime changes at a reload.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, RwLock};

use lb_config::{Cidr, ListKind, MapMatch, PatternList, Policy};

/// Every list and map of one configuration, by name; each with a number (`#0`, `#1` …) as
/// HAProxy's `show acl` gives them.
#[derive(Debug, Default)]
pub(crate) struct Patterns {
    lists: Vec<(String, Arc<ListCell>)>,
    maps: Vec<(String, Arc<MapCell>)>,
}

#[derive(Debug)]
pub(crate) struct ListCell {
    pub(crate) kind: ListKind,
    pub(crate) file: Option<PathBuf>,
    ignore_case: bool,
    current: RwLock<Arc<CompiledList>>,
}

#[derive(Debug)]
pub(crate) struct MapCell {
    pub(crate) file: Option<PathBuf>,
    matching: MapMatch,
    ignore_case: bool,
    current: RwLock<Arc<CompiledMap>>,
}

/// A list ready for lookups, with its entries in order for `show acl` and the file.
#[derive(Debug, Default)]
pub(crate) struct CompiledList {
    pub(crate) entries: Vec<String>,
    nets: NetSet,
    words: HashSet<String>,
    /// The distinct lengths of the entries (prefix lists): a value is looked up by each.
    lengths: Vec<usize>,
}

#[derive(Debug, Default)]
pub(crate) struct CompiledMap {
    pub(crate) entries: Vec<(String, String)>,
    index: HashMap<String, usize>,
    lengths: Vec<usize>,
}

/// Networks, by prefix length: one hash set of masked addresses per length present, so a lookup
/// costs one hash probe per distinct length (a handful), however many networks there are.
#[derive(Debug, Default, Clone)]
pub(crate) struct NetSet {
    v4: Vec<(u8, AddrSet<u32>)>,
    v6: Vec<(u8, AddrSet<u128>)>,
}

type AddrSet<T> = HashSet<T, BuildHasherDefault<AddrHasher>>;

/// A hasher for addresses, a few multiplications where SipHash takes rounds per word. Keyless,
/// which is safe here: the sets hold the configuration's networks, and a client chooses only
/// what is looked up, which cannot make a probe longer than the operator's own entries make.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(word));
        }
    }

    fn write_u32(&mut self, n: u32) {
        self.write_u64(u64::from(n));
    }

    fn write_u64(&mut self, n: u64) {
        self.0 = mix(self.0 ^ n);
    }

    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }

    fn finish(&self) -> u64 {
        self.0
    }
}

/// SplitMix64's finaliser: every bit of the input moves the high bits (which pick the control
/// byte) and the low ones (which pick the bucket) alike; masked networks end in zeros.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl NetSet {
    pub(crate) fn new<'a>(nets: impl IntoIterator<Item = &'a Cidr>) -> NetSet {
        let mut set = NetSet::default();
        for net in nets {
            set.insert(net);
        }
        set
    }

    fn insert(&mut self, net: &Cidr) {
        match net.addr {
            IpAddr::V4(a) => {
                let masked = mask4(u32::from(a), net.prefix);
                slot(&mut self.v4, net.prefix).insert(masked);
            }
            IpAddr::V6(a) => {
                let masked = mask6(u128::from(a), net.prefix);
                slot(&mut self.v6, net.prefix).insert(masked);
            }
        }
    }

    pub(crate) fn contains(&self, addr: IpAddr) -> bool {
        // An IPv4 client seen on an IPv6 socket (`::ffff:a.b.c.d`) is the IPv4 address.
        let addr = match addr {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(addr, IpAddr::V4),
            v4 => v4,
        };
        match addr {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4.iter().any(|(p, set)| set.contains(&mask4(a, *p)))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6.iter().any(|(p, set)| set.contains(&mask6(a, *p)))
            }
        }
    }
}

fn slot<T>(by_len: &mut Vec<(u8, AddrSet<T>)>, prefix: u8) -> &mut AddrSet<T> {
    let at = match by_len.iter().position(|(p, _)| *p == prefix) {
        Some(at) => at,
        None => {
            by_len.push((prefix, AddrSet::default()));
            // Longest prefixes first: host entries, the commonest, are probed first.
            by_len.sort_by_key(|e| std::cmp::Reverse(e.0));
            by_len.iter().position(|(p, _)| *p == prefix).unwrap_or(0)
        }
    };
    &mut by_len[at].1
}

fn mask4(a: u32, prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        a & (u32::MAX << (32 - u32::from(prefix)))
    }
}

fn mask6(a: u128, prefix: u8) -> u128 {
    if prefix == 0 {
        0
    } else {
        a & (u128::MAX << (128 - u32::from(prefix)))
    }
}

fn fold(text: &str, ignore_case: bool) -> String {
    if ignore_case {
        text.to_ascii_lowercase()
    } else {
        text.to_owned()
    }
}

impl CompiledList {
    fn build(kind: ListKind, ignore_case: bool, entries: Vec<String>) -> CompiledList {
        let mut list = CompiledList::default();
        match kind {
            ListKind::Ip => {
                let nets: Vec<Cidr> = entries.iter().filter_map(|e| Cidr::parse(e).ok()).collect();
                list.nets = NetSet::new(&nets);
            }
            ListKind::String | ListKind::Prefix => {
                list.words = entries.iter().map(|e| fold(e, ignore_case)).collect();
                let mut lengths: Vec<usize> = list.words.iter().map(String::len).collect();
                lengths.sort_unstable();
                lengths.dedup();
                list.lengths = lengths;
            }
        }
        list.entries = entries;
        list
    }
}

impl ListCell {
    fn new(list: &PatternList) -> ListCell {
        let compiled = CompiledList::build(list.kind, list.ignore_case, list.entries.clone());
        ListCell {
            kind: list.kind,
            file: list.file.clone(),
            ignore_case: list.ignore_case,
            current: RwLock::new(Arc::new(compiled)),
        }
    }

    pub(crate) fn snapshot(&self) -> Arc<CompiledList> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn contains_addr(&self, addr: IpAddr) -> bool {
        self.current.read().unwrap_or_else(|e| e.into_inner()).nets.contains(addr)
    }

    /// A string list: the value equals an entry; a prefix list: starts with one.
    pub(crate) fn contains_text(&self, value: &str) -> bool {
        let list = self.current.read().unwrap_or_else(|e| e.into_inner());
        let owned;
        let value = if self.ignore_case && value.bytes().any(|b| b.is_ascii_uppercase()) {
            owned = value.to_ascii_lowercase();
            owned.as_str()
        } else {
            value
        };
        match self.kind {
            ListKind::Prefix => list
                .lengths
                .iter()
                .take_while(|l| **l <= value.len())
                .any(|l| value.get(..*l).is_some_and(|p| list.words.contains(p))),
            _ => list.words.contains(value),
        }
    }

    /// Replaces the entries (already checked), and writes them to the list's file.
    pub(crate) fn replace(&self, entries: Vec<String>) -> std::io::Result<()> {
        let compiled = Arc::new(CompiledList::build(self.kind, self.ignore_case, entries));
        if let Some(file) = &self.file {
            lb_config::write_back(file, &lb_config::list_file_text(compiled.entries.iter().map(String::as_str)))?;
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = compiled;
        Ok(())
    }
}

impl CompiledMap {
    fn build(ignore_case: bool, entries: Vec<(String, String)>) -> CompiledMap {
        let mut map = CompiledMap::default();
        for (i, (k, _)) in entries.iter().enumerate() {
            // The first of two equal keys wins, as in HAProxy's map files.
            map.index.entry(fold(k, ignore_case)).or_insert(i);
        }
        let mut lengths: Vec<usize> = map.index.keys().map(String::len).collect();
        lengths.sort_unstable();
        lengths.dedup();
        map.lengths = lengths;
        map.entries = entries;
        map
    }
}

impl MapCell {
    pub(crate) fn snapshot(&self) -> Arc<CompiledMap> {
        self.current.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The value for `key`: an equal key, or for a prefix map the longest key `key` starts with.
    pub(crate) fn lookup(&self, key: &str) -> Option<String> {
        let map = self.current.read().unwrap_or_else(|e| e.into_inner());
        let key = fold(key, self.ignore_case);
        let at = match self.matching {
            MapMatch::Exact => map.index.get(&key).copied(),
            MapMatch::Prefix => map
                .lengths
                .iter()
                .rev()
                .filter(|l| **l <= key.len())
                .find_map(|l| key.get(..*l).and_then(|p| map.index.get(p).copied())),
        };
        at.map(|i| map.entries[i].1.clone())
    }

    pub(crate) fn replace(&self, entries: Vec<(String, String)>) -> std::io::Result<()> {
        let compiled = Arc::new(CompiledMap::build(self.ignore_case, entries));
        if let Some(file) = &self.file {
            let text = lb_config::map_file_text(compiled.entries.iter().map(|(k, v)| (k.as_str(), v.as_str())));
            lb_config::write_back(file, &text)?;
        }
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = compiled;
        Ok(())
    }
}

impl Patterns {
    pub(crate) fn new(policy: &Policy) -> Patterns {
        Patterns {
            lists: policy.lists.iter().map(|(n, l)| (n.clone(), Arc::new(ListCell::new(l)))).collect(),
            maps: policy
                .maps
                .iter()
                .map(|(n, m)| {
                    let compiled = CompiledMap::build(m.ignore_case, m.entries.clone());
                    let cell = MapCell {
                        file: m.file.clone(),
                        matching: m.matching,
                        ignore_case: m.ignore_case,
                        current: RwLock::new(Arc::new(compiled)),
                    };
                    (n.clone(), Arc::new(cell))
                })
                .collect(),
        }
    }

    pub(crate) fn list(&self, name: &str) -> Option<&Arc<ListCell>> {
        self.lists.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    pub(crate) fn map(&self, name: &str) -> Option<&Arc<MapCell>> {
        self.maps.iter().find(|(n, _)| n == name).map(|(_, c)| c)
    }

    pub(crate) fn lists(&self) -> &[(String, Arc<ListCell>)] {
        &self.lists
    }

    pub(crate) fn maps(&self) -> &[(String, Arc<MapCell>)] {
        &self.maps
    }

    /// A list named as HAProxy's CLI names them: `#ID`, its file's path, or (ours) its name.
    pub(crate) fn find_list(&self, reference: &str) -> Option<(usize, &str, &Arc<ListCell>)> {
        find(&self.lists, reference, |c| c.file.as_ref())
    }

    pub(crate) fn find_map(&self, reference: &str) -> Option<(usize, &str, &Arc<MapCell>)> {
        find(&self.maps, reference, |c| c.file.as_ref())
    }
}

fn find<'a, T>(
    items: &'a [(String, Arc<T>)],
    reference: &str,
    file: impl Fn(&T) -> Option<&PathBuf>,
) -> Option<(usize, &'a str, &'a Arc<T>)> {
    let by_id = reference.strip_prefix('#').and_then(|id| id.parse::<usize>().ok());
    items.iter().enumerate().find_map(|(i, (name, cell))| {
        let hit = by_id == Some(i) || name == reference || file(cell).is_some_and(|f| f.as_os_str() == reference);
        hit.then_some((i, name.as_str(), cell))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(t: &str) -> Cidr {
        Cidr::parse(t).expect("cidr")
    }

    #[test]
    fn networks_match_by_prefix() {
        let set = NetSet::new(&[cidr("10.0.0.0/8"), cidr("192.0.2.7"), cidr("2001:db8::/32"), cidr("0.0.0.0/0")][..3]);
        for (addr, inside) in [
            ("10.1.2.3", true),
            ("11.0.0.1", false),
            ("192.0.2.7", true),
            ("192.0.2.8", false),
            ("2001:db8:1::1", true),
            ("2001:db9::1", false),
            ("::ffff:10.9.9.9", true),
        ] {
            assert_eq!(set.contains(addr.parse().expect("addr")), inside, "{addr}");
        }
        assert!(NetSet::new(&[cidr("0.0.0.0/0")]).contains("203.0.113.1".parse().expect("addr")));
    }

    #[test]
    fn maps_match_exactly_or_by_longest_prefix() {
        let policy: Policy = Policy {
            maps: [(
                "paths".to_owned(),
                lb_config::MapDef {
                    matching: MapMatch::Prefix,
                    file: None,
                    entries: vec![("/api".into(), "api".into()), ("/api/v2".into(), "v2".into())],
                    ignore_case: false,
                },
            )]
            .into(),
            ..Policy::default()
        };
        let patterns = Patterns::new(&policy);
        let map = patterns.map("paths").expect("map");
        assert_eq!(map.lookup("/api/v2/x").as_deref(), Some("v2"));
        assert_eq!(map.lookup("/api/v1").as_deref(), Some("api"));
        assert_eq!(map.lookup("/other"), None);
        assert!(patterns.find_map("#0").is_some() && patterns.find_map("paths").is_some());
    }
}
