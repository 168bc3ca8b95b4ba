//! `server` and `default-server` lines, and the health check (`option httpchk`,
//! `http-check`, the servers' `inter`/`rise`/`fall`), which lb-proxy sets per backend.

use std::time::Duration;

use lb_config::{AdminState, CheckKind, HealthCheck, Server};

use super::lexer::Line;
use super::report::Report;
use super::values::{duration, is_flag, number, server_address};

/// A server's settings as written (on `default-server`, then on the `server` line).
#[derive(Debug, Clone, Default)]
pub(crate) struct ServerParams {
    pub(crate) check: bool,
    pub(crate) weight: Option<u32>,
    pub(crate) maxconn: Option<usize>,
    pub(crate) slowstart: Option<Duration>,
    pub(crate) disabled: bool,
    pub(crate) backup: bool,
    /// Check timing, with the line that set it.
    pub(crate) inter: Option<(Duration, usize)>,
    pub(crate) rise: Option<(u32, usize)>,
    pub(crate) fall: Option<(u32, usize)>,
}

/// Server settings taking no argument.
const FLAGS: &[&str] = &[
    "backup",
    "check",
    "disabled",
    "enabled",
    "no-check",
    "no-backup",
    "ssl",
    "no-ssl",
    "check-ssl",
    "send-proxy",
    "send-proxy-v2",
    "send-proxy-v2-ssl",
    "send-proxy-v2-ssl-cn",
    "no-send-proxy",
    "check-send-proxy",
    "non-stick",
    "stick",
    "tfo",
    "no-tfo",
    "agent-check",
    "no-agent-check",
    "no-verifyhost",
    "check-via-socks4",
    "no-check-ssl",
];

/// Why lb-proxy has no counterpart for a server setting.
fn unsupported_why(setting: &str) -> &'static str {
    match setting {
        "ssl" | "check-ssl" | "verify" | "ca-file" | "sni" | "crt" | "alpn" | "npn" => {
            "lb-proxy speaks plain HTTP/1.1 (or TCP) to servers, not TLS"
        }
        "send-proxy" | "send-proxy-v2" | "send-proxy-v2-ssl" | "send-proxy-v2-ssl-cn" => {
            "lb-proxy sends no PROXY header to servers (it writes X-Forwarded-For)"
        }
        "cookie" => "lb-proxy has no cookie persistence",
        "resolvers" | "init-addr" | "resolve-prefer" | "resolve-opts" | "resolve-net" => {
            "lb-proxy takes addresses; lb-watcher keeps server lists in step instead of DNS"
        }
        "port" | "addr" => "lb-proxy checks a server at its own address and port",
        "fastinter" | "downinter" => "lb-proxy checks at one interval, `inter`",
        "maxqueue" | "minconn" => "lb-proxy queues no requests",
        "track" | "observe" | "error-limit" | "on-error" | "on-marked-down" | "on-marked-up" => {
            "lb-proxy judges servers by their health check only"
        }
        "agent-check" | "agent-port" | "agent-inter" | "agent-send" | "agent-addr" => "lb-proxy has no agent checks",
        "proto" => "lb-proxy speaks HTTP/1.1 to servers",
        _ => "lb-proxy's servers have no such setting",
    }
}

impl ServerParams {
    /// Reads `words` (the settings after the address, or after `default-server`).
    pub(crate) fn apply_words(&mut self, words: &[String], at: usize, report: &mut Report) {
        let mut words = words.iter();
        while let Some(word) = words.next() {
            let setting = word.as_str();
            let value = if is_flag(FLAGS, setting) { None } else { words.next().map(String::as_str) };
            let directive = format!("server … {setting}");
            let mut check = |r: Result<(), String>| {
                if let Err(why) = r {
                    report.error(at, directive.clone(), why);
                }
            };
            match (setting, value) {
                ("check", _) => self.check = true,
                ("no-check", _) => self.check = false,
                ("disabled", _) => self.disabled = true,
                ("enabled", _) => self.disabled = false,
                ("backup", _) => self.backup = true,
                ("no-backup", _) => self.backup = false,
                ("weight", Some(v)) => check(number(v).map(|n| self.weight = Some(n))),
                ("maxconn", Some(v)) => check(number(v).map(|n| self.maxconn = Some(n))),
                ("slowstart", Some(v)) => check(duration(v).map(|d| self.slowstart = Some(d))),
                ("inter", Some(v)) => check(duration(v).map(|d| self.inter = Some((d, at)))),
                ("rise", Some(v)) => check(number(v).map(|n| self.rise = Some((n, at)))),
                ("fall", Some(v)) => check(number(v).map(|n| self.fall = Some((n, at)))),
                // Flags that change nothing lb-proxy does.
                ("no-ssl" | "no-send-proxy" | "no-tfo" | "no-agent-check" | "no-check-ssl", _) => {}
                (_, None) if !is_flag(FLAGS, setting) => check(Err(format!("`{setting}` needs a value"))),
                _ => report.error(at, directive, unsupported_why(setting)),
            }
        }
    }
}

/// `server NAME ADDRESS [settings]` on top of the `default-server` settings; `None` when the
/// server is left out (reported).
pub(crate) fn server(line: &Line, defaults: &ServerParams, report: &mut Report) -> Option<(Server, ServerParams)> {
    let at = line.number;
    let (name, address) = (line.word(1), line.word(2));
    if name.is_empty() || address.is_empty() {
        report.error(at, "server", "expected `server NAME ADDRESS [settings]`");
        return None;
    }
    let mut params = defaults.clone();
    params.apply_words(line.words.get(3..).unwrap_or_default(), at, report);
    let address = match server_address(address) {
        Ok((address, None)) => address,
        Ok((address, Some(host))) => {
            report.note(at, "server", format!("`{host}` resolved here to {address}: lb-proxy takes addresses"));
            address
        }
        Err(why) => {
            report.error(at, "server", why);
            return None;
        }
    };
    if params.backup {
        report.error(
            at,
            "server",
            format!("`{name}` is a backup server: lb-proxy has no backup servers (a plain server would take traffic at once); left out"),
        );
        return None;
    }
    let weight = match params.weight {
        Some(w) if w > 256 => {
            report.error(at, "server", "weight is 0 to 256");
            return None;
        }
        Some(w) => w,
        None => 1,
    };
    let server = Server {
        name: name.to_owned(),
        address,
        weight,
        check: params.check,
        slowstart: params.slowstart,
        max_connections: params.maxconn.filter(|&n| n > 0),
        state: if params.disabled { AdminState::Maint } else { AdminState::Ready },
    };
    Some((server, params))
}

/// `option httpchk` and `http-check` as written.
#[derive(Debug, Clone, Default)]
pub(crate) struct CheckSettings {
    pub(crate) http: Option<HttpCheck>,
    pub(crate) expect_status: Option<u16>,
}

#[derive(Debug, Clone)]
pub(crate) struct HttpCheck {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) host: Option<String>,
    /// The `option httpchk` line.
    pub(crate) line: usize,
}

impl CheckSettings {
    /// `option httpchk`, `option httpchk URI`, `option httpchk METHOD URI [VERSION]` (the
    /// version may carry headers after `\r\n`, HAProxy's old way of sending a Host).
    pub(crate) fn httpchk(&mut self, line: &Line, args: &[String], report: &mut Report) {
        let (method, path, version) = match args {
            [] => ("OPTIONS", "/", ""),
            [uri] => ("OPTIONS", uri.as_str(), ""),
            [method, uri] => (method.as_str(), uri.as_str(), ""),
            [method, uri, version, ..] => (method.as_str(), uri.as_str(), version.as_str()),
        };
        let mut host = None;
        for header in version.split("\r\n").skip(1) {
            match header.split_once(':') {
                Some((name, value)) if name.trim().eq_ignore_ascii_case("host") => host = Some(value.trim().to_owned()),
                Some(_) => report.note(
                    line.number,
                    line.directive(),
                    format!("header `{header}` is not sent: lb-proxy's check sends Host only"),
                ),
                None => {}
            }
        }
        self.http = Some(HttpCheck { method: method.to_owned(), path: path.to_owned(), host, line: line.number });
    }

    /// `http-check send …`, `http-check expect status N`.
    pub(crate) fn http_check(&mut self, line: &Line, report: &mut Report) {
        let at = line.number;
        match line.word(1) {
            "send" => {
                let check = self.http.get_or_insert_with(|| HttpCheck {
                    method: "OPTIONS".to_owned(),
                    path: "/".to_owned(),
                    host: None,
                    line: at,
                });
                let mut words = line.words[2..].iter();
                while let Some(word) = words.next() {
                    let value = words.next().cloned().unwrap_or_default();
                    match word.as_str() {
                        "meth" => check.method = value,
                        "uri" => check.path = value,
                        "ver" => {}
                        "hdr" if value.eq_ignore_ascii_case("host") => check.host = words.next().cloned(),
                        other => {
                            if other == "hdr" {
                                words.next();
                            }
                            report.error(
                                at,
                                line.directive(),
                                format!("`{other} {value}`: lb-proxy's check sends a method, a path and a Host"),
                            );
                        }
                    }
                }
            }
            "expect" => match (line.word(2), number::<u16>(line.word(3))) {
                ("status", Ok(status)) if line.words.len() == 4 => self.expect_status = Some(status),
                _ => report.error(
                    at,
                    line.directive(),
                    "lb-proxy's check expects one status (`http-check expect status N`)",
                ),
            },
            _ => report.error(at, line.directive(), "lb-proxy's HTTP check is one request and one expected status"),
        }
    }
}

/// The backend's health check: the HTTP request if any, the first timing the servers give.
pub(crate) fn health_check(check: &CheckSettings, servers: &[ServerParams], report: &mut Report) -> HealthCheck {
    let mut health = HealthCheck::default();
    if let Some(http) = &check.http {
        let expect_status = check.expect_status.unwrap_or_else(|| {
            report.note(http.line, "option httpchk", "HAProxy counts any 2xx or 3xx as up; lb-proxy's check expects 200 (add `http-check expect status N` for another)");
            200
        });
        health.kind = CheckKind::Http {
            method: http.method.clone(),
            path: http.path.clone(),
            host: http.host.clone(),
            expect_status,
        };
    }
    let checked: Vec<&ServerParams> = servers.iter().filter(|s| s.check).collect();
    if let Some(((inter, _), _)) = checked.iter().find_map(|s| s.inter.map(|i| (i, ()))) {
        health.interval = inter;
    }
    if let Some((rise, _)) = checked.iter().find_map(|s| s.rise) {
        health.rise = rise;
    }
    if let Some((fall, _)) = checked.iter().find_map(|s| s.fall) {
        health.fall = fall;
    }
    for s in &checked {
        let ms = |d: Duration| lb_config::format_duration(d);
        for (value, expected, what) in [
            (s.inter.map(|(d, at)| (ms(d), at)), ms(health.interval), "inter"),
            (s.rise.map(|(n, at)| (n.to_string(), at)), health.rise.to_string(), "rise"),
            (s.fall.map(|(n, at)| (n.to_string(), at)), health.fall.to_string(), "fall"),
        ] {
            if let Some((v, at)) = value.filter(|(v, _)| *v != expected) {
                report.note(
                    at,
                    format!("server … {what}"),
                    format!("lb-proxy checks every server of a backend alike: the first server's `{what}` ({expected}) is used, not {v}"),
                );
            }
        }
    }
    health
}
