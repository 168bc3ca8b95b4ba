//! Writing lines without ever blocking the writer's callers: [`LineWriter`], and the master's
//! stderr, which goes through one.
//!
//! A log's reader can stall (a full pipe nobody reads, journald or a syslog daemon under load, a
//! terminal on Ctrl-S). A process that writes its log inline then stalls with it: a master
//! blocked in write(2) answers no reload and reaps no worker, and a worker blocked there serves
//! nobody. So lines are appended to a batch that one thread takes whole, writes and flushes; a
//! batch that is full drops further lines and counts them, and the writer thread reports the
//! count, at most once per [`REPORT_EVERY`].
//!
//! Used by lb-proxy's access log on stdout and by every master's own log (tracing and relayed
//! worker lines) on stderr. Workers write their stderr inline: the master reads it at once and
//! hands it to its own writer, so it never fills.

use std::io::{self, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often, at most, dropped lines are reported.
pub(crate) const REPORT_EVERY: Duration = Duration::from_secs(10);
/// After writing a batch, the thread lets lines gather this long before it looks again. While it
/// sleeps, senders only append: no futex wake-up and no context switch per line (under load a
/// wake-up per line cost lb-proxy as much CPU as rendering its log line), and a busy writer makes
/// ~100 writes a second instead of one per line. A line waits at most this long.
const BATCH_GATHER: Duration = Duration::from_millis(10);
/// How long closing waits for the thread to write what is queued: an output that never drains
/// must not hold up the exit.
const FINAL_FLUSH_WAIT: Duration = Duration::from_secs(2);
/// Lines the master's stderr batch holds at most.
const STDERR_LINES: usize = 10_000;

/// What the writer thread reports to the owner's callback.
#[derive(Debug)]
pub enum Trouble<'a> {
    /// Lines dropped since the last report (a full batch or a failed write), and in all.
    Dropped { lines: u64, total: u64 },
    /// A write failed after the previous one had succeeded (reported once per run of failures).
    Failing(&'a io::Error),
}

/// What became of a line handed to [`LineWriter::send`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    Queued,
    /// The batch was full: counted, reported later.
    Dropped,
    /// The writer was closed: the caller may write the line itself.
    Closed,
}

/// A batch of lines and the thread that writes it. Cheap to share by reference across threads;
/// dropping it (or [`close`](Self::close)) writes what is queued.
#[derive(Debug)]
pub struct LineWriter {
    shared: Arc<Shared>,
    /// Signalled by the thread once everything appended is written. (A `Mutex` only because
    /// `Receiver` is not `Sync`.)
    done: Mutex<Option<Receiver<()>>>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

/// What the senders and the writer thread share.
#[derive(Debug)]
struct Shared {
    batch: Mutex<Batch>,
    /// The thread waits here while there is nothing to write.
    wake: Condvar,
    /// Lines a batch holds at most; more are dropped until the thread takes it.
    max_lines: usize,
    /// Dropped and not yet reported; dropped in all.
    pending: AtomicU64,
    total: AtomicU64,
}

#[derive(Debug, Default)]
struct Batch {
    bytes: Vec<u8>,
    lines: usize,
    /// The thread is waiting on `wake`: the next line must wake it (and only then is there a
    /// futex call on the sender's side: once per batch, not per line).
    writer_waiting: bool,
    /// Closed: write what is left and stop.
    closed: bool,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Batch> {
        self.batch.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn note_dropped(&self, lines: u64) {
        self.pending.fetch_add(lines, Ordering::Relaxed);
        self.total.fetch_add(lines, Ordering::Relaxed);
    }
}

impl LineWriter {
    /// Starts the thread (named `thread`) that writes to `out`, batches of at most `max_lines`.
    /// `report` runs on that thread.
    pub fn spawn<W, R>(thread: &str, out: W, max_lines: usize, report: R) -> io::Result<LineWriter>
    where
        W: Write + Send + 'static,
        R: Fn(Trouble<'_>) + Send + 'static,
    {
        let shared = Arc::new(Shared {
            batch: Mutex::new(Batch::default()),
            wake: Condvar::new(),
            max_lines: max_lines.max(1),
            pending: AtomicU64::new(0),
            total: AtomicU64::new(0),
        });
        let (done_tx, done) = mpsc::sync_channel::<()>(1);
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new().name(thread.to_owned()).spawn(move || {
            write_batches(out, &writer_shared, &report);
            let _ = done_tx.send(());
        })?;
        Ok(LineWriter { shared, done: Mutex::new(Some(done)), writer: Mutex::new(Some(writer)) })
    }

    /// Appends `line` (which carries its own newline) to the batch; never waits for the output.
    pub fn send(&self, line: &[u8]) -> Sent {
        let mut batch = self.shared.lock();
        if batch.closed {
            return Sent::Closed;
        }
        if batch.lines >= self.shared.max_lines {
            drop(batch);
            self.shared.note_dropped(1);
            return Sent::Dropped;
        }
        batch.bytes.extend_from_slice(line);
        batch.lines += 1;
        if batch.writer_waiting {
            batch.writer_waiting = false;
            drop(batch);
            self.shared.wake.notify_one();
        }
        Sent::Queued
    }

    /// Lines dropped since the start.
    pub fn dropped(&self) -> u64 {
        self.shared.total.load(Ordering::Relaxed)
    }

    /// Lets the thread write what is queued and stop, waiting for it (for a short while).
    /// Later lines are refused with [`Sent::Closed`].
    pub fn close(&self) {
        self.shared.lock().closed = true;
        self.shared.wake.notify_one();
        let done = self.done.lock().unwrap_or_else(PoisonError::into_inner).take();
        if done.is_some_and(|done| done.recv_timeout(FINAL_FLUSH_WAIT).is_ok()) {
            if let Some(writer) = self.writer.lock().unwrap_or_else(PoisonError::into_inner).take() {
                let _ = writer.join();
            }
        }
    }
}

impl Drop for LineWriter {
    fn drop(&mut self) {
        self.close();
    }
}

/// The thread: waits for a first line, takes the whole batch (leaving an empty buffer in its
/// place, so that no line is copied twice and no buffer allocated per batch), writes it in one go
/// and flushes; then, unless the batch was half full, gives the next one [`BATCH_GATHER`] to
/// fill before looking again. Returns once closed and everything appended is written.
fn write_batches<W: Write>(mut out: W, shared: &Shared, report: &dyn Fn(Trouble<'_>)) {
    let mut spare = Vec::with_capacity(64 * 1024);
    let mut failing = false;
    let mut last_report: Option<Instant> = None;
    loop {
        let mut batch = shared.lock();
        while batch.lines == 0 && !batch.closed {
            batch.writer_waiting = true;
            batch = match shared.wake.wait_timeout(batch, REPORT_EVERY) {
                Ok((batch, _)) => batch,
                Err(poisoned) => poisoned.into_inner().0,
            };
            batch.writer_waiting = false;
            report_if_due(shared, report, &mut last_report);
        }
        if batch.lines == 0 {
            return; // closed, and all written
        }
        let lines = std::mem::take(&mut batch.lines);
        std::mem::swap(&mut batch.bytes, &mut spare);
        drop(batch);
        match out.write_all(&spare).and_then(|()| out.flush()) {
            Ok(()) => failing = false,
            Err(e) => {
                if !failing {
                    report(Trouble::Failing(&e));
                    failing = true;
                }
                shared.note_dropped(lines as u64);
            }
        }
        spare.clear();
        report_if_due(shared, report, &mut last_report);
        // A batch half full or more: lines come faster than one gathering time allows; look
        // again at once rather than let the next batch overflow.
        if lines < shared.max_lines / 2 {
            std::thread::sleep(BATCH_GATHER);
        }
    }
}

/// Reports the drops not yet reported, unless a report went out less than [`REPORT_EVERY`] ago.
fn report_if_due(shared: &Shared, report: &dyn Fn(Trouble<'_>), last: &mut Option<Instant>) {
    if shared.pending.load(Ordering::Relaxed) == 0 {
        return;
    }
    let now = Instant::now();
    if last.is_some_and(|t| now.duration_since(t) < REPORT_EVERY) {
        return;
    }
    let lines = shared.pending.swap(0, Ordering::Relaxed);
    *last = Some(now);
    report(Trouble::Dropped { lines, total: shared.total.load(Ordering::Relaxed) });
}

/// The master's stderr, once [`use_for_stderr`] has run.
static STDERR: OnceLock<LineWriter> = OnceLock::new();

/// From now on, this process's log lines ([`say`](crate::daemon::say) and tracing's, through
/// [`StderrLines`]) go to stderr through a [`LineWriter`]. Called by the master only.
pub(crate) fn use_for_stderr(name: &'static str) {
    let writer = LineWriter::spawn("stderr", io::stderr(), STDERR_LINES, move |trouble| {
        // On the writer thread, which alone writes stderr: this may block, nobody waits for it.
        if let Trouble::Dropped { lines, total } = trouble {
            let _ = writeln!(
                io::stderr().lock(),
                "{name}: {lines} log lines dropped ({total} in all): stderr is not keeping up"
            );
        }
    });
    if let Ok(writer) = writer {
        let _ = STDERR.set(writer);
    }
}

/// Writes what the master's stderr has queued, before the process exits.
pub(crate) fn finish_stderr() {
    if let Some(writer) = STDERR.get() {
        writer.close();
    }
}

/// Writes one log line (with its newline) to stderr: queued in the master, inline elsewhere.
/// Failures are ignored: a process whose stderr is gone (a closed pipe) keeps serving.
pub(crate) fn write_stderr(line: &[u8]) {
    if STDERR.get().is_some_and(|w| w.send(line) != Sent::Closed) {
        return;
    }
    let _ = io::stderr().lock().write_all(line);
}

/// tracing's writer: each event, formatted whole, is one [`write_stderr`].
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct StderrLines;

impl Write for StderrLines {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        write_stderr(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
