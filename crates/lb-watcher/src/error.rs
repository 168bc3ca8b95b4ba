//! The crate's one error type.

use std::io;
use std::path::PathBuf;

use lb_config::{Diagnostic, DiagnosticLines};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    /// lb-watcher's own configuration is invalid: every problem, `file:line:col: field: message`.
    #[error("{}", DiagnosticLines(diagnostics))]
    Config { diagnostics: Vec<Diagnostic> },
    /// lb-proxy's base configuration (or the file rendered from it) does not load.
    #[error("lb-proxy configuration {}: {source}", path.display())]
    Proxy {
        path: PathBuf,
        #[source]
        source: lb_config::Error,
    },
    #[error("{}: backend `{backend}` is watched (services) but not in this file", path.display())]
    NoBackend { path: PathBuf, backend: String },
    #[error("writing {}: {source}", path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("ZooKeeper {what}: {source}")]
    Zookeeper {
        what: String,
        #[source]
        source: zookeeper_client::Error,
    },
    /// A runtime command was refused or could not be sent; the caller falls back to a reload.
    #[error("runtime command `{line}`: {message}")]
    Runtime { line: String, message: String },
    #[error("reload failed: {message}")]
    Reload { message: String },
    #[error("status endpoint {addr}: {source}")]
    Status {
        addr: std::net::SocketAddr,
        #[source]
        source: io::Error,
    },
}
