//! One change, end to end: render, validate, write atomically, then runtime commands or a
//! reload; and the periodic drift repair.

use std::collections::HashMap;
use std::path::Path;
use std::time::Instant;

use lb_config::Config as ProxyConfig;

use super::Engine;
use crate::apply::Applied;
use crate::config::Service;
use crate::hysteresis::{Servers, Sets};
use crate::status::{unix_now, LastApply, Metrics};
use crate::write::{write_config, Written};
use crate::{render, Error};

impl Engine {
    pub(crate) async fn apply(&mut self, sets: Sets, now: Instant) {
        let result = self.apply_sets(&sets).await;
        // The applied servers are now in a file that loaded (read back whole the first time).
        self.checked_whole |= result.is_ok();
        let (outcome, detail) = match &result {
            Ok((how, detail)) => ((*how).to_owned(), detail.clone()),
            Err(e) => ("failed".to_owned(), e.to_string()),
        };
        if let Err(e) = &result {
            tracing::error!("applying the new server list failed: {e}");
            Metrics::add(&self.shared.metrics.errors);
        } else {
            tracing::info!("applied ({outcome}): {detail}");
        }
        self.shared.update(|s| s.last_apply = Some(LastApply { at: unix_now(), result: outcome, detail }));
        self.after_apply(&sets, result.map(|_| ()).map_err(|_| ()), now);
    }

    async fn apply_sets(&mut self, sets: &Sets) -> Result<(&'static str, String), Error> {
        let path = self.config.proxy.config.clone();
        let rendered = render::render(&self.base, &self.config.services, sets);
        let text = rendered.to_yaml();
        let written = write_config(&path, &text, |tmp| self.check(tmp, sets))?;
        let summary = sets.iter().map(|(b, s)| format!("{b}: {} servers", s.len())).collect::<Vec<_>>().join(", ");
        Metrics::add(&self.shared.metrics.applies);
        if self.config.proxy.runtime && !self.base_changed {
            match self.applier.membership(&self.config.services, sets).await {
                Ok(Applied::InSync) if written == Written::Unchanged => return Ok(("unchanged", summary)),
                Ok(Applied::InSync) => return Ok(("runtime", format!("{summary}; lb-proxy already in step"))),
                Ok(Applied::Draining { waiting }) => {
                    self.pending_deletes = true;
                    let how = if written == Written::Unchanged { "unchanged" } else { "runtime" };
                    return Ok((how, format!("{summary}; {waiting} drained servers deleted once idle")));
                }
                Ok(Applied::Runtime { commands }) => {
                    Metrics::add(&self.shared.metrics.runtime_applies);
                    self.pending_deletes = true;
                    return Ok(("runtime", format!("{summary}; {commands} runtime commands")));
                }
                Err(e) => tracing::warn!("{e}; reloading instead"),
            }
        }
        self.reload().await?;
        self.base_changed = false;
        Ok(("reload", summary))
    }

    /// [`check`] of `tmp`, with the applied servers once an apply of this run succeeded.
    fn check(&self, tmp: &Path, sets: &Sets) -> Result<(), Error> {
        let applied: Option<HashMap<&str, &Servers>> =
            self.checked_whole.then(|| self.state.applied_iter().map(|(b, s)| (b.as_str(), s)).collect());
        check(tmp, &self.base, &self.config.services, sets, applied.as_ref())
    }

    async fn reload(&mut self) -> Result<(), Error> {
        match self.applier.reload().await {
            Ok(()) => {
                Metrics::add(&self.shared.metrics.reloads);
                Ok(())
            }
            Err(e) => {
                Metrics::add(&self.shared.metrics.reload_failures);
                Err(e)
            }
        }
    }

    /// Compares what lb-proxy runs with the file and repairs the difference (servers added or
    /// removed behind our back, drained servers whose connections are done).
    pub(crate) async fn drift(&mut self) {
        if !self.config.proxy.runtime {
            return;
        }
        let Ok(file) = ProxyConfig::load(&self.config.proxy.config) else { return };
        let sets = render::sets_of(&file, &self.config.services);
        // Without a runtime socket (or lb-proxy) nothing can be seen, so nothing is repaired.
        for service in &self.config.services {
            if let Err(e) = self.applier.running(&service.backend).await {
                tracing::debug!("drift check skipped: {e}");
                return;
            }
        }
        match self.applier.membership(&self.config.services, &sets).await {
            Ok(Applied::InSync) => self.pending_deletes = false,
            // Drained servers still holding connections: the deletions stay pending (their
            // `del server`, once it succeeds, is not lb-proxy drifting).
            Ok(Applied::Draining { .. }) => self.pending_deletes = true,
            Ok(Applied::Runtime { commands }) => {
                if !self.pending_deletes {
                    let file = self.config.proxy.config.display();
                    tracing::warn!("lb-proxy had drifted from {file}: {commands} runtime commands");
                }
                Metrics::add(&self.shared.metrics.drift_repairs);
            }
            Err(e) => {
                tracing::warn!("drift repair: {e}; reloading");
                Metrics::add(&self.shared.metrics.drift_repairs);
                if let Err(e) = self.reload().await {
                    tracing::error!("drift repair: {e}");
                    Metrics::add(&self.shared.metrics.errors);
                }
            }
        }
    }
}

/// The file about to replace lb-proxy's, `tmp`, rendered from `sets` on `base`, loads as
/// lb-proxy would load it. Without `applied` (no apply of this run succeeded yet) the file is
/// read back whole (about 70 ms at 10,000 servers, most of an apply's CPU). With it (the servers
/// of a file of the same base that loaded, by backend), only what `sets` adds or moves is
/// checked, in a file of the base and those servers: lb-config checks each server entry on its
/// own. Should that fail, the whole file is read back, so a bad server is reported as it always
/// was: by its line in the file.
fn check(
    tmp: &Path,
    base: &ProxyConfig,
    services: &[Service],
    sets: &Sets,
    applied: Option<&HashMap<&str, &Servers>>,
) -> Result<(), Error> {
    if let Some(applied) = applied {
        let added = render::added(base, services, sets, |b| applied.get(b).copied());
        if ProxyConfig::parse(&added.to_yaml(), &tmp.display().to_string()).is_ok() {
            return Ok(());
        }
    }
    ProxyConfig::load(tmp).map(|_| ()).map_err(|source| Error::Proxy { path: tmp.to_path_buf(), source })
}

#[cfg(test)]
mod tests;
