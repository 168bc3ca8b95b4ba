//! The crate's one error type, and the located message validation produces.

use std::fmt;
use std::io;
use std::path::PathBuf;

/// Why a configuration could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file itself could not be read (missing, unreadable, not UTF-8).
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The file was read but is not a valid configuration: every problem found, in file order.
    #[error("{}", DiagnosticLines(diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
}

impl Error {
    /// The problems found, empty for [`Error::Read`].
    pub fn diagnostics(&self) -> &[Diagnostic] {
        match self {
            Error::Read { .. } => &[],
            Error::Invalid { diagnostics } => diagnostics,
        }
    }
}

/// One problem in a configuration, located like a compiler message:
/// `proxy.yaml:42:18: backends[1].servers[3].address: invalid port 99999`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The file as it was named to [`Config::load`](crate::Config::load) or
    /// [`Config::parse`](crate::Config::parse).
    pub file: String,
    /// 1-based line of the offending value (or of the nearest enclosing node that has one).
    pub line: usize,
    /// 1-based column, counted in characters.
    pub column: usize,
    /// Where in the document: `backends[1].servers[3].address`; empty for the whole document.
    pub field: String,
    pub message: String,
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: ", self.file, self.line, self.column)?;
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.message)
    }
}

/// Diagnostics one per line, as every daemon's "configuration is invalid" message writes them.
#[derive(Debug, Clone, Copy)]
pub struct DiagnosticLines<'a>(pub &'a [Diagnostic]);

impl fmt::Display for DiagnosticLines<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str("\n")?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}
