use std::collections::HashMap;
use std::net::SocketAddr;

use lb_config::Config as ProxyConfig;

use super::check;
use crate::hysteresis::{Servers, Sets};
use crate::node::Member;
use crate::render::tests::{api_service, BASE};
use crate::write::write_config;
use crate::{render, Error};

fn member(last: u8, weight: u32) -> Member {
    Member { address: SocketAddr::from(([10, 0, 0, last], 80)), weight }
}

fn sets(servers: &[(&str, Member)]) -> Sets {
    let servers: Servers = servers.iter().map(|(name, m)| ((*name).to_owned(), m.clone())).collect();
    [("api".to_owned(), servers)].into_iter().collect()
}

/// After the run's first good apply only the servers a change adds are checked: a bad one
/// added then is still refused, named by its line and field in the file, and the running file
/// stays as it was. The bad servers are made here directly: lb-watcher's node reading refuses
/// such data before it reaches this check, which is the second line of defence.
#[test]
fn a_bad_server_added_after_the_first_apply_is_refused_by_its_line() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("lb-proxy.yaml");
    let base = ProxyConfig::parse(BASE, "base.yaml")?;
    let services = [api_service(false, None)];
    let first = sets(&[("web1", member(1, 10))]);
    let text = render::render(&base, &services, &first).to_yaml();
    write_config(&path, &text, |tmp| check(tmp, &base, &services, &first, None))?;
    let running = std::fs::read(&path)?;
    let applied: HashMap<&str, &Servers> = first.iter().map(|(b, s)| (b.as_str(), s)).collect();

    // lb-config's per-server checks: the weight's range, the name's characters.
    for (name, bad, field, marker) in
        [("web2", member(2, 300), "weight", "weight: 300"), ("web 3", member(3, 10), "name", "name: web 3")]
    {
        let next = sets(&[("web1", member(1, 10)), (name, bad)]);
        let text = render::render(&base, &services, &next).to_yaml();
        let line = text.lines().position(|l| l.contains(marker)).map(|i| i + 1);
        let refused = write_config(&path, &text, |tmp| check(tmp, &base, &services, &next, Some(&applied)));
        let Err(Error::Proxy { source, .. }) = refused else {
            panic!("{name}: refused as an invalid configuration, got {refused:?}");
        };
        let said: Vec<String> = source.diagnostics().iter().map(ToString::to_string).collect();
        assert!(
            source.diagnostics().iter().any(|d| Some(d.line) == line && d.field.ends_with(&format!("].{field}"))),
            "{name}: the {field} at line {line:?} of\n{text}\nnamed in {said:?}"
        );
        assert_eq!(std::fs::read(&path)?, running, "{name}: the running file is unchanged");
    }
    Ok(())
}
