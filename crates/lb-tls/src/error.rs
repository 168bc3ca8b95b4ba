//! The crate's one error type.

use std::io;
use std::path::PathBuf;

use lb_config::{Diagnostic, DiagnosticLines};
use lb_supervisor::ListenAddr;

/// Why lb-tls could not load its configuration or start serving.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A file (the configuration, a certificate, an OCSP response, a directory) could not be read.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// The configuration is not valid: every problem found, as `file:line:col: field: message`.
    #[error("{}", DiagnosticLines(diagnostics))]
    Invalid { diagnostics: Vec<Diagnostic> },
    /// A certificate file that does not hold a usable certificate and key.
    #[error("{}: {reason}", path.display())]
    Pem { path: PathBuf, reason: String },
    /// An OCSP response file that is not a DER OCSP response.
    #[error("{}: {reason}", path.display())]
    Ocsp { path: PathBuf, reason: String },
    /// The socket for a frontend was not handed over.
    #[error("no listening socket for frontend {address}")]
    MissingListener { address: ListenAddr },
    /// A socket handed over could not be used.
    #[error("listening socket {address}: {source}")]
    Listener {
        address: ListenAddr,
        #[source]
        source: io::Error,
    },
}
