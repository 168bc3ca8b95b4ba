//! Checks across sections: unique names and binds, rules and default backends that name an
//! existing backend of the same mode.

use std::collections::HashMap;

use super::frontend::Checked;
use crate::check::Checker;
use crate::locate::{child, item};
use crate::model::{Backend, ListenAddr, Mode};
use crate::policy::{Policy, RouteTarget};

pub(super) fn check(ctx: &mut Checker<'_>, frontends: &[Checked], backends: &[Backend], policy: &Policy) {
    let names = frontends.iter().map(|c| c.frontend.name.as_str());
    unique_names(ctx, "frontends", "frontend", names);
    unique_names(ctx, "backends", "backend", backends.iter().map(|b| b.name.as_str()));
    unique_binds(ctx, frontends);

    for (i, checked) in frontends.iter().enumerate() {
        let path = item("frontends", i);
        let frontend = &checked.frontend;
        if let Some(name) = &frontend.default_backend {
            reference(ctx, &child(&path, "default_backend"), frontend.mode, name, backends);
        }
        for (j, rule) in frontend.rules.iter().enumerate() {
            let rule_path = item(&child(&path, "rules"), j);
            if frontend.mode == Mode::Tcp && (rule.path_prefix.is_some() || rule.host.is_some() || rule.guard.is_some())
            {
                ctx.error(
                    &rule_path,
                    "a tcp frontend cannot route by `path_prefix`, `host` or conditions (those are HTTP); \
                     use `default_backend`",
                );
            }
            let field = child(&rule_path, "backend");
            match &rule.backend {
                RouteTarget::Backend(name) => reference(ctx, &field, frontend.mode, name, backends),
                RouteTarget::Map { map, default, .. } => {
                    if let Some(default) = default {
                        reference(ctx, &child(&field, "default"), frontend.mode, default, backends);
                    }
                    // Every value of a map that routes must name a backend: a typo found now
                    // rather than as requests falling through to the default.
                    for (key, value) in policy.maps.get(map).map(|m| m.entries.as_slice()).unwrap_or_default() {
                        if !backends.iter().any(|b| &b.name == value) {
                            ctx.error(&field, format!("map `{map}`: key `{key}` names `{value}`, which is no backend"));
                        }
                    }
                }
            }
        }
        let http_rules = !frontend.http_request.is_empty() || !frontend.http_response.is_empty();
        if frontend.mode == Mode::Tcp && (http_rules || frontend.unique_id.is_some()) {
            ctx.error(&path, "`http_request`, `http_response` and `unique_id` are for http frontends");
        }
    }
}

fn unique_names<'a>(ctx: &mut Checker<'_>, section: &str, what: &str, names: impl Iterator<Item = &'a str>) {
    let mut first: HashMap<&str, String> = HashMap::new();
    for (i, name) in names.enumerate() {
        let field = child(&item(section, i), "name");
        if name.is_empty() {
            continue;
        }
        match first.get(name) {
            Some(earlier) => {
                let line = ctx.line_of(earlier);
                ctx.error(&field, format!("duplicate {what} name `{name}` (first at line {line})"));
            }
            None => {
                first.insert(name, field);
            }
        }
    }
}

fn unique_binds(ctx: &mut Checker<'_>, frontends: &[Checked]) {
    let mut first: HashMap<&ListenAddr, (&str, &str)> = HashMap::new();
    for checked in frontends {
        let frontend = &checked.frontend;
        for (bind, field) in frontend.binds.iter().zip(&checked.bind_fields) {
            match first.get(&bind.address) {
                Some((owner, earlier)) => {
                    let line = ctx.line_of(earlier);
                    let message = format!("`{}` is already bound by frontend `{owner}` (line {line})", bind.address);
                    ctx.error(field, message);
                }
                None => {
                    first.insert(&bind.address, (&frontend.name, field));
                }
            }
        }
    }
}

/// The stats listener needs an address of its own: a frontend on it would share its socket.
pub(super) fn stats_not_bound(ctx: &mut Checker<'_>, address: std::net::SocketAddr, frontends: &[Checked]) {
    let stats = ListenAddr::Tcp(address);
    for checked in frontends {
        if checked.frontend.binds.iter().any(|b| b.address == stats) {
            let message = format!("`{address}` is also bound by frontend `{}`", checked.frontend.name);
            ctx.error("global.stats.address", message);
        }
    }
}

/// `name`, referred to from `field` by a frontend in `mode`, must be a backend in that mode.
fn reference(ctx: &mut Checker<'_>, field: &str, mode: Mode, name: &str, backends: &[Backend]) {
    match backends.iter().find(|b| b.name == name) {
        None => ctx.error(field, format!("no backend named `{name}`")),
        Some(backend) if backend.mode != mode => {
            ctx.error(field, format!("frontend mode {mode} but backend `{name}` is {}", backend.mode))
        }
        Some(_) => {}
    }
}
