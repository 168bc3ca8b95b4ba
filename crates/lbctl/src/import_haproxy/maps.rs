//! `use_backend %[…,map(FILE,DEFAULT)]`: a backend chosen by a map file, into a routing rule
//! whose target is a named map under `maps:`.

use std::path::PathBuf;

use lb_config::{Fetch, MapDef, MapMatch, RouteTarget};

use super::condition::{unique, Shared};

/// `%[FETCH[,lower],map(FILE[,DEFAULT])]` (or `map_str`, `map_beg`) into a map target.
pub(crate) fn map_target(expr: &str, shared: &mut Shared) -> Result<RouteTarget, String> {
    let not = |why: &str| format!("`%[{expr}]`: {why}");
    let mut parts = expr.split(',');
    let key = match parts.next().unwrap_or("").trim() {
        "req.hdr(host)" | "hdr(host)" | "req.fhdr(host)" => Fetch::Host,
        "path" => Fetch::Path,
        "url" => Fetch::Uri,
        _ => return Err(not("lb-proxy looks maps up by host, path or url")),
    };
    let mut ignore_case = false;
    let rest: Vec<&str> = parts.collect();
    let mut i = 0;
    if rest.first() == Some(&"lower") {
        ignore_case = true;
        i = 1;
    }
    let call = rest[i..].join(",");
    let (function, args) = call.split_once('(').ok_or_else(|| not("expected a map() converter"))?;
    let args = args.strip_suffix(')').ok_or_else(|| not("`(` without its `)`"))?;
    let matching = match function {
        "map" | "map_str" => MapMatch::Exact,
        "map_beg" => MapMatch::Prefix,
        other => return Err(not(&format!("`{other}`: lb-proxy's maps match exactly or by prefix"))),
    };
    let (file, default) = match args.split_once(',') {
        Some((f, d)) => (f.trim(), Some(d.trim().to_owned())),
        None => (args.trim(), None),
    };
    let path = PathBuf::from(file);
    let maps = &mut shared.policy.maps;
    let existing = maps.iter().find(|(_, m)| m.file.as_deref() == Some(path.as_path()) && m.matching == matching);
    let name = match existing {
        Some((name, _)) => name.clone(),
        None => {
            let stem = path.file_stem().map_or_else(
                || "map".to_owned(),
                |s| s.to_string_lossy().replace(|c: char| !c.is_ascii_alphanumeric() && c != '_' && c != '-', "_"),
            );
            let name = unique(&stem, |n| maps.contains_key(n));
            maps.insert(name.clone(), MapDef { matching, file: Some(path), entries: Vec::new(), ignore_case });
            name
        }
    };
    Ok(RouteTarget::Map { map: name, key, default })
}
