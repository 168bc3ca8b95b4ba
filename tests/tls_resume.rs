//! Session resumption with the master's ticket keys and with shared key files, through real
//! `openssl s_client` sessions (`-sess_out`, then `-sess_in`), TLS 1.2 and 1.3: keys age out
//! after `ticket_lifetime` (a full handshake, which succeeds); a ticket made with another
//! instance's keys gets a full handshake, never a failure; instances sharing
//! `ticket_key_files` resume each other's sessions; key rotation under a stream of handshakes
//! fails none of them; a key file others can read is refused, naming it; a client that sends
//! nothing after its handshake still takes a TLS 1.3 ticket away. (Resumption across a reload is
//! in tls_reload.rs.)

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lb_testkit::certs::TestCerts;
use lb_testkit::sclient::{s_client, SClient};
use lb_testkit::{run_lb_tls, TestServer, TlsProcess};

const REQUEST: &[u8] = b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n";
const WAIT: Duration = Duration::from_secs(10);
const VERSIONS: [&str; 2] = ["-tls1_2", "-tls1_3"];

fn start(pem: &Path, backend: &TestServer, global: &str) -> TlsProcess {
    let pem = pem.display().to_string();
    let backend = backend.addr();
    let global = global.to_owned();
    TlsProcess::start_with(1, move |ports| {
        format!(
            r#"global:
  control_socket: master.sock
  worker_threads: 1
{global}
tls:
  certificates: [ {pem} ]
backend:
  address: "{backend}"
  write_proxy: none
frontends:
  - bind: "127.0.0.1:{port}"
"#,
            port = ports[0]
        )
    })
}

/// One connection, saving its session (`save`) or resuming the saved one.
fn connect(tls: &TlsProcess, version: &str, session: &Path, save: bool) -> SClient {
    let file = session.display().to_string();
    let out = s_client(tls.addr(), &[version, if save { "-sess_out" } else { "-sess_in" }, &file], REQUEST, WAIT);
    assert!(out.stdout.contains(" 200 OK"), "{version}: every handshake is served: {}", out.text());
    out
}

fn key_file(dir: &Path, name: &str, byte: u8) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, [byte; 80]).expect("write the key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

#[test]
fn tickets_age_out_after_their_lifetime_and_the_handshake_is_then_a_full_one() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    // A lifetime of 3 s: "at once" is two s_client runs, which a loaded machine (a test run
    // beside builds) has been seen to stretch past 1 s.
    let tls = start(&pem, &server, "  ticket_key_rotation: 1s\n  ticket_lifetime: 3s");
    for version in VERSIONS {
        let session = certs.dir().join(format!("aged{version}"));
        let first = connect(&tls, version, &session, true);
        assert_eq!(first.session(), Some("New"));
        // The client is told the same lifetime, in both versions' tickets, so that it does
        // not keep a ticket the keys no longer decrypt.
        assert!(
            first.text().contains("TLS session ticket lifetime hint: 3 (seconds)"),
            "{version}: the ticket's lifetime hint is ticket_lifetime: {}",
            first.text()
        );
        assert_eq!(connect(&tls, version, &session, false).session(), Some("Reused"), "{version} at once");
        // The key that made it is replaced within 1 s and forgotten 3 s later; the session
        // itself is good for 3 s.
        std::thread::sleep(Duration::from_millis(5500));
        let out = connect(&tls, version, &session, false);
        assert_eq!(out.session(), Some("New"), "{version} after its lifetime: {}", out.text());
    }
}

#[test]
fn a_ticket_from_another_instance_gets_a_full_handshake_and_shared_key_files_resume() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let (a, b, other) =
        (key_file(certs.dir(), "a.key", 1), key_file(certs.dir(), "b.key", 2), key_file(certs.dir(), "c.key", 3));
    let files = |list: &[&Path]| {
        let names: Vec<String> = list.iter().map(|p| p.display().to_string()).collect();
        format!("  ticket_key_files: [ {} ]", names.join(", "))
    };
    // Two instances behind one name: the same files. A third one with its own key.
    let first = start(&pem, &server, &files(&[&a, &b]));
    let second = start(&pem, &server, &files(&[&a, &b]));
    let stranger = start(&pem, &server, &files(&[&other]));
    // An instance that encrypts with b but still reads a (rotation across a fleet).
    let rotated = start(&pem, &server, &files(&[&b, &a]));
    for version in VERSIONS {
        let session = certs.dir().join(format!("shared{version}"));
        assert_eq!(connect(&first, version, &session, true).session(), Some("New"));
        let out = connect(&second, version, &session, false);
        assert_eq!(out.session(), Some("Reused"), "{version}: same files, same keys: {}", out.text());
        let out = connect(&rotated, version, &session, false);
        assert_eq!(
            out.session(),
            Some("Reused"),
            "{version}: a key further down the list still decrypts: {}",
            out.text()
        );
        let out = connect(&stranger, version, &session, false);
        assert_eq!(out.session(), Some("New"), "{version}: unknown key, a full handshake: {}", out.text());
    }
}

/// Rotation every second under a stream of handshakes, new and resumed: none fails, and a
/// session from before two rotations still resumes (its key is kept for `ticket_lifetime`).
#[test]
fn key_rotation_under_a_stream_of_handshakes_fails_none() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let tls = start(&pem, &server, "  ticket_key_rotation: 1s\n  ticket_lifetime: 30s");
    let early: Vec<PathBuf> = VERSIONS.iter().map(|v| certs.dir().join(format!("early{v}"))).collect();
    for (version, session) in VERSIONS.iter().zip(&early) {
        connect(&tls, version, session, true);
    }
    let end = Instant::now() + Duration::from_millis(3500);
    let mut handshakes = 0;
    while Instant::now() < end && handshakes < 400 {
        for (version, session) in VERSIONS.iter().zip(&early) {
            let fresh = certs.dir().join("fresh");
            connect(&tls, version, &fresh, true);
            connect(&tls, version, &fresh, false);
            let out = connect(&tls, version, session, false);
            assert_eq!(out.session(), Some("Reused"), "{version}, {handshakes} handshakes in: {}", out.text());
            handshakes += 3;
        }
    }
    assert!(handshakes >= 12, "the stream ran across rotations: {handshakes} handshakes");
}

#[test]
fn a_ticket_key_file_others_can_read_is_refused_naming_it() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let key = key_file(certs.dir(), "open.key", 9);
    std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let good = key_file(certs.dir(), "good.key", 8);
    let tls = start(&pem, &server, &format!("  ticket_key_files: [ {} ]", good.display()));
    let yaml = std::fs::read_to_string(tls.config_path()).expect("config").replace("good.key", "open.key");
    let path = tls.dir().join("open.yaml");
    std::fs::write(&path, yaml).expect("write");
    let out = run_lb_tls(&["-c", "-f", &path.display().to_string()], tls.dir(), WAIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("global.ticket_key_files[0]")
            && stderr.contains(&key.display().to_string())
            && stderr.contains("readable by group or others"),
        "{stderr}"
    );
}

/// `sleep 1 | openssl s_client -connect ADDR ARGS…` as an operator types it, the pause shorter:
/// no request, no `-ign_eof`; s_client leaves when its input ends. (With `</dev/null` it may
/// leave before any server's ticket arrives: HAProxy's too.) What it printed.
fn s_client_no_input(tls: &TlsProcess, args: &[&str]) -> String {
    let mut child = Command::new("timeout")
        .args(["10", "openssl", "s_client", "-connect", &tls.addr().to_string()])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("running openssl s_client");
    std::thread::sleep(Duration::from_millis(500));
    drop(child.stdin.take());
    let out = child.wait_with_output().expect("s_client output");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn session_line(stdout: &str) -> Option<&str> {
    stdout.lines().find(|l| l.starts_with("New,") || l.starts_with("Reused,"))
}

/// The check operations.md gives (`s_client -sess_out FILE` with no request, then `-sess_in`):
/// the TLS 1.3 ticket leaves right after the handshake, as HAProxy sends it, not with the first
/// response bytes (which never come), so a client that sends nothing saves a session and
/// resumes it.
#[test]
fn a_client_that_sends_nothing_takes_a_tls13_ticket_away_and_resumes_with_it() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let pem = certs.server("api", &["api.example.test"]);
    let tls = start(&pem, &server, "");
    for attempt in 0..3 {
        let session = certs.dir().join(format!("quiet-{attempt}"));
        let file = session.display().to_string();
        let first = s_client_no_input(&tls, &["-tls1_3", "-sess_out", &file]);
        assert!(session_line(&first).is_some_and(|l| l.starts_with("New, TLSv1.3")), "attempt {attempt}: {first}");
        let saved = std::fs::metadata(&session).map(|m| m.len()).unwrap_or(0);
        assert!(saved > 0, "attempt {attempt}: no session saved (no ticket came): {first}");
        let second = s_client_no_input(&tls, &["-tls1_3", "-sess_in", &file]);
        assert!(
            session_line(&second).is_some_and(|l| l.starts_with("Reused, TLSv1.3")),
            "attempt {attempt}: the saved session resumes: {second}"
        );
    }
}
