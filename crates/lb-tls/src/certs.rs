//! Reading certificates: PEM files holding the certificate, its chain and the private key; the
//! host names each one serves (for SNI); the OCSP response to staple with it.

use std::path::{Path, PathBuf};

use openssl::asn1::Asn1Time;
use openssl::ocsp::OcspResponse;
use openssl::pkey::{PKey, Private};
use openssl::x509::X509;

use crate::config::CertSource;
use crate::Error;

/// One certificate, read and checked.
#[derive(Debug)]
pub(crate) struct LoadedCert {
    pub(crate) path: PathBuf,
    pub(crate) cert: X509,
    pub(crate) chain: Vec<X509>,
    pub(crate) key: PKey<Private>,
    /// The DER OCSP response to staple.
    pub(crate) ocsp: Option<Vec<u8>>,
    /// DNS names (lowercase) from subjectAltName, or the subject CN when there is none;
    /// wildcards stay written `*.example.com`.
    pub(crate) names: Vec<String>,
}

/// A certificate file (chain and key) or OCSP response larger than this is refused: real ones
/// are a few KiB, and reading a wrong path whole (`/dev/zero`, a log) must not exhaust memory.
const MAX_FILE: u64 = 1024 * 1024;

/// `path` read whole, refused past [`MAX_FILE`].
fn read_capped(path: &Path) -> Result<Vec<u8>, Error> {
    use std::io::Read as _;
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| Error::Read { path: path.to_path_buf(), source: e })?;
    if bytes.len() as u64 > MAX_FILE {
        let reason = "larger than 1 MiB: not a certificate file".to_owned();
        return Err(Error::Pem { path: path.to_path_buf(), reason });
    }
    Ok(bytes)
}

/// Reads one certificate entry. Every error names the file.
pub(crate) fn load(source: &CertSource, warnings: &mut Vec<String>) -> Result<LoadedCert, Error> {
    let path = &source.pem;
    let pem = |reason: String| Error::Pem { path: path.clone(), reason };
    let bytes = read_capped(path)?;
    let mut certs = X509::stack_from_pem(&bytes).map_err(|e| pem(format!("not a PEM certificate file: {e}")))?;
    if certs.is_empty() {
        return Err(pem("no certificate in it".to_owned()));
    }
    let cert = certs.remove(0);
    let key = PKey::private_key_from_pem(&bytes).map_err(|_| pem("no private key in it (or not PEM)".to_owned()))?;
    let public = cert.public_key().map_err(|e| pem(format!("unreadable public key: {e}")))?;
    if !public.public_eq(&key) {
        return Err(pem("the private key does not match the certificate".to_owned()));
    }
    if let Ok(now) = Asn1Time::days_from_now(0) {
        if cert.not_after() < now {
            warnings.push(format!("{}: the certificate expired on {}", path.display(), cert.not_after()));
        }
    }
    let ocsp_path = match &source.ocsp {
        Some(p) => Some(p.clone()),
        None => {
            let beside = PathBuf::from(format!("{}.ocsp", path.display()));
            beside.is_file().then_some(beside)
        }
    };
    let ocsp = match ocsp_path {
        Some(p) => Some(read_ocsp(&p)?),
        None => None,
    };
    let names = names(&cert);
    if names.is_empty() {
        warnings.push(format!("{}: the certificate names no host (no DNS subjectAltName, no CN)", path.display()));
    }
    Ok(LoadedCert { path: path.clone(), cert, chain: certs, key, ocsp, names })
}

/// A DER OCSP response, checked to parse.
fn read_ocsp(path: &Path) -> Result<Vec<u8>, Error> {
    let bytes = read_capped(path)?;
    OcspResponse::from_der(&bytes)
        .map_err(|e| Error::Ocsp { path: path.to_path_buf(), reason: format!("not a DER OCSP response: {e}") })?;
    Ok(bytes)
}

fn names(cert: &X509) -> Vec<String> {
    let mut names: Vec<String> = cert
        .subject_alt_names()
        .map(|sans| sans.iter().filter_map(|n| n.dnsname().map(str::to_ascii_lowercase)).collect())
        .unwrap_or_default();
    if names.is_empty() {
        names = cert
            .subject_name()
            .entries_by_nid(openssl::nid::Nid::COMMONNAME)
            .filter_map(|e| e.data().to_string().ok().map(|s| s.to_ascii_lowercase()))
            .collect();
    }
    names
}

/// The `*.pem` files of a certificate directory, in name order. One that does not load is a
/// warning and is skipped: it must not stop the others from serving.
pub(crate) fn load_dir(dir: &Path, warnings: &mut Vec<String>) -> Result<Vec<LoadedCert>, Error> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::Read { path: dir.to_path_buf(), source: e })?;
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "pem") && p.is_file())
        .collect();
    paths.sort();
    let mut loaded = Vec::new();
    for pem in paths {
        match load(&CertSource { pem, ocsp: None }, warnings) {
            Ok(cert) => loaded.push(cert),
            Err(e) => warnings.push(format!("skipped: {e}")),
        }
    }
    Ok(loaded)
}
