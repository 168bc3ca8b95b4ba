//! For unit tests that run real handshakes: a server context with a fresh self-signed P-256
//! certificate, to which each test adds what it exercises.

use openssl::asn1::Asn1Time;
use openssl::bn::BigNum;
use openssl::ec::{EcGroup, EcKey};
use openssl::hash::MessageDigest;
use openssl::nid::Nid;
use openssl::pkey::PKey;
use openssl::ssl::{SslContextBuilder, SslMethod};
use openssl::x509::{X509NameBuilder, X509};

/// A server context builder whose certificate names `cn`, valid from now until tomorrow.
pub(crate) fn self_signed(cn: &str) -> SslContextBuilder {
    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1).expect("P-256");
    let key = PKey::from_ec_key(EcKey::generate(&group).expect("a key")).expect("a key");
    let mut name = X509NameBuilder::new().expect("a name");
    name.append_entry_by_text("CN", cn).expect("CN");
    let name = name.build();
    let mut cert = X509::builder().expect("a certificate");
    cert.set_version(2).expect("v3");
    cert.set_serial_number(&BigNum::from_u32(1).and_then(|n| n.to_asn1_integer()).expect("serial")).expect("serial");
    cert.set_subject_name(&name).expect("subject");
    cert.set_issuer_name(&name).expect("issuer");
    cert.set_pubkey(&key).expect("public key");
    cert.set_not_before(&Asn1Time::days_from_now(0).expect("now")).expect("not before");
    cert.set_not_after(&Asn1Time::days_from_now(1).expect("tomorrow")).expect("not after");
    cert.sign(&key, MessageDigest::sha256()).expect("signed");
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).expect("a context");
    b.set_certificate(&cert.build()).expect("certificate");
    b.set_private_key(&key).expect("key");
    b
}
