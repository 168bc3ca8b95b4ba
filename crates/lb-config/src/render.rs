//! `Config::to_yaml`: the typed values written back as YAML, every resolved value explicit,
//! through the same raw structs the parser reads (so the two cannot drift apart).

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::model::{Backend, CheckKind, Config, ErrorPages, Frontend, Global, HealthCheck, Server, Timeouts};
use crate::raw::{
    RawBackend, RawBind, RawBindMap, RawConfig, RawFrontend, RawGlobal, RawHealthCheck, RawHttp2, RawLog, RawMode,
    RawRule, RawServer, RawStats, RawTimeouts, StatusKey,
};
use crate::units::{format_duration, format_size};

mod policy;
mod tables;

const HEADER: &str = "# lb-proxy configuration, written by lb-config: every value is explicit.\n";

pub(crate) fn to_yaml(config: &Config) -> String {
    let raw = RawConfig {
        global: Some(global(&config.global)),
        defaults: None,
        frontends: Some(config.frontends.iter().map(frontend).collect()),
        backends: Some(config.backends.iter().map(backend).collect()),
        conditions: policy::conditions(&config.policy),
        lists: policy::lists(&config.policy),
        maps: policy::maps(&config.policy),
        tables: tables::tables(&config.tables),
    };
    match serde_yaml::to_string(&raw) {
        Ok(yaml) => format!("{HEADER}{yaml}"),
        // Plain structs of strings, numbers and maps with string keys always serialize; should
        // that ever change, the result still fails to parse loudly rather than silently.
        Err(e) => format!("{HEADER}# cannot render this configuration: {e}\n!invalid\n"),
    }
}

fn count(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn duration(d: Duration) -> Option<String> {
    Some(format_duration(d))
}

fn global(g: &Global) -> RawGlobal {
    let s = &g.supervision;
    RawGlobal {
        max_connections: Some(count(g.max_connections)),
        worker_threads: s.worker_threads.map(count),
        user: s.user.clone(),
        group: s.group.clone(),
        control_socket: Some(path(&s.control_socket)),
        runtime_socket: s.runtime.socket.as_deref().map(path),
        runtime_address: s.runtime.tcp.map(|a| a.to_string()),
        stats: g
            .stats
            .as_ref()
            .map(|s| RawStats { address: Some(s.address.to_string()), refresh: duration(s.refresh) }),
        max_old_workers: Some(count(s.max_old_workers)),
        worker_start_timeout: duration(s.worker_start_timeout),
        hard_stop_after: s.hard_stop_after.and_then(duration),
        close_spread: duration(g.close_spread),
        runtime_name: Some(g.runtime_name.clone()),
        canary: s.canary.as_ref().map(crate::RawCanary::of),
        log: Some(RawLog {
            target: Some(g.log.target.to_string()),
            format: Some(g.log.format.to_string()),
            header: Some(g.log.header.to_string()),
            tag: Some(g.log.tag.clone()),
            facility: Some(g.log.facility.to_string()),
            hostname: g.log.hostname.clone(),
        }),
    }
}

fn timeouts(t: &Timeouts) -> RawTimeouts {
    RawTimeouts {
        connect: duration(t.connect),
        client: duration(t.client),
        server: duration(t.server),
        http_request: duration(t.http_request),
        http_keep_alive: duration(t.http_keep_alive),
        check: duration(t.check),
        tunnel: duration(t.tunnel),
    }
}

/// Only pages that came from files: built-in pages are what an absent key means anyway.
fn error_files(pages: &ErrorPages) -> Option<BTreeMap<StatusKey, String>> {
    let files: BTreeMap<_, _> = pages
        .pages
        .iter()
        .filter_map(|(status, page)| page.source.as_deref().map(|p| (StatusKey(status.to_string()), path(p))))
        .collect();
    (!files.is_empty()).then_some(files)
}

fn frontend(f: &Frontend) -> RawFrontend {
    let binds = f
        .binds
        .iter()
        .map(|b| {
            RawBind::Map(RawBindMap {
                address: Some(b.address.to_string()),
                accept_proxy: Some(b.accept_proxy),
                mode: b.mode.map(|m| RawMode::Text(format!("{m:04o}"))),
                user: b.user.clone(),
                group: b.group.clone(),
            })
        })
        .collect();
    let rules = f
        .rules
        .iter()
        .map(|r| {
            let (if_, unless) = policy::guard_pair(r.guard.as_ref());
            RawRule {
                path_prefix: r.path_prefix.clone(),
                host: r.host.clone(),
                backend: Some(policy::route_target(&r.backend)),
                if_,
                unless,
            }
        })
        .collect::<Vec<_>>();
    RawFrontend {
        name: Some(f.name.clone()),
        bind: Some(binds),
        accept_proxy: None,
        tls: Some(f.tls),
        mode: Some(f.mode.to_string()),
        default_backend: f.default_backend.clone(),
        max_connections: f.max_connections.map(count),
        max_header_size: Some(format_size(f.max_header_size)),
        max_body_size: f.max_body_size.map(format_size),
        forward_for: Some(f.forward_for),
        timeouts: Some(timeouts(&f.timeouts)),
        error_files: error_files(&f.error_pages),
        rules: (!rules.is_empty()).then_some(rules),
        http_request: policy::request_rules(&f.http_request),
        tcp_request: tables::connection_rules(&f.tcp_request),
        http_response: policy::response_rules(&f.http_response),
        unique_id: policy::unique_id(f.unique_id.as_ref()),
        log_format: policy::log_format(f.log_format.as_ref()),
        http2: Some(RawHttp2 {
            enabled: Some(f.http2.enabled),
            max_concurrent_streams: Some(i64::from(f.http2.max_concurrent_streams)),
            stream_window: Some(format_size(f.http2.stream_window as usize)),
            connection_window: Some(format_size(f.http2.connection_window as usize)),
        }),
    }
}

fn backend(b: &Backend) -> RawBackend {
    RawBackend {
        name: Some(b.name.clone()),
        mode: Some(b.mode.to_string()),
        balance: Some(b.balance.to_string()),
        retries: Some(i64::from(b.retries)),
        redispatch: Some(b.redispatch),
        http_reuse: Some(b.http_reuse.to_string()),
        timeouts: Some(timeouts(&b.timeouts)),
        health_check: Some(health_check(&b.health_check)),
        servers: Some(b.servers.iter().map(server).collect()),
    }
}

fn health_check(h: &HealthCheck) -> RawHealthCheck {
    let mut raw = RawHealthCheck {
        kind: Some("tcp".to_owned()),
        interval: duration(h.interval),
        rise: Some(i64::from(h.rise)),
        fall: Some(i64::from(h.fall)),
        ..RawHealthCheck::default()
    };
    if let CheckKind::Http { method, path, host, expect_status } = &h.kind {
        raw.kind = Some("http".to_owned());
        raw.method = Some(method.clone());
        raw.path = Some(path.clone());
        raw.host = host.clone();
        raw.expect_status = Some(i64::from(*expect_status));
    }
    raw
}

fn server(s: &Server) -> RawServer {
    RawServer {
        name: Some(s.name.clone()),
        address: Some(s.address.to_string()),
        weight: Some(i64::from(s.weight)),
        check: Some(s.check),
        slowstart: s.slowstart.and_then(duration),
        max_connections: s.max_connections.map(count),
        state: Some(s.state.to_string()),
    }
}
