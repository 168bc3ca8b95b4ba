//! Test certificates made with the real `openssl` command: a CA, server certificates for any
//! names (wildcards too) as PEM files holding certificate, chain and key, client certificates
//! (from the CA, or from a CA nobody trusts), and OCSP responses (`openssl ocsp` as responder).
//! Keys are ECDSA P-256: quick to make, and what a fast terminator serves.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A CA and what it signed, in a temporary directory removed on drop.
#[derive(Debug)]
pub struct TestCerts {
    dir: tempfile::TempDir,
    serial: std::cell::Cell<u32>,
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
            openssl(
                dir.path(),
                &[
                    "req",
                    "-x509",
                    "-newkey",
                    "ec",
                    "-pkeyopt",
                    "ec_paramgen_curve:P-256",
                    "-nodes",
                    "-keyout",
                    &format!("{name}.key"),
                    "-out",
                    &format!("{name}.pem"),
                    "-days",
                    "30",
                    "-subj",
                    &format!("/CN={cn}"),
                ],
            );
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
        self.sign(file, names, "ca", "serverAuth")
    }

    /// A client certificate `<file>.crt` + `<file>.key` with CN `cn`, from the trusted CA
    /// (`trusted`) or from the untrusted one; returns (certificate, key).
    pub fn client(&self, file: &str, cn: &str, trusted: bool) -> (PathBuf, PathBuf) {
        self.sign(file, &[cn], if trusted { "ca" } else { "other-ca" }, "clientAuth");
        (self.dir.path().join(format!("{file}.crt")), self.dir.path().join(format!("{file}.key")))
    }

    fn sign(&self, file: &str, names: &[&str], ca: &str, usage: &str) -> PathBuf {
        let dir = self.dir.path();
        let serial = self.serial.get();
        self.serial.set(serial + 1);
        let cn = names.first().copied().unwrap_or("unnamed");
        openssl(
            dir,
            &[
                "req",
                "-newkey",
                "ec",
                "-pkeyopt",
                "ec_paramgen_curve:P-256",
                "-nodes",
                "-keyout",
                &format!("{file}.key"),
                "-out",
                &format!("{file}.csr"),
                "-subj",
                &format!("/CN={cn}"),
            ],
        );
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

impl Default for TestCerts {
    fn default() -> Self {
        TestCerts::new()
    }
}
