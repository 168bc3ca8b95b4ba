//! The TLS 1.3 suites QUIC's TLS offers, with rustls's HKDF over an HMAC key made once per
//! secret (`HkdfUsingHmac`) rather than the provider's own, which hands each expansion to
//! AWS-LC's `HKDF_expand`: that hashes the secret into HMAC's inner and outer pads again for
//! every label, and a QUIC handshake expands about fifty (packet key, IV and header key of each
//! of its four key phases, the traffic and resumption secrets, the next key update's). The
//! bytes derived are the same (RFC 5869's HKDF either way); only the work to get them differs.

use std::sync::OnceLock;

use aws_lc_rs::hmac;
use rustls::crypto::hash::HashAlgorithm;
use rustls::crypto::hmac::{Hmac, Key, Tag};
use rustls::crypto::tls13::{Hkdf, HkdfUsingHmac};
use rustls::{CipherSuiteCommon, SupportedCipherSuite, Tls13CipherSuite};

struct AwsLcHmac(hmac::Algorithm);

static HMAC_SHA256: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA256);
static HMAC_SHA384: AwsLcHmac = AwsLcHmac(hmac::HMAC_SHA384);
static HKDF_SHA256: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA256);
static HKDF_SHA384: HkdfUsingHmac<'static> = HkdfUsingHmac(&HMAC_SHA384);

impl Hmac for AwsLcHmac {
    fn with_key(&self, key: &[u8]) -> Box<dyn Key> {
        Box::new(KeyedHmac(hmac::Key::new(self.0, key)))
    }

    fn hash_output_len(&self) -> usize {
        self.0.digest_algorithm().output_len()
    }
}

/// AWS-LC's HMAC state with the key's pads already hashed: each tag starts from a copy of it.
struct KeyedHmac(hmac::Key);

impl Key for KeyedHmac {
    fn sign_concat(&self, first: &[u8], middle: &[&[u8]], last: &[u8]) -> Tag {
        let mut context = hmac::Context::with_key(&self.0);
        context.update(first);
        for part in middle {
            context.update(part);
        }
        context.update(last);
        Tag::new(context.sign().as_ref())
    }

    fn tag_len(&self) -> usize {
        self.0.algorithm().digest_algorithm().output_len()
    }
}

/// `suite` with the HKDF above for its hash; any other suite as it is. Each is made once per
/// process (rustls wants them `'static`).
pub(super) fn keyed(suite: SupportedCipherSuite) -> SupportedCipherSuite {
    static MADE: OnceLock<Vec<SupportedCipherSuite>> = OnceLock::new();
    let made = MADE
        .get_or_init(|| rustls::crypto::aws_lc_rs::ALL_CIPHER_SUITES.iter().filter_map(|s| with_hkdf(*s)).collect());
    made.iter().find(|s| s.suite() == suite.suite()).copied().unwrap_or(suite)
}

fn with_hkdf(suite: SupportedCipherSuite) -> Option<SupportedCipherSuite> {
    let tls13 = suite.tls13()?;
    let hkdf: &'static dyn Hkdf = match tls13.common.hash_provider.algorithm() {
        HashAlgorithm::SHA256 => &HKDF_SHA256,
        HashAlgorithm::SHA384 => &HKDF_SHA384,
        _ => return None,
    };
    let common = CipherSuiteCommon {
        suite: tls13.common.suite,
        hash_provider: tls13.common.hash_provider,
        confidentiality_limit: tls13.common.confidentiality_limit,
    };
    let made = Tls13CipherSuite { common, hkdf_provider: hkdf, aead_alg: tls13.aead_alg, quic: tls13.quic };
    Some(SupportedCipherSuite::Tls13(Box::leak(Box::new(made))))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// RFC 5869's test case 1 (SHA-256), through both HKDFs: the same key material.
    #[test]
    fn the_keyed_hkdf_derives_what_the_providers_does() {
        let ikm = [0x0b; 22];
        let salt: Vec<u8> = (0x00..=0x0c).collect();
        let info: Vec<u8> = (0xf0..=0xf9).collect();
        let ours = HKDF_SHA256.extract_from_secret(Some(&salt), &ikm);
        let provider = rustls::crypto::aws_lc_rs::cipher_suite::TLS13_AES_128_GCM_SHA256.tls13().expect("TLS 1.3");
        let theirs = provider.hkdf_provider.extract_from_secret(Some(&salt), &ikm);
        let (mut a, mut b) = ([0u8; 42], [0u8; 42]);
        ours.expand_slice(&[&info], &mut a).expect("42 bytes");
        theirs.expand_slice(&[&info], &mut b).expect("42 bytes");
        assert_eq!(a, b);
        assert_eq!(a[..4], [0x3c, 0xb2, 0x5f, 0x25], "RFC 5869 A.1's OKM");
        for (name, suite) in super::super::tls::SUITES {
            assert_eq!(keyed(*suite).suite(), suite.suite(), "{name}");
            assert!(keyed(*suite).tls13().is_some_and(|s| s.quic.is_some()), "{name} keeps its QUIC keys");
        }
    }
}
