//! A stand-in for systemd's notification socket: a Unix datagram socket the test binds and
//! names in the master's `NOTIFY_SOCKET`, and the clock systemd compares `MONOTONIC_USEC` with.

use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::time::TimeValLike;
use nix::time::{clock_gettime, ClockId};

/// `CLOCK_MONOTONIC` now, in microseconds (what `MONOTONIC_USEC=` carries).
pub fn monotonic_usec() -> i64 {
    clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock_gettime(CLOCK_MONOTONIC)").num_microseconds()
}

/// One notification: its `KEY=value` lines, and when it was received.
#[derive(Debug, Clone)]
pub struct Notification {
    pub text: String,
    /// [`monotonic_usec`] when it was read.
    pub received_usec: i64,
}

impl Notification {
    /// The value of `KEY=` in it.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.text.lines().find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
    }

    pub fn has(&self, assignment: &str) -> bool {
        self.text.lines().any(|l| l == assignment)
    }
}

/// The socket the master sends its notifications to.
#[derive(Debug)]
pub struct NotifySocket {
    socket: UnixDatagram,
    path: PathBuf,
    _dir: Option<tempfile::TempDir>,
}

impl NotifySocket {
    /// Binds a datagram socket at a fresh temporary path.
    pub fn bind() -> NotifySocket {
        let dir = tempfile::Builder::new().prefix("lb-notify-").tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let socket = UnixDatagram::bind(&path).expect("binding the notify socket");
        NotifySocket { socket, path, _dir: Some(dir) }
    }

    /// The value for `NOTIFY_SOCKET`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The next notification within `within`, or None.
    pub fn recv(&self, within: Duration) -> Option<Notification> {
        let deadline = Instant::now() + within;
        let mut buf = vec![0u8; 8192];
        loop {
            let left = deadline.checked_duration_since(Instant::now()).filter(|d| !d.is_zero())?;
            self.socket.set_read_timeout(Some(left)).ok()?;
            match self.socket.recv(&mut buf) {
                Ok(n) => {
                    let text = String::from_utf8_lossy(&buf[..n]).into_owned();
                    return Some(Notification { text, received_usec: monotonic_usec() });
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(_) => return None,
            }
        }
    }

    /// Notifications until one satisfies `pred` (within `within` in all): all of them, the
    /// matching one last; None when none matched in time (with what did come).
    pub fn recv_until(
        &self,
        within: Duration,
        pred: impl Fn(&Notification) -> bool,
    ) -> Result<Vec<Notification>, Vec<Notification>> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.recv(left) {
                Some(n) => {
                    let done = pred(&n);
                    seen.push(n);
                    if done {
                        return Ok(seen);
                    }
                }
                None => return Err(seen),
            }
        }
    }

    /// Every notification that arrives within `within`.
    pub fn drain(&self, within: Duration) -> Vec<Notification> {
        let deadline = Instant::now() + within;
        let mut seen = Vec::new();
        while let Some(n) = self.recv(deadline.saturating_duration_since(Instant::now())) {
            seen.push(n);
        }
        seen
    }
}
