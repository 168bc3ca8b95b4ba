//! The runtime commands about the process and its frontends: limits, pausing, counters, and the
//! `show` commands that describe the process (version, environment, activity, backends, server
//! connections).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use lb_supervisor::RuntimeResult;

use super::ProxyRuntime;
use crate::pool::MAX_IDLE_PER_SERVER;

pub(super) fn command(rt: &ProxyRuntime, words: &[&str]) -> Option<RuntimeResult> {
    let proxy = &rt.proxy;
    Some(match words {
        ["show", "version"] => RuntimeResult::ok(env!("CARGO_PKG_VERSION")),
        ["show", "env"] => RuntimeResult::ok(std::env::vars().map(|(k, v)| format!("{k}={v}\n")).collect::<String>()),
        ["show", "env", name] => match std::env::var(name) {
            Ok(value) => RuntimeResult::ok(format!("{name}={value}")),
            Err(_) => RuntimeResult::refused("Variable not found"),
        },
        ["show", "backend"] => {
            let mut out = String::from("# name\n");
            for backend in proxy.backends.iter() {
                let _ = writeln!(out, "{}", backend.name());
            }
            RuntimeResult::ok(out)
        }
        ["show", "servers", "conn"] => RuntimeResult::ok(servers_conn(rt, None)),
        ["show", "servers", "conn", backend] => match proxy.backends.get(backend) {
            Some(_) => RuntimeResult::ok(servers_conn(rt, Some(backend))),
            None => RuntimeResult::refused("Can't find backend."),
        },
        ["show", "activity"] => RuntimeResult::ok(activity(rt)),
        ["clear", "counters"] => {
            proxy.counters.clear_maxima();
            for_all_counters(rt, |c| c.clear_maxima());
            RuntimeResult::ok("")
        }
        ["clear", "counters", "all"] => {
            proxy.counters.clear_all();
            for_all_counters(rt, |c| c.clear_all());
            RuntimeResult::ok("")
        }
        ["clear", ..] => RuntimeResult::refused("Usage: clear counters [all]."),
        ["disable" | "enable", "frontend", name] => {
            let Some(fe) = proxy.frontends.iter().find(|f| f.name() == *name) else {
                return Some(RuntimeResult::refused("No such frontend."));
            };
            let pause = words[0] == "disable";
            if !fe.pause(pause) {
                return Some(RuntimeResult::refused(if pause {
                    "All sockets are already disabled."
                } else {
                    "All sockets are already enabled."
                }));
            }
            tracing::warn!("Frontend {name}: accepting {} (runtime).", if pause { "paused" } else { "resumed" });
            RuntimeResult::ok("")
        }
        ["disable" | "enable", "frontend", ..] => RuntimeResult::refused("A frontend name is expected."),
        ["set", "maxconn", "frontend", name, value] => {
            let Some(fe) = proxy.frontends.iter().find(|f| f.name() == *name) else {
                return Some(RuntimeResult::refused("No such frontend."));
            };
            match value.parse::<usize>() {
                Ok(n) if n > 0 => {
                    fe.limit.set(n);
                    RuntimeResult::ok("")
                }
                _ => RuntimeResult::refused("Value out of range: a number of connections, 1 or more."),
            }
        }
        ["set", "maxconn", "global", value] => match value.parse::<usize>() {
            Ok(n) if n > 0 && n <= proxy.hard_max_connections => {
                proxy.limit.set(n);
                RuntimeResult::ok("")
            }
            _ => RuntimeResult::refused(format!(
                "Value out of range: 1 to {} (global.max_connections, the hard limit).",
                proxy.hard_max_connections
            )),
        },
        ["set", "maxconn", ..] => {
            RuntimeResult::refused("Usage: set maxconn frontend <name> <value> | global <value>.")
        }
        ["set", "rate-limit", "connections", "global", value] => match value.parse::<u64>() {
            Ok(n) => {
                proxy.conn_rate_limit.store(n, Ordering::Relaxed);
                RuntimeResult::ok("")
            }
            Err(_) => RuntimeResult::refused("Value out of range: connections per second, 0 for no limit."),
        },
        ["set", "rate-limit", ..] => RuntimeResult::refused(
            "Usage: set rate-limit connections global <value> (sessions, SSL and compression rates do not apply here).",
        ),
        _ => return None,
    })
}

fn for_all_counters(rt: &ProxyRuntime, f: impl Fn(&crate::counters::Counters)) {
    for fe in &rt.proxy.frontends {
        f(&fe.counters);
    }
    for backend in rt.proxy.backends.iter() {
        f(&backend.counters);
        for server in backend.servers().iter() {
            f(&server.counters);
        }
    }
}

/// `show servers conn [backend]`, HAProxy 2.6's header and columns. The idle connections of
/// `http_reuse: safe` backends are one pool for all threads: `idle_per_thr` has one column.
fn servers_conn(rt: &ProxyRuntime, only: Option<&str>) -> String {
    let mut out = String::from(
        "# bkname/svname bkid/svid addr port - purge_delay used_cur used_max need_est unsafe_nb safe_nb \
         idle_lim idle_cur idle_per_thr[1]\n",
    );
    for (i, backend) in rt.proxy.backends.iter().enumerate() {
        if only.is_some_and(|name| name != backend.name()) {
            continue;
        }
        let be_id = rt.proxy.frontends.len() + i + 1;
        let reuse = backend.config().http_reuse == lb_config::HttpReuse::Safe;
        let purge_ms = backend.config().timeouts.server.as_millis();
        for server in backend.servers().iter() {
            let idle = rt.proxy.pool.idle(backend.name(), server.index());
            let used = server.current_conns();
            let _ = writeln!(
                out,
                "{}/{} {be_id}/{} {} {} - {purge_ms} {used} {} {used} 0 {idle} {} {idle} {idle}",
                backend.name(),
                server.name(),
                crate::stats::server_id(server),
                server.addr().ip(),
                server.addr().port(),
                server.counters.totals().max_sessions,
                if reuse { MAX_IDLE_PER_SERVER as i64 } else { 0 },
            );
        }
    }
    out
}

/// `show activity`: the fields of HAProxy's that lb-proxy has a figure for.
fn activity(rt: &ProxyRuntime) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let (workers, tasks, queue) = tokio::runtime::Handle::try_current()
        .map(|h| (h.metrics().num_workers(), h.metrics().num_alive_tasks(), h.metrics().global_queue_depth()))
        .unwrap_or_default();
    format!(
        "thread_id: 1 (1..{workers})\ndate_now: {}.{:06}\nuptime_now: {:.6}\ntasks: {tasks}\nrun_queue: {queue}\naccepted: {}\n",
        now.as_secs(),
        now.subsec_micros(),
        rt.proxy.started.elapsed().as_secs_f64(),
        rt.proxy.counters.totals().sessions,
    )
}
