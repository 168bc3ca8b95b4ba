//! lb-watcher's configuration: YAML → raw serde structs → validated, typed [`Config`], with
//! every problem reported as `file:line:col: field.path: message` (lb-config's locate
//! machinery finds the positions).

mod raw;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use lb_config::{child, item, Diagnostic, Locations};

use crate::Error;
use raw::{RawConfig, RawService};

/// The whole lb-watcher configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub zookeeper: Zookeeper,
    pub proxy: Proxy,
    pub hysteresis: Hysteresis,
    /// Loopback address of the `/status` and `/metrics` endpoint; `None`: no endpoint.
    pub status_listen: Option<SocketAddr>,
    pub services: Vec<Service>,
    /// `fleet`: this lb-proxy counts among the fleet's live nodes, which divide the limits of
    /// its `fleet: true` tables. `None`: no fleet.
    pub fleet: Option<Fleet>,
}

/// Where the fleet's lb-proxy nodes register, and this one's name there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fleet {
    pub path: String,
    /// The ephemeral node `<path>/<name>` (default: the host's name).
    pub name: String,
}

impl Fleet {
    pub fn node_path(&self) -> String {
        format!("{}/{}", self.path, self.name)
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Zookeeper {
    /// `host:port` of every ensemble member.
    pub servers: Vec<String>,
    pub session_timeout: Duration,
    /// Prefix of every path, e.g. `/lb`; `None`: the root.
    pub chroot: Option<String>,
    /// Longest pause between two connection attempts (the backoff doubles up to it).
    pub retry_max: Duration,
    /// How often every path is read whole again and compared with what the watches reported
    /// (plus up to a quarter of it at random, so that a fleet does not audit all at once).
    pub audit_interval: Duration,
}

impl Zookeeper {
    /// The connect string zookeeper-client takes: `h1:p1,h2:p2[/chroot]`.
    pub fn connect_string(&self) -> String {
        format!("{}{}", self.servers.join(","), self.chroot.as_deref().unwrap_or(""))
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Proxy {
    /// lb-proxy configuration whose watched backends get their servers from ZooKeeper.
    pub base: PathBuf,
    /// The file lb-proxy runs on, written by lb-watcher.
    pub config: PathBuf,
    /// lb-proxy's control socket; `None`: the base configuration's `global.control_socket`.
    pub control_socket: Option<PathBuf>,
    /// Command that reloads lb-proxy; `None`: a reload through the control socket (what
    /// `lbctl reload` does).
    pub reload_command: Option<Vec<String>>,
    /// Apply membership changes with runtime commands (no new worker) when possible.
    pub runtime: bool,
    /// Attempts after a failed reload, with backoff.
    pub reload_retries: u32,
    pub reload_timeout: Duration,
    /// How often the running servers are compared with the file and drift repaired.
    pub drift_check: Duration,
}

/// The old implementation's proven defaults: see `docs/config-lb-watcher.md`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hysteresis {
    /// Changes are collected this long (plus up to `collect_jitter`) before acting.
    pub collect: Duration,
    pub collect_jitter: Duration,
    /// A server that disappeared is kept while it was seen within this long.
    pub hold: Duration,
    /// At most this percentage of a backend's servers is removed per round (at least one).
    pub max_remove_percent: u32,
    pub min_apply_interval: Duration,
}

impl Default for Hysteresis {
    fn default() -> Self {
        Hysteresis {
            collect: Duration::from_secs(15),
            collect_jitter: Duration::from_secs(5),
            hold: Duration::from_secs(30),
            max_remove_percent: 20,
            min_apply_interval: Duration::from_secs(5),
        }
    }
}

/// How registration nodes are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFormat {
    /// `{"type":"host","address":…,"host":{"address":…}}` and the other registrar types.
    Registrar,
    /// nerve/synapse: `{"host":…,"port":…,"name":…,"weight":…}`.
    Nerve,
}

/// One ZooKeeper path feeding one lb-proxy backend.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Service {
    pub backend: String,
    pub path: String,
    pub format: NodeFormat,
    /// Registrar record type to keep (`host`, `load_balancer`, …); others are skipped.
    pub record_type: String,
    /// The server port: required for records without ports (`host`); for records with ports,
    /// the one to use (else their first).
    pub port: Option<u16>,
    pub check: bool,
    pub weight: u32,
    pub slowstart: Option<Duration>,
}

/// `api.us-east.example.com` → `/com/example/us-east/api`, the registrar's convention.
pub fn path_of_name(name: &str) -> String {
    let labels: Vec<&str> = name.trim_end_matches('.').split('.').rev().collect();
    format!("/{}", labels.join("/"))
}

impl Config {
    /// Reads and validates the file at `path`.
    pub fn load(path: &Path) -> Result<Config, Error> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
        let base = std::path::absolute(path).ok().and_then(|p| p.parent().map(Path::to_path_buf));
        parse_in(&text, &path.display().to_string(), base.as_deref())
            .map_err(|diagnostics| Error::Config { diagnostics })
    }

    /// Parses and validates configuration text; relative paths are taken from the current
    /// directory.
    pub fn parse(text: &str, file: &str) -> Result<Config, Error> {
        let base = std::env::current_dir().ok();
        parse_in(text, file, base.as_deref()).map_err(|diagnostics| Error::Config { diagnostics })
    }
}

fn parse_in(text: &str, file: &str, base: Option<&Path>) -> Result<Config, Vec<Diagnostic>> {
    let locations = Locations::scan(text);
    let mut ctx = Ctx { file, locations: &locations, diagnostics: Vec::new() };
    let raw: RawConfig = match serde_yaml::from_str(text) {
        Ok(raw) => raw,
        Err(e) => {
            let (line, column) = e.location().map_or((1, 1), |l| (l.line(), l.column()));
            let message = e.to_string();
            let message = match e.location() {
                Some(l) => message.replacen(&format!(" at line {} column {}", l.line(), l.column()), "", 1),
                None => message,
            };
            return Err(vec![Diagnostic { file: file.to_owned(), line, column, field: String::new(), message }]);
        }
    };
    let config = validate(&mut ctx, &raw, base);
    if ctx.diagnostics.is_empty() {
        Ok(config)
    } else {
        ctx.diagnostics.sort_by_key(|d| (d.line, d.column));
        Err(ctx.diagnostics)
    }
}

struct Ctx<'a> {
    file: &'a str,
    locations: &'a Locations,
    diagnostics: Vec<Diagnostic>,
}

impl Ctx<'_> {
    fn error(&mut self, field: &str, message: impl Into<String>) {
        let pos = self.locations.value(field);
        self.diagnostics.push(Diagnostic {
            file: self.file.to_owned(),
            line: pos.line,
            column: pos.column,
            field: field.to_owned(),
            message: message.into(),
        });
    }

    fn duration(&mut self, field: &str, text: Option<&String>, default: Duration, zero_ok: bool) -> Duration {
        let Some(text) = text else { return default };
        match lb_config::parse_duration(text) {
            Ok(d) if d.is_zero() && !zero_ok => {
                self.error(field, "must be more than 0");
                default
            }
            Ok(d) if d > Duration::from_secs(86_400) => {
                self.error(field, format!("duration `{text}` is too large (at most 24h)"));
                default
            }
            Ok(d) => d,
            Err(message) => {
                self.error(field, message);
                default
            }
        }
    }

    fn path(&mut self, field: &str, text: Option<&String>, base: Option<&Path>) -> Option<PathBuf> {
        let text = text?;
        if text.trim().is_empty() {
            self.error(field, "must not be empty");
            return None;
        }
        let path = PathBuf::from(text);
        Some(match base {
            Some(base) if path.is_relative() => base.join(path),
            _ => path,
        })
    }

    fn int(&mut self, field: &str, value: Option<i64>, range: std::ops::RangeInclusive<i64>) -> Option<i64> {
        let value = value?;
        if range.contains(&value) {
            Some(value)
        } else {
            self.error(field, format!("{value} is out of range ({}..={})", range.start(), range.end()));
            None
        }
    }
}

fn validate(ctx: &mut Ctx<'_>, raw: &RawConfig, base: Option<&Path>) -> Config {
    let zookeeper = zookeeper(ctx, raw);
    let proxy = proxy(ctx, raw, base);
    let hysteresis = hysteresis(ctx, raw);
    let status_listen =
        raw.status.as_ref().and_then(|s| s.listen.as_ref()).and_then(|text| match text.parse::<SocketAddr>() {
            Ok(addr) if addr.ip().is_loopback() => Some(addr),
            Ok(_) => {
                ctx.error(
                    "status.listen",
                    format!("`{text}` is not a loopback address: the status endpoint has no authentication"),
                );
                None
            }
            Err(_) => {
                ctx.error("status.listen", format!("invalid address `{text}`: expected IP:PORT, e.g. 127.0.0.1:9180"));
                None
            }
        });
    let mut services = Vec::new();
    match &raw.services {
        None => ctx.error("", "missing `services`: nothing to watch"),
        Some(list) if list.is_empty() => ctx.error("services", "must list at least one service"),
        Some(list) => {
            for (i, s) in list.iter().enumerate() {
                let field = item("services", i);
                if let Some(service) = service(ctx, &field, s) {
                    let first = services.iter().position(|o: &Service| o.backend == service.backend);
                    if let Some(first) = first {
                        let message = format!("backend `{}` is already filled by services[{first}]", service.backend);
                        ctx.error(&child(&field, "backend"), message);
                    }
                    services.push(service);
                }
            }
        }
    }
    let fleet = raw.fleet.as_ref().and_then(|f| fleet(ctx, f));
    Config { zookeeper, proxy, hysteresis, status_listen, services, fleet }
}

fn fleet(ctx: &mut Ctx<'_>, raw: &raw::RawFleet) -> Option<Fleet> {
    let path = match &raw.path {
        None => {
            ctx.error("fleet", "missing `fleet.path`: where the fleet's lb-proxy nodes register");
            return None;
        }
        Some(p) if !valid_zk_path(p) || p == "/" => {
            ctx.error("fleet.path", format!("invalid path `{p}`: an absolute path such as /com/example/lb"));
            return None;
        }
        Some(p) => p.clone(),
    };
    let name = match &raw.name {
        Some(n) => n.clone(),
        None => nix::unistd::gethostname().ok().and_then(|n| n.into_string().ok()).unwrap_or_default(),
    };
    if name.is_empty() || name.contains(['/', '\0']) || name == "." || name == ".." {
        ctx.error("fleet.name", format!("invalid node name `{name}`: a name without `/`, e.g. the host's name"));
        return None;
    }
    Some(Fleet { path, name })
}

fn zookeeper(ctx: &mut Ctx<'_>, raw: &RawConfig) -> Zookeeper {
    let zk = raw.zookeeper.as_ref();
    let mut servers = Vec::new();
    match zk.and_then(|z| z.servers.as_ref()) {
        None => ctx.error("zookeeper", "missing `zookeeper.servers`: the ensemble's host:port list"),
        Some(list) if list.is_empty() => ctx.error("zookeeper.servers", "must list at least one server"),
        Some(list) => {
            for (i, server) in list.iter().enumerate() {
                let field = item("zookeeper.servers", i);
                let ok = server
                    .rsplit_once(':')
                    .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0));
                if !ok || server.contains([',', '/', ' ']) {
                    ctx.error(&field, format!("invalid server `{server}`: expected HOST:PORT"));
                } else {
                    servers.push(server.clone());
                }
            }
        }
    }
    let session_timeout = ctx.duration(
        "zookeeper.session_timeout",
        zk.and_then(|z| z.session_timeout.as_ref()),
        Duration::from_secs(10),
        false,
    );
    let chroot = zk.and_then(|z| z.chroot.clone());
    if let Some(c) = &chroot {
        if !valid_zk_path(c) || c == "/" {
            ctx.error(
                "zookeeper.chroot",
                format!("invalid chroot `{c}`: an absolute path such as /lb, not ending in /"),
            );
        }
    }
    let retry_max =
        ctx.duration("zookeeper.retry_max", zk.and_then(|z| z.retry_max.as_ref()), Duration::from_secs(30), false);
    let audit_interval = ctx.duration(
        "zookeeper.audit_interval",
        zk.and_then(|z| z.audit_interval.as_ref()),
        Duration::from_secs(600),
        false,
    );
    Zookeeper { servers, session_timeout, chroot, retry_max, audit_interval }
}

fn proxy(ctx: &mut Ctx<'_>, raw: &RawConfig, base_dir: Option<&Path>) -> Proxy {
    let p = raw.proxy.as_ref();
    let base = ctx.path("proxy.base", p.and_then(|p| p.base.as_ref()), base_dir);
    let config = ctx.path("proxy.config", p.and_then(|p| p.config.as_ref()), base_dir);
    if base.is_none() && p.and_then(|p| p.base.as_ref()).is_none() {
        ctx.error("proxy", "missing `proxy.base`: the lb-proxy configuration the servers are added to");
    }
    if config.is_none() && p.and_then(|p| p.config.as_ref()).is_none() {
        ctx.error("proxy", "missing `proxy.config`: the file lb-proxy runs on, written by lb-watcher");
    }
    if base.is_some() && base == config {
        ctx.error("proxy.config", "must differ from `proxy.base`: the base is read, the config is written");
    }
    let control_socket = ctx.path("proxy.control_socket", p.and_then(|p| p.control_socket.as_ref()), base_dir);
    let reload_command = p.and_then(|p| p.reload_command.clone());
    if reload_command.as_ref().is_some_and(|c| c.is_empty() || c[0].trim().is_empty()) {
        ctx.error("proxy.reload_command", "must name a program, e.g. [systemctl, reload, lb-proxy]");
    }
    let reload_retries = ctx.int("proxy.reload_retries", p.and_then(|p| p.reload_retries), 0..=100).unwrap_or(5);
    Proxy {
        base: base.unwrap_or_default(),
        config: config.unwrap_or_default(),
        control_socket,
        reload_command,
        runtime: p.and_then(|p| p.runtime).unwrap_or(true),
        reload_retries: u32::try_from(reload_retries).unwrap_or(5),
        reload_timeout: ctx.duration(
            "proxy.reload_timeout",
            p.and_then(|p| p.reload_timeout.as_ref()),
            Duration::from_secs(60),
            false,
        ),
        drift_check: ctx.duration(
            "proxy.drift_check",
            p.and_then(|p| p.drift_check.as_ref()),
            Duration::from_secs(30),
            false,
        ),
    }
}

fn hysteresis(ctx: &mut Ctx<'_>, raw: &RawConfig) -> Hysteresis {
    let d = Hysteresis::default();
    let Some(h) = raw.hysteresis.as_ref() else { return d };
    Hysteresis {
        collect: ctx.duration("hysteresis.collect", h.collect.as_ref(), d.collect, true),
        collect_jitter: ctx.duration("hysteresis.collect_jitter", h.collect_jitter.as_ref(), d.collect_jitter, true),
        hold: ctx.duration("hysteresis.hold", h.hold.as_ref(), d.hold, true),
        max_remove_percent: ctx
            .int("hysteresis.max_remove_percent", h.max_remove_percent, 1..=100)
            .and_then(|v| u32::try_from(v).ok())
            .unwrap_or(d.max_remove_percent),
        min_apply_interval: ctx.duration(
            "hysteresis.min_apply_interval",
            h.min_apply_interval.as_ref(),
            d.min_apply_interval,
            true,
        ),
    }
}

fn service(ctx: &mut Ctx<'_>, field: &str, raw: &RawService) -> Option<Service> {
    let before = ctx.diagnostics.len();
    let backend = raw.backend.clone().unwrap_or_default();
    if raw.backend.is_none() {
        ctx.error(field, "missing `backend`: the lb-proxy backend this service fills");
    }
    let path = match (&raw.path, &raw.name) {
        (Some(_), Some(_)) => {
            ctx.error(&child(field, "name"), "give `path` or `name`, not both");
            String::new()
        }
        (Some(path), None) => {
            if !valid_zk_path(path) {
                ctx.error(&child(field, "path"), format!("invalid ZooKeeper path `{path}`: absolute, no trailing /"));
            }
            path.clone()
        }
        (None, Some(name)) => {
            let ok = !name.is_empty()
                && name.trim_end_matches('.').split('.').all(|l| !l.is_empty() && !l.contains(['/', ' ']));
            if !ok {
                ctx.error(&child(field, "name"), format!("invalid DNS-style name `{name}`"));
            }
            path_of_name(name)
        }
        (None, None) => {
            ctx.error(field, "missing `path` (or `name`, from which the path is derived)");
            String::new()
        }
    };
    let format = match raw.format.as_deref() {
        None | Some("registrar") => NodeFormat::Registrar,
        Some("nerve") => NodeFormat::Nerve,
        Some(other) => {
            ctx.error(&child(field, "format"), format!("unknown format `{other}`: expected registrar or nerve"));
            NodeFormat::Registrar
        }
    };
    let record_type = raw.record_type.clone().unwrap_or_else(|| "host".to_owned());
    let port = ctx.int(&child(field, "port"), raw.port, 1..=65535).and_then(|p| u16::try_from(p).ok());
    if port.is_none() && raw.port.is_none() && format == NodeFormat::Registrar && record_type == "host" {
        ctx.error(field, "missing `port`: `host` records carry no port, the service gives it");
    }
    let weight = ctx.int(&child(field, "weight"), raw.weight, 0..=256).and_then(|w| u32::try_from(w).ok());
    let slowstart =
        raw.slowstart.as_ref().map(|s| ctx.duration(&child(field, "slowstart"), Some(s), Duration::ZERO, false));
    (ctx.diagnostics.len() == before).then(|| Service {
        backend,
        path,
        format,
        record_type,
        port,
        check: raw.check.unwrap_or(false),
        weight: weight.unwrap_or(100),
        slowstart,
    })
}

fn valid_zk_path(path: &str) -> bool {
    path.starts_with('/') && (path == "/" || !path.ends_with('/')) && !path.contains("//") && !path.contains('\0')
}

#[cfg(test)]
mod tests;
