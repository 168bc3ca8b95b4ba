//! `lbctl rollback`: the canary under way is rolled back; without one, the configuration the
//! previous worker served is started anew. The master keeps that configuration's text (read
//! when its worker was started) and writes it beside the configuration file, so that what it
//! names by relative path resolves the same; the file goes once the reload has ended.
//!
//! A worker that drains cannot take its listeners back, so "back to the previous generation"
//! is always a new worker on the previous configuration: to clients the same thing.

use std::path::{Path, PathBuf};

use tokio::sync::oneshot;

use super::Master;
use crate::canary::CanaryAsk;
use crate::protocol::Response;

impl Master {
    pub(super) async fn rollback(&mut self, reply: oneshot::Sender<Response>) {
        if self.canary.is_some() {
            let _ = reply.send(self.rollback_by_hand().await);
            return;
        }
        let refuse = |message: &str| Response::Error { message: message.to_owned() };
        if self.stopping {
            let _ = reply.send(refuse("the master is stopping"));
            return;
        }
        if self.reload.is_some() {
            let _ = reply.send(refuse("a reload is under way: roll back once it has ended"));
            return;
        }
        let Some(text) = self.previous_config.clone() else {
            let _ = reply.send(refuse("nothing to roll back to: no reload has succeeded since the master started"));
            return;
        };
        let file = rollback_path(&self.config);
        if let Err(e) = write_private(&file, &text) {
            let _ = reply.send(refuse(&format!("cannot write the previous configuration to {}: {e}", file.display())));
            return;
        }
        tracing::warn!("rolling back by hand to the previous configuration ({})", file.display());
        self.rollback_file = Some(file);
        let (waiter, answer) = oneshot::channel();
        tokio::spawn(async move {
            let answer = match answer.await {
                Ok(Response::Reloaded { pid, generation, .. }) => Response::RolledBack {
                    generation,
                    message: format!(
                        "worker {pid} generation {generation} serves the previous configuration \
                         (the file on disk is unchanged: the next reload reads it)"
                    ),
                },
                Ok(other) => other,
                Err(_) => Response::Error { message: "the master is stopping".into() },
            };
            let _ = reply.send(answer);
        });
        // Going back to what served before is not judged.
        self.start_reload(vec![waiter], Some(CanaryAsk::Off)).await;
    }

    /// The configuration a new worker starts on: the previous one's copy for a rollback (then
    /// removed once that reload ends), else the file.
    pub(super) fn source_for_next_worker(&mut self) -> PathBuf {
        self.rollback_file.clone().unwrap_or_else(|| self.config.clone())
    }

    /// The reload has ended: a rollback's copy is no longer needed.
    pub(super) fn forget_rollback_file(&mut self) {
        if let Some(file) = self.rollback_file.take() {
            let _ = std::fs::remove_file(file);
        }
    }
}

/// `.NAME.rollback` beside the configuration file.
fn rollback_path(config: &Path) -> PathBuf {
    let name = config.file_name().map_or_else(|| "config".into(), |n| n.to_string_lossy().into_owned());
    config.with_file_name(format!(".{name}.rollback"))
}

fn write_private(path: &Path, text: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(0o600).open(path)?;
    file.write_all(text)
}
