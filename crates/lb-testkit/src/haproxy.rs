//! Debian's haproxy as a reference: run one with a frontend, a backend with a checked server
//! and its Prometheus exporter, ask its runtime socket and `/metrics`, stop it. Tests compare
//! lb-proxy's answers with these.

use std::io::{Read, Write as _};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::free_port;
use crate::runtime::send_line;

/// haproxy's answers to `commands`, in order, from one haproxy run (frontend `web`, backend
/// `api` with a checked server that is down), and then its `/metrics` text.
pub fn haproxy_answers(commands: &[&str]) -> (Vec<String>, String) {
    haproxy_answers_after(&[], commands)
}

/// [`haproxy_answers`], after each of `requests` was sent to frontend `web` on a connection of
/// its own (its answer read, or the connection closed).
pub fn haproxy_answers_after(requests: &[&[u8]], commands: &[&str]) -> (Vec<String>, String) {
    let dir = tempfile::tempdir().expect("tempdir");
    let socket = dir.path().join("haproxy.sock");
    let cfg = dir.path().join("haproxy.cfg");
    let (port, metrics_port) = (free_port(), free_port());
    std::fs::write(
        &cfg,
        format!(
            "global\n  stats socket {} mode 600 level admin\ndefaults\n  mode http\n  timeout connect 1s\n  \
             timeout client 5s\n  timeout server 5s\nfrontend web\n  bind 127.0.0.1:{port}\n  default_backend api\n\
             frontend prometheus\n  bind 127.0.0.1:{metrics_port}\n  \
             http-request use-service prometheus-exporter if {{ path /metrics }}\n\
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
    for request in requests {
        if let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) {
            stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
            let _ = stream.write_all(request);
            let _ = stream.read(&mut [0; 1024]);
        }
    }
    let answers = commands.iter().map(|c| send_line(&socket, c).unwrap_or_default()).collect();
    let metrics = get_metrics(metrics_port);
    let _ = haproxy.kill();
    let _ = haproxy.wait();
    (answers, metrics)
}

fn wait_for_socket(socket: &Path) {
    for _ in 0..200 {
        if send_line(socket, "show info").is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn get_metrics(port: u16) -> String {
    let Ok(mut stream) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return String::new();
    };
    stream.set_read_timeout(Some(Duration::from_secs(5))).ok();
    let _ = write!(stream, "GET /metrics HTTP/1.1\r\nHost: metrics\r\nConnection: close\r\n\r\n");
    let mut text = String::new();
    let _ = stream.read_to_string(&mut text);
    let body = text.split_once("\r\n\r\n").map_or("", |(_, body)| body);
    // The exporter answers in chunks.
    if text.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_owned()
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else { break };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}
