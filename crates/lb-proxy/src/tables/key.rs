//! A table's keys: an address (grouped by network when the table says so), bytes (a header's
//! value, an API key), or an integer; made from what a request gives, or parsed from the text
//! of a runtime command (`clear table per_ip key 192.0.2.7`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use lb_config::KeyType;

/// One key, as stored. Addresses are kept as IPv6 (IPv4 mapped), so that one table holds both.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Key {
    Ip([u8; 16]),
    Bytes(Box<[u8]>),
    Int(u64),
}

/// By hand: an address is one 128-bit word for the hasher (the derived hash writes the
/// variant, the array's length and its bytes apart, on every request).
impl std::hash::Hash for Key {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        match self {
            Key::Ip(octets) => state.write_u128(u128::from_ne_bytes(*octets)),
            Key::Bytes(bytes) => state.write(bytes),
            Key::Int(n) => state.write_u64(*n),
        }
    }
}

impl Key {
    /// An address's key: `ip` reduced to its network when the table groups by prefix.
    pub(crate) fn ip(kind: &KeyType, ip: IpAddr) -> Option<Key> {
        let KeyType::Ip { v4_prefix, v6_prefix } = *kind else { return None };
        let v4 = match ip {
            IpAddr::V4(v4) => Some(v4),
            IpAddr::V6(v6) => v6.to_ipv4_mapped(),
        };
        // As one 128-bit word: an IPv4 address mapped (`::ffff:a.b.c.d`), its prefix counting
        // from its own first bit (the mapped form's 97th).
        let (bits, keep) = match (v4, ip) {
            (Some(v4), _) => (0xffff_u128 << 32 | u128::from(v4.to_bits()), 96 + u32::from(v4_prefix)),
            (None, IpAddr::V6(v6)) => (v6.to_bits(), u32::from(v6_prefix)),
            (None, IpAddr::V4(_)) => return None,
        };
        let network = if keep >= 128 { bits } else { bits & !(u128::MAX >> keep) };
        Some(Key::Ip(network.to_be_bytes()))
    }

    /// A text key: at most the table's `len` bytes are kept.
    pub(crate) fn bytes(kind: &KeyType, value: &[u8]) -> Option<Key> {
        match *kind {
            KeyType::String { len } => Some(Key::Bytes(value[..value.len().min(len)].into())),
            KeyType::Integer => std::str::from_utf8(value).ok()?.trim().parse().ok().map(Key::Int),
            KeyType::Ip { .. } => Key::ip(kind, std::str::from_utf8(value).ok()?.trim().parse().ok()?),
        }
    }

    /// A key as an operator writes it in a runtime command: an address (`192.0.2.7`, or the
    /// network `192.0.2.0/24` of a grouped table), the text itself, or a number.
    pub(crate) fn parse(kind: &KeyType, text: &str) -> Result<Key, String> {
        match *kind {
            KeyType::Ip { .. } => {
                let address = text.split_once('/').map_or(text, |(address, _)| address);
                let ip: IpAddr = address.parse().map_err(|_| format!("'{text}' is not an IPv4 or IPv6 address"))?;
                Key::ip(kind, ip).ok_or_else(|| "not an address table".to_owned())
            }
            KeyType::String { .. } => Key::bytes(kind, text.as_bytes()).ok_or_else(|| "not a string table".to_owned()),
            KeyType::Integer => text.parse().map(Key::Int).map_err(|_| format!("'{text}' is not an integer")),
        }
    }

    /// How `show table` writes it: `key=…` (an address grouped by network with its length).
    pub(crate) fn display<'a>(&'a self, kind: &'a KeyType) -> impl fmt::Display + 'a {
        Shown { key: self, kind }
    }

    /// The bytes a snapshot carries: a tag, then the key.
    pub(crate) fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Key::Ip(octets) => match std::net::Ipv6Addr::from(*octets).to_ipv4_mapped() {
                Some(v4) => {
                    out.push(3);
                    out.extend_from_slice(&v4.octets());
                }
                None => {
                    out.push(0);
                    out.extend_from_slice(octets);
                }
            },
            Key::Bytes(bytes) => {
                out.push(1);
                out.extend_from_slice(&u32::try_from(bytes.len()).unwrap_or(u32::MAX).to_le_bytes());
                out.extend_from_slice(bytes);
            }
            Key::Int(n) => {
                out.push(2);
                out.extend_from_slice(&n.to_le_bytes());
            }
        }
    }

    /// [`encode`](Self::encode)'s inverse: the key and what follows it.
    pub(crate) fn decode(input: &[u8]) -> Option<(Key, &[u8])> {
        let (&tag, rest) = input.split_first()?;
        match tag {
            0 => {
                let (octets, rest) = rest.split_first_chunk::<16>()?;
                Some((Key::Ip(*octets), rest))
            }
            1 => {
                let (len, rest) = rest.split_first_chunk::<4>()?;
                let len = usize::try_from(u32::from_le_bytes(*len)).ok()?;
                (rest.len() >= len).then(|| (Key::Bytes(rest[..len].into()), &rest[len..]))
            }
            2 => {
                let (n, rest) = rest.split_first_chunk::<8>()?;
                Some((Key::Int(u64::from_le_bytes(*n)), rest))
            }
            3 => {
                let (v4, rest) = rest.split_first_chunk::<4>()?;
                Some((Key::Ip(Ipv4Addr::from(*v4).to_ipv6_mapped().octets()), rest))
            }
            _ => None,
        }
    }
}

struct Shown<'a> {
    key: &'a Key,
    kind: &'a KeyType,
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.key {
            Key::Ip(octets) => {
                let v6 = Ipv6Addr::from(*octets);
                let (v4_prefix, v6_prefix) = match self.kind {
                    KeyType::Ip { v4_prefix, v6_prefix } => (*v4_prefix, *v6_prefix),
                    _ => (32, 128),
                };
                match v6.to_ipv4_mapped() {
                    Some(v4) if v4_prefix < 32 => write!(f, "{v4}/{v4_prefix}"),
                    Some(v4) => write!(f, "{v4}"),
                    None if v6_prefix < 128 => write!(f, "{v6}/{v6_prefix}"),
                    None => write!(f, "{v6}"),
                }
            }
            // Bytes a terminal or a script would trip on are escaped, as HAProxy's dump does.
            Key::Bytes(bytes) => {
                for &b in bytes.iter() {
                    if b.is_ascii_graphic() && b != b'\\' {
                        write!(f, "{}", b as char)?;
                    } else {
                        write!(f, "\\x{b:02x}")?;
                    }
                }
                Ok(())
            }
            Key::Int(n) => write!(f, "{n}"),
        }
    }
}
