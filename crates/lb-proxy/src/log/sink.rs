//! Where rendered lines go, without ever blocking the request path.
//!
//! - stdout: through lb-supervisor's [`LineWriter`], a batch that one thread takes whole, writes
//!   and flushes (a slow reader of stdout fills the batch up to its limit; further lines are
//!   dropped, not waited for);
//! - syslog over a Unix datagram socket (`/dev/log`): non-blocking sends; a socket that was absent
//!   at start or was recreated (the syslog daemon restarted) is reconnected lazily, at most once a
//!   second;
//! - syslog over UDP: non-blocking sends on a connected socket.
//!
//! Dropped lines are counted and the count reported through `tracing` at most once per 10 s.

use std::io::{self, Write};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use std::time::{Duration, Instant};

use lb_supervisor::{LineWriter, Trouble};

/// How often, at most, dropped lines are reported.
const REPORT_EVERY: Duration = Duration::from_secs(10);
/// How often, at most, a missing syslog Unix socket is reconnected.
const RECONNECT_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug)]
pub(super) enum Sink {
    None,
    Stdout(LineWriter),
    Unix(UnixSyslog),
    Udp(UdpSyslog),
}

impl Sink {
    pub(super) fn stdout<W: Write + Send + 'static>(out: W, queue: usize) -> io::Result<Sink> {
        LineWriter::spawn("access-log", out, queue, |trouble| match trouble {
            Trouble::Dropped { lines, total } => {
                tracing::warn!(dropped = lines, total, "access log: {lines} lines dropped (stdout is not keeping up)")
            }
            Trouble::Failing(e) => tracing::warn!("access log: writing to stdout failed: {e}"),
        })
        .map(Sink::Stdout)
    }

    pub(super) fn unix(path: &Path) -> Sink {
        Sink::Unix(UnixSyslog::new(path.to_owned(), RECONNECT_EVERY))
    }

    pub(super) fn udp(addr: SocketAddr) -> io::Result<Sink> {
        UdpSyslog::new(addr).map(Sink::Udp)
    }

    /// Hands `line` on; never blocks (beyond appending it to the stdout batch).
    pub(super) fn send(&self, line: &str) {
        match self {
            Sink::None => {}
            Sink::Stdout(s) => {
                s.send(line.as_bytes());
            }
            Sink::Unix(s) => s.send(line.as_bytes()),
            Sink::Udp(s) => s.send(line.as_bytes()),
        }
    }

    pub(super) fn dropped(&self) -> u64 {
        match self {
            Sink::None => 0,
            Sink::Stdout(s) => s.dropped(),
            Sink::Unix(s) => s.drops.total(),
            Sink::Udp(s) => s.drops.total(),
        }
    }
}

/// Counts dropped lines and reports them, rate-limited.
#[derive(Debug)]
pub(super) struct Drops {
    what: &'static str,
    pending: AtomicU64,
    total: AtomicU64,
    last_report: Mutex<Option<Instant>>,
}

impl Drops {
    fn new(what: &'static str) -> Drops {
        Drops { what, pending: AtomicU64::new(0), total: AtomicU64::new(0), last_report: Mutex::new(None) }
    }

    fn note(&self, lines: u64) {
        self.pending.fetch_add(lines, Ordering::Relaxed);
        self.total.fetch_add(lines, Ordering::Relaxed);
        self.report_if_due();
    }

    /// Reports the drops not yet reported, unless a report went out less than 10 s ago.
    fn report_if_due(&self) {
        if self.pending.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Ok(mut last) = self.last_report.try_lock() else {
            return; // another thread is reporting
        };
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < REPORT_EVERY) {
            return;
        }
        let n = self.pending.swap(0, Ordering::Relaxed);
        if n > 0 {
            *last = Some(now);
            tracing::warn!(
                dropped = n,
                total = self.total.load(Ordering::Relaxed),
                "access log: {n} lines dropped ({})",
                self.what
            );
        }
    }

    pub(super) fn total(&self) -> u64 {
        self.total.load(Ordering::Relaxed)
    }
}

/// Syslog over a Unix datagram socket.
#[derive(Debug)]
pub(super) struct UnixSyslog {
    path: PathBuf,
    socket: RwLock<Option<UnixDatagram>>,
    last_attempt: Mutex<Option<Instant>>,
    retry_every: Duration,
    /// Whether the last attempt found the socket: state changes are reported, not every retry.
    up: AtomicBool,
    drops: Drops,
}

enum Sent {
    Yes,
    /// The receiver is gone (absent, or recreated since we connected): reconnect.
    Disconnected,
    /// Full, too big, …: this line is lost, the socket is fine.
    Failed,
}

impl UnixSyslog {
    pub(super) fn new(path: PathBuf, retry_every: Duration) -> UnixSyslog {
        let sink = UnixSyslog {
            path,
            socket: RwLock::new(None),
            last_attempt: Mutex::new(None),
            retry_every,
            up: AtomicBool::new(true),
            drops: Drops::new("syslog socket unavailable or full"),
        };
        sink.reconnect();
        sink
    }

    fn send(&self, msg: &[u8]) {
        match self.try_send(msg) {
            Sent::Yes => {}
            Sent::Failed => self.drops.note(1),
            Sent::Disconnected => {
                if self.reconnect() && matches!(self.try_send(msg), Sent::Yes) {
                    return;
                }
                self.drops.note(1);
            }
        }
        self.drops.report_if_due();
    }

    fn try_send(&self, msg: &[u8]) -> Sent {
        let socket = self.socket.read().unwrap_or_else(PoisonError::into_inner);
        let Some(socket) = socket.as_ref() else {
            return Sent::Disconnected;
        };
        match socket.send(msg) {
            Ok(_) => Sent::Yes,
            Err(e) => match e.kind() {
                io::ErrorKind::ConnectionRefused
                | io::ErrorKind::NotFound
                | io::ErrorKind::NotConnected
                | io::ErrorKind::BrokenPipe
                | io::ErrorKind::ConnectionReset => Sent::Disconnected,
                _ => Sent::Failed,
            },
        }
    }

    /// Connects a fresh socket to the path, unless another attempt was made within the retry
    /// interval. Returns whether a new socket is in place.
    fn reconnect(&self) -> bool {
        let Ok(mut last) = self.last_attempt.try_lock() else {
            return false; // another thread is at it
        };
        let now = Instant::now();
        if last.is_some_and(|t| now.duration_since(t) < self.retry_every) {
            return false;
        }
        *last = Some(now);
        let connected = UnixDatagram::unbound().and_then(|s| {
            s.connect(&self.path)?;
            s.set_nonblocking(true)?;
            Ok(s)
        });
        let path = self.path.display();
        match connected {
            Ok(s) => {
                *self.socket.write().unwrap_or_else(PoisonError::into_inner) = Some(s);
                if !self.up.swap(true, Ordering::Relaxed) {
                    tracing::info!("access log: connected to syslog socket {path}");
                }
                true
            }
            Err(e) => {
                *self.socket.write().unwrap_or_else(PoisonError::into_inner) = None;
                if self.up.swap(false, Ordering::Relaxed) {
                    tracing::warn!(
                        "access log: cannot send to syslog socket {path}: {e}; retrying at most \
                         once a second, dropping lines meanwhile"
                    );
                }
                false
            }
        }
    }
}

/// Syslog over UDP.
#[derive(Debug)]
pub(super) struct UdpSyslog {
    socket: UdpSocket,
    drops: Drops,
}

impl UdpSyslog {
    fn new(addr: SocketAddr) -> io::Result<UdpSyslog> {
        let local: SocketAddr = match addr {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::UNSPECIFIED, 0).into(),
        };
        let socket = UdpSocket::bind(local)?;
        socket.connect(addr)?;
        socket.set_nonblocking(true)?;
        Ok(UdpSyslog { socket, drops: Drops::new("syslog UDP send failed") })
    }

    fn send(&self, msg: &[u8]) {
        match self.socket.send(msg) {
            Ok(_) => self.drops.report_if_due(),
            Err(_) => self.drops.note(1),
        }
    }
}
