//! systemd's `sd_notify`: telling the service manager that the master is ready, reloading,
//! stopping, and what it is doing.
//!
//! Only the master notifies: it is the service's main PID, and workers are spawned with a
//! cleared environment, so they never see `NOTIFY_SOCKET`. Without `NOTIFY_SOCKET` (not under
//! systemd, or not `Type=notify`/`notify-reload`, or under SMF on illumos) every call is a no-op.
//! A notification that cannot be delivered is logged and otherwise ignored: the service manager
//! being unreachable must never stop us from serving.
//!
//! Reload protocol (`Type=notify-reload`, systemd ≥ 253): [`Notifier::reloading`] when a reload
//! starts, then [`Notifier::ready`] once it is over, whether it succeeded or not.

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
#[cfg(test)]
use std::path::Path;

use nix::sys::time::TimeValLike;
use nix::time::{clock_gettime, ClockId};

use crate::Error;

/// Where notifications go: the socket systemd named, if any.
#[derive(Debug)]
pub(crate) struct Notifier {
    target: Option<Target>,
}

#[derive(Debug)]
struct Target {
    addr: SocketAddr,
    /// `NOTIFY_SOCKET` as given, for messages.
    name: String,
}

impl Notifier {
    /// From `NOTIFY_SOCKET`, read once at master start.
    ///
    /// The variable is left in our environment (removing it is not thread-safe); workers never
    /// inherit it because they are spawned with a cleared environment.
    pub(crate) fn from_env() -> Notifier {
        match std::env::var_os("NOTIFY_SOCKET") {
            Some(value) => Notifier::from_value(&value),
            None => Notifier { target: None },
        }
    }

    /// A notifier writing to the datagram socket bound at `path`.
    #[cfg(test)]
    pub(crate) fn to_socket(path: &Path) -> io::Result<Notifier> {
        let addr = SocketAddr::from_pathname(path)?;
        Ok(Notifier { target: Some(Target { addr, name: path.display().to_string() }) })
    }

    /// `NOTIFY_SOCKET`: an absolute path, or on Linux `@name` for an abstract socket. Anything
    /// else (an abstract name elsewhere, systemd's `vsock:` form) is reported and ignored.
    fn from_value(value: &OsStr) -> Notifier {
        let name = value.to_string_lossy().into_owned();
        let addr = match value.as_bytes() {
            [b'/', ..] => SocketAddr::from_pathname(value),
            #[cfg(target_os = "linux")]
            [b'@', abstract_name @ ..] => {
                use std::os::linux::net::SocketAddrExt;
                SocketAddr::from_abstract_name(abstract_name)
            }
            _ => Err(io::Error::new(io::ErrorKind::Unsupported, "not a socket path this system can use")),
        };
        match addr {
            Ok(addr) => Notifier { target: Some(Target { addr, name }) },
            Err(source) => {
                tracing::warn!("NOTIFY_SOCKET={name:?} ignored: {source}; systemd will not hear from us");
                Notifier { target: None }
            }
        }
    }

    /// Whether notifications go anywhere.
    pub(crate) fn is_enabled(&self) -> bool {
        self.target.is_some()
    }

    /// Startup, or a reload, is over: serving.
    pub(crate) fn ready(&self, status: &str) {
        self.notify(&format!("READY=1\nSTATUS={}", one_line(status)));
    }

    /// A reload begins. `MONOTONIC_USEC` lets systemd match this to the reload it asked for
    /// (`Type=notify-reload`); [`ready`](Self::ready) must follow when the reload is over.
    pub(crate) fn reloading(&self, status: &str) {
        if !self.is_enabled() {
            return;
        }
        let message = match clock_gettime(ClockId::CLOCK_MONOTONIC) {
            Ok(now) => format!("RELOADING=1\nMONOTONIC_USEC={}\nSTATUS={}", now.num_microseconds(), one_line(status)),
            Err(e) => {
                // Without the timestamp systemd may not tie this to its reload; better than nothing.
                tracing::warn!("sd_notify: clock_gettime(CLOCK_MONOTONIC): {e}");
                format!("RELOADING=1\nSTATUS={}", one_line(status))
            }
        };
        self.notify(&message);
    }

    /// What we are doing, for `systemctl status`.
    pub(crate) fn status(&self, status: &str) {
        self.notify(&format!("STATUS={}", one_line(status)));
    }

    /// Shutting down.
    pub(crate) fn stopping(&self, status: &str) {
        self.notify(&format!("STOPPING=1\nSTATUS={}", one_line(status)));
    }

    fn notify(&self, message: &str) {
        let Some(target) = &self.target else { return };
        if let Err(source) = target.send(message) {
            let error = Error::Notify { socket: target.name.clone(), source };
            tracing::warn!("{error}");
        }
    }
}

impl Target {
    /// One datagram from a fresh unbound socket, as `sd_notify` does: nothing to keep open, and
    /// non-blocking so that a stalled service manager cannot stall us.
    fn send(&self, message: &str) -> io::Result<()> {
        let socket = UnixDatagram::unbound()?;
        socket.set_nonblocking(true)?;
        let sent = socket.send_to_addr(message.as_bytes(), &self.addr)?;
        if sent != message.len() {
            return Err(io::Error::new(io::ErrorKind::WriteZero, format!("sent {sent} of {} bytes", message.len())));
        }
        Ok(())
    }
}

/// A status is one `KEY=value` line: a newline in it would start another assignment.
fn one_line(status: &str) -> String {
    status.replace(['\n', '\r'], " ")
}

#[cfg(test)]
mod tests {
    use std::os::unix::ffi::OsStrExt;

    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        let mut buf = [0u8; 4096];
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(buf.get(..n).unwrap_or_default()).into_owned()
    }

    fn monotonic_usec() -> i64 {
        clock_gettime(ClockId::CLOCK_MONOTONIC).expect("clock").num_microseconds()
    }

    #[test]
    fn notifications_are_exact_datagrams() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let systemd = UnixDatagram::bind(&path).expect("bind");
        let notifier = Notifier::to_socket(&path).expect("notifier");
        assert!(notifier.is_enabled());

        notifier.ready("serving on 2 addresses");
        assert_eq!(receive(&systemd), "READY=1\nSTATUS=serving on 2 addresses");
        notifier.status("worker 12 ready");
        assert_eq!(receive(&systemd), "STATUS=worker 12 ready");
        notifier.stopping("draining\n2 connections");
        assert_eq!(receive(&systemd), "STOPPING=1\nSTATUS=draining 2 connections");

        let before = monotonic_usec();
        notifier.reloading("reloading");
        let after = monotonic_usec();
        let got = receive(&systemd);
        let lines: Vec<&str> = got.split('\n').collect();
        assert_eq!(lines.len(), 3, "{got:?}");
        assert_eq!(lines.first(), Some(&"RELOADING=1"));
        assert_eq!(lines.get(2), Some(&"STATUS=reloading"));
        let usec: i64 = lines
            .get(1)
            .and_then(|l| l.strip_prefix("MONOTONIC_USEC="))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no MONOTONIC_USEC in {got:?}"));
        assert!(before <= usec && usec <= after, "{before} <= {usec} <= {after}");
    }

    #[test]
    fn an_absent_listener_is_not_fatal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let notifier = Notifier::to_socket(&dir.path().join("nobody")).expect("notifier");
        notifier.ready("serving");
        notifier.reloading("reloading");
        Notifier { target: None }.ready("no-op");
    }

    #[test]
    fn notify_socket_values() {
        assert!(Notifier::from_value(OsStr::new("/run/systemd/notify")).is_enabled());
        assert!(!Notifier::from_value(OsStr::new("")).is_enabled());
        assert!(!Notifier::from_value(OsStr::new("relative/notify")).is_enabled());
        assert!(!Notifier::from_value(OsStr::new("vsock:2:1234")).is_enabled());
        let too_long = format!("/{}", "x".repeat(200));
        assert!(!Notifier::from_value(OsStr::new(&too_long)).is_enabled());
        assert!(!Notifier::from_value(OsStr::from_bytes(b"/run/\0notify")).is_enabled());
        assert_eq!(Notifier::from_value(OsStr::new("@systemd/notify")).is_enabled(), cfg!(target_os = "linux"));
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn abstract_sockets_on_linux() {
        use std::os::linux::net::SocketAddrExt;

        let name = format!("lb-supervisor-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).expect("abstract name");
        let systemd = UnixDatagram::bind_addr(&addr).expect("bind");
        let notifier = Notifier::from_value(OsStr::new(&format!("@{name}")));
        notifier.status("hello");
        assert_eq!(receive(&systemd), "STATUS=hello");
    }
}
