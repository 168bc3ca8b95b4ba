//! PROXY protocol headers: the one lb-tls writes to the backend (v2 with the TLS facts as
//! hitch sends them, or v1), and the one it reads from a load balancer in front
//! (`proxy_proxy`).
//!
//! v2 TLVs written: `PP2_TYPE_ALPN` (the negotiated protocol), `PP2_TYPE_AUTHORITY` (the SNI
//! host name), and `PP2_TYPE_SSL` with the client flags, the verify result and the sub-TLVs
//! `SSL_VERSION`, `SSL_CN` (client certificate subject CN), `SSL_CIPHER`, `SSL_SIG_ALG` and
//! `SSL_KEY_ALG` (of the server certificate).

use std::net::SocketAddr;
use std::sync::OnceLock;

use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{SslContext, SslContextBuilder, SslRef};
use openssl::x509::X509Ref;
use tokio::io::AsyncRead;

use lb_proxy_protocol::pp2::{
    PP2_CLIENT_CERT_CONN, PP2_CLIENT_CERT_SESS, PP2_CLIENT_SSL, PP2_SUBTYPE_SSL_CIPHER, PP2_SUBTYPE_SSL_CN,
    PP2_SUBTYPE_SSL_KEY_ALG, PP2_SUBTYPE_SSL_SIG_ALG, PP2_SUBTYPE_SSL_VERSION, PP2_TYPE_ALPN, PP2_TYPE_AUTHORITY,
    PP2_TYPE_SSL, V2_SIGNATURE,
};

/// A v1 header: addresses only.
pub(crate) fn v1(client: Option<SocketAddr>, local: Option<SocketAddr>) -> Vec<u8> {
    match (client, local) {
        (Some(SocketAddr::V4(c)), Some(SocketAddr::V4(l))) => {
            format!("PROXY TCP4 {} {} {} {}\r\n", c.ip(), l.ip(), c.port(), l.port()).into_bytes()
        }
        (Some(SocketAddr::V6(c)), Some(SocketAddr::V6(l))) => {
            format!("PROXY TCP6 {} {} {} {}\r\n", c.ip(), l.ip(), c.port(), l.port()).into_bytes()
        }
        _ => b"PROXY UNKNOWN\r\n".to_vec(),
    }
}

/// A v2 header for a terminated TLS connection.
pub(crate) fn v2(client: Option<SocketAddr>, local: Option<SocketAddr>, ssl: &SslRef) -> Vec<u8> {
    let mut out = v2_addresses(client, local);
    if let Some(alpn) = ssl.selected_alpn_protocol() {
        tlv(&mut out, PP2_TYPE_ALPN, alpn);
    }
    if let Some(sni) = ssl.servername_raw(openssl::ssl::NameType::HOST_NAME) {
        tlv(&mut out, PP2_TYPE_AUTHORITY, sni);
    }
    ssl_tlv(&mut out, ssl);
    v2_finish(out)
}

/// What a QUIC connection's header says of its TLS: always TLS 1.3, ALPN `h3`, no client
/// certificate.
#[derive(Debug)]
pub(crate) struct QuicFacts<'a> {
    pub(crate) sni: Option<&'a str>,
    pub(crate) cipher: Option<&'a str>,
}

/// A v2 header for a QUIC connection, with the TLVs a TLS connection's has (ALPN `h3`).
pub(crate) fn v2_quic(client: SocketAddr, local: Option<SocketAddr>, facts: &QuicFacts<'_>) -> Vec<u8> {
    let mut out = v2_addresses(Some(client), local);
    tlv(&mut out, PP2_TYPE_ALPN, b"h3");
    if let Some(sni) = facts.sni {
        tlv(&mut out, PP2_TYPE_AUTHORITY, sni.as_bytes());
    }
    out.push(PP2_TYPE_SSL);
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    out.push(PP2_CLIENT_SSL);
    // Non-zero: no client certificate verified.
    out.extend_from_slice(&1u32.to_be_bytes());
    tlv(&mut out, PP2_SUBTYPE_SSL_VERSION, b"TLSv1.3");
    if let Some(cipher) = facts.cipher {
        tlv(&mut out, PP2_SUBTYPE_SSL_CIPHER, cipher.as_bytes());
    }
    let len = (out.len() - len_at - 2) as u16;
    out[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
    v2_finish(out)
}

/// The signature, command and addresses; the length is set by [`v2_finish`].
fn v2_addresses(client: Option<SocketAddr>, local: Option<SocketAddr>) -> Vec<u8> {
    let mut out = Vec::with_capacity(256);
    out.extend_from_slice(V2_SIGNATURE);
    out.push(0x21); // version 2, PROXY
    match (client, local) {
        (Some(SocketAddr::V4(c)), Some(SocketAddr::V4(l))) => {
            out.extend_from_slice(&[0x11, 0, 0]);
            out.extend_from_slice(&c.ip().octets());
            out.extend_from_slice(&l.ip().octets());
            out.extend_from_slice(&c.port().to_be_bytes());
            out.extend_from_slice(&l.port().to_be_bytes());
        }
        (Some(SocketAddr::V6(c)), Some(SocketAddr::V6(l))) => {
            out.extend_from_slice(&[0x21, 0, 0]);
            out.extend_from_slice(&c.ip().octets());
            out.extend_from_slice(&l.ip().octets());
            out.extend_from_slice(&c.port().to_be_bytes());
            out.extend_from_slice(&l.port().to_be_bytes());
        }
        // A Unix-socket client: no addresses, the TLVs still tell the TLS facts.
        _ => out.extend_from_slice(&[0x00, 0, 0]),
    }
    out
}

fn v2_finish(mut out: Vec<u8>) -> Vec<u8> {
    let len = (out.len() - 16) as u16;
    out[14..16].copy_from_slice(&len.to_be_bytes());
    out
}

fn tlv(out: &mut Vec<u8>, kind: u8, value: &[u8]) {
    let len = value.len().min(usize::from(u16::MAX));
    out.push(kind);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&value[..len]);
}

fn ssl_tlv(out: &mut Vec<u8>, ssl: &SslRef) {
    out.push(PP2_TYPE_SSL);
    let len_at = out.len();
    out.extend_from_slice(&[0, 0]);
    let peer = ssl.peer_certificate();
    let mut client = PP2_CLIENT_SSL;
    if peer.is_some() {
        client |= PP2_CLIENT_CERT_SESS;
        if !ssl.session_reused() {
            client |= PP2_CLIENT_CERT_CONN;
        }
    }
    out.push(client);
    // Zero when a client certificate was presented and verified, as the protocol defines.
    let verified = peer.is_some() && ssl.verify_result() == openssl::x509::X509VerifyResult::OK;
    out.extend_from_slice(&u32::from(!verified).to_be_bytes());
    tlv(out, PP2_SUBTYPE_SSL_VERSION, ssl.version_str().as_bytes());
    if let Some(cn) = peer.as_ref().and_then(|c| c.subject_name().entries_by_nid(openssl::nid::Nid::COMMONNAME).next())
    {
        tlv(out, PP2_SUBTYPE_SSL_CN, cn.data().as_slice());
    }
    if let Some(cipher) = ssl.current_cipher() {
        tlv(out, PP2_SUBTYPE_SSL_CIPHER, cipher.name().as_bytes());
    }
    // The server certificate's, worked out when its context was built: by now the handshake's
    // copy of the certificate is freed (`ffi::shed_handshake_config`).
    if let Some(cert) = CERT_TLVS.get().and_then(|index| ssl.ssl_context().ex_data(*index)) {
        tlv(out, PP2_SUBTYPE_SSL_SIG_ALG, cert.sig_alg.as_bytes());
        if let Some(key_alg) = &cert.key_alg {
            tlv(out, PP2_SUBTYPE_SSL_KEY_ALG, key_alg.as_bytes());
        }
    }
    let len = (out.len() - len_at - 2) as u16;
    out[len_at..len_at + 2].copy_from_slice(&len.to_be_bytes());
}

/// A server certificate's `SSL_SIG_ALG` and `SSL_KEY_ALG` values, kept on the context that
/// serves it: AWS-LC frees a connection's copy of its certificate when the handshake ends
/// (`ffi::shed_handshake_config`), before the header is built.
#[derive(Debug)]
struct CertTlvs {
    sig_alg: Box<str>,
    /// `None` when the key cannot be read.
    key_alg: Option<Box<str>>,
}

/// Where each context keeps its certificate's TLVs (one index for the process).
static CERT_TLVS: OnceLock<Index<SslContext, CertTlvs>> = OnceLock::new();

/// Keeps `cert`'s TLVs on the context `b` builds, for the headers of its connections.
pub(crate) fn keep_cert_tlvs(b: &mut SslContextBuilder, cert: &X509Ref) -> Result<(), ErrorStack> {
    let index = match CERT_TLVS.get() {
        Some(index) => *index,
        None => {
            // Two loads at once may each make one; the first kept serves both.
            let fresh = SslContext::new_ex_index()?;
            *CERT_TLVS.get_or_init(|| fresh)
        }
    };
    let sig_alg = cert.signature_algorithm().object().nid().short_name().unwrap_or("").into();
    let key_alg = cert.public_key().ok().map(|key| {
        let kind = match key.id() {
            openssl::pkey::Id::RSA => "RSA",
            openssl::pkey::Id::EC => "EC",
            openssl::pkey::Id::ED25519 => "ED",
            _ => "",
        };
        format!("{kind}{}", key.bits()).into()
    });
    b.set_ex_data(index, CertTlvs { sig_alg, key_alg });
    Ok(())
}

/// A PROXY header received from a load balancer in front: its exact bytes and what it says.
#[derive(Debug)]
pub(crate) struct Received {
    pub(crate) bytes: Vec<u8>,
    /// The real client and the address it connected to; `None` for `LOCAL`/`UNKNOWN`.
    pub(crate) addresses: Option<(SocketAddr, SocketAddr)>,
}

/// Reads one v1 or v2 header, and exactly its bytes: the TLS ClientHello follows.
pub(crate) async fn read<S: AsyncRead + Unpin>(io: &mut S) -> Result<Received, String> {
    let (header, bytes) = lb_proxy_protocol::read_proxy_header_raw(io).await.map_err(|e| e.to_string())?;
    Ok(Received { bytes, addresses: header.client.zip(header.local) })
}
