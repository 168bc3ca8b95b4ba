//! `/metrics`: every counter and gauge in Prometheus' text exposition format (version 0.0.4),
//! one family per metric with its `# HELP` and `# TYPE`, labelled by frontend, backend and
//! server. Counters carry on across reloads (see `counters`).

use std::fmt::Write as _;

use lb_config::AdminState;
use lb_supervisor::{ProcTable, Role};

use crate::counters::{Counters, Totals};
use crate::serve::Proxy;

const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

/// One metric family being written.
struct Family<'a> {
    out: &'a mut String,
    name: String,
}

impl<'a> Family<'a> {
    fn new(out: &'a mut String, name: &str, kind: &str, help: &str) -> Family<'a> {
        let name = format!("lb_proxy_{name}");
        let _ = writeln!(out, "# HELP {name} {help}");
        let _ = writeln!(out, "# TYPE {name} {kind}");
        Family { out, name }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        self.out.push_str(&self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                let _ = write!(self.out, "{k}=\"{}\"", escape(v));
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// A label value: backslash, double quote and line feed escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A counter family, one sample per labelled item.
fn counter<T>(out: &mut String, name: &str, help: &str, items: &[(Vec<(&str, &str)>, T)], value: impl Fn(&T) -> u64) {
    let mut family = Family::new(out, name, "counter", help);
    for (labels, item) in items {
        family.sample(labels, value(item));
    }
}

fn gauge<T>(out: &mut String, name: &str, help: &str, items: &[(Vec<(&str, &str)>, T)], value: impl Fn(&T) -> u64) {
    let mut family = Family::new(out, name, "gauge", help);
    for (labels, item) in items {
        family.sample(labels, value(item));
    }
}

/// Response counts by status class, a `code` label added to each item's labels.
fn responses(out: &mut String, name: &str, help: &str, items: &[(Vec<(&str, &str)>, &Counters)]) {
    let mut family = Family::new(out, name, "counter", help);
    for (labels, counters) in items {
        for (i, class) in CLASSES.iter().enumerate() {
            let mut labels = labels.clone();
            labels.push(("code", class));
            family.sample(&labels, counters.responses(i));
        }
    }
}

/// The traffic counters every level has.
/// Labels, counters and their totals of one frontend, backend or server.
type Item<'a> = (Vec<(&'a str, &'a str)>, &'a Counters, Totals);

fn traffic(out: &mut String, level: &str, what: &str, items: &[Item<'_>]) {
    let totals: Vec<(Vec<(&str, &str)>, &Totals)> = items.iter().map(|(l, _, t)| (l.clone(), t)).collect();
    let sessions = if level == "frontend" { "Client connections accepted" } else { "Server connections opened" };
    counter(out, &format!("{level}_connections_total"), &format!("{sessions} by {what}."), &totals, |t| t.sessions);
    counter(out, &format!("{level}_requests_total"), &format!("HTTP requests through {what}."), &totals, |t| {
        t.requests
    });
    let counters: Vec<(Vec<(&str, &str)>, &Counters)> = items.iter().map(|(l, c, _)| (l.clone(), *c)).collect();
    responses(
        out,
        &format!("{level}_responses_total"),
        &format!("HTTP responses of {what}, by status class."),
        &counters,
    );
    counter(
        out,
        &format!("{level}_bytes_in_total"),
        &format!("Bytes received from clients by {what}."),
        &totals,
        |t| t.bytes_in,
    );
    counter(out, &format!("{level}_bytes_out_total"), &format!("Bytes sent to clients by {what}."), &totals, |t| {
        t.bytes_out
    });
    counter(
        out,
        &format!("{level}_client_aborts_total"),
        &format!("Transfers of {what} aborted by the client."),
        &totals,
        |t| t.client_aborts,
    );
    counter(
        out,
        &format!("{level}_server_aborts_total"),
        &format!("Transfers of {what} aborted by the server."),
        &totals,
        |t| t.server_aborts,
    );
    counter(
        out,
        &format!("{level}_max_connections"),
        &format!("Most concurrent connections of {what} seen."),
        &totals,
        |t| t.max_sessions,
    );
}

/// The whole `/metrics` body. `procs`: the master's `show proc` (None without a master).
pub(crate) fn render(proxy: &Proxy, procs: Option<&ProcTable>) -> String {
    let mut out = String::new();
    let process = proxy.counters.totals();
    Family::new(&mut out, "uptime_seconds", "gauge", "Seconds since this worker started.")
        .sample(&[], proxy.started.elapsed().as_secs());
    Family::new(&mut out, "current_connections", "gauge", "Client connections open in this worker.")
        .sample(&[], proxy.actconn());
    Family::new(&mut out, "connections_total", "counter", "Client connections accepted (carried across reloads).")
        .sample(&[], process.sessions);
    Family::new(&mut out, "requests_total", "counter", "HTTP requests (carried across reloads).")
        .sample(&[], process.requests);
    let old: Vec<_> = procs.map(|t| t.workers.iter().filter(|w| w.role == Role::Old).collect()).unwrap_or_default();
    Family::new(&mut out, "old_workers", "gauge", "Workers still draining after a reload.").sample(&[], old.len());
    Family::new(&mut out, "old_worker_connections", "gauge", "Client connections still open in draining workers.")
        .sample(&[], old.iter().filter_map(|w| w.connections).sum::<u64>());

    let frontends: Vec<_> = proxy.frontends.iter().map(|f| (vec![("frontend", f.name())], f)).collect();
    let items: Vec<_> = frontends.iter().map(|(l, f)| (l.clone(), &f.counters, f.counters.totals())).collect();
    traffic(&mut out, "frontend", "the frontend", &items);
    gauge(&mut out, "frontend_current_connections", "Client connections open on the frontend.", &frontends, |f| {
        f.feconn() as u64
    });
    counter(&mut out, "frontend_request_errors_total", "Requests that could not be parsed.", &frontends, |f| {
        f.counters.totals().request_errors
    });

    let backends: Vec<_> = proxy.backends.iter().map(|b| (vec![("backend", b.name())], b)).collect();
    let items: Vec<_> = backends.iter().map(|(l, b)| (l.clone(), &b.counters, b.counters.totals())).collect();
    traffic(&mut out, "backend", "the backend", &items);
    gauge(&mut out, "backend_current_connections", "Server connections open in the backend.", &backends, |b| {
        b.current_conns() as u64
    });
    gauge(&mut out, "backend_queued", "Connections waiting for a server slot.", &backends, |b| b.queued() as u64);
    gauge(&mut out, "backend_up", "1 when at least one server takes traffic.", &backends, |b| {
        u64::from(b.has_usable_server())
    });
    gauge(&mut out, "backend_active_servers", "Servers health-up and not in maintenance.", &backends, |b| {
        b.active_servers() as u64
    });
    counter(&mut out, "backend_downtime_seconds_total", "Seconds without a usable server.", &backends, |b| {
        b.downtime().as_secs()
    });
    counter(&mut out, "backend_connect_errors_total", "Failed connects to its servers.", &backends, |b| {
        b.counters.totals().connect_errors
    });
    counter(&mut out, "backend_response_errors_total", "Responses failed before their headers.", &backends, |b| {
        b.counters.totals().response_errors
    });
    counter(&mut out, "backend_retries_total", "Connect retries.", &backends, |b| b.counters.totals().retries);
    counter(&mut out, "backend_redispatches_total", "Retries sent to another server.", &backends, |b| {
        b.counters.totals().redispatches
    });

    let all = super::all_servers(proxy);
    let servers: Vec<_> = all.iter().map(|(b, s)| (vec![("backend", b.name()), ("server", s.name())], s)).collect();
    let items: Vec<_> = servers.iter().map(|(l, s)| (l.clone(), &s.counters, s.counters.totals())).collect();
    traffic(&mut out, "server", "the server", &items);
    gauge(&mut out, "server_current_connections", "Connections open to the server.", &servers, |s| {
        s.current_conns() as u64
    });
    gauge(&mut out, "server_up", "Health: 1 up (or not checked), 0 down.", &servers, |s| u64::from(s.is_up()));
    {
        let mut family =
            Family::new(&mut out, "server_admin_state", "gauge", "Administrative state: 1 for the current one.");
        for (labels, server) in &servers {
            for (state, name) in
                [(AdminState::Ready, "ready"), (AdminState::Drain, "drain"), (AdminState::Maint, "maint")]
            {
                let mut labels = labels.clone();
                labels.push(("state", name));
                family.sample(&labels, u64::from(server.admin_state() == state));
            }
        }
    }
    gauge(&mut out, "server_weight", "Current weight (0 to 256).", &servers, |s| u64::from(s.weight()));
    counter(&mut out, "server_connect_errors_total", "Failed connects to the server.", &servers, |s| {
        s.counters.totals().connect_errors
    });
    counter(&mut out, "server_check_failures_total", "Failed health checks.", &servers, |s| s.check_counts().0);
    counter(&mut out, "server_downs_total", "Times health went from up to down.", &servers, |s| s.check_counts().1);
    counter(&mut out, "server_downtime_seconds_total", "Seconds spent DOWN or in MAINT.", &servers, |s| {
        s.downtime().as_secs()
    });
    gauge(&mut out, "server_last_change_seconds", "Seconds since its state last changed.", &servers, |s| {
        s.since_last_change().as_secs()
    });
    out
}
