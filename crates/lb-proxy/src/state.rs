//! What every connection of one serving process shares: the backends, the logger, the pool,
//! the limits and counters of the process and of each frontend. Below everything that serves
//! (`serve`'s accept loops, `http`, `tcp`) and everything that reports (`runtime`, `stats`):
//! they all read this state, and it reaches up to none of them.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use lb_config::Frontend;
use lb_supervisor::Shutdown;

use crate::backend::{BackendState, Backends};
use crate::capture::Captures;
use crate::counters::Counters;
use crate::limit::Limit;
use crate::log::Logger;
use crate::policy::{FrontendPolicy, Patterns};
use crate::pool::Pool;
use crate::tables::Tables;

/// Everything the connections of one serving process share.
#[derive(Debug)]
pub(crate) struct Proxy {
    pub(crate) backends: Backends,
    pub(crate) logger: Logger,
    /// Idle server connections, for backends with `http_reuse: safe`.
    pub(crate) pool: Pool,
    /// A draining process closes its idle connections spread over this long.
    pub(crate) close_spread: Duration,
    /// Current client connections over all frontends (HAProxy's actconn).
    pub(crate) actconn: AtomicUsize,
    /// `global.max_connections`, or as last set by `set maxconn global` (at most the former).
    pub(crate) limit: Limit,
    /// `global.max_connections` as configured: `set maxconn global` may not go past it.
    pub(crate) hard_max_connections: usize,
    /// `set rate-limit connections global`: connections accepted per second at most (0: none).
    pub(crate) conn_rate_limit: AtomicU64,
    /// The whole process: connections accepted, requests (`show info`).
    pub(crate) counters: Counters,
    /// Every frontend, in config order.
    pub(crate) frontends: Vec<Arc<FrontendState>>,
    /// The limit tables (`tables:`).
    pub(crate) tables: Tables,
    /// The lists and maps the rules read, which the runtime API changes.
    pub(crate) patterns: Arc<Patterns>,
    /// Runtime threads serving (`show info`'s Nbthread).
    pub(crate) threads: usize,
    pub(crate) started: std::time::Instant,
    pub(crate) started_at: std::time::SystemTime,
    /// `show info`'s `Name:` (`global.runtime_name`).
    pub(crate) runtime_name: String,
    pub(crate) shutdown: Shutdown,
    /// True once the counters of the previous worker were added (or there were none): stats
    /// wait for it, so that no scrape sees counters drop at a reload.
    pub(crate) counters_ready: tokio::sync::watch::Sender<bool>,
}

/// One frontend's configuration, its routes resolved, and its live counters.
#[derive(Debug)]
pub(crate) struct FrontendState {
    pub(crate) config: Frontend,
    /// Its rules compiled: routing, `http_request`, `http_response`.
    pub(crate) policy: FrontendPolicy,
    /// Current connections on this frontend (HAProxy's feconn).
    pub(crate) feconn: AtomicUsize,
    /// Its `max_connections` (by default the global one), or as last set at run time.
    pub(crate) limit: Limit,
    /// `disable frontend`: accepting stopped for now.
    pub(crate) paused: tokio::sync::watch::Sender<bool>,
    pub(crate) counters: Counters,
    /// Its last refused request (`show errors`).
    pub(crate) errors: Captures,
}

impl Proxy {
    pub(crate) fn actconn(&self) -> usize {
        self.actconn.load(Ordering::Relaxed)
    }

    /// This process no longer accepts (an old worker after a reload, or stopping).
    pub(crate) fn draining(&self) -> bool {
        self.shutdown.is_draining()
    }

    /// The predecessor's counters have been added: stats may be shown.
    pub(crate) fn counters_ready(&self) {
        self.counters_ready.send_replace(true);
    }

    /// Wait (at most `within`) for [`counters_ready`](Self::counters_ready).
    pub(crate) async fn wait_counters_ready(&self, within: Duration) {
        let mut ready = self.counters_ready.subscribe();
        let _ = tokio::time::timeout(within, ready.wait_for(|r| *r)).await;
    }
}

impl FrontendState {
    /// `Err` names a rule that does not compile (see [`FrontendPolicy::new`]).
    pub(crate) fn new(
        config: &Frontend,
        backends: &Backends,
        global_max: usize,
        policy: &lb_config::Policy,
        patterns: &Patterns,
        tables: &Tables,
    ) -> Result<Self, String> {
        Ok(FrontendState {
            config: config.clone(),
            policy: FrontendPolicy::new(config, policy, patterns, backends, tables)?,
            feconn: AtomicUsize::new(0),
            limit: Limit::new(config.max_connections.unwrap_or(global_max)),
            paused: tokio::sync::watch::Sender::new(false),
            counters: Counters::default(),
            errors: Captures::default(),
        })
    }

    pub(crate) fn name(&self) -> &str {
        &self.config.name
    }

    pub(crate) fn feconn(&self) -> usize {
        self.feconn.load(Ordering::Relaxed)
    }

    /// Stop or resume accepting (`disable frontend`, `enable frontend`); false when it was so
    /// already. Open connections are not touched; new ones wait in the kernel's queue.
    pub(crate) fn pause(&self, paused: bool) -> bool {
        self.paused.send_replace(paused) != paused
    }

    pub(crate) fn is_paused(&self) -> bool {
        *self.paused.borrow()
    }

    /// The backend of a TCP-mode frontend.
    pub(crate) fn default_backend(&self) -> Option<&Arc<BackendState>> {
        self.policy.default_backend()
    }
}
