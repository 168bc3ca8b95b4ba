//! lb-proxy's runtime commands (HAProxy's CLI text: `set server api/a1 weight 50%`, `add server
//! …`, `show stat …`) as the runtime socket takes a line (bytes read as UTF-8, lossily; split on
//! `;` and newlines), each run against a fresh process state of the configuration below (no
//! socket, no health check; `lb_proxy::FuzzRuntime`). Every command is answered, never a panic;
//! a refusal says why in one line; an `add server` re-rendered from what it parsed to parses the
//! same; a weight set is the weight read back.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;

/// Two frontends and two backends with servers of every kind the commands treat apart: checked
/// or not, slowstart, IPv6, drained; tables of each key type (addresses grouped by network,
/// strings with a bucket, integers in a fleet table), so that `show/clear/set table` parse keys
/// of every kind and `set fleet share` divides something.
const CONFIG: &str = r#"
global: { max_connections: 1000, log: { target: none } }
defaults: { mode: http }
frontends:
  - { name: public, bind: [ "127.0.0.1:8080" ], default_backend: api }
  - { name: internal, bind: [ "127.0.0.1:8081" ], default_backend: admin, max_connections: 100 }
backends:
  - name: api
    servers:
      - { name: a1, address: "10.0.0.1:80", weight: 10 }
      - { name: a2, address: "10.0.0.2:80", check: true, slowstart: 30s }
  - name: admin
    balance: roundrobin
    servers:
      - { name: b1, address: "[2001:db8::1]:8000", state: drain }
tables:
  per_ip: { size: 100, expire: 10m, prefix: { ipv4: 24, ipv6: 64 }, store: [http_req_rate(10s), conn_cur, gpc0, bytes_out_cnt] }
  api_keys: { type: string, len: 16, size: 10, expire: 1m, store: [http_req_cnt, gpt0], limit_req: { rate: 5, burst: 2 } }
  ids: { type: integer, size: 3, expire: 1s, store: [gpc1, http_err_rate(1m)], fleet: true }
"#;

fn config() -> &'static lb_config::Config {
    static PARSED: OnceLock<lb_config::Config> = OnceLock::new();
    PARSED.get_or_init(|| match lb_config::Config::parse(CONFIG, "runtime_command.yaml") {
        Ok(config) => config,
        Err(e) => panic!("the runtime target's configuration does not load:\n{e}"),
    })
}

fuzz_target!(|data: &[u8]| {
    let line = String::from_utf8_lossy(data);
    let runtime = match lb_proxy::FuzzRuntime::new(config()) {
        Ok(runtime) => runtime,
        Err(e) => panic!("a process state for the runtime target: {e}"),
    };
    let _ = runtime.line(&line);
});
