use super::*;

const GOOD: &str = "\
zookeeper:
  servers: [\"127.0.0.1:2181\", \"zk2:2181\"]
  session_timeout: 6s
  chroot: /lb
proxy:
  base: base.yaml
  config: /etc/lb-proxy/lb-proxy.yaml
  reload_command: [systemctl, reload, lb-proxy]
hysteresis:
  collect: 0s
  hold: 1s
status:
  listen: 127.0.0.1:9180
services:
  - backend: secure_api
    name: api.us-east.example.com
    port: 81
    check: true
    slowstart: 10s
  - backend: insecure_api
    path: /com/example/us-east/api
    port: 80
    weight: 50
";

fn errors(text: &str) -> Vec<String> {
    match Config::parse(text, "w.yaml") {
        Ok(c) => panic!("parsed: {c:?}"),
        Err(Error::Config { diagnostics }) => diagnostics.iter().map(ToString::to_string).collect(),
        Err(e) => panic!("{e}"),
    }
}

#[test]
fn a_good_file() -> Result<(), Error> {
    let c = Config::parse(GOOD, "w.yaml")?;
    assert_eq!(c.zookeeper.connect_string(), "127.0.0.1:2181,zk2:2181/lb");
    assert_eq!(c.zookeeper.session_timeout, Duration::from_secs(6));
    assert_eq!(c.zookeeper.audit_interval, Duration::from_secs(600), "the audit's default");
    let audited = Config::parse(&GOOD.replace("  chroot: /lb\n", "  chroot: /lb\n  audit_interval: 30m\n"), "w.yaml")?;
    assert_eq!(audited.zookeeper.audit_interval, Duration::from_secs(1800));
    assert_eq!(c.services[0].path, "/com/example/us-east/api");
    assert_eq!(c.services[0].port, Some(81));
    assert_eq!(c.services[0].slowstart, Some(Duration::from_secs(10)));
    assert_eq!(c.services[1].weight, 50);
    assert_eq!(c.hysteresis.collect, Duration::ZERO);
    assert_eq!(c.hysteresis.collect_jitter, Duration::from_secs(5), "defaults kept");
    assert_eq!(c.hysteresis.max_remove_percent, 20);
    assert!(c.proxy.base.is_absolute());
    assert_eq!(c.proxy.drift_check, Duration::from_secs(30));
    assert_eq!(c.status_listen, Some(SocketAddr::from(([127, 0, 0, 1], 9180))));
    Ok(())
}

#[test]
fn the_example_file_is_valid() -> Result<(), Error> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/lb-watcher.yaml");
    let c = Config::load(&path)?;
    assert_eq!(c.services.len(), 2);
    Ok(())
}

#[test]
fn path_of_a_name() {
    assert_eq!(path_of_name("api.us-east.example.com"), "/com/example/us-east/api");
    assert_eq!(path_of_name("api.example.com."), "/com/example/api");
}

#[test]
fn errors_name_file_line_column_and_field() {
    let bad = GOOD.replace("port: 81", "port: 99999").replace("session_timeout: 6s", "session_timeout: 6x");
    assert_eq!(
        errors(&bad),
        vec![
            "w.yaml:3:20: zookeeper.session_timeout: invalid duration `6x`: expected an integer followed by ms, s, m \
             or h (e.g. 250ms, 30s, 5m); a bare integer is milliseconds"
                .to_owned(),
            "w.yaml:17:11: services[0].port: 99999 is out of range (1..=65535)".to_owned(),
        ]
    );
    let bad = GOOD.replace("  config: /etc/lb-proxy/lb-proxy.yaml\n", "  confg: x\n");
    let e = errors(&bad);
    assert!(e[0].starts_with("w.yaml:7:3: ") && e[0].contains("unknown field `confg`"), "{e:?}");
    let bad = GOOD.replace("    port: 80\n", "");
    assert_eq!(
        errors(&bad),
        vec!["w.yaml:20:5: services[1]: missing `port`: `host` records carry no port, the service gives it"]
    );
    let bad = GOOD.replace("backend: insecure_api", "backend: secure_api");
    assert_eq!(
        errors(&bad),
        vec!["w.yaml:20:14: services[1].backend: backend `secure_api` is already filled by services[0]"]
    );
    let bad = GOOD.replace("127.0.0.1:9180", "0.0.0.0:9180");
    assert!(errors(&bad)[0].contains("status.listen: `0.0.0.0:9180` is not a loopback address"));
    let bad = GOOD.replace("\"zk2:2181\"", "\"zk2\"");
    assert_eq!(errors(&bad), vec!["w.yaml:2:31: zookeeper.servers[1]: invalid server `zk2`: expected HOST:PORT"]);
}

#[test]
fn the_fleet_key_names_a_path_and_this_node() -> Result<(), Error> {
    assert_eq!(Config::parse(GOOD, "w.yaml")?.fleet, None, "no fleet unless asked for");
    let named = Config::parse(&format!("{GOOD}fleet: {{ path: /com/example/lb, name: lb7 }}\n"), "w.yaml")?;
    let fleet = named.fleet.expect("a fleet");
    assert_eq!(fleet.node_path(), "/com/example/lb/lb7");
    let host = Config::parse(&format!("{GOOD}fleet: {{ path: /com/example/lb }}\n"), "w.yaml")?;
    assert!(!host.fleet.expect("a fleet").name.is_empty(), "the host's name by default");
    let e = errors(&format!("{GOOD}fleet: {{ path: com/lb, name: a/b }}\n"));
    assert!(e.iter().any(|l| l.starts_with("w.yaml:24:") && l.contains("fleet.path") && l.contains("com/lb")), "{e:?}");
    let e = errors(&format!("{GOOD}fleet: {{ path: /lb, name: a/b }}\n"));
    assert!(e.iter().any(|l| l.contains("fleet.name") && l.contains("`a/b`")), "{e:?}");
    let e = errors(&format!("{GOOD}fleet: {{ name: x }}\n"));
    assert!(e.iter().any(|l| l.contains("missing `fleet.path`")), "{e:?}");
    let e = errors(&format!("{GOOD}fleet: {{ path: /lb, nodes: 3 }}\n"));
    assert!(e.iter().any(|l| l.contains("nodes")), "{e:?}");
    Ok(())
}
