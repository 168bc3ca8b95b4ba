//! The one error type of lb-supervisor.

use std::io;
use std::path::PathBuf;

use crate::ListenAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot bind {address}: {source}")]
    Bind {
        address: ListenAddr,
        #[source]
        source: io::Error,
    },

    #[error("control socket {path}: {source}")]
    ControlSocket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("control socket {path}: malformed answer: {source}")]
    ControlProtocol {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("worker channel: {source}")]
    Channel {
        #[source]
        source: io::Error,
    },

    #[error("starting worker {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{what}: {source}")]
    Privileges {
        what: String,
        #[source]
        source: nix::Error,
    },

    #[error("sd_notify to {socket}: {source}")]
    Notify {
        socket: String,
        #[source]
        source: io::Error,
    },
}
