//! The documented default of every setting, in one place so that validation, `Default` impls
//! and docs/config-lb-proxy.md agree.

use std::path::PathBuf;
use std::time::Duration;

use lb_supervisor::{RuntimeEndpoints, Supervision};

use crate::model::{CheckKind, Facility, Global, HealthCheck, Http2, Log, LogFormat, LogHeader, LogTarget, Timeouts};
use crate::supervision::SocketDefaults;

pub(crate) const MAX_CONNECTIONS: usize = 4096;
pub(crate) const CONTROL_SOCKET: &str = lb_supervisor::control::DEFAULT_SOCKET;
pub(crate) const RUNTIME_SOCKET: &str = "/var/run/lb/lb-proxy-runtime.sock";
pub(crate) const STATS_REFRESH: Duration = Duration::from_secs(5);
pub(crate) const LOG_TAG: &str = "haproxy";
/// `show info`'s `Name:`.
pub(crate) const RUNTIME_NAME: &str = "lb-proxy";
pub(crate) const CLOSE_SPREAD: Duration = Duration::from_secs(5);
pub(crate) const RETRIES: u32 = 3;
/// `max_header_size` when neither a frontend nor `defaults` says (HAProxy's `tune.bufsize`);
/// lb-proxy sizes its server connections' buffers by it when no frontend says otherwise.
pub const MAX_HEADER_SIZE: usize = 16 * 1024;
/// hyper refuses read buffers smaller than this.
pub(crate) const MIN_HEADER_SIZE: usize = 8 * 1024;
pub(crate) const MAX_MAX_HEADER_SIZE: usize = 1024 * 1024;
/// `max_body_size`'s range: a byte to a terabyte.
pub(crate) const MAX_BODY_SIZE_RANGE: std::ops::RangeInclusive<usize> = 1..=(1 << 40);
pub(crate) const CHECK_METHOD: &str = "GET";
pub(crate) const CHECK_PATH: &str = "/ping";
pub(crate) const CHECK_STATUS: u16 = 200;
pub(crate) const CHECK_INTERVAL: Duration = Duration::from_secs(2);
pub(crate) const CHECK_RISE: u32 = 2;
pub(crate) const CHECK_FALL: u32 = 3;
pub(crate) const WEIGHT: u32 = 1;
pub(crate) const MAX_WEIGHT: u32 = 256;
pub(crate) const MIN_DURATION: Duration = Duration::from_millis(1);
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(24 * 3600);

impl Default for Http2 {
    fn default() -> Self {
        // HAProxy's and nginx's stream limit; RFC 9113's initial stream window; a connection
        // window that lets a few streams run at full speed at once.
        Http2 { enabled: true, max_concurrent_streams: 100, stream_window: 65_535, connection_window: 1 << 20 }
    }
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(5),
            client: Duration::from_secs(30),
            server: Duration::from_secs(30),
            http_request: Duration::from_secs(10),
            http_keep_alive: Duration::from_secs(10),
            check: Duration::from_secs(2),
            tunnel: Duration::from_secs(3600),
        }
    }
}

impl Default for Log {
    fn default() -> Self {
        Log {
            target: LogTarget::Stdout,
            format: LogFormat::Haproxy,
            header: LogHeader::Rfc3164,
            tag: LOG_TAG.to_owned(),
            facility: Facility::Local0,
            hostname: None,
        }
    }
}

impl Default for Global {
    fn default() -> Self {
        Global {
            max_connections: MAX_CONNECTIONS,
            supervision: Supervision {
                control_socket: PathBuf::from(CONTROL_SOCKET),
                runtime: RuntimeEndpoints { socket: Some(PathBuf::from(RUNTIME_SOCKET)), tcp: None },
                user: None,
                group: None,
                worker_threads: None,
                max_old_workers: Supervision::DEFAULT_MAX_OLD_WORKERS,
                hard_stop_after: None,
                worker_start_timeout: Supervision::DEFAULT_WORKER_START_TIMEOUT,
                canary: None,
            },
            log: Log::default(),
            stats: None,
            close_spread: CLOSE_SPREAD,
            runtime_name: RUNTIME_NAME.to_owned(),
        }
    }
}

/// lb-proxy's sockets when `global` names none.
pub(crate) const SOCKETS: SocketDefaults =
    SocketDefaults { control_socket: Some(CONTROL_SOCKET), runtime_socket: Some(RUNTIME_SOCKET) };

/// A TCP connect check every 2s, up after 2 successes, down after 3 failures.
impl Default for HealthCheck {
    fn default() -> Self {
        HealthCheck { kind: CheckKind::Tcp, interval: CHECK_INTERVAL, rise: CHECK_RISE, fall: CHECK_FALL }
    }
}
