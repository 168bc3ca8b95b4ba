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
    routes: Vec<(lb_config::Rule, Arc<BackendState>)>,
    default_backend: Option<Arc<BackendState>>,
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
    pub(crate) fn new(config: &Frontend, backends: &Backends, global_max: usize) -> Self {
        // Validation guarantees every referenced backend exists; a missing one is skipped
        // rather than trusted blindly.
        let routes = config
            .rules
            .iter()
            .filter_map(|rule| match &rule.backend {
                lb_config::RouteTarget::Backend(name) => Some((rule.clone(), backends.get(name)?.clone())),
                lb_config::RouteTarget::Map { .. } => None,
            })
            .collect();
        FrontendState {
            config: config.clone(),
            routes,
            default_backend: config.default_backend.as_deref().and_then(|b| backends.get(b)).cloned(),
            feconn: AtomicUsize::new(0),
            limit: Limit::new(config.max_connections.unwrap_or(global_max)),
            paused: tokio::sync::watch::Sender::new(false),
            counters: Counters::default(),
            errors: Captures::default(),
        }
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

    /// The backend for a request: the first rule that matches, else the default backend.
    pub(crate) fn route(&self, host: Option<&str>, path: &str) -> Option<&Arc<BackendState>> {
        let host = host.map(strip_port);
        self.routes
            .iter()
            .find(|(rule, _)| {
                rule.path_prefix.as_deref().is_none_or(|p| path.starts_with(p))
                    && rule.host.as_deref().is_none_or(|want| host.is_some_and(|h| h.eq_ignore_ascii_case(want)))
            })
            .map(|(_, backend)| backend)
            .or(self.default_backend.as_ref())
    }

    /// The backend of a TCP-mode frontend.
    pub(crate) fn default_backend(&self) -> Option<&Arc<BackendState>> {
        self.default_backend.as_ref()
    }
}

fn strip_port(host: &str) -> &str {
    if host.starts_with('[') {
        return host.split_inclusive(']').next().unwrap_or(host);
    }
    host.rsplit_once(':').map_or(host, |(h, _)| h)
}
