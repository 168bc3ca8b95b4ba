//! The runtime API: HAProxy's CLI commands that lb-proxy supports, answered by the current
//! worker (lb-supervisor routes them there from the runtime socket and from lbctl).
//!
//! Changes made here are operational state: they last until the next reload, which reads the
//! configuration file again (the file is the reference). Every command either does what it
//! says or changes nothing and answers one line saying why.
//!
//! Words and messages follow HAProxy 2.6 where it has the command, so that existing scripts
//! keep working: `disable server api/a1`, `set server api/a1 state drain`, `No such server.`
//!
//! # Layout
//! - this file: [`ProxyRuntime`], parsing and dispatch, `help`.
//! - `servers`: the commands that change servers (state, weight, address, health checks, add,
//!   del, shutdown sessions).
//! - `patterns`: lists and maps (`show acl`, `add acl`, `set map` …) and `show rules`.
//! - `process`: the process and its frontends (limits, pausing, counters, version, activity).
//! - `fuzz`: a state without sockets answering commands, for the fuzzer (`fuzz/runtime_command`).

pub(crate) mod fuzz;
mod patterns;
mod process;
mod servers;
#[cfg(test)]
mod tests;

use std::sync::{Arc, Mutex, PoisonError};

use lb_supervisor::report::Format;
use lb_supervisor::{Runtime, RuntimeResult, Shutdown};

use crate::counters::Snapshot;
use crate::state::Proxy;
use crate::stats;

/// `help`: every command, in HAProxy's layout.
const HELP: &str = "\
The following commands are valid at this level:
  add acl <acl> <pattern>                 : add a pattern to a list (#<id>, its file or its name); written back to its file
  add map <map> <key> <value>             : add an entry to a map; written back to its file
  add server <bk>/<srv> <addr>:<port> [check] [weight <w>] [slowstart <time>] : add a server (in maintenance)
  clear acl <acl>                         : remove every pattern of a list
  clear counters [all]                    : clear the maxima (all: every counter)
  clear table <table> [<filter>]|[key <k>] : remove entries (all, those matching the filter, or one key)
  clear map <map>                         : remove every entry of a map
  del acl <acl> <pattern>|#<ref>          : remove a pattern from a list
  del map <map> <key>|#<ref>              : remove an entry from a map
  del server <bk>/<srv>                   : remove a server in maintenance or drain without connections
  disable frontend <fe>                   : stop accepting on a frontend (open connections go on)
  disable health <bk>/<srv>               : stop a server's health checks (it counts as up)
  disable server <bk>/<srv>               : put a server in maintenance (same as 'set server <bk>/<srv> state maint')
  enable frontend <fe>                    : accept again on a frontend
  enable health <bk>/<srv>                : resume a server's health checks
  enable server <bk>/<srv>                : take a server out of maintenance or drain (state ready)
  get weight <bk>/<srv>                   : report a server's current and initial weight
  help                                    : list the commands
  prompt                                  : toggle interactive mode (runtime socket: a '> ' prompt after each answer)
  quit                                    : close an interactive session
  set map <map> <key>|#<ref> <value>      : change an entry's value
  set maxconn frontend <fe> <n>           : change a frontend's connection limit
  set maxconn global <n>                  : change the process's connection limit (up to global.max_connections)
  set rate-limit connections global <n>   : accept at most n connections per second (0: no limit)
  set fleet share <n>                     : divide the limits of the fleet tables by n (the live nodes)
  set table <table> key <k> [data.<type> <v>]* : set an entry's data (made if absent)
  set server <bk>/<srv> addr <ip> [port <p>] : move a server (connections to the old address finish, not reused)
  set server <bk>/<srv> health <up|down>  : force a checked server's health until its next checks decide
  set server <bk>/<srv> state <state>     : set a server's state: ready, drain or maint
  set server <bk>/<srv> weight <w>[%]     : set a server's weight (0 to 256, or % of its initial weight)
  set timeout cli <delay>                 : change this connection's idle timeout (seconds, or with a unit)
  set weight <bk>/<srv> <w>[%]            : set a server's weight (0 to 256, or % of its initial weight)
  show acl [<acl>]                        : list the lists, or one list's patterns
  show activity                           : the runtime's tasks, queue and accepted connections
  show backend                            : list the backends
  show env [<name>]                       : the process's environment
  show errors [<iid>|<frontend>] [request|response] : the last refused request of each frontend
  show info [typed|json]                  : report information about the running process
  show map [<map>]                        : list the maps, or one map's entries
  show rules [<frontend>]                 : every rule with the requests it applied to
  show schema json                        : the JSON schema of the json forms
  show servers conn [<backend>]           : server connections, used and idle
  show servers state [<backend>]          : dump volatile server information (all or for a single backend)
  show sess                               : report a summary of the current sessions
  show stat [<iid>|<proxy> <type> <sid>] [typed|json] : report counters for each proxy and server
  show table [<table> [<filter>]|[key <k>]] : the tables, or one table's entries (filter: data.<type> <op> <v>)
  show version                            : the running version
  shutdown sessions server <bk>/<srv>     : close every connection to a server";

/// lb-proxy's answers to runtime commands, for one worker.
#[derive(Debug, Clone)]
pub(crate) struct ProxyRuntime {
    proxy: Arc<Proxy>,
    /// For health checks of servers added at run time.
    shutdown: Shutdown,
    /// The snapshot handed to the next worker, to tell what was counted after it.
    handed: Arc<Mutex<Option<Snapshot>>>,
}

impl ProxyRuntime {
    pub(crate) fn new(proxy: Arc<Proxy>, shutdown: Shutdown) -> Self {
        ProxyRuntime { proxy, shutdown, handed: Arc::default() }
    }

    /// One command (already split from its line).
    pub(crate) fn run(&self, command: &str) -> RuntimeResult {
        let words: Vec<&str> = command.split_whitespace().collect();
        if let Some(result) = crate::tables::command(&self.proxy.tables, &words) {
            return result.map_or_else(RuntimeResult::refused, RuntimeResult::ok);
        }
        if let Some(result) = process::command(self, &words) {
            return result;
        }
        if let Some(result) = patterns::command(self, &words) {
            return result;
        }
        match words.as_slice() {
            ["help", ..] => RuntimeResult::ok(HELP),
            ["show", "stat", rest @ ..] => {
                match Format::take(rest).and_then(|(format, rest)| Ok((format, stats::Filter::parse(&rest)?))) {
                    Ok((format, filter)) => RuntimeResult::ok(stats::show_stat(&self.proxy, &filter, format)),
                    Err(message) => RuntimeResult::refused(message),
                }
            }
            // HAProxy ignores words it does not know after `show info`; so does this.
            ["show", "info", rest @ ..] => match Format::take(rest) {
                Ok((format, _)) => RuntimeResult::ok(stats::info(&self.proxy, format)),
                Err(message) => RuntimeResult::refused(message),
            },
            ["show", "schema", "json"] => RuntimeResult::ok(lb_supervisor::report::schema_json()),
            ["show", "schema", ..] => RuntimeResult::refused("Usage: show schema json."),
            ["show", "servers", "state"] => RuntimeResult::ok(stats::servers_state(&self.proxy, None)),
            ["show", "servers", "state", backend] => match self.proxy.backends.get(backend) {
                Some(_) => RuntimeResult::ok(stats::servers_state(&self.proxy, Some(backend))),
                None => RuntimeResult::refused("Can't find backend."),
            },
            ["show", "servers", "state", ..] => RuntimeResult::refused("Usage: show servers state [<backend>]."),
            ["show", "errors", rest @ ..] => self.show_errors(rest),
            ["show", "sess"] => RuntimeResult::ok(stats::sessions(&self.proxy)),
            ["show", "sess", ..] => RuntimeResult::refused("'show sess' takes no argument here (a summary only)."),
            ["disable" | "enable" | "set" | "get" | "add" | "del" | "shutdown", ..] => servers::command(self, &words),
            [] => RuntimeResult::refused("Empty command."),
            _ => RuntimeResult::refused(format!("Unknown command: '{command}'. Type 'help' for the list.")),
        }
    }

    /// `show errors [<iid>|<frontend>] [request|response]`: the last refused request of each
    /// frontend. Only requests are captured (responses a server got wrong are its log's 502).
    fn show_errors(&self, args: &[&str]) -> RuntimeResult {
        let (mut which, mut responses) = (None, false);
        for arg in args {
            match *arg {
                "request" => responses = false,
                "response" => responses = true,
                name if which.is_none() => which = Some(name),
                _ => return RuntimeResult::refused("Usage: show errors [<iid>|<proxy>] [request|response]."),
            }
        }
        let frontends: Vec<_> = self
            .proxy
            .frontends
            .iter()
            .enumerate()
            .map(|(i, fe)| (fe.name(), stats::frontend_id(i), &fe.errors))
            .filter(|(name, id, _)| which.is_none_or(|w| w == *name || w == id.to_string()))
            .collect();
        if which.is_some() && frontends.is_empty() {
            return RuntimeResult::refused("No such proxy.");
        }
        let shown = if responses { Vec::new() } else { frontends };
        RuntimeResult::ok(crate::capture::render(std::time::SystemTime::now(), &shown))
    }

    /// Every counter, to hand to the next worker.
    pub(crate) fn snapshot(&self) -> Snapshot {
        stats::snapshot(&self.proxy)
    }

    pub(crate) fn shutdown(&self) -> &Shutdown {
        &self.shutdown
    }
}

/// What one worker hands the next: the traffic counters (the fields of [`Snapshot`], so that a
/// worker from before tables reads it as it always did), and the tables' entries
/// (`tables::handover`, base64), absent when there are none.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Handover {
    #[serde(flatten)]
    counters: Snapshot,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    tables: String,
    /// The fleet's live nodes (`set fleet share`): a reload keeps the share lb-watcher set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    fleet_share: Option<u32>,
}

/// lb-supervisor's handle: the commands, and the counters and tables across reloads.
#[derive(Debug)]
pub(crate) struct Handler(pub(crate) ProxyRuntime);

impl Runtime for Handler {
    fn command(&self, command: &str) -> RuntimeResult {
        self.0.run(command)
    }

    fn snapshot(&self) -> Option<String> {
        let snapshot = self.0.snapshot();
        let tables = crate::tables::handover::export(&self.0.proxy.tables);
        let fleet_share = Some(self.0.proxy.tables.share()).filter(|&n| n > 1);
        let text = serde_json::to_string(&Handover { counters: snapshot.clone(), tables, fleet_share }).ok();
        *self.0.handed.lock().unwrap_or_else(PoisonError::into_inner) = Some(snapshot);
        text
    }

    fn late_counts(&self) -> Option<String> {
        let handed = self.0.handed.lock().unwrap_or_else(PoisonError::into_inner).clone()?;
        let counters = self.0.snapshot().since(&handed);
        let tables = crate::tables::handover::late(&self.0.proxy.tables);
        serde_json::to_string(&Handover { counters, tables, fleet_share: None }).ok()
    }

    fn add_late_counts(&self, counts: &str) {
        match serde_json::from_str::<Handover>(counts) {
            Ok(late) => {
                stats::inherit(&self.0.proxy, &late.counters);
                if !late.tables.is_empty() {
                    crate::tables::handover::import(&self.0.proxy.tables, &late.tables);
                }
            }
            Err(e) => tracing::warn!("late counts of a previous worker not understood: {e}"),
        }
    }

    fn inherit(&self, snapshot: Option<&str>) {
        if let Some(text) = snapshot {
            match serde_json::from_str::<Handover>(text) {
                Ok(base) => {
                    stats::inherit(&self.0.proxy, &base.counters);
                    if let Some(n) = base.fleet_share {
                        self.0.proxy.tables.set_share(n);
                    }
                    if !base.tables.is_empty() {
                        crate::tables::handover::import(&self.0.proxy.tables, &base.tables);
                    }
                }
                Err(e) => tracing::warn!("counters of the previous worker not understood, starting from 0: {e}"),
            }
        }
        self.0.proxy.counters_ready();
    }

    fn figures(&self) -> Option<lb_supervisor::Figures> {
        Some(stats::figures(&self.0.proxy))
    }
}
