//! lb-tls reloads: certificate rotation is "replace the files, `lbctl reload`"; a bad
//! certificate fails the reload naming the file while the current worker keeps serving; a bad
//! PEM inside a certificate directory is reported and skipped; rotation under load fails no
//! handshake; sessions resume (TLS 1.2 and 1.3) within a worker and across a reload (the
//! master's ticket keys, and for TLS 1.2 clients without tickets the session-ID cache, which
//! each worker hands the next).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lb_testkit::certs::TestCerts;
use lb_testkit::sclient::{s_client, SClient};
use lb_testkit::{run_lb_tls, wait_until, TestServer, TlsProcess};

const REQUEST: &[u8] = b"GET /ping HTTP/1.0\r\nHost: x\r\n\r\n";
const WAIT: Duration = Duration::from_secs(10);

fn yaml(port: u16, certs_yaml: &str, backend: &TestServer) -> String {
    format!(
        r#"global:
  control_socket: master.sock
  worker_threads: 1
tls:
{certs_yaml}
backend:
  address: "{backend}"
  write_proxy: none
frontends:
  - bind: "127.0.0.1:{port}"
"#,
        backend = backend.addr()
    )
}

fn certificate_list(paths: &[&Path]) -> String {
    let list: Vec<String> = paths.iter().map(|p| format!("    - {}", p.display())).collect();
    format!("  certificates:\n{}", list.join("\n"))
}

/// The server certificate s_client printed, as PEM.
fn served_pem(out: &SClient) -> Option<String> {
    let text = &out.stdout;
    let start = text.find("-----BEGIN CERTIFICATE-----")?;
    let end = text[start..].find("-----END CERTIFICATE-----")? + start + "-----END CERTIFICATE-----".len();
    Some(text[start..end].to_owned())
}

fn crt(pem: &Path) -> String {
    let text = std::fs::read_to_string(pem.with_extension("crt")).expect("the certificate");
    text.trim().to_owned()
}

fn get(tls: &TlsProcess, args: &[&str]) -> SClient {
    let mut all = vec!["-servername", "api.example.test"];
    all.extend_from_slice(args);
    s_client(tls.addr(), &all, REQUEST, WAIT)
}

/// Copies `from` over `to` atomically (written beside, renamed), as an operator's deploy does.
fn install(from: &Path, to: &Path) {
    let temporary = to.with_extension("tmp");
    std::fs::copy(from, &temporary).expect("copying the certificate");
    std::fs::rename(&temporary, to).expect("renaming it into place");
}

fn setup() -> (TestCerts, TestServer, PathBuf, PathBuf, PathBuf) {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let first = certs.server("api-1", &["api.example.test"]);
    let second = certs.server("api-2", &["api.example.test"]);
    let live = certs.dir().join("live.pem");
    install(&first, &live);
    (certs, server, first, second, live)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reload_serves_the_replaced_certificate() {
    let (_certs, server, first, second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    assert_eq!(served_pem(&get(&tls, &[])), Some(crt(&first)));
    install(&second, &live);
    assert_eq!(served_pem(&get(&tls, &[])), Some(crt(&first)), "nothing changes before the reload");
    tls.reload().await.unwrap_or_else(|e| panic!("reload: {e}"));
    assert_eq!(served_pem(&get(&tls, &[])), Some(crt(&second)), "the new certificate after the reload");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_certificate_fails_the_reload_naming_the_file_and_the_worker_keeps_serving() {
    let (certs, server, first, _second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    let worker = tls.current_worker().await.expect("a worker");
    // A truncated file (the key is missing), as a half-finished copy leaves it.
    std::fs::write(&live, std::fs::read_to_string(first.with_extension("crt")).expect("crt")).expect("write");
    let failed = tls.reload().await.expect_err("the reload must fail");
    let said = format!("{}{}", failed.stdout, failed.stderr);
    assert!(said.contains(&live.display().to_string()) && said.contains("no private key"), "{failed}");
    assert_eq!(tls.current_worker().await, Some(worker), "the same worker serves");
    assert_eq!(served_pem(&get(&tls, &[])), Some(crt(&first)), "with the certificate it had");

    // Garbage, a key that belongs to another certificate, a missing file: each named.
    let other_key = std::fs::read(certs.dir().join("api-2.key")).expect("key");
    let mut mismatched = std::fs::read(first.with_extension("crt")).expect("crt");
    mismatched.extend(other_key);
    for (bytes, says) in [(b"not a certificate\n".to_vec(), "no certificate"), (mismatched, "does not match")] {
        std::fs::write(&live, bytes).expect("write");
        let out = run_lb_tls(&["-c", "-f", &tls.config_path().display().to_string()], tls.dir(), WAIT);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(&live.display().to_string()) && stderr.contains(says), "{says}: {stderr}");
        assert!(stderr.contains("lb-tls.yaml:") && stderr.contains("tls.certificates[0]"), "located: {stderr}");
    }
    std::fs::remove_file(&live).expect("remove");
    let failed = tls.reload().await.expect_err("a missing file fails the reload");
    assert!(failed.to_string().contains(&live.display().to_string()), "{failed}");
    assert_eq!(tls.current_worker().await, Some(worker));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_pem_in_a_directory_is_reported_and_skipped() {
    let certs = TestCerts::new();
    let server = TestServer::start("s1");
    let dir = certs.dir().join("certs.d");
    std::fs::create_dir(&dir).expect("mkdir");
    install(&certs.server("a", &["a.example.test"]), &dir.join("a.pem"));
    install(&certs.server("b", &["b.example.test"]), &dir.join("b.pem"));
    std::fs::write(dir.join("broken.pem"), "-----BEGIN CERTIFICATE-----\nnot base64\n").expect("write");
    let list = format!("  cert_dirs: [ {} ]", dir.display());
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &list, &server));
    let line = tls.wait_for_stderr(|l| l.contains("broken.pem")).await;
    assert!(line.contains("skipped"), "{line}");
    for name in ["a.example.test", "b.example.test"] {
        let out = s_client(tls.addr(), &["-servername", name], REQUEST, WAIT);
        assert_eq!(out.subject_cn(), Some(name), "{}", out.text());
    }
}

/// `-sess_out` on a first connection, `-sess_in` on the next.
fn resume(tls: &TlsProcess, version: &str, session: &Path, save: bool) -> SClient {
    let file = session.display().to_string();
    get(tls, &[version, if save { "-sess_out" } else { "-sess_in" }, &file])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_resume_within_a_worker_tls12_and_tls13() {
    let (certs, server, _first, _second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    for version in ["-tls1_2", "-tls1_3"] {
        let session = certs.dir().join(format!("session{version}"));
        assert_eq!(resume(&tls, version, &session, true).session(), Some("New"));
        for _ in 0..2 {
            let out = resume(&tls, version, &session, false);
            assert_eq!(out.session(), Some("Reused"), "{version}: {}", out.text());
            assert!(out.stdout.contains(" 200 OK"), "{}", out.text());
        }
    }
}

/// The ticket keys belong to the master, which hands them to every worker: a session from
/// before a reload resumes after it, with the new worker, whatever its certificate files.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resumption_across_a_reload() {
    let (certs, server, _first, _second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    let mut sessions = Vec::new();
    for version in ["-tls1_2", "-tls1_3"] {
        let session = certs.dir().join(format!("session{version}"));
        assert_eq!(resume(&tls, version, &session, true).session(), Some("New"));
        assert_eq!(resume(&tls, version, &session, false).session(), Some("Reused"), "{version} before the reload");
        sessions.push((version, session));
    }
    let before = tls.current_worker().await;
    tls.reload().await.unwrap_or_else(|e| panic!("reload: {e}"));
    assert_ne!(tls.current_worker().await, before, "a new worker serves");
    for (version, session) in &sessions {
        let out = resume(&tls, version, session, false);
        assert_eq!(out.session(), Some("Reused"), "{version} after a reload: {}", out.text());
        assert!(out.stdout.contains(" 200 OK"), "and it is served: {}", out.text());
    }
}

/// A TLS 1.2 client that takes no ticket resumes by session ID, from the worker's cache: the
/// old worker hands its cache to the new one, so the session resumes after a reload too, and
/// after a second one (the sessions taken are handed on again).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_ids_resume_across_reloads() {
    let (certs, server, _first, _second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    let session = certs.dir().join("session-id");
    let file = session.display().to_string();
    let first = get(&tls, &["-tls1_2", "-no_ticket", "-sess_out", &file]);
    assert_eq!(first.session(), Some("New"), "{}", first.text());
    assert!(!first.stdout.contains("TLS session ticket:"), "-no_ticket: no ticket: {}", first.text());
    let again = get(&tls, &["-tls1_2", "-no_ticket", "-sess_in", &file]);
    assert_eq!(again.session(), Some("Reused"), "within the worker: {}", again.text());
    for reload in 1..=2 {
        let before = tls.current_worker().await;
        tls.reload().await.unwrap_or_else(|e| panic!("reload {reload}: {e}"));
        assert_ne!(tls.current_worker().await, before, "a new worker serves");
        // The new worker takes the sessions once it is ready; it says so.
        let said = || -> Vec<String> {
            tls.stderr().into_iter().filter(|l| l.contains("cached sessions taken from the previous worker")).collect()
        };
        assert!(wait_until(WAIT, || said().len() >= reload).await, "{:?}", tls.stderr());
        assert!(said()[reload - 1].contains(": 1 of 1 cached sessions"), "{:?}", said());
        let out = get(&tls, &["-tls1_2", "-no_ticket", "-sess_in", &file]);
        assert_eq!(out.session(), Some("Reused"), "after reload {reload}: {}", out.text());
        assert!(out.stdout.contains(" 200 OK"), "and it is served: {}", out.text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_under_load_fails_no_handshake() {
    let (certs, server, first, second, live) = setup();
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &certificate_list(&[&live]), &server));
    let url = format!("https://api.example.test:{}/ping", tls.addr().port());
    let resolve = format!("api.example.test:{}:127.0.0.1", tls.addr().port());
    let ca = certs.ca().display().to_string();
    let running = Arc::new(AtomicBool::new(true));
    // Two curl processes at a time, each 40 transfers of a new connection and a full handshake
    // (no session reuse), until the reloads are done: every transfer must answer 200.
    let mut loads = Vec::new();
    for _ in 0..2 {
        let (url, resolve, ca, running) = (url.clone(), resolve.clone(), ca.clone(), running.clone());
        loads.push(tokio::task::spawn_blocking(move || {
            let (mut ok, mut failed) = (0u64, Vec::new());
            for _ in 0..200 {
                if !running.load(Ordering::SeqCst) {
                    break;
                }
                let mut args = vec![
                    "-sS",
                    "--max-time",
                    "10",
                    "-Z",
                    "--parallel-max",
                    "4",
                    "--no-sessionid",
                    "--cacert",
                    &ca,
                    "--resolve",
                    &resolve,
                    "-H",
                    "Connection: close",
                    "-w",
                    "%{http_code}\\n",
                ];
                for _ in 0..40 {
                    args.extend(["-o", "/dev/null", &url]);
                }
                let out = std::process::Command::new("curl").args(&args).output().expect("curl");
                for code in String::from_utf8_lossy(&out.stdout).lines() {
                    if code == "200" {
                        ok += 1;
                    } else {
                        failed.push(format!("{code}: {}", String::from_utf8_lossy(&out.stderr)));
                    }
                }
                if !out.status.success() {
                    failed.push(format!("curl exit {:?}: {}", out.status.code(), String::from_utf8_lossy(&out.stderr)));
                }
            }
            (ok, failed)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    for i in 0..20 {
        install(if i % 2 == 0 { &second } else { &first }, &live);
        tls.reload().await.unwrap_or_else(|e| panic!("reload {i}: {e}"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    running.store(false, Ordering::SeqCst);
    let (mut ok, mut failed) = (0, Vec::new());
    for load in loads {
        let (o, f) = load.await.expect("load thread");
        ok += o;
        failed.extend(f);
    }
    assert!(failed.is_empty(), "{} failed of {}:\n{}", failed.len(), ok + failed.len() as u64, failed.join("\n"));
    assert!(ok >= 100, "enough handshakes happened during the reloads: {ok}");
    let failures: Vec<String> = tls.stderr().into_iter().filter(|l| l.contains("handshake failed")).collect();
    assert!(failures.is_empty(), "no handshake failed on the server side either: {failures:?}");
}

#[test]
fn configuration_errors_name_file_line_and_field() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("lb-tls.yaml");
    std::fs::write(
        &path,
        "global:\n  control_socket: master.sock\ntls:\n  certificates: [ x.pem ]\n  protocols: [ TLSv1.2, SSLv3 ]\n  \
         client_cert: maybe\nbackend:\n  address: \"127.0.0.1:99999\"\nfrontends:\n  - bind: \"127.0.0.1:1\"\n",
    )
    .expect("write");
    let out = run_lb_tls(&["-c", "-f", "lb-tls.yaml"], dir.path(), WAIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("lb-tls.yaml:5:25: tls.protocols[1]: `SSLv3`"), "{stderr}");
    assert!(stderr.contains("lb-tls.yaml:6:16: tls.client_cert: `maybe`"), "{stderr}");
    assert!(stderr.contains("lb-tls.yaml:8:12: backend.address:"), "{stderr}");
    std::fs::write(&path, "global:\n  control_socket: m.sock\n  handshake_timout: 1s\n").expect("write");
    let out = run_lb_tls(&["-c", "-f", "lb-tls.yaml"], dir.path(), WAIT);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("lb-tls.yaml:3:3: global: unknown field `handshake_timout`"), "{stderr}");
}
