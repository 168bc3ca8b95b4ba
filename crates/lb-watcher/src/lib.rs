//! lb-watcher follows the API servers registered in ZooKeeper and keeps lb-proxy's backends
//! in step, with hysteresis, without a client losing a connection.
#![forbid(unsafe_code)]

pub mod config;
mod error;
pub mod hysteresis;
pub mod node;

pub use error::Error;
