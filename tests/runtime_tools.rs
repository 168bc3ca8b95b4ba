//! HAProxy's tools and formats against lb-proxy's runtime socket: `show info` field for field
//! with a Debian haproxy run here, the typed and JSON forms of `show info` and `show stat` with
//! the same positions, tags and types as haproxy's, `show schema json`, and hatop (Debian's
//! hatop package), which reads `show info` and `show stat` through the interactive prompt.

use std::collections::HashMap;
use std::process::Command;
use std::time::Duration;

use lb_testkit::haproxy::{haproxy_answers, haproxy_answers_after};
use lb_testkit::raw::RawConn;
use lb_testkit::{client, ProxyProcess, TestServer};

fn config(server: &TestServer) -> impl Fn(&[u16]) -> String {
    let addr = server.addr();
    move |ports: &[u16]| {
        format!(
            r#"global:
  runtime_name: lb-proxy
defaults:
  timeouts: {{ connect: 1s, client: 10s, server: 10s, check: 500ms }}
frontends:
  - name: web
    bind: ["127.0.0.1:{fe}"]
    default_backend: api
backends:
  - name: api
    health_check: {{ type: http, path: /ping, expect_status: 200, interval: 200ms, rise: 1, fall: 1 }}
    servers:
      - {{ name: a1, address: "{addr}", check: true }}
      - {{ name: a2, address: "127.0.0.1:1", check: true }}
"#,
            fe = ports[0],
        )
    }
}

/// `show info`'s field names, in order.
fn info_names(text: &str) -> Vec<String> {
    text.lines().filter_map(|l| l.split_once(": ").map(|(name, _)| name.to_owned())).collect()
}

/// A typed line's key (`F.pos.name` or `pos.name`, without ids) and its tags and type.
fn typed_fields(text: &str, stat: bool) -> HashMap<String, String> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|line| {
            let mut parts = line.splitn(4, ':');
            let head = parts.next().unwrap_or_default();
            let tags = parts.next().unwrap_or_default();
            let kind = parts.next().unwrap_or_default();
            let words: Vec<&str> = head.split('.').collect();
            let key = if stat {
                format!("{}.{}.{}", words[0], words[3], words[4])
            } else {
                format!("{}.{}", words[0], words[1])
            };
            (key, format!("{tags}:{kind}"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_info_and_the_typed_forms_match_haproxys() {
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    for _ in 0..5 {
        assert_eq!(client::get(proxy.addr(), "/").await.expect("request").status, 200);
    }
    let (theirs, _) = haproxy_answers(&["show info", "show info typed", "show stat typed"]);

    let info = proxy.runtime("show info");
    assert!(info.starts_with("Name: lb-proxy\nVersion: "), "{info}");
    assert_eq!(info_names(&info), info_names(&theirs[0]), "every field of haproxy's show info, in its order");
    for line in ["Nbproc: 1", "Process_num: 1", "Maxpipes: 0", "PipesUsed: 0", "CumReq: 5"] {
        assert!(info.lines().any(|l| l == line), "{line} in:\n{info}");
    }

    let ours = typed_fields(&proxy.runtime("show info typed"), false);
    let reference = typed_fields(&theirs[1], false);
    assert_eq!(ours.len(), reference.len(), "{ours:?}");
    for (key, tags) in &ours {
        assert_eq!(Some(tags), reference.get(key), "show info typed {key}");
    }

    let stat_typed = proxy.runtime("show stat typed");
    assert!(stat_typed.starts_with("F.1.0.0.pxname.1:KNS:str:web\n"), "{stat_typed}");
    assert!(stat_typed.contains("\nS.2.1.1.svname.1:KNS:str:a1\n"), "{stat_typed}");
    let ours = typed_fields(&stat_typed, true);
    let reference = typed_fields(&theirs[2], true);
    let mut compared = 0;
    for (key, tags) in &ours {
        if let Some(theirs) = reference.get(key) {
            assert_eq!(tags, theirs, "show stat typed {key}");
            compared += 1;
        }
    }
    assert!(compared > 80, "most fields are compared, {compared} were");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_forms_and_the_schema_parse() {
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let info: serde_json::Value = serde_json::from_str(&proxy.runtime("show info json")).expect("show info json");
    let name = info.as_array().and_then(|a| a.first()).expect("fields");
    assert_eq!(name["field"]["name"], "Name");
    assert_eq!(name["value"]["value"], "lb-proxy");
    let stat: serde_json::Value = serde_json::from_str(&proxy.runtime("show stat json")).expect("show stat json");
    let objects = stat.as_array().expect("objects");
    assert_eq!(objects.len(), 4, "frontend, two servers, backend: {stat}");
    assert_eq!(objects[1][0]["objType"], "Server");
    let filtered: serde_json::Value =
        serde_json::from_str(&proxy.runtime("show stat api 4 -1 json")).expect("filtered json");
    assert_eq!(filtered.as_array().map(Vec::len), Some(2), "the two servers of api");
    let schema: serde_json::Value = serde_json::from_str(&proxy.runtime("show schema json")).expect("schema");
    assert_eq!(schema["$schema"], "http://json-schema.org/draft-04/schema#");
}

/// hatop in a pseudo-terminal of 120×40 for two seconds, then `q`: its exit status and screen.
fn run_hatop(socket: &std::path::Path) -> (i32, String) {
    let script = r#"
import os, pty, sys, time, fcntl, termios, struct, select
pid, fd = pty.fork()
if pid == 0:
    os.environ["TERM"] = "xterm"
    os.execvp("hatop", ["hatop", "-s", sys.argv[1]])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
os.kill(pid, 28)  # SIGWINCH: hatop reads the new size
screen = b""
end = time.time() + 2.5
while time.time() < end:
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            screen += os.read(fd, 65536)
        except OSError:
            break
try:
    os.write(fd, b"q")
except OSError:
    pass
end = time.time() + 5
while time.time() < end:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    r, _, _ = select.select([fd], [], [], 0.1)
    if r:
        try:
            screen += os.read(fd, 65536)
        except OSError:
            pass
else:
    os.kill(pid, 9)
    done, status = os.waitpid(pid, 0)
sys.stdout.write(screen.decode("utf-8", "replace"))
sys.exit(os.waitstatus_to_exitcode(status))
"#;
    let out = Command::new("python3").arg("-c").arg(script).arg(socket).output().expect("run python3");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hatop_shows_the_proxy() {
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let (status, screen) = run_hatop(proxy.runtime_socket());
    assert!(!screen.contains("missing"), "hatop refused show info:\n{screen}");
    assert_eq!(status, 0, "hatop quit cleanly on q:\n{screen}");
    assert!(screen.contains("lb-proxy"), "hatop shows the process name:\n{screen}");
    assert!(screen.contains("api") && screen.contains("a1"), "hatop lists the backend and its servers:\n{screen}");
}

/// `show errors` shows the last request a frontend refused, as haproxy does: the same header
/// line, event number, source and error position, the same dump of the bytes; a framing
/// conflict hyper would have accepted is captured with its reason.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_errors_shows_the_refused_request_as_haproxy_does() {
    let server = TestServer::start("a1");
    let proxy = ProxyProcess::start_with(1, config(&server));
    let bad: &[u8] = b"GET / HTTP/1.1\r\nBad Header: x\r\nHost: a\r\n\r\n";
    let refused = |bytes: &'static [u8]| {
        let addr = proxy.addr();
        async move {
            let mut conn = RawConn::connect(addr).await.expect("connect");
            conn.send(bytes).await.expect("send");
            conn.read_response(Duration::from_secs(5)).await.expect("a response").status
        }
    };
    assert_eq!(proxy.runtime("show errors").lines().nth(1), Some(" "), "nothing captured yet");
    assert_eq!(refused(bad).await, 400);
    let (theirs, _) = haproxy_answers_after(&[bad], &["show errors"]);
    let ours = proxy.runtime("show errors");

    let dump = |text: &str| text.lines().filter(|l| l.starts_with("  0")).map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(dump(&ours), dump(&theirs[0]), "the bytes as haproxy shows them:\n{ours}\n{}", theirs[0]);
    assert_eq!(dump(&ours).len(), 4, "{ours}");
    for text in [&ours, &theirs[0]] {
        assert!(text.starts_with("Total events captured on ["), "{text}");
        assert!(text.contains(" : 1\n \n["), "{text}");
        assert!(text.contains(" frontend web (#"), "{text}");
        assert!(
            text.contains("): invalid request\n  backend <NONE> (#-1), server <NONE> (#-1), event #0, src 127.0.0.1:"),
            "{text}"
        );
        assert!(text.contains("error at position 19\n"), "{text}");
    }
    assert!(ours.contains("\n  reason: invalid HTTP header parsed\n"), "{ours}");

    // A framing conflict hyper would accept is refused by lb-proxy, and captured with why.
    let smuggling: &[u8] =
        b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(refused(smuggling).await, 400);
    let ours = proxy.runtime("show errors web");
    assert!(ours.contains(" : 2\n"), "{ours}");
    assert!(ours.contains("event #1,"), "{ours}");
    assert!(ours.contains("\n  reason: both Content-Length and Transfer-Encoding\n"), "{ours}");
    assert!(ours.contains("\n  00000  POST / HTTP/1.1\\r\\n\n"), "{ours}");

    assert!(proxy.runtime("show errors 1").contains("reason: both Content-Length and Transfer-Encoding"));
    assert!(!proxy.runtime("show errors response").contains("invalid request"));
}
