//! Conditions compiled once per configuration: named conditions inlined, regular expressions
//! built, inline lists made sets, list names resolved to their live cells, header names parsed.
//! Evaluating one reads the request (and response) in place: no allocation unless a
//! case-insensitive comparison meets upper-case text, or a number is tested as text.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use http::header::{GetAll, HeaderName, HeaderValue};
use lb_config::{Compare, Condition, Fetch, ListKind, Matcher, Pattern, Test};

use super::patterns::{ListCell, NetSet, Patterns};
use super::Subject;

/// A compiled condition.
#[derive(Debug)]
pub(crate) enum Cond {
    All(Box<[Cond]>),
    Any(Box<[Cond]>),
    Not(Box<Cond>),
    Test(Box<CTest>),
}

#[derive(Debug)]
pub(crate) struct CTest {
    fetch: CFetch,
    matcher: CMatch,
    ignore_case: bool,
}

/// A fetch as a request reads it: a header's name parsed once (a lookup by `&str` parses it
/// again each time), the client address apart (tested as an address, not as text).
#[derive(Debug)]
enum CFetch {
    /// `None`: a name no header can have (the test never finds a value).
    Header(Option<HeaderName>),
    ResponseHeader(Option<HeaderName>),
    /// Read once per head (`Fetched`): rules often test it, and it costs a header lookup,
    /// a check of the value and the port's removal.
    Host,
    Query(String),
    Cookie(String),
    Src,
    /// The single-valued fetches, read by `Subject::value`.
    Single(Fetch),
}

impl CFetch {
    fn new(fetch: &Fetch) -> CFetch {
        let name = |n: &str| HeaderName::from_bytes(n.as_bytes()).ok();
        match fetch {
            Fetch::Header(n) => CFetch::Header(name(n)),
            Fetch::ResponseHeader(n) => CFetch::ResponseHeader(name(n)),
            Fetch::Query(n) => CFetch::Query(n.clone()),
            Fetch::Cookie(n) => CFetch::Cookie(n.clone()),
            Fetch::Src => CFetch::Src,
            Fetch::Host => CFetch::Host,
            single => CFetch::Single(single.clone()),
        }
    }
}

#[derive(Debug)]
enum CMatch {
    Equals(String),
    Prefix(String),
    Suffix(String),
    Contains(String),
    Regex(regex::Regex),
    Exists(bool),
    Words(HashSet<String>),
    Nets(NetSet),
    /// A named list: text (string or prefix) or addresses.
    List(Arc<ListCell>),
    Count(Compare),
    Int(Compare),
}

/// Why a condition could not be compiled; validation rules these out, so this only guards
/// against a configuration built by hand.
#[derive(Debug)]
pub(crate) struct CompileError(pub(crate) String);

pub(crate) fn compile(
    c: &Condition,
    named: &BTreeMap<String, Condition>,
    patterns: &Patterns,
    depth: usize,
) -> Result<Cond, CompileError> {
    if depth > 64 {
        return Err(CompileError("conditions nested too deep (a loop through names?)".into()));
    }
    let all =
        |cs: &[Condition]| cs.iter().map(|c| compile(c, named, patterns, depth + 1)).collect::<Result<Box<[_]>, _>>();
    Ok(match c {
        Condition::All(cs) => Cond::All(all(cs)?),
        Condition::Any(cs) => Cond::Any(all(cs)?),
        Condition::Not(c) => Cond::Not(Box::new(compile(c, named, patterns, depth + 1)?)),
        Condition::Named(n) => {
            let c = named.get(n).ok_or_else(|| CompileError(format!("no condition named `{n}`")))?;
            compile(c, named, patterns, depth + 1)?
        }
        Condition::Test(t) => Cond::Test(Box::new(test(t, patterns)?)),
    })
}

fn fold(text: &str, ignore_case: bool) -> String {
    if ignore_case {
        text.to_ascii_lowercase()
    } else {
        text.to_owned()
    }
}

fn test(t: &Test, patterns: &Patterns) -> Result<CTest, CompileError> {
    let ic = t.ignore_case;
    let matcher = match &t.matcher {
        Matcher::Equals(v) => CMatch::Equals(v.clone()),
        Matcher::Prefix(v) => CMatch::Prefix(v.clone()),
        Matcher::Suffix(v) => CMatch::Suffix(v.clone()),
        Matcher::Contains(v) => CMatch::Contains(fold(v, ic)),
        Matcher::Regex(source) => CMatch::Regex(
            regex::RegexBuilder::new(source)
                .case_insensitive(ic)
                .size_limit(1 << 20)
                .build()
                .map_err(|e| CompileError(e.to_string()))?,
        ),
        Matcher::Exists(b) => CMatch::Exists(*b),
        Matcher::In(patterns) if t.fetch == Fetch::Src => {
            CMatch::Nets(NetSet::new(patterns.iter().filter_map(|p| match p {
                Pattern::Net(n) => Some(n),
                Pattern::Text(_) => None,
            })))
        }
        Matcher::In(patterns) => CMatch::Words(
            patterns
                .iter()
                .map(|p| match p {
                    Pattern::Text(t) => fold(t, ic),
                    Pattern::Net(n) => n.to_string(),
                })
                .collect(),
        ),
        Matcher::List(name) => {
            let cell = patterns.list(name).ok_or_else(|| CompileError(format!("no list named `{name}`")))?;
            CMatch::List(cell.clone())
        }
        Matcher::Count(c) => CMatch::Count(*c),
        Matcher::Int(c) => CMatch::Int(*c),
    };
    Ok(CTest { fetch: CFetch::new(&t.fetch), matcher, ignore_case: ic })
}

/// What conditions have fetched from one head, for the next conditions on the same head.
#[derive(Debug, Default)]
pub(crate) struct Fetched<'a> {
    host: OnceCell<Option<&'a str>>,
}

impl<'a> Fetched<'a> {
    pub(crate) fn host(&self, s: &Subject<'a>) -> Option<&'a str> {
        *self.host.get_or_init(|| s.req.and_then(|r| r.host()))
    }
}

impl Cond {
    /// The tracked slots the condition reads (a bit each): a refusal on it counts against
    /// their tables.
    pub(crate) fn slots_read(&self) -> u8 {
        match self {
            Cond::All(cs) | Cond::Any(cs) => cs.iter().fold(0, |bits, c| bits | c.slots_read()),
            Cond::Not(c) => c.slots_read(),
            Cond::Test(t) => match t.fetch {
                CFetch::Single(Fetch::Sc { slot, .. }) => 1 << slot,
                _ => 0,
            },
        }
    }

    pub(crate) fn holds<'a>(&self, s: &Subject<'a>, fetched: &Fetched<'a>) -> bool {
        match self {
            Cond::All(cs) => cs.iter().all(|c| c.holds(s, fetched)),
            Cond::Any(cs) => cs.iter().any(|c| c.holds(s, fetched)),
            Cond::Not(c) => !c.holds(s, fetched),
            Cond::Test(t) => t.holds(s, fetched),
        }
    }
}

fn starts_with(value: &str, p: &str, ic: bool) -> bool {
    value.len() >= p.len()
        && if ic { value.as_bytes()[..p.len()].eq_ignore_ascii_case(p.as_bytes()) } else { value.starts_with(p) }
}

fn ends_with(value: &str, p: &str, ic: bool) -> bool {
    let (v, p) = (value.as_bytes(), p.as_bytes());
    v.len() >= p.len() && if ic { v[v.len() - p.len()..].eq_ignore_ascii_case(p) } else { v.ends_with(p) }
}

fn contains(value: &str, p: &str, ic: bool) -> bool {
    if !ic {
        return value.contains(p);
    }
    let (v, p) = (value.as_bytes(), p.as_bytes());
    p.is_empty() || v.windows(p.len()).any(|w| w.eq_ignore_ascii_case(p))
}

fn compare(c: &Compare, left: i64) -> bool {
    c.op.holds(left, c.value)
}

impl CTest {
    // Inlined into `Cond::holds` (which recursion keeps out of line): one call per condition
    // instead of two.
    #[inline(always)]
    fn holds<'a>(&self, s: &Subject<'a>, fetched: &Fetched<'a>) -> bool {
        let ic = self.ignore_case;
        // Addresses are tested as addresses, not as text.
        if let CFetch::Src = self.fetch {
            let ip = s.facts.client.map(|c| c.ip());
            return match (&self.matcher, ip) {
                (CMatch::Exists(want), ip) => ip.is_some() == *want,
                (CMatch::Nets(set), Some(ip)) => set.contains(ip),
                (CMatch::List(cell), Some(ip)) if cell.kind == ListKind::Ip => cell.contains_addr(ip),
                _ => false,
            };
        }
        // A tracked figure is a number: compared as one, without making text of it.
        if let CFetch::Single(Fetch::Sc { slot, data }) = self.fetch {
            let value = s.tracked.and_then(|t| t.read_against_limit(slot, data));
            match (&self.matcher, value) {
                (CMatch::Exists(want), v) => return v.is_some() == *want,
                (CMatch::Int(c), Some(v)) => return compare(c, i64::try_from(v).unwrap_or(i64::MAX)),
                (CMatch::Int(_), None) => return false,
                _ => {}
            }
        }
        match &self.matcher {
            CMatch::Exists(want) => s.present(&self.fetch, fetched) == *want,
            CMatch::Count(c) => compare(c, s.count(&self.fetch, fetched) as i64),
            m => s.any_value(&self.fetch, fetched, |v| match m {
                CMatch::Equals(p) => {
                    if ic {
                        v.eq_ignore_ascii_case(p)
                    } else {
                        v == p
                    }
                }
                CMatch::Prefix(p) => starts_with(v, p, ic),
                CMatch::Suffix(p) => ends_with(v, p, ic),
                CMatch::Contains(p) => contains(v, p, ic),
                CMatch::Regex(r) => r.is_match(v),
                CMatch::Words(set) => {
                    if ic && v.bytes().any(|b| b.is_ascii_uppercase()) {
                        set.contains(&v.to_ascii_lowercase())
                    } else {
                        set.contains(v)
                    }
                }
                CMatch::List(cell) => cell.contains_text(v),
                CMatch::Int(c) => v.trim().parse::<i64>().is_ok_and(|n| compare(c, n)),
                CMatch::Nets(_) | CMatch::Exists(_) | CMatch::Count(_) => false,
            }),
        }
    }
}

impl<'a> Subject<'a> {
    /// The values of a header fetch (request or response); `None` for other fetches.
    fn header_values(&self, fetch: &CFetch) -> Option<GetAll<'a, HeaderValue>> {
        match fetch {
            CFetch::Header(name) => Some(self.req?.headers.get_all(name.as_ref()?)),
            CFetch::ResponseHeader(name) => Some(self.response?.1.get_all(name.as_ref()?)),
            _ => None,
        }
    }

    /// Calls `test` on each value of `fetch` until one passes.
    fn any_value(&self, fetch: &CFetch, fetched: &Fetched<'a>, mut test: impl FnMut(&str) -> bool) -> bool {
        match fetch {
            CFetch::Header(_) | CFetch::ResponseHeader(_) => {
                self.header_values(fetch).is_some_and(|vs| vs.iter().any(|v| v.to_str().is_ok_and(&mut test)))
            }
            CFetch::Host => fetched.host(self).is_some_and(test),
            CFetch::Query(name) => self.query_values(name).any(test),
            CFetch::Cookie(name) => self.cookie_values(name).any(test),
            // Tested as an address (`CTest::holds`), never as text.
            CFetch::Src => false,
            CFetch::Single(single) => self.value(single).is_some_and(|v| test(&v)),
        }
    }

    /// How many values `fetch` has (0 or 1 for single-valued fetches).
    fn count(&self, fetch: &CFetch, fetched: &Fetched<'a>) -> usize {
        match fetch {
            CFetch::Header(_) | CFetch::ResponseHeader(_) => {
                self.header_values(fetch).map_or(0, |vs| vs.iter().count())
            }
            CFetch::Host => usize::from(fetched.host(self).is_some()),
            CFetch::Query(name) => self.query_values(name).count(),
            CFetch::Cookie(name) => self.cookie_values(name).count(),
            CFetch::Src => usize::from(self.facts.client.is_some()),
            CFetch::Single(single) => usize::from(self.value(single).is_some()),
        }
    }

    /// Whether `fetch` has a value: `count() > 0`, stopping at the first.
    fn present(&self, fetch: &CFetch, fetched: &Fetched<'a>) -> bool {
        match fetch {
            CFetch::Header(_) | CFetch::ResponseHeader(_) => {
                self.header_values(fetch).is_some_and(|vs| vs.iter().next().is_some())
            }
            CFetch::Query(name) => self.query_values(name).next().is_some(),
            CFetch::Cookie(name) => self.cookie_values(name).next().is_some(),
            _ => self.count(fetch, fetched) > 0,
        }
    }
}

impl Subject<'_> {
    /// The value of a single-valued fetch, or the first value of a multi-valued one.
    pub(crate) fn value<'s>(&'s self, fetch: &'s Fetch) -> Option<Cow<'s, str>> {
        let req = self.req;
        match fetch {
            Fetch::Method => req.map(|r| Cow::Borrowed(r.method.as_str())),
            Fetch::Path => req.map(|r| Cow::Borrowed(r.uri.path())),
            Fetch::Uri => req.map(|r| Cow::Borrowed(r.uri.path_and_query().map_or("/", |pq| pq.as_str()))),
            Fetch::Host => req.and_then(|r| r.host()).map(Cow::Borrowed),
            Fetch::Src => self.facts.client.map(|c| Cow::Owned(c.ip().to_string())),
            Fetch::SrcPort => self.facts.client.map(|c| Cow::Owned(c.port().to_string())),
            Fetch::Frontend => Some(Cow::Borrowed(self.frontend)),
            Fetch::Sni => self.facts.authority.as_deref().map(Cow::Borrowed),
            Fetch::Alpn => self.facts.alpn.as_deref().map(Cow::Borrowed),
            Fetch::TlsVersion => self.facts.tls.as_ref().and_then(|t| t.version.as_deref()).map(Cow::Borrowed),
            Fetch::TlsCipher => self.facts.tls.as_ref().and_then(|t| t.cipher.as_deref()).map(Cow::Borrowed),
            Fetch::Status => self.response.map(|(status, _)| Cow::Owned(status.to_string())),
            Fetch::Header(name) => {
                req.and_then(|r| r.headers.get(name.as_str())).and_then(|v| v.to_str().ok()).map(Cow::Borrowed)
            }
            Fetch::ResponseHeader(name) => {
                self.response.and_then(|(_, h)| h.get(name.as_str())).and_then(|v| v.to_str().ok()).map(Cow::Borrowed)
            }
            Fetch::Query(name) => self.query_values(name).next().map(Cow::Borrowed),
            Fetch::Cookie(name) => self.cookie_values(name).next().map(Cow::Borrowed),
            Fetch::Sc { slot, data } => {
                self.tracked.and_then(|t| t.read(*slot, *data)).map(|v| Cow::Owned(v.to_string()))
            }
        }
    }

    fn query_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        // A request without a query (most) splits nothing.
        let query = self.req.and_then(|r| r.uri.query()).filter(|q| !q.is_empty());
        query.into_iter().flat_map(|q| q.split('&')).filter_map(move |pair| {
            let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
            (k == name && !pair.is_empty()).then_some(v)
        })
    }

    fn cookie_values<'s>(&'s self, name: &'s str) -> impl Iterator<Item = &'s str> + 's {
        let headers = self.req.map(|r| r.headers.get_all(http::header::COOKIE).iter());
        headers.into_iter().flatten().filter_map(|v| v.to_str().ok()).flat_map(|v| v.split(';')).filter_map(move |c| {
            let (k, v) = c.trim().split_once('=')?;
            (k == name).then_some(v)
        })
    }
}
