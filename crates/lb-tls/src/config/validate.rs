//! Raw → typed: every problem is collected (not only the first), located at its field; then,
//! when the text is sound, the certificates are read and the TLS contexts built, and their
//! problems are located at the certificate entry that named the file.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use lb_config::{child, item, loopback, supervision, Checker, Diagnostic, Locations, RawSupervision, SocketDefaults};
use lb_supervisor::ListenAddr;

use super::raw::{RawBackend, RawCertificate, RawConfig, RawFrontend, RawGlobal, RawQuic, RawTls};
use super::{Backend, BackendAddr, CertSource, ClientCert, Config, Frontend, Global, Protocol, QuicSettings};
use super::{TlsSettings, WriteProxy};
use crate::tickets::TicketStore;

/// Mozilla's "intermediate" TLS 1.2 list (server-side-tls v5.7).
pub(crate) const DEFAULT_CIPHERS: &str = "ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES128-GCM-SHA256:\
ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-ECDSA-CHACHA20-POLY1305:\
ECDHE-RSA-CHACHA20-POLY1305:DHE-RSA-AES128-GCM-SHA256:DHE-RSA-AES256-GCM-SHA384:DHE-RSA-CHACHA20-POLY1305";
/// OpenSSL's own TLS 1.3 default, which is also Mozilla's.
pub(crate) const DEFAULT_CIPHERSUITES: &str =
    "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
const MAX_CONNECTIONS: usize = 10_000;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
const BACKEND_CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
const LOG_RATE: u32 = 10;
const TICKET_KEY_ROTATION: Duration = Duration::from_secs(3600);
/// The TLS libraries' own default session lifetime.
const TICKET_LIFETIME: Duration = Duration::from_secs(7200);
/// Replaced ticket keys kept at once (ticket_lifetime / ticket_key_rotation) at most.
const MAX_KEPT_TICKET_KEYS: u32 = 100;
/// HAProxy's `tune.ssl.cachesize` default (hitch's `session-cache` is off unless set).
const DEFAULT_SESSION_CACHE_SIZE: usize = 20_000;
const MAX_SESSION_CACHE_SIZE: usize = 10_000_000;

pub(super) fn validate(
    raw: &RawConfig,
    file: &str,
    locations: &Locations,
    base: &Path,
) -> Result<Config, Vec<Diagnostic>> {
    let mut ctx = Checker::new(file, locations, Some(base));
    let global = global(&mut ctx, raw.global.as_ref());
    let backend = backend(&mut ctx, raw.backend.as_ref());
    let empty = RawTls::default();
    let global_tls = raw.tls.as_ref().unwrap_or(&empty);
    let mut frontends = Vec::new();
    let mut binds = Vec::new();
    match raw.frontends.as_deref() {
        None | Some([]) => ctx.error("frontends", "at least one frontend is required"),
        Some(list) => {
            for (i, fe) in list.iter().enumerate() {
                let path = item("frontends", i);
                match (frontend(&mut ctx, &path, fe, global_tls), fe.bind.as_deref().map(|b| parse_bind(b, base))) {
                    (Some(f), _) => {
                        binds.push((i, f.0.clone()));
                        frontends.push(f);
                    }
                    (None, Some(Ok(bind))) => binds.push((i, bind)),
                    (None, _) => {}
                }
            }
        }
    }
    for (at, (i, bind)) in binds.iter().enumerate() {
        if binds[..at].iter().any(|(_, b)| b == bind) {
            ctx.error(&child(&item("frontends", *i), "bind"), format!("{bind} is bound by an earlier frontend"));
        }
    }
    if let Some(metrics) = global.as_ref().and_then(|g| g.metrics_address) {
        if binds.iter().any(|(_, b)| *b == ListenAddr::Tcp(metrics)) {
            ctx.error("global.metrics_address", format!("{metrics} is bound by a frontend"));
        }
    }
    let (Some(global), Some(backend), true) = (global, backend, ctx.is_clean()) else {
        return Err(ctx.into_diagnostics());
    };
    // The text is sound: read the ticket keys and the certificates, and build the contexts.
    let tickets = if global.ticket_key_files.is_empty() {
        TicketStore::own().map_err(|e| ctx.error("global", e))
    } else {
        TicketStore::from_files(&global.ticket_key_files).map_err(|problems| {
            for (i, problem) in problems {
                ctx.error(&item("global.ticket_key_files", i), problem);
            }
        })
    };
    let Ok(tickets) = tickets.map(Arc::new) else {
        return Err(ctx.into_diagnostics());
    };
    let lifetime = global.ticket_lifetime;
    let mut warnings = Vec::new();
    let mut built = Vec::new();
    for (i, (bind, (proxy_proxy, tls, fields, quic_settings))) in frontends.into_iter().enumerate() {
        match crate::context::Acceptor::build(&tls, i, &fields, (&tickets, lifetime), &mut warnings) {
            Ok(acceptor) => {
                let quic = match bind {
                    ListenAddr::Udp(_) => {
                        match crate::quic::QuicTls::build(&tls, &fields, (&tickets, lifetime), &quic_settings) {
                            Ok(quic) => Some(Arc::new(quic)),
                            Err(problems) => {
                                for (field, message) in problems {
                                    ctx.error(&field, message);
                                }
                                continue;
                            }
                        }
                    }
                    _ => None,
                };
                built.push(Frontend { bind, proxy_proxy, tls, acceptor: Arc::new(acceptor), quic, quic_settings });
            }
            Err(problems) => {
                for (field, message) in problems {
                    ctx.error(&field, message);
                }
            }
        }
    }
    ctx.finish()?;
    Ok(Config { global, backend, frontends: built, tickets, warnings })
}

fn global(ctx: &mut Checker<'_>, raw: Option<&RawGlobal>) -> Option<Global> {
    let path = "global";
    let empty = RawGlobal::default();
    let raw = raw.unwrap_or(&empty);
    let lent = RawSupervision {
        control_socket: raw.control_socket.as_ref(),
        runtime_socket: raw.runtime_socket.as_ref(),
        runtime_address: raw.runtime_address.as_ref(),
        user: raw.user.as_ref(),
        group: raw.group.as_ref(),
        worker_threads: raw.worker_threads,
        max_old_workers: raw.max_old_workers,
        hard_stop_after: raw.hard_stop_after.as_ref(),
        worker_start_timeout: raw.worker_start_timeout.as_ref(),
        canary: raw.canary.as_ref(),
    };
    // The control socket is required: lb-tls and lb-proxy on one host need one each.
    let supervision = supervision(ctx, &lent, SocketDefaults { control_socket: None, runtime_socket: None });
    let ticket_key_rotation =
        ctx.duration(path, "ticket_key_rotation", raw.ticket_key_rotation.as_ref()).unwrap_or(TICKET_KEY_ROTATION);
    let ticket_lifetime =
        ctx.duration(path, "ticket_lifetime", raw.ticket_lifetime.as_ref()).unwrap_or(TICKET_LIFETIME);
    if ticket_key_rotation < Duration::from_secs(1) {
        ctx.error(&child(path, "ticket_key_rotation"), "must be 1s or more");
    } else if ticket_lifetime.as_secs_f64() / ticket_key_rotation.as_secs_f64() > MAX_KEPT_TICKET_KEYS as f64 {
        // Every replaced key is kept for the lifetime: bound how many each worker holds (and
        // tries, for a ticket it does not know).
        ctx.error(
            &child(path, "ticket_lifetime"),
            format!("keeps more than {MAX_KEPT_TICKET_KEYS} ticket keys at a rotation of {ticket_key_rotation:?}: rotate less often"),
        );
    }
    let tcp_keepalive = match raw.tcp_keepalive.as_deref() {
        Some("off") => None,
        Some(_) => ctx.duration(path, "tcp_keepalive", raw.tcp_keepalive.as_ref()),
        None => Some(Duration::from_secs(3600)),
    };
    let metrics_address = raw
        .metrics_address
        .as_deref()
        .and_then(|text| loopback(ctx, &child(path, "metrics_address"), text, "this host only"));
    Some(Global {
        supervision: supervision?,
        metrics_address,
        max_connections: ctx
            .int(path, "max_connections", raw.max_connections, 1..=10_000_000)
            .map_or(MAX_CONNECTIONS, |n| n as usize),
        backlog: ctx.int(path, "backlog", raw.backlog, 1..=65_535).map(|n| n as i32),
        tcp_keepalive,
        handshake_timeout: ctx
            .duration(path, "handshake_timeout", raw.handshake_timeout.as_ref())
            .unwrap_or(HANDSHAKE_TIMEOUT),
        backend_connect_timeout: ctx
            .duration(path, "backend_connect_timeout", raw.backend_connect_timeout.as_ref())
            .unwrap_or(BACKEND_CONNECT_TIMEOUT),
        log_rate: ctx.int(path, "log_rate", raw.log_rate, 0..=100_000).map_or(LOG_RATE, |n| n as u32),
        ticket_key_rotation,
        ticket_lifetime,
        ticket_key_files: raw
            .ticket_key_files
            .iter()
            .flatten()
            .enumerate()
            .filter_map(|(i, text)| ctx.path(&item(&child(path, "ticket_key_files"), i), text))
            .collect(),
    })
}

fn backend(ctx: &mut Checker<'_>, raw: Option<&RawBackend>) -> Option<Backend> {
    let path = "backend";
    let Some(raw) = raw else {
        ctx.error(path, "backend.address is required");
        return None;
    };
    let address = match raw.address.as_deref() {
        None => {
            ctx.error(path, "address is required");
            None
        }
        Some(text) => match text.strip_prefix("unix:") {
            Some(p) => ctx.path(&child(path, "address"), p).map(BackendAddr::Unix),
            None => match text.parse::<SocketAddr>() {
                Ok(a) => Some(BackendAddr::Tcp(a)),
                Err(_) => {
                    ctx.error(
                        &child(path, "address"),
                        format!("`{text}`: expected IP:port, [IPv6]:port or unix:/path"),
                    );
                    None
                }
            },
        },
    };
    let write_proxy = match raw.write_proxy.as_deref() {
        None => Some(WriteProxy::V2),
        Some(word) => {
            let value = WriteProxy::WORDS.value(word);
            if value.is_none() {
                let expected = WriteProxy::WORDS.expected();
                ctx.error(&child(path, "write_proxy"), format!("`{word}`: expected {expected}"));
            }
            value
        }
    };
    let multiplex = raw.multiplex.unwrap_or(false);
    if multiplex && write_proxy == Some(WriteProxy::None) {
        // Each stream is a client connection to lb-proxy only by the header its OPEN carries.
        ctx.error(&child(path, "multiplex"), "needs a PROXY header for each stream: write_proxy v2 (or v1), not none");
        return None;
    }
    Some(Backend { address: address?, write_proxy: write_proxy?, multiplex })
}

/// Where each TLS setting of a frontend was written, for the errors found while building it.
#[derive(Debug, Clone, Default)]
pub(crate) struct TlsFields {
    pub(crate) certificates: Vec<String>,
    pub(crate) cert_dirs: Vec<String>,
    pub(crate) ciphers: String,
    pub(crate) ciphersuites: String,
    pub(crate) ecdh_curves: String,
    pub(crate) client_ca: String,
    pub(crate) frontend: String,
}

type FrontendParts = (ListenAddr, (bool, TlsSettings, TlsFields, QuicSettings));

fn frontend(ctx: &mut Checker<'_>, path: &str, raw: &RawFrontend, global: &RawTls) -> Option<FrontendParts> {
    let bind = match raw.bind.as_deref() {
        None => {
            ctx.error(path, "bind is required");
            None
        }
        Some(text) => match parse_bind(text, ctx.base().unwrap_or(Path::new("."))) {
            Ok(a) => Some(a),
            Err(e) => {
                ctx.error(&child(path, "bind"), e);
                None
            }
        },
    };
    let own = raw.tls.as_ref();
    let own_path = child(path, "tls");
    let (tls, fields) = tls_settings(ctx, path, own, &own_path, global)?;
    let proxy_proxy = raw.proxy_proxy.unwrap_or(false);
    let quic = match (&bind, &raw.quic) {
        (Some(ListenAddr::Udp(_)), quic) => {
            quic_limits(ctx, path, proxy_proxy, &tls)?;
            let settings = quic_settings(ctx, &child(path, "quic"), quic.as_ref().unwrap_or(&RawQuic::default()))?;
            if settings.zero_rtt && (!tls.session_tickets || tls.session_cache_size == 0) {
                let why = "0-RTT needs resumption from sessions the worker keeps: tls.session_tickets on and tls.session_cache_size above 0";
                ctx.error(&child(path, "quic.zero_rtt"), why);
                return None;
            }
            settings
        }
        (_, None) => QuicSettings::default(),
        (_, Some(_)) => {
            ctx.error(&child(path, "quic"), "quic settings apply to a UDP frontend only (bind: \"udp:…\")");
            return None;
        }
    };
    Some((bind?, (proxy_proxy, tls, fields, quic)))
}

fn quic_settings(ctx: &mut Checker<'_>, path: &str, raw: &RawQuic) -> Option<QuicSettings> {
    let default = QuicSettings::default();
    let retry_threshold = match raw.retry_threshold {
        None => Some(default.retry_threshold),
        Some(n) => ctx.int(path, "retry_threshold", Some(n), 0..=1_000_000).map(|n| n as usize),
    };
    let max_streams = match raw.max_streams {
        None => Some(default.max_streams),
        Some(n) => ctx.int(path, "max_streams", Some(n), 1..=10_000).map(|n| n as u32),
    };
    Some(QuicSettings {
        zero_rtt: raw.zero_rtt.unwrap_or(default.zero_rtt),
        retry_threshold: retry_threshold?,
        max_streams: max_streams?,
    })
}

/// What a UDP (QUIC) frontend cannot do: QUIC is TLS 1.3 only, and neither a PROXY header in
/// front nor client certificates are carried over it here.
fn quic_limits(ctx: &mut Checker<'_>, path: &str, proxy_proxy: bool, tls: &TlsSettings) -> Option<()> {
    let mut ok = true;
    if proxy_proxy {
        ctx.error(&child(path, "proxy_proxy"), "a UDP (QUIC) frontend reads no PROXY header");
        ok = false;
    }
    if !tls.protocols.contains(&Protocol::Tls13) {
        ctx.error(path, "a UDP (QUIC) frontend needs TLSv1.3 in tls.protocols: QUIC has no other");
        ok = false;
    }
    if tls.client_cert != ClientCert::None {
        ctx.error(path, "client_cert is not offered on a UDP (QUIC) frontend: leave it none there");
        ok = false;
    }
    ok.then_some(())
}

/// `IP:port`, `[IPv6]:port`, `*:port` (IPv4 any), `unix:/path`, or any of the first three after
/// `udp:` (HTTP/3).
fn parse_bind(text: &str, base: &Path) -> Result<ListenAddr, String> {
    if let Some(path) = text.strip_prefix("unix:") {
        return Ok(ListenAddr::Unix(base.join(path)));
    }
    if let Some(udp) = text.strip_prefix("udp:") {
        return match parse_bind(udp, base) {
            Ok(ListenAddr::Tcp(address)) => Ok(ListenAddr::Udp(address)),
            _ => Err(format!("`{text}`: expected udp:IP:port, udp:[IPv6]:port or udp:*:port")),
        };
    }
    let text = text.strip_prefix("*:").map_or_else(|| text.to_owned(), |port| format!("0.0.0.0:{port}"));
    text.parse::<SocketAddr>()
        .map(ListenAddr::Tcp)
        .map_err(|_| format!("`{text}`: expected IP:port, [IPv6]:port, *:port or unix:/path"))
}

/// A frontend's settings: each key from its own `tls:` when written there, else from the
/// global `tls:`, else the default.
fn tls_settings(
    ctx: &mut Checker<'_>,
    frontend: &str,
    own: Option<&RawTls>,
    own_path: &str,
    global: &RawTls,
) -> Option<(TlsSettings, TlsFields)> {
    macro_rules! pick {
        ($field:ident) => {
            match own.and_then(|t| t.$field.as_ref()) {
                Some(v) => Some((v, child(own_path, stringify!($field)))),
                None => global.$field.as_ref().map(|v| (v, child("tls", stringify!($field)))),
            }
        };
    }
    let mut ok = true;
    let mut fields = TlsFields { frontend: frontend.to_owned(), ..TlsFields::default() };
    let mut certificates = Vec::new();
    if let Some((list, path)) = pick!(certificates) {
        for (i, entry) in list.iter().enumerate() {
            let field = item(&path, i);
            let (pem, ocsp) = match entry {
                RawCertificate::Path(p) => (p.as_str(), None),
                RawCertificate::Full(f) => (f.pem.as_str(), f.ocsp.as_deref()),
            };
            let pem = ctx.path(&field, pem);
            let ocsp = ocsp.and_then(|o| ctx.path(&child(&field, "ocsp"), o));
            if let Some(pem) = pem {
                certificates.push(CertSource { pem, ocsp });
                fields.certificates.push(field);
            } else {
                ok = false;
            }
        }
    }
    let mut cert_dirs = Vec::new();
    if let Some((list, path)) = pick!(cert_dirs) {
        for (i, dir) in list.iter().enumerate() {
            let field = item(&path, i);
            if let Some(dir) = ctx.path(&field, dir) {
                cert_dirs.push(dir);
                fields.cert_dirs.push(field);
            }
        }
    }
    if certificates.is_empty() && cert_dirs.is_empty() && ok {
        ctx.error(frontend, "no certificates: give tls.certificates or tls.cert_dirs (globally or in the frontend)");
        ok = false;
    }
    let mut protocols = vec![Protocol::Tls12, Protocol::Tls13];
    if let Some((list, path)) = pick!(protocols) {
        protocols.clear();
        for (i, word) in list.iter().enumerate() {
            match Protocol::WORDS.value(word) {
                Some(p) => protocols.push(p),
                None => {
                    ctx.error(&item(&path, i), format!("`{word}`: expected {}", Protocol::WORDS.expected()));
                    ok = false;
                }
            }
        }
        if list.is_empty() {
            ctx.error(&path, "at least one protocol is required");
            ok = false;
        }
        protocols.sort();
        protocols.dedup();
    }
    let (ciphers, path) =
        pick!(ciphers).map_or((DEFAULT_CIPHERS.to_owned(), "tls.ciphers".to_owned()), |(c, p)| (c.clone(), p));
    fields.ciphers = path;
    let (ciphersuites, path) = pick!(ciphersuites)
        .map_or((DEFAULT_CIPHERSUITES.to_owned(), "tls.ciphersuites".to_owned()), |(c, p)| (c.clone(), p));
    fields.ciphersuites = path;
    let ecdh_curves = pick!(ecdh_curves).map(|(c, p)| {
        fields.ecdh_curves = p;
        c.clone()
    });
    let mut alpn_protocols = Vec::new();
    if let Some((list, path)) = pick!(alpn_protocols) {
        for (i, p) in list.iter().enumerate() {
            if p.is_empty() || p.len() > 255 {
                ctx.error(&item(&path, i), "an ALPN protocol name is 1 to 255 bytes");
                ok = false;
            } else {
                alpn_protocols.push(p.clone());
            }
        }
    }
    let client_cert = match pick!(client_cert) {
        None => ClientCert::None,
        Some((word, path)) => match ClientCert::WORDS.value(word) {
            Some(value) => value,
            None => {
                ctx.error(&path, format!("`{word}`: expected {}", ClientCert::WORDS.expected()));
                ok = false;
                ClientCert::None
            }
        },
    };
    let client_ca = match pick!(client_ca) {
        Some((text, path)) => {
            fields.client_ca = path.clone();
            ctx.path(&path, text)
        }
        None => None,
    };
    if client_cert != ClientCert::None && client_ca.is_none() {
        ctx.error(
            frontend,
            "client_cert optional or required needs tls.client_ca (the CA file clients are verified with)",
        );
        ok = false;
    }
    let session_cache_size = match pick!(session_cache_size) {
        None => DEFAULT_SESSION_CACHE_SIZE,
        Some((&n, path)) => match usize::try_from(n) {
            Ok(n) if n <= MAX_SESSION_CACHE_SIZE => n,
            _ => {
                ctx.error(&path, format!("must be between 0 (no cache) and {MAX_SESSION_CACHE_SIZE}"));
                ok = false;
                0
            }
        },
    };
    let settings = TlsSettings {
        certificates,
        cert_dirs,
        protocols,
        ciphers,
        ciphersuites,
        // Our order by default, as HAProxy's: the scanners operators run rate a server
        // without one as a finding (docs/reliability.md, "TLS scan").
        prefer_server_ciphers: pick!(prefer_server_ciphers).is_none_or(|(v, _)| *v),
        ecdh_curves,
        alpn_protocols,
        sni_nomatch_abort: pick!(sni_nomatch_abort).is_some_and(|(v, _)| *v),
        client_cert,
        client_ca,
        session_tickets: pick!(session_tickets).is_none_or(|(v, _)| *v),
        session_cache_size,
    };
    ok.then_some((settings, fields))
}
