//! lb-tls's answers to runtime commands (through `lbctl -f lb-tls.yaml …`, and the runtime
//! socket when one is configured), and what a worker hands the next at a reload (its counters
//! and its cached sessions): lb-supervisor's [`Runtime`], over the worker's [`Stats`].

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};

use lb_supervisor::report::Format;
use lb_supervisor::{Runtime, RuntimeResult, Secret};
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::stats::{self, Snapshot, Stats};

const HELP: &str = "The following commands are valid at this level:
  help                   : this message
  show info [typed|json] : report information about the running process
  show schema json       : the JSON schema of the json forms
  show stat              : report counters for each frontend (CSV, HAProxy's names where they apply)
  show ciphers           : report handshakes by frontend and cipher
  show metrics           : the Prometheus text of /metrics
";

/// A worker's runtime handler.
#[derive(Debug)]
pub(crate) struct Handler {
    stats: Arc<Stats>,
    process: stats::Process,
    /// The frontends, whose session caches are handed over.
    config: Arc<Config>,
    /// What [`Runtime::snapshot`] handed on, to tell the late counts from it.
    handed: Mutex<Option<Snapshot>>,
}

/// What a worker hands the next one at a reload: its counters, and the live sessions of each
/// frontend's session-ID cache (their DER form, newest first), both by frontend `bind`.
#[derive(Debug, Serialize, Deserialize)]
struct Handover {
    counters: Snapshot,
    #[serde(default)]
    sessions: BTreeMap<String, Vec<Secret>>,
}

impl Handler {
    pub(crate) fn new(stats: Arc<Stats>, process: stats::Process, config: Arc<Config>) -> Handler {
        Handler { stats, process, config, handed: Mutex::new(None) }
    }

    fn take_sessions(&self, handed: &BTreeMap<String, Vec<Secret>>) {
        for fe in &self.config.frontends {
            let bind = fe.bind.to_string();
            if let (Some(mirror), Some(list)) = (&fe.acceptor.sessions, handed.get(&bind)) {
                let taken = mirror.import(&fe.acceptor.initial, list);
                tracing::info!("{bind}: {taken} of {} cached sessions taken from the previous worker", list.len());
            }
        }
    }
}

impl Runtime for Handler {
    fn command(&self, command: &str) -> RuntimeResult {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["help", ..] => RuntimeResult::ok(HELP),
            ["show", "info", rest @ ..] => match Format::take(rest) {
                Ok((format, _)) => RuntimeResult::ok(stats::info(&self.stats, &self.process, format)),
                Err(message) => RuntimeResult::refused(message),
            },
            ["show", "schema", "json"] => RuntimeResult::ok(lb_supervisor::report::schema_json()),
            ["show", "stat"] => RuntimeResult::ok(stats::show_stat(&self.stats, &self.process)),
            ["show", "ciphers"] => RuntimeResult::ok(stats::show_ciphers(&self.stats)),
            ["show", "metrics"] => RuntimeResult::ok(stats::metrics(&self.stats, &self.process)),
            ["show", "stat" | "ciphers" | "metrics", ..] => {
                RuntimeResult::refused(format!("'{}' takes no argument here.", words[..2].join(" ")))
            }
            _ => RuntimeResult::refused(format!("Unknown command: '{command}'. Type 'help' for the list.")),
        }
    }

    fn snapshot(&self) -> Option<String> {
        let counters = self.stats.snapshot();
        let budget = crate::sessions::HANDED_BYTES / self.config.frontends.len().max(1);
        let sessions = self
            .config
            .frontends
            .iter()
            .filter_map(|fe| Some((fe.bind.to_string(), fe.acceptor.sessions.as_ref()?.export(budget))))
            .collect();
        let handover = Handover { counters, sessions };
        let text = serde_json::to_string(&handover).ok();
        *self.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(handover.counters);
        text
    }

    fn inherit(&self, snapshot: Option<&str>) {
        let Some(text) = snapshot else { return };
        match serde_json::from_str::<Handover>(text) {
            Ok(handover) => {
                self.stats.inherit(&handover.counters);
                self.take_sessions(&handover.sessions);
            }
            // A worker of an earlier version hands its counters alone.
            Err(e) => match serde_json::from_str::<Snapshot>(text) {
                Ok(earlier) => self.stats.inherit(&earlier),
                Err(_) => tracing::warn!("counters of the previous worker not understood, starting from 0: {e}"),
            },
        }
    }

    fn late_counts(&self) -> Option<String> {
        let handed = self.handed.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        serde_json::to_string(&self.stats.snapshot().since(&handed)).ok()
    }

    fn add_late_counts(&self, counts: &str) {
        match serde_json::from_str::<Snapshot>(counts) {
            Ok(late) => self.stats.inherit(&late),
            Err(e) => tracing::warn!("late counts of a previous worker not understood: {e}"),
        }
    }

    fn figures(&self) -> Option<lb_supervisor::Figures> {
        Some(self.stats.figures())
    }
}
