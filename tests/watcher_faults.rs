//! lb-watcher under ZooKeeper faults, with a real ZooKeeper (standalone, or a three-member
//! ensemble where the claim is about an ensemble), the real lb-proxy where the claim is about
//! its servers and clients, and the real lb-watcher binary:
//! - `outage`: the whole ensemble down longer than the watcher's session; the watcher frozen
//!   (SIGSTOP) past its session. Clients see nothing, lb-proxy's servers stay, the watcher
//!   resyncs and converges to exactly the registered set.
//! - `expiry`: every registration gone at once (registrar sessions expiring together while the
//!   servers are healthy), and the same trickling in: the backend keeps its last full set.
//! - `hostile`: registrar nodes with huge data, deep nesting, wrong types, and a directory of
//!   thousands of children: an error naming each bad node, the rest applied, memory bounded.
//! - `disk`: the directory of lb-proxy's file full, read-only, or over the file-size limit
//!   while the watcher writes: the old file stays whole, the error names it, the watcher
//!   writes once it can.
//!
//! Each test prints a `FIGURES` line (run with `--nocapture` to see them): the timings and
//! counts docs/reliability.md quotes.

#[path = "watcher_faults/common.rs"]
mod common;
#[path = "watcher_faults/disk.rs"]
mod disk;
#[path = "watcher_faults/expiry.rs"]
mod expiry;
#[path = "watcher_faults/hostile.rs"]
mod hostile;
#[path = "watcher_faults/outage.rs"]
mod outage;
