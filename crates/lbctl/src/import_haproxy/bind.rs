//! `bind` lines: addresses, `accept-proxy`, a Unix socket's `mode`/`user`/`group`, and the TLS
//! settings of `ssl` binds, which become lb-tls frontends (`crt`, `ca-file`, `verify`,
//! `alpn`, `ciphers`, `ciphersuites`, `curves`, `ssl-min-ver`/`ssl-max-ver`, `no-tlsv1x`,
//! `strict-sni`, `no-tls-tickets`). The global `ssl-default-bind-*` lines are read here too.

use std::path::PathBuf;

use lb_config::ListenAddr;
use lb_tls::{CertSource, ClientCert, DraftTls, Protocol};

use super::lexer::Line;
use super::report::Report;
use super::values::{bind_addresses, is_flag};

/// One `bind` line, translated.
#[derive(Debug, Clone)]
pub(crate) struct BindLine {
    pub(crate) addresses: Vec<ListenAddr>,
    pub(crate) accept_proxy: bool,
    pub(crate) mode: Option<u32>,
    pub(crate) user: Option<String>,
    pub(crate) group: Option<String>,
    /// `ssl`: the settings of this bind's lb-tls frontend.
    pub(crate) ssl: Option<DraftTls>,
    pub(crate) line: usize,
}

/// `crt-base` and `ca-base`: where relative certificate paths are taken from.
#[derive(Debug, Clone, Default)]
pub(crate) struct Bases {
    pub(crate) crt: Option<PathBuf>,
    pub(crate) ca: Option<PathBuf>,
}

const FLAGS: &[&str] = &[
    "accept-proxy",
    "ssl",
    "v4v6",
    "v6only",
    "transparent",
    "defer-accept",
    "tfo",
    "strict-sni",
    "prefer-client-ciphers",
    "generate-certificates",
    "no-alpn",
    "no-ca-names",
    "quic-force-retry",
    "expose-fd",
];

const PROTOCOLS: [(&str, Protocol); 4] = [
    ("TLSv1.0", Protocol::Tls10),
    ("TLSv1.1", Protocol::Tls11),
    ("TLSv1.2", Protocol::Tls12),
    ("TLSv1.3", Protocol::Tls13),
];

/// HAProxy's default protocol range (lb-tls's too): TLS 1.2 and 1.3.
fn default_protocols() -> Vec<Protocol> {
    vec![Protocol::Tls12, Protocol::Tls13]
}

pub(crate) fn bind(line: &Line, words: &[String], bases: &Bases, report: &mut Report) -> Option<BindLine> {
    let at = line.number;
    let addresses = match words.first().map(|a| bind_addresses(a)) {
        Some(Ok(a)) if !a.is_empty() => a,
        Some(Err(why)) => {
            report.error(at, "bind", why);
            return None;
        }
        _ => {
            report.error(at, "bind", "no address");
            return None;
        }
    };
    let mut bind =
        BindLine { addresses, accept_proxy: false, mode: None, user: None, group: None, ssl: None, line: at };
    let mut tls = DraftTls::default();
    let mut ssl = false;
    let mut words = words[1..].iter();
    while let Some(word) = words.next() {
        let setting = word.as_str();
        let value = if is_flag(FLAGS, setting) { String::new() } else { words.next().cloned().unwrap_or_default() };
        let directive = format!("bind … {setting}");
        match setting {
            "accept-proxy" => bind.accept_proxy = true,
            "ssl" => ssl = true,
            "crt" => {
                let path = based(&bases.crt, &value);
                if path.is_dir() {
                    tls.cert_dirs.push(path);
                } else {
                    tls.certificates.push(CertSource { pem: path, ocsp: None });
                }
            }
            "ca-file" => tls.client_ca = Some(based(&bases.ca, &value)),
            "verify" => match value.as_str() {
                "none" => tls.client_cert = Some(ClientCert::None),
                "optional" => tls.client_cert = Some(ClientCert::Optional),
                "required" => tls.client_cert = Some(ClientCert::Required),
                other => report.error(at, directive, format!("`{other}`: expected none, optional or required")),
            },
            "alpn" => tls.alpn_protocols = Some(value.split(',').map(str::to_owned).collect()),
            "ciphers" => tls.ciphers = Some(value),
            "ciphersuites" => tls.ciphersuites = Some(value),
            "curves" | "ecdhe" => tls.ecdh_curves = Some(value),
            "ssl-min-ver" | "ssl-max-ver" | "no-tlsv10" | "no-tlsv11" | "no-tlsv12" | "no-tlsv13" | "no-sslv3" => {
                protocol_option(&mut tls, setting, &value, at, report);
            }
            "strict-sni" => tls.sni_nomatch_abort = Some(true),
            "no-tls-tickets" => tls.session_tickets = Some(false),
            "tls-tickets" => tls.session_tickets = Some(true),
            "mode" => match u32::from_str_radix(&value, 8) {
                Ok(mode) => bind.mode = Some(mode),
                Err(_) => report.error(at, directive, format!("`{value}` is not an octal mode")),
            },
            "user" => bind.user = Some(value),
            "group" => bind.group = Some(value),
            // A label for logs and stats: lb-proxy names binds by address.
            "name" => {}
            "v4v6" | "v6only" => report.note(
                at,
                directive,
                "lb-proxy binds IPv6 addresses as the system's default says (net.ipv6.bindv6only)",
            ),
            "crt-list" => {
                report.error(at, directive, "list each certificate with `crt` (lb-tls chooses by SNI among them)")
            }
            "maxconn" => {
                report.error(at, directive, "lb-proxy limits connections per frontend (`maxconn` in the frontend)")
            }
            "process" | "thread" => report.error(at, directive, "lb-proxy's workers serve every bind on every thread"),
            "proto" => report.error(at, directive, "lb-proxy chooses HTTP/1.1 or HTTP/2 itself (ALPN, or the preface)"),
            "prefer-client-ciphers" => report.error(at, directive, "lb-tls chooses by its own cipher order"),
            "npn" => report.error(at, directive, "lb-tls offers ALPN, not NPN"),
            _ => report.error(at, directive, "lb-proxy's binds have no such setting"),
        }
    }
    if ssl {
        bind.ssl = Some(tls);
    } else if tls != DraftTls::default() {
        report.error(at, "bind", "TLS settings without `ssl`: HAProxy ignores them too");
    }
    Some(bind)
}

fn based(base: &Option<PathBuf>, path: &str) -> PathBuf {
    match base {
        Some(base) if !path.starts_with('/') => base.join(path),
        _ => PathBuf::from(path),
    }
}

/// `ssl-min-ver`, `ssl-max-ver` and `no-tlsv1x` narrow the protocol list.
fn protocol_option(tls: &mut DraftTls, setting: &str, value: &str, at: usize, report: &mut Report) {
    let list = tls.protocols.get_or_insert_with(default_protocols);
    let version = |v: &str| PROTOCOLS.iter().find(|(n, _)| *n == v).map(|(_, p)| *p);
    match setting {
        "ssl-min-ver" | "ssl-max-ver" => {
            let Some(bound) = version(value) else {
                report.error(at, setting, format!("`{value}`: lb-tls speaks TLSv1.0 to TLSv1.3"));
                return;
            };
            if setting == "ssl-min-ver" {
                // A lower minimum than the default brings the older versions in.
                let all: Vec<Protocol> = PROTOCOLS.iter().map(|(_, p)| *p).filter(|p| *p >= bound).collect();
                let max = list.iter().max().copied().unwrap_or(Protocol::Tls13);
                *list = all.into_iter().filter(|p| *p <= max).collect();
            } else {
                list.retain(|p| *p <= bound);
            }
        }
        "no-sslv3" => {}
        no => {
            let name = no.trim_start_matches("no-tlsv");
            let name = format!("TLSv{}.{}", &name[..1], &name[1..]);
            if let Some(p) = version(&name) {
                list.retain(|q| *q != p);
            }
        }
    }
}

/// `ssl-default-bind-ciphers`, `-ciphersuites`, `-curves`, `-options` in `global`.
pub(crate) fn default_bind(line: &Line, tls: &mut DraftTls, report: &mut Report) -> bool {
    let value = line.word(1).to_owned();
    match line.word(0) {
        "ssl-default-bind-ciphers" => tls.ciphers = Some(value),
        "ssl-default-bind-ciphersuites" => tls.ciphersuites = Some(value),
        "ssl-default-bind-curves" => tls.ecdh_curves = Some(value),
        "ssl-default-bind-options" => {
            let mut words = line.words[1..].iter();
            while let Some(word) = words.next() {
                match word.as_str() {
                    "ssl-min-ver" | "ssl-max-ver" => {
                        let v = words.next().cloned().unwrap_or_default();
                        protocol_option(tls, word, &v, line.number, report);
                    }
                    w @ ("no-tlsv10" | "no-tlsv11" | "no-tlsv12" | "no-tlsv13" | "no-sslv3") => {
                        protocol_option(tls, w, "", line.number, report)
                    }
                    "no-tls-tickets" => tls.session_tickets = Some(false),
                    "prefer-client-ciphers" => {
                        report.error(line.number, line.word(0), "lb-tls chooses by its own cipher order")
                    }
                    other => report.error(line.number, line.word(0), format!("`{other}`: lb-tls has no such setting")),
                }
            }
        }
        _ => return false,
    }
    true
}
