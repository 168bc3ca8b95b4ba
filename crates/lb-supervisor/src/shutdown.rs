//! Telling every task of a serving process to stop: first softly (drain), then at once.
//!
//! A soft stop is what an old worker does after a reload: stop accepting, finish what is in
//! flight, close idle keep-alive connections without racing a request, stop health checks, and
//! return once the last connection has ended. A hard stop ends everything now.

use tokio::sync::watch;

/// How far a stop has gone. Ordered: a later phase implies the earlier ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Running,
    /// Stop accepting; finish in-flight requests (answered with `Connection: close`); close
    /// idle connections; stop background tasks.
    Draining,
    /// Close everything now.
    Stopped,
}

/// The sending side, kept by whoever decides when to stop (main, the supervisor, tests).
#[derive(Debug)]
pub struct ShutdownHandle {
    tx: watch::Sender<Phase>,
}

/// The receiving side, cloned into every task that must react to a stop.
#[derive(Debug, Clone)]
pub struct Shutdown {
    rx: watch::Receiver<Phase>,
}

/// A new pair in the `Running` phase.
pub fn channel() -> (ShutdownHandle, Shutdown) {
    let (tx, rx) = watch::channel(Phase::Running);
    (ShutdownHandle { tx }, Shutdown { rx })
}

impl ShutdownHandle {
    /// Begin a soft stop (drain).
    pub fn drain(&self) {
        self.advance(Phase::Draining);
    }

    /// Stop everything now.
    pub fn stop(&self) {
        self.advance(Phase::Stopped);
    }

    fn advance(&self, to: Phase) {
        self.tx.send_if_modified(|p| {
            let later = to > *p;
            if later {
                *p = to;
            }
            later
        });
    }

    /// A receiver for tasks started after this point.
    pub fn subscribe(&self) -> Shutdown {
        Shutdown { rx: self.tx.subscribe() }
    }
}

impl Shutdown {
    pub fn phase(&self) -> Phase {
        *self.rx.borrow()
    }

    pub fn is_draining(&self) -> bool {
        self.phase() >= Phase::Draining
    }

    /// Resolves once the phase is `at_least` or later, or the handle is gone (taken as a stop).
    pub async fn reached(&mut self, at_least: Phase) {
        // An error means every handle is dropped: nobody can ever resume us, so stop.
        let _ = self.rx.wait_for(|p| *p >= at_least).await;
    }

    /// Resolves when draining begins.
    pub async fn draining(&mut self) {
        self.reached(Phase::Draining).await;
    }

    /// Resolves when a hard stop is asked.
    pub async fn stopped(&mut self) {
        self.reached(Phase::Stopped).await;
    }
}

/// How a worker's serving ends, the same for every daemon: once every accept loop has returned
/// (they return when the drain starts), no new connection is tracked; the task this returns
/// ends when the last tracked connection has, or at once on a hard stop.
pub fn finish_when_drained(
    accept_loops: Vec<tokio::task::JoinHandle<()>>,
    connections: tokio_util::task::TaskTracker,
    mut shutdown: Shutdown,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        for accept in accept_loops {
            let _ = accept.await;
        }
        connections.close();
        tokio::select! {
            _ = connections.wait() => {}
            _ = shutdown.stopped() => {}
        }
    })
}
