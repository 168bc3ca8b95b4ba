use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::*;

/// A writer whose writes wait for the test to open the gate, and that says when one started.
struct Gated {
    entered: mpsc::Sender<()>,
    gate: mpsc::Receiver<()>,
    out: Arc<Mutex<Vec<u8>>>,
}

impl Write for Gated {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let _ = self.entered.send(());
        let _ = self.gate.recv();
        self.out.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_stalled_output_never_blocks_senders_and_drops_are_counted_and_reported() {
    let (entered_tx, entered) = mpsc::channel();
    let (open, gate) = mpsc::channel();
    let out = Arc::new(Mutex::new(Vec::new()));
    let (reports_tx, reports) = mpsc::channel();
    let report = move |t: Trouble<'_>| {
        if let Trouble::Dropped { lines, total } = t {
            let _ = reports_tx.send((lines, total));
        }
    };
    let writer =
        LineWriter::spawn("test", Gated { entered: entered_tx, gate, out: out.clone() }, 4, report).expect("thread");
    assert_eq!(writer.send(b"0\n"), Sent::Queued);
    entered.recv_timeout(Duration::from_secs(5)).expect("writer busy");
    // The thread is stuck in write: 4 lines queue, 16 are dropped, and nobody waits.
    let start = Instant::now();
    let sent: Vec<Sent> = (1..=20).map(|i| writer.send(format!("{i}\n").as_bytes())).collect();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(sent.iter().filter(|s| **s == Sent::Queued).count(), 4);
    assert_eq!(writer.dropped(), 16);
    drop(open); // unblock every write from now on
                // Reported by the thread once its write returns.
    assert_eq!(reports.recv_timeout(Duration::from_secs(5)), Ok((16, 16)));
    writer.close(); // waits (briefly) for the queue to be written
    assert_eq!(writer.send(b"late\n"), Sent::Closed);
    let out = String::from_utf8(out.lock().expect("lock").clone()).expect("UTF-8");
    assert_eq!(out, "0\n1\n2\n3\n4\n");
}

#[derive(Clone, Default)]
struct Shared(Arc<Mutex<Vec<u8>>>);

impl Write for Shared {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.lock().map_err(|_| io::Error::other("poisoned"))?.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn lines_from_many_threads_stay_whole_and_in_each_thread_s_order() {
    let out = Shared::default();
    let writer = Arc::new(LineWriter::spawn("test", out.clone(), 100_000, |_| {}).expect("thread"));
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let writer = writer.clone();
            std::thread::spawn(move || {
                for i in 0..1000 {
                    writer.send(format!("{t} {i}\n").as_bytes());
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    drop(writer);
    let text = String::from_utf8(out.0.lock().expect("lock").clone()).expect("UTF-8");
    assert_eq!(text.lines().count(), 4000);
    for t in 0..4 {
        let mine: Vec<usize> = text.lines().filter_map(|l| l.strip_prefix(&format!("{t} "))?.parse().ok()).collect();
        assert_eq!(mine, (0..1000).collect::<Vec<_>>());
    }
}

#[test]
fn failed_writes_are_reported_once_and_counted_as_dropped() {
    struct Broken;
    impl Write for Broken {
        fn write(&mut self, _: &[u8]) -> io::Result<usize> {
            Err(io::Error::from(io::ErrorKind::BrokenPipe))
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }
    let (tx, failures) = mpsc::channel();
    let writer = LineWriter::spawn("test", Broken, 100, move |t| {
        if let Trouble::Failing(e) = t {
            let _ = tx.send(e.kind());
        }
    })
    .expect("thread");
    for _ in 0..3 {
        writer.send(b"x\n");
        std::thread::sleep(BATCH_GATHER * 3);
    }
    writer.close();
    assert_eq!(failures.try_iter().collect::<Vec<_>>(), [io::ErrorKind::BrokenPipe]);
    assert_eq!(writer.dropped(), 3);
}
