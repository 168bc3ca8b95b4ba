//! Session-ticket keys: the first encrypts new tickets, every one decrypts. They come from the
//! master (random, renewed every `ticket_key_rotation`, each kept `ticket_lifetime` after it
//! stops being current, the same in every worker: a ticket from before a reload still resumes
//! after it), or from `ticket_key_files` (shared by several lb-tls instances behind one name,
//! re-read at every reload). The TLS library reads them through [`crate::ffi`]'s ticket
//! callback, for TLS 1.2 tickets and TLS 1.3 resumption alike.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::sync::{Arc, OnceLock, RwLock};

use aws_lc_rs::aead::LessSafeKey;

use lb_supervisor::Secret;

/// The bytes the master makes per key: a 16-byte name, a 32-byte HMAC-SHA256 key and a 32-byte
/// AES-256 key (nginx's 80-byte `ssl_session_ticket_key` layout, which key files use too).
pub(crate) const KEY_BYTES: usize = 80;
/// nginx's older 48-byte layout: name, 16-byte HMAC key, AES-128 key.
const SHORT_KEY_BYTES: usize = 48;
pub(crate) const NAME_BYTES: usize = 16;

/// One key. `Debug` shows the name's first bytes only (enough to tell keys apart in a test).
pub(crate) struct TicketKey {
    name: [u8; NAME_BYTES],
    hmac: Vec<u8>,
    aes: Vec<u8>,
    /// QUIC's sealing key, derived from this one at its first use (`quic::tickets`).
    quic: OnceLock<Option<LessSafeKey>>,
}

impl std::fmt::Debug for TicketKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TicketKey({:02x}{:02x}…, AES-{})", self.name[0], self.name[1], self.aes.len() * 8)
    }
}

impl Drop for TicketKey {
    fn drop(&mut self) {
        self.hmac.fill(0);
        self.aes.fill(0);
        std::hint::black_box((&self.hmac, &self.aes));
    }
}

impl TicketKey {
    /// 80 bytes (AES-256) or 48 (AES-128), nginx's layouts; any other length is no key.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Option<TicketKey> {
        let (hmac, aes) = match bytes.len() {
            KEY_BYTES => (16..48, 48..80),
            SHORT_KEY_BYTES => (16..32, 32..48),
            _ => return None,
        };
        let mut name = [0; NAME_BYTES];
        name.copy_from_slice(&bytes[..NAME_BYTES]);
        Some(TicketKey { name, hmac: bytes[hmac].to_vec(), aes: bytes[aes].to_vec(), quic: OnceLock::new() })
    }

    pub(crate) fn name(&self) -> &[u8; NAME_BYTES] {
        &self.name
    }

    pub(crate) fn hmac_key(&self) -> &[u8] {
        &self.hmac
    }

    pub(crate) fn aes_key(&self) -> &[u8] {
        &self.aes
    }

    /// QUIC's sealing key: `derive`d once per key (None: it could not be), then read without
    /// a lock.
    pub(crate) fn quic_sealing(&self, derive: impl FnOnce(&TicketKey) -> Option<LessSafeKey>) -> Option<&LessSafeKey> {
        self.quic.get_or_init(|| derive(self)).as_ref()
    }
}

/// The keys a worker's contexts use, replaceable while it serves.
#[derive(Debug)]
pub(crate) struct TicketStore {
    keys: RwLock<Arc<[TicketKey]>>,
    /// From `ticket_key_files`: the master's keys are not used.
    from_files: bool,
}

impl TicketStore {
    /// One key of this process's own, until the master's arrive (or for good, when lb-tls runs
    /// without a master, as in `run`).
    pub(crate) fn own() -> Result<TicketStore, String> {
        let mut bytes = [0u8; KEY_BYTES];
        openssl::rand::rand_bytes(&mut bytes).map_err(|e| format!("making a ticket key: {e}"))?;
        let key = TicketKey::from_bytes(&bytes).ok_or("making a ticket key")?;
        bytes.fill(0);
        Ok(TicketStore { keys: RwLock::new(Arc::from([key])), from_files: false })
    }

    /// The keys of `files`, the first encrypting; each problem comes back with the file's index.
    pub(crate) fn from_files(files: &[impl AsRef<Path>]) -> Result<TicketStore, Vec<(usize, String)>> {
        let mut keys = Vec::new();
        let mut problems = Vec::new();
        for (i, file) in files.iter().enumerate() {
            match read_key_file(file.as_ref()) {
                Ok(key) => keys.push(key),
                Err(e) => problems.push((i, e)),
            }
        }
        if !problems.is_empty() {
            return Err(problems);
        }
        Ok(TicketStore { keys: RwLock::new(keys.into()), from_files: true })
    }

    /// Whether the master's keys are the ones to use.
    pub(crate) fn follows_master(&self) -> bool {
        !self.from_files
    }

    /// The keys now, the encrypting one first.
    pub(crate) fn keys(&self) -> Arc<[TicketKey]> {
        self.keys.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The master's set (current first) replaces the keys; nothing changes with key files, or
    /// when the set holds no usable key.
    pub(crate) fn take_secrets(&self, secrets: &[Secret]) {
        if self.from_files {
            return;
        }
        let keys: Vec<TicketKey> = secrets.iter().filter_map(|s| TicketKey::from_bytes(s.bytes())).collect();
        if !keys.is_empty() {
            *self.keys.write().unwrap_or_else(|e| e.into_inner()) = keys.into();
        }
    }
}

/// A key file: readable by its owner only, 80 (or 48) bytes.
fn read_key_file(path: &Path) -> Result<TicketKey, String> {
    let file = path.display();
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let mode = meta.permissions().mode() & 0o777;
    if mode & 0o077 != 0 {
        return Err(format!(
            "{file} is readable by group or others (mode {mode:04o}): a ticket key decrypts every session it made; \
             chmod 600 it"
        ));
    }
    let mut bytes = std::fs::read(path).map_err(|e| format!("cannot read {file}: {e}"))?;
    let key = TicketKey::from_bytes(&bytes).ok_or_else(|| {
        format!(
            "{file} holds {} bytes; a ticket key file holds {KEY_BYTES} (or {SHORT_KEY_BYTES}): `openssl rand {KEY_BYTES} > FILE`",
            bytes.len()
        )
    });
    bytes.fill(0);
    key
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt as _;

    use super::*;

    fn key_file(dir: &Path, name: &str, bytes: &[u8], mode: u32) -> std::path::PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).expect("write");
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).expect("chmod");
        path
    }

    #[test]
    fn keys_split_as_nginx_lays_them_out() {
        let bytes: Vec<u8> = (0..80).collect();
        let key = TicketKey::from_bytes(&bytes).expect("80 bytes");
        assert_eq!(key.name()[..], bytes[..16]);
        assert_eq!(key.hmac_key(), &bytes[16..48]);
        assert_eq!(key.aes_key(), &bytes[48..80]);
        let short = TicketKey::from_bytes(&bytes[..48]).expect("48 bytes");
        assert_eq!((short.hmac_key().len(), short.aes_key().len()), (16, 16));
        assert!(TicketKey::from_bytes(&bytes[..79]).is_none());
        assert!(!format!("{key:?}").contains("16, 17"), "no key bytes in Debug");
    }

    #[test]
    fn key_files_are_read_in_order_and_refused_when_others_can_read_them() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = key_file(dir.path(), "a.key", &[1; 80], 0o600);
        let b = key_file(dir.path(), "b.key", &[2; 48], 0o400);
        let store = TicketStore::from_files(&[&a, &b]).expect("both load");
        let keys = store.keys();
        assert_eq!((keys[0].name()[0], keys[1].name()[0]), (1, 2), "the first file encrypts");
        assert!(!store.follows_master());

        let open = key_file(dir.path(), "open.key", &[3; 80], 0o644);
        let short = key_file(dir.path(), "short.key", &[4; 10], 0o600);
        let missing = dir.path().join("missing.key");
        let problems = TicketStore::from_files(&[&a, &open, &short, &missing]).expect_err("three bad files");
        let at: Vec<usize> = problems.iter().map(|(i, _)| *i).collect();
        assert_eq!(at, [1, 2, 3]);
        assert!(problems[0].1.contains("readable by group or others (mode 0644)"), "{problems:?}");
        assert!(problems[1].1.contains("holds 10 bytes"), "{problems:?}");
        assert!(problems[2].1.contains("cannot read"), "{problems:?}");
    }

    #[test]
    fn the_masters_secrets_replace_own_keys_but_not_files() {
        let own = TicketStore::own().expect("random");
        assert!(own.follows_master());
        let secret = Secret::new(vec![0xab; 80]);
        own.take_secrets(std::slice::from_ref(&secret));
        assert_eq!(own.keys()[0].name(), &[0xab; 16]);
        own.take_secrets(&[]);
        assert_eq!(own.keys().len(), 1, "an empty set changes nothing");

        let dir = tempfile::tempdir().expect("tempdir");
        let file = key_file(dir.path(), "k", &[7; 80], 0o600);
        let files = TicketStore::from_files(&[file]).expect("loads");
        files.take_secrets(&[secret]);
        assert_eq!(files.keys()[0].name(), &[7; 16], "key files win over the master");
    }
}
