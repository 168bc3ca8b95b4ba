//! The TLS library beneath the openssl crate, chosen by one Cargo feature (`aws-lc`, the
//! default; `vendored`, OpenSSL 3.5 built from source; neither: the system's OpenSSL). This is
//! the one place that knows which: the rest of lb-tls calls these functions and never asks.
//!
//! The openssl crate wraps a few calls for OpenSSL only (TLS 1.3 cipher suites, the number of
//! tickets, the OCSP response); on AWS-LC they go through [`crate::ffi`] to the functions
//! AWS-LC has for the same job.

use openssl::error::ErrorStack;
use openssl::ssl::{SslContextBuilder, SslOptions};

/// The library's own name and version, as it reports it at run time (`OpenSSL 3.0.17 1 Jul
/// 2025`, `OpenSSL 1.1.1 (compatible; AWS-LC 1.55.0)`): what `lb-tls -V` and `show proc` print.
pub fn tls_library() -> &'static str {
    openssl::version::version()
}

/// Options every context sets besides the protocol holes: no renegotiation, no compression.
/// AWS-LC has no TLS compression at all, so there is nothing to switch off.
pub(crate) fn base_options() -> SslOptions {
    #[cfg(feature = "aws-lc")]
    {
        SslOptions::NO_RENEGOTIATION
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        SslOptions::NO_RENEGOTIATION | SslOptions::NO_COMPRESSION
    }
}

/// The TLS 1.2-and-older cipher list, OpenSSL syntax. AWS-LC has no security levels, so an
/// `@SECLEVEL=N` element (which Debian's OpenSSL needs for TLS 1.0/1.1) is dropped rather than
/// refused: a configuration written for OpenSSL means the same with AWS-LC.
pub(crate) fn set_cipher_list(b: &mut SslContextBuilder, list: &str) -> Result<(), ErrorStack> {
    if cfg!(feature = "aws-lc") {
        let kept: Vec<&str> = list.split(':').filter(|c| !c.trim().starts_with("@SECLEVEL=")).collect();
        b.set_cipher_list(&kept.join(":"))
    } else {
        b.set_cipher_list(list)
    }
}

/// The TLS 1.3 cipher suites (`TLS_AES_128_GCM_SHA256:…`).
pub(crate) fn set_ciphersuites(b: &mut SslContextBuilder, suites: &str) -> Result<(), ErrorStack> {
    #[cfg(feature = "aws-lc")]
    {
        crate::ffi::set_ciphersuites(b, suites)
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        b.set_ciphersuites(suites)
    }
}

/// TLS 1.3 suites picked in the order of `suites` rather than the client's (with
/// `prefer_server_ciphers`). OpenSSL does it with `SSL_OP_CIPHER_SERVER_PREFERENCE`, which
/// AWS-LC applies to TLS 1.2 only.
pub(crate) fn prefer_server_ciphersuites(b: &mut SslContextBuilder, suites: &str) -> Result<(), ErrorStack> {
    #[cfg(feature = "aws-lc")]
    {
        crate::ffi::prefer_server_ciphersuites(b, suites)
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        let _ = (b, suites);
        Ok(())
    }
}

/// How many TLS 1.3 tickets a full handshake sends.
pub(crate) fn set_num_tickets(b: &mut SslContextBuilder, tickets: usize) -> Result<(), ErrorStack> {
    #[cfg(feature = "aws-lc")]
    {
        crate::ffi::set_num_tickets(b, tickets)
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        b.set_num_tickets(tickets)
    }
}

/// Staple `response` (a DER OCSP response) to every handshake on this context's certificate.
pub(crate) fn set_ocsp_response(b: &mut SslContextBuilder, response: Vec<u8>) -> Result<(), ErrorStack> {
    #[cfg(feature = "aws-lc")]
    {
        // AWS-LC keeps the response with the certificate and sends it when asked: no callback.
        crate::ffi::set_ocsp_response(b, &response)
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        b.set_status_callback(move |ssl| {
            ssl.set_ocsp_status(&response)?;
            Ok(true)
        })
    }
}

/// A handshake failure's reason as OpenSSL words it (`unsupported protocol`, `no shared
/// cipher`, `tlsv1 alert unknown ca`), which AWS-LC spells as its error constant
/// (`UNSUPPORTED_PROTOCOL`): operators grep logs for the words whatever the build.
pub(crate) fn reason_words(reason: &str) -> std::borrow::Cow<'_, str> {
    if cfg!(feature = "aws-lc") && reason.bytes().all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_') {
        reason.to_ascii_lowercase().replace('_', " ").into()
    } else {
        reason.into()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn reasons_read_as_openssl_words_them() {
        let words = super::reason_words("UNSUPPORTED_PROTOCOL");
        if cfg!(feature = "aws-lc") {
            assert_eq!(words, "unsupported protocol");
            assert_eq!(super::reason_words("TLSV1_ALERT_UNKNOWN_CA"), "tlsv1 alert unknown ca");
        } else {
            assert_eq!(words, "UNSUPPORTED_PROTOCOL");
        }
        assert_eq!(super::reason_words("no shared cipher"), "no shared cipher");
    }
}
