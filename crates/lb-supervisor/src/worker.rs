//! A worker's side: receive the master's sockets, adopt those the configuration needs (asking the
//! master to bind new ones), drop privileges, serve, report READY; then follow the master's
//! orders (soft stop, hard stop, status) until the last connection has ended.
//!
//! A worker never binds a listening socket itself: a socket the configuration needs that the
//! master did not hand over is asked for by name, and a refusal fails the start. So a reload can
//! never silently serve on a fresh socket beside the old one.

use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};

use crate::canary::CanaryAsk;
use crate::channel::{Channel, ChannelReceiver, ChannelSender};
use crate::daemon::{say, Daemon, Plan, EXIT_USAGE};
use crate::protocol::{CanaryCall, ToMaster, ToWorker};
use crate::runtime::{self, MasterLink};
use crate::secret::Secret;
use crate::split::Splitter;
use crate::{fdpass, privileges, shutdown, ListenAddr, Listener, Listeners};

/// The environment variable naming the worker's end of its channel to the master.
pub(crate) const CHANNEL_FD_ENV: &str = "LB_SUPERVISOR_FD";

/// How long a drained worker that owes its successor a snapshot waits for its own
/// predecessor's counters (they normally follow within milliseconds).
const OWED_SNAPSHOT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a drained worker that was in a canary waits for the other worker to say it hands
/// nothing more over (it normally follows the master's order within milliseconds).
const PAIR_QUIET_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

pub(crate) fn run<D: Daemon>(config_path: &Path) -> ExitCode {
    let channel_fd = match std::env::var(CHANNEL_FD_ENV).ok().and_then(|v| v.parse().ok()) {
        Some(fd) => fd,
        None => {
            say(format_args!("{}: --worker is started by the master only ({CHANNEL_FD_ENV} is not set)", D::NAME));
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Limits are set here, not inherited by chance: two fds per proxied connection.
    privileges::raise_fd_limit();
    let config = D::load(config_path);
    let threads = config.as_ref().ok().and_then(|c| D::supervision(c).worker_threads);
    // One thread asked for: a current-thread runtime, cheaper per request than a
    // multi-thread one with one worker (no cross-thread wake-ups).
    let mut runtime = match threads {
        Some(1) => tokio::runtime::Builder::new_current_thread(),
        Some(n) => {
            let mut rt = tokio::runtime::Builder::new_multi_thread();
            rt.worker_threads(n);
            rt
        }
        None => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match runtime.enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(format_args!("{}: starting the runtime: {e}", D::NAME));
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let channel = match fdpass::take_inherited(channel_fd).and_then(Channel::from_inherited_fd) {
            Ok(channel) => channel,
            Err(e) => {
                say(format_args!("{}: worker channel: {e}", D::NAME));
                return ExitCode::FAILURE;
            }
        };
        let (tx, rx) = channel.split();
        match serve::<D>(config, tx.clone(), rx).await {
            Ok(()) => {
                // Connections the other worker of a canary handed over, or is handing back,
                // must reach someone before this process goes.
                if let Some(splitter) = Splitter::installed() {
                    splitter.quiet(PAIR_QUIET_WAIT).await;
                }
                ExitCode::SUCCESS
            }
            Err(error) => {
                // The master relays this to whoever asked for the reload.
                let _ = tx.send(&ToMaster::Failed { error: error.clone() }, &[]).await;
                tracing::error!("{error}");
                ExitCode::from(EXIT_USAGE)
            }
        }
    })
}

async fn serve<D: Daemon>(
    config: Result<D::Config, String>,
    tx: ChannelSender,
    mut rx: ChannelReceiver,
) -> Result<(), String> {
    let (secrets_tx, secrets_rx) = tokio::sync::watch::channel(Arc::<[Secret]>::from(Vec::new()));
    let (generation, mut held, canary_call) = receive_sockets(&tx, &mut rx, &secrets_tx).await?;
    let config = config?;
    let plan = Plan::of::<D>(&config);
    let canary = canary_call.and_then(|call| CanaryAsk::plan(call.ask, plan.settings.canary.as_ref()));
    let mut listeners = Listeners::new();
    for address in &plan.listen {
        let fd = match held.remove(address) {
            Some(fd) => fd,
            None => ask_master_to_bind(address, &tx, &mut rx).await?,
        };
        let listener =
            Listener::from_fd(address, fd).map_err(|e| format!("the socket handed over for {address}: {e}"))?;
        listeners.insert(address.clone(), listener);
    }
    // Sockets this configuration no longer uses: this process's copies close now; the master
    // closes its own once this worker is ready.
    drop(held);
    privileges::set_unix_access(&plan.unix_access).map_err(|e| e.to_string())?;
    privileges::drop_privileges(plan.user.as_deref(), plan.group.as_deref()).map_err(|e| e.to_string())?;

    let (handle, shutdown) = shutdown::channel();
    let link = MasterLink::new(tx.clone(), secrets_rx);
    // A canary accepts nothing until the master has set up its split.
    let splitter = Splitter::install(canary.is_some());
    let (serving, runtime) = D::start_supervised(Arc::new(config), listeners, shutdown, link.clone()).await?;
    let ready = ToMaster::Ready {
        pid: std::process::id(),
        generation,
        version: D::version(),
        listening: plan.listen.clone(),
        settings: plan.settings.clone(),
        canary,
    };
    tx.send(&ready, &[]).await.map_err(|e| format!("reporting ready: {e}"))?;
    tracing::info!(generation, "worker serving");

    // SIGTERM from the master means "stop now" (an old worker beyond max_old_workers); the
    // signals meant for the master (a terminal's ^C, SIGHUP, SIGUSR2) are ignored here.
    let handler = |kind| signal(kind).map_err(|e| format!("signal handler: {e}"));
    let mut term = handler(SignalKind::terminate())?;
    // Handled (so that their default action does not apply) and never read. SIGXFSZ too: an
    // access log on stdout that reaches a file-size limit (`LimitFSIZE=`, `ulimit -f`) fails
    // its write (counted as dropped lines) instead of ending the worker.
    let file_size = SignalKind::from_raw(nix::libc::SIGXFSZ);
    let _ignored = [SignalKind::interrupt(), SignalKind::hangup(), SignalKind::user_defined2(), file_size]
        .into_iter()
        .map(handler)
        .collect::<Result<Vec<_>, _>>()?;
    let mut done = serving.done;
    let mut master_alive = true;
    // The counters of the worker we replaced have arrived (or there were none): only then is a
    // snapshot of ours complete, so a snapshot asked for before waits for them.
    let mut inherited = false;
    let mut snapshot_asked = false;
    // A snapshot went to the master: what is counted from now on is handed over at the end.
    let mut snapshot_sent = false;
    let snapshot = |runtime: &Option<Arc<dyn runtime::Runtime>>| ToMaster::Snapshot {
        snapshot: runtime.as_ref().and_then(|r| r.snapshot()),
    };
    // Drained while a snapshot is owed: a worker replaced at once has nothing to drain and can
    // be done before its predecessor's counters reach it. Exiting then would lose them and its
    // own for good (its successor waits for a snapshot that never comes), so it waits for them,
    // for a bounded time.
    let mut drained = false;
    let owed = tokio::time::sleep(OWED_SNAPSHOT_WAIT);
    tokio::pin!(owed);
    loop {
        tokio::select! {
            _ = &mut done, if !drained => {
                if snapshot_asked && master_alive {
                    drained = true;
                    owed.as_mut().reset(tokio::time::Instant::now() + OWED_SNAPSHOT_WAIT);
                    continue;
                }
                if snapshot_sent && master_alive {
                    if let Some(counts) = runtime.as_ref().and_then(|r| r.late_counts()) {
                        let _ = tx.send(&ToMaster::LateCounts { counts }, &[]).await;
                    }
                }
                return Ok(());
            }
            () = &mut owed, if drained => {
                tracing::warn!("exiting without the predecessor's counters, which never came");
                return Ok(());
            }
            _ = term.recv() => handle.stop(),
            message = rx.recv::<ToWorker>(), if master_alive => match message {
                Ok(Some((ToWorker::SoftStop, _))) => {
                    splitter.whole();
                    handle.drain();
                }
                Ok(Some((ToWorker::Split { side, share }, mut fds))) => match fds.pop() {
                    Some(pair) => {
                        if let Err(e) = splitter.split(side, share, pair) {
                            tracing::error!("cannot split connections with the other worker: {e}");
                            splitter.whole();
                        }
                    }
                    None => tracing::warn!("a split without its socketpair"),
                },
                Ok(Some((ToWorker::Whole, _))) => splitter.whole(),
                Ok(Some((ToWorker::Figures, _))) => {
                    let figures = runtime.as_ref().and_then(|r| r.figures());
                    let _ = tx.send(&ToMaster::Figures { figures }, &[]).await;
                }
                Ok(Some((ToWorker::HardStop, _))) => handle.stop(),
                Ok(Some((ToWorker::Status, _))) => {
                    let _ = tx.send(&ToMaster::Status { connections: (serving.connections)() }, &[]).await;
                }
                Ok(Some((ToWorker::Runtime { id, line }, _))) => {
                    let results = runtime::run_line(runtime.as_deref(), &line);
                    let _ = tx.send(&ToMaster::Runtime { id, results }, &[]).await;
                }
                Ok(Some((ToWorker::Snapshot, _))) => {
                    if inherited {
                        snapshot_sent = tx.send(&snapshot(&runtime), &[]).await.is_ok();
                    } else {
                        snapshot_asked = true;
                    }
                }
                Ok(Some((ToWorker::Inherit { snapshot: base }, _))) => {
                    if let Some(runtime) = &runtime {
                        runtime.inherit(base.as_deref());
                    }
                    inherited = true;
                    if std::mem::take(&mut snapshot_asked) {
                        snapshot_sent = tx.send(&snapshot(&runtime), &[]).await.is_ok();
                    }
                    // Drained already: nothing was counted after that snapshot.
                    if drained {
                        return Ok(());
                    }
                }
                Ok(Some((ToWorker::Proc { id, table }, _))) => link.deliver(id, table),
                Ok(Some((ToWorker::AddCounts { counts }, _))) => {
                    if let Some(runtime) = &runtime {
                        runtime.add_late_counts(&counts);
                    }
                }
                Ok(Some((ToWorker::Secrets { secrets }, _))) => {
                    secrets_tx.send_replace(secrets.into());
                }
                Ok(Some((other, _))) => tracing::warn!("unexpected message from the master: {other:?}"),
                Ok(None) | Err(_) => {
                    // The master is gone: nobody can hand our sockets on, so drain and exit.
                    tracing::warn!("master gone: draining");
                    master_alive = false;
                    splitter.whole();
                    // Drained already and waiting for counters only the master could bring.
                    if drained {
                        return Ok(());
                    }
                    handle.drain();
                }
            },
        }
    }
}

/// The master's sockets, in acknowledged batches, and its secrets when it has any (they come
/// first, so the daemon starts with them).
async fn receive_sockets(
    tx: &ChannelSender,
    rx: &mut ChannelReceiver,
    secrets: &tokio::sync::watch::Sender<Arc<[Secret]>>,
) -> Result<(u64, BTreeMap<ListenAddr, OwnedFd>, Option<CanaryCall>), String> {
    let mut held = BTreeMap::new();
    loop {
        match rx.recv::<ToWorker>().await {
            Ok(Some((ToWorker::Secrets { secrets: set }, _))) => {
                secrets.send_replace(set.into());
            }
            Ok(Some((ToWorker::Sockets { generation, addresses, last, canary }, fds))) => {
                if addresses.len() != fds.len() {
                    return Err(format!("the master named {} sockets but sent {}", addresses.len(), fds.len()));
                }
                held.extend(addresses.into_iter().zip(fds));
                tx.send(&ToMaster::Ack, &[]).await.map_err(|e| format!("acknowledging sockets: {e}"))?;
                if last {
                    return Ok((generation, held, canary));
                }
            }
            Ok(Some((other, _))) => return Err(format!("expected sockets from the master, got {other:?}")),
            Ok(None) => return Err("the master closed the channel".into()),
            Err(e) => return Err(format!("receiving sockets: {e}")),
        }
    }
}

async fn ask_master_to_bind(
    address: &ListenAddr,
    tx: &ChannelSender,
    rx: &mut ChannelReceiver,
) -> Result<OwnedFd, String> {
    tx.send(&ToMaster::Bind { address: address.clone() }, &[]).await.map_err(|e| format!("asking to bind: {e}"))?;
    match rx.recv::<ToWorker>().await {
        Ok(Some((ToWorker::Bound { address: got }, mut fds))) if &got == address && fds.len() == 1 => {
            fds.pop().ok_or_else(|| format!("no socket came for {address}"))
        }
        Ok(Some((ToWorker::BindFailed { address, error }, _))) => Err(format!("cannot bind {address}: {error}")),
        Ok(Some((other, _))) => Err(format!("expected the socket for {address}, got {other:?}")),
        Ok(None) => Err("the master closed the channel".into()),
        Err(e) => Err(format!("receiving the socket for {address}: {e}")),
    }
}
