//! Limit tables (`tables:`), HAProxy's stick tables: what a table is keyed by, how many entries
//! it keeps, how long an untouched entry lives, and what it counts per entry.
//!
//! The data types keep HAProxy's names (`http_req_rate(10s)`, `conn_cur`, `gpc0`, …) so that
//! `show table` output and the `data.<type>` words of the runtime commands read the same in
//! both; [`DataType::parse`] is the one place those names are read, for the configuration and
//! for the runtime commands alike.

use std::fmt;
use std::time::Duration;

/// How many general-purpose counters (`gpc0`…) and tags (`gpt0`…) a table may store.
pub const GENERAL_PURPOSE: u8 = 8;

/// One table (`tables.NAME`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub key: KeyType,
    /// Entries at most; past it the least recently used entry not in use is evicted.
    pub size: usize,
    /// An entry untouched this long is removed (HAProxy's `expire`).
    pub expire: Duration,
    /// What each entry counts, in the order written (the order `show table` prints).
    pub store: Vec<Store>,
    /// nginx's `limit_req`: a token bucket per entry, `None` when not asked for.
    pub bucket: Option<Bucket>,
    /// `fleet: true`: the thresholds read on this table's figures and its `limit_req` are the
    /// whole fleet's; each node enforces its share (the limit divided by the live nodes, as
    /// lb-watcher tells it with `set fleet share N`).
    pub fleet: bool,
}

/// What a table's keys are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyType {
    /// A client address, IPv4 or IPv6 (an IPv4-mapped IPv6 address counts as IPv4), grouped by
    /// network: the prefix lengths kept (32 and 128: each address on its own).
    Ip { v4_prefix: u8, v6_prefix: u8 },
    /// Text (a header's value, an API key): at most `len` bytes kept (HAProxy's `len`), the
    /// rest cut off.
    String { len: usize },
    /// A non-negative integer.
    Integer,
}

impl KeyType {
    /// HAProxy's `type` word, as `show table` prints it.
    pub fn word(&self) -> &'static str {
        match self {
            KeyType::Ip { .. } => "ip",
            KeyType::String { .. } => "string",
            KeyType::Integer => "integer",
        }
    }
}

/// One stored data type, with its period when it is a rate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Store {
    pub data: DataType,
    /// The sliding window of a rate (`http_req_rate(10s)`); `None` for the others.
    pub period: Option<Duration>,
}

impl fmt::Display for Store {
    /// HAProxy's spelling: `http_req_rate(10000)` (the period in milliseconds), `conn_cur`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.period {
            Some(p) => write!(f, "{}({})", self.data, p.as_millis()),
            None => write!(f, "{}", self.data),
        }
    }
}

/// A data type an entry can store: HAProxy's, plus `http_req_cur` (requests in progress).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DataType {
    ConnCnt,
    ConnCur,
    ConnRate,
    HttpReqCnt,
    HttpReqCur,
    HttpReqRate,
    /// Responses 400–499 (HAProxy's `http_err`: the client's errors).
    HttpErrCnt,
    HttpErrRate,
    /// Responses 500–599 (HAProxy's `http_fail`).
    HttpFailCnt,
    HttpFailRate,
    BytesInCnt,
    BytesInRate,
    BytesOutCnt,
    BytesOutRate,
    /// A general-purpose counter an action increments (`gpc0`…).
    Gpc(u8),
    /// A general-purpose tag an action sets (`gpt0`…).
    Gpt(u8),
}

/// The data types without a number, with HAProxy's names, in the order of their index.
const NAMED: [(DataType, &str); 14] = [
    (DataType::ConnCnt, "conn_cnt"),
    (DataType::ConnCur, "conn_cur"),
    (DataType::ConnRate, "conn_rate"),
    (DataType::HttpReqCnt, "http_req_cnt"),
    (DataType::HttpReqCur, "http_req_cur"),
    (DataType::HttpReqRate, "http_req_rate"),
    (DataType::HttpErrCnt, "http_err_cnt"),
    (DataType::HttpErrRate, "http_err_rate"),
    (DataType::HttpFailCnt, "http_fail_cnt"),
    (DataType::HttpFailRate, "http_fail_rate"),
    (DataType::BytesInCnt, "bytes_in_cnt"),
    (DataType::BytesInRate, "bytes_in_rate"),
    (DataType::BytesOutCnt, "bytes_out_cnt"),
    (DataType::BytesOutRate, "bytes_out_rate"),
];

const GPC: [&str; GENERAL_PURPOSE as usize] = ["gpc0", "gpc1", "gpc2", "gpc3", "gpc4", "gpc5", "gpc6", "gpc7"];
const GPT: [&str; GENERAL_PURPOSE as usize] = ["gpt0", "gpt1", "gpt2", "gpt3", "gpt4", "gpt5", "gpt6", "gpt7"];

impl DataType {
    /// Every data type, in the order of their index (`gpc`/`gpt` each [`GENERAL_PURPOSE`] times).
    pub fn all() -> impl Iterator<Item = DataType> {
        let numbered = (0..GENERAL_PURPOSE).map(DataType::Gpc).chain((0..GENERAL_PURPOSE).map(DataType::Gpt));
        NAMED.iter().map(|(d, _)| *d).chain(numbered)
    }

    /// How many data types there are ([`index`](Self::index) is below it).
    pub const COUNT: usize = NAMED.len() + 2 * GENERAL_PURPOSE as usize;

    /// A dense number for each data type, for tables indexed by it: its place in [`NAMED`],
    /// then the numbered ones. On every request's path, hence a jump rather than a search.
    pub fn index(self) -> usize {
        use DataType::*;
        let last = GENERAL_PURPOSE - 1;
        match self {
            ConnCnt => 0,
            ConnCur => 1,
            ConnRate => 2,
            HttpReqCnt => 3,
            HttpReqCur => 4,
            HttpReqRate => 5,
            HttpErrCnt => 6,
            HttpErrRate => 7,
            HttpFailCnt => 8,
            HttpFailRate => 9,
            BytesInCnt => 10,
            BytesInRate => 11,
            BytesOutCnt => 12,
            BytesOutRate => 13,
            Gpc(n) => NAMED.len() + usize::from(n.min(last)),
            Gpt(n) => NAMED.len() + usize::from(GENERAL_PURPOSE) + usize::from(n.min(last)),
        }
    }

    /// A rate over a period (it needs one, `http_req_rate(10s)`).
    pub fn is_rate(self) -> bool {
        use DataType::*;
        matches!(self, ConnRate | HttpReqRate | HttpErrRate | HttpFailRate | BytesInRate | BytesOutRate)
    }

    /// A byte count (kept on 64 bits; the other counts on 32, as HAProxy keeps them).
    pub fn is_bytes(self) -> bool {
        use DataType::*;
        matches!(self, BytesInCnt | BytesInRate | BytesOutCnt | BytesOutRate)
    }

    /// HAProxy's name without a period: `http_req_rate`, `gpc0`. `None` for an unknown name.
    pub fn parse(name: &str) -> Option<DataType> {
        DataType::all().find(|d| d.name() == name)
    }

    /// HAProxy's name: `http_req_rate`, `gpc0`.
    pub fn name(self) -> &'static str {
        let last = GENERAL_PURPOSE - 1;
        match self {
            DataType::Gpc(n) => GPC[usize::from(n.min(last))],
            DataType::Gpt(n) => GPT[usize::from(n.min(last))],
            named => NAMED.iter().find(|(d, _)| *d == named).map_or("", |(_, name)| name),
        }
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// How many keys a request tracks at once (HAProxy's `sc0`, `sc1`, `sc2`).
pub const SLOTS: u8 = 3;

/// `track: { table, key, slot }` (HAProxy's `http-request track-sc0 KEY table TABLE`): the
/// request counts in `table` under the value of `key`, and conditions read that entry as
/// `sc<slot>`. A slot already tracked is left as it is (the first track wins, as in HAProxy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Track {
    pub slot: u8,
    pub table: String,
    pub key: crate::policy::Fetch,
}

/// `tarpit: { delay, status, … }`: hold the request for `delay`, then answer `reply` (HAProxy's
/// `http-request tarpit` with `timeout tarpit`; its default status, 500).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tarpit {
    pub delay: Duration,
    pub reply: crate::policy::Reply,
}

/// A `tcp_request` rule: at accept (after the PROXY header, before any request), HAProxy's
/// `tcp-request connection`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionRule {
    pub action: ConnectionAction,
    pub guard: Option<crate::policy::Guard>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConnectionAction {
    /// Count the connection in a table (`conn_cnt`, `conn_rate`, `conn_cur`) under `src`.
    Track(Track),
    /// Close the connection at once, answering nothing.
    Reject,
}

/// `set_gpt: { slot, index, value }` and `inc_gpc: { slot, index }` (HAProxy's
/// `sc-set-gpt0(0) 1`, `sc-inc-gpc0(0)`): on the entry tracked in `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Mark {
    pub slot: u8,
    pub index: u8,
    /// The tag's value (`set_gpt`); 1 for `inc_gpc`.
    pub value: u32,
}

/// nginx's `limit_req` for each entry: requests flow at `rate` per `per`; up to `burst` more
/// are let through at once (`nodelay`) or held back to the rate (the default), the first
/// `delay` of them without waiting; past the burst a request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bucket {
    pub rate: u32,
    pub per: Duration,
    pub burst: u32,
    pub nodelay: bool,
    /// nginx's `delay=N`: this many excess requests pass at once, the rest are held back.
    pub delay: u32,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_data_type_reads_back_from_its_name_and_has_its_own_index() {
        let mut seen = [false; DataType::COUNT];
        for data in DataType::all() {
            assert_eq!(DataType::parse(&data.to_string()), Some(data));
            assert!(!std::mem::replace(&mut seen[data.index()], true), "{data} shares an index");
        }
        assert!(seen.iter().all(|s| *s));
        assert!(NAMED.iter().enumerate().all(|(i, (d, _))| d.index() == i), "index is the place in NAMED");
        assert_eq!(DataType::parse("gpc8"), None);
        assert_eq!(DataType::parse("gpc+1"), None);
        assert_eq!(DataType::parse("gpt01"), None);
        assert_eq!(DataType::parse("sess_rate"), None);
    }
}
