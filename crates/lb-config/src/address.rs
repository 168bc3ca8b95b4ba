//! Addresses as written in the configuration: server `IP:port`, bind addresses (TCP or
//! `unix:/path`) and log targets. Host names are refused on purpose: the proxy must not depend
//! on DNS at start or reload, and lb-watcher writes the addresses it discovers.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use crate::model::{ListenAddr, LogTarget};

/// Default syslog port when `udp:` names only an address.
const SYSLOG_PORT: u16 = 514;

/// `10.0.0.5:80` or `[::1]:80`. Port 0 is refused where a peer must be reached.
pub(crate) fn parse_socket_addr(text: &str, allow_port_zero: bool) -> Result<SocketAddr, String> {
    let text = text.trim();
    let Some((host, port)) = text.rsplit_once(':') else {
        return Err(format!("expected IP:port, got `{text}`"));
    };
    let bracketed = host.strip_prefix('[').and_then(|h| h.strip_suffix(']'));
    let ip: IpAddr = match bracketed.unwrap_or(host).parse() {
        Ok(ip) => ip,
        Err(_) if bracketed.is_none() && host.contains(':') => {
            return Err(format!("expected IP:port, got `{text}` (write an IPv6 address in brackets: [::1]:80)"))
        }
        Err(_) => return Err(format!("expected IP:port (no host names), got `{text}`")),
    };
    if ip.is_ipv6() && bracketed.is_none() {
        return Err(format!("expected IP:port, got `{text}` (write an IPv6 address in brackets: [::1]:80)"));
    }
    if port.is_empty() {
        return Err(format!("expected IP:port, got `{text}` (the port is missing)"));
    }
    match port.parse::<u16>() {
        Ok(0) if !allow_port_zero => Err("invalid port 0".to_owned()),
        Ok(port) => Ok(SocketAddr::new(ip, port)),
        Err(_) => Err(format!("invalid port {port}")),
    }
}

/// A bind address: `127.0.0.1:8443`, `[::1]:8443`, `*:80` or `:80` (every IPv4 address, as in
/// HAProxy), or `unix:/path`.
pub(crate) fn parse_listen(text: &str, base: Option<&Path>) -> Result<ListenAddr, String> {
    let text = text.trim();
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("expected a socket path after `unix:`".to_owned());
        }
        return Ok(ListenAddr::Unix(resolve(base, path)));
    }
    if let Some(port) = text.strip_prefix("*:").or_else(|| text.strip_prefix(':')) {
        let any = format!("{}:{port}", Ipv4Addr::UNSPECIFIED);
        return parse_socket_addr(&any, true).map(ListenAddr::Tcp);
    }
    parse_socket_addr(text, true).map(ListenAddr::Tcp)
}

/// `stdout`, `none`, `unix:/dev/log`, `udp:127.0.0.1:514`, `udp:[::1]:514` (port 514 if omitted).
pub(crate) fn parse_log_target(text: &str, base: Option<&Path>) -> Result<LogTarget, String> {
    let text = text.trim();
    if text.eq_ignore_ascii_case("stdout") {
        return Ok(LogTarget::Stdout);
    }
    if text.eq_ignore_ascii_case("none") {
        return Ok(LogTarget::None);
    }
    if let Some(path) = text.strip_prefix("unix:") {
        if path.is_empty() {
            return Err("expected a socket path after `unix:`".to_owned());
        }
        return Ok(LogTarget::SyslogUnix(resolve(base, path)));
    }
    if let Some(addr) = text.strip_prefix("udp:") {
        let bare = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(LogTarget::SyslogUdp(SocketAddr::new(ip, SYSLOG_PORT)));
        }
        return parse_socket_addr(addr, false).map(LogTarget::SyslogUdp);
    }
    Err(format!("unknown log target `{text}`: expected one of stdout, none, unix:/path, udp:IP:port"))
}

/// Relative paths are taken from the configuration file's directory (or the current directory
/// for text parsed without a file), and made absolute now: lb-proxy may change directory later.
pub(crate) fn resolve(base: Option<&Path>, path: &str) -> PathBuf {
    let path = Path::new(path);
    match base {
        Some(base) if path.is_relative() => base.join(path),
        _ => path.to_path_buf(),
    }
}
