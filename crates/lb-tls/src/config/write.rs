//! Writing an lb-tls configuration out: [`Draft`], the settings a generator chooses (`lbctl
//! import-haproxy` turns HAProxy's `bind … ssl crt …` lines into one), typed, and
//! [`Draft::to_yaml`], which fills the raw structs the parser reads and lets serde write them.
//! Whatever a draft leaves as `None` (or empty) is left out of the file: lb-tls's default.

use std::path::{Path, PathBuf};

use lb_supervisor::ListenAddr;
use serde_yaml::Value;

use super::raw::{RawBackend, RawCertificate, RawCertificateFull, RawConfig, RawFrontend, RawGlobal, RawTls};
use super::{Backend, CertSource, ClientCert, Protocol, WriteProxy};

/// An lb-tls configuration to write: `global`'s sockets and limits, the TLS settings every
/// frontend shares, where plaintext goes, and the frontends.
#[derive(Debug, Clone)]
pub struct Draft {
    pub control_socket: PathBuf,
    pub runtime_socket: Option<PathBuf>,
    pub user: Option<String>,
    pub group: Option<String>,
    pub max_connections: Option<usize>,
    pub tls: DraftTls,
    pub backend: Backend,
    pub frontends: Vec<DraftFrontend>,
}

/// TLS settings as written under `tls:` (or a frontend's own `tls:`); `None` and empty lists:
/// not written (the global value, else the default).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DraftTls {
    pub certificates: Vec<CertSource>,
    pub cert_dirs: Vec<PathBuf>,
    pub protocols: Option<Vec<Protocol>>,
    pub ciphers: Option<String>,
    pub ciphersuites: Option<String>,
    pub ecdh_curves: Option<String>,
    pub alpn_protocols: Option<Vec<String>>,
    pub sni_nomatch_abort: Option<bool>,
    pub client_cert: Option<ClientCert>,
    pub client_ca: Option<PathBuf>,
    pub session_tickets: Option<bool>,
}

/// One listening address; `tls`: settings of its own, each replacing the global one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DraftFrontend {
    pub bind: ListenAddr,
    pub proxy_proxy: bool,
    pub tls: Option<DraftTls>,
}

const HEADER: &str = "# lb-tls configuration (docs/config-lb-tls.md): keys not written take their defaults.\n";

impl Draft {
    /// The configuration as YAML that `lb-tls -c` reads back to these settings.
    pub fn to_yaml(&self) -> String {
        let raw = RawConfig {
            global: Some(RawGlobal {
                control_socket: Some(path(&self.control_socket)),
                runtime_socket: self.runtime_socket.as_deref().map(path),
                user: self.user.clone(),
                group: self.group.clone(),
                max_connections: self.max_connections.map(|n| i64::try_from(n).unwrap_or(i64::MAX)),
                ..RawGlobal::default()
            }),
            tls: Some(tls(&self.tls)),
            backend: Some(RawBackend {
                address: Some(self.backend.address.to_string()),
                write_proxy: WriteProxy::WORDS.word(self.backend.write_proxy).map(str::to_owned),
                multiplex: self.backend.multiplex.then_some(true),
            }),
            frontends: Some(
                self.frontends
                    .iter()
                    .map(|f| RawFrontend {
                        bind: Some(f.bind.to_string()),
                        proxy_proxy: f.proxy_proxy.then_some(true),
                        tls: f.tls.as_ref().map(tls),
                        quic: None,
                    })
                    .collect(),
            ),
        };
        // Through a YAML value so that the unset keys (null) can be dropped: the file then
        // shows only what was chosen.
        match serde_yaml::to_value(&raw).map(without_nulls).and_then(|v| serde_yaml::to_string(&v)) {
            Ok(yaml) => format!("{HEADER}{yaml}"),
            // Strings, numbers and lists always serialize; should that change, the file fails
            // to load loudly rather than silently.
            Err(e) => format!("{HEADER}# cannot render this configuration: {e}\n!invalid\n"),
        }
    }
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn tls(t: &DraftTls) -> RawTls {
    let certificates = t
        .certificates
        .iter()
        .map(|c| match &c.ocsp {
            None => RawCertificate::Path(path(&c.pem)),
            Some(ocsp) => RawCertificate::Full(RawCertificateFull { pem: path(&c.pem), ocsp: Some(path(ocsp)) }),
        })
        .collect::<Vec<_>>();
    RawTls {
        certificates: (!certificates.is_empty()).then_some(certificates),
        cert_dirs: (!t.cert_dirs.is_empty()).then(|| t.cert_dirs.iter().map(|d| path(d)).collect()),
        protocols: t
            .protocols
            .as_ref()
            .map(|list| list.iter().filter_map(|p| Protocol::WORDS.word(*p)).map(str::to_owned).collect()),
        ciphers: t.ciphers.clone(),
        ciphersuites: t.ciphersuites.clone(),
        prefer_server_ciphers: None,
        ecdh_curves: t.ecdh_curves.clone(),
        alpn_protocols: t.alpn_protocols.clone(),
        sni_nomatch_abort: t.sni_nomatch_abort,
        client_cert: t.client_cert.and_then(|c| ClientCert::WORDS.word(c)).map(str::to_owned),
        client_ca: t.client_ca.as_deref().map(path),
        session_tickets: t.session_tickets,
        session_cache_size: None,
    }
}

fn without_nulls(value: Value) -> Value {
    match value {
        Value::Mapping(map) => {
            Value::Mapping(map.into_iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k, without_nulls(v))).collect())
        }
        Value::Sequence(list) => Value::Sequence(list.into_iter().map(without_nulls).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use lb_supervisor::ListenAddr;

    use super::{Draft, DraftFrontend, DraftTls};
    use crate::config::{Backend, BackendAddr, CertSource, ClientCert, Config, Protocol, WriteProxy};

    #[test]
    fn a_draft_loads_back_to_its_settings() {
        let dir = tempfile::tempdir().expect("tempdir");
        // A self-signed certificate and its key in one PEM file, made by the openssl command.
        let pem_path = dir.path().join("api.pem");
        let made = std::process::Command::new("openssl")
            .args(["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-days", "1"])
            .args(["-subj", "/CN=api.example.com", "-keyout"])
            .arg(&pem_path)
            .arg("-out")
            .arg(dir.path().join("cert.pem"))
            .output()
            .expect("run openssl");
        assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
        let mut pem = std::fs::read(dir.path().join("cert.pem")).expect("cert");
        pem.extend(std::fs::read(&pem_path).expect("key"));
        std::fs::write(&pem_path, pem).expect("write pem");
        let draft = Draft {
            control_socket: dir.path().join("tls.sock"),
            runtime_socket: None,
            user: None,
            group: None,
            max_connections: Some(500),
            tls: DraftTls {
                certificates: vec![CertSource { pem: pem_path.clone(), ocsp: None }],
                protocols: Some(vec![Protocol::Tls12, Protocol::Tls13]),
                alpn_protocols: Some(vec!["h2".to_owned(), "http/1.1".to_owned()]),
                sni_nomatch_abort: Some(true),
                session_tickets: Some(false),
                ..DraftTls::default()
            },
            backend: Backend {
                address: BackendAddr::Unix(PathBuf::from("/run/lb/proxy-tls.sock")),
                write_proxy: WriteProxy::V2,
                multiplex: false,
            },
            frontends: vec![
                DraftFrontend { bind: "127.0.0.1:8443".parse().expect("addr"), proxy_proxy: false, tls: None },
                DraftFrontend {
                    bind: ListenAddr::Tcp("127.0.0.1:8444".parse().expect("addr")),
                    proxy_proxy: true,
                    tls: Some(DraftTls { client_cert: Some(ClientCert::None), ..DraftTls::default() }),
                },
            ],
        };
        let yaml = draft.to_yaml();
        assert!(!yaml.contains("null"), "{yaml}");
        let config = Config::parse_in(&yaml, "t.yaml", dir.path()).unwrap_or_else(|e| panic!("{e}\n{yaml}"));
        assert_eq!(config.global.max_connections, 500);
        assert_eq!(config.backend.address, draft.backend.address);
        assert_eq!(config.frontends.len(), 2);
        let tls = &config.frontends[0].tls;
        assert_eq!(tls.certificates, [CertSource { pem: pem_path, ocsp: None }]);
        assert_eq!(tls.alpn_protocols, ["h2", "http/1.1"]);
        assert!(tls.sni_nomatch_abort && !tls.session_tickets);
        assert!(config.frontends[1].proxy_proxy);
        assert_eq!(config.frontends[1].bind, draft.frontends[1].bind);
    }
}
