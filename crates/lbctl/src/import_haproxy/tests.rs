//! The translation of small haproxy.cfg texts: what comes out, and what is reported.

use std::path::Path;
use std::time::Duration;

use lb_config::{
    AdminState, Balance, CheckKind, Condition, Fetch, HttpReuse, ListenAddr, LogTarget, Matcher, Mode, RequestAction,
    RouteTarget, Test,
};

use super::lexer::split;
use super::{options, translate, Translation};

fn no_env(_: &str) -> Option<String> {
    None
}

fn run(text: &str) -> Translation {
    translate(text, &options(Path::new("t.cfg")), &no_env)
}

fn report(t: &Translation) -> String {
    t.report.render("t.cfg")
}

const HEAD: &str = "defaults\n  mode http\n  timeout connect 1s\n  timeout client 5s\n  timeout server 5s\n";

#[test]
fn words_split_as_haproxy_splits_them() {
    let env = |name: &str| (name == "PORT").then(|| "8080".to_owned());
    let words = |line: &str| split(line, &env).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(words("  bind  :80   # the port"), ["bind", ":80"]);
    assert_eq!(words(r"log-format %{+Q}o\ %t\ %s"), ["log-format", "%{+Q}o %t %s"]);
    assert_eq!(words(r#"log-format "%{+Q}o %t"' %s'\ %{-Q}r"#), ["log-format", "%{+Q}o %t %s %{-Q}r"]);
    assert_eq!(words(r#"bind "127.0.0.1:${PORT}" name '$PORT'"#), ["bind", "127.0.0.1:8080", "name", "$PORT"]);
    assert_eq!(words(r#"x "a#b" \#c "" d"#), ["x", "a#b", "#c", "", "d"]);
    assert_eq!(words(r#"option httpchk GET / "HTTP/1.1\r\nHost: a""#)[4], "HTTP/1.1\r\nHost: a");
    assert_eq!(words(r"acl a path_reg ^/a\.b$"), ["acl", "a", "path_reg", r"^/a\.b$"]);
    assert!(split("server a 1.2.3.4:80 \\", &env).expect_err("refused").contains("no line continuation"));
    assert!(split("log-format \"open", &env).expect_err("refused").contains("double quote"));
    assert!(split("x 'open", &env).expect_err("refused").contains("single quote"));
}

#[test]
fn defaults_pass_on_and_named_defaults_are_chosen_by_from() {
    let t = run("defaults\n  mode tcp\n  timeout client 7s\n  timeout server 8s\n\
         defaults web\n  mode http\n  timeout client 3s\n  option forwardfor\n\
         defaults\n  mode tcp\n  timeout connect 9s\n\
         frontend plain\n  bind 127.0.0.1:1\n  default_backend be\n\
         frontend webby from web\n  bind 127.0.0.1:2\n  default_backend webbe\n\
         backend be\n  server s 127.0.0.1:3\n\
         backend webbe from web\n  server s 127.0.0.1:4\n");
    let f = |n: &str| t.config.frontend(n).expect("frontend");
    assert_eq!(f("plain").mode, Mode::Tcp);
    assert_eq!(f("plain").timeouts.connect, Duration::from_secs(9));
    // The last unnamed defaults replaces the first: lb-proxy's default client timeout.
    assert_eq!(f("plain").timeouts.client, Duration::from_secs(30));
    assert_eq!(f("webby").mode, Mode::Http);
    assert!(f("webby").forward_for);
    assert_eq!(f("webby").timeouts.client, Duration::from_secs(3));
    // HAProxy: `timeout http-request` falls back to `timeout client`, keep-alive to http-request.
    assert_eq!(f("webby").timeouts.http_request, Duration::from_secs(3));
    assert_eq!(f("webby").timeouts.http_keep_alive, Duration::from_secs(3));
    assert_eq!(t.config.backend("webbe").expect("backend").mode, Mode::Http);
    assert_eq!(t.report.untranslated(), 0, "{}", report(&t));
}

#[test]
fn without_mode_haproxy_proxies_tcp_and_balances_roundrobin_with_reuse() {
    let t = run("frontend f\n  bind :80\n  default_backend b\nbackend b\n  server a 10.0.0.1:80\n");
    assert_eq!(t.config.frontends[0].mode, Mode::Tcp);
    assert_eq!(t.config.frontends[0].binds[0].address, "0.0.0.0:80".parse::<ListenAddr>().expect("addr"));
    let b = &t.config.backends[0];
    assert_eq!((b.mode, b.balance, b.http_reuse, b.retries), (Mode::Tcp, Balance::RoundRobin, HttpReuse::Safe, 3));
}

#[test]
fn servers_and_their_health_check() {
    let t = run(&format!(
        "{HEAD}backend b\n  balance leastconn\n  option httpchk GET /health \"HTTP/1.1\\r\\nHost: api.example.com\"\n  \
         default-server inter 3s fall 5\n  server a 10.0.0.1:8080 check weight 20 maxconn 50 slowstart 10s\n  \
         server b [::1]:8081 check disabled\n  server c 10.0.0.3:8080 backup check\n  server d 10.0.0.4 check\n  \
         server e 10.0.0.5:80 check inter 5s cookie e\n"
    ));
    let b = &t.config.backends[0];
    assert_eq!(b.balance, Balance::LeastConn);
    let names: Vec<&str> = b.servers.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["a", "b", "e"]);
    let a = &b.servers[0];
    assert_eq!((a.weight, a.max_connections, a.slowstart), (20, Some(50), Some(Duration::from_secs(10))));
    assert_eq!(b.servers[1].state, AdminState::Maint);
    assert_eq!(b.servers[1].address.to_string(), "[::1]:8081");
    assert_eq!(b.health_check.interval, Duration::from_secs(3));
    assert_eq!(b.health_check.fall, 5);
    // `timeout check` unset: HAProxy bounds a check by `inter`.
    assert_eq!(b.timeouts.check, Duration::from_secs(3));
    let CheckKind::Http { method, path, host, expect_status } = &b.health_check.kind else { panic!("http check") };
    assert_eq!(
        (method.as_str(), path.as_str(), host.as_deref(), *expect_status),
        ("GET", "/health", Some("api.example.com"), 200)
    );
    let r = report(&t);
    assert!(r.contains("t.cfg:8: option httpchk: note: HAProxy counts any 2xx or 3xx as up"), "{r}");
    assert!(r.contains("t.cfg:12: server: not translated: `c` is a backup server"), "{r}");
    assert!(r.contains("t.cfg:13: server: not translated: `10.0.0.4`: without a port"), "{r}");
    assert!(r.contains("t.cfg:14: server … cookie: not translated: lb-proxy has no cookie persistence"), "{r}");
    assert!(r.contains("t.cfg:14: server … inter: note: lb-proxy checks every server of a backend alike: the first server's `inter` (3s) is used, not 5s"), "{r}");
    assert_eq!(t.report.untranslated(), 3, "{r}");
}

#[test]
fn what_lb_proxy_sets_per_frontend_is_reported_in_a_backend() {
    let t = run(&format!(
        "{HEAD}  errorfile 503 /etc/haproxy/errors/503.http\nbackend b\n  option forwardfor\n  errorfile 504 /x.http\n  server a 10.0.0.1:80\n"
    ));
    let r = report(&t);
    assert!(
        r.contains("t.cfg:8: option forwardfor: not translated: lb-proxy adds X-Forwarded-For per frontend"),
        "{r}"
    );
    assert!(r.contains("t.cfg:9: errorfile: not translated: lb-proxy's error pages are per frontend"), "{r}");
    // The defaults' errorfile is not the backend's own line.
    assert_eq!(t.report.untranslated(), 2, "{r}");
}

#[test]
fn global_settings_and_the_stats_socket() {
    let t = run("global\n  maxconn 1234\n  nbthread 2\n  user lb\n  group lb\n  stats socket /run/hap.sock mode 600 level admin\n  \
         log 127.0.0.1 local2\n  log /dev/log local0\n  daemon\n  hard-stop-after 30m\n  tune.bufsize 32768\n");
    let g = &t.config.global;
    assert_eq!((g.max_connections, g.supervision.worker_threads), (1234, Some(2)));
    assert_eq!(g.supervision.user.as_deref(), Some("lb"));
    assert_eq!(g.supervision.runtime.socket.as_deref(), Some(Path::new("/run/hap.sock")));
    assert_eq!(g.supervision.hard_stop_after, Some(Duration::from_secs(1800)));
    assert_eq!(g.log.target, LogTarget::SyslogUdp("127.0.0.1:514".parse().expect("addr")));
    assert_eq!(g.log.facility.as_str(), "local2");
    let r = report(&t);
    assert!(r.contains("t.cfg:8: log: not translated: lb-proxy writes one log"), "{r}");
    assert!(r.contains("t.cfg:9: daemon: not translated"), "{r}");
    assert!(r.contains("t.cfg:11: tune.bufsize: not translated"), "{r}");
}

#[test]
fn a_stats_listen_becomes_the_stats_page() {
    let t = run(&format!(
        "{HEAD}listen stats\n  bind 127.0.0.1:8404\n  stats enable\n  stats uri /\n  stats refresh 10s\n"
    ));
    let stats = t.config.global.stats.expect("stats");
    assert_eq!(stats.address.to_string(), "127.0.0.1:8404");
    assert_eq!(stats.refresh, Duration::from_secs(10));
    assert!(t.config.frontends.is_empty() && t.config.backends.is_empty());
}

#[test]
fn acls_and_conditions_become_named_conditions() {
    let t = run(&format!(
        "{HEAD}frontend f\n  bind 127.0.0.1:1\n  acl api hdr(host) -i api.example.com\n  acl v2 path_beg /v2/ /v3/\n  \
         acl internal src 10.0.0.0/8 192.168.0.1\n  \
         use_backend api if api v2 || {{ path /x }}\n  use_backend b unless internal\n  \
         use_backend b if !internal METH_POST\n  default_backend b\n\
         frontend g\n  bind 127.0.0.1:2\n  acl api path /other\n  use_backend b if api\n  default_backend b\n\
         backend api\n  server a 10.0.0.1:80\nbackend b\n  server a 10.0.0.1:80\n"
    ));
    assert_eq!(t.report.untranslated(), 0, "{}", report(&t));
    let f = t.config.frontend("f").expect("f");
    assert_eq!(f.rules.len(), 3);
    let guard = f.rules[0].guard.as_ref().expect("guard");
    let Condition::Any(any) = &guard.condition else { panic!("{guard:?}") };
    assert_eq!(any[0], Condition::All(vec![Condition::Named("api".into()), Condition::Named("v2".into())]));
    assert_eq!(
        any[1],
        Condition::Test(Test { fetch: Fetch::Path, matcher: Matcher::Equals("/x".into()), ignore_case: false })
    );
    assert!(f.rules[1].guard.as_ref().is_some_and(|g| g.negate));
    let policy = &t.config.policy;
    let Some(Condition::Test(api)) = policy.conditions.get("api") else { panic!("{policy:?}") };
    assert_eq!(
        (&api.fetch, &api.matcher, api.ignore_case),
        (&Fetch::Host, &Matcher::Equals("api.example.com".into()), true)
    );
    assert!(matches!(policy.conditions.get("v2"), Some(Condition::Any(list)) if list.len() == 2));
    // Frontend g's `api` is another condition: it gets its own name.
    assert_eq!(
        t.config.frontend("g").expect("g").rules[0].guard.as_ref().map(|g| &g.condition),
        Some(&Condition::Named("g.api".into()))
    );
    // And the whole translation loads.
    lb_config::Config::parse(&t.config.to_yaml(), "out").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn http_request_rules_captures_and_logs() {
    let t = run(&format!(
        "{HEAD}frontend f\n  bind 127.0.0.1:1\n  capture request header x-request-id len 36\n  \
         http-request deny deny_status 400 if {{ req.hdr_cnt(content-length) gt 1 }}\n  \
         http-request return status 200 content-type application/json string '{{\"ok\":true}}' if {{ path /healthz }}\n  \
         http-request set-header X-Client-IP %[src]\n  http-request del-header X-Internal\n  \
         http-request redirect scheme https code 301 unless {{ ssl_fc }}\n  http-request tarpit\n  \
         http-response del-header Server\n  http-response set-header Strict-Transport-Security max-age=31536000\n  \
         unique-id-format %[uuid()]\n  unique-id-header X-Request-ID\n  \
         log-format \"%ci [%tr] %ST %[capture.req.hdr(0)]\"\n  default_backend b\n\
         backend b\n  server a 10.0.0.1:80\n"
    ));
    let f = &t.config.frontends[0];
    let actions: Vec<&RequestAction> = f.http_request.iter().map(|r| &r.action).collect();
    assert!(matches!(actions[0], RequestAction::Capture(c) if c.header == "x-request-id" && c.length == 36));
    assert!(matches!(actions[1], RequestAction::Deny(r) if r.status == 400));
    assert!(matches!(actions[2], RequestAction::Return(r) if r.body[..] == br#"{"ok":true}"#[..] && r.status == 200));
    assert!(matches!(actions[3], RequestAction::SetHeader(h) if h.value.source == "%[src]"));
    assert!(matches!(actions[4], RequestAction::DelHeader(h) if h == "X-Internal"));
    assert!(matches!(actions[5], RequestAction::Redirect(r) if r.code == 301));
    assert_eq!(actions.len(), 6);
    assert_eq!(f.http_response.len(), 2);
    let id = f.unique_id.as_ref().expect("unique id");
    assert_eq!((id.header.as_str(), id.format.is_none(), id.keep_client), ("X-Request-ID", true, false));
    let Some(lb_config::AccessLogFormat::Text(log)) = &f.log_format else { panic!("{:?}", f.log_format) };
    assert_eq!(log.source, "%ci [%tr] %ST %hr");
    let r = report(&t);
    assert!(r.contains("t.cfg:14: http-request tarpit: not translated: `tarpit`"), "{r}");
    assert_eq!(t.report.untranslated(), 1, "{r}");
    lb_config::Config::parse(&t.config.to_yaml(), "out").unwrap_or_else(|e| panic!("{e}"));
}

#[test]
fn a_json_log_format_becomes_the_json_log() {
    let t = run(&format!(
        "{HEAD}frontend f\n  bind 127.0.0.1:1\n  log-format '{{\"client\":\"%ci\",\"status\":%ST,\"bytes\": %B }}'\n  default_backend b\n\
         backend b\n  server a 10.0.0.1:80\n"
    ));
    let Some(lb_config::AccessLogFormat::Json(fields)) = &t.config.frontends[0].log_format else { panic!() };
    let keys: Vec<(&str, &str)> = fields.iter().map(|(k, v)| (k.as_str(), v.source.as_str())).collect();
    assert_eq!(keys, [("client", "%ci"), ("status", "%ST"), ("bytes", "%B")]);
}

#[test]
fn use_backend_by_map_and_the_unreachable_ones() {
    let t = run(&format!(
        "{HEAD}frontend f\n  bind 127.0.0.1:1\n  use_backend %[req.hdr(host),lower,map(/etc/haproxy/hosts.map,b)]\n  \
         use_backend api\n  use_backend b if {{ path /x }}\nbackend api\n  server a 10.0.0.1:80\nbackend b\n  server a 10.0.0.1:80\n"
    ));
    let f = &t.config.frontends[0];
    assert!(
        matches!(&f.rules[0].backend, RouteTarget::Map { map, key: Fetch::Host, default: Some(d) } if map == "hosts" && d == "b")
    );
    assert_eq!(f.default_backend.as_deref(), Some("api"));
    assert!(t.config.policy.maps.get("hosts").is_some_and(|m| m.ignore_case));
    assert!(report(&t).contains("t.cfg:10: use_backend: not translated: never reached: line 9"), "{}", report(&t));
}

#[test]
fn unknown_sections_directives_and_bad_values_are_named() {
    let t = run(&format!(
        "userlist admins\n  user a insecure-password b\n{HEAD}  timeout queue 5s\n  option dontlognull\n  option splice-auto\n\
         frontend f\n  bind 127.0.0.1:1-5\n  bind 127.0.0.1:2 transparent\n  timeout client 30\n  frobnicate\n  default_backend b\n\
         backend b\n  server a 10.0.0.1:80\n"
    ));
    let r = report(&t);
    for expected in [
        "t.cfg:1: userlist admins: not translated: lb-proxy has no HTTP authentication",
        "t.cfg:8: timeout queue: not translated: lb-proxy queues no requests",
        "t.cfg:9: option dontlognull: not translated",
        "t.cfg:12: bind: not translated: `127.0.0.1:1-5`: port ranges are not supported",
        "t.cfg:13: bind … transparent: not translated",
        "t.cfg:15: frobnicate: not translated",
    ] {
        assert!(r.contains(expected), "{expected}\n{r}");
    }
    assert!(!r.contains("t.cfg:2:"), "a line of a section reported whole: {r}");
    // No unit: milliseconds (HAProxy's rule), not seconds.
    assert_eq!(t.config.frontends[0].timeouts.client, Duration::from_millis(30));
}

#[test]
fn ssl_binds_become_lb_tls_frontends_and_a_socket() {
    let mut opts = options(Path::new("t.cfg"));
    opts.tls_config = Some("tls.yaml".into());
    let text = format!(
        "global\n  crt-base /etc/certs\n  ssl-default-bind-options ssl-min-ver TLSv1.2 no-tls-tickets\n\
         {HEAD}frontend f\n  bind 127.0.0.1:80\n  bind 127.0.0.1:443,127.0.0.2:443 ssl crt site.pem alpn h2,http/1.1 strict-sni\n  \
         default_backend b\nfrontend g\n  bind 127.0.0.1:8443 ssl crt other.pem\n  default_backend b\nbackend b\n  server a 10.0.0.1:80\n"
    );
    let t = translate(&text, &opts, &no_env);
    let tls = t.tls.as_ref().expect("an lb-tls configuration");
    assert_eq!(tls.frontends.len(), 2);
    let own = tls.frontends[0].tls.as_ref().expect("own settings");
    assert_eq!(own.certificates[0].pem, Path::new("/etc/certs/site.pem"));
    assert_eq!(own.alpn_protocols.as_deref(), Some(&["h2".to_owned(), "http/1.1".to_owned()][..]));
    assert_eq!(own.sni_nomatch_abort, Some(true));
    assert_eq!(tls.tls.session_tickets, Some(false));
    let f = t.config.frontend("f").expect("f");
    assert_eq!(f.binds.len(), 2);
    assert_eq!(f.binds[1].address, ListenAddr::Unix("/var/run/lb/proxy-tls.sock".into()));
    assert!(f.binds[1].accept_proxy);
    let r = report(&t);
    assert!(
        r.contains(
            "t.cfg:14: bind … ssl: not translated: lb-tls forwards every connection to one lb-proxy frontend, here `f`"
        ),
        "{r}"
    );
    // Without --tls-config, ssl binds are named, not dropped silently.
    let t = run(&text);
    assert!(t.tls.is_none());
    assert!(report(&t).contains("t.cfg:11: bind … ssl: not translated: give --tls-config FILE"), "{}", report(&t));
}

/// Every line of the samples cut after each of its words, alone in its section: whatever
/// comes, a report and no panic.
#[test]
fn truncated_lines_are_reported_not_panicked_on() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../etc/haproxy-import");
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("etc/haproxy-import") {
        let text = std::fs::read_to_string(entry.expect("entry").path()).expect("sample");
        lines.extend(text.lines().filter(|l| !l.trim_start().starts_with('#')).map(str::to_owned));
    }
    lines.extend(
        ["acl a {", "use_backend b if { }", "use_backend b if !{ path", "http-request deny if", "bind", "server s"]
            .map(str::to_owned),
    );
    for line in lines {
        let words: Vec<&str> = line.split_whitespace().collect();
        for n in 0..=words.len() {
            let cut = words[..n].join(" ");
            for section in ["global", "defaults", "frontend f", "backend b", "listen l"] {
                let _ = run(&format!("{section}\n{cut}\n"));
            }
        }
    }
}
