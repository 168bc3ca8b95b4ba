//! Reading a configuration: text → raw structs (serde) → typed values (validation), with
//! serde's own errors turned into located diagnostics like validation's.

use std::path::Path;

use crate::locate::{Locations, Pos};
use crate::model::Config;
use crate::raw::RawConfig;
use crate::{render, validate, Diagnostic, Error};

impl Config {
    /// Reads and validates the file at `path`. Diagnostics name the file as given; relative
    /// paths inside it (error files, Unix sockets) are taken from the file's directory.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
        let base = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf));
        parse_in(&text, &path.display().to_string(), base.as_deref())
    }

    /// Parses and validates configuration text; `file_name` is only used in diagnostics.
    /// Relative paths inside it are taken from the current directory.
    pub fn parse(text: &str, file_name: &str) -> Result<Config, Error> {
        let base = std::env::current_dir().ok();
        parse_in(text, file_name, base.as_deref())
    }

    /// The configuration as YAML that [`Config::parse`] reads back to an equal value: every
    /// resolved setting written out (no `defaults:` section), durations like `30s` or `250ms`,
    /// error pages that came from files as their paths (read again on parse).
    pub fn to_yaml(&self) -> String {
        render::to_yaml(self)
    }
}

fn parse_in(text: &str, file: &str, base: Option<&Path>) -> Result<Config, Error> {
    let locations = Locations::scan(text);
    let raw: RawConfig = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => return Err(Error::Invalid { diagnostics: serde_diagnostics(&e, file, &locations) }),
    };
    validate::validate(&raw, file, &locations, base).map_err(|diagnostics| Error::Invalid { diagnostics })
}

/// serde stops at its first error; report it (for any configuration read with serde_yaml and
/// [`Locations`], lb-tls's too), with any duplicate keys found while locating
/// (serde_yaml only says "duplicate field" without saying where).
pub fn serde_diagnostics(e: &serde_yaml::Error, file: &str, locations: &Locations) -> Vec<Diagnostic> {
    let mut diagnostics: Vec<Diagnostic> = locations
        .duplicate_keys
        .iter()
        .map(|dup| Diagnostic {
            file: file.to_owned(),
            line: dup.again.line,
            column: dup.again.column,
            field: dup.path.clone(),
            message: format!("duplicate key (first written at line {})", dup.first.line),
        })
        .collect();
    let (field, message) = split_serde_message(e);
    if diagnostics.is_empty() || !message.starts_with("duplicate field") {
        let pos = match e.location() {
            Some(l) => Pos { line: l.line(), column: l.column() },
            None => locations.value(&field),
        };
        diagnostics.push(Diagnostic { file: file.to_owned(), line: pos.line, column: pos.column, field, message });
    }
    diagnostics.sort_by_key(|d| (d.line, d.column));
    diagnostics
}

/// serde_yaml's message is `path: message at line L column C`; the location goes into the
/// diagnostic's own fields, so both are taken out of the text.
fn split_serde_message(e: &serde_yaml::Error) -> (String, String) {
    let mut text = e.to_string();
    if let Some(l) = e.location() {
        text = text.replacen(&format!(" at line {} column {}", l.line(), l.column()), "", 1);
    }
    let text = text.replace("expected i64", "expected an integer");
    // A path is everything before the first `: `, if that contains no space (messages such as
    // `invalid type: …` do).
    match text.split_once(": ") {
        Some((path, rest)) if !path.is_empty() && !path.contains(' ') => {
            let path = if path == "." { "" } else { path };
            (path.to_owned(), rest.to_owned())
        }
        _ => (String::new(), text),
    }
}
