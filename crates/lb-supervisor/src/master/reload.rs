//! The end of a reload: the new worker is ready (it becomes current, the previous one drains
//! after handing over its counters), or the reload failed (nothing changed but the answer).

use std::process::ExitCode;
use std::time::{Duration, Instant};

use super::canary::Promotion;
use super::{Master, CRASH_WINDOW, KILL_GRACE};
use crate::canary::CanarySettings;
use crate::protocol::{Response, Role, Settings, ToWorker};
use crate::secret::{SecretRing, SecretSpec};
use crate::ListenAddr;

impl Master {
    pub(super) async fn ready(
        &mut self,
        generation: u64,
        version: String,
        listening: Vec<ListenAddr>,
        settings: Settings,
        canary: Option<CanarySettings>,
    ) {
        let Some(reload) = self.reload.take_if(|r| r.generation == generation) else {
            tracing::warn!(generation, "unexpected READY");
            return;
        };
        if let Some(worker) = self.workers.get_mut(&generation) {
            worker.version = version;
            worker.held = canary.is_some();
        }
        self.forget_rollback_file();
        let mut waiters = reload.waiters;
        // A canary under way is superseded by this newer worker, whatever becomes of it: the
        // newest configuration is the one judged, against the current worker.
        if let Some(superseded) = self.canary.take() {
            waiters.extend(self.supersede(superseded).await);
        }
        let promotion = Promotion { listening, settings, waiters, started: reload.started };
        match (canary, self.current.filter(|c| self.workers.contains_key(c))) {
            (Some(plan), Some(current)) => self.start_canary(generation, current, plan, promotion).await,
            _ => self.promote(generation, promotion, None).await,
        }
        for (line, reply) in std::mem::take(&mut self.waiting_runtime) {
            self.runtime(line, reply).await;
        }
        self.next_queued().await;
    }

    /// Make `generation` the current worker: the previous one hands over its counters and
    /// drains, the master keeps the new worker's sockets and settings, and whoever waited hears
    /// it (with the canary's verdict, when there was one).
    pub(super) async fn promote(&mut self, generation: u64, promotion: Promotion, verdict: Option<String>) {
        let Promotion { listening, settings, waiters, started } = promotion;
        let now = Instant::now();
        let initial = self.current.is_none() && self.reloads == 0 && generation == 1;
        if let Some(worker) = self.workers.get_mut(&generation) {
            worker.role = Role::Current;
            if std::mem::take(&mut worker.held) || verdict.is_some() {
                let _ = worker.proc.tx.send(&ToWorker::Whole, &[]).await;
            }
        }
        let previous = self.current.replace(generation).filter(|&g| g != generation);
        self.adopt_secrets(settings.secret, now);
        self.send_secrets().await;
        self.settings = settings;
        if let Some(old) = previous.and_then(|g| self.workers.get_mut(&g)) {
            self.previous_config = old.config_text.clone();
            old.role = Role::Old;
            old.hard_stop_at = self.settings.hard_stop_after_ms.map(|ms| now + Duration::from_millis(ms));
            // Its counters first, then the drain: the new worker counts on from them.
            old.snapshot_for = Some(generation);
            if old.proc.tx.send(&ToWorker::Snapshot, &[]).await.is_err() {
                old.snapshot_for = None;
            }
            let _ = old.proc.tx.send(&ToWorker::SoftStop, &[]).await;
        }
        // No predecessor asked for counters: the new worker counts from zero.
        if previous.is_none_or(|g| self.workers.get(&g).is_none_or(|w| w.snapshot_for.is_none())) {
            self.hand_snapshot_to(generation, None).await;
        }
        // Exactly the sockets the new worker uses stay open here; the others close once the
        // old workers (which hold their own copies) are gone.
        self.sockets.retain(|address, _| listening.contains(address));
        self.current_listening = listening;
        if !initial {
            self.reloads += 1;
        }
        if let Some(worker) = self.workers.get_mut(&generation) {
            worker.reloads_at_start = self.reloads;
        }
        self.enforce_max_old_workers(now);
        let pid = self.workers.get(&generation).map_or(0, |w| w.proc.pid);
        let took_ms = now.duration_since(started).as_millis() as u64;
        tracing::info!(pid, generation, took_ms, "{} worker ready", self.name);
        let status = match &verdict {
            Some(summary) => format!("serving: worker {pid} generation {generation}; canary {summary}"),
            None => format!("serving: worker {pid} generation {generation}"),
        };
        self.notifier.ready(&status);
        if let Some(pipe) = self.detached.take() {
            pipe.ready();
        }
        for waiter in waiters {
            let _ = waiter.send(Response::Reloaded { pid, generation, took_ms, canary: verdict.clone() });
        }
        self.crashes.retain(|t| now.duration_since(*t) < CRASH_WINDOW);
    }

    pub(super) async fn fail_reload(&mut self, error: String) {
        let Some(mut reload) = self.reload.take() else { return };
        self.forget_rollback_file();
        reload.failed = true;
        tracing::error!(generation = reload.generation, "reload failed: {error}");
        if let Some(worker) = self.workers.get_mut(&reload.generation) {
            // It exits by itself after reporting; make sure of it.
            worker.kill_at.get_or_insert(Instant::now() + KILL_GRACE);
            worker.role = Role::Old;
        }
        // Sockets bound for the failed worker go; while nothing serves, everything stays.
        if self.current.is_some() {
            let keep: Vec<ListenAddr> = self.current_listening.iter().chain(self.canary_listening()).cloned().collect();
            self.sockets.retain(|address, _| keep.contains(address));
        }
        if self.current.is_none() {
            // The very first worker (or a respawn) failed: nothing serves.
            if let Some(pipe) = self.detached.take() {
                pipe.failed(&error);
            }
            if self.reloads == 0 && reload.generation == 1 {
                self.exit = Some(ExitCode::FAILURE);
            } else {
                self.schedule_respawn();
            }
        }
        if self.current.is_none() {
            for (_, reply) in self.waiting_runtime.drain(..) {
                let _ = reply.send(Response::Error { message: format!("no worker is serving: {error}") });
            }
        }
        self.notifier.ready(&format!("reload failed: {}", error.lines().next().unwrap_or("")));
        for waiter in reload.waiters {
            let _ = waiter.send(Response::ReloadFailed { error: error.clone() });
        }
        self.next_queued().await;
    }

    pub(super) async fn next_queued(&mut self) {
        if self.queued_reload && !self.stopping {
            self.queued_reload = false;
            let waiters = std::mem::take(&mut self.queued);
            let ask = self.queued_ask.take();
            self.start_reload(waiters, ask).await;
        }
    }

    /// The new worker's configuration may ask for other secrets (another schedule, none, or
    /// some where there were none): the ring follows, and every serving worker, the new one
    /// included, gets the set as it now is.
    fn adopt_secrets(&mut self, spec: Option<SecretSpec>, now: Instant) {
        let changed = match (&mut self.secrets, spec) {
            (Some(ring), Some(spec)) => ring.adopt(spec, now),
            (None, Some(spec)) => SecretRing::new(spec, now).map(|ring| {
                self.secrets = Some(ring);
                true
            }),
            (Some(_), None) => {
                self.secrets = None;
                Ok(false)
            }
            (None, None) => Ok(false),
        };
        if let Err(e) = changed {
            tracing::error!("cannot make the workers' secrets: {e}");
        }
    }
}
