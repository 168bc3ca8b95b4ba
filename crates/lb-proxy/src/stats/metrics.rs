//! `/metrics`: Prometheus' text exposition format (version 0.0.4), one family per metric with
//! its `# HELP` and `# TYPE`.
//!
//! Names, types and labels are those of HAProxy's built-in exporter (`haproxy_process_*`,
//! `haproxy_frontend_*` and `haproxy_backend_*` labelled `proxy`, `haproxy_server_*` labelled
//! `proxy` and `server`) wherever lb-proxy has the same figure, so that dashboards and alerts
//! built for HAProxy work unchanged. Figures HAProxy does not export are `lb_proxy_*`: old
//! workers, a server's requests and administrative state. Counters carry on across reloads
//! (see `counters`).

use std::fmt::Write as _;

use lb_config::AdminState;
use lb_supervisor::{ProcTable, Role};

use crate::backend::{BackendState, ServerState};
use crate::counters::{Counters, Totals, BUCKETS_MS, PHASES};
use crate::state::{FrontendState, Proxy};

const CLASSES: [&str; 6] = ["1xx", "2xx", "3xx", "4xx", "5xx", "other"];

type Labels<'a> = Vec<(&'a str, &'a str)>;

/// Writes one family: its header, then a sample per labelled value.
fn family<'a, V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    samples: impl IntoIterator<Item = (Labels<'a>, V)>,
) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    for (labels, value) in samples {
        out.push_str(name);
        if !labels.is_empty() {
            out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                let _ = write!(out, "{k}=\"{}\"", escape(v));
            }
            out.push('}');
        }
        let _ = writeln!(out, " {value}");
    }
}

/// A label value: backslash, double quote and line feed escaped.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// One frontend, backend or server: its labels, counters and their totals.
struct Item<'a, T> {
    labels: Labels<'a>,
    counters: &'a Counters,
    totals: Totals,
    of: &'a T,
}

impl<'a, T> Item<'a, T> {
    fn new(labels: Labels<'a>, counters: &'a Counters, of: &'a T) -> Self {
        Item { labels, counters, totals: counters.totals(), of }
    }
}

/// A family with one sample per item.
fn each<T, V: std::fmt::Display>(
    out: &mut String,
    name: &str,
    kind: &str,
    help: &str,
    items: &[Item<'_, T>],
    value: impl Fn(&Item<'_, T>) -> V,
) {
    family(out, name, kind, help, items.iter().map(|i| (i.labels.clone(), value(i))));
}

/// A family with one sample per item and state, 1 for the item's current state.
fn states<T>(
    out: &mut String,
    name: &str,
    help: &str,
    items: &[Item<'_, T>],
    all: &[&'static str],
    current: impl Fn(&T) -> &'static str,
) {
    let samples = items.iter().flat_map(|item| {
        let now = current(item.of);
        all.iter().map(move |state| {
            let mut labels = item.labels.clone();
            labels.push(("state", state));
            (labels, u64::from(*state == now))
        })
    });
    family(out, name, "gauge", help, samples);
}

/// HTTP responses by status class, HAProxy's `code` label.
fn responses<T>(out: &mut String, level: &str, items: &[Item<'_, T>]) {
    let samples = items.iter().flat_map(|item| {
        CLASSES.iter().enumerate().map(move |(i, class)| {
            let mut labels = item.labels.clone();
            labels.push(("code", class));
            (labels, item.counters.responses(i))
        })
    });
    family(
        out,
        &format!("haproxy_{level}_http_responses_total"),
        "counter",
        "HTTP responses by status class.",
        samples,
    );
}

/// What frontends, backends and servers count alike, under HAProxy's names.
fn traffic<T>(out: &mut String, level: &str, items: &[Item<'_, T>]) {
    let name = |what: &str| format!("haproxy_{level}_{what}");
    each(out, &name("max_sessions"), "gauge", "Most concurrent sessions seen.", items, |i| i.totals.max_sessions);
    each(
        out,
        &name("sessions_total"),
        "counter",
        "Sessions (connections) since the first worker started.",
        items,
        |i| i.totals.sessions,
    );
    each(out, &name("bytes_in_total"), "counter", "Bytes received from clients.", items, |i| i.totals.bytes_in);
    each(out, &name("bytes_out_total"), "counter", "Bytes sent to clients.", items, |i| i.totals.bytes_out);
    each(out, &name("max_session_rate"), "gauge", "Most sessions in one second.", items, |i| {
        i.counters.session_rate.max()
    });
    responses(out, level, items);
}

/// What backends and servers count alike.
fn server_side<T>(out: &mut String, level: &str, items: &[Item<'_, T>]) {
    let name = |what: &str| format!("haproxy_{level}_{what}");
    each(out, &name("connection_errors_total"), "counter", "Failed connects to servers.", items, |i| {
        i.totals.connect_errors
    });
    each(out, &name("response_errors_total"), "counter", "Responses failed before their headers.", items, |i| {
        i.totals.response_errors
    });
    each(out, &name("retry_warnings_total"), "counter", "Connect retries.", items, |i| i.totals.retries);
    each(out, &name("redispatch_warnings_total"), "counter", "Retries sent to another server.", items, |i| {
        i.totals.redispatches
    });
    each(out, &name("loadbalanced_total"), "counter", "Times a server was picked.", items, |i| i.totals.sessions);
    each(out, &name("client_aborts_total"), "counter", "Transfers aborted by the client.", items, |i| {
        i.totals.client_aborts
    });
    each(out, &name("server_aborts_total"), "counter", "Transfers aborted by the server.", items, |i| {
        i.totals.server_aborts
    });
    each(out, &name("last_session_seconds"), "gauge", "Seconds since the last session (-1: never).", items, |i| {
        super::last_session(i.counters)
    });
    let seconds = |ms: u64| ms as f64 / 1000.0;
    for (n, phase) in ["queue", "connect", "response", "total"].iter().enumerate() {
        each(
            out,
            &name(&format!("{phase}_time_average_seconds")),
            "gauge",
            &format!("Average {phase} time over the last 1024 requests."),
            items,
            |i| seconds(i.counters.times.averages()[n]),
        );
        each(
            out,
            &name(&format!("max_{phase}_time_seconds")),
            "gauge",
            &format!("Longest {phase} time seen."),
            items,
            |i| seconds(i.counters.times.maxima()[n]),
        );
    }
}

/// `lb_proxy_backend_request_duration_seconds`: a histogram per backend and phase (connect,
/// first byte of the response, total), carried across reloads.
fn durations(out: &mut String, items: &[Item<'_, BackendState>]) {
    let name = "lb_proxy_backend_request_duration_seconds";
    let _ = writeln!(
        out,
        "# HELP {name} Requests that reached a server, by time to connect, to the response's first byte, and in total.\n# TYPE {name} histogram"
    );
    for item in items {
        let proxy = item.labels.first().map_or("", |(_, v)| *v);
        for (p, phase) in PHASES.iter().enumerate() {
            let counts = item.totals.durations.phases.get(p).cloned().unwrap_or_else(|| vec![0; BUCKETS_MS.len() + 1]);
            let labels = format!("proxy=\"{}\",phase=\"{phase}\"", escape(proxy));
            let mut cumulative = 0;
            for (b, count) in counts.iter().enumerate() {
                cumulative += count;
                let le = BUCKETS_MS.get(b).map_or("+Inf".to_owned(), |ms| (*ms as f64 / 1000.0).to_string());
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
            }
            let sum = item.totals.durations.sums_ms.get(p).copied().unwrap_or(0) as f64 / 1000.0;
            let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}\n{name}_count{{{labels}}} {cumulative}");
        }
    }
}

/// The whole `/metrics` body. `procs`: the master's `show proc` (None without a master).
pub(crate) fn render(proxy: &Proxy, procs: Option<&ProcTable>) -> String {
    let mut out = String::new();
    process(&mut out, proxy, procs);
    frontends(&mut out, proxy);
    backends(&mut out, proxy);
    servers(&mut out, proxy);
    rules(&mut out, proxy);
    tables(&mut out, proxy);
    out
}

/// Each rule's hits (`show rules`), labelled by frontend, list, place and action.
fn rules(out: &mut String, proxy: &Proxy) {
    let hits: Vec<(String, &str, String, &str, u64)> = proxy
        .frontends
        .iter()
        .flat_map(|fe| {
            fe.policy
                .hits()
                .into_iter()
                .map(move |(kind, i, action, n)| (fe.name().to_owned(), kind, i.to_string(), action, n))
        })
        .collect();
    if hits.is_empty() {
        return;
    }
    let samples = hits.iter().map(|(fe, kind, index, action, n)| {
        (vec![("proxy", fe.as_str()), ("rules", *kind), ("index", index.as_str()), ("action", *action)], *n)
    });
    family(out, "lb_proxy_rule_hits_total", "counter", "Requests or responses a rule applied to.", samples);
}

/// The limit tables: entries, size, evictions, keys refused on a full table, denials by reason.
fn tables(out: &mut String, proxy: &Proxy) {
    let all: Vec<_> = proxy.tables.iter().collect();
    if all.is_empty() {
        return;
    }
    let each = |f: &dyn Fn(&crate::tables::Table) -> u64| {
        all.iter().map(|t| (vec![("table", t.name())], f(t))).collect::<Vec<_>>()
    };
    let relaxed = std::sync::atomic::Ordering::Relaxed;
    family(out, "lb_proxy_table_entries", "gauge", "Entries in a limit table.", each(&|t| t.used() as u64));
    family(
        out,
        "lb_proxy_table_size",
        "gauge",
        "A limit table's size (entries at most).",
        each(&|t| t.config.size as u64),
    );
    family(
        out,
        "lb_proxy_table_evictions_total",
        "counter",
        "Entries evicted to make room (least recently used first).",
        each(&|t| t.evictions.load(relaxed)),
    );
    family(
        out,
        "lb_proxy_table_full_total",
        "counter",
        "Keys not tracked: the table had no entry it could give up (all in use).",
        each(&|t| t.full.load(relaxed)),
    );
    let denials = all.iter().flat_map(|t| {
        crate::tables::Reason::ALL
            .into_iter()
            .map(move |r| (vec![("table", t.name()), ("reason", r.label())], t.denials[r as usize].load(relaxed)))
    });
    family(
        out,
        "lb_proxy_table_denials_total",
        "counter",
        "Requests and connections refused on a limit table's figures, by reason.",
        denials,
    );
}

fn process(out: &mut String, proxy: &Proxy, procs: Option<&ProcTable>) {
    let totals = proxy.counters.totals();
    let one = |value: u64| [(Labels::new(), value)];
    let start = proxy.started_at.duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    family(out, "haproxy_process_nbthread", "gauge", "Threads serving.", one(proxy.threads as u64));
    family(
        out,
        "haproxy_process_uptime_seconds",
        "gauge",
        "Seconds since this worker started.",
        one(proxy.started.elapsed().as_secs()),
    );
    family(out, "haproxy_process_start_time_seconds", "gauge", "When this worker started (Unix time).", one(start));
    family(out, "haproxy_process_max_connections", "gauge", "global.max_connections.", one(proxy.limit.max() as u64));
    family(
        out,
        "haproxy_process_current_connections",
        "gauge",
        "Client connections open in this worker.",
        one(proxy.actconn() as u64),
    );
    family(
        out,
        "haproxy_process_connections_total",
        "counter",
        "Client connections accepted (carried across reloads).",
        one(totals.sessions),
    );
    family(
        out,
        "haproxy_process_requests_total",
        "counter",
        "HTTP requests (carried across reloads).",
        one(totals.requests),
    );
    family(
        out,
        "haproxy_process_current_connection_rate",
        "gauge",
        "Connections accepted in the last second.",
        one(proxy.counters.session_rate.per_second()),
    );
    family(
        out,
        "haproxy_process_max_connection_rate",
        "gauge",
        "Most connections accepted in one second.",
        one(proxy.counters.session_rate.max()),
    );
    family(out, "haproxy_process_stopping", "gauge", "1 when this worker drains.", one(u64::from(proxy.draining())));
    let listeners: usize = proxy.frontends.iter().map(|f| f.config.binds.len()).sum();
    family(out, "haproxy_process_listeners", "gauge", "Listening sockets.", one(listeners as u64));
    family(
        out,
        "haproxy_process_dropped_logs_total",
        "counter",
        "Access-log lines dropped (writer too slow).",
        one(proxy.logger.dropped()),
    );
    family(out, "haproxy_process_bytes_out_total", "counter", "Bytes sent to clients.", one(totals.bytes_out));
    family(
        out,
        "haproxy_process_build_info",
        "gauge",
        "The running version.",
        [(vec![("version", env!("CARGO_PKG_VERSION"))], 1)],
    );
    let old: Vec<_> = procs.map(|t| t.workers.iter().filter(|w| w.role == Role::Old).collect()).unwrap_or_default();
    family(out, "lb_proxy_old_workers", "gauge", "Workers still draining after a reload.", one(old.len() as u64));
    family(
        out,
        "lb_proxy_old_worker_connections",
        "gauge",
        "Client connections still open in draining workers.",
        one(old.iter().filter_map(|w| w.connections).sum::<u64>()),
    );
    let verdicts = procs.map(|t| (t.canary.promoted, t.canary.rolled_back));
    family(
        out,
        "lb_proxy_canary_verdicts_total",
        "counter",
        "Canary reloads judged since the master started, by verdict.",
        verdicts.into_iter().flat_map(|(promoted, rolled_back)| {
            [(vec![("verdict", "promoted")], promoted), (vec![("verdict", "rolled_back")], rolled_back)]
        }),
    );
}

fn frontends(out: &mut String, proxy: &Proxy) {
    let items: Vec<Item<'_, FrontendState>> =
        proxy.frontends.iter().map(|f| Item::new(vec![("proxy", f.name())], &f.counters, &**f)).collect();
    each(out, "haproxy_frontend_current_sessions", "gauge", "Client connections open.", &items, |i| {
        i.of.feconn() as u64
    });
    each(out, "haproxy_frontend_limit_sessions", "gauge", "The frontend's connection limit.", &items, |i| {
        i.of.limit.max() as u64
    });
    traffic(out, "frontend", &items);
    states(out, "haproxy_frontend_status", "1 for the frontend's state.", &items, &["DOWN", "UP"], |_| {
        if proxy.draining() {
            "DOWN"
        } else {
            "UP"
        }
    });
    each(out, "haproxy_frontend_request_errors_total", "counter", "Requests that could not be parsed.", &items, |i| {
        i.totals.request_errors
    });
    each(out, "haproxy_frontend_requests_denied_total", "counter", "Requests denied by a rule.", &items, |i| {
        i.totals.denied_requests
    });
    each(
        out,
        "haproxy_frontend_intercepted_requests_total",
        "counter",
        "Requests answered by a return or redirect rule.",
        &items,
        |i| i.totals.intercepted,
    );
    each(out, "haproxy_frontend_http_requests_total", "counter", "HTTP requests.", &items, |i| i.totals.requests);
    each(out, "haproxy_frontend_http_requests_rate_max", "gauge", "Most HTTP requests in one second.", &items, |i| {
        i.counters.request_rate.max()
    });
    each(out, "haproxy_frontend_connections_total", "counter", "Client connections accepted.", &items, |i| {
        i.totals.sessions
    });
    each(out, "haproxy_frontend_connections_rate_max", "gauge", "Most connections in one second.", &items, |i| {
        i.counters.session_rate.max()
    });
}

fn backends(out: &mut String, proxy: &Proxy) {
    let items: Vec<Item<'_, BackendState>> =
        proxy.backends.iter().map(|b| Item::new(vec![("proxy", b.name())], &b.counters, &**b)).collect();
    each(out, "haproxy_backend_current_queue", "gauge", "Requests waiting for a server slot.", &items, |i| {
        i.of.queued() as u64
    });
    each(out, "haproxy_backend_current_sessions", "gauge", "Server connections open.", &items, |i| {
        i.of.current_conns() as u64
    });
    traffic(out, "backend", &items);
    server_side(out, "backend", &items);
    states(
        out,
        "haproxy_backend_status",
        "1 for the backend's state (UP: a server takes traffic).",
        &items,
        &["DOWN", "UP"],
        super::backend_status,
    );
    each(out, "haproxy_backend_weight", "gauge", "Total weight of the servers taking traffic.", &items, |i| {
        i.of.servers()
            .iter()
            .filter(|s| s.usable_weight(std::time::Instant::now()).is_some())
            .map(|s| u64::from(s.weight()))
            .sum::<u64>()
    });
    each(out, "haproxy_backend_active_servers", "gauge", "Servers health-up and not in maintenance.", &items, |i| {
        i.of.active_servers() as u64
    });
    each(out, "haproxy_backend_backup_servers", "gauge", "Backup servers (lb-proxy has none).", &items, |_| 0);
    each(out, "haproxy_backend_check_up_down_total", "counter", "Times a server went from up to down.", &items, |i| {
        i.of.servers().iter().map(|s| s.check_counts().1).sum::<u64>()
    });
    each(out, "haproxy_backend_downtime_seconds_total", "counter", "Seconds without a usable server.", &items, |i| {
        i.of.downtime().as_secs()
    });
    each(out, "haproxy_backend_http_requests_total", "counter", "HTTP requests.", &items, |i| i.totals.requests);
    durations(out, &items);
}

fn servers(out: &mut String, proxy: &Proxy) {
    let all = super::all_servers(proxy);
    let items: Vec<Item<'_, ServerState>> = all
        .iter()
        .map(|(b, s)| Item::new(vec![("proxy", b.name()), ("server", s.name())], &s.counters, &**s))
        .collect();
    each(
        out,
        "haproxy_server_current_queue",
        "gauge",
        "Requests waiting for this server (always 0: the backend queues).",
        &items,
        |_| 0,
    );
    each(out, "haproxy_server_current_sessions", "gauge", "Connections open to the server.", &items, |i| {
        i.of.current_conns() as u64
    });
    family(
        out,
        "haproxy_server_limit_sessions",
        "gauge",
        "The server's max_connections, where set.",
        items.iter().filter_map(|i| i.of.config().max_connections.map(|n| (i.labels.clone(), n as u64))),
    );
    traffic(out, "server", &items);
    server_side(out, "server", &items);
    states(
        out,
        "haproxy_server_status",
        "1 for the server's state.",
        &items,
        &["DOWN", "UP", "MAINT", "DRAIN", "NOLB"],
        |s| match s.admin_state() {
            AdminState::Maint => "MAINT",
            AdminState::Drain => "DRAIN",
            AdminState::Ready if s.is_up() => "UP",
            AdminState::Ready => "DOWN",
        },
    );
    each(out, "haproxy_server_weight", "gauge", "Current weight (0 to 256).", &items, |i| u64::from(i.of.weight()));
    each(out, "haproxy_server_uweight", "gauge", "Weight as configured or last set.", &items, |i| {
        u64::from(i.of.weight())
    });
    each(out, "haproxy_server_check_failures_total", "counter", "Failed health checks.", &items, |i| {
        i.of.check_counts().0
    });
    each(out, "haproxy_server_check_up_down_total", "counter", "Times health went from up to down.", &items, |i| {
        i.of.check_counts().1
    });
    each(
        out,
        "haproxy_server_check_last_change_seconds",
        "gauge",
        "Seconds since its state last changed.",
        &items,
        |i| i.of.since_last_change().as_secs(),
    );
    each(out, "haproxy_server_downtime_seconds_total", "counter", "Seconds spent DOWN or in MAINT.", &items, |i| {
        i.of.downtime().as_secs()
    });
    each(out, "lb_proxy_server_http_requests_total", "counter", "HTTP requests sent to the server.", &items, |i| {
        i.totals.requests
    });
}
