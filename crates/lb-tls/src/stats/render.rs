//! The counters as text: `show stat` (HAProxy's CSV, a frontend a row, with HAProxy's names
//! where the figure is the same and lb-tls's own after them), `show info` (`Name: value`),
//! `show ciphers` and the Prometheus text of /metrics.

use std::fmt::Write as _;
use std::time::SystemTime;

use lb_supervisor::report::{Format, Info};

use super::{Failure, Quic, Stats, VERSIONS};

/// The QUIC counters: `show stat` column (HAProxy's name where it has the figure), /metrics
/// family, `show info` field, help.
const QUIC: [(Quic, &str, &str, &str, &str); 5] = [
    (
        Quic::Retries,
        "quic_retry_sent",
        "quic_retries_total",
        "QuicRetriesSent",
        "Retry packets sent (address validation).",
    ),
    (
        Quic::ZeroRttAccepted,
        "quic_0rtt_accepted",
        "quic_zero_rtt_accepted_total",
        "Quic0RttAccepted",
        "QUIC handshakes whose early data (0-RTT) was taken.",
    ),
    (
        Quic::ZeroRttRefused,
        "quic_0rtt_refused",
        "quic_zero_rtt_refused_total",
        "Quic0RttRefused",
        "QUIC handshakes that offered early data and were refused it.",
    ),
    (Quic::LostPackets, "quic_lost_pkt", "quic_lost_packets_total", "QuicLostPackets", "QUIC packets sent and lost."),
    (
        Quic::Migrations,
        "quic_conn_migration_done",
        "quic_migrations_total",
        "QuicConnMigrations",
        "QUIC clients seen on a new address mid-connection.",
    ),
];

/// What `show info` and /metrics say of the process beside the counters.
#[derive(Debug, Clone)]
pub(crate) struct Process {
    pub(crate) version: String,
    pub(crate) library: String,
    pub(crate) threads: usize,
    pub(crate) max_connections: usize,
}

/// `tls1_2` for `TLSv1.2`: a CSV column or a label value.
fn version_key(version: &str) -> String {
    match version {
        "TLSv1" => "tls1_0".to_owned(),
        v => v.replace("TLSv", "tls").replace('.', "_"),
    }
}

pub(crate) fn show_stat(stats: &Stats, process: &Process) -> String {
    let mut out = String::from(
        "# pxname,svname,scur,smax,slim,stot,bin,bout,econ,status,pid,iid,type,ssl_sess,ssl_reused_sess,ssl_failed_handshake",
    );
    for f in Failure::ALL {
        let _ = write!(out, ",hs_fail_{}", f.name());
    }
    for v in VERSIONS {
        let _ = write!(out, ",{}", version_key(v));
    }
    for (_, column, ..) in QUIC {
        let _ = write!(out, ",{column}");
    }
    out.push_str(",\n");
    let pid = std::process::id();
    for (i, (name, t, current)) in stats.rows().iter().enumerate() {
        let _ = write!(
            out,
            "{name},FRONTEND,{current},{},{},{},{},{},{},OPEN,{pid},{},0,{},{},{}",
            t.max,
            process.max_connections,
            t.connections,
            t.bytes_in,
            t.bytes_out,
            t.backend_failures,
            i + 1,
            t.handshakes,
            t.resumed,
            t.failed()
        );
        for i in 0..Failure::ALL.len() {
            let _ = write!(out, ",{}", t.failures.get(i).copied().unwrap_or(0));
        }
        for i in 0..VERSIONS.len() {
            let _ = write!(out, ",{}", t.versions.get(i).copied().unwrap_or(0));
        }
        for (what, ..) in QUIC {
            let _ = write!(out, ",{}", t.quic(what));
        }
        out.push_str(",\n");
    }
    out
}

/// HAProxy's `show info` fields, filled in with what a TLS terminator has (`TotalBytesOut`: the
/// plaintext sent to clients, `show stat`'s `bout` summed), and lb-tls's own after them: the
/// library (`Tls_library`) and `TotalBytesIn`.
pub(crate) fn info(stats: &Stats, process: &Process, format: Format) -> String {
    let rows = stats.rows();
    let current: u64 = rows.iter().map(|(_, _, c)| c).sum();
    let sum = |f: fn(&super::Totals) -> u64| -> u64 { rows.iter().map(|(_, t, _)| f(t)).sum() };
    let (handshakes, resumed) = (sum(|t| t.handshakes), sum(|t| t.resumed));
    let reuse_pct = (resumed * 100).checked_div(handshakes).unwrap_or(0);
    let started_at = SystemTime::now() - stats.started.elapsed();
    let mut info = Info::process("lb-tls", &process.version, process.threads, stats.started, started_at);
    info.set("Maxconn", process.max_connections)
        .set("Hard_maxconn", process.max_connections)
        .set("CurrConns", current)
        .set("CumConns", sum(|t| t.connections))
        .set("CurrSslConns", current)
        .set("CumSslConns", handshakes)
        .set("SslFrontendSessionReuse_pct", reuse_pct)
        .set("Listeners", rows.len())
        .set("TotalBytesOut", sum(|t| t.bytes_out))
        .extra("Tls_library", &process.library)
        // HAProxy counts no bytes in; lb-tls does, as `show stat`'s `bin` summed.
        .extra_counter("TotalBytesIn", sum(|t| t.bytes_in));
    for (what, _, _, field, _) in QUIC {
        info.extra_counter(field, rows.iter().map(|(_, t, _)| t.quic(what)).sum());
    }
    info.render(format)
}

/// Handshakes by frontend and cipher, a `# `-headed table like `show servers state`.
pub(crate) fn show_ciphers(stats: &Stats) -> String {
    let mut out = String::from("# frontend cipher handshakes\n");
    for (name, t, _) in stats.rows() {
        for (cipher, n) in &t.ciphers {
            let _ = writeln!(out, "{name} {cipher} {n}");
        }
    }
    out
}

/// The Prometheus text exposition of every counter.
pub(crate) fn metrics(stats: &Stats, process: &Process) -> String {
    let rows = stats.rows();
    let mut out = String::new();
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP lb_tls_{name} {help}\n# TYPE lb_tls_{name} {kind}");
    };
    family(&mut out, "info", "gauge", "The running lb-tls: its version and TLS library.");
    let _ = writeln!(
        out,
        "lb_tls_info{{version=\"{}\",library=\"{}\"}} 1",
        escape(&process.version),
        escape(&process.library)
    );
    family(&mut out, "uptime_seconds", "gauge", "Seconds since this worker started.");
    let _ = writeln!(out, "lb_tls_uptime_seconds {}", stats.started.elapsed().as_secs());
    type Figure = fn(&super::Totals, u64) -> u64;
    let simple: [(&str, &str, &str, Figure); 8] = [
        ("current_connections", "gauge", "Client connections open now.", |_, c| c),
        ("max_connections", "gauge", "The most client connections open at once.", |t, _| t.max),
        ("connections_total", "counter", "Client connections accepted.", |t, _| t.connections),
        ("resumed_handshakes_total", "counter", "Handshakes that resumed a session.", |t, _| t.resumed),
        ("backend_connection_errors_total", "counter", "Backend connections refused or timed out.", |t, _| {
            t.backend_failures
        }),
        ("bytes_in_total", "counter", "Plaintext bytes received from clients.", |t, _| t.bytes_in),
        ("bytes_out_total", "counter", "Plaintext bytes sent to clients.", |t, _| t.bytes_out),
        ("handshakes_total", "counter", "Completed handshakes.", |t, _| t.handshakes),
    ];
    for (name, kind, help, figure) in simple {
        family(&mut out, &format!("frontend_{name}"), kind, help);
        for (fe, t, current) in &rows {
            let _ = writeln!(out, "lb_tls_frontend_{name}{{frontend=\"{}\"}} {}", escape(fe), figure(t, *current));
        }
    }
    family(&mut out, "frontend_protocol_handshakes_total", "counter", "Completed handshakes by TLS version.");
    for (fe, t, _) in &rows {
        for (i, v) in VERSIONS.iter().enumerate() {
            let n = t.versions.get(i).copied().unwrap_or(0);
            sample(&mut out, "frontend_protocol_handshakes_total", fe, ("version", &version_key(v)), n);
        }
    }
    family(&mut out, "frontend_cipher_handshakes_total", "counter", "Completed handshakes by cipher.");
    for (fe, t, _) in &rows {
        for (cipher, n) in &t.ciphers {
            sample(&mut out, "frontend_cipher_handshakes_total", fe, ("cipher", cipher), *n);
        }
    }
    for (what, _, name, _, help) in QUIC {
        family(&mut out, &format!("frontend_{name}"), "counter", help);
        for (fe, t, _) in &rows {
            let _ = writeln!(out, "lb_tls_frontend_{name}{{frontend=\"{}\"}} {}", escape(fe), t.quic(what));
        }
    }
    family(&mut out, "frontend_failed_handshakes_total", "counter", "Handshakes that did not complete, by reason.");
    for (fe, t, _) in &rows {
        for (i, f) in Failure::ALL.iter().enumerate() {
            let n = t.failures.get(i).copied().unwrap_or(0);
            sample(&mut out, "frontend_failed_handshakes_total", fe, ("reason", f.name()), n);
        }
    }
    out
}

/// One sample of a family labelled by frontend and one more label.
fn sample(out: &mut String, name: &str, frontend: &str, (label, value): (&str, &str), n: u64) {
    let _ = writeln!(out, "lb_tls_{name}{{frontend=\"{}\",{label}=\"{}\"}} {n}", escape(frontend), escape(value));
}

/// A label value as the text format wants it.
fn escape(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}
