//! Reads: a path whole (its children listed, every child's data read), or only the nodes the
//! watch said changed; and what the watch's events ask for.

use std::collections::BTreeMap;

use zookeeper_client::{Client, EventType, MultiReadResult, WatchedEvent};

use super::Children;
use crate::status::Metrics;
use crate::Error;

/// Multi-reads per request: keeps a response well under ZooKeeper's 1 MB packet limit.
const BATCH: usize = 500;

/// What the events say became of a node since it was last read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// Created or its data changed: its data is read.
    Read,
    /// Deleted: dropped without a read.
    Gone,
}

/// What one path's events ask for.
#[derive(Debug, Default)]
pub(super) struct Pending {
    /// The path itself was created or deleted: only a whole read says what is under it.
    pub(super) whole: bool,
    /// The nodes to read or drop, each by its last event (a node deleted and created again is
    /// read; created and deleted again, dropped).
    pub(super) nodes: BTreeMap<String, Change>,
}

impl Pending {
    /// Takes in one node event of the recursive watch on `path`. Events deeper than the
    /// children (a node under a registration) do not concern the servers and are ignored.
    pub(super) fn record(&mut self, path: &str, event: &WatchedEvent) {
        if event.path == path {
            if matches!(event.event_type, EventType::NodeCreated | EventType::NodeDeleted) {
                self.whole = true;
            }
            return;
        }
        let Some(name) = child_name(path, &event.path) else { return };
        let change = match event.event_type {
            EventType::NodeCreated | EventType::NodeDataChanged => Change::Read,
            EventType::NodeDeleted => Change::Gone,
            EventType::Session | EventType::NodeChildrenChanged => return,
        };
        self.nodes.insert(name.to_owned(), change);
    }

    pub(super) fn is_empty(&self) -> bool {
        !self.whole && self.nodes.is_empty()
    }
}

/// `path`'s child named by `node`, when `node` is one (not the path, not a grandchild).
fn child_name<'a>(path: &str, node: &'a str) -> Option<&'a str> {
    let under = node.strip_prefix(path.trim_end_matches('/'))?.strip_prefix('/')?;
    (!under.is_empty() && !under.contains('/')).then_some(under)
}

fn child_path(path: &str, name: &str) -> String {
    format!("{}/{name}", path.trim_end_matches('/'))
}

/// Every child of `path` with its data; `None` when `path` does not exist. A child that goes
/// between the listing and the read is simply not there.
pub(super) async fn whole(client: &Client, path: &str, metrics: &Metrics) -> Result<Option<Children>, Error> {
    Metrics::add(&metrics.zk_full_reads);
    Metrics::add(&metrics.zk_reads);
    let names = match client.list_children(path).await {
        Ok(names) => names,
        Err(zookeeper_client::Error::NoNode) => return Ok(None),
        Err(source) => return Err(Error::Zookeeper { what: format!("listing {path}"), source }),
    };
    let listed: usize = names.iter().map(|n| n.len() + 4).sum();
    Metrics::add_n(&metrics.zk_bytes_read, listed as u64);
    let read = nodes(client, path, &names, metrics).await?;
    Ok(Some(read.into_iter().filter_map(|(name, data)| Some((name, data?))).collect()))
}

/// The data of the children of `path` named `names`: `None` for those that do not exist.
pub(super) async fn nodes(
    client: &Client,
    path: &str,
    names: &[String],
    metrics: &Metrics,
) -> Result<BTreeMap<String, Option<Vec<u8>>>, Error> {
    let mut out = BTreeMap::new();
    for batch in names.chunks(BATCH) {
        let mut reader = client.new_multi_reader();
        for name in batch {
            let child = child_path(path, name);
            reader
                .add_get_data(&child)
                .map_err(|source| Error::Zookeeper { what: format!("reading {child}"), source })?;
        }
        Metrics::add(&metrics.zk_reads);
        let results = reader
            .commit()
            .await
            .map_err(|source| Error::Zookeeper { what: format!("reading under {path}"), source })?;
        for (name, result) in batch.iter().zip(results) {
            match result {
                MultiReadResult::Data { data, .. } => {
                    Metrics::add(&metrics.zk_nodes_read);
                    Metrics::add_n(&metrics.zk_bytes_read, data.len() as u64);
                    out.insert(name.clone(), Some(data));
                }
                MultiReadResult::Error { err: zookeeper_client::Error::NoNode } => {
                    out.insert(name.clone(), None);
                }
                MultiReadResult::Error { err } => {
                    return Err(Error::Zookeeper { what: format!("reading {}", child_path(path, name)), source: err });
                }
                _ => {}
            }
        }
    }
    Ok(out)
}

/// How many nodes differ between `known` and `read` (missing, extra, other data), leaving out
/// `skip`, nodes whose events came in during the read (either answer may be the newer one).
pub(super) fn differences(known: &Children, read: &Children, skip: &BTreeMap<String, Change>) -> usize {
    let missing = known.keys().filter(|n| !read.contains_key(*n) && !skip.contains_key(*n)).count();
    let other = read.iter().filter(|(n, data)| !skip.contains_key(*n) && known.get(*n) != Some(*data)).count();
    missing + other
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(event_type: EventType, path: &str) -> WatchedEvent {
        WatchedEvent::new(event_type, path)
    }

    #[test]
    fn events_name_the_children_to_read_or_drop() {
        let mut p = Pending::default();
        p.record("/a/b", &event(EventType::NodeCreated, "/a/b/web1"));
        p.record("/a/b", &event(EventType::NodeDeleted, "/a/b/web2"));
        p.record("/a/b", &event(EventType::NodeDataChanged, "/a/b/web3"));
        p.record("/a/b", &event(EventType::NodeCreated, "/a/b/web3/deeper"));
        p.record("/a/b", &event(EventType::NodeCreated, "/a/bc"));
        p.record("/a/b", &event(EventType::NodeDataChanged, "/a/b"));
        assert!(!p.whole);
        let want = [("web1", Change::Read), ("web2", Change::Gone), ("web3", Change::Read)];
        assert_eq!(p.nodes, want.iter().map(|(n, c)| ((*n).to_owned(), *c)).collect());
        // The last event wins: deleted then created again is read.
        p.record("/a/b", &event(EventType::NodeCreated, "/a/b/web2"));
        assert_eq!(p.nodes.get("web2"), Some(&Change::Read));
        p.record("/a/b", &event(EventType::NodeDeleted, "/a/b"));
        assert!(p.whole);
        let mut root = Pending::default();
        root.record("/", &event(EventType::NodeCreated, "/web1"));
        assert_eq!(root.nodes.get("web1"), Some(&Change::Read));
    }

    #[test]
    fn differences_leave_out_nodes_in_flight() {
        let known: Children = [("a".into(), b"1".to_vec()), ("b".into(), b"2".to_vec())].into();
        let read: Children = [("b".into(), b"3".to_vec()), ("c".into(), b"4".to_vec())].into();
        assert_eq!(differences(&known, &read, &BTreeMap::new()), 3);
        assert_eq!(differences(&known, &read, &[("b".to_owned(), Change::Read)].into()), 2);
        assert_eq!(differences(&known, &known, &BTreeMap::new()), 0);
    }
}
