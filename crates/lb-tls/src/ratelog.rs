//! Failure lines at a bounded rate: a scan or a broken client fleet can fail thousands of
//! handshakes a second, and the log must stay readable and cheap. Within each second the first
//! `per_second` lines are written; the rest are counted and summed up in one line when the next
//! second's first line comes.

use std::sync::Mutex;
use std::time::Instant;

#[derive(Debug)]
pub(crate) struct RateLimited {
    per_second: u32,
    state: Mutex<Window>,
}

#[derive(Debug)]
struct Window {
    started: Instant,
    written: u32,
    suppressed: u64,
}

impl RateLimited {
    pub(crate) fn new(per_second: u32) -> Self {
        RateLimited { per_second, state: Mutex::new(Window { started: Instant::now(), written: 0, suppressed: 0 }) }
    }

    /// Writes the line `make` returns (as a warning) if this second's budget allows.
    pub(crate) fn warn(&self, what: &str, make: impl FnOnce() -> String) {
        let mut w = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if w.started.elapsed().as_secs() >= 1 {
            if w.suppressed > 0 {
                tracing::warn!("{} more {what} not logged in the last second (global.log_rate)", w.suppressed);
            }
            *w = Window { started: Instant::now(), written: 0, suppressed: 0 };
        }
        if w.written < self.per_second {
            w.written += 1;
            drop(w);
            tracing::warn!("{}", make());
        } else {
            w.suppressed += 1;
        }
    }
}
