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
mod sections;

use std::ops::RangeInclusive;
use std::path::Path;
use std::time::Duration;

use crate::defaults::{MAX_DURATION, MIN_DURATION};
use crate::locate::{child, item, Locations, Pos};
use crate::model::Config;
use crate::names::parse_keyword;
use crate::raw::RawConfig;
use crate::units::{format_duration, parse_duration, parse_size};
use crate::Diagnostic;

/// Validates `raw`, whose text was located in `locations`.
pub(crate) fn validate(
    raw: &RawConfig,
    file: &str,
    locations: &Locations,
    base: Option<&Path>,
) -> Result<Config, Vec<Diagnostic>> {
    let mut ctx = Ctx { file, locations, base, diagnostics: Vec::new() };
    for dup in &locations.duplicate_keys {
        let message = format!("duplicate key (first written at line {})", dup.first.line);
        ctx.push(&dup.path, dup.again, message);
    }
    let global = global::global(&mut ctx, raw.global.as_ref());
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
        .map(|(i, f)| frontend::frontend(&mut ctx, &item("frontends", i), f, &defaults))
        .collect();
    links::check(&mut ctx, raw_frontends, &frontends, &backends);
    if let Some(stats) = &global.stats {
        links::stats_not_bound(&mut ctx, stats.address, &frontends);
    }

    if ctx.diagnostics.is_empty() {
        let frontends = frontends.into_iter().map(|c| c.frontend).collect();
        Ok(Config { global, frontends, backends })
    } else {
        // Report in reading order, whichever check found the problem.
        ctx.diagnostics.sort_by_key(|d| (d.line, d.column));
        Err(ctx.diagnostics)
    }
}

/// What every check needs: where things are, and where to put what is wrong with them.
pub(crate) struct Ctx<'a> {
    file: &'a str,
    locations: &'a Locations,
    /// The directory relative paths are taken from.
    pub(crate) base: Option<&'a Path>,
    diagnostics: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn push(&mut self, field: &str, pos: Pos, message: String) {
        self.diagnostics.push(Diagnostic {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            field: field.to_owned(),
            message,
        });
    }

    /// Records a problem with the value at `field` (or its nearest located ancestor).
    pub(crate) fn error(&mut self, field: &str, message: impl Into<String>) {
        let pos = self.locations.value(field);
        self.push(field, pos, message.into());
    }

    /// Records a problem with the key naming `field` (an `error_files` status, say).
    pub(crate) fn key_error(&mut self, field: &str, message: impl Into<String>) {
        let pos = self.locations.key(field);
        self.push(field, pos, message.into());
    }

    /// The line `field` starts on, to point from one diagnostic at another place.
    pub(crate) fn line_of(&self, field: &str) -> usize {
        self.locations.value(field).line
    }

    /// An integer in `range`; `None` when absent or out of range (the latter reported).
    pub(crate) fn int(
        &mut self,
        parent: &str,
        key: &str,
        value: Option<i64>,
        range: RangeInclusive<i64>,
    ) -> Option<i64> {
        let value = value?;
        if range.contains(&value) {
            return Some(value);
        }
        let message = if *range.end() == i64::MAX {
            format!("must be at least {}, got {value}", range.start())
        } else {
            format!("must be between {} and {}, got {value}", range.start(), range.end())
        };
        self.error(&child(parent, key), message);
        None
    }

    /// A connection limit: at least 1.
    pub(crate) fn limit(&mut self, parent: &str, key: &str, value: Option<i64>) -> Option<usize> {
        self.int(parent, key, value, 1..=i64::MAX).and_then(|n| usize::try_from(n).ok())
    }

    /// A duration between 1ms and 24h; `None` when absent or invalid (the latter reported).
    pub(crate) fn duration(&mut self, parent: &str, key: &str, text: Option<&String>) -> Option<Duration> {
        let field = child(parent, key);
        match parse_duration(text?) {
            Ok(d) if (MIN_DURATION..=MAX_DURATION).contains(&d) => Some(d),
            Ok(d) => {
                let got = format_duration(d);
                self.error(&field, format!("must be between 1ms and 24h, got {got}"));
                None
            }
            Err(message) => {
                self.error(&field, message);
                None
            }
        }
    }

    /// A byte size in `range`; `None` when absent or invalid (the latter reported).
    pub(crate) fn size(
        &mut self,
        parent: &str,
        key: &str,
        text: Option<&String>,
        range: RangeInclusive<usize>,
    ) -> Option<usize> {
        let field = child(parent, key);
        match parse_size(text?) {
            Ok(n) if range.contains(&n) => Some(n),
            Ok(n) => {
                let (low, high) = (range.start(), range.end());
                self.error(&field, format!("must be between {low} and {high} bytes, got {n}"));
                None
            }
            Err(message) => {
                self.error(&field, message);
                None
            }
        }
    }

    /// One of the values in `table`; `None` when absent or unknown (the latter reported).
    pub(crate) fn keyword<T: Copy>(
        &mut self,
        parent: &str,
        key: &str,
        text: Option<&String>,
        table: &[(&'static str, T)],
    ) -> Option<T> {
        let what = key.replace('_', " ");
        match parse_keyword(table, &what, text?) {
            Ok(value) => Some(value),
            Err(message) => {
                self.error(&child(parent, key), message);
                None
            }
        }
    }

    /// A required section or entry name: letters, digits, `_`, `.` and `-`.
    pub(crate) fn name(&mut self, parent: &str, text: Option<&String>) -> String {
        let field = child(parent, "name");
        let Some(name) = text else {
            self.error(parent, "missing `name`");
            return String::new();
        };
        if name.is_empty() {
            self.error(&field, "must not be empty");
        } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
            self.error(&field, format!("invalid name `{name}`: use only letters, digits, `_`, `.` and `-`"));
        }
        name.clone()
    }

    /// Optional free text that, when given, must not be empty or contain whitespace.
    pub(crate) fn word(&mut self, parent: &str, key: &str, text: Option<&String>) -> Option<String> {
        let text = text?;
        if text.is_empty() {
            self.error(&child(parent, key), "must not be empty");
        } else if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.error(&child(parent, key), format!("`{text}` must not contain spaces"));
        }
        Some(text.clone())
    }
}
