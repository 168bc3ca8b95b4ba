//! What the driver and the streams of one hop connection share, behind one lock: every
//! stream's buffers and credits, the frames waiting to be written, the wakers.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use super::frame::{Frame, MAX_DATA};
use crate::Error;

/// What each end may send on a stream before the reader grants more: four DATA frames, so
/// that a 64 KiB response and its head cross without waiting for credit (with one frame's
/// worth, every such response waited for a WINDOW: 2 × the CPU of the hop per connection at
/// 64 KiB in bench-stack).
pub(crate) const INITIAL_WINDOW: u32 = 4 * MAX_DATA as u32;

/// Credit is given back once the reader has consumed this much: the sender always has at least
/// half a window, and a request-sized exchange needs no WINDOW frame at all.
pub(crate) const WINDOW_UPDATE_AT: u32 = INITIAL_WINDOW / 2;

/// Streams open at once on one connection past which the accepting side refuses new ones.
pub(crate) const MAX_STREAMS: usize = 1 << 20;

/// The connecting side (lb-tls) or the accepting side (lb-proxy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    Connecting,
    Accepting,
}

#[derive(Debug)]
pub(crate) struct Conn {
    inner: Mutex<Inner>,
}

impl Conn {
    pub(crate) fn new(side: Side) -> Arc<Conn> {
        let mut out = Vec::new();
        out.extend_from_slice(super::PREFACE);
        Arc::new(Conn {
            inner: Mutex::new(Inner {
                side,
                streams: HashMap::new(),
                out,
                driver: None,
                ended: None,
                next_id: 1,
                highest_id: 0,
                going_away: false,
                handle: true,
                incoming: VecDeque::new(),
                acceptor: None,
            }),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic while holding the lock leaves nothing half-done that matters more than
        // serving on: every update is a few field writes.
        self.inner.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

#[derive(Debug)]
pub(crate) struct Inner {
    pub(crate) side: Side,
    pub(crate) streams: HashMap<u32, Slot>,
    /// Frames waiting for the driver to write them, whole.
    pub(crate) out: Vec<u8>,
    pub(crate) driver: Option<Waker>,
    /// Why the connection ended; streams fail with it.
    pub(crate) ended: Option<String>,
    /// The connecting side's next stream id.
    pub(crate) next_id: u32,
    /// The accepting side's highest stream id opened (ids grow).
    pub(crate) highest_id: u32,
    /// GOAWAY sent (accepting side) or received (connecting side).
    pub(crate) going_away: bool,
    /// The [`HopClient`](super::HopClient) or [`Incoming`](super::Incoming) is alive.
    pub(crate) handle: bool,
    /// Streams opened by the peer, not yet accepted.
    pub(crate) incoming: VecDeque<(u32, Vec<u8>)>,
    pub(crate) acceptor: Option<Waker>,
}

/// One stream's state.
#[derive(Debug)]
pub(crate) struct Slot {
    /// Received bytes not yet read (no allocation while none wait).
    pub(crate) recv: Vec<u8>,
    pub(crate) recv_at: usize,
    /// What the peer may still send.
    pub(crate) recv_window: u32,
    /// Read since credit was last given back.
    pub(crate) unacked: u32,
    pub(crate) recv_shut: bool,
    /// What we may still send.
    pub(crate) send_credit: u32,
    pub(crate) sent_shut: bool,
    /// The peer reset the stream.
    pub(crate) reset: bool,
    /// Its [`HopStream`](super::HopStream) is gone; kept until the peer ends its side.
    pub(crate) orphan: bool,
    pub(crate) reader: Option<Waker>,
    pub(crate) writer: Option<Waker>,
}

impl Slot {
    pub(crate) fn new() -> Slot {
        Slot {
            recv: Vec::new(),
            recv_at: 0,
            recv_window: INITIAL_WINDOW,
            unacked: 0,
            recv_shut: false,
            send_credit: INITIAL_WINDOW,
            sent_shut: false,
            reset: false,
            orphan: false,
            reader: None,
            writer: None,
        }
    }

    pub(crate) fn unread(&self) -> usize {
        self.recv.len() - self.recv_at
    }

    fn wake(&mut self) {
        if let Some(w) = self.reader.take() {
            w.wake();
        }
        if let Some(w) = self.writer.take() {
            w.wake();
        }
    }
}

impl Inner {
    /// Queue `frame` and wake the driver.
    pub(crate) fn send(&mut self, frame: Frame<'_>) {
        frame.encode(&mut self.out);
        self.wake_driver();
    }

    pub(crate) fn wake_driver(&mut self) {
        if let Some(w) = self.driver.take() {
            w.wake();
        }
    }

    /// The error a stream's read or write returns once the connection has ended.
    pub(crate) fn ended_error(&self) -> Option<io::Error> {
        self.ended.as_ref().map(|why| io::Error::new(io::ErrorKind::ConnectionAborted, format!("hop connection {why}")))
    }

    /// The connection is over (`why`): every stream and the acceptor learn it.
    pub(crate) fn end(&mut self, why: String) {
        if self.ended.is_none() {
            self.ended = Some(why);
        }
        for slot in self.streams.values_mut() {
            slot.wake();
        }
        self.streams.retain(|_, slot| !slot.orphan);
        self.incoming.clear();
        if let Some(w) = self.acceptor.take() {
            w.wake();
        }
    }

    /// One frame from the peer.
    pub(crate) fn receive(&mut self, frame: Frame<'_>) -> Result<(), Error> {
        match frame {
            Frame::Open { stream, header } => self.open_from_peer(stream, header),
            Frame::Data { stream, bytes } => {
                let Some(slot) = self.known(stream)? else {
                    return Ok(());
                };
                if slot.recv_shut {
                    return Err(Error::HopDataAfterShut(stream));
                }
                if bytes.len() > slot.recv_window as usize {
                    return Err(Error::HopFlowControl { stream, len: bytes.len(), window: slot.recv_window });
                }
                slot.recv_window -= bytes.len() as u32;
                if slot.orphan {
                    // Nobody reads it any more: as a closed socket answers late data.
                    self.streams.remove(&stream);
                    self.send(Frame::Reset { stream });
                    return Ok(());
                }
                // (A drained buffer was given back by the reader: `recv_at` is 0 here or bytes wait.)
                slot.recv.extend_from_slice(bytes);
                if let Some(w) = slot.reader.take() {
                    w.wake();
                }
                Ok(())
            }
            Frame::Shut { stream } => {
                let Some(slot) = self.known(stream)? else {
                    return Ok(());
                };
                slot.recv_shut = true;
                if slot.orphan && slot.sent_shut {
                    self.streams.remove(&stream);
                } else if let Some(w) = slot.reader.take() {
                    w.wake();
                }
                Ok(())
            }
            Frame::Reset { stream } => {
                let Some(slot) = self.known(stream)? else {
                    return Ok(());
                };
                slot.reset = true;
                slot.wake();
                let orphan = slot.orphan;
                let waiting = self.incoming.iter().position(|(id, _)| *id == stream);
                if orphan || waiting.is_some() {
                    // Nobody holds it: not accepted yet, or its handle is gone.
                    self.streams.remove(&stream);
                }
                if let Some(at) = waiting {
                    self.incoming.remove(at);
                }
                Ok(())
            }
            Frame::Window { stream, credit } => {
                let Some(slot) = self.known(stream)? else {
                    return Ok(());
                };
                slot.send_credit = slot
                    .send_credit
                    .checked_add(credit)
                    .filter(|c| *c <= 2 * INITIAL_WINDOW)
                    .ok_or(Error::HopCreditOverflow { stream, credit })?;
                if let Some(w) = slot.writer.take() {
                    w.wake();
                }
                Ok(())
            }
            Frame::GoAway => match self.side {
                Side::Accepting => Err(Error::HopWrongSide("GOAWAY")),
                Side::Connecting => {
                    self.going_away = true;
                    self.wake_driver();
                    Ok(())
                }
            },
        }
    }

    /// The stream a frame is for: `None` for one that has ended here (the frame crossed our
    /// RESET or close); an error for one never opened.
    fn known(&mut self, stream: u32) -> Result<Option<&mut Slot>, Error> {
        let opened = match self.side {
            Side::Connecting => stream < self.next_id,
            Side::Accepting => stream <= self.highest_id,
        };
        if !opened {
            return Err(Error::HopUnknownStream(stream));
        }
        Ok(self.streams.get_mut(&stream))
    }

    fn open_from_peer(&mut self, stream: u32, header: &[u8]) -> Result<(), Error> {
        if self.side == Side::Connecting {
            return Err(Error::HopWrongSide("OPEN"));
        }
        if stream <= self.highest_id {
            return Err(Error::HopStreamReused { stream, highest: self.highest_id });
        }
        self.highest_id = stream;
        if !self.handle || self.streams.len() >= MAX_STREAMS {
            self.send(Frame::Reset { stream });
            return Ok(());
        }
        self.streams.insert(stream, Slot::new());
        self.incoming.push_back((stream, header.to_vec()));
        if let Some(w) = self.acceptor.take() {
            w.wake();
        }
        Ok(())
    }

    /// The stream's handle is gone: as a socket closed, a clean end (SHUT) when every byte
    /// received was read, else a RESET; the state stays until the peer has ended its side.
    pub(crate) fn release(&mut self, stream: u32) {
        let Some(slot) = self.streams.get_mut(&stream) else {
            return;
        };
        if self.ended.is_some() || slot.reset {
            self.streams.remove(&stream);
            return;
        }
        if slot.unread() > 0 {
            self.streams.remove(&stream);
            self.send(Frame::Reset { stream });
            return;
        }
        let shut = !slot.sent_shut;
        slot.sent_shut = true;
        slot.orphan = true;
        slot.recv = Vec::new();
        slot.reader = None;
        slot.writer = None;
        if slot.recv_shut {
            self.streams.remove(&stream);
        }
        if shut {
            self.send(Frame::Shut { stream });
        } else {
            // The driver may be waiting for the last stream to end.
            self.wake_driver();
        }
    }

    /// Streams still open (for the driver's end).
    pub(crate) fn idle(&self) -> bool {
        self.streams.is_empty() && self.incoming.is_empty()
    }
}
