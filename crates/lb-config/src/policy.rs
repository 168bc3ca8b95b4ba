//! The edge-policy language's typed model: conditions (HAProxy's ACLs, typed: a fetch, a matcher,
//! a value), the actions of `http_request` and `http_response` rules, the routing rules' targets,
//! pattern lists and maps, templates (HAProxy's log-format syntax) for header values, paths,
//! redirects and access-log lines.
//!
//! Everything here has been validated: regular expressions compile, addresses parse, names
//! refer to things that exist, templates parse, list and map files were read. lb-proxy compiles
//! these values once per configuration into what its request path reads (see its
//! `http::policy`); nothing is parsed again per request.

mod files;
mod template;

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;

pub use files::{
    check_map_entry, list_file_text, map_file_text, parse_list_entry, parse_list_text, parse_map_text, write_back,
};
pub use template::{Template, TemplatePart, Var};

/// The named parts of a configuration's policy, shared by every frontend.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Policy {
    /// Named conditions (`conditions:`), usable by name in any `if`/`unless`.
    pub conditions: BTreeMap<String, Condition>,
    /// Pattern lists (`lists:`), HAProxy's ACL files.
    pub lists: BTreeMap<String, PatternList>,
    /// Maps (`maps:`), HAProxy's map files.
    pub maps: BTreeMap<String, MapDef>,
}

/// A condition: a test, a named condition, or a combination.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Condition {
    /// Every one holds (an empty list holds).
    All(Vec<Condition>),
    /// At least one holds (an empty list does not).
    Any(Vec<Condition>),
    Not(Box<Condition>),
    /// A named condition of [`Policy::conditions`].
    Named(String),
    Test(Test),
}

impl Condition {
    /// Whether some test of the condition, through its named conditions (`named`), passes `f`:
    /// what a rule reads (the response, a header), asked by validation and by lb-proxy's compiler.
    pub fn any_test(&self, named: &BTreeMap<String, Condition>, f: &mut impl FnMut(&Test) -> bool) -> bool {
        self.any_test_within(named, f, 0)
    }

    fn any_test_within(
        &self,
        named: &BTreeMap<String, Condition>,
        f: &mut impl FnMut(&Test) -> bool,
        depth: usize,
    ) -> bool {
        match self {
            Condition::All(cs) | Condition::Any(cs) => cs.iter().any(|c| c.any_test_within(named, f, depth)),
            Condition::Not(c) => c.any_test_within(named, f, depth),
            // Named conditions cannot loop once validated; the depth bounds one built by hand.
            Condition::Named(n) => depth < 64 && named.get(n).is_some_and(|c| c.any_test_within(named, f, depth + 1)),
            Condition::Test(t) => f(t),
        }
    }
}

/// One test: a value fetched from the request (or response, or connection) and a matcher.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Test {
    pub fetch: Fetch,
    pub matcher: Matcher,
    /// Text comparisons ignore ASCII case (HAProxy's `-i`).
    pub ignore_case: bool,
}

/// Where a test's value comes from.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Fetch {
    Method,
    /// The path, without the query.
    Path,
    /// The path and query as the client sent them (HAProxy's `url` for origin-form requests).
    Uri,
    /// One query parameter's value (the first occurrence for value tests).
    Query(String),
    /// The Host header (or the authority of an absolute URI), port removed.
    Host,
    /// A request header; every occurrence is tested (any may match), each as a whole value
    /// (HAProxy's `req.fhdr`: commas do not split it).
    Header(String),
    Cookie(String),
    /// The client address: the PROXY header's source when there was one.
    Src,
    SrcPort,
    /// The frontend's name.
    Frontend,
    /// TLS facts lb-tls sent in the PROXY v2 header; absent on a connection that was not TLS.
    Sni,
    Alpn,
    TlsVersion,
    TlsCipher,
    /// The response's status (response time only).
    Status,
    /// A response header (response time only).
    ResponseHeader(String),
    /// A figure of the entry tracked in a slot (`{ sc0: { name: http_req_rate, gt: 100 } }`,
    /// HAProxy's `sc_http_req_rate(0)`); absent when the slot is not tracked or its table does
    /// not store the figure.
    Sc {
        slot: u8,
        data: crate::table::DataType,
    },
}

impl Fetch {
    /// The YAML key naming the fetch, and whether it takes a `name`.
    pub const KEYS: &'static [(&'static str, bool)] = &[
        ("method", false),
        ("path", false),
        ("uri", false),
        ("query", true),
        ("host", false),
        ("header", true),
        ("cookie", true),
        ("src", false),
        ("src_port", false),
        ("frontend", false),
        ("sni", false),
        ("alpn", false),
        ("tls_version", false),
        ("tls_cipher", false),
        ("status", false),
        ("response_header", true),
        ("sc0", true),
        ("sc1", true),
        ("sc2", true),
    ];

    /// Builds the fetch named `key` (one of [`Fetch::KEYS`]) with its `name` argument.
    pub fn from_key(key: &str, name: Option<String>) -> Option<Fetch> {
        let name = || name.clone().unwrap_or_default();
        Some(match key {
            "method" => Fetch::Method,
            "path" => Fetch::Path,
            "uri" => Fetch::Uri,
            "query" => Fetch::Query(name()),
            "host" => Fetch::Host,
            "header" => Fetch::Header(name().to_ascii_lowercase()),
            "cookie" => Fetch::Cookie(name()),
            "src" => Fetch::Src,
            "src_port" => Fetch::SrcPort,
            "frontend" => Fetch::Frontend,
            "sni" => Fetch::Sni,
            "alpn" => Fetch::Alpn,
            "tls_version" => Fetch::TlsVersion,
            "tls_cipher" => Fetch::TlsCipher,
            "status" => Fetch::Status,
            "response_header" => Fetch::ResponseHeader(name().to_ascii_lowercase()),
            "sc0" | "sc1" | "sc2" => {
                let slot = key.as_bytes()[2] - b'0';
                Fetch::Sc { slot, data: crate::table::DataType::parse(&name())? }
            }
            _ => return None,
        })
    }

    /// The YAML key, and the `name` argument if the fetch has one.
    pub fn key(&self) -> (&'static str, Option<&str>) {
        match self {
            Fetch::Method => ("method", None),
            Fetch::Path => ("path", None),
            Fetch::Uri => ("uri", None),
            Fetch::Query(n) => ("query", Some(n)),
            Fetch::Host => ("host", None),
            Fetch::Header(n) => ("header", Some(n)),
            Fetch::Cookie(n) => ("cookie", Some(n)),
            Fetch::Src => ("src", None),
            Fetch::SrcPort => ("src_port", None),
            Fetch::Frontend => ("frontend", None),
            Fetch::Sni => ("sni", None),
            Fetch::Alpn => ("alpn", None),
            Fetch::TlsVersion => ("tls_version", None),
            Fetch::TlsCipher => ("tls_cipher", None),
            Fetch::Status => ("status", None),
            Fetch::ResponseHeader(n) => ("response_header", Some(n)),
            Fetch::Sc { slot, data } => (["sc0", "sc1", "sc2"][usize::from(*slot).min(2)], Some(data.name())),
        }
    }

    /// Known only once a response is there.
    pub fn is_response(&self) -> bool {
        matches!(self, Fetch::Status | Fetch::ResponseHeader(_))
    }

    /// Its values can occur more than once (a count can be taken).
    pub fn is_multi(&self) -> bool {
        matches!(self, Fetch::Header(_) | Fetch::ResponseHeader(_) | Fetch::Query(_) | Fetch::Cookie(_))
    }
}

/// How a fetched value is tested.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Matcher {
    Equals(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    /// A regular expression (the `regex` crate's syntax; linear time whatever the input).
    Regex(String),
    /// The value is there (`true`) or is not (`false`).
    Exists(bool),
    /// The value is one of these (for `src`: an address in one of these networks).
    In(Vec<Pattern>),
    /// The value is in the named list of [`Policy::lists`] (for `src`: an `ip` list).
    List(String),
    /// The number of occurrences compared with a number.
    Count(Compare),
    /// The value, read as an integer, compared with a number (a value that is not an integer
    /// does not match).
    Int(Compare),
}

impl Matcher {
    /// The YAML keys of the matchers.
    pub const KEYS: &'static [&'static str] = &[
        "equals", "prefix", "suffix", "contains", "regex", "exists", "in", "list", "count", "eq", "ne", "gt", "ge",
        "lt", "le",
    ];
}

/// One entry of an inline `in:` list or a list file: text, or (for addresses) a network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Pattern {
    Text(String),
    Net(Cidr),
}

/// A network: an address and a prefix length (`10.0.0.0/8`, `2001:db8::/32`, or one address).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub addr: IpAddr,
    pub prefix: u8,
}

impl Cidr {
    /// `a.b.c.d`, `a.b.c.d/n`, an IPv6 address with or without `/n`.
    pub fn parse(text: &str) -> Result<Cidr, String> {
        let text = text.trim();
        let (addr, prefix) = match text.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| format!("`{text}` is not an address or network (a.b.c.d/n)"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("`{text}`: the prefix length must be 0 to {max}")),
            },
        };
        Ok(Cidr { addr, prefix })
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let max = if self.addr.is_ipv4() { 32 } else { 128 };
        if self.prefix == max {
            write!(f, "{}", self.addr)
        } else {
            write!(f, "{}/{}", self.addr, self.prefix)
        }
    }
}

/// A comparison with a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compare {
    pub op: CmpOp,
    pub value: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CmpOp {
    Eq,
    Ne,
    Gt,
    Ge,
    Lt,
    Le,
}

impl CmpOp {
    pub const KEYWORDS: &'static [(&'static str, CmpOp)] = &[
        ("eq", CmpOp::Eq),
        ("ne", CmpOp::Ne),
        ("gt", CmpOp::Gt),
        ("ge", CmpOp::Ge),
        ("lt", CmpOp::Lt),
        ("le", CmpOp::Le),
    ];

    pub fn keyword(self) -> &'static str {
        CmpOp::KEYWORDS.iter().find(|(_, op)| *op == self).map_or("eq", |(k, _)| k)
    }

    pub fn holds(self, left: i64, right: i64) -> bool {
        match self {
            CmpOp::Eq => left == right,
            CmpOp::Ne => left != right,
            CmpOp::Gt => left > right,
            CmpOp::Ge => left >= right,
            CmpOp::Lt => left < right,
            CmpOp::Le => left <= right,
        }
    }
}

/// What the entries of a list are, and so how a value is looked up in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListKind {
    /// Addresses and networks; the value (an address) matches when inside one.
    Ip,
    /// Strings; the value matches when equal to one.
    String,
    /// Strings; the value matches when it starts with one.
    Prefix,
}

impl ListKind {
    pub const KEYWORDS: &'static [(&'static str, ListKind)] =
        &[("ip", ListKind::Ip), ("string", ListKind::String), ("prefix", ListKind::Prefix)];

    pub fn keyword(self) -> &'static str {
        ListKind::KEYWORDS.iter().find(|(_, k)| *k == self).map_or("string", |(k, _)| k)
    }
}

/// A pattern list: inline, or read from a file (one entry a line; `#` starts a comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PatternList {
    pub kind: ListKind,
    /// The file it was read from, and written back to when the runtime API changes it.
    pub file: Option<PathBuf>,
    pub entries: Vec<String>,
    pub ignore_case: bool,
}

/// How a map's keys are compared with the looked-up value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MapMatch {
    Exact,
    /// The longest key the value starts with.
    Prefix,
}

impl MapMatch {
    pub const KEYWORDS: &'static [(&'static str, MapMatch)] =
        &[("exact", MapMatch::Exact), ("prefix", MapMatch::Prefix)];

    pub fn keyword(self) -> &'static str {
        if self == MapMatch::Prefix {
            "prefix"
        } else {
            "exact"
        }
    }
}

/// A map: keys to values, inline or from a file (`key value` a line; `#` comments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MapDef {
    pub matching: MapMatch,
    pub file: Option<PathBuf>,
    pub entries: Vec<(String, String)>,
    pub ignore_case: bool,
}

/// `if:` or `unless:` on a rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub condition: Condition,
    /// `unless`: the rule applies when the condition does not hold.
    pub negate: bool,
}

/// Where a routing rule sends the request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteTarget {
    Backend(String),
    /// The backend named by a map's value for a fetched key (HAProxy's
    /// `use_backend %[req.hdr(host),lower,map(FILE,default)]`); when no key matches, `default`,
    /// or the next rule when there is none.
    Map {
        map: String,
        key: Fetch,
        default: Option<String>,
    },
}

/// A response lb-proxy writes itself (`deny`, `return`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub status: u16,
    pub content_type: Option<String>,
    /// Shared, not copied, by every answer made from it.
    pub body: bytes::Bytes,
    /// The file the body was read from, `None` for an inline body.
    pub body_file: Option<PathBuf>,
    pub headers: Vec<(String, Template)>,
}

impl Reply {
    /// A reply with only a status: no body, type or header of its own.
    pub fn status(status: u16) -> Reply {
        Reply { status, content_type: None, body: bytes::Bytes::new(), body_file: None, headers: Vec::new() }
    }
}

/// Where a redirect points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RedirectTo {
    /// The same host and path with this scheme (`https`).
    Scheme(String),
    /// This location, whatever the request's path.
    Location(Template),
    /// This prefix in front of the request's path.
    Prefix(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Redirect {
    pub to: RedirectTo,
    /// 301, 302, 303, 307 or 308.
    pub code: u16,
    /// The request's query goes along (not for `location`, which says all).
    pub keep_query: bool,
}

/// A header to set or add; the value is a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderTemplate {
    pub name: String,
    pub value: Template,
}

/// A header's value into the log's capture block, cut at `length` bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Capture {
    pub header: String,
    pub length: usize,
}

/// An `http_request` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RequestAction {
    /// Refuse (403 by default): the rules stop, the request goes nowhere.
    Deny(Reply),
    /// Answer with this response: the rules stop.
    Return(Reply),
    Redirect(Redirect),
    /// Stop the `http_request` rules here; routing goes on.
    Allow,
    SetHeader(HeaderTemplate),
    AddHeader(HeaderTemplate),
    DelHeader(String),
    SetPath(Template),
    Capture(Capture),
    /// Count the request in a limit table (HAProxy's `track-sc0`).
    Track(crate::table::Track),
    /// Hold the request, then refuse it.
    Tarpit(crate::table::Tarpit),
    /// Set a general-purpose tag of a tracked entry (`gpt`).
    SetGpt(crate::table::Mark),
    /// Add one to a general-purpose counter of a tracked entry (`gpc`).
    IncGpc(crate::table::Mark),
}

/// An `http_response` action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResponseAction {
    /// Replace the server's response with this one (502 by default, as HAProxy's).
    Deny(Reply),
    SetHeader(HeaderTemplate),
    AddHeader(HeaderTemplate),
    DelHeader(String),
    Capture(Capture),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRule {
    pub action: RequestAction,
    pub guard: Option<Guard>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseRule {
    pub action: ResponseAction,
    pub guard: Option<Guard>,
}

/// A request ID (HAProxy's `unique-id-format` and `unique-id-header`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UniqueId {
    /// The request header that carries it to the server (and that a client's own ID is read from).
    pub header: String,
    /// How a new one is made; `None`: a random UUID (version 4).
    pub format: Option<Template>,
    /// A client's own value of `header` (printable, at most 128 bytes) is kept rather than
    /// replaced.
    pub keep_client: bool,
}

/// An access-log line chosen by the operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AccessLogFormat {
    /// HAProxy's `log-format`.
    Text(Template),
    /// One JSON object per line: these keys, each with its template's value (a template that is
    /// one numeric variable alone gives a JSON number).
    Json(Vec<(String, Template)>),
}
