//! Idle server connections of `http_reuse: safe` backends, shared by every client connection of
//! a process. The pool keeps them per backend and server without knowing what they are (HTTP's
//! server connections implement [`Idle`]), so that it can sit in the shared state below the
//! protocol modules.

use std::any::Any;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Idle connections kept per server at most; more are closed.
pub(crate) const MAX_IDLE_PER_SERVER: usize = 64;

/// A connection the pool can keep.
pub(crate) trait Idle: Any + Send + std::fmt::Debug {
    /// The peer has closed it (or it failed): it can carry nothing more.
    fn is_closed(&self) -> bool;
    /// The server's address generation it was made to (see `ServerState::addr_generation`).
    fn addr_generation(&self) -> u64;
}

/// One server's idle connections, each with when it became idle.
type IdleList = Vec<(Box<dyn Idle>, Instant)>;

#[derive(Debug, Default)]
pub(crate) struct Pool {
    /// Backend name → per server index → idle connections (looked up by `&str`: no key is
    /// allocated per request).
    idle: Mutex<HashMap<String, Vec<IdleList>>>,
}

impl Pool {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Vec<IdleList>>> {
        self.idle.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// An idle connection of `server`: not idle for `max_idle` or more, and made to the
    /// server's current address (`generation`).
    pub(crate) fn take<C: Idle>(&self, backend: &str, server: usize, max_idle: Duration, generation: u64) -> Option<C> {
        let mut idle = self.lock();
        let list = idle.get_mut(backend)?.get_mut(server)?;
        while let Some((conn, since)) = list.pop() {
            if !conn.is_closed() && since.elapsed() < max_idle && conn.addr_generation() == generation {
                // Only one kind of connection is ever put in: the downcast cannot fail.
                if let Ok(conn) = (conn as Box<dyn Any>).downcast::<C>() {
                    return Some(*conn);
                }
            }
        }
        None
    }

    /// How many idle connections a server has (`show servers conn`).
    pub(crate) fn idle(&self, backend: &str, server: usize) -> usize {
        self.lock()
            .get(backend)
            .and_then(|servers| servers.get(server))
            .map_or(0, |list| list.iter().filter(|(c, _)| !c.is_closed()).count())
    }

    /// Close a server's idle connections (its address changed).
    pub(crate) fn forget(&self, backend: &str, server: usize) {
        if let Some(list) = self.lock().get_mut(backend).and_then(|servers| servers.get_mut(server)) {
            list.clear();
        }
    }

    pub(crate) fn put(&self, backend: &str, server: usize, conn: Box<dyn Idle>) {
        let mut idle = self.lock();
        if !idle.contains_key(backend) {
            idle.insert(backend.to_owned(), Vec::new());
        }
        let Some(servers) = idle.get_mut(backend) else { return };
        if servers.len() <= server {
            servers.resize_with(server + 1, Vec::new);
        }
        let list = &mut servers[server];
        list.retain(|(c, _)| !c.is_closed());
        if list.len() < MAX_IDLE_PER_SERVER {
            list.push((conn, Instant::now()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    #[derive(Debug)]
    struct Conn(u64, Arc<AtomicBool>);

    impl Idle for Conn {
        fn is_closed(&self) -> bool {
            self.1.load(Ordering::Relaxed)
        }
        fn addr_generation(&self) -> u64 {
            self.0
        }
    }

    #[test]
    fn takes_only_open_current_connections() {
        let pool = Pool::default();
        let closed = Arc::new(AtomicBool::new(false));
        pool.put("be", 1, Box::new(Conn(7, closed.clone())));
        pool.put("be", 1, Box::new(Conn(6, Arc::new(AtomicBool::new(false)))));
        assert_eq!(pool.idle("be", 1), 2);
        assert_eq!(pool.idle("be", 0), 0);
        // The newest first; one made to an older address is dropped on the way.
        let conn = pool.take::<Conn>("be", 1, Duration::from_secs(1), 7).expect("a connection");
        assert_eq!(conn.0, 7);
        assert_eq!(pool.idle("be", 1), 0);
        pool.put("be", 1, Box::new(conn));
        closed.store(true, Ordering::Relaxed);
        assert_eq!(pool.idle("be", 1), 0);
        assert!(pool.take::<Conn>("be", 1, Duration::from_secs(1), 7).is_none());
        pool.put("be", 1, Box::new(Conn(7, Arc::new(AtomicBool::new(false)))));
        assert!(pool.take::<Conn>("be", 1, Duration::ZERO, 7).is_none(), "idle too long");
        pool.put("be", 1, Box::new(Conn(7, Arc::new(AtomicBool::new(false)))));
        let conn = pool.take::<Conn>("be", 1, Duration::from_secs(1), 7).expect("a connection");
        assert_eq!(conn.0, 7);
        pool.put("be", 1, Box::new(Conn(7, Arc::new(AtomicBool::new(false)))));
        pool.forget("be", 1);
        assert_eq!(pool.idle("be", 1), 0);
    }
}
