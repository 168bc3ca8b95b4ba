//! `tcp_request` rules, at accept (after the PROXY header, before any request): `track` counts
//! the connection in a table under the client's address, `reject` closes it. What the
//! connection tracks stays held until it closes, so `conn_cur` is its open connections.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use lb_config::{ConnectionAction, ConnectionRule, Policy};

use super::cond::CompileError;
use super::{when, Fetched, Patterns, Subject, When};
use crate::facts::ConnFacts;
use crate::tables::{Key, Now, Reason, Table, Tables, Tracked};

#[derive(Debug)]
pub(super) struct ConnRule {
    when: Option<When>,
    action: Act,
    hits: AtomicU64,
}

#[derive(Debug)]
enum Act {
    Track { slot: u8, table: Arc<Table> },
    Reject,
}

pub(super) fn compile(
    rules: &[ConnectionRule],
    policy: &Policy,
    patterns: &Patterns,
    tables: &Tables,
) -> Result<Vec<ConnRule>, (usize, CompileError)> {
    rules
        .iter()
        .enumerate()
        .map(|(i, rule)| {
            let action = match &rule.action {
                ConnectionAction::Track(t) => Act::Track {
                    slot: t.slot,
                    table: tables
                        .get(&t.table)
                        .cloned()
                        .ok_or_else(|| (i, CompileError(format!("no table `{}`", t.table))))?,
                },
                ConnectionAction::Reject => Act::Reject,
            };
            let when = when(rule.guard.as_ref(), policy, patterns).map_err(|e| (i, e))?;
            Ok(ConnRule { when, action, hits: AtomicU64::new(0) })
        })
        .collect()
}

impl ConnRule {
    pub(super) fn name(&self) -> &'static str {
        match self.action {
            Act::Track { .. } => "track",
            Act::Reject => "reject",
        }
    }

    pub(super) fn hits(&self) -> u64 {
        self.hits.load(Ordering::Relaxed)
    }
}

/// Runs a frontend's `tcp_request` rules on a new connection: what it tracks (held until the
/// connection ends), or `None` when a rule rejects it.
pub(super) fn run(rules: &[ConnRule], facts: &ConnFacts, frontend: &str) -> Option<Tracked> {
    let mut tracked = Tracked::default();
    for rule in rules {
        let tracking = (!tracked.is_empty()).then_some(&tracked);
        let subject = Subject { req: None, facts, frontend, response: None, tracked: tracking };
        if !rule.when.as_ref().is_none_or(|w| w.holds(&subject, &Fetched::default())) {
            continue;
        }
        rule.hits.fetch_add(1, Ordering::Relaxed);
        match &rule.action {
            Act::Track { slot, table } => {
                let Some(client) = facts.client else { continue };
                let key = Key::ip(&table.config.key, client.ip())
                    .or_else(|| Key::bytes(&table.config.key, client.ip().to_string().as_bytes()));
                if let Some(key) = key {
                    tracked.track_connection(*slot, table, key, Now::read());
                }
            }
            Act::Reject => {
                let read = rule.when.as_ref().map_or(0, |w| w.cond.slots_read());
                tracked.refused(read, Reason::Reject);
                return None;
            }
        }
    }
    Some(tracked)
}
