//! lb-watcher's configuration loader (`lb_watcher::config::Config::parse`, what `Config::load`
//! runs on a file's text) on arbitrary text: a refusal is a list of located diagnostics, never a
//! panic; an accepted configuration keeps the promises the watcher runs on (servers to connect
//! to, services with distinct backends and valid ZooKeeper paths, values in range).
#![no_main]

use lb_watcher::config::Config;
use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.yaml";

/// lb-watcher's rule for a ZooKeeper path, written out again: absolute, no empty component, no
/// trailing `/`, no NUL.
fn valid_zk_path(path: &str) -> bool {
    path.starts_with('/') && (path == "/" || !path.ends_with('/')) && !path.contains("//") && !path.contains('\0')
}

fuzz_target!(|data: &[u8]| {
    let Some(text) = lb_fuzz::config_text(data) else { return };
    match Config::parse(text, FILE) {
        Ok(config) => {
            assert!(!config.zookeeper.servers.is_empty(), "no ZooKeeper server");
            assert!(config.proxy.base != config.proxy.config, "base and config are one file");
            assert!(!config.services.is_empty(), "nothing to watch");
            assert!((1..=100).contains(&config.hysteresis.max_remove_percent));
            for (i, s) in config.services.iter().enumerate() {
                assert!(valid_zk_path(&s.path), "services[{i}].path {:?}", s.path);
                assert!(s.weight <= 256 && s.port != Some(0), "services[{i}]: {s:?}");
                assert!(config.services[..i].iter().all(|o| o.backend != s.backend), "services[{i}]: backend twice");
            }
            if let Some(chroot) = &config.zookeeper.chroot {
                assert!(valid_zk_path(chroot) && chroot != "/", "chroot {chroot:?}");
            }
        }
        Err(lb_watcher::Error::Config { diagnostics }) => lb_fuzz::check_diagnostics(&diagnostics, FILE, text),
        Err(_) => {}
    }
});
