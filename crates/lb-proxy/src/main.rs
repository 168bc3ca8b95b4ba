//! `lb-proxy`: check a configuration (`-c`), or serve it.

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Context;
use lb_proxy::{Args, USAGE};

/// Exit status for a configuration that does not validate (sysexits' EX_CONFIG is 78, but
/// `haproxy -c` exits 1 and scripts expect that; at start-up the guide's 64 applies).
const EXIT_BAD_CONFIG_CHECK: u8 = 1;
const EXIT_USAGE: u8 = 64;

fn main() -> ExitCode {
    let args = match Args::parse(std::env::args_os().skip(1)) {
        Ok(args) => args,
        Err(e) => {
            eprintln!("lb-proxy: {e}\n{USAGE}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let path = match args {
        Args::Help => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Args::Version => {
            println!("lb-proxy {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Args::Check { config } => {
            return match lb_config::Config::load(&config) {
                Ok(_) => {
                    println!("Configuration file is valid");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("{e}");
                    ExitCode::from(EXIT_BAD_CONFIG_CHECK)
                }
            };
        }
        Args::Run { config } => config,
    };
    let config = match lb_config::Config::load(&path) {
        Ok(c) => Arc::new(c),
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    init_tracing();
    match serve(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e:#}");
            ExitCode::FAILURE
        }
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("LB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    use std::io::IsTerminal;
    // Colours only for a person at a terminal, never into journald or SMF's log files.
    let ansi = std::io::stderr().is_terminal();
    tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).init();
}

fn serve(config: Arc<lb_config::Config>) -> anyhow::Result<()> {
    // One worker thread: a current-thread runtime, which drives the same tasks on one thread
    // without the work-stealing scheduler's cross-thread bookkeeping (cheaper per wake-up).
    let mut runtime = match config.global.worker_threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut runtime = tokio::runtime::Builder::new_multi_thread();
            if let Some(n) = n {
                runtime.worker_threads(n);
            }
            runtime
        }
    };
    let runtime = runtime.enable_all().build().context("starting the runtime")?;
    runtime.block_on(async {
        let listeners = lb_proxy::bind(&config)?;
        // Bound (possibly privileged ports): from here on run as the configured user.
        drop_privileges(&config.global)?;
        let (handle, shutdown) = lb_proxy::shutdown_channel();
        tokio::spawn(async move {
            use tokio::signal::unix::{signal, SignalKind};
            let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
                return;
            };
            // First signal: drain. Second: stop now.
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            tracing::info!("draining");
            handle.drain();
            tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
            handle.stop();
        });
        lb_proxy::run(listeners, shutdown, config.clone()).await?;
        Ok(())
    })
}

fn drop_privileges(global: &lb_config::Global) -> anyhow::Result<()> {
    use nix::unistd::{setgid, setgroups, setuid, Group, User};
    if let Some(name) = &global.group {
        let group = Group::from_name(name)?.with_context(|| format!("global.group: no group {name:?}"))?;
        setgroups(&[group.gid]).context("setgroups")?;
        setgid(group.gid).context("setgid")?;
    }
    if let Some(name) = &global.user {
        let user = User::from_name(name)?.with_context(|| format!("global.user: no user {name:?}"))?;
        if global.group.is_none() {
            setgroups(&[user.gid]).context("setgroups")?;
            setgid(user.gid).context("setgid")?;
        }
        setuid(user.uid).context("setuid")?;
    }
    Ok(())
}
