//! The service definitions operators install: SMF manifests valid against SMF's DTD, systemd
//! units that `systemd-analyze verify` accepts without a warning, both wired to the process
//! model (a master that drains on SIGTERM, a synchronous `lbctl reload` as the reload, the
//! privilege to bind :80/:443 and nothing more), and units sandboxed as far as the daemons allow
//! (`systemd-analyze security` scores them; scripts/scan-tls traces the daemons under the same
//! limits).

use std::path::{Path, PathBuf};
use std::process::Command;

const DAEMONS: [&str; 3] = ["lb-proxy", "lb-tls", "lb-watcher"];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// SMF's DTD, kept beside the checkout (`../shared/smf/`), as on every machine that runs CI.
fn smf_dtd() -> PathBuf {
    let dtd = repo().join("../shared/smf/service_bundle.dtd.1");
    assert!(dtd.is_file(), "{} is missing: SMF manifests cannot be validated without it", dtd.display());
    dtd
}

#[test]
fn smf_manifests_are_valid_against_the_dtd() {
    let dtd = smf_dtd();
    for daemon in DAEMONS {
        let manifest = repo().join(format!("smf/{daemon}.xml"));
        let out = Command::new("xmllint")
            .args(["--noout", "--nonet", "--dtdvalid"])
            .arg(&dtd)
            .arg(&manifest)
            .output()
            .expect("xmllint (Debian's libxml2-utils; scripts/install-deps test installs it)");
        let stderr = String::from_utf8_lossy(&out.stderr);
        // The DOCTYPE names the DTD's path on illumos, absent here: that one warning is expected.
        let problems: Vec<&str> = stderr
            .lines()
            .filter(|line| line.contains(": ") && !line.contains("failed to load external entity"))
            .collect();
        assert!(out.status.success() && problems.is_empty(), "{}: {stderr}", manifest.display());
    }
}

#[test]
fn smf_manifests_follow_the_process_model() {
    for daemon in ["lb-proxy", "lb-tls"] {
        let text = read(&repo().join(format!("smf/{daemon}.xml")));
        // Contract model: the start method returns once the first worker serves.
        assert!(text.contains(&format!("exec=\"/opt/lb/bin/{daemon} -D -f %{{config/file}}\"")), "{daemon}: start");
        assert!(text.contains(r#"<propval name="duration" type="astring" value="contract"/>"#), "{daemon}");
        // A crashing worker is the master's to replace, not a reason to restart the service.
        assert!(text.contains(r#"name="ignore_error" type="astring" value="core,signal""#), "{daemon}");
        // Refresh is the synchronous reload: a bad file fails `svcadm refresh`.
        assert!(
            text.contains(r#"name="refresh""#) && text.contains("exec=\"/opt/lb/bin/lbctl -f %{config/file} reload\"")
        );
        // Graceful stop: SIGTERM to the master only.
        assert!(text.contains(r#"exec="/opt/lb/lib/svc/method/lb-stop""#), "{daemon}: stop");
        assert!(text.contains("net_privaddr"), "{daemon}: the privilege to bind :80/:443");
        assert!(text.contains("<stability value=\"Evolving\"/>") && text.contains("<template>"), "{daemon}");
    }
    let watcher = read(&repo().join("smf/lb-watcher.xml"));
    assert!(watcher.contains(r#"<propval name="duration" type="astring" value="child"/>"#));
    assert!(!watcher.contains("net_privaddr"), "lb-watcher binds no privileged port");
    // The watcher is an optional dependency of the proxy, never the other way round (a cycle).
    let proxy = read(&repo().join("smf/lb-proxy.xml"));
    assert!(proxy.contains(r#"grouping="optional_all""#) && proxy.contains("svc:/network/lb/watcher"));
    assert!(!watcher.contains("svc:/network/lb/proxy"));
}

#[test]
fn smf_stop_method_is_valid_shell() {
    let script = repo().join("smf/method/lb-stop");
    let status = Command::new("sh").arg("-n").arg(&script).status().expect("sh");
    assert!(status.success(), "{}: syntax error", script.display());
    let text = read(&script);
    assert!(text.contains("pgrep -o -c") && text.contains("kill -TERM") && text.contains("pwait"));
}

/// The units with their binaries pointed at this build, so that `systemd-analyze verify` can check
/// that every command exists and is executable.
fn units_against_this_build(dir: &Path) -> Vec<PathBuf> {
    DAEMONS
        .iter()
        .map(|daemon| {
            let mut text = read(&repo().join(format!("systemd/{daemon}.service")));
            for bin in ["lb-proxy", "lb-tls", "lb-watcher", "lbctl"] {
                let built = lb_testkit::bin_path(bin);
                text = text.replace(&format!("/usr/local/bin/{bin} "), &format!("{} ", built.display()));
            }
            let path = dir.join(format!("{daemon}.service"));
            std::fs::write(&path, text).expect("write unit");
            path
        })
        .collect()
}

#[test]
fn systemd_units_verify_without_warnings() {
    let dir = tempfile::tempdir().expect("tempdir");
    let units = units_against_this_build(dir.path());
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .args(&units)
        .env("SYSTEMD_LOG_COLOR", "0")
        .output()
        .expect("systemd-analyze (Debian's systemd)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success() && stderr.trim().is_empty(), "systemd-analyze verify: {stderr}");
}

#[test]
fn systemd_units_follow_the_process_model() {
    for daemon in ["lb-proxy", "lb-tls"] {
        let text = read(&repo().join(format!("systemd/{daemon}.service")));
        for line in [
            "Type=notify".to_owned(),
            format!("ExecStart=/usr/local/bin/{daemon} -f /etc/lb/{daemon}.yaml"),
            format!("ExecReload=/usr/local/bin/lbctl -f /etc/lb/{daemon}.yaml reload"),
            "KillMode=mixed".to_owned(),
            "Restart=on-failure".to_owned(),
            "AmbientCapabilities=CAP_NET_BIND_SERVICE".to_owned(),
            "NoNewPrivileges=yes".to_owned(),
            "ProtectSystem=strict".to_owned(),
            "ReadWritePaths=/run/lb".to_owned(),
        ] {
            assert!(text.lines().any(|l| l == line), "{daemon}.service lacks {line:?}");
        }
    }
    let watcher = read(&repo().join("systemd/lb-watcher.service"));
    assert!(watcher.lines().any(|l| l == "ReadWritePaths=/etc/lb /run/lb"), "lb-watcher rewrites /etc/lb");
    assert!(!watcher.contains("CAP_NET_BIND_SERVICE"));
}

/// The sandbox every unit shares. The system-call filter, W^X and the /proc limits are the ones
/// scripts/scan-tls checks the daemons against (it traces them serving, reloading and answering
/// runtime commands); a change here wants that script run again.
#[test]
fn systemd_units_are_sandboxed() {
    for daemon in DAEMONS {
        let text = read(&repo().join(format!("systemd/{daemon}.service")));
        for line in [
            "NoNewPrivileges=yes",
            "ProtectSystem=strict",
            "ProtectHome=yes",
            "PrivateTmp=yes",
            "PrivateDevices=yes",
            "ProtectKernelTunables=yes",
            "ProtectKernelModules=yes",
            "ProtectKernelLogs=yes",
            "ProtectControlGroups=yes",
            "ProtectClock=yes",
            "ProtectHostname=yes",
            "ProtectProc=invisible",
            "ProcSubset=pid",
            "PrivateMounts=yes",
            "RemoveIPC=yes",
            "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6",
            "RestrictNamespaces=yes",
            "RestrictRealtime=yes",
            "RestrictSUIDSGID=yes",
            "LockPersonality=yes",
            "MemoryDenyWriteExecute=yes",
            "SystemCallArchitectures=native",
            "SystemCallFilter=@system-service",
            "SystemCallFilter=~@privileged @resources",
            "SystemCallErrorNumber=EPERM",
            "UMask=0077",
            "User=lb",
        ] {
            assert!(text.lines().any(|l| l == line), "{daemon}.service lacks {line:?}");
        }
    }
    // A user namespace would leave CAP_NET_BIND_SERVICE useless for the host's ports: only the
    // watcher, which binds none, gets one.
    for daemon in ["lb-proxy", "lb-tls"] {
        let text = read(&repo().join(format!("systemd/{daemon}.service")));
        assert!(!text.lines().any(|l| l.starts_with("PrivateUsers=")), "{daemon}: PrivateUsers= would stop :443");
        assert!(text.lines().any(|l| l == "CapabilityBoundingSet=CAP_NET_BIND_SERVICE"), "{daemon}");
    }
    let watcher = read(&repo().join("systemd/lb-watcher.service"));
    assert!(watcher.lines().any(|l| l == "PrivateUsers=yes") && watcher.lines().any(|l| l == "CapabilityBoundingSet="));
}

/// `systemd-analyze security` (offline: no running systemd needed) keeps each unit's exposure at
/// 1.5 or below (0 is fully sandboxed, 10 not at all; docs/reliability.md, "Least privilege").
#[test]
fn systemd_units_exposure_stays_low() {
    for daemon in DAEMONS {
        let unit = repo().join(format!("systemd/{daemon}.service"));
        let dir = tempfile::tempdir().expect("tempdir");
        let out = Command::new("systemd-analyze")
            .args(["security", "--offline=true", "--threshold=15", "--no-pager"])
            .arg(&unit)
            .current_dir(dir.path())
            .env("SYSTEMD_LOG_COLOR", "0")
            .env("SYSTEMD_COLORS", "0")
            .output()
            .expect("systemd-analyze (Debian's systemd)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let overall = stdout.lines().find(|l| l.contains("Overall exposure level")).unwrap_or("no score");
        assert!(out.status.success(), "{daemon}.service: {overall}\n{stdout}{}", String::from_utf8_lossy(&out.stderr));
    }
}
