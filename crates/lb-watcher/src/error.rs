//! The crate's one error type.

use std::io;
use std::path::PathBuf;

use lb_config::Diagnostic;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// lb-watcher's own configuration is invalid: every problem, `file:line:col: field: message`.
    #[error("{}", diagnostics.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    Config { diagnostics: Vec<Diagnostic> },
}
