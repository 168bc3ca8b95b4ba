//! The directory of lb-proxy's file full, read-only, or the file over the process's size limit
//! while lb-watcher writes a new version: the old file stays whole, the error names the file,
//! the watcher keeps running and writes the file once it can.
//!
//! Full and read-only need a file system of the test's own: a 64 KiB tmpfs mounted on the
//! output directory inside a private mount namespace (`unshare`), so that nothing is mounted
//! on the machine itself and everything vanishes with the watcher. The test reaches that
//! directory through `/proc/PID/root` and remounts it with `nsenter`. The size limit
//! (RLIMIT_FSIZE, set on the running watcher with `prlimit`) needs nothing.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use lb_testkit::zookeeper::{ZkClient, ZkServer};
use lb_testkit::{wait_until, WatcherOptions, WatcherProcess};

use crate::common::*;
use crate::hostile::file_watcher_at;

const QUICK: &str = "{ collect: 300ms, collect_jitter: 0s, hold: 0s, min_apply_interval: 0s }";

/// The wrapper that gives lb-watcher a private 64 KiB tmpfs on `out` (a user namespace too, so
/// that it also works without root where unprivileged user namespaces are allowed).
fn tmpfs_wrapper(out: &Path) -> Vec<String> {
    let script = r#"mount -t tmpfs -o size=64k tmpfs "$0" && exec "$@""#;
    ["unshare", "--user", "--map-root-user", "--mount", "--propagation", "private", "sh", "-c", script]
        .iter()
        .map(|s| (*s).to_owned())
        .chain([out.display().to_string()])
        .collect()
}

/// Whether this machine lets the test mount a tmpfs in a namespace of its own.
fn namespaces_allowed() -> bool {
    let probe = Command::new("unshare")
        .args(["--user", "--map-root-user", "--mount", "sh", "-c", "mount -t tmpfs tmpfs /mnt"])
        .output();
    probe.is_ok_and(|o| o.status.success())
}

/// `path` as the watcher's mount namespace shows it.
fn inside(watcher: &WatcherProcess, path: &Path) -> PathBuf {
    PathBuf::from(format!("/proc/{}/root{}", watcher.pid(), path.display()))
}

fn run(program: &str, args: &[&str]) {
    let output = Command::new(program).args(args).output().unwrap_or_else(|e| panic!("{program}: {e}"));
    assert!(output.status.success(), "{program} {args:?}: {}", String::from_utf8_lossy(&output.stderr));
}

/// The names in `dir` other than `keep`: temporary files left behind.
fn leftovers(dir: &Path, keep: &[&str]) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else { return vec!["(unreadable)".into()] };
    entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).filter(|n| !keep.contains(&n.as_str())).collect()
}

/// Files the tests expect beside lb-proxy's file: anything else is a temporary file left
/// behind.
const KEEP: [&str; 5] = ["lb-proxy.yaml", "lb-proxy.yaml.prev", "filler", "base.yaml", "lb-watcher.yaml"];

/// One fault: registers `name`, waits for the failed write, checks the file is still
/// `before` and no temporary file is left, then lifts the fault with `lift` and waits for the
/// file to hold `want`. Returns (seconds until the failure was logged, seconds from the lift
/// to the file written).
async fn fault(
    watcher: &WatcherProcess,
    client: &ZkClient,
    file: &Path,
    name: &str,
    says: &str,
    lift: impl FnOnce(),
    want: &[String],
) -> (f64, f64) {
    let before = std::fs::read(file).expect("the file before the fault");
    let failures = watcher.stderr_count("applying the new server list failed");
    let t0 = Instant::now();
    let ip = format!("10.0.0.{}", want.len());
    client.register_port(DIR, name, format!("{ip}:80").parse().expect("address")).await;
    let failed =
        wait_until(Duration::from_secs(15), || watcher.stderr_count("applying the new server list failed") > failures)
            .await;
    let alive = watcher.is_alive();
    assert!(failed, "the write fails and is logged (watcher alive: {alive}): {}", watcher.stderr().join("\n"));
    let failed_after = t0.elapsed().as_secs_f64();
    let line = watcher.stderr().into_iter().rfind(|l| l.contains("applying the new server list failed"));
    let line = line.unwrap_or_default();
    let shown = file.to_string_lossy();
    let named = shown.split_once("/root").map_or(&shown[..], |(_, p)| p);
    assert!(line.contains(&format!("writing {named}")) && line.contains(says), "names the file and why: {line}");
    // A retry or two later: still the old file, whole, and the watcher alive.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(watcher.is_alive(), "the watcher survives the failed write: {}", watcher.stderr().join("\n"));
    assert_eq!(std::fs::read(file).expect("the file during the fault"), before, "the old file, whole");
    let dir = file.parent().expect("the file's directory");
    assert_eq!(leftovers(dir, &KEEP), Vec::<String>::new(), "no temporary file left during the fault");
    let status = watcher.status().await;
    assert_eq!(status["last_apply"]["result"], "failed", "{status}");
    assert!(status["last_apply"]["detail"].as_str().is_some_and(|d| d.contains(says)), "{status}");

    let lifted = Instant::now();
    lift();
    let written = wait_until(Duration::from_secs(20), || file_servers(file) == want).await;
    assert!(written, "written once it can: {:?}; {}", file_servers(file), watcher.stderr().join("\n"));
    (failed_after, lifted.elapsed().as_secs_f64())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_or_read_only_directory_leaves_the_old_file_whole() {
    // Root ignores permissions, so a full or read-only directory needs a file system of the
    // test's own: a tmpfs in the watcher's private mount namespace. Where that is not allowed the
    // test fails, saying why, rather than pass without having tried.
    assert!(
        namespaces_allowed(),
        "this machine allows no private mount namespace (unshare --user --mount): the disk-full test cannot run"
    );
    let zk = ZkServer::start();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register_port(DIR, "web1", "10.0.0.1:80".parse().expect("address")).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let out = dir.path().join("out");
    std::fs::create_dir(&out).expect("the output directory");
    let options = WatcherOptions { wrapper: tmpfs_wrapper(&out), ..WatcherOptions::default() };
    let target = out.join("lb-proxy.yaml");
    let watcher = file_watcher_at(dir.path(), &zk.connect_string(), QUICK, &target, &options).await;
    let file = inside(&watcher, &target);
    let first = wait_until(Duration::from_secs(15), || file_servers(&file) == names(&["web1"])).await;
    assert!(first, "{:?}; {}", file_servers(&file), watcher.stderr().join("\n"));
    assert!(!target.exists(), "the file is on the private tmpfs, not on the machine's disk");

    // Full: a filler takes every page left.
    let filler = inside(&watcher, &out.join("filler"));
    let mut chunk = std::fs::File::create(&filler).expect("the filler");
    while std::io::Write::write_all(&mut chunk, &[0u8; 4096]).is_ok() {}
    drop(chunk);
    let want = names(&["web1", "web2"]);
    let lift = || std::fs::remove_file(&filler).expect("removing the filler");
    let full = fault(&watcher, &client, &file, "web2", "No space left on device", lift, &want).await;
    let dir_inside = inside(&watcher, &out);
    assert_eq!(leftovers(&dir_inside, &KEEP), Vec::<String>::new());

    // Nearly full: one page left, enough for the new file. The previous file is kept as a
    // second name of the old one (`lb-proxy.yaml.prev`, no copy), so an apply needs no room for
    // it and goes through where it used to fail half-way.
    let mut chunk = std::fs::File::create(&filler).expect("the filler");
    while std::io::Write::write_all(&mut chunk, &[0u8; 4096]).is_ok() {}
    let size = chunk.metadata().map(|m| m.len()).expect("the filler's size");
    chunk.set_len(size.saturating_sub(4096) / 4096 * 4096).expect("one page back");
    drop(chunk);
    let want = names(&["web1", "web2", "web3"]);
    let t0 = Instant::now();
    client.register_port(DIR, "web3", "10.0.0.3:80".parse().expect("address")).await;
    let written = wait_until(Duration::from_secs(15), || file_servers(&file) == want).await;
    assert!(written, "written with one page left: {:?}; {}", file_servers(&file), watcher.stderr().join("\n"));
    let nearly_full = t0.elapsed().as_secs_f64();
    let prev = inside(&watcher, &out.join("lb-proxy.yaml.prev"));
    assert_eq!(file_servers(&prev), names(&["web1", "web2"]), "the previous file kept whole");
    std::fs::remove_file(&filler).expect("removing the filler");
    assert_eq!(leftovers(&dir_inside, &KEEP), Vec::<String>::new());

    // Read-only: remounted in the watcher's namespace, then read-write again.
    let pid = watcher.pid().to_string();
    let nsenter = ["-t", &pid, "-U", "-m", "--preserve-credentials", "mount", "-o"];
    let dir_arg = out.display().to_string();
    run("nsenter", &[&nsenter[..], &["remount,ro", &dir_arg]].concat());
    let want = names(&["web1", "web2", "web3", "web4"]);
    let lift = || run("nsenter", &[&nsenter[..], &["remount,rw", &dir_arg]].concat());
    let read_only = fault(&watcher, &client, &file, "web4", "Read-only file system", lift, &want).await;
    assert_eq!(leftovers(&dir_inside, &KEEP), Vec::<String>::new());
    // At least one per fault.
    assert!(watcher.metric("lb_watcher_errors_total").await >= 2);
    println!(
        "FIGURES disk: full: failure logged {:.2}s after the change, file written {:.2}s after space was freed; \
         one page left (room for the new file, none for a copy of the old): written {nearly_full:.2}s after the \
         change; read-only: failure logged {:.2}s after the change, written {:.2}s after the remount read-write",
        full.0, full.1, read_only.0, read_only.1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_size_limit_leaves_the_old_file_whole_and_the_watcher_running() {
    let zk = ZkServer::start();
    let client = ZkClient::connect(&zk.connect_string()).await;
    client.mkdir(DIR).await;
    client.register_port(DIR, "web1", "10.0.0.1:80".parse().expect("address")).await;
    let dir = tempfile::tempdir().expect("a temporary directory");
    let target = dir.path().join("lb-proxy.yaml");
    let watcher = file_watcher_at(dir.path(), &zk.connect_string(), QUICK, &target, &WatcherOptions::default()).await;
    let first = wait_until(Duration::from_secs(15), || file_servers(&target) == names(&["web1"])).await;
    assert!(first, "{:?}; {}", file_servers(&target), watcher.stderr().join("\n"));

    // RLIMIT_FSIZE of 100 bytes on the running watcher (only its soft limit: it can be raised
    // again). A write past it fails with EFBIG, and the kernel sends SIGXFSZ, whose default
    // action ends the process.
    let pid = watcher.pid().to_string();
    run("prlimit", &["--pid", &pid, "--fsize=100:unlimited"]);
    let want = names(&["web1", "web2"]);
    let lift = || run("prlimit", &["--pid", &pid, "--fsize=unlimited:unlimited"]);
    let (failed, written) = fault(&watcher, &client, &target, "web2", "File too large", lift, &want).await;
    assert_eq!(leftovers(dir.path(), &KEEP), Vec::<String>::new());
    println!(
        "FIGURES fsize: failure logged {failed:.2}s after the change, file written {written:.2}s after the limit \
         was lifted"
    );
}
