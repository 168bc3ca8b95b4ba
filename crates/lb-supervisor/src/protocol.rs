//! Every message the lb processes exchange, defined once.
//!
//! Two conversations:
//! - **control**: an operator tool (lbctl) or lb-watcher asks the master over its control socket
//!   (a Unix socket, mode 0600). One JSON [`Request`] per line, one JSON [`Response`] per line.
//! - **channel**: the master and each of its workers, over a private socketpair, frames of JSON
//!   ([`ToWorker`], [`ToMaster`]) that may carry file descriptors (the listening sockets).

use serde::{Deserialize, Serialize};

use crate::canary::{CanaryAsk, CanarySettings, Figures, Share};
use crate::secret::{Secret, SecretSpec};
use crate::ListenAddr;

/// What a client of the control socket asks the master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case")]
pub enum Request {
    /// Start a new worker on the configuration file as it is now; answer once it serves (or
    /// failed). Concurrent reloads are serialised and coalesced: each waiter gets the result of
    /// a reload that started after it asked.
    Reload,
    /// A reload with this canary instead of the one the new configuration asks for
    /// (`lbctl reload --canary 10% --for 30s`, `--canary off`).
    ReloadWith { canary: CanaryAsk },
    /// Roll back the canary under way: the new worker drains, the current one keeps serving,
    /// and the reload fails for whoever waited for it. Without a canary: start a worker on the
    /// configuration the previous worker served (the master keeps its text).
    Rollback,
    /// The master and its workers.
    ShowProc,
    /// A runtime command line for the current worker (`show stat`, `set server …`).
    Runtime { line: String },
}

/// The master's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case")]
pub enum Response {
    /// The new worker serves.
    Reloaded {
        pid: u32,
        generation: u64,
        took_ms: u64,
        /// The canary's verdict, when the reload had one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        canary: Option<String>,
    },
    /// [`Request::Rollback`] done: `message` says what serves now.
    RolledBack {
        generation: u64,
        message: String,
    },
    /// Nothing changed: the previous worker keeps serving. `error` holds the worker's own
    /// messages (`file:line:col: field: problem`) or what went wrong starting it.
    ReloadFailed {
        error: String,
    },
    Proc(ProcTable),
    /// A runtime command's output, as the worker wrote it.
    Runtime {
        output: String,
    },
    /// The request itself could not be served (malformed, or no worker to route it to).
    Error {
        message: String,
    },
}

/// `show proc`: the master and every worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcTable {
    pub master: ProcEntry,
    pub workers: Vec<ProcEntry>,
    /// Canary verdicts since the master started: how many of each, and the latest ones.
    #[serde(default)]
    pub canary: CanaryRecord,
}

/// The canary verdicts a master has given.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CanaryRecord {
    pub promoted: u64,
    pub rolled_back: u64,
    /// The latest verdicts, newest first.
    pub verdicts: Vec<VerdictEntry>,
}

/// One canary verdict.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VerdictEntry {
    /// The canary's generation.
    pub generation: u64,
    pub promoted: bool,
    /// Seconds since the verdict.
    pub age_secs: u64,
    /// The figures that decided it.
    pub summary: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcEntry {
    pub pid: u32,
    pub role: Role,
    /// The reload that started it (the first worker is generation 1; the master is 0).
    pub generation: u64,
    /// Reloads since it started (for the master: reloads in all).
    pub reloads: u64,
    pub uptime_secs: u64,
    /// The version of the binary it runs (a reload picks up a new binary on disk).
    pub version: String,
    /// Client connections it still has; `None` when it did not answer in time.
    pub connections: Option<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    Master,
    /// Serving new connections.
    Current,
    /// Draining after a reload.
    Old,
    /// Started by a reload, not ready yet.
    Starting,
    /// Ready, serving its share of new connections while it is judged.
    Canary,
}

/// A side of a canary's split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Side {
    /// The current worker, which keeps the rest.
    Old,
    /// The canary, which takes the share.
    New,
}

/// Master → worker.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToWorker {
    /// A batch of the listening sockets the master holds: one fd per address, in order.
    /// The worker acknowledges each batch; `last` marks the final one.
    Sockets {
        generation: u64,
        addresses: Vec<ListenAddr>,
        last: bool,
        /// Another worker serves: this one may be a canary, as asked (`None` in the ask: as
        /// its configuration says). Absent: it cannot be one.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        canary: Option<CanaryCall>,
    },
    /// The socket asked for with [`ToMaster::Bind`] (one fd attached).
    Bound {
        address: ListenAddr,
    },
    BindFailed {
        address: ListenAddr,
        error: String,
    },
    /// Stop accepting, finish what is in flight, exit when the last connection ends.
    SoftStop,
    /// Close everything and exit now.
    HardStop,
    /// Report [`ToMaster::Status`].
    Status,
    /// A runtime command line for the daemon's runtime handler; answered with
    /// [`ToMaster::Runtime`] carrying the same `id`.
    Runtime {
        id: u64,
        line: String,
    },
    /// Send [`ToMaster::Snapshot`]: the daemon's counters, for the worker that replaces it.
    Snapshot,
    /// The counters of the worker this one replaced (`None`: there was none, or it could not
    /// tell), to count on from. Every worker gets exactly one, soon after its READY.
    Inherit {
        snapshot: Option<String>,
    },
    /// The answer to [`ToMaster::ShowProc`].
    Proc {
        id: u64,
        table: ProcTable,
    },
    /// A predecessor's [`ToMaster::LateCounts`], to add.
    AddCounts {
        counts: String,
    },
    /// The master's secrets ([`SecretSpec`]), the current one first: before the sockets to a
    /// starting worker, and to every worker whenever the set changes.
    Secrets {
        secrets: Vec<Secret>,
    },
    /// Split new connections with the worker at the other end of the socketpair attached:
    /// the canary (`New`) keeps `share` of them, the current worker (`Old`) the rest.
    Split {
        side: Side,
        share: Share,
    },
    /// The canary is over: keep every connection accepted, hand none over.
    Whole,
    /// Send [`ToMaster::Figures`].
    Figures,
}

/// Whether a starting worker may be a canary, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct CanaryCall {
    pub(crate) ask: Option<CanaryAsk>,
}

/// Worker → master.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub(crate) enum ToMaster {
    /// A [`ToWorker::Sockets`] batch arrived whole.
    Ack,
    /// Bind a socket the master does not hold yet (the new configuration listens there).
    Bind {
        address: ListenAddr,
    },
    /// Serving. `listening`: the addresses it adopted; the master keeps exactly these.
    Ready {
        pid: u32,
        generation: u64,
        version: String,
        listening: Vec<ListenAddr>,
        settings: Settings,
        /// The canary it holds its accepts for (`None`: it serves everything at once).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        canary: Option<CanarySettings>,
    },
    /// Could not start; the worker exits after sending this.
    Failed {
        error: String,
    },
    Status {
        connections: u64,
    },
    /// The answer to [`ToWorker::Runtime`]: one result per command of the line.
    Runtime {
        id: u64,
        results: Vec<RuntimeResult>,
    },
    /// The answer to [`ToWorker::Snapshot`] (`None`: the daemon keeps no counters).
    Snapshot {
        snapshot: Option<String>,
    },
    /// The daemon wants `show proc` (old workers and their connections, for its metrics).
    ShowProc {
        id: u64,
    },
    /// Sent by a drained old worker just before it exits: what it counted after its
    /// [`ToMaster::Snapshot`], for the current worker.
    LateCounts {
        counts: String,
    },
    /// The answer to [`ToWorker::Figures`] (`None`: the daemon keeps none).
    Figures {
        figures: Option<Figures>,
    },
}

/// One runtime command's answer, as the daemon's handler gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RuntimeResult {
    /// The command was carried out (or, for `show …`, answered). A refused or malformed
    /// command changed nothing.
    pub ok: bool,
    /// What it printed, without the empty line that ends an answer on the runtime socket.
    pub output: String,
}

/// What the master takes from a worker's configuration at each reload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settings {
    /// Old workers kept draining at most; beyond, the oldest is stopped.
    pub max_old_workers: usize,
    /// An old worker still draining after this long is stopped (`None`: never).
    pub hard_stop_after_ms: Option<u64>,
    /// A new worker that is not ready within this long is a failed reload.
    pub worker_start_timeout_ms: u64,
    /// Secrets the master makes and hands to every worker (`None`: none). Absent from an
    /// older worker's READY, which then asked for none.
    #[serde(default)]
    pub secret: Option<SecretSpec>,
    /// `global.canary`: a canary for every reload (`None`: none unless asked).
    #[serde(default)]
    pub canary: Option<CanarySettings>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            max_old_workers: 10,
            hard_stop_after_ms: None,
            worker_start_timeout_ms: 10_000,
            secret: None,
            canary: None,
        }
    }
}
