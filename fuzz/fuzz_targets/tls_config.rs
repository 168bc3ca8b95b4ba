//! lb-tls's configuration loader (`lb_tls::Config::parse_in`, what `Config::load` runs on a
//! file's text) on arbitrary text, relative paths taken from a directory holding a test
//! certificate (`cert.pem`, `certs.d/`) and ticket key (`ticket.key`), so that accepted text goes
//! on to read them and build the TLS contexts: a refusal is a list of located diagnostics, never
//! a panic; an accepted configuration has frontends, each with certificates and protocols.
#![no_main]

use libfuzzer_sys::fuzz_target;

const FILE: &str = "fuzz.yaml";

fuzz_target!(|data: &[u8]| {
    let Some(text) = lb_fuzz::config_text(data) else { return };
    match lb_tls::Config::parse_in(text, FILE, lb_fuzz::tls_base()) {
        Ok(config) => {
            assert!(!config.frontends.is_empty(), "accepted without a frontend");
            for fe in &config.frontends {
                assert!(!fe.tls.protocols.is_empty(), "{}: no protocol", fe.bind);
                assert!(
                    !(fe.tls.certificates.is_empty() && fe.tls.cert_dirs.is_empty()),
                    "{}: no certificate",
                    fe.bind
                );
            }
            assert!(config.listen_addrs().len() >= config.frontends.len());
        }
        Err(lb_tls::Error::Invalid { diagnostics }) => lb_fuzz::check_diagnostics(&diagnostics, FILE, text),
        Err(_) => {}
    }
});
