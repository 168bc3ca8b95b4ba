//! The real TLS clients, as processes: `openssl s_client` (handshake facts: version, cipher,
//! `New`/`Reused`, ALPN, OCSP staple, the certificate served) and `curl`.

use std::io::Write as _;
use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

/// What one `openssl s_client` run printed.
#[derive(Debug, Clone)]
pub struct SClient {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl SClient {
    /// `New` or `Reused`, from the `New, TLSv1.3, Cipher is …` line.
    pub fn session(&self) -> Option<&str> {
        self.stdout.lines().find_map(|l| {
            let l = l.trim();
            if l.starts_with("Reused,") {
                Some("Reused")
            } else if l.starts_with("New,") && !l.contains("(NONE)") {
                Some("New")
            } else {
                None
            }
        })
    }

    /// The protocol version negotiated (`TLSv1.3`), from `Protocol  : …` or the session line.
    pub fn protocol(&self) -> Option<&str> {
        self.stdout.lines().find_map(|l| {
            l.trim().strip_prefix("Protocol  :").or_else(|| l.trim().strip_prefix("Protocol :")).map(str::trim)
        })
    }

    /// The subject CN of the server certificate (`subject=CN = api.example.test`).
    pub fn subject_cn(&self) -> Option<&str> {
        self.stdout
            .lines()
            .find_map(|l| l.strip_prefix("subject="))
            .and_then(|s| s.rsplit("CN = ").next())
            .map(str::trim)
    }

    /// `ALPN protocol: h2`, or `None` for `No ALPN negotiated`.
    pub fn alpn(&self) -> Option<&str> {
        self.stdout.lines().find_map(|l| l.strip_prefix("ALPN protocol: ")).map(str::trim)
    }

    /// Whether a stapled OCSP response came (`-status`).
    pub fn ocsp_stapled(&self) -> bool {
        self.stdout.contains("OCSP Response Status: successful")
    }

    /// Everything printed, for assertion messages.
    pub fn text(&self) -> String {
        format!("stdout:\n{}\nstderr:\n{}", self.stdout, self.stderr)
    }
}

/// Runs `openssl s_client -connect ADDR ARGS…`, writes `input` to it (then keeps stdin open
/// with `-ign_eof`, so that a TLS 1.3 session ticket arrives before it exits) and waits until
/// the server closes or `within` passes.
pub fn s_client(addr: SocketAddr, args: &[&str], input: &[u8], within: Duration) -> SClient {
    let mut child = Command::new("openssl")
        .arg("s_client")
        .arg("-connect")
        .arg(addr.to_string())
        .arg("-ign_eof")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("running openssl s_client");
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(input);
    }
    let pid = child.id();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let watchdog = {
        let done = done.clone();
        std::thread::spawn(move || {
            if !crate::wait_until_blocking(within, || done.load(std::sync::atomic::Ordering::SeqCst)) {
                let _ =
                    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL);
            }
        })
    };
    let out = child.wait_with_output().expect("s_client output");
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = watchdog.join();
    SClient {
        success: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// What one `curl` run said.
#[derive(Debug, Clone)]
pub struct Curl {
    /// curl's exit code (0: success; 35: TLS handshake failed; 52: empty reply; …).
    pub code: Option<i32>,
    pub body: String,
    pub stderr: String,
}

/// `curl -sS --max-time 10 ARGS… URL`.
pub fn curl(url: &str, args: &[&str]) -> Curl {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "10"])
        .args(args)
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .expect("running curl");
    Curl {
        code: out.status.code(),
        body: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}
