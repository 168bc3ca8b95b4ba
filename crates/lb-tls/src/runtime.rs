//! lb-tls's answers to runtime commands (through `lbctl -f lb-tls.yaml …`, and the runtime
//! socket when one is configured), and its counters' hand-over across reloads: lb-supervisor's
//! [`Runtime`], over the worker's [`Stats`].

use std::sync::{Arc, Mutex, PoisonError};

use lb_supervisor::report::Format;
use lb_supervisor::{Runtime, RuntimeResult};

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
    /// What [`Runtime::snapshot`] handed on, to tell the late counts from it.
    handed: Mutex<Option<Snapshot>>,
}

impl Handler {
    pub(crate) fn new(stats: Arc<Stats>, process: stats::Process) -> Handler {
        Handler { stats, process, handed: Mutex::new(None) }
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
        let snapshot = self.stats.snapshot();
        let text = serde_json::to_string(&snapshot).ok();
        *self.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot);
        text
    }

    fn inherit(&self, snapshot: Option<&str>) {
        if let Some(text) = snapshot {
            match serde_json::from_str::<Snapshot>(text) {
                Ok(earlier) => self.stats.inherit(&earlier),
                Err(e) => tracing::warn!("counters of the previous worker not understood, starting from 0: {e}"),
            }
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
