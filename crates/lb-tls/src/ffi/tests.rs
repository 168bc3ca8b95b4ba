//! The ticket callback in real handshakes (a server and a client context of the library in
//! use, over a socket pair): sessions resume with the same keys, after a rotation (an older key
//! still decrypts), and never with keys the server does not hold, where the handshake is a full
//! one. Run under valgrind memcheck as well (docs/architecture.md, "The one unsafe module").

use std::io::{Read as _, Write as _};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use lb_supervisor::Secret;
use openssl::ssl::{
    Ssl, SslContext, SslContextBuilder, SslMethod, SslSession, SslSessionCacheMode, SslVerifyMode, SslVersion,
};

use crate::tickets::TicketStore;

const VERSIONS: [SslVersion; 2] = [SslVersion::TLS1_2, SslVersion::TLS1_3];

fn store(keys: &[u8]) -> Arc<TicketStore> {
    let store = TicketStore::own().expect("a store");
    let secrets: Vec<Secret> = keys.iter().map(|&k| Secret::new(vec![k; 80])).collect();
    store.take_secrets(&secrets);
    Arc::new(store)
}

fn server(store: Arc<TicketStore>) -> SslContext {
    server_builder(store).build()
}

fn server_builder(store: Arc<TicketStore>) -> SslContextBuilder {
    let mut b = crate::test_server::self_signed("ffi.test");
    // Tickets only: what resumes here resumes through the callback.
    b.set_session_cache_mode(SslSessionCacheMode::OFF);
    super::set_ticket_keys(&mut b, store).expect("ticket keys");
    super::set_session_timeout(&mut b, Duration::from_secs(60));
    b
}

/// One handshake and one byte each way; whether it resumed, and the session to resume next.
fn handshake(server: &SslContext, version: SslVersion, session: Option<&SslSession>) -> (bool, SslSession) {
    let (near, far) = UnixStream::pair().expect("a socket pair");
    let server = server.clone();
    let served = std::thread::spawn(move || {
        let mut tls = Ssl::new(&server).expect("ssl").accept(far).expect("the server's handshake");
        tls.write_all(b"s").expect("write");
        let mut byte = [0; 1];
        tls.read_exact(&mut byte).expect("read");
        // Until the client's close_notify.
        let _ = tls.read_to_end(&mut Vec::new());
    });
    let mut client = SslContextBuilder::new(SslMethod::tls_client()).expect("a client context");
    client.set_verify(SslVerifyMode::NONE);
    client.set_min_proto_version(Some(version)).expect("min");
    client.set_max_proto_version(Some(version)).expect("max");
    // Not in the context's own store: OpenSSL marks what it holds there unresumable when the
    // context is freed, at the end of this function.
    client.set_session_cache_mode(SslSessionCacheMode::CLIENT | SslSessionCacheMode::NO_INTERNAL);
    // The session to resume is the one the server's ticket makes (for TLS 1.3, after the
    // handshake): it comes through this callback.
    let ticketed = Arc::new(Mutex::new(None));
    let keep = ticketed.clone();
    client.set_new_session_callback(move |_, session| *keep.lock().expect("lock") = Some(session));
    let mut ssl = Ssl::new(&client.build()).expect("ssl");
    if let Some(session) = &session {
        // SAFETY: the session comes from a client context built the same way, for this server.
        unsafe { ssl.set_session(session) }.expect("the session");
    }
    let mut tls = ssl.connect(near).expect("the client's handshake");
    // The byte comes after TLS 1.3's tickets, so the session holds one once it is read.
    let mut byte = [0; 1];
    tls.read_exact(&mut byte).expect("read");
    tls.write_all(b"c").expect("write");
    // OpenSSL forgets a TLS 1.2 session whose connection ends without close_notify.
    tls.shutdown().expect("close_notify");
    served.join().expect("the server thread");
    let reused = tls.ssl().session_reused();
    // Without a new ticket, TLS 1.2 resumes the connection's own session next (OpenSSL does not
    // call back when it resumes one, even with a renewed ticket). TLS 1.3 clients use a ticket
    // once, so every handshake must bring a new one.
    let kept = match version {
        SslVersion::TLS1_2 => tls.ssl().session().map(|s| s.to_owned()),
        _ => None,
    };
    let session = ticketed.lock().expect("lock").take().or(kept).expect("a new ticket");
    (reused, session)
}

#[test]
fn sessions_resume_with_the_same_keys_and_after_a_rotation() {
    for version in VERSIONS {
        let keys = store(&[1]);
        let ctx = server(keys.clone());
        let (reused, session) = handshake(&ctx, version, None);
        assert!(!reused, "{version:?}: a first handshake is a full one");
        let (reused, session) = handshake(&ctx, version, Some(&session));
        assert!(reused, "{version:?}: resumed with the same key");
        // Rotation: a new key encrypts, the old one still decrypts.
        keys.take_secrets(&[Secret::new(vec![2; 80]), Secret::new(vec![1; 80])]);
        let (reused, renewed) = handshake(&ctx, version, Some(&session));
        assert!(reused, "{version:?}: an older key still resumes");
        // The renewed ticket is made with the new key: it resumes once the old key is gone.
        keys.take_secrets(&[Secret::new(vec![2; 80])]);
        let (reused, _) = handshake(&ctx, version, Some(&renewed));
        assert!(reused, "{version:?}: the renewed ticket uses the current key");
    }
}

#[test]
fn keys_the_server_does_not_hold_mean_a_full_handshake_not_a_failure() {
    for version in VERSIONS {
        let (first, other) = (server(store(&[1])), server(store(&[9, 8])));
        let (_, session) = handshake(&first, version, None);
        let (reused, _) = handshake(&other, version, Some(&session));
        assert!(!reused, "{version:?}: another instance's ticket is not resumed");
    }
}

#[cfg(feature = "aws-lc")]
#[test]
fn aws_lc_calls_accept_good_values_and_refuse_bad_ones() {
    let mut b = SslContextBuilder::new(SslMethod::tls_server()).expect("a context");
    assert!(super::set_ciphersuites(&mut b, "TLS_AES_128_GCM_SHA256:TLS_CHACHA20_POLY1305_SHA256").is_ok());
    assert!(super::set_ciphersuites(&mut b, "NOT_A_SUITE").is_err());
    assert!(super::set_ciphersuites(&mut b, "TLS_AES_128_GCM_SHA256\0x").is_err());
    assert!(super::set_num_tickets(&mut b, 1).is_ok());
    assert!(super::set_ocsp_response(&mut b, b"\x30\x03\x0a\x01\x00").is_ok());
}

/// The TLS 1.3 suite a client that lists `client_suites` gets from `server`.
#[cfg(feature = "aws-lc")]
fn tls13_suite(server: &SslContext, client_suites: &str) -> String {
    let (near, far) = UnixStream::pair().expect("a socket pair");
    let server = server.clone();
    let served = std::thread::spawn(move || {
        let mut tls = Ssl::new(&server).expect("ssl").accept(far).expect("the server's handshake");
        tls.write_all(b"s").expect("write");
    });
    let mut client = SslContextBuilder::new(SslMethod::tls_client()).expect("a client context");
    client.set_verify(SslVerifyMode::NONE);
    client.set_min_proto_version(Some(SslVersion::TLS1_3)).expect("min");
    super::set_ciphersuites(&mut client, client_suites).expect("the client's suites");
    let mut tls = Ssl::new(&client.build()).expect("ssl").connect(near).expect("the client's handshake");
    let mut byte = [0; 1];
    tls.read_exact(&mut byte).expect("read");
    served.join().expect("the server thread");
    tls.ssl().current_cipher().expect("a cipher").name().to_owned()
}

#[cfg(feature = "aws-lc")]
#[test]
fn tls13_suites_follow_the_servers_order_when_it_prefers_its_own() {
    const OURS: &str = "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256";
    const OPENSSL_CLIENTS: &str = "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256";
    let build = |suites: &str, prefer: bool| {
        let mut b = server_builder(store(&[1]));
        super::set_ciphersuites(&mut b, suites).expect("suites");
        if prefer {
            super::prefer_server_ciphersuites(&mut b, suites).expect("the server's order");
        }
        b.build()
    };
    // Without the preference, AWS-LC takes the client's order.
    assert_eq!(tls13_suite(&build(OURS, false), OPENSSL_CLIENTS), "TLS_AES_256_GCM_SHA384");
    let ours = build(OURS, true);
    assert_eq!(tls13_suite(&ours, OPENSSL_CLIENTS), "TLS_AES_128_GCM_SHA256");
    assert_eq!(tls13_suite(&ours, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384"), "TLS_AES_128_GCM_SHA256");
    // Our first suite not offered: our next one the client has.
    assert_eq!(tls13_suite(&ours, "TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384"), "TLS_AES_256_GCM_SHA384");
    let chacha_first = build("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_128_GCM_SHA256", true);
    assert_eq!(tls13_suite(&chacha_first, OPENSSL_CLIENTS), "TLS_CHACHA20_POLY1305_SHA256");
}
