//! `h3-load`: an HTTP/3 load generator for benchmarks (scripts/bench-h3), lb_testkit::h3load
//! as a command.
//!
//! ```text
//! h3-load --addr 127.0.0.1:PORT [--sni NAME] [--path /small]
//!         [--connections 10] [--streams 10] [--duration-s 4] [--requests N]
//!         [--new-connection] [--resume] [--rate R]
//!     Runs a load; prints the report on stdout as JSON (requests, errors, seconds, rps,
//!     p50_ms, p99_ms, p999_ms; latency from each request's due time under --rate).
//! h3-load --addr … --hold N
//!     Opens N connections (--connections at a time), one request on each, prints `held N` and
//!     keeps them open until stdin closes.
//! ```

use std::io::Read;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use lb_testkit::h3load::{self, H3Load};

const USAGE: &str = "usage: h3-load --addr IP:PORT [--sni NAME] [--path PATH] [--connections N] \
[--streams N] [--duration-s S] [--requests N] [--new-connection] [--resume] [--rate R] [--hold N]";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // One thread, as wrk -t1: the generator takes one core at most.
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build();
    let result = runtime.context("starting tokio").and_then(|rt| rt.block_on(run(&args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("h3-load: {e:#}\n{USAGE}");
            ExitCode::from(64)
        }
    }
}

fn number<T: std::str::FromStr>(name: &str, value: &str) -> Result<T> {
    value.parse().ok().with_context(|| format!("{name}: not a number: {value:?}"))
}

async fn run(args: &[String]) -> Result<()> {
    let mut spec = H3Load {
        addr: SocketAddr::from(([127, 0, 0, 1], 0)),
        sni: "bench.test".to_owned(),
        path: "/small".to_owned(),
        connections: 10,
        streams: 10,
        duration: Duration::from_secs(4),
        requests: None,
        new_connection: false,
        resume: false,
        rate: None,
    };
    let mut hold = None;
    let mut it = args.iter();
    while let Some(name) = it.next() {
        match name.as_str() {
            "--new-connection" => spec.new_connection = true,
            "--resume" => spec.resume = true,
            _ => {
                let value = it.next().with_context(|| format!("{name} needs a value"))?;
                match name.as_str() {
                    "--addr" => spec.addr = number(name, value)?,
                    "--sni" => spec.sni = value.clone(),
                    "--path" => spec.path = value.clone(),
                    "--connections" => spec.connections = number(name, value)?,
                    "--streams" => spec.streams = number(name, value)?,
                    "--duration-s" => spec.duration = Duration::from_secs_f64(number(name, value)?),
                    "--requests" => spec.requests = Some(number(name, value)?),
                    "--rate" => spec.rate = Some(number(name, value)?),
                    "--hold" => hold = Some(number::<usize>(name, value)?),
                    _ => bail!("unknown option {name}"),
                }
            }
        }
    }
    if spec.addr.port() == 0 {
        bail!("--addr is required");
    }
    if let Some(n) = hold {
        let held = h3load::hold(&spec, n, spec.connections.max(1)).await?;
        println!("held {}", held.len());
        // Until stdin closes; the connections are served meanwhile by the runtime's other tasks.
        tokio::task::spawn_blocking(|| std::io::stdin().read_to_end(&mut Vec::new())).await??;
        return Ok(());
    }
    println!("{}", h3load::run(spec).await?.json());
    Ok(())
}
