//! The master's side of a canary: the split set up between the new worker and the current
//! one, both workers' figures at the start and at the end of the window, the verdict, and what
//! promotion and rollback do. A canary worker that exits is rolled back; a newer reload
//! supersedes the canary; `lbctl rollback` ends it at once.

use std::collections::VecDeque;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::spawn::WorkerEvent;
use super::Master;
use crate::canary::{judge, CanarySettings, Figures};
use crate::protocol::{CanaryRecord, Response, Role, Settings, Side, ToWorker, VerdictEntry};
use crate::ListenAddr;

/// How long the master waits for a worker's figures.
const FIGURES_TIMEOUT: Duration = Duration::from_secs(2);
/// Verdicts kept for `show proc`.
const VERDICTS_KEPT: usize = 10;

/// What becomes current when a worker is promoted, kept while it is judged.
#[derive(Debug)]
pub(super) struct Promotion {
    pub(super) listening: Vec<ListenAddr>,
    pub(super) settings: Settings,
    pub(super) waiters: Vec<oneshot::Sender<Response>>,
    /// When its reload started.
    pub(super) started: Instant,
}

/// The canary under way.
#[derive(Debug)]
pub(super) struct Canary {
    /// The canary worker, and the current one it is judged against.
    generation: u64,
    against: u64,
    settings: CanarySettings,
    ends: Instant,
    promotion: Promotion,
    /// Both workers' figures when the split started (old, new).
    baseline: (Option<Figures>, Option<Figures>),
    /// The final figures were asked for.
    judging: bool,
}

/// Which figures a gathering is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stage {
    Baseline,
    Final,
}

/// The verdicts given since the master started.
#[derive(Debug, Default)]
pub(super) struct Record {
    promoted: u64,
    rolled_back: u64,
    latest: VecDeque<(u64, bool, Instant, String)>,
}

impl Record {
    fn add(&mut self, generation: u64, promoted: bool, summary: &str) {
        if promoted {
            self.promoted += 1;
        } else {
            self.rolled_back += 1;
        }
        self.latest.push_front((generation, promoted, Instant::now(), summary.to_owned()));
        self.latest.truncate(VERDICTS_KEPT);
    }

    pub(super) fn table(&self, now: Instant) -> CanaryRecord {
        CanaryRecord {
            promoted: self.promoted,
            rolled_back: self.rolled_back,
            verdicts: self
                .latest
                .iter()
                .map(|(generation, promoted, at, summary)| VerdictEntry {
                    generation: *generation,
                    promoted: *promoted,
                    age_secs: now.duration_since(*at).as_secs(),
                    summary: summary.clone(),
                })
                .collect(),
        }
    }
}

impl Master {
    /// Worker `generation` is ready and asks for a canary against `against`, the current one.
    pub(super) async fn start_canary(
        &mut self,
        generation: u64,
        against: u64,
        settings: CanarySettings,
        promotion: Promotion,
    ) {
        let pair = match std::os::unix::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => {
                tracing::error!(generation, "cannot make the canary's socketpair ({e}): promoting without a canary");
                self.promote(generation, promotion, None).await;
                return;
            }
        };
        let share = settings.share;
        let Some(new) = self.workers.get_mut(&generation) else { return };
        new.role = Role::Canary;
        let new_tx = new.proc.tx.clone();
        let old_tx = self.workers.get(&against).map(|w| w.proc.tx.clone());
        let sent_new = new_tx.send(&ToWorker::Split { side: Side::New, share }, &[pair.0.as_fd()]).await;
        let sent_old = match &old_tx {
            Some(tx) => tx.send(&ToWorker::Split { side: Side::Old, share }, &[pair.1.as_fd()]).await,
            None => Err(std::io::Error::other("the current worker is gone")),
        };
        if let Err(e) = sent_new.and(sent_old) {
            tracing::error!(generation, "setting up the canary's split: {e}: promoting without a canary");
            self.promote(generation, promotion, None).await;
            return;
        }
        let pid = self.workers.get(&generation).map_or(0, |w| w.proc.pid);
        tracing::info!(pid, generation, %share, window = ?settings.duration, "canary: the new worker takes {share} of new connections");
        self.notifier.status(&format!(
            "canary: worker {pid} generation {generation} takes {share} of new connections for {:?}",
            settings.duration
        ));
        self.canary = Some(Canary {
            generation,
            against,
            ends: Instant::now() + settings.duration,
            settings,
            promotion,
            baseline: (None, None),
            judging: false,
        });
        self.gather(Stage::Baseline).await;
    }

    /// Ask both workers of the canary for their figures; they come back as a master event.
    async fn gather(&mut self, stage: Stage) {
        let Some(canary) = &self.canary else { return };
        let (generation, against) = (canary.generation, canary.against);
        let mut answers = Vec::new();
        for g in [against, generation] {
            let (tx, rx) = oneshot::channel();
            if let Some(worker) = self.workers.get_mut(&g) {
                if worker.proc.tx.send(&ToWorker::Figures, &[]).await.is_ok() {
                    worker.figures_waiters.push_back(tx);
                }
            }
            answers.push(rx);
        }
        let events = self.events_tx.clone();
        tokio::spawn(async move {
            let mut got = Vec::new();
            for answer in answers {
                got.push(tokio::time::timeout(FIGURES_TIMEOUT, answer).await.ok().and_then(Result::ok).flatten());
            }
            let new = got.pop().flatten();
            let old = got.pop().flatten();
            let _ = events.send((generation, WorkerEvent::CanaryFigures { stage, old, new }));
        });
    }

    pub(super) async fn canary_figures(
        &mut self,
        generation: u64,
        stage: Stage,
        old: Option<Figures>,
        new: Option<Figures>,
    ) {
        let Some(canary) = self.canary.as_mut().filter(|c| c.generation == generation) else { return };
        if stage == Stage::Baseline {
            canary.baseline = (old, new);
            return;
        }
        let zero = Figures::default();
        let since = |now: Option<Figures>, then: &Option<Figures>| {
            now.map(|now| now.since(then.as_ref().unwrap_or(&zero))).unwrap_or_default()
        };
        let old = since(old, &canary.baseline.0);
        let new = since(new, &canary.baseline.1);
        let verdict = judge(&canary.settings, &old, &new);
        if verdict.promote {
            if !verdict.judged {
                tracing::warn!(generation, "canary {}", verdict.summary);
            }
            self.end_canary_promoting(verdict.summary).await;
        } else {
            self.roll_back(verdict.summary).await;
        }
    }

    /// The window is over: ask for the final figures (once).
    pub(super) async fn canary_timer(&mut self, now: Instant) {
        if self.canary.as_ref().is_some_and(|c| !c.judging && c.ends <= now) {
            if let Some(canary) = &mut self.canary {
                canary.judging = true;
            }
            self.gather(Stage::Final).await;
        }
    }

    pub(super) fn canary_deadline(&self) -> Option<Instant> {
        self.canary.as_ref().filter(|c| !c.judging).map(|c| c.ends)
    }

    async fn end_canary_promoting(&mut self, summary: String) {
        let Some(canary) = self.canary.take() else { return };
        tracing::info!(generation = canary.generation, "canary {summary}");
        self.verdicts.add(canary.generation, true, &summary);
        self.promote(canary.generation, canary.promotion, Some(summary)).await;
    }

    /// Roll the canary back: it takes no new connection and drains, the current worker keeps
    /// everything, and the reload fails for whoever waited, with `summary`.
    pub(super) async fn roll_back(&mut self, summary: String) -> Option<u64> {
        let canary = self.canary.take()?;
        tracing::error!(generation = canary.generation, "canary {summary}");
        self.verdicts.add(canary.generation, false, &summary);
        if let Some(current) = self.workers.get(&canary.against) {
            let _ = current.proc.tx.send(&ToWorker::Whole, &[]).await;
        }
        let generation = canary.generation;
        let waiters = self.retire_canary(canary).await;
        // Sockets bound for the canary alone go; a reload under way may need what it bound, and
        // its own end (ready or failed) sorts the sockets out.
        if self.reload.is_none() {
            let keep = &self.current_listening;
            self.sockets.retain(|address, _| keep.contains(address));
        }
        self.notifier.ready(&format!("reload rolled back: {summary}"));
        for waiter in waiters {
            let _ = waiter.send(Response::ReloadFailed { error: format!("canary {summary}") });
        }
        Some(generation)
    }

    /// A newer worker is ready: the canary drains unjudged, and its waiters wait for the newer one.
    pub(super) async fn supersede(&mut self, canary: Canary) -> Vec<oneshot::Sender<Response>> {
        tracing::info!(generation = canary.generation, "canary superseded by a newer reload: draining unjudged");
        self.retire_canary(canary).await
    }

    /// The canary worker drains; what it counted goes to the current worker.
    async fn retire_canary(&mut self, canary: Canary) -> Vec<oneshot::Sender<Response>> {
        let now = Instant::now();
        let hard_stop = self.settings.hard_stop_after_ms.map(|ms| now + Duration::from_millis(ms));
        if let Some(worker) = self.workers.get_mut(&canary.generation) {
            worker.role = Role::Old;
            worker.hard_stop_at = hard_stop;
            worker.counts_to_current = true;
            // It inherited nothing while it was judged: its snapshot is its own counts.
            let _ = worker.proc.tx.send(&ToWorker::Inherit { snapshot: None }, &[]).await;
            if worker.proc.tx.send(&ToWorker::Snapshot, &[]).await.is_err() {
                worker.counts_to_current = false;
            }
            let _ = worker.proc.tx.send(&ToWorker::SoftStop, &[]).await;
        }
        canary.promotion.waiters
    }

    /// A worker of the canary exited: a canary that dies is rolled back; a current worker that
    /// dies leaves the canary to take everything.
    pub(super) async fn canary_worker_exited(&mut self, generation: u64, how: &str) -> bool {
        let Some(canary) = &self.canary else { return false };
        if canary.generation == generation {
            self.roll_back(format!("rolled back: the canary worker exited ({how}) during its window")).await;
            return true;
        }
        if canary.against == generation {
            tracing::error!(generation, "the current worker exited ({how}) during a canary: promoting the canary");
            self.current = None;
            self.end_canary_promoting(format!(
                "promoted unjudged: the previous worker exited ({how}) during the window"
            ))
            .await;
            return true;
        }
        false
    }

    /// The master stops: whoever waited for the canary hears it.
    pub(super) fn abandon_canary(&mut self) {
        if let Some(canary) = self.canary.take() {
            for waiter in canary.promotion.waiters {
                let _ = waiter.send(Response::ReloadFailed { error: "the master is stopping".into() });
            }
        }
    }

    /// The addresses a canary under way listens on (kept while it is judged).
    pub(super) fn canary_listening(&self) -> &[ListenAddr] {
        self.canary.as_ref().map_or(&[], |c| &c.promotion.listening)
    }

    /// `lbctl rollback`.
    pub(super) async fn rollback_by_hand(&mut self) -> Response {
        match self.roll_back("rolled back by hand (lbctl rollback)".to_owned()).await {
            Some(generation) => Response::RolledBack {
                generation,
                message: format!("the canary (generation {generation}) drains, the current worker serves"),
            },
            None => Response::Error { message: "no canary under way".into() },
        }
    }
}
