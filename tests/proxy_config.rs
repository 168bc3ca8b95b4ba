//! Configuration errors as an operator meets them: `lb-proxy -c -f FILE` says exactly where and
//! what (`file:line:col: field.path: message`) and exits 1; a valid file exits 0; serving a bad
//! file exits 64 without binding anything.

use std::net::TcpListener;
use std::path::Path;
use std::time::Duration;

use lb_testkit::{free_port, run_lb_proxy};

const WITHIN: Duration = Duration::from_secs(20);

/// Writes `text` as `dir/name` and runs `lb-proxy ARGS… name` there.
fn run(dir: &Path, name: &str, text: &str, args: &[&str]) -> std::process::Output {
    std::fs::write(dir.join(name), text).expect("writing the configuration");
    let mut all: Vec<&str> = args.to_vec();
    all.push(name);
    run_lb_proxy(&all, dir, WITHIN)
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// 1-based line and column of the first occurrence of `needle` in `text`.
fn position(text: &str, needle: &str) -> (usize, usize) {
    let offset = text.find(needle).expect("needle in text");
    let line = text[..offset].matches('\n').count() + 1;
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    (line, text[line_start..offset].chars().count() + 1)
}

fn valid(fe_port: u16) -> String {
    format!(
        r#"global:
  log: {{ target: stdout, format: haproxy }}
frontends:
  - name: fe
    bind: ["127.0.0.1:{fe_port}"]
    default_backend: be
backends:
  - name: be
    servers:
      - name: s1
        address: 127.0.0.1:8001
      - name: s2
        address: 127.0.0.1:8002
"#
    )
}

#[test]
fn check_accepts_a_valid_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run(dir.path(), "good.yaml", &valid(free_port()), &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
    assert!(stderr(&out).is_empty(), "a valid file gives no diagnostics: {}", stderr(&out));
}

#[test]
fn check_reports_file_line_column_field_and_message() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = valid(free_port()).replace("127.0.0.1:8002", "127.0.0.1:99999");
    let (line, column) = position(&text, "127.0.0.1:99999");
    assert_eq!((line, column), (13, 18), "the test's own arithmetic");
    let out = run(dir.path(), "name.yaml", &text, &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let expected = "name.yaml:13:18: backends[0].servers[1].address: invalid port 99999";
    assert!(stderr(&out).lines().any(|l| l == expected), "expected the line {expected:?} in stderr:\n{}", stderr(&out));
}

#[test]
fn check_reports_every_problem_each_at_its_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = valid(free_port())
        .replace("127.0.0.1:8002", "127.0.0.1:99999")
        .replace("    servers:\n", "    health_check: { type: http, interval: 5x }\n    servers:\n");
    let out = run(dir.path(), "multi.yaml", &text, &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    let (port_line, port_col) = position(&text, "127.0.0.1:99999");
    let (interval_line, interval_col) = position(&text, "5x");
    assert!(
        err.lines()
            .any(|l| l.starts_with(&format!("multi.yaml:{port_line}:{port_col}: backends[0].servers[1].address: "))),
        "{err}"
    );
    assert!(
        err.lines().any(|l| l
            .starts_with(&format!("multi.yaml:{interval_line}:{interval_col}: backends[0].health_check.interval: "))),
        "the bad duration is reported too, at its place:\n{err}"
    );
}

#[test]
fn check_rejects_unknown_keys_at_their_place() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = valid(free_port()).replace("        address: 127.0.0.1:8001", "        adress: 127.0.0.1:8001");
    let (line, column) = position(&text, "adress");
    let out = run(dir.path(), "typo.yaml", &text, &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    let diagnostic =
        err.lines().find(|l| l.contains("adress")).unwrap_or_else(|| panic!("the unknown key is named:\n{err}"));
    assert!(
        diagnostic.starts_with(&format!("typo.yaml:{line}:{column}: ")),
        "located at the key ({line}:{column}): {diagnostic}"
    );
    assert!(diagnostic.contains("unknown field"), "{diagnostic}");

    // An unknown top-level section too.
    let text = format!("{}frontend_typo: {{}}\n", valid(free_port()));
    let out = run(dir.path(), "top.yaml", &text, &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("frontend_typo"), "{}", stderr(&out));
}

#[test]
fn check_rejects_a_reference_to_a_missing_backend() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = valid(free_port()).replace("default_backend: be", "default_backend: nope");
    let (line, column) = position(&text, "nope");
    let out = run(dir.path(), "ref.yaml", &text, &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.lines().any(|l| l.starts_with(&format!("ref.yaml:{line}:{column}: frontends[0].default_backend: "))
            && l.contains("nope")),
        "{err}"
    );
}

#[test]
fn check_reports_an_unreadable_file_and_exits_1() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_lb_proxy(&["-c", "-f", "missing.yaml"], dir.path(), WITHIN);
    assert_eq!(out.status.code(), Some(1), "stderr: {}", stderr(&out));
    assert!(stderr(&out).contains("missing.yaml"), "{}", stderr(&out));
}

#[test]
fn check_binds_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    // The frontend's port is taken: a check must still pass, since it binds nothing.
    let taken = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = taken.local_addr().expect("addr").port();
    let out = run(dir.path(), "busy.yaml", &valid(port), &["-c", "-f"]);
    assert_eq!(out.status.code(), Some(0), "stderr: {}", stderr(&out));
}

#[test]
fn serving_a_bad_file_exits_64_without_binding() {
    let dir = tempfile::tempdir().expect("tempdir");
    let port = free_port();
    let text = valid(port).replace("127.0.0.1:8002", "127.0.0.1:99999");
    let out = run(dir.path(), "bad.yaml", &text, &["-f"]);
    assert_eq!(out.status.code(), Some(64), "stderr: {}", stderr(&out));
    assert!(
        stderr(&out).contains("bad.yaml:13:18: backends[0].servers[1].address: invalid port 99999"),
        "{}",
        stderr(&out)
    );
    // It never listened: the port is still free.
    assert!(TcpListener::bind(("127.0.0.1", port)).is_ok(), "the frontend port was left bound");
}

#[test]
fn a_missing_flag_argument_is_a_usage_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = run_lb_proxy(&["-f"], dir.path(), WITHIN);
    assert_eq!(out.status.code(), Some(64), "stderr: {}", stderr(&out));
}
