//! An access log written to a file (stdout redirected, as SMF's log files are) that reaches the
//! process's file-size limit (`LimitFSIZE=`, `ulimit -f`): the kernel sends SIGXFSZ, whose
//! default action would end the worker. It must go on serving; the lines past the limit are
//! lost, nothing else.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lb_testkit::raw::RawConn;
use lb_testkit::{bin_path, free_port, procfs, write_config_in, DaemonChild, TestServer};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_log_file_is_at_its_size_limit_keeps_serving() {
    let server = TestServer::start("s1");
    let dir = tempfile::tempdir().expect("temp dir");
    let port = free_port();
    let config = write_config_in(dir.path(), port, server.addr());
    let log = std::fs::File::create(dir.path().join("access.log")).expect("log file");
    let master = Command::new(bin_path("lb-proxy"))
        .arg("-f")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(Stdio::null())
        .spawn()
        .expect("lb-proxy");
    // Stopped when dropped, however the test ends.
    let mut master = DaemonChild::new(master);
    let pid = master.pid();
    let end = Instant::now() + Duration::from_secs(10);
    while procfs::live_children_of(pid).len() != 1 || std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < end, "lb-proxy did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let worker = procfs::live_children_of(pid)[0];
    // A few hundred bytes more than is written now: the next lines reach the limit.
    let written = std::fs::metadata(dir.path().join("access.log")).map(|m| m.len()).unwrap_or(0);
    let limit = written + 300;
    let set = Command::new("prlimit").arg(format!("--pid={worker}")).arg(format!("--fsize={limit}:")).status();
    let mut outcome = Ok(());
    if !set.is_ok_and(|s| s.success()) {
        outcome = Err("prlimit --fsize on the worker failed".to_owned());
    }
    for i in 0..50 {
        if outcome.is_err() {
            break;
        }
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        let answered = async {
            let mut conn = RawConn::connect(addr).await.ok()?;
            conn.send(format!("GET /{i} HTTP/1.1\r\nHost: t\r\n\r\n")).await.ok()?;
            conn.read_response(Duration::from_secs(5)).await.ok()
        }
        .await;
        if answered.is_none_or(|r| r.status != 200) {
            outcome = Err(format!("request {i} was not answered"));
        }
        // Give the log writer (it batches every 10 ms) time to hit the limit.
        tokio::time::sleep(Duration::from_millis(15)).await;
    }
    let same_worker = procfs::live_children_of(pid) == vec![worker];
    master.stop();
    outcome.unwrap_or_else(|e| panic!("{e}"));
    assert!(same_worker, "the worker was replaced: it died at the file-size limit");
    let size = std::fs::metadata(dir.path().join("access.log")).map(|m| m.len()).unwrap_or(0);
    assert!(size <= limit, "the log stopped at the limit ({size} > {limit})");
}
