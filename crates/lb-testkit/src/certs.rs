//! Test certificates made with the real `openssl` command: a CA, server certificates for any
//! names (wildcards too) as PEM files holding certificate, chain and key, client certificates
//! (from the CA, or from a CA nobody trusts), and OCSP responses (`openssl ocsp` as responder).
//! Keys are ECDSA P-256: quick to make, and what a fast terminator serves;
//! [`TestCerts::server_rsa`] makes an RSA one, from an RSA CA, for what differs by key type.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA and what it signed, in a temporary directory removed on drop.
#[derive(Debug)]
pub struct TestCerts {
    dir: tempfile::TempDir,
    serial: std::cell::Cell<u32>,
}

/// A new key's type, as `openssl req` makes it.
#[derive(Debug, Clone, Copy)]
enum Key {
    /// ECDSA P-256.
    Ec,
    /// RSA 2048.
    Rsa,
}

impl Key {
    fn newkey(self) -> &'static [&'static str] {
        match self {
            Key::Ec => &["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256"],
            Key::Rsa => &["-newkey", "rsa:2048"],
        }
    }
}

fn openssl(dir: &Path, args: &[&str]) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("running openssl");
    assert!(out.status.success(), "openssl {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
}

impl TestCerts {
    /// A new CA (`ca.pem`, `ca.key`) and a second, untrusted one (`other-ca.pem`).
    pub fn new() -> TestCerts {
        let dir = tempfile::Builder::new().prefix("lb-tls-certs-").tempdir().expect("temporary directory");
        for (name, cn) in [("ca", "lb test CA"), ("other-ca", "untrusted CA")] {
            make_ca(dir.path(), name, cn, Key::Ec);
        }
        TestCerts { dir, serial: std::cell::Cell::new(1) }
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The CA certificate clients trust.
    pub fn ca(&self) -> PathBuf {
        self.dir.path().join("ca.pem")
    }

    /// Makes `<file>.pem` (certificate, CA chain, key) for the DNS names `names` (the first is
    /// also the CN), signed by the CA; returns its path. `<file>.crt` and `<file>.key` are the
    /// parts alone.
    pub fn server(&self, file: &str, names: &[&str]) -> PathBuf {
        self.sign(file, names, "ca", "serverAuth", Key::Ec)
    }

    /// [`TestCerts::server`] with an RSA 2048 key, signed by an RSA CA ([`TestCerts::rsa_ca`],
    /// made at the first call): the certificate's signature algorithm is
    /// `sha256WithRSAEncryption` and its key RSA, where the ECDSA ones say `ecdsa-with-SHA256`
    /// and EC.
    pub fn server_rsa(&self, file: &str, names: &[&str]) -> PathBuf {
        if !self.rsa_ca().exists() {
            make_ca(self.dir.path(), "rsa-ca", "lb test RSA CA", Key::Rsa);
        }
        self.sign(file, names, "rsa-ca", "serverAuth", Key::Rsa)
    }

    /// The CA of [`TestCerts::server_rsa`]'s certificates.
    pub fn rsa_ca(&self) -> PathBuf {
        self.dir.path().join("rsa-ca.pem")
    }

    /// A client certificate `<file>.crt` + `<file>.key` with CN `cn`, from the trusted CA
    /// (`trusted`) or from the untrusted one; returns (certificate, key).
    pub fn client(&self, file: &str, cn: &str, trusted: bool) -> (PathBuf, PathBuf) {
        self.sign(file, &[cn], if trusted { "ca" } else { "other-ca" }, "clientAuth", Key::Ec);
        (self.dir.path().join(format!("{file}.crt")), self.dir.path().join(format!("{file}.key")))
    }

    fn sign(&self, file: &str, names: &[&str], ca: &str, usage: &str, key: Key) -> PathBuf {
        let dir = self.dir.path();
        let serial = self.serial.get();
        self.serial.set(serial + 1);
        let cn = names.first().copied().unwrap_or("unnamed");
        let (keyout, csr, subject) = (format!("{file}.key"), format!("{file}.csr"), format!("/CN={cn}"));
        let mut args = vec!["req"];
        args.extend(key.newkey());
        args.extend(["-nodes", "-keyout", &keyout, "-out", &csr, "-subj", &subject]);
        openssl(dir, &args);
        let san: Vec<String> = names.iter().map(|n| format!("DNS:{n}")).collect();
        let ext = format!("subjectAltName={}\nextendedKeyUsage={usage}\n", san.join(","));
        std::fs::write(dir.join(format!("{file}.ext")), ext).expect("writing the extensions file");
        openssl(
            dir,
            &[
                "x509",
                "-req",
                "-in",
                &format!("{file}.csr"),
                "-CA",
                &format!("{ca}.pem"),
                "-CAkey",
                &format!("{ca}.key"),
                "-set_serial",
                &format!("{serial}"),
                "-out",
                &format!("{file}.crt"),
                "-days",
                "30",
                "-extfile",
                &format!("{file}.ext"),
            ],
        );
        let read = |name: String| std::fs::read(dir.join(name)).expect("reading a generated file");
        let mut pem = read(format!("{file}.crt"));
        pem.extend(read(format!("{ca}.pem")));
        pem.extend(read(format!("{file}.key")));
        let path = dir.join(format!("{file}.pem"));
        std::fs::write(&path, pem).expect("writing the PEM file");
        path
    }

    /// A DER OCSP response saying "good" for `<file>.crt`, signed by the CA, valid a day:
    /// written to `<file>.ocsp`, whose path is returned.
    pub fn ocsp(&self, file: &str) -> PathBuf {
        let dir = self.dir.path();
        let serial = Command::new("openssl")
            .args(["x509", "-noout", "-serial", "-in", &format!("{file}.crt")])
            .current_dir(dir)
            .output()
            .expect("openssl x509 -serial");
        let serial = String::from_utf8_lossy(&serial.stdout).trim().trim_start_matches("serial=").to_owned();
        let index = format!("V\t491231235959Z\t\t{serial}\tunknown\t/CN={file}\n");
        std::fs::write(dir.join(format!("{file}.index")), index).expect("writing the OCSP index");
        openssl(
            dir,
            &[
                "ocsp",
                "-issuer",
                "ca.pem",
                "-cert",
                &format!("{file}.crt"),
                "-no_nonce",
                "-reqout",
                &format!("{file}.req"),
            ],
        );
        openssl(
            dir,
            &[
                "ocsp",
                "-index",
                &format!("{file}.index"),
                "-rsigner",
                "ca.pem",
                "-rkey",
                "ca.key",
                "-CA",
                "ca.pem",
                "-reqin",
                &format!("{file}.req"),
                "-respout",
                &format!("{file}.ocsp"),
                "-ndays",
                "1",
            ],
        );
        dir.join(format!("{file}.ocsp"))
    }
}

/// A self-signed CA, `<name>.pem` and `<name>.key` in `dir`.
fn make_ca(dir: &Path, name: &str, cn: &str, key: Key) {
    let (keyout, out, subject) = (format!("{name}.key"), format!("{name}.pem"), format!("/CN={cn}"));
    let mut args = vec!["req", "-x509"];
    args.extend(key.newkey());
    args.extend(["-nodes", "-keyout", &keyout, "-out", &out, "-days", "30", "-subj", &subject]);
    openssl(dir, &args);
}

impl Default for TestCerts {
    fn default() -> Self {
        TestCerts::new()
    }
}
