//! Least privilege as the systemd units run the daemons: an unprivileged master given
//! `CAP_NET_BIND_SERVICE` as an ambient capability (`AmbientCapabilities=`) binds a privileged
//! port, and its workers, which never bind, hold no capability at all, before and after a
//! reload. (setpriv from util-linux stands in for systemd; the test runs as root, as CI does.)

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use lb_testkit::lbctl::lbctl;
use lb_testkit::{bin_path, procfs, write_config_in, DaemonChild, TestServer};

const CAP_NET_BIND_SERVICE: u32 = 10;

/// A privileged port free on loopback now (tried from the top of the range down).
fn privileged_port() -> u16 {
    (900..1024).rev().find(|p| TcpListener::bind(("127.0.0.1", *p)).is_ok()).expect("a free port below 1024")
}

/// The capability sets of `pid` (`CapEff`, `CapPrm`, `CapAmb` from /proc), as bit masks.
fn capabilities(pid: u32) -> [u64; 3] {
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_else(|e| panic!("/proc/{pid}/status: {e}"));
    ["CapEff:", "CapPrm:", "CapAmb:"].map(|field| {
        let line = status.lines().find(|l| l.starts_with(field)).expect("a capability line");
        u64::from_str_radix(line[field.len()..].trim(), 16).expect("hex")
    })
}

fn wait_for(within: Duration, mut done: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + within;
    while Instant::now() < end {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_of_a_master_with_an_ambient_capability_hold_none() {
    if !nix::unistd::geteuid().is_root() {
        panic!("this test starts the daemon as another user with setpriv: run the suite as root (CI does)");
    }
    let server = TestServer::start("s1");
    let dir = tempfile::tempdir().expect("temp dir");
    // The master runs as nobody: it must reach its configuration and create its sockets here.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).expect("chmod");
    let port = privileged_port();
    let config = write_config_in(dir.path(), port, server.addr());
    let control = dir.path().join("master.sock");
    let master = Command::new("setpriv")
        .args(["--reuid=nobody", "--regid=nogroup", "--clear-groups"])
        .args(["--inh-caps=+net_bind_service", "--ambient-caps=+net_bind_service"])
        .arg(bin_path("lb-proxy"))
        .arg("-f")
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("setpriv (util-linux)");
    // Stopped when dropped, however the test ends.
    let mut master = DaemonChild::new(master);
    let pid = master.pid();
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let serving = wait_for(Duration::from_secs(10), || {
        TcpStream::connect(addr).is_ok() && procfs::live_children_of(pid).len() == 1
    });
    let checked = (|| {
        if !serving {
            return Err(format!("lb-proxy did not listen on privileged port {port} as nobody"));
        }
        let [eff, _, _] = capabilities(pid);
        if eff & (1 << CAP_NET_BIND_SERVICE) == 0 {
            return Err(format!("the master lost CAP_NET_BIND_SERVICE: CapEff {eff:x}"));
        }
        for worker in procfs::live_children_of(pid) {
            if capabilities(worker) != [0, 0, 0] {
                return Err(format!("worker {worker}: CapEff/CapPrm/CapAmb {:x?}", capabilities(worker)));
            }
        }
        Ok(())
    })();
    // A reload: the new worker is started the same way.
    let reload = if checked.is_ok() { Some(lbctl(&control, &["reload"]).await) } else { None };
    // The old worker drains and exits: look at the one left, the new one.
    let settled = wait_for(Duration::from_secs(10), || procfs::live_children_of(pid).len() == 1);
    let after: Vec<(u32, [u64; 3])> = if settled {
        procfs::live_children_of(pid).into_iter().map(|w| (w, capabilities(w))).collect()
    } else {
        Vec::new()
    };
    master.stop();
    checked.unwrap_or_else(|e| panic!("{e}"));
    let reload = reload.expect("reloaded");
    assert_eq!(reload.code, Some(0), "reload: {reload}");
    assert!(settled && !after.is_empty(), "one worker after the reload, the old one gone");
    for (worker, caps) in after {
        assert_eq!(caps, [0, 0, 0], "worker {worker} after the reload: CapEff/CapPrm/CapAmb");
    }
}
