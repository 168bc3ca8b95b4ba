//! The lbctl binary against a fake master: a Unix socket speaking the control protocol (one
//! JSON request per line, one JSON response per line) with scripted answers.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::{Arc, Mutex};

use lb_supervisor::{ProcEntry, ProcTable, Request, Response, Role};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixListener;
use tokio::process::Command;

type TestResult = Result<(), Box<dyn std::error::Error>>;

/// A fake master answering every request with `answer`, keeping the requests it got.
struct FakeMaster {
    socket: PathBuf,
    requests: Arc<Mutex<Vec<Request>>>,
    _dir: tempfile::TempDir,
}

impl FakeMaster {
    fn start(answer: Response) -> std::io::Result<Self> {
        let dir = tempfile::tempdir()?;
        let socket = dir.path().join("master.sock");
        let listener = UnixListener::bind(&socket)?;
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&requests);
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (read, mut write) = stream.into_split();
                let mut lines = BufReader::new(read).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let answer = match serde_json::from_str::<Request>(&line) {
                        Ok(request) => {
                            seen.lock().map(|mut seen| seen.push(request)).ok();
                            answer.clone()
                        }
                        Err(e) => Response::Error { message: e.to_string() },
                    };
                    let Ok(mut text) = serde_json::to_string(&answer) else { return };
                    text.push('\n');
                    if write.write_all(text.as_bytes()).await.is_err() {
                        break;
                    }
                }
            }
        });
        Ok(FakeMaster { socket, requests, _dir: dir })
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().map(|r| r.clone()).unwrap_or_default()
    }
}

/// Run lbctl with `args`, without `$LBCTL_SOCKET` from the caller's environment.
async fn lbctl(args: &[&str]) -> std::io::Result<Output> {
    Command::new(env!("CARGO_BIN_EXE_lbctl")).args(args).env_remove("LBCTL_SOCKET").output().await
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap_or("/non-utf-8")
}

fn table() -> ProcTable {
    let entry = |pid, role, generation, reloads, uptime_secs, connections| ProcEntry {
        pid,
        role,
        generation,
        reloads,
        uptime_secs,
        version: "0.1.0".to_owned(),
        connections,
    };
    ProcTable {
        master: entry(1234, Role::Master, 0, 3, 312, None),
        workers: vec![entry(2201, Role::Current, 4, 0, 40, Some(12)), entry(2190, Role::Old, 3, 1, 95, Some(3))],
        canary: Default::default(),
    }
}

#[tokio::test]
async fn reload_ok() -> TestResult {
    let master = FakeMaster::start(Response::Reloaded { pid: 2201, generation: 4, took_ms: 812, canary: None })?;
    let out = lbctl(&["-s", s(&master.socket), "reload"]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "reloaded: worker 2201 generation 4 serving (812 ms)\n");
    assert_eq!(master.requests(), vec![Request::Reload]);
    Ok(())
}

#[tokio::test]
async fn reload_failed() -> TestResult {
    let error = "lb.yaml:3:5: frontends.web.bind: not an address\nlb.yaml:9:1: backends: empty";
    let master = FakeMaster::start(Response::ReloadFailed { error: error.to_owned() })?;
    let out = lbctl(&["-s", s(&master.socket), "reload"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), format!("reload failed: {error}\n"));
    assert_eq!(text(&out.stdout), "");
    Ok(())
}

#[tokio::test]
async fn show_proc() -> TestResult {
    let master = FakeMaster::start(Response::Proc(table()))?;
    let out = lbctl(&["--socket", s(&master.socket), "show", "proc"]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let expected = "\
#<PID>  <role>   <generation>  <reloads>  <uptime>     <version>  <connections>
1234    master   0             3          0d00h05m12s  0.1.0      -
2201    current  4             0          0d00h00m40s  0.1.0      12
2190    old      3             1          0d00h01m35s  0.1.0      3
";
    assert_eq!(text(&out.stdout), expected);
    assert_eq!(master.requests(), vec![Request::ShowProc]);
    Ok(())
}

#[tokio::test]
async fn json() -> TestResult {
    let answer = Response::ReloadFailed { error: "bad".to_owned() };
    let master = FakeMaster::start(answer.clone())?;
    let out = lbctl(&["-s", s(&master.socket), "--json", "reload"]).await?;
    assert_eq!(out.status.code(), Some(1), "same status as without --json");
    assert_eq!(serde_json::from_slice::<Response>(&out.stdout)?, answer);
    assert!(text(&out.stdout).contains("\n  \"error\": \"bad\""), "pretty: {}", text(&out.stdout));

    let master = FakeMaster::start(Response::Proc(table()))?;
    let out = lbctl(&["--json", "-s", s(&master.socket), "show", "proc"]).await?;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(serde_json::from_slice::<Response>(&out.stdout)?, Response::Proc(table()));
    Ok(())
}

#[tokio::test]
async fn runtime_commands() -> TestResult {
    let csv = "# pxname,svname,status,scur,\napi,a1,UP,4,\n".to_owned();
    let master = FakeMaster::start(Response::Runtime { output: csv })?;
    let out = lbctl(&["-s", s(&master.socket), "show", "stat"]).await?;
    assert_eq!(out.status.code(), Some(0));
    let table = text(&out.stdout);
    assert!(table.starts_with("NAME  SERVER  STATUS  WEIGHT  CUR"), "a table: {table}");
    assert!(table.lines().nth(1).is_some_and(|l| l.starts_with("api   a1      UP      -       4")), "{table}");
    assert_eq!(master.requests(), vec![Request::Runtime { line: "show stat".to_owned() }]);
    // --json: one object per row, by column name.
    let out = lbctl(&["-s", s(&master.socket), "--json", "show", "stat"]).await?;
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(rows, serde_json::json!([{ "pxname": "api", "svname": "a1", "status": "UP", "scur": 4 }]));

    // Anything else is printed as it came.
    let master = FakeMaster::start(Response::Runtime { output: "total: 3 client connections".to_owned() })?;
    let out = lbctl(&["-s", s(&master.socket), "show", "sess"]).await?;
    assert_eq!(text(&out.stdout), "total: 3 client connections\n");

    let master = FakeMaster::start(Response::Error { message: "runtime commands are not supported yet".to_owned() })?;
    let out = lbctl(&["-s", s(&master.socket), "set", "server", "api/a1", "weight", "0"]).await?;
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "lbctl: runtime commands are not supported yet\n");
    assert_eq!(master.requests(), vec![Request::Runtime { line: "set server api/a1 weight 0".to_owned() }]);
    Ok(())
}

#[tokio::test]
async fn socket_from_config_file_and_environment() -> TestResult {
    let master = FakeMaster::start(Response::Proc(table()))?;
    let dir = master.socket.parent().ok_or("socket without a directory")?;
    let config = dir.join("lb.yaml");
    // Relative: taken from the configuration file's directory.
    std::fs::write(&config, "global:\n  control_socket: master.sock\nfrontends: {}\n")?;
    let out = lbctl(&["-f", s(&config), "show", "proc"]).await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));

    let out = Command::new(env!("CARGO_BIN_EXE_lbctl"))
        .args(["show", "proc"])
        .env("LBCTL_SOCKET", &master.socket)
        .output()
        .await?;
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(master.requests(), vec![Request::ShowProc, Request::ShowProc]);

    let out = lbctl(&["-f", s(&dir.join("missing.yaml")), "reload"]).await?;
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).starts_with("lbctl: cannot read "), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test]
async fn no_master() -> TestResult {
    let dir = tempfile::tempdir()?;
    let socket = dir.path().join("master.sock");
    let out = lbctl(&["-s", s(&socket), "reload"]).await?;
    assert_eq!(out.status.code(), Some(69));
    let stderr = text(&out.stderr);
    let prefix = format!("lbctl: cannot connect to {}: ", socket.display());
    assert!(stderr.starts_with(&prefix) && stderr.ends_with(" (is the master running?)\n"), "{stderr}");

    // A stale socket file: nobody listening.
    drop(std::os::unix::net::UnixListener::bind(&socket)?);
    let out = lbctl(&["-s", s(&socket), "show", "proc"]).await?;
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    Ok(())
}

#[tokio::test]
async fn usage_errors() -> TestResult {
    for args in [&[][..], &["--bogus", "reload"], &["-s", "a", "-f", "b", "reload"], &["reload", "--json"]] {
        let out = lbctl(args).await?;
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.starts_with("lbctl: ") && stderr.contains("lbctl --help"), "{args:?}: {stderr}");
        assert_eq!(text(&out.stdout), "");
    }
    Ok(())
}

#[tokio::test]
async fn help_and_version() -> TestResult {
    let out = lbctl(&["--help"]).await?;
    assert_eq!(out.status.code(), Some(0));
    let help = text(&out.stdout);
    assert!(help.starts_with("lbctl: ") && help.contains("Usage: lbctl [-s SOCKET | -f CONFIG] [--json] COMMAND..."));
    assert!(help.contains("Exit status:") && help.contains("  69  "), "{help}");

    let out = lbctl(&["--version"]).await?;
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(text(&out.stdout), format!("lbctl {}\n", env!("CARGO_PKG_VERSION")));
    Ok(())
}
