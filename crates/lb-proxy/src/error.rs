//! The one error type of the lb-proxy library: what can stop a serving process from starting.
//! Per-connection failures are not errors here: they are logged and the connection is closed.

use std::io;

use lb_config::ListenAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("frontend {frontend}: no listening socket for {address} was handed over")]
    MissingListener { frontend: String, address: ListenAddr },

    #[error("listener {address}: {source}")]
    Listener {
        address: ListenAddr,
        #[source]
        source: io::Error,
    },

    #[error("access log: {source}")]
    Log {
        #[source]
        source: io::Error,
    },

    /// A rule that does not compile: validation rules this out for a configuration that was
    /// loaded, so only one built by hand gets it.
    #[error("policy: {0}")]
    Policy(String),
}
