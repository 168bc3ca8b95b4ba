//! ACLs (`acl NAME FETCH [flags] [operator] VALUES…`, anonymous `{ … }`, HAProxy's predefined
//! ones) and conditions (`if`/`unless`, `!`, `||`/`or`, implicit AND) into lb-proxy's typed
//! conditions. A named ACL becomes a named condition under `conditions:` (shared by every
//! frontend: a name two proxies define differently gets the proxy's name in front), `-f FILE`
//! a list under `lists:`.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use lb_config::{Cidr, CmpOp, Compare, Condition, Fetch, Guard, ListKind, Matcher, Pattern, PatternList, Policy, Test};

use super::lexer::Line;
use super::report::Report;

/// The policy the translation builds: named conditions, lists and maps, with their names.
#[derive(Debug, Default)]
pub(crate) struct Shared {
    pub(crate) policy: Policy,
}

/// A name lb-config accepts (letters, digits, `_`, `.`, `-`).
fn clean(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "_.-".contains(c) { c } else { '_' }).collect()
}

impl Shared {
    /// The name condition `name` of `proxy` goes by: its own when free or the same, else
    /// prefixed with the proxy's.
    fn condition_name(&mut self, proxy: &str, name: &str, condition: &Condition) -> String {
        let conditions = &mut self.policy.conditions;
        for candidate in [clean(name), clean(&format!("{proxy}.{name}"))] {
            match conditions.get(&candidate) {
                Some(existing) if existing == condition => return candidate,
                Some(_) => {}
                None => {
                    conditions.insert(candidate.clone(), condition.clone());
                    return candidate;
                }
            }
        }
        let mut n = 2;
        loop {
            let candidate = clean(&format!("{proxy}.{name}.{n}"));
            if !conditions.contains_key(&candidate) {
                conditions.insert(candidate.clone(), condition.clone());
                return candidate;
            }
            n += 1;
        }
    }

    /// The list read from `file` as `kind` entries (one list per file and kind).
    fn list(&mut self, file: &Path, kind: ListKind, ignore_case: bool) -> String {
        let lists = &mut self.policy.lists;
        if let Some((name, _)) = lists
            .iter()
            .find(|(_, l)| l.file.as_deref() == Some(file) && l.kind == kind && l.ignore_case == ignore_case)
        {
            return name.clone();
        }
        let stem = file.file_stem().map_or_else(|| "list".to_owned(), |s| clean(&s.to_string_lossy()));
        let name = unique(&stem, |n| lists.contains_key(n));
        let list = PatternList { kind, file: Some(file.to_path_buf()), entries: Vec::new(), ignore_case };
        lists.insert(name.clone(), list);
        name
    }
}

/// `base`, else `base.2`, `base.3`… whichever is free.
pub(crate) fn unique(base: &str, taken: impl Fn(&str) -> bool) -> String {
    if !taken(base) {
        return base.to_owned();
    }
    (2..).map(|n| format!("{base}.{n}")).find(|n| !taken(n)).unwrap_or_else(|| base.to_owned())
}

/// The ACLs of one proxy: each name's condition (lines of one name are ORed), or why it
/// cannot be translated.
#[derive(Debug, Default)]
pub(crate) struct Acls {
    named: HashMap<String, Result<Vec<Condition>, String>>,
}

impl Acls {
    pub(crate) fn add(&mut self, line: &Line, shared: &mut Shared, report: &mut Report) {
        let name = line.word(1);
        if name.is_empty() || line.words.len() < 3 {
            report.error(line.number, "acl", "expected `acl NAME FETCH [flags] [operator] VALUES…`");
            return;
        }
        let parsed = criterion(&line.words[2..], shared);
        if let Err(why) = &parsed {
            report.error(line.number, format!("acl {name}"), why.clone());
        }
        let entry = self.named.entry(name.to_owned()).or_insert_with(|| Ok(Vec::new()));
        match (entry, parsed) {
            (Ok(list), Ok(c)) => list.push(c),
            (entry @ Ok(_), Err(why)) => *entry = Err(why),
            (Err(_), _) => {}
        }
    }

    /// The condition `name` stands for in `proxy`, registered under `conditions:`.
    fn resolve(&self, name: &str, proxy: &str, shared: &mut Shared) -> Result<Condition, String> {
        match self.named.get(name) {
            Some(Ok(list)) => {
                let condition = if list.len() == 1 { list[0].clone() } else { Condition::Any(list.clone()) };
                Ok(Condition::Named(shared.condition_name(proxy, name, &condition)))
            }
            Some(Err(_)) => Err(format!("acl `{name}` is not translated (see its line)")),
            None => predefined(name).ok_or_else(|| format!("no acl named `{name}`")),
        }
    }
}

/// HAProxy's predefined ACLs that have a counterpart.
fn predefined(name: &str) -> Option<Condition> {
    let method = |m: &[&str]| {
        let patterns = m.iter().map(|m| Pattern::Text((*m).to_owned())).collect();
        Condition::Test(Test { fetch: Fetch::Method, matcher: Matcher::In(patterns), ignore_case: false })
    };
    Some(match name {
        "TRUE" | "HTTP" => Condition::All(Vec::new()),
        "FALSE" => Condition::Any(Vec::new()),
        "METH_GET" => method(&["GET", "HEAD"]),
        "METH_HEAD" => method(&["HEAD"]),
        "METH_POST" => method(&["POST"]),
        "METH_PUT" => method(&["PUT"]),
        "METH_DELETE" => method(&["DELETE"]),
        "METH_OPTIONS" => method(&["OPTIONS"]),
        "METH_CONNECT" => method(&["CONNECT"]),
        "METH_TRACE" => method(&["TRACE"]),
        "LOCALHOST" => Condition::Test(Test {
            fetch: Fetch::Src,
            matcher: Matcher::In(vec![
                Pattern::Net(Cidr::parse("127.0.0.0/8").ok()?),
                Pattern::Net(Cidr::parse("::1").ok()?),
            ]),
            ignore_case: false,
        }),
        _ => return None,
    })
}

/// How values are matched: HAProxy's `-m` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    Str,
    Beg,
    End,
    Sub,
    Reg,
    Found,
    Int,
    Ip,
}

/// A fetch name into the fetch, whether it counts occurrences (`_cnt`), and the method its
/// suffix implies (`path_beg`, `hdr_reg(x)`, `urlp_val(x)`).
fn fetch(expr: &str) -> Result<(Fetch, bool, Option<Method>), String> {
    let unsupported = || format!("`{expr}`: lb-proxy has no such fetch");
    let (name, arg) = match expr.split_once('(') {
        Some((n, rest)) => (n, Some(rest.strip_suffix(')').ok_or_else(unsupported)?.trim())),
        None => (expr, None),
    };
    let suffixes = [
        ("_beg", Some(Method::Beg)),
        ("_end", Some(Method::End)),
        ("_sub", Some(Method::Sub)),
        ("_reg", Some(Method::Reg)),
        ("_val", Some(Method::Int)),
        ("_cnt", Some(Method::Int)),
        ("_dom", None),
        ("_dir", None),
        ("_len", None),
    ];
    let (base, suffix) = suffixes
        .iter()
        .find_map(|(s, m)| name.strip_suffix(s).map(|b| (b, Some((*s, *m)))))
        .filter(|(b, _)| !b.is_empty() && *b != "src")
        .unwrap_or((name, None));
    let method = match suffix {
        Some((s, None)) => return Err(format!("`{expr}`: the `{s}` match is not translated")),
        Some((_, m)) => m,
        None => None,
    };
    let counted = suffix.is_some_and(|(s, _)| s == "_cnt");
    let needs = |arg: Option<&str>| arg.filter(|a| !a.is_empty()).map(str::to_owned).ok_or_else(unsupported);
    let fetch = match base {
        "path" => Fetch::Path,
        "url" => Fetch::Uri,
        "method" => Fetch::Method,
        "hdr" | "req.hdr" | "req.fhdr" | "fhdr" => {
            let header = needs(arg)?;
            if header.eq_ignore_ascii_case("host") && !counted {
                Fetch::Host
            } else {
                Fetch::Header(header.to_ascii_lowercase())
            }
        }
        "shdr" | "res.hdr" | "res.fhdr" => Fetch::ResponseHeader(needs(arg)?.to_ascii_lowercase()),
        "urlp" | "url_param" => Fetch::Query(needs(arg)?),
        "cook" | "req.cook" => Fetch::Cookie(needs(arg)?),
        "src" => Fetch::Src,
        "src_port" => Fetch::SrcPort,
        "fe_name" => Fetch::Frontend,
        "ssl_fc_sni" => Fetch::Sni,
        "ssl_fc_alpn" => Fetch::Alpn,
        "ssl_fc_protocol" => Fetch::TlsVersion,
        "ssl_fc_cipher" => Fetch::TlsCipher,
        "status" => Fetch::Status,
        _ => return Err(unsupported()),
    };
    Ok((fetch, counted, method))
}

/// `FETCH [-i] [-m METHOD] [-f FILE]… [--] [VALUES…]` into a condition.
fn criterion(words: &[String], shared: &mut Shared) -> Result<Condition, String> {
    let Some(expr) = words.first().map(String::as_str) else { return Err("an empty `{ }`".to_owned()) };
    // `ssl_fc`: the connection came through TLS.
    if expr == "ssl_fc" && words.len() == 1 {
        let test = Test { fetch: Fetch::TlsVersion, matcher: Matcher::Exists(true), ignore_case: false };
        return Ok(Condition::Test(test));
    }
    let (fetch, counted, implied) = fetch(expr)?;
    let mut ignore_case = false;
    let mut method = None;
    let mut files = Vec::new();
    let mut i = 1;
    while let Some(flag) = words.get(i).filter(|w| w.starts_with('-') && w.len() > 1) {
        match flag.as_str() {
            "-i" => ignore_case = true,
            "-n" | "-u" => {}
            "-m" | "-f" => {
                i += 1;
                let value = words.get(i).ok_or_else(|| format!("`{flag}` needs a value"))?;
                if flag == "-f" {
                    files.push(PathBuf::from(value));
                } else {
                    method = Some(match value.as_str() {
                        "str" => Method::Str,
                        "beg" => Method::Beg,
                        "end" => Method::End,
                        "sub" => Method::Sub,
                        "reg" => Method::Reg,
                        "found" => Method::Found,
                        "int" => Method::Int,
                        "ip" => Method::Ip,
                        other => return Err(format!("`-m {other}`: not translated")),
                    });
                }
            }
            "--" => {
                i += 1;
                break;
            }
            other => return Err(format!("flag `{other}` is not translated")),
        }
        i += 1;
    }
    let values = &words[i.min(words.len())..];
    let method = method.or(implied).unwrap_or(match fetch {
        Fetch::Src => Method::Ip,
        Fetch::SrcPort | Fetch::Status => Method::Int,
        _ => Method::Str,
    });
    let test = |matcher: Matcher| Condition::Test(Test { fetch: fetch.clone(), matcher, ignore_case });
    let mut any: Vec<Condition> = Vec::new();
    for file in &files {
        let kind = match method {
            Method::Ip => ListKind::Ip,
            Method::Str => ListKind::String,
            Method::Beg => ListKind::Prefix,
            _ => {
                return Err(
                    "`-f` with this match is not translated (lists hold addresses, strings or prefixes)".to_owned()
                )
            }
        };
        any.push(test(Matcher::List(shared.list(file, kind, ignore_case))));
    }
    match method {
        Method::Found => return Ok(test(Matcher::Exists(true))),
        Method::Int => any.extend(
            integer(values)?.into_iter().map(|c| test(if counted { Matcher::Count(c) } else { Matcher::Int(c) })),
        ),
        Method::Ip if !values.is_empty() => {
            let nets = values.iter().map(|v| Cidr::parse(v).map(Pattern::Net)).collect::<Result<Vec<_>, _>>()?;
            any.push(test(Matcher::In(nets)));
        }
        Method::Str if values.len() == 1 => any.push(test(Matcher::Equals(values[0].clone()))),
        Method::Str if values.len() > 1 => {
            any.push(test(Matcher::In(values.iter().map(|v| Pattern::Text(v.clone())).collect())));
        }
        Method::Beg | Method::End | Method::Sub | Method::Reg => any.extend(values.iter().map(|v| {
            test(match method {
                Method::Beg => Matcher::Prefix(v.clone()),
                Method::End => Matcher::Suffix(v.clone()),
                Method::Sub => Matcher::Contains(v.clone()),
                _ => Matcher::Regex(v.clone()),
            })
        })),
        _ => {}
    }
    match any.len() {
        0 => Err(format!("`{expr}` without values")),
        1 => Ok(any.remove(0)),
        _ => Ok(Condition::Any(any)),
    }
}

/// Integer values: `N` or `OP N` (eq, ge, gt, le, lt), each an alternative.
fn integer(values: &[String]) -> Result<Vec<Compare>, String> {
    let num = |v: &str| v.parse::<i64>().map_err(|_| format!("`{v}` is not an integer"));
    let mut out = Vec::new();
    let mut words = values.iter();
    while let Some(word) = words.next() {
        if let Some((_, op)) = CmpOp::KEYWORDS.iter().find(|(k, _)| k == word) {
            let v = words.next().ok_or_else(|| format!("`{word}` needs a number"))?;
            out.push(Compare { op: *op, value: num(v)? });
        } else if word.contains(':') {
            return Err(format!("`{word}`: integer ranges are not translated (write two conditions)"));
        } else {
            out.push(Compare { op: CmpOp::Eq, value: num(word)? });
        }
    }
    Ok(out)
}

/// The condition after `if`/`unless` (`words` from that keyword on).
pub(crate) fn guard(words: &[String], acls: &Acls, proxy: &str, shared: &mut Shared) -> Result<Guard, String> {
    let negate = match words.first().map(String::as_str) {
        Some("if") => false,
        Some("unless") => true,
        _ => return Err("expected `if` or `unless`".to_owned()),
    };
    let mut any: Vec<Condition> = Vec::new();
    let mut all: Vec<Condition> = Vec::new();
    let mut i = 1;
    let mut negated = false;
    while i < words.len() {
        let word = words[i].as_str();
        i += 1;
        let term = match word {
            "||" | "or" => {
                any.push(group(std::mem::take(&mut all)));
                continue;
            }
            "!" => {
                negated = !negated;
                continue;
            }
            "{" | "!{" => {
                if word == "!{" {
                    negated = !negated;
                }
                let end = words[i..].iter().position(|w| w == "}").map(|p| p + i).ok_or("`{` is not closed")?;
                let term = criterion(&words[i..end], shared)?;
                i = end + 1;
                term
            }
            name => match name.strip_prefix('!') {
                Some(name) => Condition::Not(Box::new(acls.resolve(name, proxy, shared)?)),
                None => acls.resolve(name, proxy, shared)?,
            },
        };
        all.push(if std::mem::take(&mut negated) { Condition::Not(Box::new(term)) } else { term });
    }
    if all.is_empty() {
        return Err("an empty condition".to_owned());
    }
    any.push(group(all));
    let condition = if any.len() == 1 { any.remove(0) } else { Condition::Any(any) };
    Ok(Guard { condition, negate })
}

fn group(mut all: Vec<Condition>) -> Condition {
    if all.len() == 1 {
        all.remove(0)
    } else {
        Condition::All(all)
    }
}

/// Splits a rule line at its `if`/`unless`: the words before, and the condition's words.
pub(crate) fn split_guard(words: &[String]) -> (&[String], Option<&[String]>) {
    match words.iter().rposition(|w| w == "if" || w == "unless") {
        Some(at) => (&words[..at], Some(&words[at..])),
        None => (words, None),
    }
}
