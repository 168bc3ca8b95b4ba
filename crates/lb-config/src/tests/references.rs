//! Checks across sections: names, binds, backend references and modes.

use super::{error, errors};

#[test]
fn section_names_are_unique_within_their_kind() {
    let text = "\
frontends:
  - { name: web, bind: ['127.0.0.1:1'], default_backend: app }
  - { name: web, bind: ['127.0.0.1:2'], default_backend: app }
backends:
  - name: app
  - name: app
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:3:13: frontends[1].name: duplicate frontend name `web` (first at line 2)",
            "proxy.yaml:6:11: backends[1].name: duplicate backend name `app` (first at line 5)",
        ]
    );
}

#[test]
fn binds_are_unique_across_frontends() {
    let text = "\
frontends:
  - name: a
    bind: ['127.0.0.1:80', 'unix:/run/a.sock']
    default_backend: app
  - name: b
    bind:
      - { address: '127.0.0.1:80', accept_proxy: true }
      - unix:/run/a.sock
    default_backend: app
backends: [{ name: app }]
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:7:20: frontends[1].bind[0].address: `127.0.0.1:80` is already bound by frontend `a` (line 3)",
            "proxy.yaml:8:9: frontends[1].bind[1]: `unix:/run/a.sock` is already bound by frontend `a` (line 3)",
        ]
    );
}

#[test]
fn a_frontend_needs_a_bind_and_somewhere_to_send_requests() {
    let text = "\
frontends:
  - name: a
    bind: []
    default_backend: app
  - name: b
    bind: ['127.0.0.1:81', { accept_proxy: true }]
backends: [{ name: app }]
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:2:5: frontends[0]: at least one `bind` address is required",
            "proxy.yaml:5:5: frontends[1]: needs a `default_backend` or at least one rule: no request could be routed",
            "proxy.yaml:6:28: frontends[1].bind[1]: missing `address`",
        ]
    );
}

#[test]
fn referenced_backends_must_exist() {
    let text = "\
frontends:
  - name: a
    bind: ['127.0.0.1:80']
    default_backend: missing
    rules:
      - { host: x.example.com, backend: also_missing }
      - { path_prefix: /ok, backend: app }
backends: [{ name: app }]
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:4:22: frontends[0].default_backend: no backend named `missing`",
            "proxy.yaml:6:41: frontends[0].rules[0].backend: no backend named `also_missing`",
        ]
    );
}

#[test]
fn a_frontend_and_its_backends_share_a_mode() {
    let text = "\
frontends:
  - name: web
    bind: ['127.0.0.1:80']
    default_backend: db
    rules: [{ host: a.example, backend: app }]
  - name: raw
    mode: tcp
    bind: ['127.0.0.1:81']
    default_backend: app
backends:
  - { name: app }
  - { name: db, mode: tcp }
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:4:22: frontends[0].default_backend: frontend mode http but backend `db` is tcp",
            "proxy.yaml:9:22: frontends[1].default_backend: frontend mode tcp but backend `app` is http",
        ]
    );
}

#[test]
fn tcp_frontends_cannot_route_by_http_facts() {
    let text = "\
frontends:
  - name: raw
    mode: tcp
    bind: ['127.0.0.1:81']
    default_backend: db
    rules:
      - { path_prefix: /x, backend: db }
backends:
  - { name: db, mode: tcp }
";
    assert_eq!(
        error(text),
        "proxy.yaml:7:9: frontends[0].rules[0]: a tcp frontend cannot route by `path_prefix`, \
         `host` or conditions (those are HTTP); use `default_backend`"
    );
}

#[test]
fn rules_need_a_condition_and_a_backend() {
    let text = "\
frontends:
  - name: web
    bind: ['127.0.0.1:80']
    rules:
      - { backend: app }
      - { host: a.example }
      - { path_prefix: admin, backend: app }
      - { host: 'a b', backend: app }
backends: [{ name: app }]
";
    assert_eq!(
        errors(text),
        [
            "proxy.yaml:5:9: frontends[0].rules[0]: a rule needs a condition: `path_prefix`, `host`, `if` or `unless`",
            "proxy.yaml:6:9: frontends[0].rules[1]: missing `backend`",
            "proxy.yaml:7:24: frontends[0].rules[2].path_prefix: `admin` must start with `/`",
            "proxy.yaml:8:17: frontends[0].rules[3].host: invalid host name `a b`",
        ]
    );
}

#[test]
fn an_empty_server_list_is_allowed() {
    let text = "\
frontends: [{ name: web, bind: ['127.0.0.1:80'], default_backend: app }]
backends: [{ name: app, servers: [] }]
";
    let config = super::parse_ok(text);
    assert!(config.backends[0].servers.is_empty());
}
