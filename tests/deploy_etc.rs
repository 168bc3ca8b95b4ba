//! The example configurations in etc/ are one deployment: each passes its daemon's `-c`, and
//! they agree with each other (lb-tls forwards to lb-proxy's PROXY bind, lb-watcher writes the
//! file lb-proxy runs on and reaches its control socket, the units and manifests name them).
//!
//! They are checked where an operator puts them: the `/etc/lb/` paths are rewritten to a
//! temporary directory holding the files they name (certificates made here, the base file as
//! the install steps in docs/operations.md make it).

use std::path::{Path, PathBuf};
use std::process::Command;

use lb_testkit::bin_path;
use lb_testkit::certs::TestCerts;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `etc/NAME` with `/etc/lb/` and `/var/run/lb/` pointed at `dir`, written to `dir/NAME`.
fn install(name: &str, dir: &Path) -> PathBuf {
    let text = read(&repo().join("etc").join(name))
        .replace("/etc/lb/", &format!("{}/", dir.display()))
        .replace("/var/run/lb/", &format!("{}/run/", dir.display()));
    let to = dir.join(name);
    std::fs::write(&to, text).expect("write");
    to
}

fn check(daemon: &str, config: &Path) {
    let out = Command::new(bin_path(daemon)).arg("-c").arg("-f").arg(config).output().expect(daemon);
    assert!(
        out.status.success(),
        "{daemon} -c -f {}: {}{}",
        config.display(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The value after `key:` on the first line that has it (the example files are flat enough).
fn value_of<'a>(text: &'a str, key: &str) -> Option<&'a str> {
    text.lines().find_map(|line| {
        let rest = line.trim_start().strip_prefix("- ").unwrap_or(line.trim_start());
        rest.strip_prefix(key)?.strip_prefix(':').map(|v| v.trim().trim_matches('"'))
    })
}

#[test]
fn the_example_files_pass_their_checks_together() {
    let dir = tempfile::tempdir().expect("tempdir");
    let dir = dir.path();
    std::fs::create_dir_all(dir.join("run")).expect("run dir");

    // lb-proxy, and its copy as lb-watcher's base (docs/operations.md's install steps).
    let proxy = install("lb-proxy.yaml", dir);
    check("lb-proxy", &proxy);
    std::fs::copy(&proxy, dir.join("lb-proxy.base.yaml")).expect("base");

    // lb-watcher on that base and file.
    let watcher = install("lb-watcher.yaml", dir);
    check("lb-watcher", &watcher);
    let watcher_text = read(&watcher);
    assert_eq!(
        value_of(&watcher_text, "config").map(PathBuf::from),
        Some(proxy.clone()),
        "lb-watcher writes lb-proxy's file"
    );

    // lb-tls with the certificates it names, made here.
    let certs = TestCerts::new();
    let tls_text = read(&repo().join("etc/lb-tls.yaml"));
    for line in tls_text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        // An OCSP response goes with the certificate named before it on the same line.
        let mut certificate = None;
        for word in line.split([' ', ',', '[', ']', '{', '}']) {
            if let Some(file) = word.strip_prefix("/etc/lb/") {
                let to = dir.join(file);
                std::fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
                if let Some(stem) = file.strip_suffix(".pem") {
                    let stem = stem.replace('/', "_");
                    std::fs::copy(certs.server(&stem, &["api.example.com"]), &to).expect("pem");
                    certificate = Some(stem);
                } else if file.ends_with(".der") {
                    let stem = certificate.as_deref().expect("an OCSP response after its certificate");
                    std::fs::copy(certs.ocsp(stem), &to).expect("ocsp");
                } else {
                    std::fs::create_dir_all(&to).expect("certificate directory");
                }
            }
        }
    }
    let tls = install("lb-tls.yaml", dir);
    check("lb-tls", &tls);

    // They agree: lb-tls forwards to lb-proxy's PROXY-protocol bind for TLS traffic.
    let proxy_config = lb_config::Config::load(&proxy).expect("lb-proxy.yaml");
    let https_in = proxy_config.frontend("https_in").expect("https_in");
    // Both as installed (the run directory moved under the test's own).
    let installed_tls = read(&tls);
    let backend = value_of(&installed_tls, "address").expect("lb-tls backend address");
    assert!(
        https_in.binds.iter().any(|b| b.accept_proxy && b.address.to_string() == backend),
        "lb-tls forwards to {backend}, a PROXY bind of lb-proxy's https_in"
    );
    assert_eq!(value_of(&tls_text, "write_proxy"), Some("v2"));
    // Distinct control sockets, in the directory the units and manifests provide.
    let tls_socket = value_of(&tls_text, "control_socket").expect("lb-tls control socket");
    assert_eq!(tls_socket, "/var/run/lb/lb-tls.sock");
    assert_eq!(proxy_config.global.supervision.control_socket, dir.join("run/lb-proxy.sock"));
    // Both watched backends exist, on the API's ports 81 (TLS traffic) and 80.
    for (backend, port) in [("secure_api", "81"), ("insecure_api", "80")] {
        assert!(proxy_config.backend(backend).is_some());
        let service = watcher_text.split("- backend: ").find(|s| s.starts_with(backend)).expect(backend);
        assert_eq!(value_of(service, "port"), Some(port), "{backend}");
    }
    // The units and manifests run these very files.
    for daemon in ["lb-proxy", "lb-tls", "lb-watcher"] {
        let unit = read(&repo().join(format!("systemd/{daemon}.service")));
        assert!(unit.contains(&format!("-f /etc/lb/{daemon}.yaml")), "systemd/{daemon}.service");
        let manifest = read(&repo().join(format!("smf/{daemon}.xml")));
        assert!(manifest.contains(&format!("/opt/lb/etc/{daemon}.yaml")), "smf/{daemon}.xml");
    }
}
