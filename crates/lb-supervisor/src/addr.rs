//! The address of a listening socket: how the master names each socket it hands to a worker,
//! and how every daemon's configuration writes its binds.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A listening address: TCP (IPv4 or IPv6) or a Unix socket path (written `unix:/path`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ListenAddr {
    Tcp(SocketAddr),
    Unix(PathBuf),
    /// A UDP socket (QUIC), bound by the master and handed over like the others.
    Udp(SocketAddr),
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddr::Tcp(a) => write!(f, "{a}"),
            ListenAddr::Unix(p) => write!(f, "unix:{}", p.display()),
            ListenAddr::Udp(a) => write!(f, "udp:{a}"),
        }
    }
}

/// The exact form [`Display`](fmt::Display) writes: `IP:port`, `[IPv6]:port`, `unix:/path` or
/// `udp:IP:port`.
/// (Configurations accept friendlier forms; they parse them themselves.)
impl FromStr for ListenAddr {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                return Err("unix: needs a path".to_owned());
            }
            return Ok(ListenAddr::Unix(PathBuf::from(path)));
        }
        if let Some(udp) = s.strip_prefix("udp:") {
            return udp.parse().map(ListenAddr::Udp).map_err(|_| format!("not a UDP address: {s:?}"));
        }
        s.parse().map(ListenAddr::Tcp).map_err(|_| format!("not a listening address: {s:?}"))
    }
}

impl serde::Serialize for ListenAddr {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ListenAddr {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_and_parse_agree() {
        for text in ["127.0.0.1:80", "[::1]:8443", "unix:/var/run/lb/in.sock", "udp:0.0.0.0:443", "udp:[::]:443"] {
            let addr: ListenAddr = text.parse().unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(addr.to_string(), text);
        }
        assert!("unix:".parse::<ListenAddr>().is_err());
        assert!("udp:example.com:443".parse::<ListenAddr>().is_err());
        assert!("example.com:80".parse::<ListenAddr>().is_err());
    }
}

/// Who may connect to a Unix listening socket: its mode, and its owner and group when the
/// process is root (HAProxy's `bind unix@… mode … user … group …`). A peer needs write
/// permission on the socket file to connect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnixAccess {
    pub path: PathBuf,
    /// Permission bits, e.g. `0o660`.
    pub mode: u32,
    pub user: Option<String>,
    pub group: Option<String>,
}
