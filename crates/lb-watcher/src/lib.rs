//! lb-watcher follows the API servers registered in ZooKeeper and keeps lb-proxy's backends
//! in step with them, with hysteresis, without a client losing a connection.
//!
//! API servers register as ephemeral nodes (registrar or nerve JSON). For each configured
//! service (a ZooKeeper path feeding an lb-proxy backend) lb-watcher reads the nodes into
//! servers, lets the [`hysteresis::State`] decide when a change is real (collect window, hold,
//! removal throttle, never an empty backend), renders lb-proxy's configuration from a base
//! file through lb-config's types, writes it atomically, and applies it: runtime commands for
//! membership changes (no new worker), a reload for anything else. ZooKeeper being away never
//! means "no servers": nothing is written until it is back and has been read again.
//!
//! The binary is `lb-watcher -f etc/lb-watcher.yaml`; tests and tools drive [`run`] directly.
//! Main types: [`config::Config`], [`hysteresis::State`], [`node::Member`], [`apply::Applier`],
//! [`status::Status`], [`register::Registration`] (the registrar side, used by `lbctl
//! register`), [`Error`].
//!
//! # Layout
//! - `config`: the YAML schema, validated with `file:line:col: field: message`.
//! - `zk`: the ZooKeeper session: watches, full reads, reconnection and expiry.
//! - `node`: registration JSON → server address.
//! - `hysteresis`: the pure decision state machine.
//! - `render`, `write`: base + servers → lb-proxy YAML; atomic replacement of the file.
//! - `apply`: runtime commands (`show servers state` diff) or reload, with retries.
//! - `engine`: the main loop tying them together, drift repair.
//! - `status`: `/status` and `/metrics`.
//! - `register`: keeping an ephemeral registration alive.
//! - `fleet`: this lb-proxy among the fleet's live nodes, and its share of fleet-wide limits.
#![forbid(unsafe_code)]

pub mod apply;
pub mod config;
mod engine;
mod error;
mod fleet;
pub mod hysteresis;
pub mod node;
pub mod register;
pub mod render;
pub mod status;
pub mod write;
pub mod zk;

pub use engine::{run, run_with};
pub use error::Error;
