//! Framed JSON messages with file descriptors, between the master and one worker, over the
//! private Unix stream socket (a socketpair) that connects them.
//!
//! A frame is a 4-byte big-endian payload length, a 2-byte big-endian fd count, then the JSON
//! payload. The frame's fds travel (`SCM_RIGHTS`) with its first bytes. A stream socket delivers
//! ancillary data in order with the bytes it came with, so the receiver keeps every fd it gets in
//! a FIFO and, for each complete frame, takes the count the header announces from its front.
//!
//! Limits: a payload of at most [`MAX_PAYLOAD`] bytes and at most [`MAX_FDS_PER_MESSAGE`] fds a
//! frame. A frame that breaks them, or whose fds did not arrive, is an `InvalidData` error that
//! stays: the stream is out of sync, and every later `recv` reports it again. A well-formed frame
//! whose JSON does not decode (a message from a newer binary, say) is an `InvalidData` error for
//! that frame only: it is consumed with its fds (closed) and the next `recv` goes on.

use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::Serialize;
use socket2::{Domain, Socket, Type};
use tokio::io::Interest;
use tokio::net::UnixStream;
use tokio::sync::Mutex;

use crate::fdpass::{self, MAX_FDS_PER_MESSAGE};

/// The largest payload a frame may carry. Generous: the largest messages are a worker's
/// counters for its successor (lb-proxy's limit tables: a million entries take about 20 MiB),
/// a batch of listening addresses or a runtime command's output.
pub(crate) const MAX_PAYLOAD: usize = 64 << 20;

/// Payload length (u32, big-endian), then fd count (u16, big-endian).
pub(crate) const HEADER_LEN: usize = 6;

/// How much one read asks for. Messages are small; a big one just takes several reads.
const READ_CHUNK: usize = 16 << 10;

/// A receive buffer grown past this by a big frame is given back once it empties.
const KEEP_BUFFER: usize = 1 << 20;

/// Both ends of a channel, before they go to different tasks.
#[derive(Debug)]
pub(crate) struct Channel {
    stream: UnixStream,
}

impl Channel {
    pub(crate) fn new(stream: UnixStream) -> Self {
        Channel { stream }
    }

    /// The worker's end, inherited across exec under the number in `LB_SUPERVISOR_FD`.
    ///
    /// Checked to be a Unix stream socket (a wrong number would otherwise fail obscurely
    /// later), made non-blocking for tokio, and close-on-exec so that the worker's own children
    /// never inherit it. Must be called inside a tokio runtime.
    pub(crate) fn from_inherited_fd(fd: OwnedFd) -> io::Result<Self> {
        let socket = Socket::from(fd);
        // getsockname and SO_TYPE, both portable (SO_DOMAIN is not available on illumos).
        let unix = socket.local_addr().map(|a| a.domain() == Domain::UNIX).unwrap_or(false);
        if !unix || socket.r#type()? != Type::STREAM {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "the inherited fd is not a Unix stream socket"));
        }
        socket.set_nonblocking(true)?;
        socket.set_cloexec(true)?;
        let stream = std::os::unix::net::UnixStream::from(OwnedFd::from(socket));
        Ok(Channel { stream: UnixStream::from_std(stream)? })
    }

    pub(crate) fn split(self) -> (ChannelSender, ChannelReceiver) {
        let stream = Arc::new(self.stream);
        let sender = ChannelSender {
            inner: Arc::new(SenderInner { stream: Arc::clone(&stream), state: Mutex::new(WriteState::default()) }),
        };
        let receiver = ChannelReceiver { stream, buf: Vec::new(), fds: VecDeque::new(), eof: false };
        (sender, receiver)
    }
}

/// The sending half; clones share it, and frames from concurrent senders never interleave.
#[derive(Debug, Clone)]
pub(crate) struct ChannelSender {
    inner: Arc<SenderInner>,
}

#[derive(Debug)]
struct SenderInner {
    stream: Arc<UnixStream>,
    /// Held for a whole frame, so frames go out one at a time.
    state: Mutex<WriteState>,
}

#[derive(Debug, Default)]
struct WriteState {
    /// A frame was left half written (its `send` was cancelled, or failed part way): the peer
    /// would read the next frame's bytes as the rest of it, so nothing more may be sent.
    torn: bool,
}

impl ChannelSender {
    /// Send one message with `fds` attached (at most [`MAX_FDS_PER_MESSAGE`]); the peer gets
    /// its own copies, ours stay open.
    ///
    /// Not cancel-safe: dropping the future after part of the frame went out leaves the channel
    /// unusable (later sends fail with `BrokenPipe`) rather than corrupting the stream.
    pub(crate) async fn send<T: Serialize>(&self, msg: &T, fds: &[BorrowedFd<'_>]) -> io::Result<()> {
        let frame = encode(msg, fds.len())?;
        let mut state = self.inner.state.lock().await;
        if state.torn {
            return Err(io::Error::new(
                io::ErrorKind::BrokenPipe,
                "channel out of sync: an earlier message was left half sent",
            ));
        }
        let stream = &self.inner.stream;
        let mut written = 0;
        while let Some(rest) = frame.get(written..).filter(|rest| !rest.is_empty()) {
            // The fds go with the frame's first bytes, and only with them.
            let attach = if written == 0 { fds } else { &[] };
            stream.writable().await?;
            match stream.try_io(Interest::WRITABLE, || fdpass::send(stream.as_fd(), rest, attach)) {
                Ok(n) => {
                    written += n;
                    state.torn = written < frame.len();
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }
}

/// Header and payload of one message, checked against the limits.
pub(crate) fn encode<T: Serialize>(msg: &T, fd_count: usize) -> io::Result<Vec<u8>> {
    let fd_count =
        u16::try_from(fd_count).ok().filter(|&n| usize::from(n) <= MAX_FDS_PER_MESSAGE).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{fd_count} fds in one message, at most {MAX_FDS_PER_MESSAGE} allowed"),
            )
        })?;
    let mut frame = vec![0u8; HEADER_LEN];
    serde_json::to_writer(&mut frame, msg)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("cannot encode message: {e}")))?;
    let payload_len = frame.len() - HEADER_LEN;
    let len = u32::try_from(payload_len).ok().filter(|_| payload_len <= MAX_PAYLOAD).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("message of {payload_len} bytes exceeds the {MAX_PAYLOAD}-byte frame limit"),
        )
    })?;
    frame.splice(..HEADER_LEN, len.to_be_bytes().into_iter().chain(fd_count.to_be_bytes()));
    Ok(frame)
}

/// The receiving half.
#[derive(Debug)]
pub(crate) struct ChannelReceiver {
    stream: Arc<UnixStream>,
    /// Bytes read and not yet handed out: the rest of a frame, and possibly more frames.
    buf: Vec<u8>,
    /// Fds received and not yet claimed by a frame, in arrival order.
    fds: VecDeque<OwnedFd>,
    /// The peer closed its end; what is buffered is all there will be.
    eof: bool,
}

/// A parsed frame header.
#[derive(Debug, Clone, Copy)]
struct Header {
    payload_len: usize,
    fd_count: usize,
}

impl Header {
    fn frame_len(self) -> usize {
        HEADER_LEN + self.payload_len
    }
}

impl ChannelReceiver {
    /// The next message and the fds that came with it; `None` once the peer has closed its end
    /// (and every frame sent before was delivered).
    ///
    /// Cancel-safe: what was read stays buffered for the next call, so it may sit in a
    /// `select!`.
    pub(crate) async fn recv<T: DeserializeOwned>(&mut self) -> io::Result<Option<(T, Vec<OwnedFd>)>> {
        loop {
            let header = parse_header(&self.buf)?;
            if let Some(header) = header.filter(|h| self.buf.len() >= h.frame_len()) {
                return self.take_frame(header).map(Some);
            }
            if self.eof {
                if self.buf.is_empty() {
                    // Fds no frame claimed are closed here; nothing can ever claim them now.
                    self.fds.clear();
                    return Ok(None);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!(
                        "peer closed the channel in the middle of a frame ({} bytes of it arrived)",
                        self.buf.len()
                    ),
                ));
            }
            // The fds of a frame come with its first bytes, so before reading more we can hold at
            // most those of the incomplete frame at the front (none if nothing is buffered).
            // More means the peer sent fds that no frame announced, which would otherwise pile up
            // without bound or be handed out with the wrong frame.
            let claimable = match header {
                Some(header) => header.fd_count,
                None if self.buf.is_empty() => 0,
                None => MAX_FDS_PER_MESSAGE,
            };
            if self.fds.len() > claimable {
                return Err(invalid(format!(
                    "{} fds arrived that no frame announced (at most {claimable} expected)",
                    self.fds.len()
                )));
            }
            self.fill().await?;
        }
    }

    /// Hand out the complete frame at the front of the buffer.
    fn take_frame<T: DeserializeOwned>(&mut self, header: Header) -> io::Result<(T, Vec<OwnedFd>)> {
        if self.fds.len() < header.fd_count {
            // Left in place: the stream is out of sync and every later call says so again.
            return Err(invalid(format!(
                "frame announces {} fds but only {} arrived",
                header.fd_count,
                self.fds.len()
            )));
        }
        let fds: Vec<OwnedFd> = self.fds.drain(..header.fd_count).collect();
        let payload = self.buf.get(HEADER_LEN..header.frame_len()).unwrap_or_default();
        let decoded = serde_json::from_slice(payload);
        // Consumed whether it decodes or not, so that one undecodable message (and its fds,
        // closed on return) does not wedge the channel.
        self.buf.drain(..header.frame_len());
        if self.buf.is_empty() && self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
        let msg = decoded.map_err(|e| invalid(format!("malformed message: {e}")))?;
        Ok((msg, fds))
    }

    /// One successful read from the socket (bytes, fds, or end of stream), waiting for it.
    async fn fill(&mut self) -> io::Result<()> {
        loop {
            self.stream.readable().await?;
            let start = self.buf.len();
            self.buf.resize(start + READ_CHUNK, 0);
            let mut fds = Vec::new();
            let stream = &self.stream;
            let into = self.buf.get_mut(start..).unwrap_or_default();
            let read = stream.try_io(Interest::READABLE, || fdpass::recv(stream.as_fd(), into, &mut fds));
            self.fds.extend(fds);
            match read {
                Ok(n) => {
                    self.buf.truncate(start + n);
                    self.eof = n == 0;
                    return Ok(());
                }
                Err(e) => {
                    self.buf.truncate(start);
                    if e.kind() != io::ErrorKind::WouldBlock {
                        return Err(e);
                    }
                }
            }
        }
    }
}

/// The header at the front of `buf`, if it is all there, checked against the limits.
fn parse_header(buf: &[u8]) -> io::Result<Option<Header>> {
    let Some(&[l0, l1, l2, l3, c0, c1]) = buf.get(..HEADER_LEN) else { return Ok(None) };
    let payload_len = u32::from_be_bytes([l0, l1, l2, l3]);
    let fd_count = usize::from(u16::from_be_bytes([c0, c1]));
    let payload_len = usize::try_from(payload_len).ok().filter(|&n| n <= MAX_PAYLOAD).ok_or_else(|| {
        invalid(format!("frame announces a {payload_len}-byte payload, more than the {MAX_PAYLOAD}-byte limit"))
    })?;
    if fd_count > MAX_FDS_PER_MESSAGE {
        return Err(invalid(format!("frame announces {fd_count} fds, more than the limit of {MAX_FDS_PER_MESSAGE}")));
    }
    Ok(Some(Header { payload_len, fd_count }))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("worker channel: {message}"))
}

#[cfg(test)]
mod tests;
