//! The stats page: one self-contained HTML document (inline CSS, a meta refresh, no script, no
//! external resource), in the spirit of HAProxy's: a table per frontend and per backend, a row
//! per server, coloured by state, readable at a glance.

use std::fmt::Write as _;
use std::time::Duration;

use lb_supervisor::{ProcTable, Role};

use super::{backend_status, server_status};
use crate::backend::{BackendState, ServerState};
use crate::counters::Counters;
use crate::state::{FrontendState, Proxy};

const STYLE: &str = "
body{font:13px/1.4 system-ui,-apple-system,'Segoe UI',Helvetica,Arial,sans-serif;margin:0;background:#f4f5f7;color:#1d2330}
header{background:#1d2330;color:#fff;padding:12px 20px;display:flex;align-items:baseline;gap:24px;flex-wrap:wrap}
header h1{font-size:18px;margin:0;font-weight:600}
header span{color:#b8c0d0}
main{padding:16px 20px}
section{background:#fff;border:1px solid #d9dde5;border-radius:6px;margin:0 0 16px;overflow-x:auto}
h2{font-size:14px;margin:0;padding:8px 12px;border-bottom:1px solid #d9dde5;display:flex;gap:12px;align-items:center}
h2 .kind{font-size:11px;text-transform:uppercase;letter-spacing:.05em;color:#6b7385}
table{border-collapse:collapse;width:100%}
th,td{padding:4px 10px;text-align:right;white-space:nowrap;border-bottom:1px solid #eef0f4}
th{background:#f8f9fb;color:#4a5263;font-weight:600;font-size:12px}
th:first-child,td:first-child{text-align:left}
td.state{text-align:center;font-weight:600}
tr.total td{font-weight:600;background:#f8f9fb}
.legend span{padding:2px 8px;border-radius:3px;font-size:12px;font-weight:600}
.legend{display:flex;gap:8px;margin:0 0 12px}
.state.UP,.legend .UP,.state.OPEN{background:#d7f5dd;color:#0f5c24}
.state.DOWN,.legend .DOWN{background:#fbd9d9;color:#8a1414}
.state.MAINT,.legend .MAINT{background:#e3e0f5;color:#3d2f8a}
.state.DRAIN,.legend .DRAIN{background:#fdebc8;color:#7a4b00}
.state.nocheck,.legend .nocheck{background:#e8eef7;color:#2c4a73}
footer{color:#6b7385;padding:0 20px 16px;font-size:12px}
";

fn esc(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;").replace('"', "&quot;")
}

/// Bytes as a person reads them.
fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// `1h02m`, `3d4h`: how long ago a state changed.
fn ago(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m{:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{}h", s / 86_400, s % 86_400 / 3600),
    }
}

fn state_cell(status: &str) -> String {
    let class = if status == "no check" { "nocheck" } else { status };
    format!("<td class=\"state {class}\">{}</td>", esc(status))
}

/// Sessions, rates, bytes and responses: the columns every row has.
fn traffic_cells(current: usize, counters: &Counters) -> String {
    let t = counters.totals();
    let mut cells = String::new();
    let _ = write!(
        cells,
        "<td>{current}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>",
        t.max_sessions,
        t.sessions,
        counters.session_rate.per_second(),
        t.requests,
        bytes(t.bytes_in),
        bytes(t.bytes_out),
        counters.responses(1),
        counters.responses(3),
        counters.responses(4),
    );
    cells
}

/// Response and total times: averages over the last 1024 requests, the maxima on hover.
fn times_cell(counters: &Counters) -> String {
    let [_, connect, response, total] = counters.times.averages();
    let [_, connect_max, response_max, total_max] = counters.times.maxima();
    format!(
        "<td title=\"connect {connect} ms (max {connect_max}), response {response} ms (max {response_max}), \
         total {total} ms (max {total_max})\">{response} / {total}</td>"
    )
}

const TRAFFIC_HEADERS: &str = "<th>cur</th><th>max</th><th>total</th><th>rate/s</th><th>requests</th>\
<th>bytes in</th><th>bytes out</th><th>2xx</th><th>4xx</th><th>5xx</th>";

fn frontend(out: &mut String, fe: &FrontendState) {
    let _ = write!(
        out,
        "<section><h2><span class=\"kind\">frontend</span>{name}</h2><table><tr><th>name</th><th>status</th>\
         {TRAFFIC_HEADERS}<th>mode</th></tr><tr class=\"total\"><td>FRONTEND</td>{state}{traffic}<td>{mode}</td></tr>\
         </table></section>",
        name = esc(fe.name()),
        state = state_cell("OPEN"),
        traffic = traffic_cells(fe.feconn(), &fe.counters),
        mode = super::mode(fe.config.mode),
    );
}

fn server_row(out: &mut String, server: &ServerState) {
    let check = if server.checked() {
        let last = server.last_check();
        let mut text = last.status.as_str().to_owned();
        if let Some(code) = last.code {
            let _ = write!(text, " {code}");
        }
        if last.at.is_some() {
            let _ = write!(text, " in {}ms", last.duration.as_millis());
        }
        esc(&text)
    } else {
        "-".into()
    };
    let _ = write!(
        out,
        "<tr><td>{name}</td>{state}{traffic}{times}<td>{addr}</td><td>{weight}</td><td>{check}</td><td>{changed}</td></tr>",
        name = esc(server.name()),
        state = state_cell(server_status(server)),
        traffic = traffic_cells(server.current_conns(), &server.counters),
        times = times_cell(&server.counters),
        addr = server.addr(),
        weight = server.weight(),
        changed = ago(server.since_last_change()),
    );
}

fn backend(out: &mut String, backend: &BackendState) {
    let servers = backend.servers();
    let _ = write!(
        out,
        "<section><h2><span class=\"kind\">backend</span>{name}<span class=\"kind\">{algo}, {active}/{total} active, \
         {queued} queued</span></h2><table><tr><th>server</th><th>status</th>{TRAFFIC_HEADERS}\
         <th title=\"averages over the last 1024 requests\">resp / total ms</th><th>address</th>\
         <th>weight</th><th>last check</th><th>last change</th></tr>",
        name = esc(backend.name()),
        algo = super::algo(backend.config().balance),
        active = backend.active_servers(),
        total = servers.len(),
        queued = backend.queued(),
    );
    for server in servers.iter() {
        server_row(out, server);
    }
    let _ = write!(
        out,
        "<tr class=\"total\"><td>BACKEND</td>{state}{traffic}{times}<td></td><td></td><td></td><td></td></tr></table></section>",
        state = state_cell(backend_status(backend)),
        traffic = traffic_cells(backend.current_conns(), &backend.counters),
        times = times_cell(&backend.counters),
    );
}

/// The page. `procs`: the master's `show proc`, for the old workers line.
pub(crate) fn page(proxy: &Proxy, procs: Option<&ProcTable>, refresh: Duration) -> String {
    let mut out = String::with_capacity(16 * 1024);
    let totals = proxy.counters.totals();
    let old = procs.map(|t| t.workers.iter().filter(|w| w.role == Role::Old).collect::<Vec<_>>()).unwrap_or_default();
    let old_conns: u64 = old.iter().filter_map(|w| w.connections).sum();
    let _ = write!(
        out,
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta http-equiv=\"refresh\" content=\"{refresh}\">\
         <meta name=\"viewport\" content=\"width=device-width,initial-scale=1\"><title>lb-proxy stats</title>\
         <style>{STYLE}</style></head><body><header><h1>lb-proxy {version}</h1><span>worker pid {pid}</span>\
         <span>up {uptime}</span><span>{conns} connections now</span><span>{cum} connections, {req} requests in all</span>\
         <span>{old} old workers ({old_conns} connections)</span></header><main>\
         <div class=\"legend\"><span class=\"UP\">UP</span><span class=\"DOWN\">DOWN</span><span class=\"DRAIN\">DRAIN</span>\
         <span class=\"MAINT\">MAINT</span><span class=\"nocheck\">no check</span></div>",
        refresh = refresh.as_secs().max(1),
        version = env!("CARGO_PKG_VERSION"),
        pid = std::process::id(),
        uptime = ago(proxy.started.elapsed()),
        conns = proxy.actconn(),
        cum = totals.sessions,
        req = totals.requests,
        old = old.len(),
    );
    for fe in &proxy.frontends {
        frontend(&mut out, fe);
    }
    for be in proxy.backends.iter() {
        backend(&mut out, be);
    }
    let _ = write!(
        out,
        "</main><footer>Refreshes every {}s. Also: <a href=\"/metrics\">/metrics</a> (Prometheus), \
         <a href=\"/;csv\">/;csv</a> (HAProxy's CSV).</footer></body></html>",
        refresh.as_secs().max(1)
    );
    out
}
