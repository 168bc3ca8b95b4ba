//! Control requests: reload, `show proc` (with each worker's live connection count, which
//! HAProxy cannot show), and runtime commands.

use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::Master;
use crate::protocol::{ProcEntry, ProcTable, Request, Response, Role, ToWorker};

/// How long `show proc` waits for a worker's connection count.
const STATUS_TIMEOUT: Duration = Duration::from_millis(500);

impl Master {
    pub(super) async fn on_request(&mut self, request: Request, reply: oneshot::Sender<Response>) {
        match request {
            Request::Reload => self.request_reload(Some(reply)).await,
            Request::ShowProc => self.show_proc(reply).await,
            Request::Runtime { .. } => {
                let _ = reply.send(Response::Error { message: "runtime commands are not available yet".into() });
            }
        }
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
            let _ = reply.send(Response::Proc(ProcTable { master, workers }));
        });
    }
}
