//! lb-watcher's registration node parser (`lb_watcher::node::parse`): a node's name and data,
//! as ZooKeeper hands them over, for a service whose format, record type and port come from the
//! input's first byte. Input: that byte, then optionally `NAME\n`, then the node's data.
//! Any data gives a member or a skip with its reason, never a panic; a member has a valid name,
//! a port, a weight in range and the service's port when it sets one; and the JSON written for
//! that member (the registrar's as `lbctl register` writes it, or nerve's) reads back to it.
#![no_main]

use lb_watcher::config::{NodeFormat, Service};
use lb_watcher::node;
use libfuzzer_sys::fuzz_target;

const RECORD_TYPES: [&str; 4] = ["host", "load_balancer", "service", "api"];
const PORTS: [u16; 4] = [80, 81, 443, 8080];

fuzz_target!(|data: &[u8]| {
    let Some((&flags, rest)) = data.split_first() else { return };
    let (name, node_data) = match rest.iter().position(|&b| b == b'\n') {
        Some(end) if end <= 80 => (String::from_utf8_lossy(&rest[..end]).into_owned(), &rest[end + 1..]),
        _ => ("web1".to_owned(), rest),
    };
    let service = Service {
        backend: "api".into(),
        path: "/com/example/us-east/api".into(),
        format: if flags & 1 == 0 { NodeFormat::Registrar } else { NodeFormat::Nerve },
        record_type: RECORD_TYPES[usize::from(flags >> 1 & 3)].into(),
        port: (flags & 8 != 0).then_some(PORTS[usize::from(flags >> 4 & 3)]),
        check: false,
        weight: if flags & 64 == 0 { 100 } else { 0 },
        slowstart: None,
    };
    let Ok(member) = node::parse(&service, &name, node_data) else { return };
    assert!(node::valid_server_name(&name), "member from a node named {name:?}");
    assert!(member.address.port() != 0 && member.weight <= 256, "{member:?}");
    if let Some(port) = service.port {
        assert_eq!(member.address.port(), port, "the service's port");
    }
    let written = match service.format {
        NodeFormat::Registrar => {
            node::registrar_json(&service.record_type, member.address.ip(), &[member.address.port()], 60)
        }
        NodeFormat::Nerve => format!(
            r#"{{"host":"{}","port":{},"name":"{name}","weight":{}}}"#,
            member.address.ip(),
            member.address.port(),
            member.weight
        ),
    };
    assert_eq!(node::parse(&service, &name, written.as_bytes()), Ok(member), "written as {written}");
});
