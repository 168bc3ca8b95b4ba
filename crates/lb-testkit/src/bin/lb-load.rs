//! `lb-load`: the lb-testkit load generator and test server as a command, for benchmarks
//! (scripts/bench-reload) that drive processes from outside a Rust test.
//!
//! ```text
//! lb-load run --addr 127.0.0.1:PORT --duration-s 10 [--new N] [--keep-alive N] [--pause-ms M]
//!             [--slow-every-ms M] [--slow-path /slow?ms=2000] [--path /load] [--timeout-s 10]
//!     Runs the load; prints the report as JSON on stdout, as a table on stderr.
//! lb-load serve --port PORT [--port PORT…] [--name NAME] [--address 127.0.0.N]
//!     Runs a test server (lb_testkit::TestServer: /slow?ms=N, /ping, /echo, …) on each
//!     port of a loopback address (127.0.0.1 by default) until SIGTERM or SIGINT.
//! ```
//! Loopback only: `--addr` must be a 127.0.0.0/8 or ::1 address.

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use lb_testkit::load::{self, LoadSpec};
use lb_testkit::TestServer;

const USAGE: &str =
    "usage: lb-load run --addr 127.0.0.1:PORT --duration-s S [--new N] [--keep-alive N] [--pause-ms M] \
[--slow-every-ms M] [--slow-path PATH] [--path PATH] [--timeout-s S] [--max-requests N]
       lb-load serve --port PORT [--port PORT...] [--name NAME] [--address 127.0.0.N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("run") => run(&args[1..]),
        Some("serve") => serve(&args[1..]),
        _ => Err("a command is required".to_owned()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lb-load: {e}\n{USAGE}");
            ExitCode::from(64)
        }
    }
}

/// `--name value` pairs.
fn pairs(args: &[String]) -> Result<Vec<(&str, &str)>, String> {
    let mut out = Vec::new();
    let mut it = args.iter();
    while let Some(name) = it.next() {
        let value = it.next().ok_or_else(|| format!("{name} needs a value"))?;
        out.push((name.as_str(), value.as_str()));
    }
    Ok(out)
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T, String> {
    value.parse().map_err(|_| format!("{name}: not a number: {value:?}"))
}

fn run(args: &[String]) -> Result<(), String> {
    let mut addr: Option<SocketAddr> = None;
    let mut spec = LoadSpec::new(SocketAddr::from(([127, 0, 0, 1], 0)), Duration::from_secs(10));
    for (name, value) in pairs(args)? {
        match name {
            "--addr" => addr = Some(value.parse().map_err(|_| format!("--addr: not an address: {value:?}"))?),
            "--duration-s" => spec.duration = Duration::from_secs_f64(number(name, value)?),
            "--new" => spec.new_connection_clients = number(name, value)?,
            "--keep-alive" => spec.keep_alive_clients = number(name, value)?,
            "--pause-ms" => spec.pause = Duration::from_millis(number(name, value)?),
            "--slow-every-ms" => {
                let ms: u64 = number(name, value)?;
                spec.slow_every = (ms > 0).then(|| Duration::from_millis(ms));
            }
            "--slow-path" => spec.slow_path = value.to_owned(),
            "--path" => spec.path = value.to_owned(),
            "--timeout-s" => spec.timeout = Duration::from_secs_f64(number(name, value)?),
            "--max-requests" => spec.max_requests = Some(number(name, value)?),
            _ => return Err(format!("unknown option {name}")),
        }
    }
    let addr = addr.ok_or("--addr is required")?;
    if !addr.ip().is_loopback() {
        return Err(format!("{addr} is not a loopback address"));
    }
    spec.addr = addr;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().map_err(|e| e.to_string())?;
    let report = runtime.block_on(load::run(spec));
    eprint!("{report}");
    println!("{}", report.to_json());
    Ok(())
}

fn serve(args: &[String]) -> Result<(), String> {
    let mut ports = Vec::new();
    let mut name = "backend".to_owned();
    let mut address = std::net::IpAddr::from([127, 0, 0, 1]);
    for (option, value) in pairs(args)? {
        match option {
            "--port" => ports.push(number::<u16>(option, value)?),
            "--name" => name = value.to_owned(),
            "--address" => address = value.parse().map_err(|_| format!("--address: not an IP address: {value:?}"))?,
            _ => return Err(format!("unknown option {option}")),
        }
    }
    if ports.is_empty() {
        return Err("--port is required".into());
    }
    if !address.is_loopback() {
        return Err(format!("--address {address} is not a loopback address"));
    }
    let servers: Vec<TestServer> =
        ports.iter().map(|&p| TestServer::start_at(&name, SocketAddr::new(address, p))).collect();
    for server in &servers {
        eprintln!("lb-load: serving on {}", server.addr());
    }
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
    runtime.block_on(async {
        use tokio::signal::unix::{signal, SignalKind};
        let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
            return;
        };
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        loop {
            tokio::select! {
                _ = term.recv() => break,
                _ = int.recv() => break,
                // The server records every request: forget them, a benchmark sends millions.
                _ = tick.tick() => servers.iter().for_each(TestServer::clear_requests),
            }
        }
    });
    for server in &servers {
        server.stop();
    }
    Ok(())
}
