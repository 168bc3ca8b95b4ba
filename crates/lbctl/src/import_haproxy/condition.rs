//! ACLs (`acl NAME FETCH [flags] VALUES…`, anonymous `{ … }`) and the conditions of
//! `use_backend … if|unless …`, translated into lb-proxy's routing rules: a rule holds a host
//! (equal, case-insensitively, port removed) and a path prefix, both of which must hold, so a
//! condition becomes the list of (host, prefix) pairs any of which chooses the backend.
//! ORs (`||`, several values, several `acl` lines of one name) make more pairs, ANDs combine
//! them. What has no such form (negation, `unless`, other fetches, other matches) is refused
//! with the reason.

use std::collections::HashMap;

use super::lexer::Line;
use super::report::Report;

/// One way for a condition to hold: every part given must hold.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Alternative {
    pub(crate) host: Option<String>,
    pub(crate) path_prefix: Option<String>,
}

/// The named ACLs of one proxy: each name's alternatives, or why it cannot be used.
#[derive(Debug, Default)]
pub(crate) struct Acls {
    named: HashMap<String, Result<Vec<Alternative>, String>>,
}

impl Acls {
    /// `acl NAME FETCH [flags] VALUES…`: lines of one name add alternatives (HAProxy ORs them).
    pub(crate) fn add(&mut self, line: &Line, report: &mut Report) {
        let name = line.word(1);
        if name.is_empty() || line.words.len() < 3 {
            report.error(line.number, "acl", "expected `acl NAME FETCH [flags] VALUES…`");
            return;
        }
        let parsed = criterion(&line.words[2..], line.number, report);
        let entry = self.named.entry(name.to_owned()).or_insert_with(|| Ok(Vec::new()));
        match (entry, parsed) {
            (Ok(list), Ok(more)) => list.extend(more),
            (entry @ Ok(_), Err(why)) => *entry = Err(why),
            (Err(_), _) => {}
        }
    }
}

const NOT_ROUTING: &str = "lb-proxy's routing rules match a Host header (exactly) and a path prefix";

/// `FETCH [-i] [-m str|beg] [--] VALUES…` into alternatives.
fn criterion(words: &[String], at: usize, report: &mut Report) -> Result<Vec<Alternative>, String> {
    let fetch = words[0].as_str();
    let mut ignore_case = false;
    let mut matcher: Option<&str> = None;
    let mut i = 1;
    while let Some(flag) = words.get(i).filter(|w| w.starts_with('-')) {
        match flag.as_str() {
            "-i" => ignore_case = true,
            "-m" => {
                i += 1;
                matcher = words.get(i).map(String::as_str);
            }
            "--" => {
                i += 1;
                break;
            }
            "-f" => return Err("pattern files (`-f`) need lb-proxy's lists: not in this lb-proxy".to_owned()),
            other => return Err(format!("flag `{other}`: {NOT_ROUTING}")),
        }
        i += 1;
    }
    let values = &words[i.min(words.len())..];
    if values.is_empty() {
        return Err(format!("`{fetch}` without values: {NOT_ROUTING}"));
    }
    let lower = fetch.to_ascii_lowercase();
    let is_host = matches!(lower.as_str(), "hdr(host)" | "req.hdr(host)" | "hdr(host,-1)" | "req.hdr(host,-1)");
    match (is_host, lower.as_str(), matcher) {
        (true, _, None | Some("str")) => {
            if let Some(with_port) = values.iter().find(|v| v.contains(':')) {
                return Err(format!("`{with_port}`: lb-proxy compares the Host without its port"));
            }
            if !ignore_case {
                report.note(at, "acl", "lb-proxy compares the Host case-insensitively (HAProxy without -i does not)");
            }
            Ok(values.iter().map(|v| Alternative { host: Some(v.to_ascii_lowercase()), path_prefix: None }).collect())
        }
        (false, "path_beg", None) | (false, "path", Some("beg")) if !ignore_case => {
            Ok(values.iter().map(|v| Alternative { host: None, path_prefix: Some(v.clone()) }).collect())
        }
        _ => Err(format!("`{}`: {NOT_ROUTING}", words.join(" "))),
    }
}

/// The condition after `if`/`unless` (`words` from the keyword on) into alternatives.
pub(crate) fn condition(
    words: &[String],
    acls: &Acls,
    at: usize,
    report: &mut Report,
) -> Result<Vec<Alternative>, String> {
    match words.first().map(String::as_str) {
        Some("if") => {}
        Some("unless") => return Err(format!("`unless`: {NOT_ROUTING}, not their negation")),
        _ => return Err("expected `if` or `unless` after the backend".to_owned()),
    }
    let mut any: Vec<Alternative> = Vec::new();
    let mut all: Vec<Alternative> = vec![Alternative::default()];
    let mut i = 1;
    while i < words.len() {
        let word = words[i].as_str();
        let term = match word {
            "||" | "or" => {
                any.append(&mut all);
                all = vec![Alternative::default()];
                i += 1;
                continue;
            }
            w if w.starts_with('!') => return Err(format!("`{w}`: {NOT_ROUTING}, not their negation")),
            "{" => {
                let end = words[i..].iter().position(|w| w == "}").map(|p| p + i).ok_or("`{` is not closed")?;
                let term = criterion(&words[i + 1..end], at, report)?;
                i = end + 1;
                term
            }
            name => {
                i += 1;
                match acls.named.get(name) {
                    Some(Ok(list)) => list.clone(),
                    Some(Err(why)) => return Err(format!("acl `{name}`: {why}")),
                    None => return Err(format!("no acl named `{name}` (built-in ACLs are not translated)")),
                }
            }
        };
        all = and(&all, &term);
    }
    any.append(&mut all);
    Ok(any)
}

/// Every pair of one alternative from each side that can hold together.
fn and(left: &[Alternative], right: &[Alternative]) -> Vec<Alternative> {
    let mut out = Vec::new();
    for a in left {
        for b in right {
            let host = match (&a.host, &b.host) {
                (Some(x), Some(y)) if x != y => continue,
                (x, y) => x.clone().or_else(|| y.clone()),
            };
            let path_prefix = match (&a.path_prefix, &b.path_prefix) {
                (Some(x), Some(y)) if x.starts_with(y.as_str()) => Some(x.clone()),
                (Some(x), Some(y)) if y.starts_with(x.as_str()) => Some(y.clone()),
                (Some(_), Some(_)) => continue,
                (x, y) => x.clone().or_else(|| y.clone()),
            };
            let alternative = Alternative { host, path_prefix };
            if !out.contains(&alternative) {
                out.push(alternative);
            }
        }
    }
    out
}
