//! `lb-watcher -f FILE [-c]`: follow ZooKeeper registrations and keep lb-proxy's backends in
//! step. `-c` checks the configuration (and the base lb-proxy file) and exits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

const USAGE: &str = "usage: lb-watcher -f FILE [-c]\n  -f FILE  lb-watcher's configuration\n  -c       check the configuration and exit\n";

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    // A log that cannot be written must not take the process down (tracing would panic).
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .log_internal_errors(false)
        .try_init();
    let mut args = std::env::args_os().skip(1);
    let mut file = None;
    let mut check = false;
    while let Some(arg) = args.next() {
        match arg.to_str() {
            Some("-f") => file = args.next().map(PathBuf::from),
            Some("-c") => check = true,
            Some("-h" | "--help") => {
                print!("{USAGE}");
                return ExitCode::SUCCESS;
            }
            Some("-V" | "--version") => {
                println!("lb-watcher {}", env!("CARGO_PKG_VERSION"));
                return ExitCode::SUCCESS;
            }
            _ => {
                eprint!("lb-watcher: unexpected argument {arg:?}\n{USAGE}");
                return ExitCode::from(64);
            }
        }
    }
    let Some(file) = file else {
        eprint!("lb-watcher: -f FILE is required\n{USAGE}");
        return ExitCode::from(64);
    };
    let config = match lb_watcher::config::Config::load(&file)
        .and_then(|c| lb_watcher::render::load_base(&c.proxy.base, &c.services).map(|_| c))
    {
        Ok(config) => config,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(64);
        }
    };
    if check {
        println!("{}: configuration is valid", file.display());
        return ExitCode::SUCCESS;
    }
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("lb-watcher: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn serve(config: lb_watcher::config::Config) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(async {
        // A write past the file-size limit (`ulimit -f`, systemd's `LimitFSIZE=`) must fail with
        // EFBIG, reported and retried with the old file left whole, not end the process, which
        // is what SIGXFSZ does by default. Any handler replaces that default; tokio's is safe.
        let xfsz = tokio::signal::unix::SignalKind::from_raw(nix::sys::signal::Signal::SIGXFSZ as i32);
        let _file_size_limit = tokio::signal::unix::signal(xfsz).context("handling SIGXFSZ")?;
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(e) => {
                    tracing::error!("cannot handle SIGTERM: {e}");
                    return;
                }
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            tracing::info!("stopping");
            let _ = stop.send(true);
        });
        lb_watcher::run(config, shutdown).await.context("lb-watcher")
    })
}
