//! Runtime commands (`show stat`, `set server …`): how they reach the current worker, and the
//! runtime socket that speaks them the way HAProxy's CLI does.
//!
//! A daemon answers runtime commands with a [`Runtime`] handler, which it hands over from
//! [`Daemon::start_supervised`](crate::Daemon::start_supervised). The master routes every
//! command to its *current* worker (so a command after a reload reaches the new one):
//!
//! ```text
//! lbctl ──Request::Runtime──▶ control socket ─┐
//! socat ──"show stat\n"─────▶ runtime socket ─┴▶ master ──ToWorker::Runtime{id}──▶ current worker
//!                                                   ◀──ToMaster::Runtime{id, results}──
//! ```
//!
//! The runtime socket is HAProxy's CLI: one line of commands separated by `;` (a `\;` is a
//! literal semicolon), each answer followed by an empty line, then the connection closes. So
//! existing scripts (`echo "show stat" | socat stdio unix:…`) work unchanged. `prompt` switches
//! to HAProxy's interactive mode, for a person at `socat readline`: after each line's answers a
//! `> ` prompt, and the connection stays open until `quit`, another `prompt`, end of input or
//! 10 minutes without a line (`set timeout cli <delay>` sets that connection's own limit, as hatop does).
//!
//! The same channel carries what a daemon needs of its neighbours: the counters of the worker it
//! replaced ([`Runtime::snapshot`] / [`Runtime::inherit`]), and the master's `show proc`
//! ([`MasterLink::show_proc`]) for gauges of old workers.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::sync::oneshot;

use crate::channel::ChannelSender;
use crate::protocol::{ProcTable, Request, Response, RuntimeResult, ToMaster};
use crate::secret::Secret;

/// A command line longer than this is refused: no command comes close.
const MAX_LINE: usize = 64 * 1024;
/// A client that sends nothing for this long is disconnected.
const IDLE_TIMEOUT: Duration = Duration::from_secs(10);
/// The same in interactive mode, where a person reads an answer before typing the next line.
const PROMPT_IDLE_TIMEOUT: Duration = Duration::from_secs(600);

/// A daemon's answers to runtime commands, called on its worker.
pub trait Runtime: Send + Sync + 'static {
    /// Carry out one command (`show stat`, `set server api/a1 state drain`), already split from
    /// its line and trimmed. A refused or malformed command must change nothing and say why in
    /// one line.
    fn command(&self, command: &str) -> RuntimeResult;

    /// The counters to hand to the worker that replaces this one, opaque to the supervisor.
    fn snapshot(&self) -> Option<String> {
        None
    }

    /// The counters of the worker this one replaced ([`snapshot`](Self::snapshot)'s output),
    /// to count on from; `None` when there was none (the first worker, one started after a
    /// crash) or it could not tell. Called exactly once per worker, soon after it is ready.
    fn inherit(&self, snapshot: Option<&str>) {
        let _ = snapshot;
    }

    /// What this worker counted since its [`snapshot`](Self::snapshot), asked once it has
    /// drained (requests that were in flight at the reload): handed to the current worker.
    fn late_counts(&self) -> Option<String> {
        None
    }

    /// A draining predecessor's [`late_counts`](Self::late_counts): add them. May come at any
    /// time, before or after [`inherit`](Self::inherit).
    fn add_late_counts(&self, counts: &str) {
        let _ = counts;
    }

    /// What this worker has counted, for a canary's verdict: cumulative (the master judges the
    /// difference over the window). `None`: nothing to judge by, and a canary is judged by
    /// `min_requests` alone.
    fn figures(&self) -> Option<crate::Figures> {
        None
    }
}

/// Where the master serves the runtime commands ([`Supervision::runtime`](crate::Supervision::runtime)).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RuntimeEndpoints {
    /// A Unix socket, created with mode 0600 like the control socket.
    pub socket: Option<PathBuf>,
    /// A TCP address (loopback: whoever connects may change the servers).
    pub tcp: Option<SocketAddr>,
}

impl RuntimeResult {
    pub fn ok(output: impl Into<String>) -> Self {
        RuntimeResult { ok: true, output: output.into() }
    }

    pub fn refused(output: impl Into<String>) -> Self {
        RuntimeResult { ok: false, output: output.into() }
    }
}

/// The commands of one line: split on `;` and newlines (`\;` is a literal `;`), trimmed, empty
/// ones dropped.
pub fn split_commands(line: &str) -> Vec<String> {
    let mut commands = Vec::new();
    let mut current = String::new();
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&';') => {
                current.push(';');
                chars.next();
            }
            ';' | '\n' | '\r' => commands.push(std::mem::take(&mut current)),
            c => current.push(c),
        }
    }
    commands.push(current);
    commands.into_iter().map(|c| c.trim().to_owned()).filter(|c| !c.is_empty()).collect()
}

/// Run every command of `line` through `runtime` (or refuse them all when there is none).
pub(crate) fn run_line(runtime: Option<&dyn Runtime>, line: &str) -> Vec<RuntimeResult> {
    let commands = split_commands(line);
    if commands.is_empty() {
        return vec![RuntimeResult::refused("Empty command line.")];
    }
    commands
        .iter()
        .map(|command| match runtime {
            Some(runtime) => runtime.command(command),
            None => RuntimeResult::refused("This daemon has no runtime commands."),
        })
        .collect()
}

/// The answer for a control client: one command's output as is; several, each followed by an
/// empty line as on the runtime socket. An error when any command was refused.
pub(crate) fn response(results: Vec<RuntimeResult>) -> Response {
    let ok = results.iter().all(|r| r.ok);
    let output = if let [only] = results.as_slice() {
        only.output.clone()
    } else {
        let mut text = String::new();
        for result in &results {
            text.push_str(&framed(&result.output));
        }
        text
    };
    if ok {
        Response::Runtime { output }
    } else {
        Response::Error { message: output }
    }
}

/// One answer as the runtime socket writes it: the text, its final newline, an empty line.
fn framed(output: &str) -> String {
    let mut text = output.to_owned();
    if !text.is_empty() && !text.ends_with('\n') {
        text.push('\n');
    }
    text.push('\n');
    text
}

/// The answers of a multi-command response, in order, as [`framed`] wrote them: an answer is
/// the lines up to an empty line, and an empty answer (a command that succeeds silently) is
/// that empty line alone. Clients that send several commands (lb-watcher) read them with this.
pub fn unframe(text: &str) -> Vec<String> {
    let mut answers = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    for line in text.lines() {
        if line.is_empty() {
            answers.push(current.join("\n"));
            current.clear();
        } else {
            current.push(line);
        }
    }
    if !current.is_empty() {
        answers.push(current.join("\n"));
    }
    answers
}

/// What the master does with a request (its control handler).
pub(crate) type Forward =
    Arc<dyn Fn(Request) -> std::pin::Pin<Box<dyn Future<Output = Response> + Send>> + Send + Sync>;

/// Serve the runtime socket on a Unix listener until accepting fails for good.
pub(crate) async fn serve_unix(listener: tokio::net::UnixListener, forward: Forward) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(client(stream, forward.clone()));
            }
            Err(e) => {
                tracing::warn!("runtime socket: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Serve the runtime socket on a TCP listener.
pub(crate) async fn serve_tcp(listener: tokio::net::TcpListener, forward: Forward) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                tokio::spawn(client(stream, forward.clone()));
            }
            Err(e) => {
                tracing::warn!("runtime address: accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// One runtime-socket connection's own settings, changed by the commands the connection
/// answers itself (`prompt`, `set timeout cli`).
#[derive(Debug, Default)]
struct Session {
    interactive: bool,
    /// `set timeout cli`: this connection's idle limit, in place of the defaults.
    timeout: Option<Duration>,
}

impl Session {
    fn idle(&self) -> Duration {
        self.timeout.unwrap_or(if self.interactive { PROMPT_IDLE_TIMEOUT } else { IDLE_TIMEOUT })
    }
}

/// One client: one line of commands, their answers, then close (HAProxy's non-interactive mode);
/// or, after `prompt`, line after line with a prompt after each (interactive mode).
async fn client<S: AsyncRead + AsyncWrite + Unpin>(stream: S, forward: Forward) {
    let (read, mut write) = tokio::io::split(stream);
    let mut reader = BufReader::new(read);
    let mut session = Session::default();
    loop {
        let mut line = Vec::new();
        let mut limited = (&mut reader).take((MAX_LINE + 1) as u64);
        match tokio::time::timeout(session.idle(), limited.read_until(b'\n', &mut line)).await {
            Ok(Ok(0)) | Err(_) => break,
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!("runtime socket: reading a command: {e}");
                break;
            }
        }
        let (answer, go_on) = if line.len() > MAX_LINE {
            (framed(&format!("Command line longer than {MAX_LINE} bytes.")), false)
        } else {
            answer_line(&String::from_utf8_lossy(&line), &mut session, &forward).await
        };
        let prompt = if go_on && session.interactive { "> " } else { "" };
        if let Err(e) = write.write_all(format!("{answer}{prompt}").as_bytes()).await {
            tracing::debug!("runtime socket: writing an answer: {e}");
            break;
        }
        if !(go_on && session.interactive) {
            break;
        }
    }
    let _ = write.shutdown().await;
}

/// The answers to one line, and whether the connection may go on (not after `quit`, nor after
/// a `prompt` that left interactive mode). `prompt`, `quit` and `set timeout cli` are the
/// connection's own commands, answered here, as HAProxy's CLI does.
async fn answer_line(text: &str, session: &mut Session, forward: &Forward) -> (String, bool) {
    let mut answer = String::new();
    for command in split_commands(text) {
        let words: Vec<&str> = command.split_whitespace().collect();
        match words.as_slice() {
            ["prompt"] if session.interactive => {
                session.interactive = false;
                return (answer, false);
            }
            ["prompt"] => session.interactive = true,
            ["quit"] => return (answer, false),
            ["set", "timeout", "cli", delay] => match parse_cli_timeout(delay) {
                Some(timeout) => {
                    session.timeout = Some(timeout);
                    answer.push_str(&framed(""));
                }
                None => answer.push_str(&framed(
                    "'set timeout cli' takes a delay: a number of seconds, or with a unit (ms, s, m, h, d).",
                )),
            },
            ["set", "timeout", ..] => answer.push_str(&framed("'set timeout' only supports 'cli'.")),
            _ => {
                let output = match forward(Request::Runtime { line: command }).await {
                    Response::Runtime { output } => output,
                    Response::Error { message } => message,
                    other => format!("Unexpected answer: {other:?}"),
                };
                answer.push_str(&framed(&output));
            }
        }
    }
    (answer, true)
}

/// HAProxy's `set timeout cli` delay: seconds by default, or a number with a unit; at least a
/// millisecond, at most a day.
fn parse_cli_timeout(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (digits, unit) = text.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let millis = match unit {
        "" | "s" => n.checked_mul(1000)?,
        "ms" => n,
        "m" => n.checked_mul(60_000)?,
        "h" => n.checked_mul(3_600_000)?,
        "d" => n.checked_mul(86_400_000)?,
        _ => return None,
    };
    (1..=86_400_000).contains(&millis).then(|| Duration::from_millis(millis))
}

/// Bind the TCP runtime address.
pub(crate) fn bind_tcp(address: SocketAddr) -> io::Result<tokio::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)?;
    listener.set_nonblocking(true)?;
    tokio::net::TcpListener::from_std(listener)
}

/// A worker's way to ask its master something; detached (asking gets nothing) when the daemon
/// runs without a master (tests, `lb_proxy::run`).
#[derive(Clone, Default)]
pub struct MasterLink {
    inner: Option<Arc<LinkInner>>,
}

struct LinkInner {
    tx: ChannelSender,
    /// The master's secrets as last received (empty: none asked for, or none came).
    secrets: tokio::sync::watch::Receiver<Arc<[Secret]>>,
    next_id: AtomicU64,
    waiting: Mutex<HashMap<u64, oneshot::Sender<ProcTable>>>,
}

impl std::fmt::Debug for MasterLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MasterLink").field("attached", &self.inner.is_some()).finish()
    }
}

impl MasterLink {
    /// No master: [`show_proc`](Self::show_proc) answers `None`.
    pub fn detached() -> Self {
        MasterLink { inner: None }
    }

    /// Whether a master is at the other end.
    pub fn is_attached(&self) -> bool {
        self.inner.is_some()
    }

    pub(crate) fn new(tx: ChannelSender, secrets: tokio::sync::watch::Receiver<Arc<[Secret]>>) -> Self {
        MasterLink {
            inner: Some(Arc::new(LinkInner {
                tx,
                secrets,
                next_id: AtomicU64::new(1),
                waiting: Mutex::new(HashMap::new()),
            })),
        }
    }

    /// The secrets the master makes for this daemon (see [`SecretSpec`](crate::SecretSpec)),
    /// the current one first, as they are now and as each change arrives; `None` without a
    /// master. They are there before the daemon starts whenever the master has any.
    pub fn secrets(&self) -> Option<tokio::sync::watch::Receiver<Arc<[Secret]>>> {
        self.inner.as_ref().map(|inner| inner.secrets.clone())
    }

    /// The master's `show proc` (every worker, with its connections), or `None` without a
    /// master or without an answer `within`.
    pub async fn show_proc(&self, within: Duration) -> Option<ProcTable> {
        let inner = self.inner.as_ref()?;
        let id = inner.next_id.fetch_add(1, Ordering::Relaxed);
        let (tx, rx) = oneshot::channel();
        inner.waiting.lock().unwrap_or_else(|e| e.into_inner()).insert(id, tx);
        let asked = inner.tx.send(&ToMaster::ShowProc { id }, &[]).await.is_ok();
        let answer = if asked { tokio::time::timeout(within, rx).await.ok().and_then(Result::ok) } else { None };
        inner.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        answer
    }

    /// The master's answer to a `show proc` this link asked.
    pub(crate) fn deliver(&self, id: u64, table: ProcTable) {
        let Some(inner) = &self.inner else { return };
        if let Some(waiter) = inner.waiting.lock().unwrap_or_else(|e| e.into_inner()).remove(&id) {
            let _ = waiter.send(table);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_split_like_haproxy() {
        assert_eq!(split_commands("show stat"), ["show stat"]);
        assert_eq!(split_commands(" show info ;show stat;; "), ["show info", "show stat"]);
        assert_eq!(split_commands("a\nb\r\n"), ["a", "b"]);
        assert_eq!(split_commands(r"set x a\;b;c"), ["set x a;b", "c"]);
        assert!(split_commands(" ; \n").is_empty());
    }

    #[test]
    fn responses() {
        let one = response(vec![RuntimeResult::ok("x")]);
        assert_eq!(one, Response::Runtime { output: "x".into() });
        let refused = response(vec![RuntimeResult::refused("No such server.")]);
        assert_eq!(refused, Response::Error { message: "No such server.".into() });
        let two = response(vec![RuntimeResult::ok(""), RuntimeResult::ok("a\n")]);
        assert_eq!(two, Response::Runtime { output: "\na\n\n".into() });
        let mixed = response(vec![RuntimeResult::ok(""), RuntimeResult::refused("no")]);
        assert_eq!(mixed, Response::Error { message: "\nno\n\n".into() });
        assert!(!run_line(None, "  ")[0].ok);
        assert_eq!(run_line(None, "show stat")[0].output, "This daemon has no runtime commands.");
    }

    /// A runtime socket client over an in-memory stream, the worker answering `did <command>`.
    fn connect() -> tokio::io::DuplexStream {
        let forward: Forward = Arc::new(|request| {
            Box::pin(async move {
                match request {
                    Request::Runtime { line } => Response::Runtime { output: format!("did {line}") },
                    other => Response::Error { message: format!("{other:?}") },
                }
            })
        });
        let (near, far) = tokio::io::duplex(64 * 1024);
        tokio::spawn(client(far, forward));
        near
    }

    /// What the server writes until it has written `end` (or closed: then `end` is not there).
    async fn read_through(stream: &mut tokio::io::DuplexStream, end: &str) -> String {
        let mut text = Vec::new();
        let mut byte = [0u8; 1];
        while !text.ends_with(end.as_bytes()) {
            match stream.read(&mut byte).await {
                Ok(1) => text.push(byte[0]),
                _ => break,
            }
        }
        String::from_utf8_lossy(&text).into_owned()
    }

    /// Everything the server writes until it closes.
    async fn rest(stream: &mut tokio::io::DuplexStream) -> String {
        let mut text = String::new();
        stream.read_to_string(&mut text).await.expect("read");
        text
    }

    #[tokio::test]
    async fn one_line_then_close() {
        let mut s = connect();
        s.write_all(b"show info; show stat\n").await.expect("send");
        assert_eq!(rest(&mut s).await, "did show info\n\ndid show stat\n\n");
    }

    #[tokio::test]
    async fn prompt_keeps_the_connection_until_quit() {
        let mut s = connect();
        s.write_all(b"prompt\n").await.expect("send");
        assert_eq!(read_through(&mut s, "> ").await, "> ");
        s.write_all(b"show info\n").await.expect("send");
        assert_eq!(read_through(&mut s, "> ").await, "did show info\n\n> ");
        s.write_all(b"show stat; show sess\n").await.expect("send");
        assert_eq!(read_through(&mut s, "> ").await, "did show stat\n\ndid show sess\n\n> ");
        s.write_all(b"show info; quit; show stat\n").await.expect("send");
        assert_eq!(rest(&mut s).await, "did show info\n\n", "quit closes; what follows it is not run");
    }

    #[tokio::test]
    async fn set_timeout_cli_is_the_connections_own() {
        let mut s = connect();
        s.write_all(b"prompt\n").await.expect("send");
        assert_eq!(read_through(&mut s, "> ").await, "> ");
        s.write_all(b"set timeout cli 5; set timeout cli soon; set timeout server 1\n").await.expect("send");
        let answer = read_through(&mut s, "> ").await;
        assert!(answer.starts_with("\n'set timeout cli' takes a delay"), "{answer:?}");
        assert!(answer.ends_with("'set timeout' only supports 'cli'.\n\n> "), "{answer:?}");
        assert_eq!(parse_cli_timeout("5"), Some(Duration::from_secs(5)));
        assert_eq!(parse_cli_timeout("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_cli_timeout("2m"), Some(Duration::from_secs(120)));
        assert_eq!(parse_cli_timeout("0"), None);
        assert_eq!(parse_cli_timeout("2d"), None);
        assert_eq!(parse_cli_timeout("1x"), None);
    }

    #[tokio::test]
    async fn prompt_again_leaves_interactive_mode() {
        let mut s = connect();
        s.write_all(b"prompt; show info\n").await.expect("send");
        assert_eq!(read_through(&mut s, "> ").await, "did show info\n\n> ");
        s.write_all(b"show stat; prompt\n").await.expect("send");
        assert_eq!(rest(&mut s).await, "did show stat\n\n");
    }
}

#[cfg(test)]
mod unframe_tests {
    use super::*;

    #[test]
    fn silent_answers_are_kept_in_their_place() {
        let text: String = ["", "No such server.", "", "Done."].iter().map(|a| framed(a)).collect();
        assert_eq!(unframe(&text), ["", "No such server.", "", "Done."]);
    }
}
