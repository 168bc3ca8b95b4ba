//! QUIC's TLS: rustls with AWS-LC's crypto (aws-lc-rs), on the certificates `certs` reads for
//! the OpenSSL contexts and the same SNI selection (`sni`): exact > wildcard > default, or none
//! with `sni_nomatch_abort`. TLS 1.3 only (QUIC has no other), ALPN `h3`.
//!
//! Sessions resume by tickets sealed with the frontends' ticket keys (`tickets`), or, with
//! `quic.zero_rtt`, by sessions this worker keeps, each usable once: rustls takes early data
//! only then, and a session used once cannot carry the same early data twice.
//!
//! quinn does not tell which cipher suite a connection negotiated nor whether it resumed, and
//! the PROXY header and the counters must say it: each connection gets its own certificate
//! resolver, which sees the ClientHello and notes the suite rustls will pick (ours in our
//! order: `ignore_client_order`), and its own ticketer, which notes a ticket it opened.

use std::sync::{Arc, Mutex};

use rustls::crypto::{aws_lc_rs, CryptoProvider, SupportedKxGroup};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use rustls::server::{ClientHello, ProducesTickets, ResolvesServerCert, StoresServerSessions};
use rustls::sign::CertifiedKey;
use rustls::{CipherSuite, SupportedCipherSuite};

use crate::certs::{self, LoadedCert};
use crate::config::validate::TlsFields;
use crate::config::{QuicSettings, TlsSettings};
use crate::context::Sessions;
use crate::sni::SniIndex;

use super::tickets::SharedTickets;

/// The TLS 1.3 suites by their OpenSSL names (the `ciphersuites` setting's words), and the
/// name each is logged and sent under (as OpenSSL says it, so HTTP/3 and TLS lines agree).
pub(super) const SUITES: &[(&str, SupportedCipherSuite)] = &[
    ("TLS_AES_128_GCM_SHA256", aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256),
    ("TLS_AES_256_GCM_SHA384", aws_lc_rs::cipher_suite::TLS13_AES_256_GCM_SHA384),
    ("TLS_CHACHA20_POLY1305_SHA256", aws_lc_rs::cipher_suite::TLS13_CHACHA20_POLY1305_SHA256),
];

/// A key exchange group by its OpenSSL names (the `ecdh_curves` setting's words).
fn group(word: &str) -> Option<&'static dyn SupportedKxGroup> {
    use aws_lc_rs::kx_group;
    Some(match word {
        "X25519" | "x25519" => kx_group::X25519,
        "P-256" | "prime256v1" | "secp256r1" => kx_group::SECP256R1,
        "P-384" | "secp384r1" => kx_group::SECP384R1,
        "X25519MLKEM768" => kx_group::X25519MLKEM768,
        _ => return None,
    })
}

/// How one QUIC frontend terminates TLS: the base configuration each connection copies.
pub(crate) struct QuicTls {
    base: Arc<rustls::ServerConfig>,
    table: Arc<Table>,
    tickets: Option<Arc<SharedTickets>>,
    /// With `quic.zero_rtt`: the sessions this worker keeps instead of tickets.
    sessions: Option<Arc<dyn StoresServerSessions>>,
    /// The PEM files serving, in order (the first is the default).
    pub(crate) files: Vec<std::path::PathBuf>,
    /// The transport settings of the frontend's connections (`quic:`).
    pub(super) transport: Arc<quinn::TransportConfig>,
}

impl std::fmt::Debug for QuicTls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("QuicTls").field("files", &self.files).finish_non_exhaustive()
    }
}

#[derive(Debug)]
struct Table {
    keys: Vec<Arc<CertifiedKey>>,
    index: SniIndex,
    nomatch_abort: bool,
    /// Ours, in our order, with their names.
    suites: Vec<(&'static str, CipherSuite)>,
}

/// What one connection's handshake showed of itself.
#[derive(Debug, Default)]
pub(crate) struct Seen {
    pub(crate) cipher: Option<&'static str>,
    /// A ticket of ours was opened: the session resumed.
    pub(crate) resumed: bool,
    /// No certificate for the name asked, and `sni_nomatch_abort`.
    pub(crate) sni_refused: bool,
    /// The ClientHello offered early data (0-RTT).
    pub(crate) early_offered: bool,
    /// We took it.
    pub(crate) early_accepted: bool,
}

pub(crate) type Chosen = Arc<Mutex<Seen>>;

pub(super) fn note(seen: &Chosen, what: impl FnOnce(&mut Seen)) {
    what(&mut seen.lock().unwrap_or_else(|e| e.into_inner()));
}

#[derive(Debug)]
struct Resolver {
    table: Arc<Table>,
    cipher: Chosen,
}

/// The frontend's ticketer, noting for one connection that a ticket opened.
#[derive(Debug)]
struct Noting {
    tickets: Arc<SharedTickets>,
    seen: Chosen,
}

impl ProducesTickets for Noting {
    fn enabled(&self) -> bool {
        self.tickets.enabled()
    }

    fn lifetime(&self) -> u32 {
        self.tickets.lifetime()
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        self.tickets.encrypt(plain)
    }

    fn decrypt(&self, cipher: &[u8]) -> Option<Vec<u8>> {
        let plain = self.tickets.decrypt(cipher);
        note(&self.seen, |seen| seen.resumed = plain.is_some());
        plain
    }
}

/// The worker's sessions, noting for one connection that one resumed.
#[derive(Debug)]
struct NotingStore {
    sessions: Arc<dyn StoresServerSessions>,
    seen: Chosen,
}

impl StoresServerSessions for NotingStore {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        self.sessions.put(key, value)
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.sessions.get(key)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        let session = self.sessions.take(key);
        note(&self.seen, |seen| seen.resumed = session.is_some());
        session
    }

    fn can_cache(&self) -> bool {
        self.sessions.can_cache()
    }
}

impl ResolvesServerCert for Resolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let offered = hello.cipher_suites();
        let cipher = self.table.suites.iter().find(|(_, s)| offered.contains(s)).map(|(name, _)| *name);
        note(&self.cipher, |seen| seen.cipher = cipher);
        let index = match hello.server_name() {
            // No SNI: the default certificate, even with sni_nomatch_abort (as over TCP).
            None => 0,
            Some(name) => match self.table.index.lookup(name) {
                Some(i) => i,
                None if self.table.nomatch_abort => {
                    note(&self.cipher, |seen| seen.sni_refused = true);
                    return None;
                }
                None => 0,
            },
        };
        self.table.keys.get(index).cloned()
    }
}

type Problems = Vec<(String, String)>;

impl QuicTls {
    /// Reads the certificates of `tls` and builds the rustls configuration. Problems come back
    /// located at the setting that caused them, as the OpenSSL contexts' do.
    /// With `quic.zero_rtt`, early data is taken from resumed sessions, which are kept by this
    /// worker (`session_cache_size` of them) and each used once.
    pub(crate) fn build(
        tls: &TlsSettings,
        fields: &TlsFields,
        sessions: Sessions<'_>,
        quic: &QuicSettings,
    ) -> Result<QuicTls, Problems> {
        let mut suites = Vec::new();
        for word in tls.ciphersuites.split(':').filter(|w| !w.is_empty()) {
            if let Some((name, suite)) = SUITES.iter().find(|(name, _)| *name == word) {
                suites.push((*name, super::hkdf::keyed(*suite)));
            }
        }
        if suites.is_empty() {
            let message = "no TLS 1.3 suite QUIC can use (TLS_AES_128_GCM_SHA256, TLS_AES_256_GCM_SHA384, TLS_CHACHA20_POLY1305_SHA256)";
            return Err(vec![(fields.ciphersuites.clone(), message.to_owned())]);
        }
        let mut provider =
            CryptoProvider { cipher_suites: suites.iter().map(|(_, s)| *s).collect(), ..aws_lc_rs::default_provider() };
        if let Some(curves) = &tls.ecdh_curves {
            provider.kx_groups = curves.split(':').filter_map(|word| group(word.trim())).collect();
            if provider.kx_groups.is_empty() {
                let message = "no group QUIC can use (X25519, P-256, P-384, X25519MLKEM768)";
                return Err(vec![(fields.ecdh_curves.clone(), message.to_owned())]);
            }
        }
        let provider = Arc::new(provider);
        let mut problems = Problems::new();
        let mut loaded: Vec<LoadedCert> = Vec::new();
        // The files are read by the same code as the OpenSSL contexts' (whose load gave the
        // warnings already); only the form built from them differs.
        for (source, field) in tls.certificates.iter().zip(&fields.certificates) {
            match certs::load(source, &mut Vec::new()) {
                Ok(cert) => loaded.push(cert),
                Err(e) => problems.push((field.clone(), e.to_string())),
            }
        }
        for (dir, field) in tls.cert_dirs.iter().zip(&fields.cert_dirs) {
            match certs::load_dir(dir, &mut Vec::new()) {
                Ok(mut certs) => loaded.append(&mut certs),
                Err(e) => problems.push((field.clone(), e.to_string())),
            }
        }
        let mut keys = Vec::with_capacity(loaded.len());
        let mut index = SniIndex::default();
        for (i, cert) in loaded.iter().enumerate() {
            index.add(i, &cert.names);
            match certified_key(&provider, cert) {
                Ok(key) => keys.push(Arc::new(key)),
                Err(e) => problems.push((fields.frontend.clone(), format!("{}: {e}", cert.path.display()))),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        if keys.is_empty() {
            return Err(vec![(fields.frontend.clone(), "no certificate could be loaded".to_owned())]);
        }
        let table = Arc::new(Table {
            keys,
            index,
            nomatch_abort: tls.sni_nomatch_abort,
            suites: suites.iter().map(|(name, s)| (*name, s.suite())).collect(),
        });
        let resolver = Arc::new(Resolver { table: table.clone(), cipher: Chosen::default() });
        let mut base = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(&[&rustls::version::TLS13])
            .map_err(|e| vec![(fields.frontend.clone(), e.to_string())])?
            .with_no_client_auth()
            .with_cert_resolver(resolver);
        base.alpn_protocols = vec![b"h3".to_vec()];
        base.ignore_client_order = true;
        base.max_early_data_size = 0;
        base.send_tls13_tickets = usize::from(tls.session_tickets);
        if !tls.session_tickets {
            base.session_storage = Arc::new(rustls::server::NoServerSessionStorage {});
        }
        let kept = (quic.zero_rtt && tls.session_tickets).then(|| {
            // QUIC allows no other size than this one (RFC 9001 §4.6.1).
            base.max_early_data_size = u32::MAX;
            let store: Arc<dyn StoresServerSessions> =
                rustls::server::ServerSessionMemoryCache::new(tls.session_cache_size.max(1));
            store
        });
        let tickets = (tls.session_tickets && kept.is_none()).then(|| {
            let (store, lifetime) = sessions;
            let lifetime = u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX);
            Arc::new(SharedTickets::new(store.clone(), lifetime))
        });
        let files = loaded.into_iter().map(|c| c.path).collect();
        let transport = super::transport(quic.max_streams);
        Ok(QuicTls { base: Arc::new(base), table, tickets, sessions: kept, files, transport })
    }

    /// The configuration of one new connection, which notes what it sees in `seen`.
    pub(crate) fn for_connection(&self, seen: Chosen) -> Arc<rustls::ServerConfig> {
        let mut config = rustls::ServerConfig::clone(&self.base);
        if let Some(tickets) = &self.tickets {
            config.ticketer = Arc::new(Noting { tickets: tickets.clone(), seen: seen.clone() });
        }
        if let Some(sessions) = &self.sessions {
            config.session_storage = Arc::new(NotingStore { sessions: sessions.clone(), seen: seen.clone() });
        }
        config.cert_resolver = Arc::new(Resolver { table: self.table.clone(), cipher: seen });
        Arc::new(config)
    }
}

/// The chain and key of `cert` in rustls's form.
fn certified_key(provider: &CryptoProvider, cert: &LoadedCert) -> Result<CertifiedKey, String> {
    let mut chain = vec![CertificateDer::from(cert.cert.to_der().map_err(|e| e.to_string())?)];
    for extra in &cert.chain {
        chain.push(CertificateDer::from(extra.to_der().map_err(|e| e.to_string())?));
    }
    let pkcs8 = cert.key.private_key_to_pkcs8().map_err(|e| e.to_string())?;
    let key = provider
        .key_provider
        .load_private_key(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(pkcs8)))
        .map_err(|e| format!("a key QUIC's TLS cannot use: {e}"))?;
    let mut certified = CertifiedKey::new(chain, key);
    certified.ocsp = cert.ocsp.clone();
    Ok(certified)
}
