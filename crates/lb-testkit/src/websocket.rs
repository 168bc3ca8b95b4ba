//! A real WebSocket server and client: Debian's python3-websockets (RFC 6455, with its
//! permessage-deflate), run from `websocket/peer.py`.
//!
//! [`WsServer`] echoes every message, answers `headers` with the upgrade request's headers as
//! JSON, and closes with code 4000 on `bye`. [`talk`] connects (`ws://` or `wss://`), sends
//! messages that must come back unchanged, asks for the headers, says `bye` and reports.

use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::{free_port, wait_until_blocking, DEBIAN_PYTHON};

const PEER: &str = include_str!("websocket/peer.py");

/// The echo server; stopped (by its PID) when dropped.
#[derive(Debug)]
pub struct WsServer {
    child: Child,
    addr: SocketAddr,
}

impl WsServer {
    pub fn start() -> WsServer {
        let port = free_port();
        let child = Command::new(DEBIAN_PYTHON)
            .args(["-c", PEER, "serve", &port.to_string()])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{DEBIAN_PYTHON} (python3-websockets: scripts/install-deps test): {e}"));
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let listening = wait_until_blocking(Duration::from_secs(10), || std::net::TcpStream::connect(addr).is_ok());
        let server = WsServer { child, addr };
        assert!(listening, "the WebSocket server did not listen on {addr}");
        server
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
}

impl Drop for WsServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What one client conversation gave.
#[derive(Debug)]
pub struct Talk {
    /// Messages that came back unchanged before the end.
    pub echoed: usize,
    /// The upgrade request's headers as the server saw them (names in lower case).
    pub headers: Option<serde_json::Value>,
    /// How the connection closed: `4000` (the server's answer to `bye`), another code, or
    /// `abnormally` (no close frame).
    pub closed: Option<String>,
    pub stdout: String,
    pub stderr: String,
}

/// Connects to `url`, sends `messages` messages `gap` apart (each must come back), then asks
/// for the headers and says `bye`.
pub async fn talk(url: &str, messages: usize, gap: Duration) -> Talk {
    let output = tokio::process::Command::new(DEBIAN_PYTHON)
        .args(["-c", PEER, "talk", url, &messages.to_string(), &gap.as_secs_f64().to_string()])
        .kill_on_drop(true)
        .output()
        .await
        .unwrap_or_else(|e| panic!("{DEBIAN_PYTHON}: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let mut talk = Talk { echoed: 0, headers: None, closed: None, stdout: stdout.clone(), stderr };
    for line in stdout.lines() {
        if let Some(n) = line.strip_prefix("echoed ") {
            talk.echoed = n.parse().unwrap_or(0);
        } else if let Some(how) = line.strip_prefix("closed ") {
            talk.closed = Some(how.to_owned());
        } else if line.starts_with('{') {
            talk.headers = serde_json::from_str(line).ok();
        }
    }
    talk
}
