//! Stats: what `show stat`, `show info`, `show servers state` and `show sess` print, the
//! counters handed across a reload, and (in `http`) the stats page, `/metrics` and the CSV over
//! HTTP.
//!
//! `show stat` is HAProxy 2.6's CSV, column for column: the same header in the same order, the
//! columns lb-proxy has a value for filled in the way HAProxy fills them, the others left empty.
//! So tools that read HAProxy's CSV (by column name, as its documentation says to) read ours.
//!
//! # Layout
//! - this file: the CSV rows, ids, states, `show sess`, the counters snapshot.
//! - `info`: `show info` and `show servers state`.
//! - `figures`: what a worker reports for a canary's verdict.
//! - `http`: the stats listener (HTML page, `/metrics`, `/;csv`); `html`, `metrics`: their bodies.

mod columns;
mod figures;
mod html;
mod http;
mod info;
mod metrics;
#[cfg(test)]
mod tests;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use lb_config::AdminState;
use lb_supervisor::report::{self, Format, ObjType, StatObject};

use crate::backend::{BackendState, ServerState};
use crate::counters::{unix_now, Counters, ServerTotals, Snapshot};
use crate::state::{FrontendState, Proxy};

pub(crate) use columns::COLUMNS;
pub(crate) use figures::figures;
pub(crate) use http::serve as serve_http;
pub(crate) use info::{info, servers_state};

/// HAProxy's process number column (`pid`): lb-proxy has one serving process.
const PROCESS_NUMBER: u32 = 1;

/// One CSV row being filled in, by column name.
struct Row {
    cells: Vec<String>,
}

impl Row {
    fn new() -> Row {
        Row { cells: vec![String::new(); COLUMNS.len()] }
    }

    fn set(&mut self, column: &str, value: impl ToString) -> &mut Row {
        match columns::index(column) {
            Some(i) => self.cells[i] = value.to_string(),
            None => debug_assert!(false, "show stat has no column {column}"),
        }
        self
    }

    fn line(&self) -> String {
        let mut line = String::new();
        for cell in &self.cells {
            line.push_str(&escape(cell));
            line.push(',');
        }
        line
    }
}

/// A CSV cell: quoted when it holds a comma, a quote or a line break (RFC 4180).
fn escape(cell: &str) -> std::borrow::Cow<'_, str> {
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\"")).into()
    } else {
        cell.into()
    }
}

/// The unique id of a frontend (`iid`): 1, 2 … in configuration order; backends follow.
pub(crate) fn frontend_id(index: usize) -> usize {
    index + 1
}

fn backend_id(proxy: &Proxy, index: usize) -> usize {
    proxy.frontends.len() + index + 1
}

/// A server's id within its backend (`sid`, `srv_id`): 1, 2 …, never reused for a server
/// added after one was deleted.
pub(crate) fn server_id(server: &ServerState) -> usize {
    server.index() + 1
}

/// A server's `status` as HAProxy writes it: MAINT, DRAIN, `no check`, UP or DOWN.
pub(crate) fn server_status(server: &ServerState) -> &'static str {
    match server.admin_state() {
        AdminState::Maint => "MAINT",
        AdminState::Drain => "DRAIN",
        AdminState::Ready if !server.checked() => "no check",
        AdminState::Ready if server.is_up() => "UP",
        AdminState::Ready => "DOWN",
    }
}

/// A backend is UP when at least one server takes traffic.
pub(crate) fn backend_status(backend: &BackendState) -> &'static str {
    if backend.has_usable_server() {
        "UP"
    } else {
        "DOWN"
    }
}

/// Seconds since the last session, -1 for never (HAProxy's `lastsess`).
fn last_session(counters: &Counters) -> i64 {
    match counters.totals().last_session {
        0 => -1,
        at => unix_now().saturating_sub(at) as i64,
    }
}

/// The columns a backend row and a server row fill the same way from their counters (which
/// `Row` keeps in HAProxy's column order, whatever order they are set in).
fn server_side_traffic(row: &mut Row, c: &Counters) {
    let t = c.totals();
    row.set("smax", t.max_sessions)
        .set("stot", t.sessions)
        .set("bin", t.bytes_in)
        .set("bout", t.bytes_out)
        .set("econ", t.connect_errors)
        .set("eresp", t.response_errors)
        .set("wretr", t.retries)
        .set("wredis", t.redispatches)
        .set("lbtot", t.sessions)
        .set("rate", c.session_rate.per_second())
        .set("rate_max", c.session_rate.max())
        .set("req_tot", t.requests)
        .set("cli_abrt", t.client_aborts)
        .set("srv_abrt", t.server_aborts)
        .set("lastsess", last_session(c));
    // HAProxy's times: averages over the last 1024 requests, and maxima, in ms.
    let averages = c.times.averages();
    let maxima = c.times.maxima();
    for (i, name) in ["qtime", "ctime", "rtime", "ttime"].iter().enumerate() {
        row.set(name, averages[i]);
        row.set(&format!("{name}_max"), maxima[i]);
    }
    responses(row, c);
}

fn responses(row: &mut Row, counters: &Counters) {
    for (i, column) in ["hrsp_1xx", "hrsp_2xx", "hrsp_3xx", "hrsp_4xx", "hrsp_5xx", "hrsp_other"].iter().enumerate() {
        row.set(column, counters.responses(i));
    }
}

/// `show stat`'s optional `<iid|name> <type> <sid>` selection, as HAProxy takes it: a proxy
/// by id or name (-1: all), a type mask (1 frontends, 2 backends, 4 servers; -1: all), a server
/// id (-1: all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Filter {
    proxy: Option<String>,
    types: u32,
    sid: Option<usize>,
}

impl Filter {
    pub(crate) const ALL: Filter = Filter { proxy: None, types: 7, sid: None };

    pub(crate) fn parse(words: &[&str]) -> Result<Filter, String> {
        if words.is_empty() {
            return Ok(Filter::ALL);
        }
        let [proxy, types, sid] = words else {
            return Err("Usage: show stat [{<iid>|<proxy>} <type> <sid>] [typed|json].".into());
        };
        let proxy = (*proxy != "-1").then(|| (*proxy).to_owned());
        let types = match types.parse::<i64>() {
            Ok(-1) => 7,
            Ok(t @ 0..=7) => t as u32,
            _ => {
                return Err(format!(
                    "Invalid type '{types}': -1, or a sum of 1 (frontends), 2 (backends), 4 (servers)."
                ))
            }
        };
        let sid = match sid.parse::<i64>() {
            Ok(-1) => None,
            Ok(n) if n > 0 => Some(n as usize),
            _ => return Err(format!("Invalid server id '{sid}': -1 or a positive number.")),
        };
        Ok(Filter { proxy, types, sid })
    }

    fn proxy(&self, iid: usize, name: &str) -> bool {
        self.proxy.as_deref().is_none_or(|p| p == name || p == iid.to_string())
    }
}

/// `show stat`: the header, then each frontend, and each backend's servers followed by the
/// backend itself, as HAProxy orders them.
pub(crate) fn csv(proxy: &Proxy) -> String {
    show_stat(proxy, &Filter::ALL, Format::Plain)
}

/// `show stat [filter] [typed|json]`.
pub(crate) fn show_stat(proxy: &Proxy, filter: &Filter, format: Format) -> String {
    let rows = rows(proxy, filter);
    match format {
        Format::Plain => {
            let mut out = String::from("# ");
            for (name, _, _) in COLUMNS {
                out.push_str(name);
                out.push(',');
            }
            out.push('\n');
            for (_, row) in &rows {
                out.push_str(&row.line());
                out.push('\n');
            }
            out
        }
        Format::Typed | Format::Json => {
            // The typed forms have no position for HAProxy's `-` separator column.
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|(_, row)| {
                    row.cells
                        .iter()
                        .enumerate()
                        .filter(|(i, _)| *i != columns::SEPARATOR)
                        .map(|(_, c)| c.clone())
                        .collect()
                })
                .collect();
            let objects: Vec<StatObject<'_>> = rows
                .iter()
                .zip(&cells)
                .map(|((key, _), cells)| StatObject { obj: key.0, iid: key.1, sid: key.2, cells })
                .collect();
            if format == Format::Typed {
                report::stat_typed(&columns::typed_field, &objects)
            } else {
                report::stat_json(&columns::typed_field, &objects)
            }
        }
    }
}

/// Each selected object, with its kind, proxy id and server id, in HAProxy's order.
fn rows(proxy: &Proxy, filter: &Filter) -> Vec<((ObjType, usize, usize), Row)> {
    let mut rows = Vec::new();
    for (i, fe) in proxy.frontends.iter().enumerate() {
        if filter.types & 1 != 0 && filter.proxy(frontend_id(i), fe.name()) && filter.sid.is_none() {
            rows.push(((ObjType::Frontend, frontend_id(i), 0), frontend_row(i, fe)));
        }
    }
    for (i, backend) in proxy.backends.iter().enumerate() {
        let iid = backend_id(proxy, i);
        if !filter.proxy(iid, backend.name()) {
            continue;
        }
        if filter.types & 4 != 0 {
            for server in backend.servers().iter().filter(|s| filter.sid.is_none_or(|sid| sid == server_id(s))) {
                rows.push(((ObjType::Server, iid, server_id(server)), server_row(backend, server, iid)));
            }
        }
        if filter.types & 2 != 0 && filter.sid.is_none() {
            rows.push(((ObjType::Backend, iid, 0), backend_row(backend, iid)));
        }
    }
    rows
}

fn frontend_row(index: usize, fe: &FrontendState) -> Row {
    let c = &fe.counters;
    let t = c.totals();
    let mut row = Row::new();
    row.set("pxname", fe.name())
        .set("svname", "FRONTEND")
        .set("scur", fe.feconn())
        .set("smax", t.max_sessions)
        .set("slim", fe.limit.max())
        .set("stot", t.sessions)
        .set("bin", t.bytes_in)
        .set("bout", t.bytes_out)
        .set("ereq", t.request_errors)
        .set("dreq", t.denied_requests)
        .set("intercepted", t.intercepted)
        .set("status", if fe.is_paused() { "PAUSED" } else { "OPEN" })
        .set("pid", PROCESS_NUMBER)
        .set("iid", frontend_id(index))
        .set("sid", 0)
        .set("type", 0)
        .set("rate", c.session_rate.per_second())
        .set("rate_max", c.session_rate.max())
        .set("req_rate", c.request_rate.per_second())
        .set("req_rate_max", c.request_rate.max())
        .set("req_tot", t.requests)
        .set("mode", mode(fe.config.mode))
        .set("conn_rate", c.session_rate.per_second())
        .set("conn_rate_max", c.session_rate.max())
        .set("conn_tot", t.sessions);
    responses(&mut row, c);
    row
}

fn server_row(backend: &BackendState, server: &ServerState, iid: usize) -> Row {
    let c = &server.counters;
    let (failed_checks, downs) = server.check_counts();
    let mut row = Row::new();
    row.set("pxname", backend.name())
        .set("svname", server.name())
        .set("qcur", 0)
        .set("scur", server.current_conns())
        .set("slim", server.config().max_connections.map(|n| n.to_string()).unwrap_or_default())
        .set("status", server_status(server))
        .set("weight", server.weight())
        .set("act", 1)
        .set("bck", 0)
        .set("lastchg", server.since_last_change().as_secs())
        .set("downtime", server.downtime().as_secs())
        .set("pid", PROCESS_NUMBER)
        .set("iid", iid)
        .set("sid", server_id(server))
        .set("type", 2)
        .set("addr", server.addr())
        .set("mode", mode(backend.config().mode))
        .set("uweight", server.weight());
    server_side_traffic(&mut row, c);
    if server.checked() {
        let check = server.last_check();
        let settings = &backend.config().health_check;
        row.set("chkfail", failed_checks)
            .set("chkdown", downs)
            .set("check_status", check.status.as_str())
            .set("check_code", check.code.map(|c| c.to_string()).unwrap_or_default())
            .set("check_duration", check.at.map(|_| check.duration.as_millis().to_string()).unwrap_or_default())
            .set("last_chk", check.info.clone().unwrap_or_default())
            .set("check_desc", check.status.reason())
            .set("check_rise", settings.rise)
            .set("check_fall", settings.fall)
            .set("check_health", if server.is_up() { settings.rise + settings.fall - 1 } else { 0 });
    }
    row
}

fn backend_row(backend: &BackendState, iid: usize) -> Row {
    let c = &backend.counters;
    let servers = backend.servers();
    let now = Instant::now();
    let active = servers.iter().filter(|s| s.usable_weight(now).is_some()).count();
    let weight: u32 = servers.iter().filter(|s| s.usable_weight(now).is_some()).map(|s| s.weight()).sum();
    let downs: u64 = servers.iter().map(|s| s.check_counts().1).sum();
    let lastchg = servers.iter().map(|s| s.since_last_change().as_secs()).min().unwrap_or(0);
    let mut row = Row::new();
    row.set("pxname", backend.name())
        .set("svname", "BACKEND")
        .set("qcur", backend.queued())
        .set("scur", backend.current_conns())
        .set("status", backend_status(backend))
        .set("weight", weight)
        .set("act", active)
        .set("bck", 0)
        .set("chkdown", downs)
        .set("lastchg", lastchg)
        .set("downtime", backend.downtime().as_secs())
        .set("pid", PROCESS_NUMBER)
        .set("iid", iid)
        .set("sid", 0)
        .set("type", 1)
        .set("mode", mode(backend.config().mode))
        .set("algo", algo(backend.config().balance))
        .set("uweight", weight);
    server_side_traffic(&mut row, c);
    row
}

pub(crate) fn mode(mode: lb_config::Mode) -> &'static str {
    match mode {
        lb_config::Mode::Http => "http",
        lb_config::Mode::Tcp => "tcp",
    }
}

pub(crate) fn algo(balance: lb_config::Balance) -> &'static str {
    match balance {
        lb_config::Balance::RoundRobin => "roundrobin",
        lb_config::Balance::LeastConn => "leastconn",
    }
}

/// `show sess`: a summary (lb-proxy does not list sessions one by one): open connections per
/// frontend, backend and server.
pub(crate) fn sessions(proxy: &Proxy) -> String {
    let mut out = format!("total: {} client connections\n", proxy.actconn());
    for fe in &proxy.frontends {
        let _ = writeln!(out, "frontend {}: {} client connections", fe.name(), fe.feconn());
    }
    for backend in proxy.backends.iter() {
        let _ = writeln!(
            out,
            "backend {}: {} server connections, {} queued",
            backend.name(),
            backend.current_conns(),
            backend.queued()
        );
        for server in backend.servers().iter() {
            let _ =
                writeln!(out, "  server {}/{}: {} connections", backend.name(), server.name(), server.current_conns());
        }
    }
    out
}

/// Every counter of this worker, for the next one.
pub(crate) fn snapshot(proxy: &Proxy) -> Snapshot {
    let totals = proxy.counters.totals();
    let mut snapshot = Snapshot { connections: totals.sessions, requests: totals.requests, ..Snapshot::default() };
    for fe in &proxy.frontends {
        snapshot.frontends.insert(fe.name().to_owned(), fe.counters.totals());
    }
    for backend in proxy.backends.iter() {
        snapshot.backends.insert(backend.name().to_owned(), backend.counters.totals());
        snapshot.backend_downtime_secs.insert(backend.name().to_owned(), backend.downtime().as_secs());
        for server in backend.servers().iter() {
            let (failed_checks, downs) = server.check_counts();
            let downtime_secs = server.downtime().as_secs();
            snapshot.servers.insert(
                format!("{}/{}", backend.name(), server.name()),
                ServerTotals { traffic: server.counters.totals(), failed_checks, downs, downtime_secs },
            );
        }
    }
    snapshot
}

/// Count on from a predecessor's counters; names it does not have are ignored.
pub(crate) fn inherit(proxy: &Proxy, base: &Snapshot) {
    let process = crate::counters::Totals { sessions: base.connections, requests: base.requests, ..Default::default() };
    proxy.counters.inherit(&process);
    for fe in &proxy.frontends {
        if let Some(t) = base.frontends.get(fe.name()) {
            fe.counters.inherit(t);
        }
    }
    for backend in proxy.backends.iter() {
        if let Some(t) = base.backends.get(backend.name()) {
            backend.counters.inherit(t);
        }
        if let Some(&secs) = base.backend_downtime_secs.get(backend.name()) {
            backend.inherit_downtime(std::time::Duration::from_secs(secs));
        }
        for server in backend.servers().iter() {
            if let Some(t) = base.servers.get(&format!("{}/{}", backend.name(), server.name())) {
                server.counters.inherit(&t.traffic);
                server.inherit_check_counts(t.failed_checks, t.downs);
                server.inherit_downtime(std::time::Duration::from_secs(t.downtime_secs));
            }
        }
    }
}

/// Every server of every backend, with its backend, in order (for pages and metrics).
pub(crate) fn all_servers(proxy: &Proxy) -> Vec<(Arc<BackendState>, Arc<ServerState>)> {
    let mut all = Vec::new();
    for backend in proxy.backends.iter() {
        for server in backend.servers().iter() {
            all.push((backend.clone(), server.clone()));
        }
    }
    all
}
