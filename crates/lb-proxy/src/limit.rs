//! Connection limits the runtime API may change while connections hold their permits
//! (`set maxconn global`, `set maxconn frontend`), and pausing a frontend's accepts
//! (`disable frontend`).
//!
//! A limit is a semaphore with a permit per connection. Raising it adds permits at once;
//! lowering it takes free permits away at once and the rest as connections end, so no open
//! connection is cut and the new limit holds as soon as enough of them have closed.

use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

#[derive(Debug)]
pub(crate) struct Limit {
    permits: Arc<Semaphore>,
    max: Mutex<usize>,
}

impl Limit {
    pub(crate) fn new(max: usize) -> Limit {
        let max = max.min(Semaphore::MAX_PERMITS);
        Limit { permits: Arc::new(Semaphore::new(max)), max: Mutex::new(max) }
    }

    /// The limit as last set.
    pub(crate) fn max(&self) -> usize {
        *self.max.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// One connection's permit, once there is room.
    pub(crate) async fn acquire(&self) -> Option<OwnedSemaphorePermit> {
        self.permits.clone().acquire_owned().await.ok()
    }

    /// A new limit (at least 1).
    pub(crate) fn set(&self, new: usize) {
        let new = new.clamp(1, Semaphore::MAX_PERMITS);
        let mut max = self.max.lock().unwrap_or_else(PoisonError::into_inner);
        if new > *max {
            self.permits.add_permits(new - *max);
        } else if new < *max {
            let fewer = *max - new;
            let owed = fewer - self.permits.forget_permits(fewer);
            if owed > 0 {
                // The rest are held by open connections: take them as those end.
                let permits = self.permits.clone();
                let owed = u32::try_from(owed).unwrap_or(u32::MAX);
                tokio::spawn(async move {
                    if let Ok(taken) = permits.acquire_many_owned(owed).await {
                        taken.forget();
                    }
                });
            }
        }
        *max = new;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_limit_goes_up_at_once_and_down_as_connections_end() {
        let limit = Limit::new(2);
        let a = limit.acquire().await.expect("first");
        let b = limit.acquire().await.expect("second");
        limit.set(3);
        let c = limit.acquire().await.expect("room after raising");
        assert_eq!(limit.max(), 3);
        limit.set(1);
        assert_eq!(limit.max(), 1);
        drop((a, b));
        tokio::task::yield_now().await;
        // Two closed, two owed: still no room while c is open.
        let waiting = tokio::time::timeout(std::time::Duration::from_millis(50), limit.acquire()).await;
        assert!(waiting.is_err(), "at the lowered limit");
        drop(c);
        let d = tokio::time::timeout(std::time::Duration::from_secs(1), limit.acquire()).await;
        assert!(d.is_ok_and(|p| p.is_some()), "room for one once the three have ended");
    }
}
