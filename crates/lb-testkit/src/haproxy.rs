//! Debian's haproxy as a reference: run one with a frontend, a backend and a checked server,
//! ask its runtime socket some commands, stop it. Tests compare lb-proxy's answers with these.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::free_port;
use crate::runtime::send_line;

/// haproxy's answers to `commands`, in order, from one haproxy run (frontend `web`, backend
/// `api` with a checked server that is down).
pub fn haproxy_answers(commands: &[&str]) -> Vec<String> {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("haproxy.sock");
    let cfg = dir.path().join("haproxy.cfg");
    let port = free_port();
    std::fs::write(
        &cfg,
        format!(
            "global\n  stats socket {} mode 600 level admin\ndefaults\n  mode http\n  timeout connect 1s\n  \
             timeout client 5s\n  timeout server 5s\nfrontend web\n  bind 127.0.0.1:{port}\n  default_backend api\n\
             backend api\n  server a1 127.0.0.1:1 check inter 200ms\n",
            socket.display()
        ),
    )
    .expect("write haproxy.cfg");
    let mut haproxy = Command::new("haproxy")
        .args(["-db", "-f"])
        .arg(&cfg)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("run haproxy (Debian's haproxy package)");
    wait_for_socket(&socket);
    let answers = commands.iter().map(|c| send_line(&socket, c).unwrap_or_default()).collect();
    let _ = haproxy.kill();
    let _ = haproxy.wait();
    answers
}

fn wait_for_socket(socket: &Path) {
    for _ in 0..200 {
        if send_line(socket, "show info").is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}
