//! `show info` (process facts, HAProxy's names) and `show servers state` (HAProxy 2.6's
//! format, which lb-watcher and HAProxy's own `server-state-file` tooling read by column name).

use std::fmt::Write as _;

use lb_config::AdminState;
use lb_supervisor::report::{Format, Info};

use super::server_id;
use crate::backend::ServerState;
use crate::health::CheckStatus;
use crate::state::Proxy;

/// The version line and header of `show servers state`, as HAProxy 2.6 prints them.
pub(crate) const SERVERS_STATE_HEADER: &str = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state \
srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result \
srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord \
srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n";

/// HAProxy's `srv_admin_state` bits: forced maintenance, forced drain.
const ADMF_FMAINT: u8 = 0x01;
const ADMF_FDRAIN: u8 = 0x08;

/// `show info`: HAProxy's fields, filled in with what lb-proxy has.
pub(crate) fn info(proxy: &Proxy, format: Format) -> String {
    let totals = proxy.counters.totals();
    let mut info =
        Info::process(&proxy.runtime_name, env!("CARGO_PKG_VERSION"), proxy.threads, proxy.started, proxy.started_at);
    let (tasks, run_queue) = tokio::runtime::Handle::try_current()
        .map(|h| (h.metrics().num_alive_tasks(), h.metrics().global_queue_depth()))
        .unwrap_or_default();
    let listeners: usize = proxy.frontends.iter().map(|f| f.config.binds.len()).sum();
    info.set("Maxconn", proxy.limit.max())
        .set("Hard_maxconn", proxy.hard_max_connections)
        .set("ConnRateLimit", proxy.conn_rate_limit.load(std::sync::atomic::Ordering::Relaxed))
        .set("CurrConns", proxy.actconn())
        .set("CumConns", totals.sessions)
        .set("CumReq", totals.requests)
        .set("ConnRate", proxy.counters.session_rate.per_second())
        .set("MaxConnRate", proxy.counters.session_rate.max())
        .set("SessRate", proxy.counters.session_rate.per_second())
        .set("MaxSessRate", proxy.counters.session_rate.max())
        .set("Tasks", tasks)
        .set("Run_queue", run_queue)
        .set("Stopping", u8::from(proxy.draining()))
        // HAProxy's jobs: connections and listeners, what keeps a process alive.
        .set("Jobs", proxy.actconn() + listeners)
        .set("Listeners", listeners)
        .set("DroppedLogs", proxy.logger.dropped())
        .set("TotalBytesOut", totals.bytes_out);
    info.render(format)
}

/// `show servers state [backend]`.
pub(crate) fn servers_state(proxy: &Proxy, only: Option<&str>) -> String {
    let mut out = String::from(SERVERS_STATE_HEADER);
    for (i, backend) in proxy.backends.iter().enumerate() {
        if only.is_some_and(|name| name != backend.name()) {
            continue;
        }
        let be_id = proxy.frontends.len() + i + 1;
        let settings = &backend.config().health_check;
        for server in backend.servers().iter() {
            let _ = writeln!(
                out,
                "{be_id} {} {} {} {} {} {} {} {} {} {} {} {} {} 0 0 0 - {} - 0 0 - - 0",
                backend.name(),
                server_id(server),
                server.name(),
                server.addr().ip(),
                if server.is_up() { 2 } else { 0 },
                admin_bits(server),
                server.weight(),
                server.config().weight,
                server.since_last_change().as_secs(),
                check_status_code(server),
                check_result(server),
                if server.is_up() { settings.rise + settings.fall - 1 } else { 0 },
                check_state(server),
                server.addr().port(),
            );
        }
    }
    out
}

fn admin_bits(server: &ServerState) -> u8 {
    match server.admin_state() {
        AdminState::Ready => 0,
        AdminState::Drain => ADMF_FDRAIN,
        AdminState::Maint => ADMF_FMAINT,
    }
}

/// HAProxy's numeric `healthcheck_status` (HCHK_STATUS_*): INI 1, L4OK 6, L4TOUT 7, L4CON 8,
/// L7TOUT 12, L7RSP 13, L7OKD 15, L7STS 17. An unchecked server is INI, as in HAProxy.
fn check_status_code(server: &ServerState) -> u8 {
    if !server.checked() {
        return 1;
    }
    match server.last_check().status {
        CheckStatus::Init => 1,
        CheckStatus::L4Ok => 6,
        CheckStatus::L4Timeout => 7,
        CheckStatus::L4Con => 8,
        CheckStatus::L7Timeout => 12,
        CheckStatus::L7Response => 13,
        CheckStatus::L7Ok => 15,
        CheckStatus::L7Status => 17,
    }
}

/// HAProxy's `check_result`: 0 unknown, 2 failed, 3 passed.
fn check_result(server: &ServerState) -> u8 {
    if !server.checked() {
        return 0;
    }
    match server.last_check().status {
        CheckStatus::Init => 0,
        status if status.passed() => 3,
        _ => 2,
    }
}

/// HAProxy's check state bits: configured 0x02, enabled 0x04, paused 0x08 (in maintenance).
fn check_state(server: &ServerState) -> u8 {
    if !server.checked() {
        return 0;
    }
    let paused = if server.admin_state() == AdminState::Maint { 0x08 } else { 0 };
    0x02 | 0x04 | paused
}
