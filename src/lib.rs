//! The end-to-end suite of the lb stack lives in `tests/`; this package has no code of its own.
//!
//! Each test starts the daemons as real processes against real HTTP servers (and, later, a real
//! ZooKeeper and real TLS clients), through the helpers in the dev-only crate `lb-testkit`.
#![forbid(unsafe_code)]
