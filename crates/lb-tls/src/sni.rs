//! Which certificate serves a host name: exact name, then wildcard (`*.example.com` covers one
//! label), then the default (the first certificate listed), or none when `sni_nomatch_abort`.

use std::collections::HashMap;

/// Host name → certificate index.
#[derive(Debug, Default)]
pub(crate) struct SniIndex {
    exact: HashMap<Box<str>, usize>,
    /// `example.com` for a certificate naming `*.example.com`.
    wildcard: HashMap<Box<str>, usize>,
}

/// DNS names are at most 253 characters; anything longer matches nothing.
const MAX_NAME: usize = 255;

impl SniIndex {
    /// Adds the names of certificate `index`; a name already taken by an earlier certificate
    /// stays with it (the first listed wins).
    pub(crate) fn add(&mut self, index: usize, names: &[String]) {
        for name in names {
            match name.strip_prefix("*.") {
                Some(domain) => self.wildcard.entry(domain.into()).or_insert(index),
                None => self.exact.entry(name.as_str().into()).or_insert(index),
            };
        }
    }

    /// The certificate for `name` (any case, an ending dot ignored), if one names it.
    pub(crate) fn lookup(&self, name: &str) -> Option<usize> {
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.len() > MAX_NAME {
            return None;
        }
        // Lowercase on the stack: this runs once per handshake.
        let mut buf = [0u8; MAX_NAME];
        let lower = &mut buf[..name.len()];
        lower.copy_from_slice(name.as_bytes());
        lower.make_ascii_lowercase();
        let lower = std::str::from_utf8(lower).ok()?;
        if let Some(&i) = self.exact.get(lower) {
            return Some(i);
        }
        let (_, domain) = lower.split_once('.')?;
        self.wildcard.get(domain).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_beats_wildcard_and_wildcard_covers_one_label() {
        let mut index = SniIndex::default();
        index.add(0, &["default.test".into()]);
        index.add(1, &["*.example.test".into()]);
        index.add(2, &["api.example.test".into()]);
        index.add(3, &["api.example.test".into()]);
        assert_eq!(index.lookup("api.example.test"), Some(2));
        assert_eq!(index.lookup("API.Example.Test."), Some(2));
        assert_eq!(index.lookup("www.example.test"), Some(1));
        assert_eq!(index.lookup("a.b.example.test"), None);
        assert_eq!(index.lookup("example.test"), None);
        assert_eq!(index.lookup("other.test"), None);
        assert_eq!(index.lookup(&"x".repeat(300)), None);
    }
}
