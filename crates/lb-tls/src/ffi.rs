//! The calls into the TLS library that the openssl crate does not wrap: lb-tls's one module
//! with `unsafe`. Each function takes the openssl crate's safe types and returns its errors, so
//! callers never see a pointer.
#![allow(unsafe_code)]

#[cfg(feature = "aws-lc")]
use std::ffi::CString;

#[cfg(feature = "aws-lc")]
use openssl::error::ErrorStack;
#[cfg(feature = "aws-lc")]
use openssl::ssl::SslContextBuilder;

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

#[cfg(test)]
mod tests {
    use openssl::ssl::{SslContextBuilder, SslMethod};

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

    #[test]
    fn a_context_builds() {
        assert!(SslContextBuilder::new(SslMethod::tls_server()).is_ok());
    }
}
