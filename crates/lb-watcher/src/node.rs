//! Registration nodes: the JSON an API server writes into its ephemeral node, read into the
//! address and port lb-proxy connects to.
//!
//! Two formats. The registrar's: `{"type":"host","address":"10.0.0.5","ttl":60,
//! "host":{"address":"10.0.0.5"}}` or `{"type":"load_balancer","address":…,
//! "load_balancer":{"address":…,"ports":[80]}}`: the record under the key named by `type`
//! carries the address and, for some types, ports. nerve/synapse's: `{"host":…,"port":…,
//! "name":…,"weight":…}`. Anything else is a [`Skip`] with a reason: the caller logs it once and
//! goes on, a bad node never stops the watcher. Nodes are written by whoever can write to
//! ZooKeeper: data past [`MAX_NODE_BYTES`] is not parsed, and what a reason quotes from a node
//! is shortened and has its control characters escaped, so that a node cannot forge log lines
//! or flood the log.

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;
use serde_json::Value;

use crate::config::{NodeFormat, Service};

/// A registered server as lb-proxy will see it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Member {
    pub address: SocketAddr,
    /// From the node (nerve's `weight`), else the service's.
    pub weight: u32,
}

/// Why a node is not a server of this service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Skip(pub String);

impl std::fmt::Display for Skip {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn skip(message: impl Into<String>) -> Skip {
    Skip(message.into())
}

/// A registration is a hundred bytes or so; a node holding more than this is not one.
pub const MAX_NODE_BYTES: usize = 64 * 1024;

/// `text` fit for a log line: control characters escaped (no forged lines), at most `max`
/// characters, then the length.
pub fn printable(text: &str, max: usize) -> String {
    let mut out = String::new();
    for (i, c) in text.chars().enumerate() {
        if i == max {
            out.push_str(&format!("… ({} bytes)", text.len()));
            break;
        }
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A value quoted from a node in a reason.
fn quoted(text: &str) -> String {
    printable(text, 64)
}

fn kind_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[derive(Deserialize)]
struct Nerve {
    host: String,
    port: u16,
    #[serde(default)]
    weight: Option<u32>,
}

/// Reads the node named `name` holding `data`, for `service`.
pub fn parse(service: &Service, name: &str, data: &[u8]) -> Result<Member, Skip> {
    // serde's messages may quote a value at any length: the whole reason is bounded too.
    parse_node(service, name, data).map_err(|Skip(reason)| Skip(printable(&reason, 512)))
}

fn parse_node(service: &Service, name: &str, data: &[u8]) -> Result<Member, Skip> {
    if !valid_server_name(name) {
        return Err(skip(format!(
            "node name `{}` is not a valid server name (letters, digits, `_`, `.`, `-`)",
            quoted(name)
        )));
    }
    if data.len() > MAX_NODE_BYTES {
        return Err(skip(format!(
            "{} bytes of data, more than a registration may hold ({MAX_NODE_BYTES})",
            data.len()
        )));
    }
    let value: Value = serde_json::from_slice(data).map_err(|e| skip(format!("not valid JSON: {e}")))?;
    match service.format {
        NodeFormat::Registrar => registrar(service, &value),
        NodeFormat::Nerve => {
            let nerve: Nerve =
                serde_json::from_value(value).map_err(|e| skip(format!("not a nerve registration: {e}")))?;
            let ip = parse_ip(&nerve.host)?;
            let port = service.port.unwrap_or(nerve.port);
            if port == 0 {
                return Err(skip("port 0"));
            }
            let weight = nerve.weight.unwrap_or(service.weight);
            if weight > 256 {
                return Err(skip(format!("weight {weight} is out of range (0..=256)")));
            }
            Ok(Member { address: SocketAddr::new(ip, port), weight })
        }
    }
}

fn registrar(service: &Service, value: &Value) -> Result<Member, Skip> {
    let kind = match value.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        Some(other) => return Err(skip(format!("`type` must be a string, not {}", kind_of(other)))),
        None => return Err(skip("no `type` in the registration")),
    };
    if kind != service.record_type {
        return Err(skip(format!("record type `{}`, this service keeps `{}`", quoted(kind), service.record_type)));
    }
    let record = value.get(kind);
    let address = match record.and_then(|r| r.get("address")).or_else(|| value.get("address")) {
        Some(Value::String(address)) => address.as_str(),
        Some(other) => {
            return Err(skip(format!("`address` in the `{kind}` record must be a string, not {}", kind_of(other))))
        }
        None => return Err(skip(format!("no `address` in the `{kind}` record"))),
    };
    let ip = parse_ip(address)?;
    let ports: Vec<u16> = match record.and_then(|r| r.get("ports")) {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(list)) => list
            .iter()
            .map(|p| p.as_u64().and_then(|p| u16::try_from(p).ok()).filter(|p| *p > 0))
            .collect::<Option<Vec<u16>>>()
            .ok_or_else(|| skip("`ports` must be a list of port numbers"))?,
        Some(_) => return Err(skip("`ports` must be a list of port numbers")),
    };
    let port = match (service.port, ports.first()) {
        (Some(port), _) if ports.is_empty() || ports.contains(&port) => port,
        (Some(port), _) => return Err(skip(format!("the record's ports {ports:?} do not include {port}"))),
        (None, Some(first)) => *first,
        (None, None) => return Err(skip("the record has no port and the service gives none")),
    };
    Ok(Member { address: SocketAddr::new(ip, port), weight: service.weight })
}

fn parse_ip(text: &str) -> Result<IpAddr, Skip> {
    text.parse().map_err(|_| skip(format!("address `{}` is not an IP address", quoted(text))))
}

/// lb-config's rule for names, so a node never makes the rendered file invalid.
pub fn valid_server_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= 64 && name.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c))
}

/// The registrar JSON for a server, as `lbctl register` writes it.
pub fn registrar_json(record_type: &str, address: IpAddr, ports: &[u16], ttl: u32) -> String {
    let mut record = serde_json::Map::new();
    record.insert("address".into(), Value::from(address.to_string()));
    if !ports.is_empty() {
        record.insert("ports".into(), Value::from(ports.to_vec()));
    }
    let mut top = serde_json::Map::new();
    top.insert("type".into(), Value::from(record_type));
    top.insert("address".into(), Value::from(address.to_string()));
    top.insert("ttl".into(), Value::from(ttl));
    top.insert(record_type.into(), Value::Object(record));
    Value::Object(top).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn service(format: NodeFormat, record_type: &str, port: Option<u16>) -> Service {
        Service {
            backend: "api".into(),
            path: "/com/example/us-east/api".into(),
            format,
            record_type: record_type.into(),
            port,
            check: false,
            weight: 100,
            slowstart: None,
        }
    }

    fn addr(s: &str) -> SocketAddr {
        s.parse().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 0)))
    }

    #[test]
    fn registrar_host_takes_the_service_port() {
        let s = service(NodeFormat::Registrar, "host", Some(81));
        let data = br#"{"type":"host","address":"10.0.0.5","ttl":60,"host":{"address":"10.0.0.5"}}"#;
        assert_eq!(parse(&s, "web1", data), Ok(Member { address: addr("10.0.0.5:81"), weight: 100 }));
    }

    #[test]
    fn registrar_load_balancer_ports() {
        let data =
            br#"{"type":"load_balancer","address":"10.0.0.6","load_balancer":{"address":"10.0.0.7","ports":[80,81]}}"#;
        let s = service(NodeFormat::Registrar, "load_balancer", None);
        assert_eq!(parse(&s, "lb1", data).map(|m| m.address), Ok(addr("10.0.0.7:80")));
        let s = service(NodeFormat::Registrar, "load_balancer", Some(81));
        assert_eq!(parse(&s, "lb1", data).map(|m| m.address), Ok(addr("10.0.0.7:81")));
        let s = service(NodeFormat::Registrar, "load_balancer", Some(82));
        assert!(parse(&s, "lb1", data).is_err());
    }

    #[test]
    fn nerve() {
        let s = service(NodeFormat::Nerve, "host", None);
        let data = br#"{"host":"10.0.0.8","port":8000,"name":"api","weight":7}"#;
        assert_eq!(parse(&s, "n1", data), Ok(Member { address: addr("10.0.0.8:8000"), weight: 7 }));
        assert!(parse(&s, "n1", br#"{"host":"10.0.0.8","port":8000,"weight":999}"#).is_err());
    }

    #[test]
    fn bad_nodes_are_skipped_with_a_reason() {
        let s = service(NodeFormat::Registrar, "host", Some(80));
        for (name, data, says) in [
            ("a", &b"not json"[..], "not valid JSON"),
            ("a", br#"{"type":"load_balancer","address":"10.0.0.1"}"#, "record type `load_balancer`"),
            ("a", br#"{"type":"host"}"#, "no `address`"),
            ("a", br#"{"type":"host","address":"db.example.com"}"#, "not an IP address"),
            ("a", br#"[1,2]"#, "no `type`"),
            ("a b", br#"{"type":"host","address":"10.0.0.1"}"#, "not a valid server name"),
            ("a", br#"{"type":"host","address":"10.0.0.1","host":{"address":"10.0.0.1","ports":"80"}}"#, "ports"),
            ("a", br#"{"type":5,"address":"10.0.0.1"}"#, "`type` must be a string, not a number"),
            ("a", br#"{"type":"host","address":["10.0.0.1"]}"#, "`address` in the `host` record must be a string"),
        ] {
            match parse(&s, name, data) {
                Err(Skip(reason)) => assert!(reason.contains(says), "{reason:?} lacks {says:?}"),
                Ok(m) => panic!("{data:?} parsed as {m:?}"),
            }
        }
    }

    #[test]
    fn hostile_nodes_are_skipped_with_a_short_single_line_reason() {
        let s = service(NodeFormat::Registrar, "host", Some(80));
        let long = "x".repeat(100_000);
        let huge = format!(r#"{{"type":"host","address":"10.0.0.1","pad":"{long}"}}"#);
        let deep = format!(r#"{{"type":"host","address":"10.0.0.1","x":{}{}}}"#, "[".repeat(5000), "]".repeat(5000));
        let forged = br#"{"type":"host\n2026-01-01T00:00:00Z  INFO lb_watcher: forged","address":"10.0.0.1"}"#;
        let long_type = format!(r#"{{"type":"{}","address":"10.0.0.1"}}"#, "y".repeat(50_000));
        let long_port = format!(r#"{{"host":"10.0.0.1","port":"{}"}}"#, "9".repeat(50_000));
        for (name, data, says) in [
            ("huge", huge.as_bytes(), "bytes of data, more than a registration may hold"),
            ("deep", deep.as_bytes(), "recursion limit exceeded"),
            ("forged", &forged[..], r"record type `host\n2026"),
            ("long", long_type.as_bytes(), "bytes)`, this service keeps `host`"),
            (&long[..200], &b"{}"[..], "is not a valid server name"),
        ] {
            match parse(&s, name, data) {
                Err(Skip(reason)) => {
                    assert!(reason.contains(says), "{reason:?} lacks {says:?}");
                    assert!(!reason.contains('\n') && reason.len() < 600, "{reason:?}");
                }
                Ok(m) => panic!("{name} parsed as {m:?}"),
            }
        }
        let nerve = service(NodeFormat::Nerve, "host", None);
        match parse(&nerve, "n", long_port.as_bytes()) {
            Err(Skip(reason)) => assert!(reason.contains("not a nerve registration") && reason.len() < 600, "{reason}"),
            Ok(m) => panic!("parsed as {m:?}"),
        }
    }

    #[test]
    fn registrar_json_reads_back() {
        let json = registrar_json("host", "10.0.0.9".parse().unwrap_or(IpAddr::from([0, 0, 0, 0])), &[], 60);
        let s = service(NodeFormat::Registrar, "host", Some(80));
        assert_eq!(parse(&s, "x", json.as_bytes()).map(|m| m.address), Ok(addr("10.0.0.9:80")));
    }
}
