//! What a server's last health check found: the state `health` writes and stats read. Here,
//! below both, because a server keeps its last result.

use std::fmt;
use std::time::{Duration, SystemTime};

/// A check's outcome, named as HAProxy names them (its stats' `check_status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum CheckStatus {
    /// No check has completed yet.
    #[default]
    Init,
    /// TCP connect succeeded.
    L4Ok,
    /// TCP connect timed out.
    L4Timeout,
    /// TCP connect failed (refused, unreachable …).
    L4Con,
    /// The HTTP response had the expected status.
    L7Ok,
    /// The HTTP response had another status.
    L7Status,
    /// No complete HTTP response head in time.
    L7Timeout,
    /// The HTTP exchange failed (connection closed, not HTTP …).
    L7Response,
}

impl CheckStatus {
    /// HAProxy's short name: `L4OK`, `L7STS` …
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CheckStatus::Init => "INI",
            CheckStatus::L4Ok => "L4OK",
            CheckStatus::L4Timeout => "L4TOUT",
            CheckStatus::L4Con => "L4CON",
            CheckStatus::L7Ok => "L7OK",
            CheckStatus::L7Status => "L7STS",
            CheckStatus::L7Timeout => "L7TOUT",
            CheckStatus::L7Response => "L7RSP",
        }
    }

    /// HAProxy's description, the `reason` of its UP/DOWN log lines.
    pub(crate) fn reason(self) -> &'static str {
        match self {
            CheckStatus::Init => "Initializing",
            CheckStatus::L4Ok => "Layer4 check passed",
            CheckStatus::L4Timeout => "Layer4 timeout",
            CheckStatus::L4Con => "Layer4 connection problem",
            CheckStatus::L7Ok => "Layer7 check passed",
            CheckStatus::L7Status => "Layer7 wrong status",
            CheckStatus::L7Timeout => "Layer7 timeout",
            CheckStatus::L7Response => "Layer7 invalid response",
        }
    }

    pub(crate) fn passed(self) -> bool {
        matches!(self, CheckStatus::L4Ok | CheckStatus::L7Ok)
    }
}

impl fmt::Display for CheckStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The last check of a server, kept on its [`ServerState`] for stats.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct CheckResult {
    pub(crate) status: CheckStatus,
    /// The HTTP status received (HTTP checks that got a response).
    pub(crate) code: Option<u16>,
    /// What went wrong (or the status's reason phrase), e.g. `Connection refused`.
    pub(crate) info: Option<String>,
    /// From the start of the connect to the outcome.
    pub(crate) duration: Duration,
    /// When the check ended; `None` before the first.
    pub(crate) at: Option<SystemTime>,
}
