//! `defaults`, `frontend`, `backend` and `listen` sections into lb-proxy's frontends and
//! backends (a `listen` is both, the frontend's default backend being its own), a stats
//! `listen` into `global.stats`, and `ssl` binds handed to lb-tls.

use std::path::PathBuf;
use std::time::Duration;

use lb_config::{
    Backend, Balance, Bind, Config, ErrorPage, Frontend, HealthCheck, HttpReuse, ListenAddr, Mode, RequestAction,
    RequestRule, ResponseAction, ResponseRule, RouteTarget, Rule, Stats,
};

use super::actions::{self, Scope};
use super::bind::{bind, Bases, BindLine};
use super::condition::{guard, split_guard, Acls, Shared};
use super::lexer::Line;
use super::logging;
use super::maps::map_target;
use super::report::Report;
use super::sections::{Kind, Section};
use super::server::{health_check, server};
use super::settings::Settings;
use super::values::duration;

/// Rule directives: in a frontend (or listen) only, not passed on by `defaults`.
const RULES: &[&str] = &["acl", "http-request", "http-response", "capture", "monitor-uri", "redirect", "use_backend"];

/// What the proxy sections give.
#[derive(Debug, Default)]
pub(crate) struct Proxies {
    pub(crate) frontends: Vec<Frontend>,
    pub(crate) backends: Vec<Backend>,
    pub(crate) stats: Option<Stats>,
    /// The `ssl` binds lb-tls takes over, and the frontend whose traffic it forwards.
    pub(crate) tls_binds: Vec<BindLine>,
}

/// Where lb-tls hands connections to lb-proxy; `None`: no lb-tls configuration is written.
#[derive(Debug, Clone)]
pub(crate) struct TlsTarget {
    pub(crate) socket: PathBuf,
}

/// lb-proxy's own defaults for what HAProxy has no setting for (header and body limits,
/// HTTP/2), as lb-config resolves a frontend and a backend that say nothing.
fn templates() -> (Frontend, Backend) {
    let text = "frontends: [ { name: t, bind: [ \"127.0.0.1:1\" ], default_backend: t } ]\n\
                backends: [ { name: t, servers: [] } ]\n";
    match Config::parse(text, "template") {
        Ok(mut c) => (c.frontends.remove(0), c.backends.remove(0)),
        Err(e) => unreachable!("lb-config refuses an empty frontend: {e}"),
    }
}

pub(crate) fn proxies(
    sections: &[Section],
    bases: &Bases,
    tls: Option<&TlsTarget>,
    shared: &mut Shared,
    report: &mut Report,
) -> Proxies {
    let (frontend_template, backend_template) = templates();
    let mut out = Proxies::default();
    // Each `defaults` resolved once (its lines reported once), in file order.
    let mut defaults: Vec<Option<Settings>> = Vec::new();
    let mut tls_frontend: Option<String> = None;
    for section in sections {
        let inherited = section.defaults.and_then(|i| defaults.get(i).cloned().flatten()).unwrap_or_default();
        match section.kind {
            Kind::Global => defaults.push(None),
            Kind::Defaults => {
                let mut settings = inherited;
                for line in &section.body {
                    if !settings.apply(line, report) {
                        let why = if RULES.contains(&line.word(0)) {
                            "rules in a `defaults` section are not translated: write them in each frontend"
                        } else {
                            "not a setting a `defaults` section passes on to lb-proxy"
                        };
                        report.error(line.number, line.directive(), why);
                    }
                }
                defaults.push(Some(settings));
            }
            kind => {
                defaults.push(None);
                let mut proxy = Proxy::new(section, inherited);
                proxy.read(bases, shared, report);
                if proxy.is_stats_only() {
                    out.stats = proxy.stats(report).or(out.stats);
                    continue;
                }
                if kind != Kind::Backend {
                    let mut frontend = proxy.frontend(&frontend_template, report);
                    let (plain, ssl): (Vec<BindLine>, Vec<BindLine>) =
                        proxy.binds.iter().cloned().partition(|b| b.ssl.is_none());
                    frontend.binds = plain.iter().flat_map(lb_binds).collect();
                    if !ssl.is_empty() {
                        match (tls, &tls_frontend) {
                            (None, _) => {
                                for b in &ssl {
                                    report.error(
                                        b.line,
                                        "bind … ssl",
                                        "give --tls-config FILE to write lb-tls's configuration for it",
                                    );
                                }
                            }
                            (Some(_), Some(first)) => {
                                for b in &ssl {
                                    report.error(
                                        b.line,
                                        "bind … ssl",
                                        format!(
                                            "lb-tls forwards every connection to one lb-proxy frontend, here `{first}`"
                                        ),
                                    );
                                }
                            }
                            (Some(target), None) => {
                                tls_frontend = Some(section.name.clone());
                                frontend.binds.push(Bind {
                                    address: ListenAddr::Unix(target.socket.clone()),
                                    accept_proxy: true,
                                    mode: None,
                                    user: None,
                                    group: None,
                                });
                                frontend.tls = plain.is_empty();
                                out.tls_binds.extend(ssl);
                            }
                        }
                    }
                    if frontend.binds.is_empty() {
                        report.error(
                            section.header.number,
                            section.header.word(0),
                            format!("`{}` has no bind lb-proxy can listen on: left out", section.name),
                        );
                    } else {
                        out.frontends.push(frontend);
                    }
                }
                if kind != Kind::Frontend {
                    out.backends.push(proxy.backend(&backend_template, report));
                }
            }
        }
    }
    out
}

fn lb_binds(b: &BindLine) -> Vec<Bind> {
    b.addresses
        .iter()
        .map(|address| {
            let unix = matches!(address, ListenAddr::Unix(_));
            Bind {
                address: address.clone(),
                accept_proxy: b.accept_proxy,
                mode: b.mode.filter(|_| unix),
                user: b.user.clone().filter(|_| unix),
                group: b.group.clone().filter(|_| unix),
            }
        })
        .collect()
}

/// One proxy section as read.
struct Proxy<'a> {
    section: &'a Section,
    settings: Settings,
    binds: Vec<BindLine>,
    acls: Acls,
    rules: Vec<Rule>,
    /// `capture request header` lines (first, in order), then `http-request` lines, then
    /// `redirect` lines, as HAProxy runs them.
    captures: Vec<RequestRule>,
    http_request: Vec<RequestRule>,
    redirects: Vec<RequestRule>,
    http_response: Vec<ResponseRule>,
    /// An unconditional `use_backend` (every later rule is dead), with its line.
    always: Option<(String, usize)>,
    servers: Vec<(lb_config::Server, super::server::ServerParams)>,
    stats_enabled: bool,
    stats_refresh: Option<Duration>,
}

impl<'a> Proxy<'a> {
    fn new(section: &'a Section, settings: Settings) -> Proxy<'a> {
        Proxy {
            section,
            settings,
            binds: Vec::new(),
            acls: Acls::default(),
            rules: Vec::new(),
            captures: Vec::new(),
            http_request: Vec::new(),
            redirects: Vec::new(),
            http_response: Vec::new(),
            always: None,
            servers: Vec::new(),
            stats_enabled: false,
            stats_refresh: None,
        }
    }

    fn is_frontend(&self) -> bool {
        self.section.kind != Kind::Backend
    }

    fn is_backend(&self) -> bool {
        self.section.kind != Kind::Frontend
    }

    fn read(&mut self, bases: &Bases, shared: &mut Shared, report: &mut Report) {
        let header = &self.section.header;
        // `listen NAME ADDRESS`: HAProxy 1.x's bind in the header.
        if self.section.kind == Kind::Listen && !header.word(2).is_empty() && header.word(2) != "from" {
            report.note(
                header.number,
                "listen",
                "an address in the header is HAProxy 1.x's form (HAProxy 2.x refuses it): translated as a bind",
            );
            if let Some(b) = bind(header, &header.words[2..3], bases, report) {
                self.binds.push(b);
            }
        }
        for line in &self.section.body {
            self.line(line, bases, shared, report);
        }
    }

    fn line(&mut self, line: &Line, bases: &Bases, shared: &mut Shared, report: &mut Report) {
        let at = line.number;
        let keyword = line.word(0);
        if self.settings.apply(line, report) {
            return;
        }
        match keyword {
            "log" if line.word(1) == "global" => {}
            "log" => report.error(
                at,
                "log",
                "lb-proxy writes one log, global.log: a proxy's own log target is not translated",
            ),
            "no" if line.word(1) == "log" => report.error(at, "no log", "lb-proxy logs every proxy"),
            "stats" => self.stats_line(line, report),
            "bind" | "acl" | "use_backend" | "capture" | "monitor-uri" | "redirect" if !self.is_frontend() => {
                report.error(at, keyword, "a frontend directive: HAProxy ignores it in a backend")
            }
            "http-request" | "http-response" if !self.is_frontend() => report.error(
                at,
                line.directive(),
                "lb-proxy runs http-request and http-response rules per frontend: move it to the frontends that use this backend",
            ),
            "bind" => {
                if let Some(b) = bind(line, &line.words[1..], bases, report) {
                    self.binds.push(b);
                }
            }
            "acl" => self.acls.add(line, shared, report),
            "use_backend" => self.use_backend(line, shared, report),
            "http-request" | "redirect" | "monitor-uri" => {
                let name = self.section.name.clone();
                let mut scope = Scope { acls: &self.acls, proxy: &name, shared };
                let rule = match keyword {
                    "monitor-uri" => actions::monitor_uri(line),
                    _ => actions::request(line, &mut scope),
                };
                match (rule, keyword) {
                    (Ok(rule), "redirect") => self.redirects.push(rule),
                    (Ok(rule), "monitor-uri") => self.captures.insert(0, rule),
                    (Ok(rule), _) => self.http_request.push(rule),
                    (Err(why), _) => report.error(at, line.directive(), why),
                }
            }
            "http-response" => {
                let name = self.section.name.clone();
                let mut scope = Scope { acls: &self.acls, proxy: &name, shared };
                match actions::response(line, &mut scope) {
                    Ok(rule) => self.http_response.push(rule),
                    Err(why) => report.error(at, line.directive(), why),
                }
            }
            "capture" => match actions::capture_line(line) {
                Ok((true, capture)) => self
                    .captures
                    .push(RequestRule { action: RequestAction::Capture(capture), guard: None }),
                Ok((false, capture)) => self
                    .http_response
                    .insert(0, ResponseRule { action: ResponseAction::Capture(capture), guard: None }),
                Err(why) => report.error(at, line.directive(), why),
            },
            "declare" => report.error(at, keyword, "lb-proxy numbers capture slots by the order of the captures"),
            "server" if !self.is_backend() => {
                report.error(at, keyword, "a backend directive: HAProxy ignores it in a frontend")
            }
            "server" => {
                if let Some(s) = server(line, &self.settings.default_server, report) {
                    self.servers.push(s);
                }
            }
            "disabled" => report.error(at, keyword, "lb-proxy has no disabled proxies: remove the section"),
            "enabled" => {}
            _ => report.error(at, line.directive(), "not a directive lb-proxy has a counterpart for"),
        }
    }

    fn use_backend(&mut self, line: &Line, shared: &mut Shared, report: &mut Report) {
        let at = line.number;
        let (target, condition) = split_guard(&line.words[1..]);
        let [backend] = target else {
            report.error(at, "use_backend", "expected `use_backend BACKEND [if|unless CONDITION]`");
            return;
        };
        if let Some((first, first_at)) = &self.always {
            report.error(at, "use_backend", format!("never reached: line {first_at} sends everything to `{first}`"));
            return;
        }
        let target = match backend.strip_prefix("%[").and_then(|b| b.strip_suffix(']')) {
            Some(expr) => match map_target(expr, shared) {
                Ok(target) => target,
                Err(why) => {
                    report.error(at, "use_backend", why);
                    return;
                }
            },
            None => RouteTarget::Backend(backend.clone()),
        };
        let guard = match condition.map(|c| guard(c, &self.acls, &self.section.name, shared)).transpose() {
            Ok(guard) => guard,
            Err(why) => {
                report.error(at, "use_backend", why);
                return;
            }
        };
        match (guard, target) {
            (None, RouteTarget::Backend(name)) => self.always = Some((name, at)),
            (guard, backend) => self.rules.push(Rule { path_prefix: None, host: None, guard, backend }),
        }
    }

    fn stats_line(&mut self, line: &Line, report: &mut Report) {
        match line.word(1) {
            "enable" | "uri" => self.stats_enabled = true,
            "refresh" => match duration(line.word(2)) {
                Ok(d) => self.stats_refresh = Some(d),
                Err(why) => report.error(line.number, line.directive(), why),
            },
            "auth" | "realm" | "admin" | "http-request" => report.error(
                line.number,
                line.directive(),
                "lb-proxy's stats page has no authentication or admin actions: serve it on an internal address",
            ),
            _ => report.error(line.number, line.directive(), "lb-proxy's stats page has an address and a refresh only"),
        }
    }

    /// A `listen stats` (or frontend) with `stats enable` and nothing to balance.
    fn is_stats_only(&self) -> bool {
        self.stats_enabled
            && self.servers.is_empty()
            && self.rules.is_empty()
            && self.settings.default_backend.is_none()
    }

    fn stats(&self, report: &mut Report) -> Option<Stats> {
        let tcp = self.binds.iter().flat_map(|b| &b.addresses).find_map(|a| match a {
            ListenAddr::Tcp(a) => Some(*a),
            ListenAddr::Unix(_) | ListenAddr::Udp(_) => None,
        });
        let header = &self.section.header;
        match tcp {
            Some(address) => Some(Stats { address, refresh: self.stats_refresh.unwrap_or(Duration::from_secs(5)) }),
            None => {
                report.error(header.number, header.word(0), "the stats page needs a TCP bind");
                None
            }
        }
    }

    fn frontend(&self, template: &Frontend, report: &mut Report) -> Frontend {
        let s = &self.settings;
        let mut f = template.clone();
        f.name = self.section.name.clone();
        f.mode = s.mode.unwrap_or(Mode::Tcp);
        f.max_connections = s.maxconn.filter(|&n| n > 0);
        f.forward_for = s.forward_for && f.mode == Mode::Http;
        f.timeouts = s.resolved_timeouts(lb_config::HealthCheck::default().interval);
        let has_rules = !(self.rules.is_empty()
            && self.captures.is_empty()
            && self.http_request.is_empty()
            && self.redirects.is_empty()
            && self.http_response.is_empty());
        if f.mode == Mode::Http {
            f.rules = self.rules.clone();
            f.http_request =
                [&self.captures, &self.http_request, &self.redirects].into_iter().flatten().cloned().collect();
            f.http_response = self.http_response.clone();
            self.logging(&mut f, report);
        } else if has_rules {
            report.error(
                self.section.header.number,
                self.section.header.word(0),
                "HTTP rules in a tcp frontend: HAProxy ignores them, and so does the translation",
            );
        }
        f.default_backend = match (&self.always, self.section.kind) {
            (Some((backend, _)), _) => Some(backend.clone()),
            (None, Kind::Listen) => Some(self.section.name.clone()),
            (None, _) => s.default_backend.clone(),
        };
        for (status, (path, _)) in &s.errorfiles {
            f.error_pages.pages.insert(*status, error_page(*status, path));
        }
        f
    }

    /// `log-format` and `unique-id-*` (the frontend's, else its defaults').
    fn logging(&self, f: &mut Frontend, report: &mut Report) {
        let s = &self.settings;
        if let Some((text, at)) = &s.log_format {
            let requests = f.http_request.iter().filter(|r| matches!(r.action, RequestAction::Capture(_))).count();
            let responses = f.http_response.iter().filter(|r| matches!(r.action, ResponseAction::Capture(_))).count();
            match logging::log_format(text, requests, responses) {
                Ok((format, rewritten)) => {
                    if rewritten {
                        report.note(*at, "log-format", "`%[capture.req.hdr(0)]` is written as the capture block `%hr`: the value between braces, `{…}`");
                    }
                    f.log_format = Some(format);
                }
                Err(why) => report.error(*at, "log-format", why),
            }
        }
        let (format, header) = (&s.unique_id_format, &s.unique_id_header);
        let at = header.as_ref().or(format.as_ref()).map_or(0, |(_, at)| *at);
        let name = match (format, header) {
            (_, Some((h, _))) => h.clone(),
            (Some(_), None) => {
                report.note(at, "unique-id-format", "lb-proxy sends the request ID to servers in a header: X-Unique-ID, as no unique-id-header names one");
                "X-Unique-ID".to_owned()
            }
            (None, None) => return,
        };
        match logging::unique_id(format.as_ref().map(|(f, _)| f.as_str()), &name) {
            Ok(id) => f.unique_id = Some(id),
            Err(why) => report.error(at, "unique-id-format", why),
        }
    }

    fn backend(&self, template: &Backend, report: &mut Report) -> Backend {
        if self.section.kind == Kind::Backend {
            // Settings HAProxy applies per backend and lb-proxy per frontend.
            for line in &self.section.body {
                let why = match line.words.join(" ").as_str() {
                    w if w.starts_with("errorfile ") => "lb-proxy's error pages are per frontend: write it in the frontends that use this backend, or in `defaults`",
                    w if w.starts_with("option forwardfor") => "lb-proxy adds X-Forwarded-For per frontend: write it in the frontends that use this backend, or in `defaults`",
                    w if w.starts_with("unique-id-") => "lb-proxy makes request IDs per frontend: write it in the frontends that use this backend, or in `defaults`",
                    _ => continue,
                };
                report.error(line.number, line.directive(), why);
            }
        }
        let s = &self.settings;
        let params: Vec<_> = self.servers.iter().map(|(_, p)| p.clone()).collect();
        let health: HealthCheck = health_check(&s.check, &params, report);
        let mut b = template.clone();
        b.name = self.section.name.clone();
        b.mode = s.mode.unwrap_or(Mode::Tcp);
        // HAProxy's defaults, where lb-proxy's differ: roundrobin, and idle connections shared.
        b.balance = s.balance.unwrap_or(Balance::RoundRobin);
        b.http_reuse = s.http_reuse.unwrap_or(HttpReuse::Safe);
        b.retries = s.retries.unwrap_or(3);
        b.redispatch = s.redispatch;
        b.timeouts = s.resolved_timeouts(health.interval);
        b.health_check = health;
        b.servers = self.servers.iter().map(|(server, _)| server.clone()).collect();
        b
    }
}

/// An errorfile as lb-config holds one; lb-proxy reads the file when it loads the YAML.
fn error_page(status: u16, path: &std::path::Path) -> ErrorPage {
    ErrorPage { status, headers: Vec::new(), body: Vec::new(), source: Some(path.to_path_buf()) }
}
