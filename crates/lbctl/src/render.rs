//! What lbctl prints for an answer of the master, and with which exit status.
//!
//! Pure functions from a [`Response`] to text, so that every message is unit-tested here and
//! `main` only writes them out.

use std::fmt::Write as _;
use std::io;
use std::path::Path;

use lb_supervisor::{control, ProcEntry, ProcTable, Response, Role};

use crate::exit::Exit;
use crate::tables::{self, Shape};

/// What to print, where, and how to exit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outcome {
    pub(crate) stdout: String,
    pub(crate) stderr: String,
    pub(crate) exit: Exit,
}

impl Outcome {
    fn out(stdout: String) -> Self {
        Outcome { stdout, stderr: String::new(), exit: Exit::Success }
    }

    fn failed(stderr: String) -> Self {
        Outcome { stdout: String::new(), stderr, exit: Exit::Failed }
    }
}

/// The master's answer, for a person or (`json`) for a program. The exit status depends only
/// on the answer, not on how it is shown. `command`: the runtime command line that was sent,
/// whose answer may be reshaped (`show stat`, `show servers state`, `show info`).
pub(crate) fn response(response: &Response, command: Option<&str>, json: bool) -> Outcome {
    if let (Response::Runtime { output }, Some(shape)) = (response, command.and_then(Shape::of)) {
        let shaped = if json {
            tables::json(shape, output).map(|v| serde_json::to_string_pretty(&v).unwrap_or_default())
        } else {
            tables::human(shape, output)
        };
        // An answer lbctl cannot read is shown as it came rather than lost.
        if let Ok(text) = shaped {
            return Outcome::out(line(text));
        }
    }
    let exit = match response {
        Response::Reloaded { .. } | Response::RolledBack { .. } | Response::Proc(_) | Response::Runtime { .. } => {
            Exit::Success
        }
        Response::ReloadFailed { .. } | Response::Error { .. } => Exit::Failed,
    };
    if json {
        // Serialising plain data cannot fail; should it, the debug form still shows the answer.
        let text = serde_json::to_string_pretty(response).unwrap_or_else(|_| format!("{response:?}"));
        return Outcome { stdout: line(text), stderr: String::new(), exit };
    }
    let outcome = match response {
        Response::Reloaded { pid, generation, took_ms, canary } => {
            let verdict = canary.as_ref().map_or_else(String::new, |v| format!("canary {v}\n"));
            Outcome::out(format!("{verdict}reloaded: worker {pid} generation {generation} serving ({took_ms} ms)\n"))
        }
        Response::RolledBack { message, .. } => Outcome::out(format!("rolled back: {message}\n")),
        // The error may hold many lines (one per configuration problem): all of them matter.
        Response::ReloadFailed { error } => Outcome::failed(line(format!("reload failed: {error}"))),
        Response::Proc(table) => Outcome::out(proc_table(table)),
        Response::Runtime { output } => Outcome::out(line(output.clone())),
        Response::Error { message } => Outcome::failed(line(format!("lbctl: {message}"))),
    };
    debug_assert_eq!(outcome.exit, exit);
    outcome
}

/// The message for a master that [`control::call_blocking`] could not get an answer from.
pub(crate) fn unreachable(socket: &Path, error: &lb_supervisor::Error) -> String {
    match error {
        lb_supervisor::Error::ControlSocket { source, .. } if control::connect_failed(error) => {
            let hint = match source.kind() {
                io::ErrorKind::PermissionDenied => "only its owner may connect: run lbctl as the daemon's user",
                _ => "is the master running?",
            };
            format!("lbctl: cannot connect to {}: {source} ({hint})\n", socket.display())
        }
        _ => format!("lbctl: {error}\n"),
    }
}

/// `show proc`, one line per process under a header, in aligned columns:
///
/// ```text
/// #<PID>  <role>   <generation>  <reloads>  <uptime>     <version>  <connections>
/// 1234    master   0             3          0d00h05m12s  0.1.0      -
/// 2201    current  4             0          0d00h00m40s  0.1.0      12
/// ```
///
/// Workers come in the master's order. `-`: a worker that did not say how many connections it
/// has (the master never does).
pub(crate) fn proc_table(table: &ProcTable) -> String {
    const HEADER: [&str; 7] =
        ["#<PID>", "<role>", "<generation>", "<reloads>", "<uptime>", "<version>", "<connections>"];
    let rows: Vec<[String; 7]> = std::iter::once(&table.master).chain(&table.workers).map(row).collect();

    let mut widths = HEADER.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut text = String::new();
    let header = HEADER.map(str::to_owned);
    for cells in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (cell, width) in cells.iter().zip(widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    let canary = &table.canary;
    if canary.promoted + canary.rolled_back > 0 {
        let _ = writeln!(text, "# canary verdicts: {} promoted, {} rolled back", canary.promoted, canary.rolled_back);
        for verdict in &canary.verdicts {
            let _ = writeln!(
                text,
                "generation {} {} ago: {}",
                verdict.generation,
                uptime(verdict.age_secs),
                verdict.summary
            );
        }
    }
    text
}

fn row(entry: &ProcEntry) -> [String; 7] {
    [
        entry.pid.to_string(),
        role(entry.role).to_owned(),
        entry.generation.to_string(),
        entry.reloads.to_string(),
        uptime(entry.uptime_secs),
        entry.version.clone(),
        entry.connections.map_or_else(|| "-".to_owned(), |n| n.to_string()),
    ]
}

fn role(role: Role) -> &'static str {
    match role {
        Role::Master => "master",
        Role::Current => "current",
        Role::Old => "old",
        Role::Starting => "starting",
        Role::Canary => "canary",
    }
}

/// HAProxy's form: `0d00h05m12s`.
pub(crate) fn uptime(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!("{days}d{:02}h{:02}m{:02}s", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// `text` ending in exactly the newline a terminal needs (none added to empty text).
fn line(mut text: String) -> String {
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(
        pid: u32,
        role: Role,
        generation: u64,
        reloads: u64,
        uptime_secs: u64,
        connections: Option<u64>,
    ) -> ProcEntry {
        ProcEntry { pid, role, generation, reloads, uptime_secs, version: "0.1.0".to_owned(), connections }
    }

    fn sample() -> ProcTable {
        ProcTable {
            master: entry(1234, Role::Master, 0, 3, 312, None),
            workers: vec![
                entry(2201, Role::Current, 4, 0, 40, Some(12)),
                entry(2190, Role::Old, 3, 1, 95, Some(3)),
                entry(123_456, Role::Starting, 5, 0, 0, None),
            ],
            canary: Default::default(),
        }
    }

    #[test]
    fn proc_table_is_aligned() {
        let expected = "\
#<PID>  <role>    <generation>  <reloads>  <uptime>     <version>  <connections>
1234    master    0             3          0d00h05m12s  0.1.0      -
2201    current   4             0          0d00h00m40s  0.1.0      12
2190    old       3             1          0d00h01m35s  0.1.0      3
123456  starting  5             0          0d00h00m00s  0.1.0      -
";
        assert_eq!(proc_table(&sample()), expected);
    }

    #[test]
    fn uptimes() {
        assert_eq!(uptime(0), "0d00h00m00s");
        assert_eq!(uptime(312), "0d00h05m12s");
        assert_eq!(uptime(3600 * 23 + 59 * 60 + 59), "0d23h59m59s");
        assert_eq!(uptime(86_400 * 412 + 3600 + 1), "412d01h00m01s");
    }

    #[test]
    fn answers() {
        let reloaded = Response::Reloaded { pid: 2201, generation: 4, took_ms: 812, canary: None };
        let out = response(&reloaded, None, false);
        assert_eq!(out, Outcome::out("reloaded: worker 2201 generation 4 serving (812 ms)\n".to_owned()));

        let error = "lb.yaml:3:5: frontends.web.bind: not an address\nlb.yaml:9:1: backends: empty".to_owned();
        let out = response(&Response::ReloadFailed { error: error.clone() }, None, false);
        assert_eq!(out, Outcome::failed(format!("reload failed: {error}\n")));

        let out = response(&Response::Runtime { output: "a\nb\n".to_owned() }, None, false);
        assert_eq!(out, Outcome::out("a\nb\n".to_owned()));
        assert_eq!(response(&Response::Runtime { output: String::new() }, None, false).stdout, "");

        let out = response(&Response::Error { message: "no worker".to_owned() }, None, false);
        assert_eq!(out, Outcome::failed("lbctl: no worker\n".to_owned()));
    }

    #[test]
    fn json_keeps_the_exit_status() -> Result<(), serde_json::Error> {
        for (answer, exit) in [
            (Response::Proc(sample()), Exit::Success),
            (Response::ReloadFailed { error: "bad".to_owned() }, Exit::Failed),
        ] {
            let out = response(&answer, None, true);
            assert_eq!(out.exit, exit);
            assert!(out.stderr.is_empty());
            assert_eq!(serde_json::from_str::<Response>(&out.stdout)?, answer);
            assert!(out.stdout.contains("\n  "), "pretty: {}", out.stdout);
        }
        Ok(())
    }
}
