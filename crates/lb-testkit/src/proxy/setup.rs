//! What [`ProxyProcess`](super::ProxyProcess) needs around the process: private sockets in
//! the test's configuration, and which of its sockets listen (from `/proc`).

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Ports in LISTEN state (`0A`) in /proc/net/tcp{,6} whose socket is one of `inodes`.
pub(super) fn listening_tcp_ports(inodes: &HashSet<u64>) -> HashSet<u16> {
    let mut ports = HashSet::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            let listening_here = *state == "0A" && inode.parse().is_ok_and(|i: u64| inodes.contains(&i));
            if let (true, Some(port)) = (listening_here, local.rsplit(':').next()) {
                if let Ok(port) = u16::from_str_radix(port, 16) {
                    ports.insert(port);
                }
            }
        }
    }
    ports
}

/// Paths of listening Unix sockets in /proc/net/unix whose socket is one of `inodes`.
pub(super) fn listening_unix_paths(inodes: &HashSet<u64>) -> HashSet<PathBuf> {
    const SO_ACCEPTCON: u32 = 0x0001_0000;
    let Ok(text) = std::fs::read_to_string("/proc/net/unix") else {
        return HashSet::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let flags = u32::from_str_radix(fields.get(3)?, 16).ok()?;
            let inode: u64 = fields.get(6)?.parse().ok()?;
            let path = fields.get(7)?;
            (flags & SO_ACCEPTCON != 0 && inodes.contains(&inode)).then(|| PathBuf::from(path))
        })
        .collect()
}

/// Every test's master gets a control socket and a runtime socket of its own in the test's
/// directory, unless the test names them: the default paths are shared by every master on the
/// machine.
pub(super) fn with_private_control_socket(yaml: &str, dir: &Path) -> String {
    use serde_yaml::{Mapping, Value};
    let Ok(mut doc) = serde_yaml::from_str::<Value>(yaml) else { return yaml.to_owned() };
    let Some(top) = doc.as_mapping_mut() else { return yaml.to_owned() };
    let global = top.entry(Value::from("global")).or_insert_with(|| Value::Mapping(Mapping::new()));
    if global.is_null() {
        *global = Value::Mapping(Mapping::new());
    }
    let Some(global) = global.as_mapping_mut() else { return yaml.to_owned() };
    let mut changed = false;
    for (key, file) in [("control_socket", "master.sock"), ("runtime_socket", "runtime.sock")] {
        let key = Value::from(key);
        if !global.contains_key(&key) {
            global.insert(key, Value::from(dir.join(file).to_string_lossy().into_owned()));
            changed = true;
        }
    }
    if !changed {
        return yaml.to_owned();
    }
    serde_yaml::to_string(&doc).unwrap_or_else(|_| yaml.to_owned())
}
