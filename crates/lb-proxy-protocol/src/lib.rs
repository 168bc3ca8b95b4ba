//! PROXY protocol v1 and v2 headers (HAProxy's `proxy-protocol.txt`), read exactly: used by
//! lb-proxy on binds with `accept_proxy`, and by lb-tls on frontends with `proxy_proxy`.
//!
//! lb-tls (or another load balancer) terminates the client's connection and opens one to us; the
//! header it writes first is the only place where the real client address, the address the client
//! connected to, and the TLS facts (version, cipher, SNI, ALPN, client certificate) survive.
//!
//! Why exact reads: the header is followed directly by the client's data (an HTTP request, raw
//! bytes for a TCP frontend, or a TLS ClientHello) and the stream is handed on as it is, so not
//! one byte past the header may be consumed. A v2 header announces its length in its 16-byte
//! fixed part; a v1 header is a text line ending in CRLF, read in chunks never longer than the
//! shortest valid rest of the line.
//!
//! Why no leniency: a missing or malformed header is an error, never a guess. Taking the socket
//! peer (lb-tls) for the client would attribute requests to the wrong address; the caller logs the
//! reason and closes the connection. The caller also applies the timeout.
//!
//! Main items: [`read_proxy_header`] (and [`read_proxy_header_raw`], which also gives the exact
//! bytes, for passing the header on), [`ProxyHeader`], [`TlsFacts`], [`ProxyError`]; the fuzz
//! target `fuzz/proxy_header` drives [`fuzz_parse`].
#![forbid(unsafe_code)]

use std::net::SocketAddr;

use ppp::{v1, v2};
use tokio::io::{AsyncRead, AsyncReadExt};

#[cfg(test)]
mod tests;

/// Signature, version/command, family/protocol, 16-bit length.
const V2_FIXED_LEN: usize = 16;
/// The longest v1 line, CRLF included.
const V1_MAX_LEN: usize = 107;
/// The shortest v1 line: `PROXY UNKNOWN\r\n`.
const V1_MIN_LEN: usize = 15;
/// Bytes read before deciding between v1, v2 and "no header": fewer than either version's
/// shortest header, and enough to show what a client that sent no header sent instead.
pub const SNIFF_LEN: usize = 8;

/// The protocol's numbers, for whoever reads or writes a v2 header.
pub mod pp2 {
    /// The 12-byte signature that starts every v2 header.
    pub const V2_SIGNATURE: &[u8; 12] = b"\r\n\r\n\0\r\nQUIT\n";
    pub const PP2_TYPE_ALPN: u8 = 0x01;
    pub const PP2_TYPE_AUTHORITY: u8 = 0x02;
    pub const PP2_TYPE_CRC32C: u8 = 0x03;
    pub const PP2_TYPE_SSL: u8 = 0x20;
    pub const PP2_SUBTYPE_SSL_VERSION: u8 = 0x21;
    pub const PP2_SUBTYPE_SSL_CN: u8 = 0x22;
    pub const PP2_SUBTYPE_SSL_CIPHER: u8 = 0x23;
    pub const PP2_SUBTYPE_SSL_SIG_ALG: u8 = 0x24;
    pub const PP2_SUBTYPE_SSL_KEY_ALG: u8 = 0x25;
    /// `PP2_TYPE_SSL` client flags.
    pub const PP2_CLIENT_SSL: u8 = 0x01;
    pub const PP2_CLIENT_CERT_CONN: u8 = 0x02;
    pub const PP2_CLIENT_CERT_SESS: u8 = 0x04;
}

use pp2::{
    PP2_CLIENT_CERT_CONN, PP2_CLIENT_SSL, PP2_SUBTYPE_SSL_CIPHER, PP2_SUBTYPE_SSL_VERSION, PP2_TYPE_ALPN,
    PP2_TYPE_AUTHORITY, PP2_TYPE_CRC32C, PP2_TYPE_SSL, V2_SIGNATURE,
};

/// The PROXY v2 `PP2_TYPE_SSL` TLV and its sub-TLVs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFacts {
    /// e.g. `TLSv1.3` (`PP2_SUBTYPE_SSL_VERSION`).
    pub version: Option<String>,
    /// e.g. `TLS_AES_256_GCM_SHA384` (`PP2_SUBTYPE_SSL_CIPHER`).
    pub cipher: Option<String>,
    /// `PP2_CLIENT_CERT_CONN`: a client certificate was presented on this connection.
    pub client_cert: bool,
    /// The client certificate verified (the TLV's `verify` field was 0).
    pub client_cert_verified: bool,
}

/// What a PROXY header said about the connection.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ProxyHeader {
    /// The real client; `None` for v1 `UNKNOWN`, v2 `LOCAL` (health checks of the sender) and v2
    /// families or transports other than TCP over IPv4/IPv6 (HAProxy keeps the socket's addresses
    /// in those cases).
    pub client: Option<SocketAddr>,
    /// The address the client connected to; `None` exactly when `client` is.
    pub local: Option<SocketAddr>,
    /// From the v2 SSL TLV, when its `PP2_CLIENT_SSL` flag says the client used TLS.
    pub tls: Option<TlsFacts>,
    /// The v2 ALPN TLV.
    pub alpn: Option<String>,
    /// The v2 AUTHORITY TLV (the SNI host name).
    pub authority: Option<String>,
}

/// Why no usable PROXY header was read.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// The connection starts with something else (shown escaped, at most 8 bytes).
    #[error("missing PROXY header (first bytes: \"{0}\")")]
    Missing(String),
    #[error("connection closed before PROXY header")]
    Closed,
    #[error("connection closed inside the PROXY header, after {0} bytes")]
    Truncated(usize),
    #[error("malformed PROXY v1 header: {0}")]
    MalformedV1(String),
    #[error("malformed PROXY v2 header: {0}")]
    MalformedV2(String),
    /// The family nibble, e.g. `0x40`.
    #[error("PROXY v2: unsupported address family {0:#04x}")]
    UnsupportedFamily(u8),
    #[error("PROXY v2: unsupported transport protocol {0:#x}")]
    UnsupportedProtocol(u8),
    #[error("PROXY v2 signature with unsupported version {0}")]
    UnsupportedVersion(u8),
    #[error("reading PROXY header: {0}")]
    Io(#[from] std::io::Error),
}

/// Reads one PROXY header (v1 or v2) and exactly its bytes, never a byte of the data that follows.
pub async fn read_proxy_header<S: AsyncRead + Unpin>(io: &mut S) -> Result<ProxyHeader, ProxyError> {
    read_proxy_header_raw(io).await.map(|(header, _)| header)
}

/// [`read_proxy_header`], with the header's exact bytes: for a proxy that passes the header on
/// (lb-tls's `proxy_proxy`).
pub async fn read_proxy_header_raw<S: AsyncRead + Unpin>(io: &mut S) -> Result<(ProxyHeader, Vec<u8>), ProxyError> {
    let mut buf = Vec::with_capacity(V2_FIXED_LEN + 64);
    fill(io, &mut buf, SNIFF_LEN).await?;
    read_rest(io, buf).await
}

/// [`read_proxy_header`], or `None` when the connection starts with exactly `preface` instead
/// (its 8 bytes read, nothing more): a socket that takes PROXY headers also takes lb-tls's
/// multiplexed hop, which opens with a preface of its own.
pub async fn read_proxy_header_or<S: AsyncRead + Unpin>(
    io: &mut S,
    preface: &[u8; SNIFF_LEN],
) -> Result<Option<ProxyHeader>, ProxyError> {
    let mut buf = Vec::with_capacity(V2_FIXED_LEN + 64);
    fill(io, &mut buf, SNIFF_LEN).await?;
    if buf == preface {
        return Ok(None);
    }
    read_rest(io, buf).await.map(|(header, _)| Some(header))
}

/// The rest of a header whose first [`SNIFF_LEN`] bytes are in `buf`.
async fn read_rest<S: AsyncRead + Unpin>(io: &mut S, mut buf: Vec<u8>) -> Result<(ProxyHeader, Vec<u8>), ProxyError> {
    if buf.starts_with(&V2_SIGNATURE[..SNIFF_LEN]) {
        fill(io, &mut buf, V2_FIXED_LEN).await?;
        // Judge the fixed part before waiting for the length it announces.
        match v2::Header::try_from(buf.as_slice()) {
            Ok(_) | Err(v2::ParseError::Partial(..)) => {}
            Err(v2::ParseError::Prefix) => return Err(missing(&buf)),
            Err(e) => return Err(v2_error(e)),
        }
        let len = match buf.get(14..16) {
            Some(&[hi, lo]) => usize::from(u16::from_be_bytes([hi, lo])),
            _ => return Err(ProxyError::MalformedV2("short fixed part".to_owned())),
        };
        fill(io, &mut buf, V2_FIXED_LEN + len).await?;
    } else if buf.starts_with(b"PROXY ") {
        fill(io, &mut buf, V1_MIN_LEN).await?;
        while !buf.contains(&b'\n') {
            let target = (buf.len() + v1_min_rest(&buf)).min(V1_MAX_LEN);
            if target <= buf.len() {
                return Err(ProxyError::MalformedV1(format!("no CRLF within {V1_MAX_LEN} bytes")));
            }
            fill(io, &mut buf, target).await?;
        }
    } else {
        return Err(missing(&buf));
    }
    parse(&buf).map(|header| (header, buf))
}

/// Parses a complete header, and nothing after it: `bytes` must be exactly one v1 or v2 header.
pub fn parse(bytes: &[u8]) -> Result<ProxyHeader, ProxyError> {
    if bytes.starts_with(V2_SIGNATURE) {
        parse_v2(bytes)
    } else if bytes.starts_with(b"PROXY") {
        parse_v1(bytes)
    } else {
        Err(missing(bytes))
    }
}

/// For the fuzzer (`fuzz/`, target `proxy_header`): parses `bytes` with [`parse`] and with the
/// streaming reader, and returns whether a header was accepted.
///
/// # Panics
/// When the streaming reader and [`parse`] disagree, or the reader consumed more than the header:
/// those are the bugs the fuzzer looks for. Never on malformed input as such.
#[doc(hidden)]
pub fn fuzz_parse(bytes: &[u8]) -> bool {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};

    let parsed = parse(bytes);
    let mut rest = bytes;
    let read = {
        let mut fut = std::pin::pin!(read_proxy_header(&mut rest));
        // A `&[u8]` reader is always ready: one poll runs the reader to its end.
        match fut.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            Poll::Ready(result) => result,
            Poll::Pending => panic!("reading from a byte slice returned Pending"),
        }
    };
    let consumed = bytes.len() - rest.len();
    if let Ok(header) = &read {
        let again = parse(&bytes[..consumed]);
        assert!(matches!(&again, Ok(h) if h == header), "read {header:?} from {consumed} bytes, parse says {again:?}");
        if consumed == bytes.len() {
            assert!(matches!(&parsed, Ok(h) if h == header), "whole input: read {header:?}, parse says {parsed:?}");
        }
    }
    if let Ok(header) = &parsed {
        assert!(
            matches!(&read, Ok(h) if h == header) && consumed == bytes.len(),
            "parse accepted the whole input as {header:?}, the reader said {read:?} after {consumed} bytes"
        );
    }
    parsed.is_ok()
}

/// Reads until `buf` holds `target` bytes.
async fn fill<S: AsyncRead + Unpin>(io: &mut S, buf: &mut Vec<u8>, target: usize) -> Result<(), ProxyError> {
    let mut filled = buf.len();
    if target <= filled {
        return Ok(());
    }
    buf.resize(target, 0);
    while filled < target {
        let Some(dst) = buf.get_mut(filled..target) else {
            break;
        };
        match io.read(dst).await {
            Ok(0) => {
                buf.truncate(filled);
                return Err(if filled == 0 {
                    ProxyError::Closed
                } else if starts_like(buf, b"PROXY ") || starts_like(buf, V2_SIGNATURE) {
                    ProxyError::Truncated(filled)
                } else {
                    missing(buf)
                });
            }
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(ProxyError::Io(e)),
        }
    }
    Ok(())
}

/// Whether `buf` and `signature` agree on their common length.
fn starts_like(buf: &[u8], signature: &[u8]) -> bool {
    let n = buf.len().min(signature.len());
    buf.get(..n) == signature.get(..n)
}

/// The fewest bytes that can still follow a v1 line read so far (which has no LF yet): reading
/// that many never goes past the end of a valid line.
fn v1_min_rest(buf: &[u8]) -> usize {
    if buf.last() == Some(&b'\r') {
        return 1;
    }
    if buf.starts_with(b"PROXY TCP4 ") || buf.starts_with(b"PROXY TCP6 ") {
        // A valid line has 5 spaces, each followed by at least one character, then CRLF.
        let spaces = buf.iter().filter(|&&b| b == b' ').count();
        return 2 * 5usize.saturating_sub(spaces) + 2;
    }
    2
}

fn parse_v1(bytes: &[u8]) -> Result<ProxyHeader, ProxyError> {
    // One line, ending in its only CRLF (ppp takes a bare LF after `UNKNOWN`).
    if bytes.len() > V1_MAX_LEN {
        return Err(ProxyError::MalformedV1(format!("longer than {V1_MAX_LEN} bytes")));
    }
    let Some(line) = bytes.strip_suffix(b"\r\n") else {
        return Err(ProxyError::MalformedV1("does not end in CRLF".to_owned()));
    };
    if line.iter().any(|&b| b == b'\r' || b == b'\n') {
        return Err(ProxyError::MalformedV1("CR or LF before the end of the line".to_owned()));
    }
    let header = v1::Header::try_from(bytes).map_err(|e| ProxyError::MalformedV1(reason(&e)))?;
    if header.header.len() != bytes.len() {
        return Err(ProxyError::MalformedV1(format!(
            "{} bytes after the CRLF",
            bytes.len().saturating_sub(header.header.len())
        )));
    }
    let (client, local) = match header.addresses {
        v1::Addresses::Unknown => return Ok(ProxyHeader::default()),
        v1::Addresses::Tcp4(a) => (
            SocketAddr::from((a.source_address, a.source_port)),
            SocketAddr::from((a.destination_address, a.destination_port)),
        ),
        v1::Addresses::Tcp6(a) => (
            SocketAddr::from((a.source_address, a.source_port)),
            SocketAddr::from((a.destination_address, a.destination_port)),
        ),
    };
    // Ports are plain decimal (ppp's u16 parsing would also take a leading `+`).
    let ports_decimal = header
        .header
        .trim_end_matches("\r\n")
        .split(' ')
        .skip(4)
        .all(|port| !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()));
    if !ports_decimal {
        return Err(ProxyError::MalformedV1("port not in decimal".to_owned()));
    }
    Ok(ProxyHeader { client: Some(client), local: Some(local), ..ProxyHeader::default() })
}

fn parse_v2(bytes: &[u8]) -> Result<ProxyHeader, ProxyError> {
    let header = v2::Header::try_from(bytes).map_err(v2_error)?;
    if header.len() != bytes.len() {
        return Err(ProxyError::MalformedV2(format!(
            "{} bytes after the announced length",
            bytes.len().saturating_sub(header.len())
        )));
    }
    let addresses = match (header.command, header.protocol, header.addresses) {
        (v2::Command::Proxy, v2::Protocol::Stream, v2::Addresses::IPv4(a)) => Some((
            SocketAddr::from((a.source_address, a.source_port)),
            SocketAddr::from((a.destination_address, a.destination_port)),
        )),
        (v2::Command::Proxy, v2::Protocol::Stream, v2::Addresses::IPv6(a)) => Some((
            SocketAddr::from((a.source_address, a.source_port)),
            SocketAddr::from((a.destination_address, a.destination_port)),
        )),
        // LOCAL, UNSPEC, AF_UNIX, UDP: no TCP client to name.
        _ => None,
    };
    let mut out =
        ProxyHeader { client: addresses.map(|(c, _)| c), local: addresses.map(|(_, l)| l), ..ProxyHeader::default() };
    if header.command == v2::Command::Local {
        // "The receiver must … discard the protocol block including the family."
        return Ok(out);
    }
    // ppp counts an UNSPEC header's whole payload as addresses; the spec gives them 0 bytes.
    let mut offset = V2_FIXED_LEN
        + match header.addresses {
            v2::Addresses::Unspecified => 0,
            _ => header.address_bytes().len(),
        };
    let tlv_bytes = bytes.get(offset..).unwrap_or_default();
    for tlv in v2::TypeLengthValues::from(tlv_bytes) {
        let tlv = tlv.map_err(|e| ProxyError::MalformedV2(reason(&e)))?;
        let value_at = offset + 3;
        offset = value_at + tlv.value.len();
        match tlv.kind {
            PP2_TYPE_ALPN => out.alpn = text(&tlv.value),
            PP2_TYPE_AUTHORITY => out.authority = text(&tlv.value),
            PP2_TYPE_CRC32C => check_crc(bytes, value_at, &tlv.value)?,
            PP2_TYPE_SSL => out.tls = parse_ssl(&tlv.value)?,
            _ => {}
        }
    }
    Ok(out)
}

/// The SSL TLV: client flags (u8), verify result (u32), then sub-TLVs.
fn parse_ssl(value: &[u8]) -> Result<Option<TlsFacts>, ProxyError> {
    let [client, v0, v1, v2, v3, subs @ ..] = value else {
        return Err(ProxyError::MalformedV2(format!("SSL TLV of {} bytes, at least 5 expected", value.len())));
    };
    let verify = u32::from_be_bytes([*v0, *v1, *v2, *v3]);
    let mut facts = TlsFacts::default();
    for sub in v2::TypeLengthValues::from(subs) {
        let sub = sub.map_err(|e| ProxyError::MalformedV2(format!("SSL TLV: {}", reason(&e))))?;
        match sub.kind {
            PP2_SUBTYPE_SSL_VERSION => facts.version = text(&sub.value),
            PP2_SUBTYPE_SSL_CIPHER => facts.cipher = text(&sub.value),
            _ => {}
        }
    }
    if client & PP2_CLIENT_SSL == 0 {
        return Ok(None);
    }
    facts.client_cert = client & PP2_CLIENT_CERT_CONN != 0;
    facts.client_cert_verified = facts.client_cert && verify == 0;
    Ok(Some(facts))
}

/// Checks the CRC32C TLV: the checksum of the whole header with the checksum field zeroed.
fn check_crc(header: &[u8], value_at: usize, value: &[u8]) -> Result<(), ProxyError> {
    let expected = match value {
        &[a, b, c, d] => u32::from_be_bytes([a, b, c, d]),
        _ => return Err(ProxyError::MalformedV2(format!("CRC32C TLV of {} bytes, 4 expected", value.len()))),
    };
    let field = value_at..value_at + 4;
    let actual = crc32c(header.iter().enumerate().map(|(i, &b)| if field.contains(&i) { 0 } else { b }));
    if actual != expected {
        return Err(ProxyError::MalformedV2(format!(
            "CRC32C mismatch (header says {expected:#010x}, computed {actual:#010x})"
        )));
    }
    Ok(())
}

/// CRC-32C (Castagnoli), as RFC 4960 appendix B; bitwise, headers are short.
fn crc32c(bytes: impl Iterator<Item = u8>) -> u32 {
    let mut crc = !0u32;
    for b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 { (crc >> 1) ^ 0x82F6_3B78 } else { crc >> 1 };
        }
    }
    !crc
}

fn text(value: &[u8]) -> Option<String> {
    (!value.is_empty()).then(|| String::from_utf8_lossy(value).into_owned())
}

fn missing(bytes: &[u8]) -> ProxyError {
    let shown = bytes.get(..SNIFF_LEN).unwrap_or(bytes);
    ProxyError::Missing(shown.escape_ascii().to_string())
}

fn v2_error(e: v2::ParseError) -> ProxyError {
    match e {
        v2::ParseError::AddressFamily(family) => ProxyError::UnsupportedFamily(family),
        v2::ParseError::Protocol(protocol) => ProxyError::UnsupportedProtocol(protocol),
        v2::ParseError::Version(version) => ProxyError::UnsupportedVersion(version >> 4),
        v2::ParseError::Command(command) => ProxyError::MalformedV2(format!("unknown command {command:#x}")),
        other => ProxyError::MalformedV2(reason(&other)),
    }
}

/// ppp's message, as a clause: without its final period.
fn reason(e: &dyn std::fmt::Display) -> String {
    e.to_string().trim_end_matches('.').to_owned()
}
