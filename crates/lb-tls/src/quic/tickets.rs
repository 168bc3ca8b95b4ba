//! QUIC's session tickets, sealed with the ticket keys the TLS frontends use (the master's,
//! rotated and handed to every worker, or `ticket_key_files`): a QUIC session resumes across
//! reloads, and across instances sharing key files, as a TLS one does.
//!
//! The keys' AES and HMAC halves are OpenSSL's ticket format (AES-CBC + HMAC); QUIC tickets
//! use neither half directly but an AES-256-GCM key derived from both with HKDF, so that one
//! key never serves two constructions. A ticket is `key name (16) | nonce (12) | sealed`, the
//! name as associated data; an unknown name or a failed open is a full handshake.

use std::sync::Arc;

use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM, NONCE_LEN};
use aws_lc_rs::hkdf::{Salt, HKDF_SHA256};
use rustls::server::ProducesTickets;

use crate::tickets::{TicketKey, TicketStore, NAME_BYTES};

/// What the derived key is for (HKDF's info).
const PURPOSE: &[u8] = b"lb-tls QUIC session ticket AES-256-GCM";

/// The sealing key of each ticket key is derived at its first use and kept with it (two HMACs
/// and an AES key schedule, once per key rather than per ticket): sealing or opening a ticket
/// reads the store's current set, as the TLS frontends' ticket callback does, and nothing else
/// under a lock.
#[derive(Debug)]
pub(crate) struct SharedTickets {
    store: Arc<TicketStore>,
    /// Seconds a ticket is good for (`ticket_lifetime`).
    lifetime: u32,
}

impl SharedTickets {
    pub(crate) fn new(store: Arc<TicketStore>, lifetime: u32) -> SharedTickets {
        SharedTickets { store, lifetime }
    }
}

fn sealing_key(key: &TicketKey) -> Option<LessSafeKey> {
    let prk = Salt::new(HKDF_SHA256, key.hmac_key()).extract(key.aes_key());
    let mut bytes = [0u8; 32];
    prk.expand(&[PURPOSE], &AES_256_GCM).ok()?.fill(&mut bytes).ok()?;
    let sealing = UnboundKey::new(&AES_256_GCM, &bytes).ok().map(LessSafeKey::new);
    bytes.fill(0);
    sealing
}

impl ProducesTickets for SharedTickets {
    fn enabled(&self) -> bool {
        true
    }

    fn lifetime(&self) -> u32 {
        self.lifetime
    }

    fn encrypt(&self, plain: &[u8]) -> Option<Vec<u8>> {
        let keys = self.store.keys();
        let key = keys.first()?;
        let sealing = key.quic_sealing(sealing_key)?;
        let mut nonce = [0u8; NONCE_LEN];
        aws_lc_rs::rand::fill(&mut nonce).ok()?;
        let mut out = Vec::with_capacity(NAME_BYTES + NONCE_LEN + plain.len() + AES_256_GCM.tag_len());
        out.extend_from_slice(key.name());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let tag = sealing
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(key.name()),
                &mut out[NAME_BYTES + NONCE_LEN..],
            )
            .ok()?;
        out.extend_from_slice(tag.as_ref());
        Some(out)
    }

    fn decrypt(&self, ticket: &[u8]) -> Option<Vec<u8>> {
        let (name, rest) = ticket.split_at_checked(NAME_BYTES)?;
        let (nonce, sealed) = rest.split_at_checked(NONCE_LEN)?;
        let keys = self.store.keys();
        let key = keys.iter().find(|k| k.name().as_slice() == name)?;
        let sealing = key.quic_sealing(sealing_key)?;
        let nonce = Nonce::try_assume_unique_for_key(nonce).ok()?;
        let mut plain = sealed.to_vec();
        let len = sealing.open_in_place(nonce, Aad::from(key.name()), &mut plain).ok()?.len();
        plain.truncate(len);
        Some(plain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ticket_opens_with_its_key_and_not_once_changed() {
        let store = Arc::new(TicketStore::own().expect("a key"));
        let tickets = SharedTickets::new(store, 7200);
        let ticket = tickets.encrypt(b"session state").expect("sealed");
        assert_eq!(tickets.decrypt(&ticket).as_deref(), Some(&b"session state"[..]));
        for at in [0, NAME_BYTES + 1, ticket.len() - 1] {
            let mut changed = ticket.clone();
            changed[at] ^= 1;
            assert_eq!(tickets.decrypt(&changed), None, "changed at {at}");
        }
        assert_eq!(tickets.decrypt(&ticket[..20]), None);
        let other = SharedTickets::new(Arc::new(TicketStore::own().expect("a key")), 7200);
        assert_eq!(other.decrypt(&ticket), None, "another key's ticket is a full handshake");
    }
}
