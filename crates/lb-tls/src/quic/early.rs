//! What the counters and the request path need to know of 0-RTT and that quinn does not say:
//! whether a client offered early data (the `early_data` extension of its ClientHello) and
//! whether we took it (quinn asks the TLS session for 0-RTT keys, which rustls hands over only
//! once it accepted). A wrapper around quinn's rustls configuration notes both in the
//! connection's [`Chosen`]; everything else passes through.

use std::any::Any;
use std::sync::Arc;

use quinn_proto::crypto::{
    ExportKeyingMaterialError, HeaderKey, KeyPair, Keys, PacketKey, ServerConfig, Session, UnsupportedVersion,
};
use quinn_proto::transport_parameters::TransportParameters;
use quinn_proto::{ConnectionId, Side, TransportError};

use super::tls::{note, Chosen};

/// TLS's `early_data` extension.
const EARLY_DATA: u16 = 42;
/// A ClientHello longer than this is not scanned (its handshake goes on regardless).
const MAX_HELLO: usize = 16 * 1024;

/// quinn's server configuration for one connection, noting into `seen`.
pub(super) struct Noted {
    inner: Arc<quinn::crypto::rustls::QuicServerConfig>,
    seen: Chosen,
}

impl Noted {
    pub(super) fn new(inner: quinn::crypto::rustls::QuicServerConfig, seen: Chosen) -> Noted {
        Noted { inner: Arc::new(inner), seen }
    }
}

impl ServerConfig for Noted {
    fn initial_keys(&self, version: u32, dst_cid: &ConnectionId) -> Result<Keys, UnsupportedVersion> {
        self.inner.initial_keys(version, dst_cid)
    }

    fn retry_tag(&self, version: u32, orig_dst_cid: &ConnectionId, packet: &[u8]) -> [u8; 16] {
        self.inner.retry_tag(version, orig_dst_cid, packet)
    }

    fn start_session(self: Arc<Self>, version: u32, params: &TransportParameters) -> Box<dyn Session> {
        let inner = self.inner.clone().start_session(version, params);
        Box::new(NotedSession { inner, seen: self.seen.clone(), hello: Some(Vec::new()) })
    }
}

struct NotedSession {
    inner: Box<dyn Session>,
    seen: Chosen,
    /// The ClientHello's bytes so far; `None` once scanned.
    hello: Option<Vec<u8>>,
}

impl Session for NotedSession {
    fn initial_keys(&self, dst_cid: &ConnectionId, side: Side) -> Keys {
        self.inner.initial_keys(dst_cid, side)
    }

    fn handshake_data(&self) -> Option<Box<dyn Any>> {
        self.inner.handshake_data()
    }

    fn peer_identity(&self) -> Option<Box<dyn Any>> {
        self.inner.peer_identity()
    }

    fn early_crypto(&self) -> Option<(Box<dyn HeaderKey>, Box<dyn PacketKey>)> {
        let keys = self.inner.early_crypto();
        if keys.is_some() {
            note(&self.seen, |seen| seen.early_accepted = true);
        }
        keys
    }

    fn early_data_accepted(&self) -> Option<bool> {
        self.inner.early_data_accepted()
    }

    fn is_handshaking(&self) -> bool {
        self.inner.is_handshaking()
    }

    fn read_handshake(&mut self, buf: &[u8]) -> Result<bool, TransportError> {
        if let Some(hello) = self.hello.as_mut() {
            // Most ClientHellos come whole in one piece: read in place; copied only when split
            // (and then read again only once more bytes join the first ones).
            let offered = if hello.is_empty() {
                let offered = offers_early_data(buf);
                if offered.is_none() {
                    hello.extend_from_slice(&buf[..buf.len().min(MAX_HELLO)]);
                }
                offered
            } else {
                hello.extend_from_slice(&buf[..buf.len().min(MAX_HELLO.saturating_sub(hello.len()))]);
                offers_early_data(hello)
            };
            match offered {
                Some(offered) => {
                    note(&self.seen, |seen| seen.early_offered = offered);
                    self.hello = None;
                }
                None if hello.len() >= MAX_HELLO => self.hello = None,
                None => {}
            }
        }
        self.inner.read_handshake(buf)
    }

    fn transport_parameters(&self) -> Result<Option<TransportParameters>, TransportError> {
        self.inner.transport_parameters()
    }

    fn write_handshake(&mut self, buf: &mut Vec<u8>) -> Option<Keys> {
        self.inner.write_handshake(buf)
    }

    fn next_1rtt_keys(&mut self) -> Option<KeyPair<Box<dyn PacketKey>>> {
        self.inner.next_1rtt_keys()
    }

    fn is_valid_retry(&self, orig_dst_cid: &ConnectionId, header: &[u8], payload: &[u8]) -> bool {
        self.inner.is_valid_retry(orig_dst_cid, header, payload)
    }

    fn export_keying_material(
        &self,
        output: &mut [u8],
        label: &[u8],
        context: &[u8],
    ) -> Result<(), ExportKeyingMaterialError> {
        self.inner.export_keying_material(output, label, context)
    }
}

/// Whether the ClientHello at the start of `bytes` offers early data; `None` while it is not
/// all there, or `Some(false)` when it is no ClientHello that can be read.
pub(crate) fn offers_early_data(bytes: &[u8]) -> Option<bool> {
    let mut r = Reader(bytes);
    // Handshake type 1 (ClientHello), then its 24-bit length.
    let kind = r.take(1)?;
    let len = r.take(3)?;
    let len = usize::from(len[0]) << 16 | usize::from(len[1]) << 8 | usize::from(len[2]);
    if kind[0] != 1 {
        return Some(false);
    }
    let Some(body) = r.take(len) else {
        return if len > MAX_HELLO { Some(false) } else { None };
    };
    let mut r = Reader(body);
    let extensions = (|| {
        r.take(2 + 32)?; // legacy_version, random
        r.vec8()?; // legacy_session_id
        r.vec16()?; // cipher_suites
        r.vec8()?; // legacy_compression_methods
        r.vec16()
    })();
    let Some(extensions) = extensions else { return Some(false) };
    let mut r = Reader(extensions);
    while let Some(kind) = r.take(2) {
        if u16::from_be_bytes([kind[0], kind[1]]) == EARLY_DATA {
            return Some(true);
        }
        if r.vec16().is_none() {
            break;
        }
    }
    Some(false)
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let (head, rest) = self.0.split_at_checked(n)?;
        self.0 = rest;
        Some(head)
    }

    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.take(1)?[0];
        self.take(usize::from(n))
    }

    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.take(2)?;
        self.take(usize::from(u16::from_be_bytes([n[0], n[1]])))
    }
}

#[cfg(test)]
mod tests {
    use super::offers_early_data;

    /// A ClientHello with these extensions (type, body).
    fn hello(extensions: &[(u16, &[u8])]) -> Vec<u8> {
        let mut ext = Vec::new();
        for (kind, body) in extensions {
            ext.extend_from_slice(&kind.to_be_bytes());
            ext.extend_from_slice(&(body.len() as u16).to_be_bytes());
            ext.extend_from_slice(body);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7; 32]);
        body.extend_from_slice(&[0, 0, 2, 0x13, 0x01, 1, 0]);
        body.extend_from_slice(&(ext.len() as u16).to_be_bytes());
        body.extend_from_slice(&ext);
        let mut out = vec![1, 0, (body.len() >> 8) as u8, body.len() as u8];
        out.extend_from_slice(&body);
        out
    }

    #[test]
    fn the_early_data_extension_is_found_whole_or_not_yet() {
        let offered = hello(&[(0, b"name"), (42, b""), (43, &[2, 3, 4])]);
        assert_eq!(offers_early_data(&offered), Some(true));
        assert_eq!(offers_early_data(&offered[..offered.len() - 3]), None, "not all there yet");
        assert_eq!(offers_early_data(&hello(&[(0, b"name"), (43, &[2, 3, 4])])), Some(false));
        let mut broken = hello(&[(0, b"name")]);
        broken[0] = 2;
        assert_eq!(offers_early_data(&broken), Some(false), "not a ClientHello");
        assert_eq!(offers_early_data(&[1, 0xff, 0xff, 0xff]), Some(false), "longer than we read");
        assert_eq!(offers_early_data(&[]), None);
    }
}
