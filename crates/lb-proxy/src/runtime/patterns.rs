//! The runtime commands on lists and maps, in HAProxy's words (`show acl`, `add acl`, `del acl`,
//! `clear acl`, `show map`, `add map`, `set map`, `del map`, `clear map`), and `show rules`.
//!
//! A list or map is named as HAProxy names them, `#<id>` or its file's path, or by its name in
//! the configuration. A change applies to every connection at the next lookup; a list or map
//! from a file is written back to that file first, and if that fails nothing changes. Entries
//! are shown with a reference `#<n>` (their place in the list) that `del`/`set` accept.

use lb_config::{check_map_entry, parse_list_entry};
use lb_supervisor::RuntimeResult;

use super::ProxyRuntime;
use crate::policy::Patterns;

const UNKNOWN_ACL: &str = "Unknown ACL identifier. Please use #<id> or <file>.";
const UNKNOWN_MAP: &str = "Unknown map identifier. Please use #<id> or <file>.";

/// `Some` for the commands of this module.
pub(super) fn command(rt: &ProxyRuntime, words: &[&str]) -> Option<RuntimeResult> {
    let patterns: &Patterns = &rt.proxy.patterns;
    Some(match words {
        ["show", "acl"] => RuntimeResult::ok(list_of(patterns.lists().iter().map(|(n, c)| (n.as_str(), c.file.as_deref(), c.snapshot().entries.len())))),
        ["show", "acl", acl] => match patterns.find_list(acl) {
            Some((_, _, cell)) => RuntimeResult::ok(entries(cell.snapshot().entries.iter().map(|e| (e.as_str(), None)))),
            None => RuntimeResult::refused(UNKNOWN_ACL),
        },
        ["add", "acl", acl, value @ ..] if !value.is_empty() => change_list(patterns, acl, |cell, entries| {
            let entry = parse_list_entry(cell.kind, &value.join(" "))?;
            entries.push(entry);
            Ok(())
        }),
        ["del", "acl", acl, value @ ..] if !value.is_empty() => change_list(patterns, acl, |cell, entries| {
            // `10.0.0.1/32` is the entry `10.0.0.1`: compared as the list keeps entries.
            let value = value.join(" ");
            let value = if value.starts_with('#') { value } else { parse_list_entry(cell.kind, &value).unwrap_or(value) };
            let at = position(entries.iter().map(String::as_str), &value)?;
            entries.remove(at);
            Ok(())
        }),
        ["clear", "acl", acl] => change_list(patterns, acl, |_, entries| {
            entries.clear();
            Ok(())
        }),
        ["add" | "del" | "clear", "acl", ..] => RuntimeResult::refused(
            "Usage: add acl <acl> <pattern>, del acl <acl> <pattern>|#<ref>, clear acl <acl>.",
        ),
        ["show", "map"] => RuntimeResult::ok(list_of(patterns.maps().iter().map(|(n, c)| (n.as_str(), c.file.as_deref(), c.snapshot().entries.len())))),
        ["show", "map", map] => match patterns.find_map(map) {
            Some((_, _, cell)) => {
                RuntimeResult::ok(entries(cell.snapshot().entries.iter().map(|(k, v)| (k.as_str(), Some(v.as_str())))))
            }
            None => RuntimeResult::refused(UNKNOWN_MAP),
        },
        ["add", "map", map, key, value @ ..] if !value.is_empty() => change_map(patterns, map, |entries| {
            let value = value.join(" ");
            check_map_entry(key, &value)?;
            entries.push(((*key).to_owned(), value));
            Ok(())
        }),
        ["set", "map", map, key, value @ ..] if !value.is_empty() => change_map(patterns, map, |entries| {
            let value = value.join(" ");
            check_map_entry(key, &value)?;
            let at = position(entries.iter().map(|(k, _)| k.as_str()), key)?;
            entries[at].1 = value;
            Ok(())
        }),
        ["del", "map", map, key] => change_map(patterns, map, |entries| {
            let at = position(entries.iter().map(|(k, _)| k.as_str()), key)?;
            entries.remove(at);
            Ok(())
        }),
        ["clear", "map", map] => change_map(patterns, map, |entries| {
            entries.clear();
            Ok(())
        }),
        ["add" | "set" | "del" | "clear", "map", ..] => RuntimeResult::refused(
            "Usage: add map <map> <key> <value>, set map <map> <key>|#<ref> <value>, del map <map> <key>|#<ref>, clear map <map>.",
        ),
        ["show", "rules", rest @ ..] => show_rules(rt, rest),
        _ => return None,
    })
}

/// `# id (file) description` and a line per list or map.
fn list_of<'a>(items: impl Iterator<Item = (&'a str, Option<&'a std::path::Path>, usize)>) -> String {
    let mut out = String::from("# id (file) description\n");
    for (i, (name, file, count)) in items.enumerate() {
        let file = file.map_or_else(|| name.to_owned(), |f| f.display().to_string());
        let source = if file == name { "inline".to_owned() } else { format!("file '{file}'") };
        out.push_str(&format!("{i} ({file}) {name}: {source}, entry_cnt={count}\n"));
    }
    out
}

/// `#<ref> <entry> [<value>]` a line.
fn entries<'a>(items: impl Iterator<Item = (&'a str, Option<&'a str>)>) -> String {
    let mut out = String::new();
    for (i, (key, value)) in items.enumerate() {
        out.push_str(&format!("#{i} {key}"));
        if let Some(v) = value {
            out.push(' ');
            out.push_str(v);
        }
        out.push('\n');
    }
    out
}

/// Where `key` is: the first equal entry, else `#<ref>`.
fn position<'a>(keys: impl Iterator<Item = &'a str>, key: &str) -> Result<usize, String> {
    let keys: Vec<&str> = keys.collect();
    if let Some(at) = keys.iter().position(|k| *k == key) {
        return Ok(at);
    }
    match key.strip_prefix('#').and_then(|r| r.parse::<usize>().ok()) {
        Some(at) if at < keys.len() => Ok(at),
        _ => Err("Key not found.".to_owned()),
    }
}

fn change_list(
    patterns: &Patterns,
    acl: &str,
    change: impl FnOnce(&crate::policy::ListCell, &mut Vec<String>) -> Result<(), String>,
) -> RuntimeResult {
    let Some((_, _, cell)) = patterns.find_list(acl) else { return RuntimeResult::refused(UNKNOWN_ACL) };
    let mut entries = cell.snapshot().entries.clone();
    if let Err(message) = change(cell, &mut entries) {
        return RuntimeResult::refused(message);
    }
    match cell.replace(entries) {
        Ok(()) => RuntimeResult::ok(""),
        Err(e) => {
            RuntimeResult::refused(format!("Cannot write {}: {e}; nothing changed.", file_name(cell.file.as_deref())))
        }
    }
}

fn change_map(
    patterns: &Patterns,
    map: &str,
    change: impl FnOnce(&mut Vec<(String, String)>) -> Result<(), String>,
) -> RuntimeResult {
    let Some((_, _, cell)) = patterns.find_map(map) else { return RuntimeResult::refused(UNKNOWN_MAP) };
    let mut entries = cell.snapshot().entries.clone();
    if let Err(message) = change(&mut entries) {
        return RuntimeResult::refused(message);
    }
    match cell.replace(entries) {
        Ok(()) => RuntimeResult::ok(""),
        Err(e) => {
            RuntimeResult::refused(format!("Cannot write {}: {e}; nothing changed.", file_name(cell.file.as_deref())))
        }
    }
}

fn file_name(file: Option<&std::path::Path>) -> String {
    file.map_or_else(|| "the file".to_owned(), |f| f.display().to_string())
}

/// `show rules [<frontend>]`: every rule of every frontend (or of one) with its hits.
fn show_rules(rt: &ProxyRuntime, args: &[&str]) -> RuntimeResult {
    let which = match args {
        [] => None,
        [name] => Some(*name),
        _ => return RuntimeResult::refused("Usage: show rules [<frontend>]."),
    };
    let frontends: Vec<_> = rt.proxy.frontends.iter().filter(|fe| which.is_none_or(|w| w == fe.name())).collect();
    if which.is_some() && frontends.is_empty() {
        return RuntimeResult::refused("No such frontend.");
    }
    let mut out = String::from("# frontend kind index action hits\n");
    for fe in frontends {
        for (kind, index, action, hits) in fe.policy.hits() {
            out.push_str(&format!("{} {kind} {index} {action} {hits}\n", fe.name()));
        }
    }
    RuntimeResult::ok(out)
}
