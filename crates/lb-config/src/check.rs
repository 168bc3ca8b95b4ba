//! [`Checker`]: what every validation needs (where each value sits, and where to put what is
//! wrong with it) and the checks of single values every schema uses: integers in a range,
//! durations, sizes, keywords, names, words, paths. lb-proxy's schema (`validate`), the shared
//! `global` keys (`supervision`) and lb-tls's schema all check through it, so a value is judged
//! and reported the same way in every file.

use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::address::resolve;
use crate::defaults::{MAX_DURATION, MIN_DURATION};
use crate::locate::{child, Locations, Pos};
use crate::names::parse_keyword;
use crate::units::{format_duration, parse_duration, parse_size};
use crate::Diagnostic;

/// What every check needs: where things are, and where to put what is wrong with them.
#[derive(Debug)]
pub struct Checker<'a> {
    file: &'a str,
    locations: &'a Locations,
    /// The directory relative paths are taken from.
    pub(crate) base: Option<&'a Path>,
    diagnostics: Vec<Diagnostic>,
}

impl<'a> Checker<'a> {
    /// Checks for the file `file` (its name as messages show it), located in `locations`;
    /// relative paths are taken from `base`.
    pub fn new(file: &'a str, locations: &'a Locations, base: Option<&'a Path>) -> Checker<'a> {
        Checker { file, locations, base, diagnostics: Vec::new() }
    }

    /// No problem recorded so far.
    pub fn is_clean(&self) -> bool {
        self.diagnostics.is_empty()
    }

    /// Every problem recorded, in reading order whichever check found it.
    pub fn into_diagnostics(self) -> Vec<Diagnostic> {
        let mut diagnostics = self.diagnostics;
        diagnostics.sort_by_key(|d| (d.line, d.column));
        diagnostics
    }

    /// `Ok` when no problem was recorded, else [`into_diagnostics`](Self::into_diagnostics).
    pub fn finish(self) -> Result<(), Vec<Diagnostic>> {
        if self.is_clean() {
            return Ok(());
        }
        Err(self.into_diagnostics())
    }

    /// The directory relative paths are taken from.
    pub fn base(&self) -> Option<&'a Path> {
        self.base
    }

    /// A path, relative to the configuration's directory unless absolute; `None` (reported)
    /// when empty.
    pub fn path(&mut self, field: &str, text: &str) -> Option<PathBuf> {
        if text.trim().is_empty() {
            self.error(field, "must not be empty");
            return None;
        }
        Some(resolve(self.base, text))
    }

    pub(crate) fn push(&mut self, field: &str, pos: Pos, message: String) {
        self.diagnostics.push(Diagnostic {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            field: field.to_owned(),
            message,
        });
    }

    /// Records a problem with the value at `field` (or its nearest located ancestor).
    pub fn error(&mut self, field: &str, message: impl Into<String>) {
        let pos = self.locations.value(field);
        self.push(field, pos, message.into());
    }

    /// Records a problem found in another file that `field` names (a list or map file): the
    /// diagnostic points at that file's line.
    pub(crate) fn error_in(&mut self, file: &str, line: usize, field: &str, message: impl Into<String>) {
        self.diagnostics.push(Diagnostic {
            file: file.to_owned(),
            line,
            column: 1,
            field: field.to_owned(),
            message: message.into(),
        });
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
    pub fn int(&mut self, parent: &str, key: &str, value: Option<i64>, range: RangeInclusive<i64>) -> Option<i64> {
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
    pub fn duration(&mut self, parent: &str, key: &str, text: Option<&String>) -> Option<Duration> {
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

    /// A size in `range` of `unit`s (`bytes`, a table's `entries`), with k or m; `None` when
    /// absent or invalid (the latter reported).
    pub(crate) fn size(
        &mut self,
        parent: &str,
        key: &str,
        text: Option<&String>,
        range: RangeInclusive<usize>,
        unit: &str,
    ) -> Option<usize> {
        let field = child(parent, key);
        match parse_size(text?, unit) {
            Ok(n) if range.contains(&n) => Some(n),
            Ok(n) => {
                let (low, high) = (range.start(), range.end());
                self.error(&field, format!("must be between {low} and {high} {unit}, got {n}"));
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
    pub fn word(&mut self, parent: &str, key: &str, text: Option<&String>) -> Option<String> {
        let text = text?;
        if text.is_empty() {
            self.error(&child(parent, key), "must not be empty");
        } else if text.chars().any(|c| c.is_whitespace() || c.is_control()) {
            self.error(&child(parent, key), format!("`{text}` must not contain spaces"));
        }
        Some(text.clone())
    }
}
