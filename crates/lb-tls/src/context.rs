//! TLS contexts: one per certificate, all with a frontend's settings, and the initial context
//! whose servername callback switches each handshake to the certificate its SNI names.
//!
//! Contexts are built once per configuration (at load, so a reload rebuilds them from the files
//! as they are then); a handshake only takes a new `Ssl` from the initial context.

use std::sync::Arc;
use std::time::Duration;

use openssl::error::ErrorStack;
use openssl::ssl::{
    AlpnError, NameType, SniError, SslAlert, SslContext, SslContextBuilder, SslMethod, SslMode, SslOptions,
    SslSessionCacheMode, SslVerifyMode, SslVersion,
};
use openssl::x509::X509Name;

use crate::certs::{self, LoadedCert};
use crate::config::validate::TlsFields;
use crate::config::{ClientCert, Protocol, TlsSettings};
use crate::sessions::Mirror;
use crate::sni::SniIndex;
use crate::tickets::TicketStore;
use crate::{ffi, library};

/// How one frontend terminates TLS.
pub(crate) struct Acceptor {
    /// Every new connection's `Ssl` starts here (the default certificate), and the servername
    /// callback moves it to the right certificate's context.
    pub(crate) initial: SslContext,
    /// The PEM files serving, in order (the first is the default).
    pub(crate) files: Vec<std::path::PathBuf>,
    /// What the initial context's session-ID cache holds (the one every lookup goes to),
    /// to hand over at a reload; none without a cache.
    pub(crate) sessions: Option<Arc<Mirror>>,
}

impl std::fmt::Debug for Acceptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Acceptor").field("files", &self.files).finish_non_exhaustive()
    }
}

/// The contexts a servername callback chooses from.
struct SniTable {
    contexts: Vec<SslContext>,
    index: SniIndex,
    nomatch_abort: bool,
}

type Problems = Vec<(String, String)>;

/// How sessions resume: the ticket keys, and how long a session is good for.
pub(crate) type Sessions<'a> = (&'a Arc<TicketStore>, Duration);

impl Acceptor {
    /// Reads the certificates of `tls` and builds the contexts of frontend number `frontend`.
    /// Problems come back located at the setting (`fields`) that caused them.
    pub(crate) fn build(
        tls: &TlsSettings,
        frontend: usize,
        fields: &TlsFields,
        sessions: Sessions<'_>,
        warnings: &mut Vec<String>,
    ) -> Result<Acceptor, Problems> {
        let mut problems = Problems::new();
        // The settings alone, on a context without a certificate, so that a bad cipher list
        // is reported once, at its own key.
        if let Err((field, e)) = configure(
            &mut new_builder().map_err(|e| vec![(fields.frontend.clone(), e.to_string())])?,
            tls,
            fields,
            frontend,
            sessions,
        ) {
            problems.push((field, e));
            return Err(problems);
        }
        let mut loaded: Vec<LoadedCert> = Vec::new();
        for (source, field) in tls.certificates.iter().zip(&fields.certificates) {
            match certs::load(source, warnings) {
                Ok(cert) => loaded.push(cert),
                Err(e) => problems.push((field.clone(), e.to_string())),
            }
        }
        for (dir, field) in tls.cert_dirs.iter().zip(&fields.cert_dirs) {
            match certs::load_dir(dir, warnings) {
                Ok(mut certs) => loaded.append(&mut certs),
                Err(e) => problems.push((field.clone(), e.to_string())),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        if loaded.is_empty() {
            return Err(vec![(fields.frontend.clone(), "no certificate could be loaded".to_owned())]);
        }
        let mut contexts = Vec::with_capacity(loaded.len());
        let mut index = SniIndex::default();
        for (i, cert) in loaded.iter().enumerate() {
            index.add(i, &cert.names);
            match context_for(tls, fields, frontend, sessions, cert) {
                Ok(builder) => contexts.push(builder.build()),
                Err(problem) => problems.push(problem),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        let table = Arc::new(SniTable { contexts, index, nomatch_abort: tls.sni_nomatch_abort });
        let mut initial = context_for(tls, fields, frontend, sessions, &loaded[0]).map_err(|p| vec![p])?;
        initial.set_servername_callback(move |ssl, alert| {
            let Some(name) = ssl.servername(NameType::HOST_NAME) else {
                // No SNI: the default certificate, even with sni_nomatch_abort (as hitch).
                return Ok(());
            };
            match table.index.lookup(name) {
                // The initial context already holds the default certificate.
                Some(0) => Ok(()),
                Some(i) => ssl.set_ssl_context(&table.contexts[i]).map_err(|_| SniError::ALERT_FATAL),
                None if table.nomatch_abort => {
                    *alert = SslAlert::UNRECOGNIZED_NAME;
                    Err(SniError::ALERT_FATAL)
                }
                None => Ok(()),
            }
        });
        let sessions = (tls.session_cache_size > 0).then(|| Mirror::install(&mut initial, tls.session_cache_size));
        Ok(Acceptor { initial: initial.build(), files: loaded.into_iter().map(|c| c.path).collect(), sessions })
    }
}

fn new_builder() -> Result<SslContextBuilder, ErrorStack> {
    SslContextBuilder::new(SslMethod::tls_server())
}

/// A context for one certificate, with the frontend's settings.
fn context_for(
    tls: &TlsSettings,
    fields: &TlsFields,
    frontend: usize,
    sessions: Sessions<'_>,
    cert: &LoadedCert,
) -> Result<SslContextBuilder, (String, String)> {
    let file = cert.path.display();
    let field = fields.frontend.clone();
    let mut builder = new_builder().map_err(|e| (field.clone(), e.to_string()))?;
    configure(&mut builder, tls, fields, frontend, sessions)?;
    let installed = (|| {
        builder.set_certificate(&cert.cert)?;
        for extra in &cert.chain {
            builder.add_extra_chain_cert(extra.clone())?;
        }
        builder.set_private_key(&cert.key)?;
        builder.check_private_key()?;
        crate::proxy_header::keep_cert_tlvs(&mut builder, &cert.cert)
    })();
    installed.map_err(|e| (field.clone(), format!("{file}: {e}")))?;
    if let Some(response) = cert.ocsp.clone() {
        library::set_ocsp_response(&mut builder, response)
            .map_err(|e| (field.clone(), format!("{file}: OCSP stapling: {e}")))?;
    }
    Ok(builder)
}

/// Everything but the certificate. The error names the setting it comes from.
fn configure(
    b: &mut SslContextBuilder,
    tls: &TlsSettings,
    fields: &TlsFields,
    frontend: usize,
    (tickets, lifetime): Sessions<'_>,
) -> Result<(), (String, String)> {
    let at = |field: &str| {
        let field = field.to_owned();
        move |e: ErrorStack| (field, format!("OpenSSL refuses it: {e}"))
    };
    let version = |p: Protocol| match p {
        Protocol::Tls10 => SslVersion::TLS1,
        Protocol::Tls11 => SslVersion::TLS1_1,
        Protocol::Tls12 => SslVersion::TLS1_2,
        Protocol::Tls13 => SslVersion::TLS1_3,
    };
    let (min, max) = match (tls.protocols.first(), tls.protocols.last()) {
        (Some(min), Some(max)) => (*min, *max),
        _ => (Protocol::Tls12, Protocol::Tls13),
    };
    let frontend_field = fields.frontend.clone();
    b.set_min_proto_version(Some(version(min))).map_err(at(&frontend_field))?;
    b.set_max_proto_version(Some(version(max))).map_err(at(&frontend_field))?;
    // A hole in the list (TLSv1.0 and TLSv1.2 without TLSv1.1) is switched off explicitly.
    let mut options = library::base_options();
    for (p, off) in [(Protocol::Tls11, SslOptions::NO_TLSV1_1), (Protocol::Tls12, SslOptions::NO_TLSV1_2)] {
        if p > min && p < max && !tls.protocols.contains(&p) {
            options |= off;
        }
    }
    if tls.prefer_server_ciphers {
        options |= SslOptions::CIPHER_SERVER_PREFERENCE;
    }
    if tls.session_tickets {
        // One TLS 1.3 ticket per handshake, not OpenSSL's two: each costs a serialisation and
        // an encryption, and clients resume with one.
        library::set_num_tickets(b, 1).map_err(at(&frontend_field))?;
        ffi::set_ticket_keys(b, tickets.clone()).map_err(at(&frontend_field))?;
    } else {
        options |= SslOptions::NO_TICKET;
    }
    // The cache serves TLS 1.2 clients that resume by session ID (no ticket). A client that
    // takes a ticket gets an empty session ID, so its handshakes insert nothing here. Lookups
    // go to the initial context's cache whichever certificate SNI picks.
    ffi::set_session_timeout(b, lifetime);
    ffi::set_read_ahead(b);
    if tls.session_cache_size > 0 {
        b.set_session_cache_mode(SslSessionCacheMode::SERVER);
        b.set_session_cache_size(i32::try_from(tls.session_cache_size).unwrap_or(i32::MAX));
    } else {
        b.set_session_cache_mode(SslSessionCacheMode::OFF);
    }
    b.set_options(options);
    library::set_cipher_list(b, &tls.ciphers).map_err(at(&fields.ciphers))?;
    library::set_ciphersuites(b, &tls.ciphersuites).map_err(at(&fields.ciphersuites))?;
    if tls.prefer_server_ciphers {
        library::prefer_server_ciphersuites(b, &tls.ciphersuites).map_err(at(&fields.ciphersuites))?;
    }
    if let Some(curves) = &tls.ecdh_curves {
        b.set_groups_list(curves).map_err(at(&fields.ecdh_curves))?;
    }
    // An idle connection keeps no read or write buffer (about 34 KiB each otherwise). A write
    // the socket did not take is retried from the copy's own buffer, not the scratch buffer
    // it was first made from (`copy`).
    b.set_mode(SslMode::RELEASE_BUFFERS | SslMode::ACCEPT_MOVING_WRITE_BUFFER);
    // Sessions (and tickets) of one frontend resume only on that frontend.
    b.set_session_id_context(format!("lb-tls-{frontend}").as_bytes()).map_err(at(&frontend_field))?;
    if !tls.alpn_protocols.is_empty() {
        let ours = tls.alpn_protocols.clone();
        b.set_alpn_select_callback(move |_, client| select_alpn(&ours, client).ok_or(AlpnError::NOACK));
    }
    if let (Some(ca), mode) = (&tls.client_ca, tls.client_cert) {
        let ca_field = fields.client_ca.clone();
        let named = |e: ErrorStack| (ca_field.clone(), format!("{}: {e}", ca.display()));
        b.set_ca_file(ca).map_err(named)?;
        b.set_client_ca_list(X509Name::load_client_ca_file(ca).map_err(named)?);
        match mode {
            ClientCert::None => {}
            ClientCert::Optional => b.set_verify(SslVerifyMode::PEER),
            ClientCert::Required => b.set_verify(SslVerifyMode::PEER | SslVerifyMode::FAIL_IF_NO_PEER_CERT),
        }
    }
    Ok(())
}

/// The first of our protocols (in our order of preference) that the client offers, as the
/// slice of the client's list OpenSSL wants back; `None`: no ALPN (the handshake goes on).
fn select_alpn<'a>(ours: &[String], client: &'a [u8]) -> Option<&'a [u8]> {
    ours.iter().find_map(|want| {
        let mut rest = client;
        while let Some((&len, tail)) = rest.split_first() {
            let (name, next) = tail.split_at_checked(usize::from(len))?;
            if name == want.as_bytes() {
                return Some(name);
            }
            rest = next;
        }
        None
    })
}
