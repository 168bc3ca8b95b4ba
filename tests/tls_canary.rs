//! Canary reloads of lb-tls: a certificate that does not cover the name clients ask for is
//! rolled back within its window (its handshake failures named), counted on the clients' side
//! with curl; and a good configuration costs nothing: `ab -r -c 100` over TLS while lb-tls
//! reloads every 0.2 s with a canary of 0.1 s fails no request.

use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_testkit::certs::TestCerts;
use lb_testkit::lbctl::{lbctl, Role};
use lb_testkit::sclient::curl;
use lb_testkit::{TestServer, TlsChain, TlsProcess};

const NAME: &str = "api.example.test";

fn yaml(port: u16, cert: &str, backend: &TestServer, canary: &str) -> String {
    format!(
        r#"global:
  control_socket: master.sock
  worker_threads: 1
  canary: {{ {canary} }}
tls:
  certificates: [ {cert} ]
  sni_nomatch_abort: true
backend:
  address: "{backend}"
  write_proxy: none
frontends:
  - bind: "127.0.0.1:{port}"
"#,
        backend = backend.addr()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_certificate_that_misses_the_name_is_rolled_back() {
    let certs = TestCerts::new();
    let good = certs.server("api", &[NAME]).display().to_string();
    let wrong = certs.server("other", &["other.example.test"]).display().to_string();
    let server = TestServer::start("s1");
    let canary = "share: 25%, duration: 3s, min_requests: 10";
    let tls = TlsProcess::start_with(1, |ports| yaml(ports[0], &good, &server, canary));
    tls.write_config(&yaml(tls.ports()[0], &wrong, &server, canary));
    let socket = tls.control_socket();
    let reload = tokio::spawn(async move { lbctl(&socket, &["reload"]).await });

    // Clients asking for the name, one connection each, until the verdict.
    let url = format!("https://{NAME}:{}/", tls.addr().port());
    let resolve = format!("{NAME}:{}:127.0.0.1", tls.addr().port());
    let ca = certs.ca().display().to_string();
    let running = Arc::new(AtomicBool::new(true));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (url, resolve, ca) = (url.clone(), resolve.clone(), ca.clone());
            let (running, ok, failed) = (running.clone(), ok.clone(), failed.clone());
            std::thread::spawn(move || {
                while running.load(Ordering::SeqCst) {
                    let out = curl(&url, &["--resolve", &resolve, "--cacert", &ca]);
                    let counter = if out.code == Some(0) { &ok } else { &failed };
                    counter.fetch_add(1, Ordering::SeqCst);
                }
            })
        })
        .collect();
    let answer = tokio::time::timeout(Duration::from_secs(30), reload).await.expect("a verdict").expect("lbctl");
    running.store(false, Ordering::SeqCst);
    for client in clients {
        client.join().expect("a client");
    }
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    println!("{answer}\nclients: {ok} ok, {failed} failed");
    assert_eq!(answer.code, Some(1), "{answer}");
    assert!(
        answer.stderr.contains("canary rolled back")
            && answer.stderr.contains("handshake: no certificate for the name"),
        "{answer}"
    );
    // At most the canary's share of the window failed (one connection of rounding per worker).
    assert!(failed > 0, "the wrong certificate never failed a handshake: the test proves nothing");
    assert!(failed <= ((ok + failed) as f64 * 0.25).ceil() as u64 + 2, "{failed} failed of {}", ok + failed);
    // The current worker serves everyone again.
    for _ in 0..20 {
        let out = curl(&url, &["--resolve", &resolve, "--cacert", &ca]);
        assert_eq!(out.code, Some(0), "{}", out.stderr);
    }
    let table = lb_testkit::lbctl::show_proc(&tls.control_socket()).await.expect("show proc");
    assert!(table.workers.iter().all(|w| w.role != Role::Canary));
    assert_eq!(table.canary.rolled_back, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ab_over_tls_fails_nothing_while_lb_tls_reloads_with_a_canary_every_200ms() {
    let server = TestServer::start("s1");
    let chain = TlsChain::start(server.addr(), "[ http/1.1 ]");
    let socket = chain.tls.control_socket();
    let url = format!("https://127.0.0.1:{}/", chain.tls.addr().port());
    let ab = std::thread::spawn(move || {
        Command::new("ab").args(["-r", "-c", "100", "-n", "8000", "-s", "10", &url]).output().expect("running ab")
    });
    let (mut reloads, mut promoted) = (0, 0);
    let started = Instant::now();
    while !ab.is_finished() && started.elapsed() < Duration::from_secs(120) {
        let answer = lbctl(&socket, &["reload", "--canary", "50%", "--for", "100ms"]).await;
        assert_eq!(answer.code, Some(0), "{answer}");
        reloads += 1;
        promoted += u64::from(answer.stdout.contains("canary promoted"));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let out = ab.join().expect("ab");
    let text = String::from_utf8_lossy(&out.stdout);
    println!("{reloads} reloads, {promoted} canaries promoted\n{text}");
    assert!(out.status.success(), "ab: {}", String::from_utf8_lossy(&out.stderr));
    assert!(reloads >= 5, "only {reloads} reloads during the run");
    assert_eq!(promoted, reloads);
    let line = |name: &str| text.lines().find(|l| l.starts_with(name)).map(str::to_owned);
    assert_eq!(
        line("Complete requests:").as_deref().map(str::split_whitespace).and_then(|mut w| w.nth(2)),
        Some("8000")
    );
    assert_eq!(line("Failed requests:").as_deref().map(str::split_whitespace).and_then(|mut w| w.nth(2)), Some("0"));
    assert_eq!(line("Non-2xx responses:"), None, "{text}");
}
