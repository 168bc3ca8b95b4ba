//! A load generator for reload tests and the reload benchmark: concurrent HTTP/1.1 clients
//! against one address for a bounded time, each request classified by exactly how it ended.
//!
//! Three kinds of client run side by side (see [`LoadSpec`]):
//! - **new connection**: connect, one request with `Connection: close`, read the response,
//!   close; again.
//! - **keep-alive**: one connection carrying requests back to back. A response that says
//!   `Connection: close` (or a close-delimited body) ends the connection cleanly: the client
//!   reconnects for its next request, and that is counted as a reconnect, never as a failure.
//! - **slow**: a new connection with one slow request (`/slow?ms=2000`), started at a steady
//!   rate whatever the others do, so that there are always requests in flight across a reload.
//!
//! Every request ends in exactly one [`Outcome`]. The point is to tell a proxy that drops
//! requests on the floor from one that closes connections properly:
//! - `refused`: `ECONNREFUSED` on connect (nobody listens).
//! - `reset`: `ECONNRESET`/`EPIPE`, or the connection ended before a complete response head
//!   arrived, in particular a keep-alive connection closed by the proxy after the request was
//!   sent and before any response byte (the race a reload must never lose).
//! - `truncated`: the head arrived but the body ended early.
//! - `server_error`: a complete 5xx response; `other_status`: a complete response that is
//!   neither 2xx nor 5xx.
//! - `timeout`: no complete response within the request timeout (connect included).
//! - `other_error`: anything else (a malformed response, an unexpected connect error).
//!
//! Bounded in time ([`LoadSpec::duration`]) and, optionally, in count
//! ([`LoadSpec::max_requests`]); [`Load::stop`] ends it early. Requests in flight when it ends
//! are finished and counted.

mod conn;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io::ErrorKind;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use self::conn::Conn;

/// How many failure descriptions a report keeps: the first ones of each kind of client and
/// each outcome, so that a rare outcome is not hidden behind a common one.
const KEPT_FAILURES: usize = 8;

/// What load to generate.
#[derive(Debug, Clone)]
pub struct LoadSpec {
    pub addr: SocketAddr,
    /// The path of the ordinary requests (new connection and keep-alive).
    pub path: String,
    /// Clients opening a new connection for every request.
    pub new_connection_clients: usize,
    /// Clients keeping a connection open, requests back to back.
    pub keep_alive_clients: usize,
    /// Each ordinary client waits this long between two requests (0: none), to keep a debug
    /// build on two cores from being swamped. Keep it well under a second: a keep-alive
    /// connection quiet for a second may be closed by a draining proxy, which is allowed.
    pub pause: Duration,
    /// Start a slow request this often (`None`: no slow requests).
    pub slow_every: Option<Duration>,
    /// The path of the slow requests.
    pub slow_path: String,
    /// No request starts after this long.
    pub duration: Duration,
    /// No request starts once this many have started (over all kinds).
    pub max_requests: Option<u64>,
    /// A request (connect, send, complete response) taking longer than this is a timeout.
    pub timeout: Duration,
}

impl LoadSpec {
    /// `clients` new-connection and `clients` keep-alive clients on `addr` requesting `/load`,
    /// 10 ms apart, for `duration`; no slow requests; 10 s timeout.
    pub fn new(addr: SocketAddr, duration: Duration) -> LoadSpec {
        LoadSpec {
            addr,
            path: "/load".to_owned(),
            new_connection_clients: 10,
            keep_alive_clients: 10,
            pause: Duration::from_millis(10),
            slow_every: None,
            slow_path: "/slow?ms=2000".to_owned(),
            duration,
            max_requests: None,
            timeout: Duration::from_secs(10),
        }
    }
}

/// The kinds of client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    NewConnection,
    KeepAlive,
    Slow,
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::NewConnection, Kind::KeepAlive, Kind::Slow];

    pub fn name(self) -> &'static str {
        match self {
            Kind::NewConnection => "new-connection",
            Kind::KeepAlive => "keep-alive",
            Kind::Slow => "slow",
        }
    }
}

/// How one request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// A complete 2xx response; `close`: the server closed the connection after it, cleanly.
    Ok {
        close: bool,
    },
    Refused,
    Reset(String),
    Truncated(String),
    ServerError(u16),
    OtherStatus(u16),
    Timeout(String),
    OtherError(String),
}

/// Counts of outcomes for one kind of client.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// Requests started.
    pub started: u64,
    pub ok: u64,
    pub refused: u64,
    pub reset: u64,
    pub truncated: u64,
    pub server_error: u64,
    pub other_status: u64,
    pub timeout: u64,
    pub other_error: u64,
    /// Connections opened.
    pub connections: u64,
    /// Keep-alive connections ended cleanly by the server (`Connection: close`): the client
    /// reconnected. Not a failure.
    pub closed_by_server: u64,
}

impl Counts {
    /// Requests that ended (started minus in flight).
    pub fn finished(&self) -> u64 {
        self.ok + self.failed()
    }

    /// Requests that did not end in a complete 2xx response.
    pub fn failed(&self) -> u64 {
        self.refused
            + self.reset
            + self.truncated
            + self.server_error
            + self.other_status
            + self.timeout
            + self.other_error
    }

    fn add(&mut self, other: &Counts) {
        self.started += other.started;
        self.ok += other.ok;
        self.refused += other.refused;
        self.reset += other.reset;
        self.truncated += other.truncated;
        self.server_error += other.server_error;
        self.other_status += other.other_status;
        self.timeout += other.timeout;
        self.other_error += other.other_error;
        self.connections += other.connections;
        self.closed_by_server += other.closed_by_server;
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "started": self.started,
            "ok": self.ok,
            "failed": self.failed(),
            "refused": self.refused,
            "reset": self.reset,
            "truncated": self.truncated,
            "server_error": self.server_error,
            "other_status": self.other_status,
            "timeout": self.timeout,
            "other_error": self.other_error,
            "connections": self.connections,
            "closed_by_server": self.closed_by_server,
        })
    }
}

/// Live counters of one kind.
#[derive(Debug, Default)]
struct AtomicCounts {
    started: AtomicU64,
    ok: AtomicU64,
    refused: AtomicU64,
    reset: AtomicU64,
    truncated: AtomicU64,
    server_error: AtomicU64,
    other_status: AtomicU64,
    timeout: AtomicU64,
    other_error: AtomicU64,
    connections: AtomicU64,
    closed_by_server: AtomicU64,
}

impl AtomicCounts {
    fn snapshot(&self) -> Counts {
        let get = |a: &AtomicU64| a.load(Ordering::SeqCst);
        Counts {
            started: get(&self.started),
            ok: get(&self.ok),
            refused: get(&self.refused),
            reset: get(&self.reset),
            truncated: get(&self.truncated),
            server_error: get(&self.server_error),
            other_status: get(&self.other_status),
            timeout: get(&self.timeout),
            other_error: get(&self.other_error),
            connections: get(&self.connections),
            closed_by_server: get(&self.closed_by_server),
        }
    }
}

/// One failed request, as kept in a [`Report`].
#[derive(Debug, Clone)]
pub struct Failure {
    /// Since the load started.
    pub at: Duration,
    pub kind: Kind,
    pub outcome: Outcome,
}

/// The totals of a load run (or of one so far).
#[derive(Debug, Clone)]
pub struct Report {
    pub new_connection: Counts,
    pub keep_alive: Counts,
    pub slow: Counts,
    pub elapsed: Duration,
    /// The first failures of each kind of client and outcome, in order.
    pub failures: Vec<Failure>,
}

impl Report {
    pub fn of(&self, kind: Kind) -> &Counts {
        match kind {
            Kind::NewConnection => &self.new_connection,
            Kind::KeepAlive => &self.keep_alive,
            Kind::Slow => &self.slow,
        }
    }

    /// All kinds added up.
    pub fn total(&self) -> Counts {
        let mut total = Counts::default();
        for kind in Kind::ALL {
            total.add(self.of(kind));
        }
        total
    }

    /// Failed requests over all kinds.
    pub fn failed(&self) -> u64 {
        self.total().failed()
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "elapsed_s": self.elapsed.as_secs_f64(),
            "new_connection": self.new_connection.to_json(),
            "keep_alive": self.keep_alive.to_json(),
            "slow": self.slow.to_json(),
            "total": self.total().to_json(),
            "failures": self.failures.iter().map(|f| format!("{:.3}s {} {:?}", f.at.as_secs_f64(), f.kind.name(), f.outcome)).collect::<Vec<_>>(),
        })
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "load over {:.1}s:", self.elapsed.as_secs_f64())?;
        writeln!(
            f,
            "  {:<15} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>4} {:>5} {:>7} {:>6} {:>6}",
            "kind", "started", "ok", "refused", "reset", "trunc", "5xx", "oth", "t/o", "error", "conns", "closed"
        )?;
        let total = self.total();
        for (name, c) in Kind::ALL.iter().map(|k| (k.name(), self.of(*k))).chain([("total", &total)]) {
            writeln!(
                f,
                "  {:<15} {:>8} {:>8} {:>7} {:>6} {:>6} {:>6} {:>4} {:>5} {:>7} {:>6} {:>6}",
                name,
                c.started,
                c.ok,
                c.refused,
                c.reset,
                c.truncated,
                c.server_error,
                c.other_status,
                c.timeout,
                c.other_error,
                c.connections,
                c.closed_by_server
            )?;
        }
        for failure in &self.failures {
            writeln!(
                f,
                "  failure at {:.3}s ({}): {:?}",
                failure.at.as_secs_f64(),
                failure.kind.name(),
                failure.outcome
            )?;
        }
        Ok(())
    }
}

/// What the client tasks share.
#[derive(Debug)]
struct Shared {
    spec: LoadSpec,
    started: Instant,
    deadline: Instant,
    stop: AtomicBool,
    started_requests: AtomicU64,
    counts: [AtomicCounts; 3],
    failures: Mutex<Vec<Failure>>,
}

impl Shared {
    fn counts(&self, kind: Kind) -> &AtomicCounts {
        match kind {
            Kind::NewConnection => &self.counts[0],
            Kind::KeepAlive => &self.counts[1],
            Kind::Slow => &self.counts[2],
        }
    }

    /// Whether another request may start; if so, it is counted as started.
    fn may_start(&self, kind: Kind) -> bool {
        if self.stop.load(Ordering::SeqCst) || Instant::now() >= self.deadline {
            return false;
        }
        if let Some(max) = self.spec.max_requests {
            if self.started_requests.fetch_add(1, Ordering::SeqCst) >= max {
                return false;
            }
        }
        self.counts(kind).started.fetch_add(1, Ordering::SeqCst);
        true
    }

    fn record(&self, kind: Kind, outcome: Outcome) {
        let c = self.counts(kind);
        let counter = match &outcome {
            Outcome::Ok { close } => {
                if *close && kind == Kind::KeepAlive {
                    c.closed_by_server.fetch_add(1, Ordering::SeqCst);
                }
                &c.ok
            }
            Outcome::Refused => &c.refused,
            Outcome::Reset(_) => &c.reset,
            Outcome::Truncated(_) => &c.truncated,
            Outcome::ServerError(_) => &c.server_error,
            Outcome::OtherStatus(_) => &c.other_status,
            Outcome::Timeout(_) => &c.timeout,
            Outcome::OtherError(_) => &c.other_error,
        };
        counter.fetch_add(1, Ordering::SeqCst);
        if !matches!(outcome, Outcome::Ok { .. }) {
            let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
            let same =
                |f: &&Failure| f.kind == kind && std::mem::discriminant(&f.outcome) == std::mem::discriminant(&outcome);
            if failures.iter().filter(same).count() < KEPT_FAILURES {
                failures.push(Failure { at: self.started.elapsed(), kind, outcome });
            }
        }
    }

    fn report(&self) -> Report {
        Report {
            new_connection: self.counts(Kind::NewConnection).snapshot(),
            keep_alive: self.counts(Kind::KeepAlive).snapshot(),
            slow: self.counts(Kind::Slow).snapshot(),
            elapsed: self.started.elapsed(),
            failures: self.failures.lock().unwrap_or_else(|e| e.into_inner()).clone(),
        }
    }

    fn is_over(&self) -> bool {
        self.stop.load(Ordering::SeqCst) || Instant::now() >= self.deadline
    }

    /// Sleeps `d`, or less when the load ends meanwhile.
    async fn pause(&self, d: Duration) {
        if d.is_zero() {
            return;
        }
        let until = (Instant::now() + d).min(self.deadline);
        while !self.is_over() && Instant::now() < until {
            tokio::time::sleep_until(until.min(Instant::now() + Duration::from_millis(100))).await;
        }
    }
}

/// A running load. Must be started within a Tokio runtime (its clients are tasks on it).
#[derive(Debug)]
pub struct Load {
    shared: Arc<Shared>,
    tasks: Vec<JoinHandle<()>>,
}

impl Load {
    /// Starts every client now.
    pub fn start(spec: LoadSpec) -> Load {
        let now = Instant::now();
        let shared = Arc::new(Shared {
            deadline: now + spec.duration,
            started: now,
            stop: AtomicBool::new(false),
            started_requests: AtomicU64::new(0),
            counts: Default::default(),
            failures: Mutex::new(Vec::new()),
            spec,
        });
        let mut tasks = Vec::new();
        for _ in 0..shared.spec.new_connection_clients {
            tasks.push(tokio::spawn(new_connection_client(shared.clone())));
        }
        for _ in 0..shared.spec.keep_alive_clients {
            tasks.push(tokio::spawn(keep_alive_client(shared.clone())));
        }
        if let Some(every) = shared.spec.slow_every {
            tasks.push(tokio::spawn(slow_starter(shared.clone(), every)));
        }
        Load { shared, tasks }
    }

    /// The counts so far (requests in flight are not in them yet).
    pub fn snapshot(&self) -> Report {
        self.shared.report()
    }

    /// Whether the load's time is up or it was told to stop (requests may still be in flight).
    pub fn is_over(&self) -> bool {
        self.shared.is_over()
    }

    /// Waits for the load's duration to run out and for every request in flight to end.
    pub async fn finish(self) -> Report {
        for task in self.tasks {
            let _ = task.await;
        }
        self.shared.report()
    }

    /// Starts no more requests, waits for those in flight, returns the totals.
    pub async fn stop(self) -> Report {
        self.shared.stop.store(true, Ordering::SeqCst);
        self.finish().await
    }
}

/// Runs `spec` to the end and returns the totals.
pub async fn run(spec: LoadSpec) -> Report {
    Load::start(spec).finish().await
}

async fn new_connection_client(shared: Arc<Shared>) {
    let request = request_bytes(&shared.spec.addr, &shared.spec.path, true);
    while shared.may_start(Kind::NewConnection) {
        let outcome = one_shot(&shared, Kind::NewConnection, &request).await;
        shared.record(Kind::NewConnection, outcome);
        shared.pause(shared.spec.pause).await;
    }
}

async fn slow_starter(shared: Arc<Shared>, every: Duration) {
    let request = Arc::new(request_bytes(&shared.spec.addr, &shared.spec.slow_path, true));
    let mut slow = Vec::new();
    let mut next = Instant::now();
    while shared.may_start(Kind::Slow) {
        let (shared2, request) = (shared.clone(), request.clone());
        slow.push(tokio::spawn(async move {
            let outcome = one_shot(&shared2, Kind::Slow, &request).await;
            shared2.record(Kind::Slow, outcome);
        }));
        next += every;
        let now = Instant::now();
        if next > now {
            shared.pause(next - now).await;
        } else {
            next = now;
        }
    }
    for task in slow {
        let _ = task.await;
    }
}

async fn keep_alive_client(shared: Arc<Shared>) {
    let request = request_bytes(&shared.spec.addr, &shared.spec.path, false);
    let mut conn: Option<Conn> = None;
    while shared.may_start(Kind::KeepAlive) {
        let deadline = Instant::now() + shared.spec.timeout;
        let mut c = match conn.take() {
            Some(c) => c,
            None => match connect(&shared, Kind::KeepAlive, deadline).await {
                Ok(c) => c,
                Err(outcome) => {
                    shared.record(Kind::KeepAlive, outcome);
                    shared.pause(shared.spec.pause.max(Duration::from_millis(10))).await;
                    continue;
                }
            },
        };
        let outcome = c.exchange(&request, deadline).await;
        if outcome == (Outcome::Ok { close: false }) {
            conn = Some(c);
        }
        shared.record(Kind::KeepAlive, outcome);
        shared.pause(shared.spec.pause).await;
    }
}

/// A new connection, one request, close.
async fn one_shot(shared: &Shared, kind: Kind, request: &[u8]) -> Outcome {
    let timeout =
        if kind == Kind::Slow { shared.spec.timeout + slow_ms(&shared.spec.slow_path) } else { shared.spec.timeout };
    let deadline = Instant::now() + timeout;
    let mut conn = match connect(shared, kind, deadline).await {
        Ok(c) => c,
        Err(outcome) => return outcome,
    };
    conn.exchange(request, deadline).await
}

fn slow_ms(path: &str) -> Duration {
    let ms = path.split(['?', '&']).find_map(|p| p.strip_prefix("ms=")).and_then(|v| v.parse().ok()).unwrap_or(0);
    Duration::from_millis(ms)
}

async fn connect(shared: &Shared, kind: Kind, deadline: Instant) -> Result<Conn, Outcome> {
    match tokio::time::timeout_at(deadline, TcpStream::connect(shared.spec.addr)).await {
        Err(_) => Err(Outcome::Timeout("connect".into())),
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionRefused => Err(Outcome::Refused),
        // A SYN queued on a listener that was then closed.
        Ok(Err(e)) if e.kind() == ErrorKind::ConnectionReset => Err(Outcome::Reset(format!("connect: {e}"))),
        Ok(Err(e)) => Err(Outcome::OtherError(format!("connect: {e}"))),
        Ok(Ok(stream)) => {
            let _ = stream.set_nodelay(true);
            shared.counts(kind).connections.fetch_add(1, Ordering::SeqCst);
            Ok(Conn::new(stream))
        }
    }
}

fn request_bytes(addr: &SocketAddr, path: &str, close: bool) -> Vec<u8> {
    let connection = if close { "Connection: close\r\n" } else { "" };
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: lb-load\r\n{connection}\r\n").into_bytes()
}
