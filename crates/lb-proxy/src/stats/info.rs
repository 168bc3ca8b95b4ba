//! `show info` (process facts, HAProxy's names) and `show servers state` (HAProxy 2.6's
//! format, which lb-watcher and HAProxy's own `server-state-file` tooling read by column name).

use std::fmt::Write as _;
use std::time::UNIX_EPOCH;

use lb_config::AdminState;

use super::server_id;
use crate::backend::ServerState;
use crate::health::CheckStatus;
use crate::serve::Proxy;

/// The version line and header of `show servers state`, as HAProxy 2.6 prints them.
pub(crate) const SERVERS_STATE_HEADER: &str = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state \
srv_admin_state srv_uweight srv_iweight srv_time_since_last_change srv_check_status srv_check_result \
srv_check_health srv_check_state srv_agent_state bk_f_forced_id srv_f_forced_id srv_fqdn srv_port srvrecord \
srv_use_ssl srv_check_port srv_check_addr srv_agent_addr srv_agent_port\n";

/// HAProxy's `srv_admin_state` bits: forced maintenance, forced drain.
const ADMF_FMAINT: u8 = 0x01;
const ADMF_FDRAIN: u8 = 0x08;

/// `show info`: `Name: value` lines, HAProxy's names for what lb-proxy has.
pub(crate) fn info(proxy: &Proxy) -> String {
    let uptime = proxy.started.elapsed().as_secs();
    let totals = proxy.counters.totals();
    let start = proxy.started_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let lines: Vec<(&str, String)> = vec![
        ("Name", "lb-proxy".into()),
        ("Version", env!("CARGO_PKG_VERSION").into()),
        ("Nbthread", proxy.threads.to_string()),
        ("Nbproc", "1".into()),
        ("Process_num", "1".into()),
        ("Pid", std::process::id().to_string()),
        ("Uptime", haproxy_uptime(uptime)),
        ("Uptime_sec", uptime.to_string()),
        ("Maxconn", proxy.max_connections.to_string()),
        ("Hard_maxconn", proxy.max_connections.to_string()),
        ("CurrConns", proxy.actconn().to_string()),
        ("CumConns", totals.sessions.to_string()),
        ("CumReq", totals.requests.to_string()),
        ("ConnRate", proxy.counters.session_rate.per_second().to_string()),
        ("MaxConnRate", proxy.counters.session_rate.max().to_string()),
        ("SessRate", proxy.counters.session_rate.per_second().to_string()),
        ("MaxSessRate", proxy.counters.session_rate.max().to_string()),
        ("ReqRate", proxy.counters.request_rate.per_second().to_string()),
        ("MaxReqRate", proxy.counters.request_rate.max().to_string()),
        ("Stopping", u8::from(proxy.draining()).to_string()),
        ("Listeners", proxy.frontends.iter().map(|f| f.config.binds.len()).sum::<usize>().to_string()),
        ("TotalBytesOut", totals.bytes_out.to_string()),
        ("Start_time_sec", start.to_string()),
    ];
    let mut out = String::new();
    for (name, value) in lines {
        let _ = writeln!(out, "{name}: {value}");
    }
    out
}

/// HAProxy's `0d 0h00m01s`.
fn haproxy_uptime(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!("{days}d {}h{:02}m{:02}s", rest / 3600, rest % 3600 / 60, rest % 60)
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
    if !server.config().check {
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
    if !server.config().check {
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
    if !server.config().check {
        return 0;
    }
    let paused = if server.admin_state() == AdminState::Maint { 0x08 } else { 0 };
    0x02 | 0x04 | paused
}
