//! Control requests: reload, `show proc` (with each worker's live connection count, which
//! HAProxy cannot show), and runtime commands (relayed to the current worker); the counters a
//! new worker inherits from the one it replaces.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::Master;
use crate::protocol::{ProcEntry, ProcTable, Request, Response, Role, ToWorker};

/// How long `show proc` waits for a worker's connection count.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);

impl Master {
    pub(super) async fn on_request(&mut self, request: Request, reply: oneshot::Sender<Response>) {
        match request {
            Request::Reload => self.request_reload(Some(reply), None).await,
            Request::ReloadWith { canary } => self.request_reload(Some(reply), Some(canary)).await,
            Request::Rollback => self.rollback(reply).await,
            Request::ShowProc => self.show_proc(reply).await,
            Request::Runtime { line } => self.runtime(line, reply).await,
        }
    }

    /// Relay a runtime command line to the current worker; its answer comes back as
    /// `ToMaster::Runtime` with the same id.
    pub(super) async fn runtime(&mut self, line: String, reply: oneshot::Sender<Response>) {
        let Some(worker) = self.current.and_then(|g| self.workers.get_mut(&g)) else {
            if (self.reload.is_some() || self.respawn_at.is_some()) && !self.stopping {
                // A worker is on its way: answer once it serves (or failed).
                self.waiting_runtime.push((line, reply));
            } else {
                let _ = reply.send(Response::Error { message: "no worker is serving".into() });
            }
            return;
        };
        let id = self.next_request_id;
        self.next_request_id += 1;
        if let Err(e) = worker.proc.tx.send(&ToWorker::Runtime { id, line }, &[]).await {
            let _ = reply.send(Response::Error { message: format!("cannot reach the current worker: {e}") });
            return;
        }
        worker.runtime_waiters.insert(id, reply);
    }

    /// An old worker's counters arrived: hand them to the worker that asked for them.
    pub(super) async fn hand_snapshot(&mut self, from: u64, snapshot: Option<String>) {
        // A canary that did not become current: its counts are added to the current worker's.
        if self.workers.get_mut(&from).is_some_and(|w| std::mem::take(&mut w.counts_to_current)) {
            let current = self.current.filter(|&c| c != from).and_then(|c| self.workers.get(&c));
            if let (Some(counts), Some(current)) = (snapshot, current) {
                let _ = current.proc.tx.send(&ToWorker::AddCounts { counts }, &[]).await;
            }
            return;
        }
        let Some(to) = self.workers.get_mut(&from).and_then(|w| w.snapshot_for.take()) else { return };
        self.hand_snapshot_to(to, snapshot).await;
    }

    /// Tell worker `to` what to count on from (every worker hears this once, after READY).
    pub(super) async fn hand_snapshot_to(&mut self, to: u64, snapshot: Option<String>) {
        if let Some(worker) = self.workers.get(&to) {
            let _ = worker.proc.tx.send(&ToWorker::Inherit { snapshot }, &[]).await;
        }
    }

    /// A worker asked for `show proc` (for its metrics): answer it off the loop.
    pub(super) async fn proc_for_worker(&mut self, generation: u64, id: u64) {
        let Some(tx) = self.workers.get(&generation).map(|w| w.proc.tx.clone()) else { return };
        let (reply, answer) = oneshot::channel();
        self.show_proc(reply).await;
        tokio::spawn(async move {
            if let Ok(Response::Proc(table)) = answer.await {
                let _ = tx.send(&ToWorker::Proc { id, table }, &[]).await;
            }
        });
    }

    async fn show_proc(&mut self, reply: oneshot::Sender<Response>) {
        let now = Instant::now();
        let master = ProcEntry {
            pid: std::process::id(),
            role: Role::Master,
            generation: 0,
            reloads: self.reloads,
            uptime_secs: now.duration_since(self.started).as_secs(),
            version: self.version.to_owned(),
            connections: None,
        };
        let mut rows = Vec::new();
        for (generation, worker) in self.workers.iter_mut().rev() {
            let (tx, rx) = oneshot::channel();
            let asked = worker.role != Role::Starting && worker.proc.tx.send(&ToWorker::Status, &[]).await.is_ok();
            if asked {
                worker.status_waiters.push_back(tx);
            }
            let entry = ProcEntry {
                pid: worker.proc.pid,
                role: worker.role,
                generation: *generation,
                reloads: self.reloads - worker.reloads_at_start.min(self.reloads),
                uptime_secs: now.duration_since(worker.started).as_secs(),
                version: worker.version.clone(),
                connections: None,
            };
            rows.push((entry, asked.then_some(rx)));
        }
        let canary = self.verdicts.table(now);
        // Answers come back through the master's loop: wait for them off the loop.
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + STATUS_TIMEOUT;
            let mut workers = Vec::with_capacity(rows.len());
            for (mut entry, answer) in rows {
                if let Some(answer) = answer {
                    entry.connections = tokio::time::timeout_at(deadline, answer).await.ok().and_then(Result::ok);
                }
                workers.push(entry);
            }
            let _ = reply.send(Response::Proc(ProcTable { master, workers, canary }));
        });
    }
}
