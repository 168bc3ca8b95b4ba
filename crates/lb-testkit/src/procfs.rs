//! What `/proc` says about a process: its children, open fds, memory, environment, sockets.
//! Linux only, like the rest of the end-to-end suite.

use std::collections::HashSet;
use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

/// The fields of `/proc/PID/stat` after the command name, from the state on (field 3 of
/// proc(5) is index 0 here). The command name may hold spaces and parentheses: the fields follow
/// the last ')'.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(stat.rsplit_once(')')?.1.split_whitespace().map(str::to_owned).collect())
}

/// The parent of `pid` (None once it has exited and been reaped).
pub fn parent_of(pid: u32) -> Option<u32> {
    stat_fields(pid)?.get(1)?.parse().ok()
}

/// The state letter of `pid` (`R`, `S`, `Z`…), None once it is gone.
pub fn state_of(pid: u32) -> Option<char> {
    stat_fields(pid)?.first()?.chars().next()
}

/// `pid` runs: it exists and is not a zombie (a zombie has exited; only its parent's wait is
/// missing).
pub fn is_alive(pid: u32) -> bool {
    matches!(state_of(pid), Some(s) if s != 'Z' && s != 'X')
}

/// The processes whose parent is `pid` (zombies included).
pub fn children_of(pid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else { return Vec::new() };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&child| parent_of(child) == Some(pid))
        .collect()
}

/// The living (non-zombie) children of `pid`.
pub fn live_children_of(pid: u32) -> Vec<u32> {
    children_of(pid).into_iter().filter(|&c| is_alive(c)).collect()
}

/// How many file descriptors `pid` has open.
pub fn fd_count(pid: u32) -> Option<usize> {
    Some(std::fs::read_dir(format!("/proc/{pid}/fd")).ok()?.count())
}

/// What each fd of `pid` points to (`socket:[123]`, `pipe:[45]`, a path…), sorted.
pub fn fd_targets(pid: u32) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return Vec::new() };
    let mut targets: Vec<String> =
        dir.filter_map(|e| std::fs::read_link(e.ok()?.path()).ok()).map(|t| t.to_string_lossy().into_owned()).collect();
    targets.sort();
    targets
}

/// A `kB` field of `/proc/PID/status` (`VmRSS:`, `VmHWM:`), in KiB.
pub fn status_kib(pid: u32, key: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with(key))?;
    line[key.len()..].trim().trim_end_matches("kB").trim().parse().ok()
}

/// The resident set size of `pid` (`VmRSS`), in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    status_kib(pid, "VmRSS:")
}

/// CPU time `pid` has used (user + system), in seconds. /proc counts in USER_HZ, which is 100
/// on every Linux the tests run on.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let fields = stat_fields(pid)?;
    // utime and stime, fields 14 and 15 of proc(5).
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some(ticks as f64 / 100.0)
}

/// The environment `pid` was started with (`NAME=value` entries).
pub fn environ(pid: u32) -> Option<Vec<String>> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).ok()?;
    Some(
        raw.split(|&b| b == 0)
            .filter(|e| !e.is_empty())
            .map(|e| OsString::from_vec(e.to_vec()).to_string_lossy().into_owned())
            .collect(),
    )
}

/// The executable `pid` runs.
pub fn exe_of(pid: u32) -> Option<PathBuf> {
    std::fs::read_link(format!("/proc/{pid}/exe")).ok()
}

/// The inodes of the sockets `pid` has open.
pub fn socket_inodes(pid: u32) -> HashSet<u64> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return HashSet::new();
    };
    dir.filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_str()?;
            target.strip_prefix("socket:[")?.strip_suffix(']')?.parse().ok()
        })
        .collect()
}

/// The inodes of every TCP socket in LISTEN state on local port `port` (IPv4 and IPv6).
pub fn listening_inodes(port: u16) -> Vec<u64> {
    tcp_sockets(port, "0A")
}

/// How many established TCP connections were accepted on local port `port` (their accepting
/// side, IPv4 and IPv6).
pub fn established_on(port: u16) -> usize {
    tcp_sockets(port, "01").len()
}

/// The inodes of the TCP sockets on local port `port` in kernel state `state` (hex, as
/// /proc/net/tcp writes it: `01` established, `0A` listening).
fn tcp_sockets(port: u16, state: &str) -> Vec<u64> {
    let mut inodes = Vec::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(local), Some(st), Some(inode)) = (fields.get(1), fields.get(3), fields.get(9)) else {
                continue;
            };
            let local_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if *st == state && local_port == Some(port) {
                if let Ok(inode) = inode.parse() {
                    inodes.push(inode);
                }
            }
        }
    }
    inodes
}

/// Sends `signal` to `pid`: only ever a process the test started (a master it runs, or one of
/// that master's workers, by PID).
pub fn signal(pid: u32, signal: nix::sys::signal::Signal) -> std::io::Result<()> {
    let raw = i32::try_from(pid).map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, e))?;
    if raw <= 0 {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, "not a process id"));
    }
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(raw), signal).map_err(std::io::Error::from)
}

/// How an exited process that is still a zombie ended, from `/proc/PID/stat`'s `exit_code`
/// (the raw wait status): `exit status N` or `signal N`. None while it runs or once reaped.
pub fn zombie_exit(pid: u32) -> Option<String> {
    if state_of(pid)? != 'Z' {
        return None;
    }
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status: i32 = stat.split_whitespace().last()?.parse().ok()?;
    Some(if status & 0x7f == 0 {
        format!("exit status {}", (status >> 8) & 0xff)
    } else {
        format!("signal {}", status & 0x7f)
    })
}
