//! The master: one process whose PID never changes, owning every listening socket, starting
//! workers and retiring them.
//!
//! Everything the master does happens in one loop over events (worker messages and exits,
//! control requests, signals, timers), so its state needs no locks and every step is in order.
//!
//! A reload: start worker N+1 → hand it every socket the master holds (batched, acknowledged) →
//! bind any new address it asks for → it reports READY → only then tell worker N to soft-stop,
//! keep exactly the sockets N+1 uses, answer everyone who asked. Any failure before READY (its
//! configuration, a bind, a crash, no READY within `worker_start_timeout`) changes nothing but
//! the answer.
//!
//! With a canary (`canary`), READY does not retire worker N: N+1 takes a share of new
//! connections for a window, then is promoted (the end of an ordinary reload) or rolled back.

mod canary;
mod detach;
mod proc;
mod reload;
mod retire;
mod rollback;
mod spawn;

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use tokio::signal::unix::{signal, SignalKind};
use tokio::sync::{mpsc, oneshot};

use self::spawn::{Spawned, WorkerEvent};
use crate::canary::CanaryAsk;
use crate::daemon::{say, Daemon, Plan, EXIT_USAGE};
use crate::notify::Notifier;
use crate::protocol::{CanaryCall, Request, Response, Role, Settings, ToMaster, ToWorker};
use crate::runtime;
use crate::secret::SecretRing;
use crate::{control, fdpass, privileges, ListenAddr, Listener};

/// Sockets per message when handing them to a worker (well under SCM_MAX_FD).
const SOCKETS_PER_BATCH: usize = fdpass::MAX_FDS_PER_MESSAGE;
/// After SIGTERM (or HardStop), how long a worker has before SIGKILL.
const KILL_GRACE: Duration = Duration::from_secs(5);
/// The current worker crashing this often in this window makes the master give up, so that
/// SMF or systemd take over.
const CRASH_LIMIT: usize = 5;
const CRASH_WINDOW: Duration = Duration::from_secs(60);
const MAX_RESPAWN_DELAY: Duration = Duration::from_secs(8);

pub(crate) fn run<D: Daemon>(config: PathBuf, detach: bool) -> ExitCode {
    let plan = match D::load(&config) {
        Ok(loaded) => Plan::of::<D>(&loaded),
        Err(e) => {
            say(e);
            return ExitCode::from(EXIT_USAGE);
        }
    };
    // Resolved now: a reload execs this path, so a binary replaced on disk is picked up.
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => {
            say(format_args!("{}: cannot find its own executable: {e}", D::NAME));
            return ExitCode::FAILURE;
        }
    };
    if detach {
        return detach::detach();
    }
    // Set when this master is the detached one that `-D` started.
    let detached = detach::inherited();
    privileges::raise_fd_limit();
    privileges::keep_capabilities_from_workers();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            say(format_args!("{}: starting the runtime: {e}", D::NAME));
            return ExitCode::FAILURE;
        }
    };
    let config = std::path::absolute(&config).unwrap_or(config);
    runtime.block_on(async move {
        match Master::start(D::NAME, D::VERSION, exe, config, plan, detached).await {
            Ok((master, events, control)) => master.run(events, control).await,
            Err(e) => {
                tracing::error!("{e}");
                ExitCode::FAILURE
            }
        }
    })
}

/// One worker process as the master tracks it.
#[derive(Debug)]
struct Worker {
    proc: Spawned,
    role: Role,
    started: Instant,
    /// Successful reloads when it started, to count the reloads it survived.
    reloads_at_start: u64,
    version: String,
    /// Waiting for its connection count.
    status_waiters: VecDeque<oneshot::Sender<u64>>,
    /// When it must be sent HardStop (hard_stop_after), and when SIGKILL (after SIGTERM).
    hard_stop_at: Option<Instant>,
    kill_at: Option<Instant>,
    /// Sockets still to hand over while it starts, in batches.
    pending_batches: VecDeque<Vec<ListenAddr>>,
    /// Runtime commands sent to it, by request id, waiting for its answer.
    runtime_waiters: HashMap<u64, oneshot::Sender<Response>>,
    /// Asked for its counters on behalf of this (newer) worker, which waits for them.
    snapshot_for: Option<u64>,
    /// A canary rolled back: its counters go to the current worker, to add.
    counts_to_current: bool,
    /// Whether it may be a canary, as its sockets tell it.
    canary_call: Option<CanaryCall>,
    /// It held its accepts for a canary: it must hear `Split` or `Whole`.
    held: bool,
    /// Waiting for its canary figures.
    figures_waiters: VecDeque<oneshot::Sender<Option<crate::Figures>>>,
    /// The configuration it started on, as read then (for `lbctl rollback`).
    config_text: Option<Vec<u8>>,
}

/// The reload under way.
#[derive(Debug)]
struct Reload {
    generation: u64,
    started: Instant,
    deadline: Instant,
    waiters: Vec<oneshot::Sender<Response>>,
    /// A failure already reported (the worker said Failed), so its exit adds nothing.
    failed: bool,
}

type Events = mpsc::UnboundedReceiver<(u64, WorkerEvent)>;
type ControlRequests = mpsc::UnboundedReceiver<(Request, oneshot::Sender<Response>)>;

struct Master {
    name: &'static str,
    version: &'static str,
    exe: PathBuf,
    config: PathBuf,
    control_path: PathBuf,
    /// The runtime socket's path, removed at exit.
    runtime_path: Option<PathBuf>,
    /// Ids of requests relayed to workers (runtime commands).
    next_request_id: u64,
    sockets: BTreeMap<ListenAddr, Listener>,
    /// The addresses the current worker serves on.
    current_listening: Vec<ListenAddr>,
    workers: BTreeMap<u64, Worker>,
    current: Option<u64>,
    next_generation: u64,
    reloads: u64,
    started: Instant,
    settings: Settings,
    /// The secrets the daemon asked for (`Settings::secret`), made and renewed here.
    secrets: Option<SecretRing>,
    notifier: Notifier,
    events_tx: mpsc::UnboundedSender<(u64, WorkerEvent)>,
    reload: Option<Reload>,
    queued: Vec<oneshot::Sender<Response>>,
    queued_reload: bool,
    /// The canary the queued reload asked for (the latest ask wins).
    queued_ask: Option<CanaryAsk>,
    /// The canary under way, and the verdicts given.
    canary: Option<canary::Canary>,
    verdicts: canary::Record,
    /// The configuration the previous current worker started on, and a copy of it written for
    /// the rollback under way (see `rollback`).
    previous_config: Option<Vec<u8>>,
    rollback_file: Option<PathBuf>,
    /// Runtime commands that came while no worker served yet (the first one is starting, or a
    /// crashed one is being replaced): sent to the next current worker, or failed with it.
    waiting_runtime: Vec<(String, oneshot::Sender<Response>)>,
    crashes: VecDeque<Instant>,
    respawn_at: Option<Instant>,
    stopping: bool,
    detached: Option<detach::ReadyPipe>,
    exit: Option<ExitCode>,
}

impl std::fmt::Debug for Master {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Master").field("current", &self.current).field("workers", &self.workers).finish_non_exhaustive()
    }
}

impl Master {
    async fn start(
        name: &'static str,
        version: &'static str,
        exe: PathBuf,
        config: PathBuf,
        plan: Plan,
        detached: Option<detach::ReadyPipe>,
    ) -> Result<(Master, Events, ControlRequests), crate::Error> {
        let sockets: BTreeMap<ListenAddr, Listener> = crate::bind_all(&plan.listen)?.into_iter().collect();
        let control = control::bind(&plan.control_socket)?;
        let runtime_unix = plan.runtime.socket.as_deref().map(control::bind).transpose()?;
        let unix_sockets: Vec<&std::path::Path> =
            std::iter::once(plan.control_socket.as_path()).chain(plan.runtime.socket.as_deref()).collect();
        privileges::give_sockets(&unix_sockets, plan.user.as_deref(), plan.group.as_deref())?;
        let runtime_tcp = match plan.runtime.tcp {
            Some(address) => Some(
                runtime::bind_tcp(address)
                    .map_err(|source| crate::Error::Bind { address: ListenAddr::Tcp(address), source })?,
            ),
            None => None,
        };
        let (control_tx, control_rx) = mpsc::unbounded_channel();
        let forward: runtime::Forward = std::sync::Arc::new(move |request| {
            let control_tx = control_tx.clone();
            Box::pin(async move {
                let (reply, answer) = oneshot::channel();
                if control_tx.send((request, reply)).is_err() {
                    return Response::Error { message: "the master is stopping".into() };
                }
                answer.await.unwrap_or(Response::Error { message: "the master is stopping".into() })
            })
        });
        let control_forward = forward.clone();
        tokio::spawn(control::serve(control, move |request| control_forward(request)));
        if let Some(listener) = runtime_unix {
            tokio::spawn(runtime::serve_unix(listener, forward.clone()));
        }
        if let Some(listener) = runtime_tcp {
            tokio::spawn(runtime::serve_tcp(listener, forward));
        }
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let secrets = plan.settings.secret.and_then(|spec| match SecretRing::new(spec, Instant::now()) {
            Ok(ring) => Some(ring),
            Err(e) => {
                tracing::error!("cannot make the workers' secrets (each worker makes its own): {e}");
                None
            }
        });
        let master = Master {
            name,
            version,
            exe,
            config,
            control_path: plan.control_socket,
            runtime_path: plan.runtime.socket,
            next_request_id: 1,
            sockets,
            current_listening: Vec::new(),
            workers: BTreeMap::new(),
            current: None,
            next_generation: 1,
            reloads: 0,
            started: Instant::now(),
            settings: plan.settings,
            secrets,
            notifier: Notifier::from_env(),
            events_tx,
            reload: None,
            queued: Vec::new(),
            queued_reload: false,
            queued_ask: None,
            canary: None,
            verdicts: canary::Record::default(),
            previous_config: None,
            rollback_file: None,
            waiting_runtime: Vec::new(),
            crashes: VecDeque::new(),
            respawn_at: None,
            stopping: false,
            detached,
            exit: None,
        };
        Ok((master, events_rx, control_rx))
    }
}

impl Master {
    async fn run(mut self, mut events: Events, mut control: ControlRequests) -> ExitCode {
        // SIGXFSZ is handled and never read: a log file at its size limit fails the write
        // (dropped, counted) instead of ending the master.
        let (Ok(mut hup), Ok(mut usr2), Ok(mut term), Ok(mut int), Ok(_file_size)) = (
            signal(SignalKind::hangup()),
            signal(SignalKind::user_defined2()),
            signal(SignalKind::terminate()),
            signal(SignalKind::interrupt()),
            signal(SignalKind::from_raw(nix::libc::SIGXFSZ)),
        ) else {
            tracing::error!("cannot install signal handlers");
            return ExitCode::FAILURE;
        };
        self.start_reload(Vec::new(), None).await;
        loop {
            if let Some(code) = self.exit.take() {
                self.cleanup();
                return code;
            }
            let deadline = self.next_deadline();
            tokio::select! {
                Some((generation, event)) = events.recv() => self.on_worker(generation, event).await,
                Some((request, reply)) = control.recv() => self.on_request(request, reply).await,
                _ = hup.recv() => self.request_reload(None, None).await,
                _ = usr2.recv() => self.request_reload(None, None).await,
                _ = term.recv() => self.stop().await,
                _ = int.recv() => self.stop().await,
                _ = sleep_until(deadline) => self.on_timer().await,
            }
        }
    }

    fn cleanup(&mut self) {
        let _ = std::fs::remove_file(&self.control_path);
        if let Some(path) = &self.runtime_path {
            let _ = std::fs::remove_file(path);
        }
    }

    /// A reload asked by a signal (no waiter) or the control socket, with the canary it asks
    /// for (`None`: as the new configuration says).
    async fn request_reload(&mut self, waiter: Option<oneshot::Sender<Response>>, ask: Option<CanaryAsk>) {
        if self.stopping {
            if let Some(w) = waiter {
                let _ = w.send(Response::ReloadFailed { error: "the master is stopping".into() });
            }
            return;
        }
        if self.reload.is_some() {
            // Coalesced: everyone who asks during a reload gets the next one, which starts
            // when this one ends and reads the configuration as it is then.
            self.queued.extend(waiter);
            self.queued_reload = true;
            self.queued_ask = ask;
            return;
        }
        self.start_reload(waiter.into_iter().collect(), ask).await;
    }

    async fn start_reload(&mut self, waiters: Vec<oneshot::Sender<Response>>, ask: Option<CanaryAsk>) {
        let generation = self.next_generation;
        self.next_generation += 1;
        if self.current.is_some() {
            self.notifier.reloading(&format!("reloading: starting worker generation {generation}"));
        }
        let source = self.source_for_next_worker();
        let config_text = std::fs::read(&source).ok();
        let spawned = match spawn::spawn(&self.exe, &source, generation, self.events_tx.clone()) {
            Ok(spawned) => spawned,
            Err(e) => {
                let error = format!("cannot start a worker ({}): {e}", self.exe.display());
                self.reload = Some(Reload {
                    generation,
                    started: Instant::now(),
                    deadline: Instant::now(),
                    waiters,
                    failed: false,
                });
                Box::pin(self.fail_reload(error)).await;
                return;
            }
        };
        tracing::info!(pid = spawned.pid, generation, "starting worker");
        let addresses: Vec<ListenAddr> = self.sockets.keys().cloned().collect();
        let mut batches: VecDeque<Vec<ListenAddr>> = addresses.chunks(SOCKETS_PER_BATCH).map(<[_]>::to_vec).collect();
        if batches.is_empty() {
            batches.push_back(Vec::new());
        }
        let now = Instant::now();
        self.workers.insert(
            generation,
            Worker {
                proc: spawned,
                role: Role::Starting,
                started: now,
                reloads_at_start: self.reloads,
                version: String::new(),
                status_waiters: VecDeque::new(),
                hard_stop_at: None,
                kill_at: None,
                pending_batches: batches,
                runtime_waiters: HashMap::new(),
                snapshot_for: None,
                counts_to_current: false,
                // Only beside a serving worker is there anything to judge a canary against.
                canary_call: self.current.map(|_| CanaryCall { ask }),
                held: false,
                figures_waiters: VecDeque::new(),
                config_text,
            },
        );
        self.reload = Some(Reload {
            generation,
            started: now,
            deadline: now + Duration::from_millis(self.settings.worker_start_timeout_ms),
            waiters,
            failed: false,
        });
        if let (Some(ring), Some(worker)) = (&self.secrets, self.workers.get(&generation)) {
            if let Err(e) = worker.proc.tx.send(&ToWorker::Secrets { secrets: ring.set() }, &[]).await {
                tracing::warn!(generation, "handing secrets to the worker: {e}");
            }
        }
        self.send_next_batch(generation).await;
    }

    /// Hand the next batch of sockets to a starting worker.
    async fn send_next_batch(&mut self, generation: u64) {
        let Some(worker) = self.workers.get_mut(&generation) else { return };
        let Some(batch) = worker.pending_batches.pop_front() else { return };
        let last = worker.pending_batches.is_empty();
        let fds: Vec<_> = batch.iter().filter_map(|a| self.sockets.get(a)).map(|l| l.as_fd()).collect();
        let message = ToWorker::Sockets { generation, addresses: batch, last, canary: worker.canary_call };
        if let Err(e) = worker.proc.tx.send(&message, &fds).await {
            tracing::warn!(generation, "handing sockets to the worker: {e}");
        }
    }

    async fn on_worker(&mut self, generation: u64, event: WorkerEvent) {
        match event {
            WorkerEvent::Message(ToMaster::Ack) => self.send_next_batch(generation).await,
            WorkerEvent::Message(ToMaster::Bind { address }) => self.bind_for(generation, address).await,
            WorkerEvent::Message(ToMaster::Ready {
                pid,
                generation: reported,
                version,
                listening,
                settings,
                canary,
            }) => {
                if reported != generation {
                    tracing::warn!(pid, generation, reported, "worker reported another generation");
                }
                self.ready(generation, version, listening, settings, canary).await;
            }
            WorkerEvent::Message(ToMaster::Figures { figures }) => {
                if let Some(waiter) = self.workers.get_mut(&generation).and_then(|w| w.figures_waiters.pop_front()) {
                    let _ = waiter.send(figures);
                }
            }
            WorkerEvent::CanaryFigures { stage, old, new } => self.canary_figures(generation, stage, old, new).await,
            WorkerEvent::Message(ToMaster::Failed { error }) => {
                if self.reload.as_ref().is_some_and(|r| r.generation == generation) {
                    self.fail_reload(error).await;
                }
            }
            WorkerEvent::Message(ToMaster::Status { connections }) => {
                if let Some(waiter) = self.workers.get_mut(&generation).and_then(|w| w.status_waiters.pop_front()) {
                    let _ = waiter.send(connections);
                }
            }
            WorkerEvent::Message(ToMaster::Runtime { id, results }) => {
                if let Some(waiter) = self.workers.get_mut(&generation).and_then(|w| w.runtime_waiters.remove(&id)) {
                    let _ = waiter.send(runtime::response(results));
                }
            }
            WorkerEvent::Message(ToMaster::Snapshot { snapshot }) => self.hand_snapshot(generation, snapshot).await,
            WorkerEvent::Message(ToMaster::ShowProc { id }) => self.proc_for_worker(generation, id).await,
            WorkerEvent::Message(ToMaster::LateCounts { counts }) => {
                if let Some(current) = self.current.filter(|&c| c != generation).and_then(|c| self.workers.get(&c)) {
                    let _ = current.proc.tx.send(&ToWorker::AddCounts { counts }, &[]).await;
                }
            }
            WorkerEvent::ChannelClosed => {}
            WorkerEvent::Exited(status) => self.exited(generation, status).await,
        }
    }

    /// A starting worker needs a socket the master does not hold: bind it now.
    async fn bind_for(&mut self, generation: u64, address: ListenAddr) {
        let Some(worker) = self.workers.get(&generation) else { return };
        if !self.sockets.contains_key(&address) {
            match crate::bind_one(&address) {
                Ok(listener) => {
                    tracing::info!(%address, "bound a new listening socket");
                    self.sockets.insert(address.clone(), listener);
                }
                Err(e) => {
                    let message = ToWorker::BindFailed { address, error: e.to_string() };
                    let _ = worker.proc.tx.send(&message, &[]).await;
                    return;
                }
            }
        }
        let fds: Vec<_> = self.sockets.get(&address).map(|l| l.as_fd()).into_iter().collect();
        let _ = worker.proc.tx.send(&ToWorker::Bound { address }, &fds).await;
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at.into()).await,
        None => std::future::pending().await,
    }
}

fn describe(status: std::process::ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exit status {code}"),
        (None, Some(sig)) => format!("signal {}", Signal::try_from(sig).map_or(sig.to_string(), |s| s.to_string())),
        _ => status.to_string(),
    }
}
