use std::io;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::unix::OwnedReadHalf;
use tokio::net::UnixStream;

use super::{bind, call, call_blocking, connect_failed, serve};
use crate::{Error, ProcEntry, ProcTable, Request, Response, Role};

type TestResult = Result<(), Box<dyn std::error::Error>>;

fn table() -> ProcTable {
    let entry = |pid, role, generation| ProcEntry {
        pid,
        role,
        generation,
        reloads: 0,
        uptime_secs: 5,
        version: "0.1.0".to_owned(),
        connections: None,
    };
    ProcTable {
        master: entry(1, Role::Master, 0),
        workers: vec![entry(2, Role::Current, 1)],
        canary: Default::default(),
    }
}

/// Answers like a master would, slowly for a reload; `runtime sleep` never answers.
async fn handler(request: Request) -> Response {
    match request {
        Request::Reload => {
            tokio::time::sleep(Duration::from_millis(50)).await;
            Response::Reloaded { pid: 42, generation: 2, took_ms: 50, canary: None }
        }
        Request::ShowProc => Response::Proc(table()),
        Request::Runtime { line } if line == "sleep" => std::future::pending().await,
        Request::Runtime { line } => Response::Runtime { output: line.to_uppercase() },
        Request::ReloadWith { .. } | Request::Rollback => Response::Error { message: "not here".into() },
    }
}

/// A master serving [`handler`] at `dir/master.sock`.
fn start(dir: &Path) -> Result<PathBuf, Error> {
    let path = dir.join("master.sock");
    let listener = bind(&path)?;
    tokio::spawn(serve(listener, handler));
    Ok(path)
}

async fn read_response(reader: &mut BufReader<OwnedReadHalf>) -> Result<Response, Box<dyn std::error::Error>> {
    let mut line = String::new();
    reader.read_line(&mut line).await?;
    Ok(serde_json::from_str(&line)?)
}

fn io_source(error: &Error) -> Option<&io::Error> {
    match error {
        Error::ControlSocket { source, .. } => Some(source),
        _ => None,
    }
}

#[tokio::test]
async fn round_trip() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    let reloaded = call(&path, &Request::Reload).await?;
    assert_eq!(reloaded, Response::Reloaded { pid: 42, generation: 2, took_ms: 50, canary: None });
    assert_eq!(call(&path, &Request::ShowProc).await?, Response::Proc(table()));
    let runtime = call(&path, &Request::Runtime { line: "show stat".to_owned() }).await?;
    assert_eq!(runtime, Response::Runtime { output: "SHOW STAT".to_owned() });
    Ok(())
}

#[tokio::test]
async fn several_requests_on_one_connection() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    let (read, mut write) = UnixStream::connect(&path).await?.into_split();
    let mut reader = BufReader::new(read);
    // Blank lines are skipped; CRLF (socat, telnet) is fine.
    write.write_all(b"\n{\"command\":\"show_proc\"}\r\n{\"command\":\"runtime\",\"line\":\"a\"}\n").await?;
    assert_eq!(read_response(&mut reader).await?, Response::Proc(table()));
    assert_eq!(read_response(&mut reader).await?, Response::Runtime { output: "A".to_owned() });
    Ok(())
}

#[tokio::test]
async fn socket_is_private_and_nothing_is_left_behind() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    assert_eq!(std::fs::metadata(&path)?.permissions().mode() & 0o777, 0o600);
    let names: Vec<_> = std::fs::read_dir(dir.path())?.map(|e| e.map(|e| e.file_name())).collect::<Result<_, _>>()?;
    assert_eq!(names, vec!["master.sock"]);
    Ok(())
}

#[tokio::test]
async fn stale_socket_is_replaced() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("master.sock");
    drop(std::os::unix::net::UnixListener::bind(&path)?);
    assert!(path.exists(), "a closed listener leaves its socket file");
    start(dir.path())?;
    assert_eq!(call(&path, &Request::ShowProc).await?, Response::Proc(table()));
    Ok(())
}

#[tokio::test]
async fn live_socket_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    let Err(error) = bind(&path) else {
        return Err("a second bind on a live socket succeeded".into());
    };
    assert!(error.to_string().contains("another master is running"), "{error}");
    assert_eq!(io_source(&error).map(io::Error::kind), Some(io::ErrorKind::AddrInUse));
    // The first master still answers: its socket was not replaced.
    assert_eq!(call(&path, &Request::ShowProc).await?, Response::Proc(table()));
    Ok(())
}

#[tokio::test]
async fn something_else_at_the_path_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("master.sock");
    std::fs::write(&path, "precious")?;
    let Err(error) = bind(&path) else {
        return Err("bind replaced a regular file".into());
    };
    assert!(error.to_string().contains("not a socket"), "{error}");
    assert_eq!(std::fs::read_to_string(&path)?, "precious");
    Ok(())
}

#[tokio::test]
async fn malformed_lines_get_an_error_and_the_connection_keeps_working() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    let (read, mut write) = UnixStream::connect(&path).await?.into_split();
    let mut reader = BufReader::new(read);
    for bad in ["not json", r#"{"command":"relaod"}"#, r#"{"command":"runtime"}"#] {
        write.write_all(format!("{bad}\n").as_bytes()).await?;
        let Response::Error { message } = read_response(&mut reader).await? else {
            return Err(format!("{bad:?} was not answered with an error").into());
        };
        assert!(message.starts_with("malformed request: "), "{message}");
        if bad.contains("relaod") {
            assert!(message.contains("relaod"), "names the problem: {message}");
        }
    }
    write.write_all(b"{\"command\":\"show_proc\"}\n").await?;
    assert_eq!(read_response(&mut reader).await?, Response::Proc(table()));
    Ok(())
}

#[tokio::test]
async fn an_overlong_line_closes_the_connection() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;
    let (read, mut write) = UnixStream::connect(&path).await?.into_split();
    let mut reader = BufReader::new(read);
    // Exactly at the limit is still read (and rejected as JSON only).
    let at_limit = format!("{}\n", "x".repeat(64 * 1024));
    write.write_all(at_limit.as_bytes()).await?;
    assert!(matches!(read_response(&mut reader).await?, Response::Error { .. }));
    write.write_all("x".repeat(64 * 1024 + 1).as_bytes()).await?;
    let Response::Error { message } = read_response(&mut reader).await? else {
        return Err("an overlong line was not answered with an error".into());
    };
    assert!(message.contains("longer than"), "{message}");
    let mut rest = String::new();
    assert_eq!(reader.read_line(&mut rest).await?, 0, "closed after the error");
    Ok(())
}

#[tokio::test]
async fn unreachable_master() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("nobody.sock");
    let Err(error) = call(&path, &Request::ShowProc).await else {
        return Err("call to a missing socket succeeded".into());
    };
    assert!(connect_failed(&error), "{error}");
    assert_eq!(io_source(&error).map(io::Error::kind), Some(io::ErrorKind::NotFound));

    // A stale socket file: nobody listening.
    drop(std::os::unix::net::UnixListener::bind(&path)?);
    let Err(error) = call_blocking(&path, &Request::ShowProc, None) else {
        return Err("call to a stale socket succeeded".into());
    };
    assert!(connect_failed(&error), "{error}");
    assert_eq!(io_source(&error).map(io::Error::kind), Some(io::ErrorKind::ConnectionRefused));
    Ok(())
}

#[tokio::test]
async fn master_hanging_up_is_not_a_connect_failure() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("rude.sock");
    let listener = tokio::net::UnixListener::bind(&path)?;
    tokio::spawn(async move {
        // Read the request, then hang up without answering.
        if let Ok((stream, _)) = listener.accept().await {
            let mut line = String::new();
            let _ = BufReader::new(stream).read_line(&mut line).await;
        }
    });
    let Err(error) = call(&path, &Request::Reload).await else {
        return Err("call without an answer succeeded".into());
    };
    assert!(!connect_failed(&error), "{error}");
    assert_eq!(io_source(&error).map(io::Error::kind), Some(io::ErrorKind::UnexpectedEof));
    Ok(())
}

#[tokio::test]
async fn call_blocking_answers_and_times_out() -> TestResult {
    let dir = tempfile::tempdir()?;
    let path = start(dir.path())?;

    let p = path.clone();
    let answer =
        tokio::task::spawn_blocking(move || call_blocking(&p, &Request::Reload, Some(Duration::from_secs(10))))
            .await??;
    assert_eq!(answer, Response::Reloaded { pid: 42, generation: 2, took_ms: 50, canary: None });

    let p = path.clone();
    let started = std::time::Instant::now();
    let sleep = Request::Runtime { line: "sleep".to_owned() };
    let result =
        tokio::task::spawn_blocking(move || call_blocking(&p, &sleep, Some(Duration::from_millis(200)))).await?;
    let Err(error) = result else {
        return Err("a request never answered did not time out".into());
    };
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(200) && waited < Duration::from_secs(5), "{waited:?}");
    assert!(!connect_failed(&error), "{error}");
    assert_eq!(io_source(&error).map(io::Error::kind), Some(io::ErrorKind::TimedOut));
    assert!(error.to_string().contains("no answer within 200ms"), "{error}");
    Ok(())
}

#[tokio::test]
async fn handler_with_state() -> TestResult {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let dir = tempfile::tempdir()?;
    let path = dir.path().join("master.sock");
    let reloads = Arc::new(AtomicU64::new(0));
    let counter = Arc::clone(&reloads);
    tokio::spawn(serve(bind(&path)?, move |_request: Request| {
        let counter = Arc::clone(&counter);
        async move {
            let generation = counter.fetch_add(1, Ordering::SeqCst) + 1;
            Response::Reloaded { pid: 7, generation, took_ms: 1, canary: None }
        }
    }));
    for generation in 1..=3 {
        assert_eq!(
            call(&path, &Request::Reload).await?,
            Response::Reloaded { pid: 7, generation, took_ms: 1, canary: None }
        );
    }
    assert_eq!(reloads.load(Ordering::SeqCst), 3);
    Ok(())
}
