//! A future that waits beside a connection's work and is polled again only once it has been
//! woken.
//!
//! A connection's task races its work against waits that rarely end (the drain, a hard stop).
//! Whatever wakes the task, `select!` polls every branch, and a pending wait on a watch channel
//! takes its lock, looks at the value and re-registers with the channel's `Notify` each time: a
//! few hundred instructions per wake-up, several wake-ups per request. [`Quiet`] gives the wait
//! a waker of its own, which marks it woken before waking the task; until then, polling it
//! costs an uncontended lock (to keep the task's waker current) and an atomic swap.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};

pin_project_lite::pin_project! {
    /// `F`, polled only on its first poll and after its own wake-ups.
    pub struct Quiet<F> {
        #[pin]
        inner: F,
        flag: Arc<Flag>,
        waker: Waker,
    }
}

impl<F> std::fmt::Debug for Quiet<F> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Quiet").field("woken", &self.flag.woken.load(Ordering::Relaxed)).finish_non_exhaustive()
    }
}

/// What the inner future's waker carries: whether it fired, and the task to wake.
#[derive(Debug)]
struct Flag {
    woken: AtomicBool,
    task: Mutex<Option<Waker>>,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        let task = self.task.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let Some(task) = task {
            task.wake();
        }
    }
}

impl<F: Future> Quiet<F> {
    pub fn new(inner: F) -> Self {
        let flag = Arc::new(Flag { woken: AtomicBool::new(true), task: Mutex::new(None) });
        Quiet { inner, waker: Waker::from(flag.clone()), flag }
    }
}

impl<F: Future> Future for Quiet<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        {
            let mut task = this.flag.task.lock().unwrap_or_else(|e| e.into_inner());
            if !task.as_ref().is_some_and(|t| t.will_wake(cx.waker())) {
                *task = Some(cx.waker().clone());
            }
        }
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.poll(&mut Context::from_waker(this.waker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its polls; ready once `ready` is set, waking whoever polled it last when set.
    struct Probe {
        polls: Arc<AtomicUsize>,
        ready: Arc<AtomicBool>,
    }

    impl Future for Probe {
        type Output = ();
        fn poll(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::Relaxed);
            if self.ready.load(Ordering::Relaxed) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        }
    }

    #[tokio::test]
    async fn polled_only_after_its_own_wake_up() {
        let polls = Arc::new(AtomicUsize::new(0));
        let ready = Arc::new(AtomicBool::new(false));
        let mut quiet = Box::pin(Quiet::new(Probe { polls: polls.clone(), ready: ready.clone() }));
        let (task_wakes, task) = counting_waker();
        let mut cx = Context::from_waker(&task);
        for _ in 0..3 {
            assert!(quiet.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(polls.load(Ordering::Relaxed), 1, "only the first poll reaches it");
        ready.store(true, Ordering::Relaxed);
        quiet.waker.wake_by_ref();
        assert_eq!(task_wakes.0.load(Ordering::Relaxed), 1, "its wake-up wakes the task");
        assert!(quiet.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::Relaxed), 2);
    }

    #[tokio::test]
    async fn a_shutdown_wait_ends_when_the_drain_begins() {
        let (handle, mut shutdown) = crate::shutdown_channel();
        let waiting = tokio::spawn(async move { Quiet::new(async move { shutdown.draining().await }).await });
        tokio::task::yield_now().await;
        handle.drain();
        tokio::time::timeout(std::time::Duration::from_secs(5), waiting)
            .await
            .expect("the wait ended")
            .expect("the task ran");
    }

    struct CountingWake(AtomicUsize);

    impl Wake for CountingWake {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    fn counting_waker() -> (Arc<CountingWake>, Waker) {
        let counter = Arc::new(CountingWake(AtomicUsize::new(0)));
        (counter.clone(), Waker::from(counter))
    }
}
