//! Raw YAML values → the typed [`Config`], reporting every problem found rather than the first.
//!
//! Each section is checked on its own (`global`, `defaults`, each backend, each frontend),
//! falling back to the default for any bad value so that checking can go on; the
//! cross-references between sections (names, binds, backends and their modes) come last.
//! The result is only used when no diagnostic was recorded.

mod backend;
mod frontend;
mod global;
mod links;
mod policy;
mod sections;
mod tables;

use std::path::Path;

use crate::check::Checker;
use crate::locate::{item, Locations};
use crate::model::Config;
use crate::raw::RawConfig;
use crate::Diagnostic;

/// Validates `raw`, whose text was located in `locations`.
pub(crate) fn validate(
    raw: &RawConfig,
    file: &str,
    locations: &Locations,
    base: Option<&Path>,
) -> Result<Config, Vec<Diagnostic>> {
    let mut ctx = Checker::new(file, locations, base);
    for dup in &locations.duplicate_keys {
        let message = format!("duplicate key (first written at line {})", dup.first.line);
        ctx.push(&dup.path, dup.again, message);
    }
    let global = global::global(&mut ctx, raw.global.as_ref());
    let policy = policy::policy(&mut ctx, raw);
    let tables = tables::tables(&mut ctx, raw.tables.as_ref());
    let condition_names = policy.conditions.keys().cloned().collect();
    let list_kinds = policy.lists.iter().map(|(n, l)| (n.clone(), l.kind)).collect();
    let map_names = policy.maps.keys().cloned().collect();
    let names = policy::Names { conditions: &condition_names, lists: &list_kinds, maps: &map_names };
    let defaults = sections::defaults(&mut ctx, raw.defaults.as_ref());
    let raw_backends = raw.backends.as_deref().unwrap_or_default();
    let backends: Vec<_> = raw_backends
        .iter()
        .enumerate()
        .map(|(i, b)| backend::backend(&mut ctx, &item("backends", i), b, &defaults))
        .collect();
    let raw_frontends = raw.frontends.as_deref().unwrap_or_default();
    if raw_frontends.is_empty() {
        ctx.error("frontends", "at least one frontend is required");
    }
    let frontends: Vec<_> = raw_frontends
        .iter()
        .enumerate()
        .map(|(i, f)| frontend::frontend(&mut ctx, &item("frontends", i), f, &defaults, &names, &policy))
        .collect();
    links::check(&mut ctx, &frontends, &backends, &policy);
    tables::check_references(&mut ctx, frontends.iter().map(|c| &c.frontend), &tables);
    if let Some(stats) = &global.stats {
        links::stats_not_bound(&mut ctx, stats.address, &frontends);
    }

    ctx.finish()?;
    let frontends = frontends.into_iter().map(|c| c.frontend).collect();
    Ok(Config { global, frontends, backends, policy, tables })
}
