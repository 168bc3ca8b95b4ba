//! What the fuzz targets share: configuration text taken from fuzz input, the check of the
//! diagnostics every loader returns, and the files lb-tls's loader reads.
//!
//! The targets themselves are in `fuzz_targets/`, one per input format; `scripts/fuzz` runs them
//! all with figures (docs/reliability.md).

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use lb_config::Diagnostic;
use serde::Deserialize as _;

/// Whether a string names a device or a kernel file. The loaders read the files a configuration
/// names (error pages, certificates, ticket keys), as the operator asks; `/dev/zero` or
/// `/proc/kcore` would test this machine, not the parser, so inputs naming them are skipped.
/// `/dev/log`, the syslog socket a log target names, stays (opening it fails at once).
fn names_system(s: &str) -> bool {
    let dev_log = |rest: &str| {
        rest.strip_prefix("log")
            .is_some_and(|after| !after.starts_with(|c: char| c.is_alphanumeric() || "/._-".contains(c)))
    };
    s.contains("proc/") || s.contains("sys/") || s.match_indices("dev/").any(|(at, _)| !dev_log(&s[at + 4..]))
}

/// The fuzz input as configuration text, or `None` for input to skip: not UTF-8 (every loader
/// reads text: a file that is not UTF-8 fails before parsing), or naming a device or kernel file
/// ([`names_system`]) in any string, keys and escapes (`"\x2fdev\x2fzero"`) included, hence the
/// YAML is read once here.
pub fn config_text(data: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(data).ok()?;
    if names_system(text) {
        return None;
    }
    // Any document that parses: the loaders read only the first, serde_yaml refuses several.
    for document in serde_yaml::Deserializer::from_str(text) {
        let Ok(value) = serde_yaml::Value::deserialize(document) else { break };
        if any_string(&value, &names_system) {
            return None;
        }
    }
    Some(text)
}

fn any_string(value: &serde_yaml::Value, test: &dyn Fn(&str) -> bool) -> bool {
    use serde_yaml::Value;
    match value {
        Value::String(s) => test(s),
        Value::Sequence(items) => items.iter().any(|v| any_string(v, test)),
        Value::Mapping(map) => map.iter().any(|(k, v)| any_string(k, test) || any_string(v, test)),
        Value::Tagged(tagged) => any_string(&tagged.value, test),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// What every refused configuration must come with: at least one diagnostic, each naming the
/// file it was given, a line within the text (or its end) and a column from 1, and saying
/// something. The end of a text without a final line break is where libyaml and yaml-rust2 mark
/// it: column 1 of the line after the last.
///
/// # Panics
/// When a diagnostic breaks that.
pub fn check_diagnostics(diagnostics: &[Diagnostic], file: &str, text: &str) {
    assert!(!diagnostics.is_empty(), "refused without a diagnostic");
    // YAML's line breaks: LF, CR (alone or before LF), and the NEL, LS and PS libyaml counts.
    let mut breaks = 0;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => breaks += 1,
            _ => {}
        }
    }
    let end = if text.ends_with(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']) { breaks + 1 } else { breaks + 2 };
    for d in diagnostics {
        assert_eq!(d.file, file, "{d}");
        let within = d.line >= 1 && (d.line <= breaks + 1 || (d.line == end && d.column == 1));
        assert!(within, "{d}: line out of the text ({} lines)", breaks + 1);
        assert!(d.column >= 1, "{d}");
        assert!(!d.message.trim().is_empty(), "{d}: no message");
    }
}

/// The directory lb-tls configurations under fuzzing are read from: `cert.pem` (a certificate
/// and its key), `certs.d/` holding a copy, `ticket.key` (80 bytes, mode 0600). Made once per
/// process, anew: no key is committed to the repository. The fixed name (per user) means one
/// directory however many runs; files are replaced by rename, so parallel jobs never see half.
pub fn tls_base() -> &'static Path {
    static BASE: OnceLock<PathBuf> = OnceLock::new();
    BASE.get_or_init(|| match make_tls_base() {
        Ok(dir) => dir,
        Err(e) => panic!("making lb-tls's test files: {e}"),
    })
}

fn make_tls_base() -> Result<PathBuf, Box<dyn std::error::Error>> {
    let user = std::env::var("USER").unwrap_or_else(|_| "fuzz".to_owned());
    let dir = std::env::temp_dir().join(format!("lb-fuzz-tls-{user}"));
    std::fs::create_dir_all(dir.join("certs.d"))?;
    let pem = test_certificate()?;
    replace(&dir.join("cert.pem"), &pem)?;
    replace(&dir.join("certs.d/fuzz.pem"), &pem)?;
    let mut key = [0u8; 80];
    openssl::rand::rand_bytes(&mut key)?;
    replace(&dir.join("ticket.key"), &key)?;
    Ok(dir)
}

/// Writes `path` whole, mode 0600 (tempfile's), through a rename.
fn replace(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(bytes)?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// A self-signed P-256 certificate for `fuzz.example`, then its key, in PEM.
fn test_certificate() -> Result<Vec<u8>, openssl::error::ErrorStack> {
    use openssl::asn1::Asn1Time;
    use openssl::bn::BigNum;
    use openssl::ec::{EcGroup, EcKey};
    use openssl::hash::MessageDigest;
    use openssl::nid::Nid;
    use openssl::pkey::PKey;
    use openssl::x509::extension::SubjectAlternativeName;
    use openssl::x509::{X509Builder, X509NameBuilder};

    let group = EcGroup::from_curve_name(Nid::X9_62_PRIME256V1)?;
    let key = PKey::from_ec_key(EcKey::generate(&group)?)?;
    let mut name = X509NameBuilder::new()?;
    name.append_entry_by_nid(Nid::COMMONNAME, "fuzz.example")?;
    let name = name.build();
    let mut cert = X509Builder::new()?;
    cert.set_version(2)?;
    let serial = BigNum::from_u32(1)?.to_asn1_integer()?;
    cert.set_serial_number(&serial)?;
    cert.set_subject_name(&name)?;
    cert.set_issuer_name(&name)?;
    cert.set_pubkey(&key)?;
    let (from, until) = (Asn1Time::days_from_now(0)?, Asn1Time::days_from_now(3650)?);
    cert.set_not_before(&from)?;
    cert.set_not_after(&until)?;
    let san = SubjectAlternativeName::new().dns("fuzz.example").build(&cert.x509v3_context(None, None))?;
    cert.append_extension(san)?;
    cert.sign(&key, MessageDigest::sha256())?;
    let mut pem = cert.build().to_pem()?;
    pem.extend(key.private_key_to_pem_pkcs8()?);
    Ok(pem)
}
