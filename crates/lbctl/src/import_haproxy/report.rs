//! What the importer tells the operator on standard error, one line per haproxy.cfg line it
//! could not translate (`haproxy.cfg:12: option dontlognull: not translated: why`) or
//! translated with a difference worth knowing (`…: note: why`), in line order.

use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Kind {
    /// The line is not in the output.
    NotTranslated,
    /// The line is in the output, with a difference the operator should know.
    Note,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    pub(crate) line: usize,
    pub(crate) directive: String,
    pub(crate) kind: Kind,
    pub(crate) why: String,
}

#[derive(Debug, Default)]
pub(crate) struct Report {
    items: Vec<Item>,
}

impl Report {
    /// `directive` at `line` is not in the output, because `why`.
    pub(crate) fn error(&mut self, line: usize, directive: impl Into<String>, why: impl Into<String>) {
        self.push(line, directive, Kind::NotTranslated, why);
    }

    /// `directive` at `line` is translated, with the difference `why`.
    pub(crate) fn note(&mut self, line: usize, directive: impl Into<String>, why: impl Into<String>) {
        self.push(line, directive, Kind::Note, why);
    }

    fn push(&mut self, line: usize, directive: impl Into<String>, kind: Kind, why: impl Into<String>) {
        let item = Item { line, directive: directive.into(), kind, why: why.into() };
        // A `defaults` line reaches every proxy that inherits it: said once.
        if !self.items.contains(&item) {
            self.items.push(item);
        }
    }

    pub(crate) fn items(&self) -> &[Item] {
        &self.items
    }

    /// Lines not translated.
    pub(crate) fn untranslated(&self) -> usize {
        self.items.iter().filter(|i| i.kind == Kind::NotTranslated).count()
    }

    /// The report as printed, sorted by line.
    pub(crate) fn render(&self, file: &str) -> String {
        let mut items: Vec<&Item> = self.items.iter().collect();
        items.sort_by_key(|i| (i.line, i.kind));
        let mut out = String::new();
        for item in items {
            let kind = match item.kind {
                Kind::NotTranslated => "not translated",
                Kind::Note => "note",
            };
            let _ = writeln!(out, "{file}:{}: {}: {kind}: {}", item.line, item.directive, item.why);
        }
        out
    }
}
