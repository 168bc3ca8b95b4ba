//! lb-proxy's configuration from the base file plus the discovered servers, through lb-config's
//! types (so the result is exactly what lb-proxy parses), and the way back: the servers a
//! rendered file holds.

use std::path::Path;

use lb_config::{AdminState, Config as ProxyConfig, Server};

use crate::config::Service;
use crate::hysteresis::{Servers, Sets};
use crate::node::Member;
use crate::Error;

/// The base configuration, checked to have every watched backend.
pub fn load_base(path: &Path, services: &[Service]) -> Result<ProxyConfig, Error> {
    let base = ProxyConfig::load(path).map_err(|source| Error::Proxy { path: path.to_path_buf(), source })?;
    for s in services {
        if base.backend(&s.backend).is_none() {
            return Err(Error::NoBackend { path: path.to_path_buf(), backend: s.backend.clone() });
        }
    }
    Ok(base)
}

/// `base` with each watched backend's servers replaced by `sets`.
pub fn render(base: &ProxyConfig, services: &[Service], sets: &Sets) -> ProxyConfig {
    let mut config = base.clone();
    for s in services {
        let Some(backend) = config.backends.iter_mut().find(|b| b.name == s.backend) else { continue };
        let Some(servers) = sets.get(&s.backend) else { continue };
        backend.servers = servers
            .iter()
            .map(|(name, m)| Server {
                name: name.clone(),
                address: m.address,
                weight: m.weight,
                check: s.check,
                slowstart: s.slowstart,
                max_connections: None,
                state: AdminState::Ready,
            })
            .collect();
    }
    config
}

/// `base` with each watched backend holding only those servers of `sets` that `before` (the
/// servers of a file already checked, by backend) lacks or holds with another address or
/// weight: what a change brings that was never checked. lb-config checks each server entry on
/// its own, and a backend's names are a set's keys (never twice), so a file of the same base
/// whose every entry was checked in one file or another loads as a whole.
pub fn added<'a>(
    base: &ProxyConfig,
    services: &[Service],
    sets: &Sets,
    before: impl Fn(&str) -> Option<&'a Servers>,
) -> ProxyConfig {
    let new: Sets = sets
        .iter()
        .map(|(backend, servers)| {
            let old = before(backend);
            let fresh = servers
                .iter()
                .filter(|(name, m)| old.and_then(|o| o.get(*name)) != Some(*m))
                .map(|(name, m)| (name.clone(), m.clone()))
                .collect();
            (backend.clone(), fresh)
        })
        .collect();
    render(base, services, &new)
}

/// The watched backends' servers in `config` (what a file written earlier holds).
pub fn sets_of(config: &ProxyConfig, services: &[Service]) -> Sets {
    services
        .iter()
        .map(|s| {
            let servers: Servers = config
                .backend(&s.backend)
                .map(|b| {
                    b.servers
                        .iter()
                        .map(|srv| (srv.name.clone(), Member { address: srv.address, weight: srv.weight }))
                        .collect()
                })
                .unwrap_or_default();
            (s.backend.clone(), servers)
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use std::net::SocketAddr;

    use super::*;
    use crate::config::NodeFormat;

    /// Backends `api` (no server) and `static` (one); the engine's tests render on it too.
    pub(crate) const BASE: &str = "\
frontends:
  - name: fe
    bind: [\"127.0.0.1:8000\"]
    default_backend: api
backends:
  - name: api
    servers: []
  - name: static
    servers: [{ name: s1, address: \"10.1.1.1:80\" }]
";

    /// Backend `api` from path `/a`, port 80, weight 10.
    pub(crate) fn api_service(check: bool, slowstart: Option<std::time::Duration>) -> Service {
        Service {
            backend: "api".into(),
            path: "/a".into(),
            format: NodeFormat::Registrar,
            record_type: "host".into(),
            port: Some(80),
            check,
            weight: 10,
            slowstart,
        }
    }

    #[test]
    fn render_replaces_only_watched_backends_and_reads_back() -> Result<(), lb_config::Error> {
        let base = ProxyConfig::parse(BASE, "base.yaml")?;
        let service = api_service(true, Some(std::time::Duration::from_secs(5)));
        let member = Member { address: SocketAddr::from(([10, 0, 0, 5], 80)), weight: 10 };
        let sets: Sets =
            [("api".to_owned(), [("web1".to_owned(), member)].into_iter().collect())].into_iter().collect();
        let services = [service];
        let rendered = render(&base, &services, &sets);
        let text = rendered.to_yaml();
        let back = ProxyConfig::parse(&text, "out.yaml")?;
        assert_eq!(back, rendered);
        assert_eq!(sets_of(&back, &services), sets);
        let api = back.backend("api").map(|b| b.servers.clone()).unwrap_or_default();
        assert!(api[0].check && api[0].slowstart.is_some() && api[0].weight == 10);
        assert_eq!(back.backend("static").map(|b| b.servers.len()), Some(1));
        Ok(())
    }

    #[test]
    fn added_holds_only_what_the_checked_servers_lack() -> Result<(), lb_config::Error> {
        let base = ProxyConfig::parse(BASE, "base.yaml")?;
        let service = api_service(false, None);
        let at = |last: u8, weight| Member { address: SocketAddr::from(([10, 0, 0, last], 80)), weight };
        let before: Servers =
            [("kept".to_owned(), at(1, 10)), ("moved".to_owned(), at(2, 10)), ("gone".to_owned(), at(3, 10))]
                .into_iter()
                .collect();
        let now: Servers =
            [("kept".to_owned(), at(1, 10)), ("moved".to_owned(), at(4, 10)), ("new".to_owned(), at(5, 20))]
                .into_iter()
                .collect();
        let sets: Sets = [("api".to_owned(), now)].into_iter().collect();
        let services = [service];
        let added = added(&base, &services, &sets, |b| (b == "api").then_some(&before));
        let names: Vec<_> =
            added.backend("api").map(|b| b.servers.iter().map(|s| s.name.clone()).collect()).unwrap_or_default();
        assert_eq!(names, ["moved", "new"], "a kept server is not checked again, a moved one is");
        assert_eq!(added.backend("static").map(|b| b.servers.len()), Some(1), "the base as it is");
        let nothing_before = super::added(&base, &services, &sets, |_| None);
        assert_eq!(nothing_before.backend("api").map(|b| b.servers.len()), Some(3));
        Ok(())
    }
}
