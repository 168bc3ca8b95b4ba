//! lb-tls terminates TLS for the lb stack: it listens on the public HTTPS port, completes the
//! handshake through the openssl crate (certificates chosen by SNI, OCSP stapling, client
//! certificates, ALPN; the library beneath is AWS-LC by default, OpenSSL by a Cargo feature)
//! and forwards the plaintext to lb-proxy over localhost, behind a PROXY v2 header that
//! carries the client address and the TLS facts. It does what hitch does, and reloads the way
//! lb-proxy does. On a `udp:` frontend it ends QUIC and serves HTTP/3 (quinn, h3, rustls on
//! AWS-LC), forwarding each QUIC connection as HTTP/2 behind the same header with ALPN `h3`.
//!
//! The binary `lb-tls` is lb-supervisor's master and workers ([`TlsDaemon`]): the master binds
//! the frontend sockets and passes them by fd to each worker, which serves them with [`start`].
//! A reload (`lbctl reload`, SIGHUP) starts a worker on the configuration and certificate files
//! as they are then; a file that does not load fails the reload and leaves the current worker
//! serving. Session tickets are made with keys the master owns and hands to every worker, and
//! the session-ID cache goes from each worker to the next, so sessions resume across reloads. Each worker counts connections, handshakes (resumed, by
//! protocol and cipher) and failed handshakes by reason: `lbctl -f lb-tls.yaml show stat`,
//! `show info`, and /metrics on `global.metrics_address`; the totals carry on across reloads.
//! Tests may call [`run`] with port-0 sockets.
//!
//! Main types: [`TlsDaemon`], [`Config`] (loaded with its TLS contexts built), [`Server`],
//! [`Error`].
//!
//! # Layout
//! - `config`: the schema (`raw` serde structs, `validate` with `file:line:col` diagnostics)
//!   and the typed values; `write`: a [`Draft`] configuration written out as YAML.
//! - `certs`: PEM files (key, chain), certificate directories, host names, OCSP responses.
//! - `sni`: exact > wildcard > default certificate selection.
//! - `tickets`: session-ticket keys (the master's, or `ticket_key_files`), swapped while serving.
//! - `context`: OpenSSL contexts per certificate and the servername switch.
//! - `sessions`: the session-ID cache of each frontend, handed to the next worker at a reload.
//! - `serve`: accept loops, the connection limit, the drain.
//! - `conn`: one connection: PROXY header in, handshake, backend, PROXY header out, copy.
//! - `copy`: both directions of a connection, with a buffer only while bytes wait.
//! - `hops`: `backend.multiplex`: a multiplexed hop connection per worker thread, replaced when
//!   it ends or lb-proxy's worker drains.
//! - `quic`: HTTP/3 on a UDP frontend (quinn, h3, rustls on AWS-LC), each QUIC connection
//!   forwarded as HTTP/2 over one hop connection behind a PROXY v2 header with ALPN `h3`.
//! - `counted`: the backend stream that counts bytes each way.
//! - `stream`: the client's TLS stream under tokio (the openssl crate's, polled with the
//!   task's waker), and the flush of the session ticket after a handshake.
//! - `drained`: the client's TLS stream, read only when there may be something to read.
//! - `stats`: the counters, their hand-over across reloads, and their text (`show stat`,
//!   `show info`, Prometheus).
//! - `runtime`: the runtime commands over `stats`; `metrics`: /metrics over HTTP.
//! - `proxy_header`: PROXY v1/v2 written (with TLVs) and read (`proxy_proxy`).
//! - `ratelog`: failure lines at a bounded rate.
//! - `daemon`: [`TlsDaemon`], what lb-supervisor runs.
//! - `library`: the TLS library beneath the openssl crate (one Cargo feature picks it), the
//!   one place that knows which.
//! - `ffi`: the calls the openssl crate does not wrap; the only module with `unsafe`.
#![deny(unsafe_code)]

mod certs;
mod config;
mod conn;
mod context;
mod copy;
mod counted;
mod daemon;
mod drained;
mod error;
mod ffi;
mod hops;
mod library;
mod metrics;
mod proxy_header;
mod quic;
mod ratelog;
mod runtime;
mod serve;
mod sessions;
mod sni;
mod stats;
mod stream;
#[cfg(test)]
mod test_server;
mod tickets;

pub use config::{
    Backend, BackendAddr, CertSource, ClientCert, Config, Draft, DraftFrontend, DraftTls, Frontend, Global, Protocol,
    QuicSettings, TlsSettings, WriteProxy,
};
pub use daemon::TlsDaemon;
pub use error::Error;
pub use lb_supervisor::{shutdown_channel, Listener, Listeners, Phase, Shutdown, ShutdownHandle};
pub use library::tls_library;
/// The UDP datagram entry point of an HTTP/3 frontend under arbitrary input (fuzz/).
pub use quic::fuzz::datagrams as fuzz_quic_datagrams;
pub use serve::{run, start, Server};
