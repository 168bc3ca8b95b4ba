//! How workers end: old ones drain and exit, the oldest beyond `max_old_workers` are stopped,
//! stragglers past `hard_stop_after` are stopped, a crashed current worker is replaced at once
//! (with backoff, and the master gives up on a crash loop), and the master's own stop.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;

use super::spawn::signal;
use super::{describe, Master, CRASH_LIMIT, CRASH_WINDOW, KILL_GRACE, MAX_RESPAWN_DELAY};
use crate::protocol::{Response, Role, ToWorker};
use crate::secret::SecretRing;

impl Master {
    pub(super) async fn exited(&mut self, generation: u64, status: std::process::ExitStatus) {
        let Some(mut worker) = self.workers.remove(&generation) else { return };
        let pid = worker.proc.pid;
        for (_, waiter) in worker.runtime_waiters.drain() {
            let _ = waiter.send(Response::Error { message: format!("worker {pid} exited before answering") });
        }
        if let Some(to) = worker.snapshot_for.take() {
            // The new worker counts from zero rather than wait for counters that cannot come.
            self.hand_snapshot_to(to, None).await;
        }
        let how = describe(status);
        let starting = self.reload.as_ref().is_some_and(|r| r.generation == generation);
        if starting {
            let tail: Vec<String> = worker.proc.tail.lock().map(|t| t.iter().cloned().collect()).unwrap_or_default();
            let mut error = format!("worker {pid} exited ({how}) while starting");
            if !tail.is_empty() {
                error.push_str(":\n");
                error.push_str(&tail.join("\n"));
            }
            self.fail_reload(error).await;
            return;
        }
        if !self.stopping && self.canary_worker_exited(generation, &how).await {
            return;
        }
        match worker.role {
            Role::Current if !self.stopping => {
                tracing::error!(pid, generation, "current worker died ({how}); starting a new one");
                self.current = None;
                let now = Instant::now();
                self.crashes.push_back(now);
                self.crashes.retain(|t| now.duration_since(*t) < CRASH_WINDOW);
                if self.crashes.len() >= CRASH_LIMIT {
                    tracing::error!("{} crashes in {:?}: giving up", self.crashes.len(), CRASH_WINDOW);
                    self.stop_all(Signal::SIGTERM);
                    self.exit = Some(ExitCode::FAILURE);
                    return;
                }
                self.schedule_respawn();
            }
            Role::Current | Role::Old | Role::Starting | Role::Canary | Role::Master => {
                tracing::info!(pid, generation, "worker exited ({how})");
                if self.current == Some(generation) {
                    self.current = None;
                }
                let old = self.workers.values().filter(|w| w.role == Role::Old).count();
                self.notifier.status(&format!("{old} old workers draining"));
            }
        }
        if self.stopping && self.workers.is_empty() {
            self.notifier.stopping("stopped");
            self.exit = Some(ExitCode::SUCCESS);
        }
    }

    /// Replace a crashed worker: at once the first time, then with a growing delay (the kernel
    /// queues connections on the master's sockets meanwhile, none is refused).
    pub(super) fn schedule_respawn(&mut self) {
        let recent = self.crashes.len().saturating_sub(1) as u32;
        let delay = if recent == 0 {
            Duration::ZERO
        } else {
            (Duration::from_millis(500) * 2u32.pow(recent.min(5))).min(MAX_RESPAWN_DELAY)
        };
        self.respawn_at = Some(Instant::now() + delay);
    }

    /// Beyond `max_old_workers` draining workers, the oldest get SIGTERM (they stop at once),
    /// then SIGKILL after a grace.
    pub(super) fn enforce_max_old_workers(&mut self, now: Instant) {
        let max = self.settings.max_old_workers;
        let draining: Vec<u64> =
            self.workers.iter().filter(|(_, w)| w.role == Role::Old && w.kill_at.is_none()).map(|(g, _)| *g).collect();
        let excess = draining.len().saturating_sub(max);
        for generation in draining.into_iter().take(excess) {
            if let Some(worker) = self.workers.get_mut(&generation) {
                tracing::warn!(pid = worker.proc.pid, generation, "more than {max} old workers: stopping the oldest");
                signal(worker.proc.pid, Signal::SIGTERM);
                worker.kill_at = Some(now + KILL_GRACE);
            }
        }
    }

    /// SIGTERM or SIGINT: drain every worker, exit when they are gone. A second one stops them
    /// at once.
    pub(super) async fn stop(&mut self) {
        if self.stopping {
            tracing::warn!("second stop signal: stopping workers now");
            self.stop_all(Signal::SIGTERM);
            return;
        }
        self.stopping = true;
        tracing::info!("stopping: draining workers");
        // No worker will be started again: close the master's copies of the sockets, so that
        // once the workers stop accepting, new connections are refused rather than queued.
        self.sockets.clear();
        self.notifier.stopping("stopping: draining workers");
        self.abandon_canary();
        for waiter in self.queued.drain(..) {
            let _ = waiter.send(Response::ReloadFailed { error: "the master is stopping".into() });
        }
        for (_, reply) in self.waiting_runtime.drain(..) {
            let _ = reply.send(Response::Error { message: "the master is stopping".into() });
        }
        let now = Instant::now();
        let hard_stop = self.settings.hard_stop_after_ms.map(|ms| now + Duration::from_millis(ms));
        for worker in self.workers.values_mut() {
            let _ = worker.proc.tx.send(&ToWorker::SoftStop, &[]).await;
            if worker.role == Role::Current {
                worker.role = Role::Old;
                worker.hard_stop_at = hard_stop;
            }
        }
        self.current = None;
        if self.workers.is_empty() {
            self.exit = Some(ExitCode::SUCCESS);
        }
    }

    pub(super) fn stop_all(&mut self, sig: Signal) {
        let kill_at = Instant::now() + KILL_GRACE;
        for worker in self.workers.values_mut() {
            signal(worker.proc.pid, sig);
            worker.kill_at.get_or_insert(kill_at);
        }
    }

    pub(super) fn next_deadline(&self) -> Option<Instant> {
        let workers = self.workers.values().flat_map(|w| [w.hard_stop_at, w.kill_at]).flatten();
        let reload = self.reload.as_ref().map(|r| r.deadline).into_iter().chain(self.canary_deadline());
        let secrets = self.secrets.as_ref().map(SecretRing::next_change);
        workers.chain(reload).chain(self.respawn_at).chain(secrets).min()
    }

    pub(super) async fn on_timer(&mut self) {
        let now = Instant::now();
        if let Some(ring) = &mut self.secrets {
            match ring.advance(now) {
                Ok(true) => self.send_secrets().await,
                Ok(false) => {}
                Err(e) => tracing::error!("renewing the workers' secrets: {e} (the current ones stay)"),
            }
        }
        if self.reload.as_ref().is_some_and(|r| r.deadline <= now) {
            let timeout = Duration::from_millis(self.settings.worker_start_timeout_ms);
            if let Some(worker) = self.reload.as_ref().and_then(|r| self.workers.get(&r.generation)) {
                signal(worker.proc.pid, Signal::SIGKILL);
            }
            self.fail_reload(format!("the new worker did not report ready within {timeout:?} (worker_start_timeout)"))
                .await;
        }
        self.canary_timer(now).await;
        if self.respawn_at.is_some_and(|at| at <= now) {
            self.respawn_at = None;
            if self.current.is_none() && self.reload.is_none() && !self.stopping {
                self.start_reload(Vec::new(), None).await;
            }
        }
        for (generation, worker) in self.workers.iter_mut() {
            if worker.hard_stop_at.is_some_and(|at| at <= now) {
                tracing::warn!(pid = worker.proc.pid, generation, "still draining after hard_stop_after: stopping it");
                worker.hard_stop_at = None;
                let _ = worker.proc.tx.send(&ToWorker::HardStop, &[]).await;
                worker.kill_at.get_or_insert(now + KILL_GRACE);
            }
            if worker.kill_at.is_some_and(|at| at <= now) {
                tracing::warn!(pid = worker.proc.pid, generation, "worker did not exit: SIGKILL");
                worker.kill_at = None;
                signal(worker.proc.pid, Signal::SIGKILL);
            }
        }
    }

    /// The secrets as they are now, to every worker that serves or drains. A starting worker
    /// got them before its sockets and gets them again once ready (see `ready`), so nothing
    /// comes between its socket requests and their answers.
    pub(super) async fn send_secrets(&mut self) {
        let Some(ring) = &self.secrets else { return };
        let message = ToWorker::Secrets { secrets: ring.set() };
        for (generation, worker) in &self.workers {
            if worker.role != Role::Starting && worker.proc.tx.send(&message, &[]).await.is_err() {
                tracing::warn!(generation, "handing secrets to the worker failed");
            }
        }
    }
}
