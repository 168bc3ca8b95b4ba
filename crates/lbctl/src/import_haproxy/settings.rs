//! The settings a `defaults` section passes on and a proxy may override, with HAProxy's
//! meaning: what is not written stays unset here, and `resolve` applies HAProxy's rules for
//! unset values (roundrobin, http-reuse safe, `timeout http-request` falling back to
//! `timeout client`, …) when the lb-proxy values are made.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use lb_config::{Balance, ErrorPages, HttpReuse, Mode, Timeouts};

use super::lexer::Line;
use super::report::Report;
use super::server::{CheckSettings, ServerParams};
use super::values::{duration, number};

#[derive(Debug, Clone, Default)]
pub(crate) struct Settings {
    pub(crate) mode: Option<Mode>,
    pub(crate) timeouts: HaTimeouts,
    pub(crate) maxconn: Option<usize>,
    pub(crate) balance: Option<Balance>,
    pub(crate) retries: Option<u32>,
    pub(crate) redispatch: bool,
    pub(crate) http_reuse: Option<HttpReuse>,
    pub(crate) forward_for: bool,
    pub(crate) check: CheckSettings,
    /// Status → file, with the line that set it.
    pub(crate) errorfiles: BTreeMap<u16, (PathBuf, usize)>,
    pub(crate) default_server: ServerParams,
    pub(crate) default_backend: Option<String>,
    /// `log-format`, `unique-id-format`, `unique-id-header` as written, with their lines.
    pub(crate) log_format: Option<(String, usize)>,
    pub(crate) unique_id_format: Option<(String, usize)>,
    pub(crate) unique_id_header: Option<(String, usize)>,
}

/// HAProxy's timeouts as written; `None`: not set.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct HaTimeouts {
    pub(crate) connect: Option<Duration>,
    pub(crate) client: Option<Duration>,
    pub(crate) server: Option<Duration>,
    pub(crate) http_request: Option<Duration>,
    pub(crate) http_keep_alive: Option<Duration>,
    pub(crate) check: Option<Duration>,
    pub(crate) tunnel: Option<Duration>,
}

/// lb-proxy's longest timeout.
const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// Directives lb-proxy has no counterpart for, and why (for every proxy section).
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "timeout queue",
        "lb-proxy queues no requests: with every server at its maxconn, a request is answered 503 at once",
    ),
    ("timeout client-fin", "lb-proxy closes half-closed client connections with `timeout client`"),
    ("timeout server-fin", "lb-proxy closes half-closed server connections with `timeout server`"),
    ("timeout tarpit", "lb-proxy has no tarpit"),
    ("option dontlognull", "lb-proxy has no such setting: connections that send nothing are logged"),
    ("option log-health-checks", "lb-proxy logs server state changes on stderr, not in the access log"),
    ("option log-separate-errors", "lb-proxy logs every request at one level"),
    ("option logasap", "lb-proxy logs a request when it ends"),
    ("option abortonclose", "lb-proxy has no such setting"),
    ("option allbackups", "lb-proxy has no backup servers"),
    ("option persist", "lb-proxy has no persistence"),
    ("option prefer-last-server", "lb-proxy has no such setting"),
    ("option splice-auto", "lb-proxy does not splice"),
    ("option splice-request", "lb-proxy does not splice"),
    ("option splice-response", "lb-proxy does not splice"),
    ("option tcp-smart-accept", "lb-proxy has no such setting"),
    ("option tcp-smart-connect", "lb-proxy has no such setting"),
    ("option http-buffer-request", "lb-proxy streams request bodies to the server"),
    ("option http-ignore-probes", "lb-proxy has no such setting"),
    ("option originalto", "lb-proxy adds no X-Original-To"),
    ("option accept-invalid-http-request", "lb-proxy refuses invalid requests (400): it never forwards them"),
    ("option accept-invalid-http-response", "lb-proxy refuses invalid responses (502)"),
    ("option checkcache", "lb-proxy has no cache checks"),
    ("option independent-streams", "lb-proxy has no such setting"),
    ("option socket-stats", "lb-proxy counts per frontend, backend and server"),
    ("option clitcpka", "lb-proxy has no TCP keepalive setting on client connections (lb-tls has tcp_keepalive)"),
    ("option srvtcpka", "lb-proxy has no TCP keepalive setting on server connections"),
    ("option tcpka", "lb-proxy has no TCP keepalive setting"),
    ("option nolinger", "lb-proxy has no such setting"),
    ("option transparent", "lb-proxy has no transparent proxying"),
    ("compression", "lb-proxy does not compress responses"),
    ("cookie", "lb-proxy has no cookie persistence: requests are balanced each time"),
    ("stick-table", "lb-proxy has no stick tables"),
    ("stick", "lb-proxy has no stick tables"),
    ("hash-type", "lb-proxy balances by leastconn or roundrobin only"),
    ("fullconn", "lb-proxy has no dynamic maxconn"),
    ("backlog", "lb-proxy's master sets the listen backlog"),
    ("email-alert", "lb-proxy sends no mail"),
    ("description", "lb-proxy has no section descriptions"),
    ("id", "lb-proxy numbers proxies itself (show stat's iid)"),
    ("bind-process", "lb-proxy's workers run every frontend"),
    ("grace", "lb-proxy drains on reload (global close_spread, hard_stop_after)"),
    ("dispatch", "lb-proxy needs servers"),
    ("redirect", "not translated by this version: write an http_request redirect"),
    ("reqadd", "removed from HAProxy 2.1; use http-request"),
    ("rspadd", "removed from HAProxy 2.1; use http-response"),
    ("tcp-request", "lb-proxy has no tcp-request rules"),
    ("tcp-response", "lb-proxy has no tcp-response rules"),
    ("filter", "lb-proxy has no filters"),
    ("http-after-response", "lb-proxy has no http-after-response rules"),
    ("errorloc", "lb-proxy sends error pages, not redirects: write an errorfile"),
    ("errorloc302", "lb-proxy sends error pages, not redirects: write an errorfile"),
    ("errorloc303", "lb-proxy sends error pages, not redirects: write an errorfile"),
    ("errorfiles", "lb-proxy has no http-errors sections: write one errorfile line per status"),
    ("option http-server-close", "lb-proxy keeps client connections alive; server connections follow `http-reuse`"),
    ("option httpclose", "lb-proxy keeps client connections alive; server connections follow `http-reuse`"),
    ("option http-keep-alive", "lb-proxy keeps client connections alive (HAProxy's default too)"),
    ("option http-pretend-keepalive", "lb-proxy has no such setting"),
    ("option forceclose", "removed from HAProxy 2.0"),
    ("option httplog clf", "lb-proxy writes HAProxy's httplog format or JSON, not CLF"),
    ("option redis-check", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option mysql-check", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option pgsql-check", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option ssl-hello-chk", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option smtpchk", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option ldap-check", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option spop-check", "lb-proxy checks servers by TCP connect or HTTP"),
    ("option tcp-check", "lb-proxy's TCP check is a connect: tcp-check send/expect scripts are not run"),
    ("option external-check", "lb-proxy runs no external checks"),
    ("option h1-case-adjust-bogus-client", "lb-proxy has no header case adjustment"),
    ("option h1-case-adjust-bogus-server", "lb-proxy has no header case adjustment"),
    ("option disable-h2-upgrade", "lb-proxy has no such setting"),
    ("option contstats", "lb-proxy counts bytes as they pass"),
];

/// Lines that say what lb-proxy does without being told: HAProxy's httplog format for HTTP
/// proxies and tcplog for TCP ones (global.log.format haproxy), into the one global log.
const SAME_AS_LB: &[&str] = &["option httplog", "option tcplog", "log global", "option http-use-htx"];

impl Settings {
    /// Applies one line if it is a setting of this kind; `false` when it is not one.
    pub(crate) fn apply(&mut self, line: &Line, report: &mut Report) -> bool {
        let directive = line.directive();
        let at = line.number;
        if let Some((_, why)) = UNSUPPORTED.iter().find(|(d, _)| directive == *d || line.words.join(" ") == *d) {
            report.error(at, directive, *why);
            return true;
        }
        if SAME_AS_LB.iter().any(|d| line.words.join(" ") == *d) {
            // `option httplog` after a `log-format` brings the standard line back.
            if line.word(0) == "option" {
                self.log_format = None;
            }
            return true;
        }
        let arg = line.word(1);
        let mut parsed = |what: Result<(), String>| {
            if let Err(why) = what {
                report.error(at, directive.clone(), why);
            }
        };
        match line.word(0) {
            "mode" => match arg {
                "http" => self.mode = Some(Mode::Http),
                "tcp" => self.mode = Some(Mode::Tcp),
                other => parsed(Err(format!("mode `{other}`: lb-proxy proxies http or tcp"))),
            },
            "maxconn" => parsed(number(arg).map(|n| self.maxconn = Some(n))),
            "retries" => parsed(number(arg).map(|n| self.retries = Some(n))),
            "balance" => match arg {
                "roundrobin" | "static-rr" => self.balance = Some(Balance::RoundRobin),
                "leastconn" => self.balance = Some(Balance::LeastConn),
                other => {
                    report.error(at, directive, format!("`{other}`: lb-proxy balances by leastconn or roundrobin only; HAProxy's default, roundrobin, is used"))
                }
            },
            "http-reuse" => match arg {
                "never" => self.http_reuse = Some(HttpReuse::Never),
                "safe" => self.http_reuse = Some(HttpReuse::Safe),
                "aggressive" | "always" => {
                    self.http_reuse = Some(HttpReuse::Safe);
                    report.note(at, directive, format!("lb-proxy's reuse is `safe`: `{arg}` is translated as safe"));
                }
                other => parsed(Err(format!("`{other}`: expected never, safe, aggressive or always"))),
            },
            "timeout" => match line.words.get(2).map(|t| duration(t)) {
                Some(Ok(d)) => self.timeout(line, d, report),
                Some(Err(why)) => report.error(at, directive, why),
                None => report.error(at, directive, "no time given"),
            },
            "errorfile" => match (number::<u16>(arg), line.words.get(2)) {
                (Ok(status), Some(path)) if ErrorPages::STATUSES.contains(&status) => {
                    self.errorfiles.insert(status, (PathBuf::from(path), at));
                }
                (Ok(status), Some(_)) => report.error(
                    at,
                    directive,
                    format!("lb-proxy never answers {status} itself (its own errors: 400, 403, 408, 413, 500, 502, 503, 504)"),
                ),
                _ => report.error(at, directive, "expected `errorfile STATUS FILE`"),
            },
            "default_backend" => self.default_backend = Some(arg.to_owned()),
            "log-format" => self.log_format = Some((arg.to_owned(), at)),
            "unique-id-format" => self.unique_id_format = Some((arg.to_owned(), at)),
            "unique-id-header" => self.unique_id_header = Some((arg.to_owned(), at)),
            "default-server" => self.default_server.apply_words(&line.words[1..], at, report),
            "option" | "no" => return self.option(line, report),
            "http-check" => self.check.http_check(line, report),
            _ => return false,
        }
        true
    }

    fn timeout(&mut self, line: &Line, d: Duration, report: &mut Report) {
        let t = &mut self.timeouts;
        let slot = match line.word(1) {
            "connect" => &mut t.connect,
            "client" => &mut t.client,
            "server" => &mut t.server,
            "http-request" => &mut t.http_request,
            "http-keep-alive" => &mut t.http_keep_alive,
            "check" => &mut t.check,
            "tunnel" => &mut t.tunnel,
            other => {
                report.error(line.number, line.directive(), format!("`timeout {other}` has no lb-proxy counterpart"));
                return;
            }
        };
        let d = if d > MAX_TIMEOUT {
            report.note(line.number, line.directive(), "lb-proxy's timeouts are 24h at most: 24h is written");
            MAX_TIMEOUT
        } else if d < Duration::from_millis(1) {
            report.note(line.number, line.directive(), "lb-proxy's timeouts are 1ms at least: 1ms is written");
            Duration::from_millis(1)
        } else {
            d
        };
        *slot = Some(d);
    }

    /// `option NAME …` and `no option NAME`.
    fn option(&mut self, line: &Line, report: &mut Report) -> bool {
        let (negated, words) = if line.word(0) == "no" { (true, &line.words[1..]) } else { (false, &line.words[..]) };
        if words.first().map(String::as_str) != Some("option") {
            return false;
        }
        let name = words.get(1).map_or("", String::as_str);
        match name {
            "forwardfor" => {
                self.forward_for = !negated;
                if words.len() > 2 {
                    report.note(line.number, line.directive(), "lb-proxy always writes X-Forwarded-For (and X-Forwarded-Proto); `except`, `header` and `if-none` are not translated");
                }
            }
            "redispatch" => self.redispatch = !negated,
            "httpchk" if negated => self.check.http = None,
            "httpchk" => self.check.httpchk(line, &words[2..], report),
            _ => return false,
        }
        true
    }

    /// lb-proxy's timeouts: HAProxy's values, and for those not set, what HAProxy uses instead.
    pub(crate) fn resolved_timeouts(&self, check_interval: Duration) -> Timeouts {
        let t = &self.timeouts;
        let lb = Timeouts::default();
        let client = t.client.unwrap_or(lb.client);
        let server = t.server.unwrap_or(lb.server);
        let http_request = t.http_request.or(t.client).unwrap_or(lb.http_request);
        Timeouts {
            connect: t.connect.unwrap_or(lb.connect),
            client,
            server,
            http_request,
            http_keep_alive: t.http_keep_alive.unwrap_or(http_request),
            // HAProxy bounds a check by `inter` when `timeout check` is not set.
            check: t.check.unwrap_or(check_interval),
            // Without `timeout tunnel`, HAProxy applies the client and server timeouts.
            tunnel: t.tunnel.unwrap_or(client.max(server)),
        }
    }
}
