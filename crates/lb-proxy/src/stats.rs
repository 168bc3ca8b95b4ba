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
//! - `http`: the stats listener (HTML page, `/metrics`, `/;csv`); `html`, `metrics`: their bodies.

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

use crate::backend::{BackendState, ServerState};
use crate::counters::{unix_now, Counters, ServerTotals, Snapshot};
use crate::serve::{FrontendState, Proxy};

pub(crate) use http::serve as serve_http;
pub(crate) use info::{info, servers_state};

/// HAProxy 2.6's `show stat` header, every column in its order (`-` is its own placeholder).
pub(crate) const COLUMNS: &[&str] = &[
    "pxname",
    "svname",
    "qcur",
    "qmax",
    "scur",
    "smax",
    "slim",
    "stot",
    "bin",
    "bout",
    "dreq",
    "dresp",
    "ereq",
    "econ",
    "eresp",
    "wretr",
    "wredis",
    "status",
    "weight",
    "act",
    "bck",
    "chkfail",
    "chkdown",
    "lastchg",
    "downtime",
    "qlimit",
    "pid",
    "iid",
    "sid",
    "throttle",
    "lbtot",
    "tracked",
    "type",
    "rate",
    "rate_lim",
    "rate_max",
    "check_status",
    "check_code",
    "check_duration",
    "hrsp_1xx",
    "hrsp_2xx",
    "hrsp_3xx",
    "hrsp_4xx",
    "hrsp_5xx",
    "hrsp_other",
    "hanafail",
    "req_rate",
    "req_rate_max",
    "req_tot",
    "cli_abrt",
    "srv_abrt",
    "comp_in",
    "comp_out",
    "comp_byp",
    "comp_rsp",
    "lastsess",
    "last_chk",
    "last_agt",
    "qtime",
    "ctime",
    "rtime",
    "ttime",
    "agent_status",
    "agent_code",
    "agent_duration",
    "check_desc",
    "agent_desc",
    "check_rise",
    "check_fall",
    "check_health",
    "agent_rise",
    "agent_fall",
    "agent_health",
    "addr",
    "cookie",
    "mode",
    "algo",
    "conn_rate",
    "conn_rate_max",
    "conn_tot",
    "intercepted",
    "dcon",
    "dses",
    "wrew",
    "connect",
    "reuse",
    "cache_lookups",
    "cache_hits",
    "srv_icur",
    "src_ilim",
    "qtime_max",
    "ctime_max",
    "rtime_max",
    "ttime_max",
    "eint",
    "idle_conn_cur",
    "safe_conn_cur",
    "used_conn_cur",
    "need_conn_est",
    "uweight",
    "agg_server_status",
    "agg_server_check_status",
    "agg_check_status",
    "-",
    "ssl_sess",
    "ssl_reused_sess",
    "ssl_failed_handshake",
    "h2_headers_rcvd",
    "h2_data_rcvd",
    "h2_settings_rcvd",
    "h2_rst_stream_rcvd",
    "h2_goaway_rcvd",
    "h2_detected_conn_protocol_errors",
    "h2_detected_strm_protocol_errors",
    "h2_rst_stream_resp",
    "h2_goaway_resp",
    "h2_open_connections",
    "h2_backend_open_streams",
    "h2_total_connections",
    "h2_backend_total_streams",
    "h1_open_connections",
    "h1_open_streams",
    "h1_total_connections",
    "h1_total_streams",
    "h1_bytes_in",
    "h1_bytes_out",
    "h1_spliced_bytes_in",
    "h1_spliced_bytes_out",
];

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
        if let Some(i) = COLUMNS.iter().position(|c| *c == column) {
            self.cells[i] = value.to_string();
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
fn frontend_id(index: usize) -> usize {
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
        AdminState::Ready if !server.config().check => "no check",
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
        let [proxy, types, sid] = words else {
            return Err("Usage: show stat [{<iid>|<proxy>} <type> <sid>] (desc, json, typed are not supported).".into());
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
    csv_filtered(proxy, &Filter::ALL)
}

pub(crate) fn csv_filtered(proxy: &Proxy, filter: &Filter) -> String {
    let mut out = String::from("# ");
    out.push_str(&COLUMNS.join(","));
    out.push_str(",\n");
    for (i, fe) in proxy.frontends.iter().enumerate() {
        if filter.types & 1 != 0 && filter.proxy(frontend_id(i), fe.name()) && filter.sid.is_none() {
            out.push_str(&frontend_row(proxy, i, fe).line());
            out.push('\n');
        }
    }
    for (i, backend) in proxy.backends.iter().enumerate() {
        let iid = backend_id(proxy, i);
        if !filter.proxy(iid, backend.name()) {
            continue;
        }
        if filter.types & 4 != 0 {
            for server in backend.servers().iter().filter(|s| filter.sid.is_none_or(|sid| sid == server_id(s))) {
                out.push_str(&server_row(backend, server, iid).line());
                out.push('\n');
            }
        }
        if filter.types & 2 != 0 && filter.sid.is_none() {
            out.push_str(&backend_row(backend, iid).line());
            out.push('\n');
        }
    }
    out
}

fn frontend_row(proxy: &Proxy, index: usize, fe: &FrontendState) -> Row {
    let c = &fe.counters;
    let t = c.totals();
    let mut row = Row::new();
    row.set("pxname", fe.name())
        .set("svname", "FRONTEND")
        .set("scur", fe.feconn())
        .set("smax", t.max_sessions)
        .set("slim", fe.config.max_connections.unwrap_or(proxy.max_connections))
        .set("stot", t.sessions)
        .set("bin", t.bytes_in)
        .set("bout", t.bytes_out)
        .set("ereq", t.request_errors)
        .set("status", "OPEN")
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
    if server.config().check {
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
