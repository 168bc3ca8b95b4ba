//! The `global` section: connection limit, threads, user and group, the `stats socket` as
//! lb-proxy's runtime socket, the log, `hard-stop-after`, and what lb-tls takes from it
//! (`ssl-default-bind-*`, `crt-base`, `ca-base`).

use std::path::PathBuf;

use lb_config::{Facility, Global, LogHeader, LogTarget};
use lb_tls::DraftTls;

use super::bind::{default_bind, Bases};
use super::lexer::Line;
use super::report::Report;
use super::values::{duration, number};

/// What the `global` section gives.
#[derive(Debug, Default)]
pub(crate) struct GlobalParts {
    pub(crate) global: Global,
    pub(crate) tls: DraftTls,
    pub(crate) bases: Bases,
    /// `maxconn` as written (lb-tls takes it too).
    pub(crate) maxconn: Option<usize>,
}

const UNSUPPORTED: &[(&str, &str)] = &[
    ("daemon", "lb-proxy runs under a service manager (systemd, SMF), in the foreground"),
    ("master-worker", "lb-proxy always runs as a master and workers"),
    ("pidfile", "the service manager follows lb-proxy's master; lbctl finds it by its control socket"),
    ("chroot", "lb-proxy's workers drop privileges to `user`/`group` instead (the units add their own sandboxing)"),
    ("nbproc", "lb-proxy runs one worker with threads (`worker_threads`)"),
    ("cpu-map", "lb-proxy does not pin threads"),
    ("ulimit-n", "the service manager sets the file limit (LimitNOFILE)"),
    ("stats timeout", "lbctl and the runtime socket need no timeout setting"),
    ("stats maxconn", "lb-proxy's runtime socket has no connection limit setting"),
    ("spread-checks", "lb-proxy spreads checks over their interval itself"),
    ("tune.ssl.default-dh-param", "lb-tls uses ECDHE key exchanges"),
    ("ssl-server-verify", "lb-proxy speaks plain HTTP to servers"),
    ("ssl-default-server-ciphers", "lb-proxy speaks plain HTTP to servers"),
    ("ssl-default-server-options", "lb-proxy speaks plain HTTP to servers"),
    ("ssl-default-server-ciphersuites", "lb-proxy speaks plain HTTP to servers"),
    ("uid", "write `user NAME`"),
    ("gid", "write `group NAME`"),
    ("node", "lb-proxy's `show info` names the host itself"),
    ("description", "lb-proxy has no description setting"),
    ("setenv", "the importer expands variables from its own environment"),
    ("presetenv", "the importer expands variables from its own environment"),
    ("unsetenv", "the importer expands variables from its own environment"),
    ("resetenv", "the importer expands variables from its own environment"),
    ("server-state-file", "lb-proxy hands server state from worker to worker itself"),
    ("server-state-base", "lb-proxy hands server state from worker to worker itself"),
    ("lua-load", "lb-proxy runs no Lua"),
    ("maxsslconn", "lb-tls limits connections with its `max_connections`"),
];

pub(crate) fn global(lines: &[Line], report: &mut Report) -> GlobalParts {
    let mut parts = GlobalParts::default();
    let mut log_seen = false;
    let mut socket_seen = false;
    for line in lines {
        let at = line.number;
        let directive = line.directive();
        let arg = line.word(1);
        if let Some((_, why)) = UNSUPPORTED.iter().find(|(d, _)| *d == directive || *d == line.word(0)) {
            report.error(at, directive, *why);
            continue;
        }
        if default_bind(line, &mut parts.tls, report) {
            continue;
        }
        let g = &mut parts.global;
        let result: Result<(), String> = match line.word(0) {
            "maxconn" => number(arg).map(|n| {
                g.max_connections = n;
                parts.maxconn = Some(n);
            }),
            "nbthread" => number(arg).map(|n| g.supervision.worker_threads = Some(n)),
            "user" => {
                g.supervision.user = Some(arg.to_owned());
                Ok(())
            }
            "group" => {
                g.supervision.group = Some(arg.to_owned());
                Ok(())
            }
            "hard-stop-after" => duration(arg).map(|d| g.supervision.hard_stop_after = Some(d)),
            "crt-base" => {
                parts.bases.crt = Some(PathBuf::from(arg));
                Ok(())
            }
            "ca-base" => {
                parts.bases.ca = Some(PathBuf::from(arg));
                Ok(())
            }
            "log-tag" => {
                g.log.tag = arg.to_owned();
                Ok(())
            }
            "log-send-hostname" => {
                g.log.hostname = (!arg.is_empty()).then(|| arg.to_owned());
                Ok(())
            }
            "log" if log_seen => Err("lb-proxy writes one log: the first `log` line is translated".to_owned()),
            "log" => {
                log_seen = true;
                log(line, g, report)
            }
            "stats" if arg == "socket" && socket_seen => {
                Err("lb-proxy has one runtime socket (and one TCP address): the first is translated".to_owned())
            }
            "stats" if arg == "socket" => {
                socket_seen = true;
                stats_socket(line, g, report)
            }
            w if w.starts_with("tune.") => {
                Err("lb-proxy has no tuning knobs of HAProxy's; its defaults are documented in docs/config-lb-proxy.md"
                    .to_owned())
            }
            _ => Err("not a global setting lb-proxy has".to_owned()),
        };
        if let Err(why) = result {
            report.error(at, directive, why);
        }
    }
    parts
}

/// `stats socket PATH|[ipv4@]IP:PORT [mode M] [level L] …`.
fn stats_socket(line: &Line, g: &mut Global, report: &mut Report) -> Result<(), String> {
    let address = line.word(2);
    let tcp = address.strip_prefix("ipv4@").or_else(|| address.strip_prefix("ipv6@")).unwrap_or(address);
    if let Ok(a) = tcp.parse::<std::net::SocketAddr>() {
        if !a.ip().is_loopback() {
            return Err(format!(
                "{a}: lb-proxy's runtime address is loopback only (anyone who reaches it can change servers)"
            ));
        }
        g.supervision.runtime.tcp = Some(a);
    } else {
        let path = address.strip_prefix("unix@").unwrap_or(address);
        if !path.starts_with('/') {
            return Err(format!("`{address}`: expected a socket path or a loopback IP:port"));
        }
        g.supervision.runtime.socket = Some(PathBuf::from(path));
    }
    if line.words.len() > 3 {
        report.note(line.number, line.directive(), "lb-proxy's runtime socket is mode 0600 for its user, at admin level: `mode`, `level`, `user`, `group` and `expose-fd` are not translated");
    }
    Ok(())
}

const FACILITIES: [Facility; 11] = [
    Facility::Kern,
    Facility::User,
    Facility::Daemon,
    Facility::Local0,
    Facility::Local1,
    Facility::Local2,
    Facility::Local3,
    Facility::Local4,
    Facility::Local5,
    Facility::Local6,
    Facility::Local7,
];

/// `log TARGET [len N] [format F] FACILITY [LEVEL [MINLEVEL]]`.
fn log(line: &Line, g: &mut Global, report: &mut Report) -> Result<(), String> {
    let target = line.word(1);
    g.log.target = if target == "stdout" || target == "stderr" || target == "fd@1" || target == "fd@2" {
        if target.contains('2') || target == "stderr" {
            report.note(line.number, "log", "lb-proxy writes its access log to standard output, not standard error");
        }
        LogTarget::Stdout
    } else if let Some(path) = target.strip_prefix("unix@").or_else(|| target.starts_with('/').then_some(target)) {
        LogTarget::SyslogUnix(PathBuf::from(path))
    } else {
        let udp = target.strip_prefix("udp@").or_else(|| target.strip_prefix("ipv4@")).unwrap_or(target);
        let with_port = if udp.contains(':') { udp.to_owned() } else { format!("{udp}:514") };
        match with_port.parse() {
            Ok(a) => LogTarget::SyslogUdp(a),
            Err(_) => return Err(format!("`{target}`: lb-proxy logs to stdout, a Unix socket path or a UDP IP:port")),
        }
    };
    let mut words = line.words[2..].iter();
    let mut facility_seen = false;
    while let Some(word) = words.next() {
        match word.as_str() {
            "len" => {
                words.next();
                report.note(line.number, "log", "lb-proxy has no line length setting");
            }
            "format" => {
                let format = words.next().map_or("", String::as_str);
                g.log.header = match format {
                    "rfc3164" | "local" => LogHeader::Rfc3164,
                    "rfc5424" => LogHeader::Rfc5424,
                    "iso" => LogHeader::Iso,
                    "raw" => LogHeader::Raw,
                    "short" | "priority" => LogHeader::Short,
                    other => {
                        return Err(format!("format `{other}`: lb-proxy writes rfc3164, rfc5424, iso, raw or short"))
                    }
                };
            }
            "sample" => return Err("lb-proxy logs every request: `sample` is not translated".to_owned()),
            w if !facility_seen => {
                facility_seen = true;
                g.log.facility = match FACILITIES.iter().find(|f| f.as_str() == w) {
                    Some(f) => *f,
                    None => {
                        return Err(format!("facility `{w}`: lb-proxy logs to kern, user, daemon or local0 to local7"))
                    }
                };
            }
            // The levels: lb-proxy logs every request at `info`.
            _ => {}
        }
    }
    Ok(())
}
