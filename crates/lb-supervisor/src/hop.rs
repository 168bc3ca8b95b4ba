//! The multiplexed hop between lb-tls and lb-proxy: one connection between a pair of workers
//! carries every client connection as a stream (docs/architecture.md, "The hop between lb-tls
//! and lb-proxy").
//!
//! Both ends write [`PREFACE`] first, then frames ([`Frame`]): OPEN (a new stream, with the
//! PROXY v2 header lb-tls would have written on a connection of its own), DATA, SHUT (no more
//! data this way: half-close), RESET (abandon the stream), WINDOW (credit) and GOAWAY (from the
//! accepting side: no new streams here). Each end may send at most 256 KiB on a stream before
//! the reader gives credit back, so a stream whose reader is slow stops only its own writer.
//!
//! [`connect`] makes the connecting side ([`HopClient`], which opens streams) and [`accept`] the
//! accepting side ([`Incoming`], which yields them), each with the [`Driver`] that does the
//! connection's I/O and must be spawned. A [`HopStream`] is a socket to the code that uses it
//! (tokio's `AsyncRead` and `AsyncWrite`, `poll_shutdown` a half-close). The stream's bytes
//! wait in the connection's queue until its driver writes all that is queued in one write.
//!
//! # Layout
//! - `frame`: the frames, encoded and decoded, no I/O.
//! - `state`: what the driver and the streams share: buffers, credits, wakers.
//! - `driver`: the connection's I/O task.
//! - `stream`: [`HopStream`].

use std::future::poll_fn;
use std::sync::Arc;
use std::task::Poll;

mod driver;
mod frame;
mod state;
mod stream;

#[cfg(test)]
mod tests;

pub use driver::Driver;
pub use frame::{Frame, Kind, HEADER_LEN, MAX_DATA, MAX_PAYLOAD, PREFACE};
pub use stream::HopStream;

use crate::Error;
use state::{Conn, Side};

/// The connecting side (lb-tls): `io` is a fresh connection to the accepting side.
pub fn connect<IO>(io: IO) -> (HopClient, Driver<IO>) {
    let conn = Conn::new(Side::Connecting);
    (HopClient { conn: conn.clone() }, Driver::new(conn, io))
}

/// The accepting side (lb-proxy), on a connection whose first bytes, [`PREFACE`], the caller
/// has already read (to tell it from a connection with a PROXY header).
pub fn accept<IO>(io: IO) -> (Incoming, Driver<IO>) {
    let conn = Conn::new(Side::Accepting);
    (Incoming { conn: conn.clone() }, Driver::new(conn, io))
}

/// Opens streams on one hop connection.
#[derive(Debug)]
pub struct HopClient {
    conn: Arc<Conn>,
}

impl HopClient {
    /// A new stream, announced with `proxy_header` (the peer's facts of the client
    /// connection). Its bytes may be written at once: no round trip.
    pub fn open(&self, proxy_header: &[u8]) -> Result<HopStream, Error> {
        let mut inner = self.conn.lock();
        if inner.ended.is_some() {
            return Err(Error::HopRefused("it has ended"));
        }
        if inner.going_away {
            return Err(Error::HopRefused("the peer sent GOAWAY"));
        }
        let id = inner.next_id;
        let Some(next) = id.checked_add(1) else {
            inner.going_away = true;
            return Err(Error::HopRefused("its stream ids are used up"));
        };
        inner.next_id = next;
        inner.streams.insert(id, state::Slot::new());
        inner.send(Frame::Open { stream: id, header: proxy_header });
        drop(inner);
        Ok(HopStream::new(self.conn.clone(), id))
    }

    /// Whether new streams may be opened: the connection has not ended and the peer did not
    /// send GOAWAY. When not, open a new connection for new streams; this one's finish.
    #[cfg(test)]
    pub(crate) fn is_open(&self) -> bool {
        let inner = self.conn.lock();
        inner.ended.is_none() && !inner.going_away
    }
}

impl Drop for HopClient {
    fn drop(&mut self) {
        let mut inner = self.conn.lock();
        inner.handle = false;
        // Once its streams have ended, the driver closes the connection.
        inner.wake_driver();
    }
}

/// The streams the connecting side opens on one hop connection.
#[derive(Debug)]
pub struct Incoming {
    conn: Arc<Conn>,
}

impl Incoming {
    /// The next stream and its PROXY header; `None` once the connection has ended.
    pub async fn accept(&mut self) -> Option<(HopStream, Vec<u8>)> {
        poll_fn(|cx| {
            let mut inner = self.conn.lock();
            if let Some((id, header)) = inner.incoming.pop_front() {
                return Poll::Ready(Some((HopStream::new(self.conn.clone(), id), header)));
            }
            if inner.ended.is_some() {
                return Poll::Ready(None);
            }
            inner.acceptor = Some(cx.waker().clone());
            Poll::Pending
        })
        .await
    }

    /// Tell the connecting side to open no new streams here (this worker drains); the open
    /// ones go on. Once at most.
    pub fn go_away(&self) {
        let mut inner = self.conn.lock();
        if !inner.going_away && inner.ended.is_none() {
            inner.going_away = true;
            inner.send(Frame::GoAway);
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        let mut inner = self.conn.lock();
        inner.handle = false;
        // Opened and never accepted: refused.
        while let Some((stream, _)) = inner.incoming.pop_front() {
            inner.streams.remove(&stream);
            inner.send(Frame::Reset { stream });
        }
    }
}

/// For the fuzzer (`fuzz/`, target `hop_frames`): `bytes` as a peer's frames, decoded one after
/// another and each handed to the accepting side's state (as its driver does, without I/O),
/// until the first error. Returns how many frames were taken.
///
/// # Panics
/// When a decoded frame does not encode back to exactly the bytes it came from: the bug the
/// fuzzer looks for. Never on malformed input as such.
#[doc(hidden)]
pub fn fuzz_frames(bytes: &[u8]) -> usize {
    let conn = Conn::new(Side::Accepting);
    let mut inner = conn.lock();
    let mut rest = bytes;
    let mut taken = 0;
    while let Ok(Some((frame, used))) = Frame::decode(rest) {
        let mut again = Vec::new();
        frame.encode(&mut again);
        assert_eq!(again, rest[..used], "{frame:?} decoded from {:?}", &rest[..used]);
        if inner.receive(frame).is_err() {
            break;
        }
        rest = &rest[used..];
        taken += 1;
    }
    taken
}
