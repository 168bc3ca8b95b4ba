//! HAProxy's value syntaxes (configuration.txt §2.5, and the `bind`/`server` address forms)
//! into typed values.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use lb_config::ListenAddr;

/// The TLS version flags `bind` and `server` lines share (they take no argument).
pub(crate) const TLS_VERSION_FLAGS: &[&str] = &[
    "no-sslv3",
    "no-tlsv10",
    "no-tlsv11",
    "no-tlsv12",
    "no-tlsv13",
    "force-sslv3",
    "force-tlsv10",
    "force-tlsv11",
    "force-tlsv12",
    "force-tlsv13",
    "no-tls-tickets",
    "tls-tickets",
    "allow-0rtt",
];

/// A setting taking no argument: one of `flags`, or a TLS version flag.
pub(crate) fn is_flag(flags: &[&str], setting: &str) -> bool {
    flags.contains(&setting) || TLS_VERSION_FLAGS.contains(&setting)
}

/// A time: a number with `us`, `ms`, `s`, `m`, `h` or `d`; without a unit, milliseconds (a
/// trap: `timeout client 30` is 30 ms). lb's own syntax covers all but HAProxy's `us` and `d`.
pub(crate) fn duration(text: &str) -> Result<Duration, String> {
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (number, unit) = text.split_at(digits);
    let count =
        || number.parse::<u64>().map_err(|_| format!("`{text}` is not a time (a number and a unit: 30s, 500ms)"));
    match unit {
        "us" => Ok(Duration::from_micros(count()?)),
        "d" => Ok(Duration::from_secs(count()?.saturating_mul(86_400))),
        "" | "ms" | "s" | "m" | "h" => {
            count()?;
            lb_config::parse_duration(text)
        }
        _ => Err(format!("`{text}`: unknown time unit `{unit}` (us, ms, s, m, h, d)")),
    }
}

/// A count: a plain non-negative number.
pub(crate) fn number<T: std::str::FromStr>(text: &str) -> Result<T, String> {
    text.parse().map_err(|_| format!("`{text}` is not a number"))
}

/// The addresses of one `bind` (a comma-separated list): `IP:PORT`, `:PORT` and `*:PORT`
/// (every IPv4 address), `[IPv6]:PORT`, `:::PORT`, `ipv4@`/`ipv6@` prefixes, `unix@/path` or
/// a path. Port ranges and the `fd@`, `sockpair@`, `abns@` families are refused.
pub(crate) fn bind_addresses(text: &str) -> Result<Vec<ListenAddr>, String> {
    text.split(',').filter(|a| !a.is_empty()).map(bind_address).collect()
}

fn bind_address(text: &str) -> Result<ListenAddr, String> {
    if let Some(path) = text.strip_prefix("unix@").or_else(|| text.starts_with('/').then_some(text)) {
        return Ok(ListenAddr::Unix(PathBuf::from(path)));
    }
    for family in ["fd@", "sockpair@", "abns@", "udp@", "udp4@", "udp6@", "quic4@", "quic6@", "uxst@", "uxdg@"] {
        if text.starts_with(family) {
            return Err(format!("`{text}`: lb-proxy binds TCP addresses and Unix socket paths only"));
        }
    }
    let (v6_only, rest) = match text.split_once('@') {
        Some(("ipv4" | "tcp4" | "tcp", rest)) => (false, rest),
        Some(("ipv6" | "tcp6", rest)) => (true, rest),
        Some((family, _)) => return Err(format!("`{family}@`: unknown address family")),
        None => (false, text),
    };
    let (host, port) = split_port(rest).ok_or_else(|| format!("`{text}`: no port"))?;
    if port.contains('-') {
        return Err(format!("`{text}`: port ranges are not supported (one bind line per port)"));
    }
    let port: u16 = port.parse().map_err(|_| format!("`{text}`: `{port}` is not a port"))?;
    let ip = match host {
        "" | "*" if v6_only => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        "" | "*" | "0.0.0.0" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
        "::" => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
        other => {
            other.parse().map_err(|_| format!("`{text}`: `{other}` is not an IP address (host names are not bound)"))?
        }
    };
    Ok(ListenAddr::Tcp(SocketAddr::new(ip, port)))
}

/// `host:port`, `[v6]:port` or `v6:port` (the last colon) into its two parts.
fn split_port(text: &str) -> Option<(&str, &str)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (host, port) = rest.split_once("]:")?;
        return Some((host, port));
    }
    text.rsplit_once(':')
}

/// A server's address: `IP:PORT`, `[IPv6]:PORT`, or `NAME:PORT` resolved now (lb-proxy takes
/// addresses; the note says which address was taken). `Ok((address, resolved_from))`.
pub(crate) fn server_address(text: &str) -> Result<(SocketAddr, Option<String>), String> {
    let rest = match text.split_once('@') {
        Some(("ipv4" | "ipv6" | "tcp" | "tcp4" | "tcp6", rest)) => rest,
        Some((family, _)) => {
            return Err(format!("`{text}`: lb-proxy reaches servers over TCP by address, not `{family}@`"))
        }
        None => text,
    };
    if rest.starts_with('/') {
        return Err(format!("`{text}`: lb-proxy reaches servers over TCP, not Unix sockets"));
    }
    let Some((host, port)) = split_port(rest).filter(|(h, _)| !h.is_empty()) else {
        return Err(format!(
            "`{text}`: without a port HAProxy connects to the port the client connected to; lb-proxy needs the port"
        ));
    };
    if port.starts_with('+') || port.starts_with('-') {
        return Err(format!("`{text}`: port offsets (+N, -N) are not supported: write the port"));
    }
    let port: u16 = port.parse().map_err(|_| format!("`{text}`: `{port}` is not a port"))?;
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok((SocketAddr::new(ip, port), None));
    }
    match (host, port).to_socket_addrs().map(|mut a| a.next()) {
        Ok(Some(address)) => Ok((address, Some(host.to_owned()))),
        _ => Err(format!("`{host}` does not resolve here, and lb-proxy takes addresses")),
    }
}
