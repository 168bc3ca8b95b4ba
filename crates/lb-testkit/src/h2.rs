//! Hostile HTTP/2 clients: frames crafted with python3-h2's hyperframe and hpack
//! (`h2/hostile.py`), for the attacks an edge proxy must survive: rapid reset, CONTINUATION
//! floods, SETTINGS and PING floods, a body that never comes.

use std::net::SocketAddr;

use crate::DEBIAN_PYTHON;

const HOSTILE: &str = include_str!("h2/hostile.py");

/// What one attack saw.
#[derive(Debug)]
pub struct Outcome {
    /// Frames (or stream openings) sent before the server closed or the count was reached.
    pub sent: u64,
    /// The server closed the connection.
    pub closed: bool,
    /// The error code of the server's GOAWAY, when one was read.
    pub goaway: Option<u32>,
    /// Statuses of the answers read.
    pub statuses: Vec<u16>,
    pub seconds: f64,
}

/// Runs `attack` (see `h2/hostile.py`: `rapid-reset`, `continuation`, `settings`, `ping`,
/// `slow-body`) against the h2c listener `addr`, `n` times (seconds for `slow-body`).
pub async fn attack(attack: &str, addr: SocketAddr, n: u64) -> Outcome {
    let out = tokio::process::Command::new(DEBIAN_PYTHON)
        .args(["-c", HOSTILE, attack, &addr.ip().to_string(), &addr.port().to_string(), &n.to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{DEBIAN_PYTHON} (python3-h2: scripts/install-deps test): {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{attack}: {e}: {stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    Outcome {
        sent: v["sent"].as_u64().unwrap_or(0),
        closed: v["closed"].as_bool().unwrap_or(false),
        goaway: v["goaway"].as_u64().map(|c| c as u32),
        statuses: v["statuses"].as_array().into_iter().flatten().filter_map(|s| s.as_u64()).map(|s| s as u16).collect(),
        seconds: v["seconds"].as_f64().unwrap_or(0.0),
    }
}
