//! The UDP datagram entry point under arbitrary input, for fuzz/ (`quic_datagrams`): datagrams
//! fed to quinn's endpoint state machine with a UDP frontend's configuration (our rustls
//! configuration, certificate resolver and ticketer), every connection they open driven until
//! it has nothing more to say. Never a panic, whatever arrives.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use quinn_proto::{DatagramEvent, EndpointConfig};

use super::tls::{Chosen, QuicTls};
use crate::config::validate::{TlsFields, DEFAULT_CIPHERSUITES};
use crate::config::{CertSource, ClientCert, Protocol, QuicSettings, TlsSettings};
use crate::tickets::TicketStore;

/// The frontend's TLS, once per process: a certificate made here, written to a file as an
/// operator's would be, loaded by the same code.
fn frontend() -> Option<&'static QuicTls> {
    static TLS: OnceLock<Option<QuicTls>> = OnceLock::new();
    TLS.get_or_init(|| {
        let pem = certificate()?;
        let settings = TlsSettings {
            certificates: vec![CertSource { pem, ocsp: None }],
            cert_dirs: Vec::new(),
            protocols: vec![Protocol::Tls13],
            ciphers: String::new(),
            ciphersuites: DEFAULT_CIPHERSUITES.to_owned(),
            prefer_server_ciphers: true,
            ecdh_curves: None,
            alpn_protocols: Vec::new(),
            sni_nomatch_abort: false,
            client_cert: ClientCert::None,
            client_ca: None,
            session_tickets: true,
            session_cache_size: 0,
        };
        let fields = TlsFields { certificates: vec!["fuzz".to_owned()], ..TlsFields::default() };
        let store = Arc::new(TicketStore::own().ok()?);
        QuicTls::build(&settings, &fields, (&store, Duration::from_secs(7200)), &QuicSettings::default()).ok()
    })
    .as_ref()
}

fn certificate() -> Option<PathBuf> {
    use openssl::{asn1::Asn1Time, ec, hash::MessageDigest, nid::Nid, pkey::PKey, x509};
    let group = ec::EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).ok()?;
    let key = PKey::from_ec_key(ec::EcKey::generate(&group).ok()?).ok()?;
    let mut name = x509::X509NameBuilder::new().ok()?;
    name.append_entry_by_nid(Nid::COMMONNAME, "fuzz.example.test").ok()?;
    let name = name.build();
    let mut cert = x509::X509Builder::new().ok()?;
    cert.set_version(2).ok()?;
    cert.set_subject_name(&name).ok()?;
    cert.set_issuer_name(&name).ok()?;
    cert.set_pubkey(&key).ok()?;
    let (from, until) = (Asn1Time::days_from_now(0).ok()?, Asn1Time::days_from_now(30).ok()?);
    cert.set_not_before(&from).ok()?;
    cert.set_not_after(&until).ok()?;
    cert.sign(&key, MessageDigest::sha256()).ok()?;
    let mut pem = cert.build().to_pem().ok()?;
    pem.extend(key.private_key_to_pem_pkcs8().ok()?);
    let path = std::env::temp_dir().join(format!("lb-tls-quic-fuzz-{}.pem", std::process::id()));
    std::fs::write(&path, pem).ok()?;
    Some(path)
}

/// `data` as datagrams, each a 2-byte big-endian length and its bytes, from one client; how
/// many connections they opened.
pub fn datagrams(data: &[u8]) -> usize {
    let Some(tls) = frontend() else { return 0 };
    let Ok(server) = super::server_config(tls, Chosen::default()) else { return 0 };
    let mut endpoint =
        quinn_proto::Endpoint::new(Arc::new(EndpointConfig::default()), Some(Arc::new(server)), false, Some([7; 32]));
    let now = Instant::now();
    let client = SocketAddr::from(([192, 0, 2, 1], 4433));
    let mut connections = HashMap::new();
    let mut buf = Vec::new();
    let mut rest = data;
    while let Some((len, tail)) = rest.split_first_chunk::<2>() {
        let (datagram, next) = tail.split_at(usize::from(u16::from_be_bytes(*len)).min(tail.len()));
        rest = next;
        match endpoint.handle(now, client, None, None, BytesMut::from(datagram), &mut buf) {
            Some(DatagramEvent::NewConnection(incoming)) => {
                if let Ok((handle, connection)) = endpoint.accept(incoming, now, &mut buf, None) {
                    connections.insert(handle, connection);
                }
            }
            Some(DatagramEvent::ConnectionEvent(handle, event)) => {
                if let Some(connection) = connections.get_mut(&handle) {
                    connection.handle_event(event);
                }
            }
            Some(DatagramEvent::Response(_)) | None => {}
        }
        buf.clear();
        for (handle, connection) in &mut connections {
            while connection.poll_transmit(now, 1, &mut buf).is_some() {
                buf.clear();
            }
            while let Some(event) = connection.poll_endpoint_events() {
                if let Some(back) = endpoint.handle_event(*handle, event) {
                    connection.handle_event(back);
                }
            }
            while connection.poll().is_some() {}
        }
    }
    connections.len()
}

#[cfg(test)]
mod tests {
    /// A real client's Initial (aioquic's), the fuzz target's seed.
    const INITIAL: &[u8] = include_bytes!("../../../../fuzz/seeds/quic_datagrams/client_initial");

    #[test]
    fn a_client_initial_and_its_mutations_pass_without_a_panic() {
        assert_eq!(super::datagrams(INITIAL), 1, "the seed opens a connection: the handshake is reached");
        for at in (0..INITIAL.len()).step_by(37) {
            let mut changed = INITIAL.to_vec();
            changed[at] ^= 0x5a;
            super::datagrams(&changed);
        }
        super::datagrams(&INITIAL[..INITIAL.len() / 2]);
        super::datagrams(&[]);
        super::datagrams(&[0xff, 0xff, 0xc0]);
    }
}
