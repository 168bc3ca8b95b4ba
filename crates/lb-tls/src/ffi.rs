//! The calls into the TLS library that the openssl crate does not wrap: lb-tls's one module
//! with `unsafe`. Each function takes the openssl crate's safe types and returns its errors, so
//! callers never see a pointer.
//!
//! - Session-ticket keys: [`set_ticket_keys`] puts a [`TicketStore`] on a context and installs
//!   the callback that encrypts tickets with its first key and decrypts with any of them
//!   (`SSL_CTX_set_tlsext_ticket_key_cb`, the one form OpenSSL 3 and AWS-LC share; it serves
//!   TLS 1.2 tickets and TLS 1.3 resumption alike), and [`set_session_timeout`] the lifetime a
//!   ticket or cached session is good for.
//! - On AWS-LC, what the openssl crate wraps for OpenSSL only: TLS 1.3 suites, the ticket
//!   count, the OCSP response; and the server's order for TLS 1.3 suites
//!   ([`prefer_server_ciphersuites`]), which AWS-LC does not apply itself.
//! - Read-ahead ([`set_read_ahead`]), which the openssl crate does not wrap at all.
//! - The zero-byte write ([`write_nothing`]), which the openssl crate skips.
//! - A session added to a context's cache ([`add_session`]), which the openssl crate marks
//!   unsafe: the session must come from that context (a reload hands them over).
//! - The handshake's configuration freed once it is done ([`shed_handshake_config`], AWS-LC).
#![allow(unsafe_code)]

#[cfg(feature = "aws-lc")]
use std::ffi::CString;
use std::os::raw::{c_int, c_uchar};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use foreign_types::ForeignTypeRef as _;
use openssl::error::ErrorStack;
use openssl::ex_data::Index;
use openssl::ssl::{SslContext, SslContextBuilder, SslRef, SslSessionRef};
use openssl_sys::{EVP_CIPHER_CTX, HMAC_CTX, SSL};

use crate::tickets::{TicketStore, NAME_BYTES};

/// Where each context keeps its ticket keys (one index for the process).
static STORE_INDEX: OnceLock<Index<SslContext, Arc<TicketStore>>> = OnceLock::new();

/// `SSL_version`'s answer for TLS 1.3.
const TLS1_3_VERSION: c_int = 0x0304;

/// The IV a ticket callback fills: AES-CBC's 16 bytes (OpenSSL's EVP_MAX_IV_LENGTH is 16).
const IV_BYTES: usize = 16;

/// Tickets on this context are made and read with `store`'s keys.
pub(crate) fn set_ticket_keys(b: &mut SslContextBuilder, store: Arc<TicketStore>) -> Result<(), ErrorStack> {
    let index = match STORE_INDEX.get() {
        Some(index) => *index,
        None => {
            // Two loads at once may each make one; the first kept serves both.
            let fresh = SslContext::new_ex_index()?;
            *STORE_INDEX.get_or_init(|| fresh)
        }
    };
    b.set_ex_data(index, store);
    #[cfg(feature = "aws-lc")]
    {
        // SAFETY: `b` owns a live SSL_CTX; the callback is a plain function that lives as long
        // as the program and only reads the store kept in the context's ex_data.
        check(unsafe { openssl_sys::SSL_CTX_set_tlsext_ticket_key_cb(b.as_ptr(), Some(ticket_key)) })
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        /// OpenSSL's `SSL_CTX_set_tlsext_ticket_key_cb` is this control (a macro in its headers).
        const SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB: c_int = 72;
        type TicketCallback = unsafe extern "C" fn(
            *mut SSL,
            *mut c_uchar,
            *mut c_uchar,
            *mut EVP_CIPHER_CTX,
            *mut HMAC_CTX,
            c_int,
        ) -> c_int;
        // SAFETY: OpenSSL stores the generic function pointer and calls it back with exactly the
        // ticket callback's signature, which `ticket_key` has; the transmute only erases it as
        // the macro's cast does.
        let callback = unsafe { std::mem::transmute::<TicketCallback, unsafe extern "C" fn()>(ticket_key) };
        // SAFETY: `b` owns a live SSL_CTX, and the control takes a function pointer.
        let ret = unsafe {
            openssl_sys::SSL_CTX_callback_ctrl__fixed_rust(
                b.as_ptr(),
                SSL_CTRL_SET_TLSEXT_TICKET_KEY_CB,
                Some(callback),
            )
        };
        if ret == 1 {
            Ok(())
        } else {
            Err(ErrorStack::get())
        }
    }
}

/// Read ahead: the library asks the socket for as much as its buffer holds instead of a
/// record's 5-byte header and then its body. One read per burst instead of two, and a short
/// read tells tokio the socket is drained, so it does not try again only to get `EAGAIN`: two
/// system calls fewer per request on a keep-alive connection.
pub(crate) fn set_read_ahead(b: &mut SslContextBuilder) {
    // SAFETY: `b` owns a live SSL_CTX; the call sets one flag (AWS-LC: a function; OpenSSL: a
    // control, which openssl-sys wraps under the same name).
    unsafe { openssl_sys::SSL_CTX_set_read_ahead(b.as_ptr(), 1) };
}

/// How long a session (a ticket, or an entry of the session cache) may be resumed.
pub(crate) fn set_session_timeout(b: &mut SslContextBuilder, lifetime: Duration) {
    #[cfg(feature = "aws-lc")]
    {
        let secs = u32::try_from(lifetime.as_secs()).unwrap_or(u32::MAX);
        // SAFETY: `b` owns a live SSL_CTX; the call sets one number.
        unsafe { openssl_sys::SSL_CTX_set_timeout(b.as_ptr(), secs) };
        // TLS 1.3 sessions have a timeout of their own in AWS-LC (48 h unless set), which is
        // also the lifetime hint in its tickets: clients would keep tickets the keys no longer
        // decrypt after `ticket_lifetime` (found by testssl's scan).
        // SAFETY: as above.
        unsafe { openssl_sys::SSL_CTX_set_session_psk_dhe_timeout(b.as_ptr(), secs) };
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        extern "C" {
            // A function in libssl 3 that openssl-sys does not declare.
            fn SSL_CTX_set_timeout(ctx: *mut openssl_sys::SSL_CTX, t: std::os::raw::c_long) -> std::os::raw::c_long;
        }
        let secs = std::os::raw::c_long::try_from(lifetime.as_secs()).unwrap_or(std::os::raw::c_long::MAX);
        // SAFETY: `b` owns a live SSL_CTX; the call sets one number.
        unsafe { SSL_CTX_set_timeout(b.as_ptr(), secs) };
    }
}

/// The ticket callback: `encrypt` 1 fills the key name and IV and sets up the cipher and HMAC
/// with the first key; 0 looks the name up and answers 1 (the current key, TLS 1.2), 2 (an older
/// key, or TLS 1.3: resume and send a new ticket) or 0 (unknown: a full handshake, no failure);
/// -1 on an error.
unsafe extern "C" fn ticket_key(
    ssl: *mut SSL,
    name: *mut c_uchar,
    iv: *mut c_uchar,
    cipher: *mut EVP_CIPHER_CTX,
    hmac: *mut HMAC_CTX,
    encrypt: c_int,
) -> c_int {
    let Some(index) = STORE_INDEX.get() else { return -1 };
    // SAFETY: the library calls this during a handshake on `ssl`, which is live, as is its
    // context; the ex_data slot holds the `Arc<TicketStore>` that `set_ticket_keys` boxed
    // there (the openssl crate frees it with the context, which outlives the handshake).
    let store = unsafe {
        let ctx = openssl_sys::SSL_get_SSL_CTX(ssl);
        openssl_sys::SSL_CTX_get_ex_data(ctx, index.as_raw()).cast::<Arc<TicketStore>>().as_ref()
    };
    let Some(store) = store else { return -1 };
    let keys = store.keys();
    let (key, answer) = if encrypt == 1 {
        let Some(key) = keys.first() else { return -1 };
        // SAFETY: the library gives NAME_BYTES writable bytes at `name` and IV_BYTES at `iv`.
        let iv_ok = unsafe {
            std::ptr::copy_nonoverlapping(key.name().as_ptr(), name, NAME_BYTES);
            openssl_sys::RAND_bytes(iv, IV_BYTES as _) == 1
        };
        if !iv_ok {
            return -1;
        }
        (key, 1)
    } else {
        // SAFETY: the library gives the ticket's NAME_BYTES-byte key name at `name`.
        let wanted = unsafe { std::slice::from_raw_parts(name, NAME_BYTES) };
        match keys.iter().position(|k| k.name()[..] == *wanted) {
            // TLS 1.3 always gets a new ticket: clients use each one once (RFC 8446, C.4),
            // and OpenSSL sends none after a resumption answered 1.
            // SAFETY: `ssl` is the live connection being resumed.
            Some(i) if i == 0 && unsafe { openssl_sys::SSL_version(ssl) } != TLS1_3_VERSION => (&keys[i], 1),
            Some(i) => (&keys[i], 2),
            None => return 0,
        }
    };
    // SAFETY: `cipher` and `hmac` are the library's live contexts for this ticket; the keys
    // are as long as their algorithms need (AES-128/256 by length, HMAC-SHA256), `iv` holds
    // IV_BYTES, and both calls copy what they are given.
    let ready = unsafe {
        let aes =
            if key.aes_key().len() == 32 { openssl_sys::EVP_aes_256_cbc() } else { openssl_sys::EVP_aes_128_cbc() };
        let cipher_ok = if encrypt == 1 {
            openssl_sys::EVP_EncryptInit_ex(cipher, aes, std::ptr::null_mut(), key.aes_key().as_ptr(), iv)
        } else {
            openssl_sys::EVP_DecryptInit_ex(cipher, aes, std::ptr::null_mut(), key.aes_key().as_ptr(), iv)
        };
        let hmac_ok = openssl_sys::HMAC_Init_ex(
            hmac,
            key.hmac_key().as_ptr().cast(),
            key.hmac_key().len() as _,
            openssl_sys::EVP_sha256(),
            std::ptr::null_mut(),
        );
        cipher_ok == 1 && hmac_ok == 1
    };
    if ready {
        answer
    } else {
        -1
    }
}

/// 1 is success for every `SSL_CTX_set_*` here; otherwise the library's error queue says why.
#[cfg(feature = "aws-lc")]
fn check(ret: std::os::raw::c_int) -> Result<(), ErrorStack> {
    if ret == 1 {
        Ok(())
    } else {
        Err(ErrorStack::get())
    }
}

/// `SSL_CTX_set_ciphersuites` (AWS-LC): the TLS 1.3 suites, a `:`-separated list.
#[cfg(feature = "aws-lc")]
pub(crate) fn set_ciphersuites(b: &mut SslContextBuilder, suites: &str) -> Result<(), ErrorStack> {
    // A NUL inside the list cannot be passed on; as `?` it names no suite, so the library
    // refuses the list as it would any other unknown name.
    let suites = CString::new(suites.replace('\0', "?")).unwrap_or_default();
    // SAFETY: `b` owns a live SSL_CTX; the string is NUL-terminated and outlives the call, and
    // the library copies what it parses.
    check(unsafe { openssl_sys::SSL_CTX_set_ciphersuites(b.as_ptr(), suites.as_ptr()) })
}

/// The TLS 1.3 suites AWS-LC knows, by name and by the number a ClientHello lists them with.
#[cfg(feature = "aws-lc")]
const TLS13_SUITES: [(&str, u16); 3] =
    [("TLS_AES_128_GCM_SHA256", 0x1301), ("TLS_AES_256_GCM_SHA384", 0x1302), ("TLS_CHACHA20_POLY1305_SHA256", 0x1303)];

/// A context's TLS 1.3 suites in its own order of preference: the number, and the name
/// `SSL_set_ciphersuites` takes.
#[cfg(feature = "aws-lc")]
struct ServerOrder(Vec<(u16, CString)>);

/// Where each context keeps its [`ServerOrder`].
#[cfg(feature = "aws-lc")]
static ORDER_INDEX: OnceLock<Index<SslContext, ServerOrder>> = OnceLock::new();

/// TLS 1.3 suites chosen in the order of `suites` (the context's `ciphersuites`) rather than the
/// client's. AWS-LC picks TLS 1.3 suites in the client's order whatever
/// `SSL_OP_CIPHER_SERVER_PREFERENCE` says (OpenSSL honours it for both versions), so a callback
/// that runs on every ClientHello narrows that connection's TLS 1.3 suites to the first of ours
/// the client offers, when it is not the one the client lists first anyway. With the default
/// order, OpenSSL-based clients (which list AES-256-GCM first) get AES-128-GCM, whose key
/// schedule runs on SHA-256 instead of SHA-384. A name outside [`TLS13_SUITES`] leaves the
/// choice to the client, as before.
#[cfg(feature = "aws-lc")]
pub(crate) fn prefer_server_ciphersuites(b: &mut SslContextBuilder, suites: &str) -> Result<(), ErrorStack> {
    let mut order = Vec::new();
    for name in suites.split(':').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(&(known, id)) = TLS13_SUITES.iter().find(|(known, _)| *known == name) else { return Ok(()) };
        order.push((id, CString::new(known).unwrap_or_default()));
    }
    let index = match ORDER_INDEX.get() {
        Some(index) => *index,
        None => {
            let fresh = SslContext::new_ex_index()?;
            *ORDER_INDEX.get_or_init(|| fresh)
        }
    };
    b.set_ex_data(index, ServerOrder(order));
    // SAFETY: `b` owns a live SSL_CTX; the callback is a plain function that lives as long as
    // the program and only reads the order kept in the context's ex_data.
    unsafe { openssl_sys::SSL_CTX_set_select_certificate_cb(b.as_ptr(), Some(server_order)) };
    Ok(())
}

/// The ClientHello callback of [`prefer_server_ciphersuites`]. It never fails a handshake: with
/// nothing to narrow, the library chooses as it would have.
#[cfg(feature = "aws-lc")]
unsafe extern "C" fn server_order(
    hello: *const openssl_sys::SSL_CLIENT_HELLO,
) -> openssl_sys::ssl_select_cert_result_t {
    let go_on = openssl_sys::ssl_select_cert_result_t_ssl_select_cert_success;
    let Some(index) = ORDER_INDEX.get() else { return go_on };
    // SAFETY: the library calls this with the ClientHello it is processing, live for the
    // call: its `ssl` is the connection, and `cipher_suites` holds `cipher_suites_len` bytes.
    let (ssl, offered) = unsafe {
        let hello = &*hello;
        if hello.cipher_suites.is_null() {
            return go_on;
        }
        (hello.ssl, std::slice::from_raw_parts(hello.cipher_suites, hello.cipher_suites_len))
    };
    // SAFETY: `ssl` and its context are live during the handshake; the ex_data slot holds the
    // `ServerOrder` that `prefer_server_ciphersuites` put there (freed with the context, which
    // outlives the handshake). SNI has not switched contexts yet: this is the initial one.
    let order = unsafe {
        let ctx = openssl_sys::SSL_get_SSL_CTX(ssl);
        openssl_sys::SSL_CTX_get_ex_data(ctx, index.as_raw()).cast::<ServerOrder>().as_ref()
    };
    let Some(ServerOrder(order)) = order else { return go_on };
    let offered = || offered.chunks_exact(2).map(|id| u16::from_be_bytes([id[0], id[1]]));
    let ours = order.iter().find(|(id, _)| offered().any(|o| o == *id));
    let clients = offered().find(|o| order.iter().any(|(id, _)| id == o));
    if let Some((id, name)) = ours {
        if clients != Some(*id) {
            // SAFETY: `ssl` is live; the name is NUL-terminated and the library copies what it
            // parses. A failure leaves the context's suites, so the client's order decides.
            unsafe { openssl_sys::SSL_set_ciphersuites(ssl, name.as_ptr()) };
        }
    }
    go_on
}

/// `SSL_CTX_set_num_tickets` (AWS-LC).
#[cfg(feature = "aws-lc")]
pub(crate) fn set_num_tickets(b: &mut SslContextBuilder, tickets: usize) -> Result<(), ErrorStack> {
    // SAFETY: `b` owns a live SSL_CTX; the call reads nothing else.
    check(unsafe { openssl_sys::SSL_CTX_set_num_tickets(b.as_ptr(), tickets) })
}

/// `SSL_CTX_set_ocsp_response` (AWS-LC): the stapled response of the context's certificate.
#[cfg(feature = "aws-lc")]
pub(crate) fn set_ocsp_response(b: &mut SslContextBuilder, der: &[u8]) -> Result<(), ErrorStack> {
    // SAFETY: `b` owns a live SSL_CTX; `der` is valid for `der.len()` bytes during the call,
    // and the library keeps its own copy.
    check(unsafe { openssl_sys::SSL_CTX_set_ocsp_response(b.as_ptr(), der.as_ptr(), der.len()) })
}

/// `SSL_write` of nothing: flushes what the library holds back for the next write (AWS-LC's
/// TLS 1.3 session ticket). True when the socket would block (call again when it is
/// writable); any other outcome, success included, is false, its errors cleared.
pub(crate) fn write_nothing(ssl: &SslRef) -> bool {
    // SAFETY: `ssl` is a live SSL whose BIO reaches its socket (the caller polls it); a
    // zero length reads nothing at the pointer.
    let ret = unsafe { openssl_sys::SSL_write(ssl.as_ptr(), [0u8; 0].as_ptr().cast(), 0) };
    if ret > 0 {
        return false;
    }
    // SAFETY: the same SSL, asked about the call just made.
    let code = unsafe { openssl_sys::SSL_get_error(ssl.as_ptr(), ret) };
    // Whatever it pushed on this thread's error queue must not show up in a later call.
    drop(ErrorStack::get());
    code == openssl_sys::SSL_ERROR_WANT_WRITE
}

/// AWS-LC frees what only the handshake reads (the connection's copy of the configuration:
/// certificate, cipher lists, ALPN and curve preferences; about 1 KiB) once the handshake is
/// done, instead of keeping it for the connection's life. What is read of it afterwards must
/// be kept elsewhere (the PROXY header's certificate TLVs are kept on the context). OpenSSL
/// has no such switch.
pub(crate) fn shed_handshake_config(ssl: &mut SslRef) {
    #[cfg(feature = "aws-lc")]
    // SAFETY: `ssl` is a live SSL not yet handshaking; the call sets one flag.
    unsafe {
        openssl_sys::SSL_set_shed_handshake_config(ssl.as_ptr(), 1)
    };
    #[cfg(not(feature = "aws-lc"))]
    let _ = ssl;
}

/// `SSL_CTX_add_session`: `session` joins `ctx`'s session-ID cache. False when it was there.
pub(crate) fn add_session(ctx: &SslContext, session: &SslSessionRef) -> bool {
    // SAFETY: the openssl crate asks that the session was never used with another context:
    // it comes from the DER of a session this frontend's context made in the previous worker
    // (a frontend's sessions are handed to the same frontend), and the library takes its own
    // reference.
    unsafe { ctx.add_session(session) }
}

#[cfg(test)]
mod tests;
