//! The hop's frames, encoded and decoded without I/O.
//!
//! A frame is a 10-byte header, `[type u8][flags u8][stream u32][length u32]` (big-endian),
//! then `length` bytes of payload. Decoding judges the header as soon as its 10 bytes are
//! there, so that a bad type or an impossible length is refused before its payload is awaited.

use std::fmt;

use crate::Error;

/// What opens a multiplexed hop connection, written by both ends before any frame: distinct
/// from a PROXY v1 line (`PROXY `), a PROXY v2 signature (`\r\n\r\n\0\r\nQ`) and HTTP/2's
/// preface, so that a socket that takes PROXY headers can tell a hop from a client connection
/// by its first 8 bytes. The last byte is the framing's version.
pub const PREFACE: &[u8; 8] = b"LB-HOP\0\x01";

/// Type, flags, stream, length.
pub const HEADER_LEN: usize = 10;

/// The longest payload: an OPEN's PROXY v2 header is at most 16 + 65,535 bytes; a DATA frame
/// is never longer than [`MAX_DATA`].
pub const MAX_PAYLOAD: usize = 16 + 65_535;

/// The longest DATA payload written: a stream's whole initial window in one frame.
pub const MAX_DATA: usize = 64 * 1024;

/// One frame; payloads borrow the bytes decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Frame<'a> {
    /// A new stream (from the connecting side only), with the PROXY header that lb-tls would
    /// have written first on a connection of its own (possibly empty).
    Open { stream: u32, header: &'a [u8] },
    /// Bytes of a stream, within the credit the reader gave (never empty).
    Data { stream: u32, bytes: &'a [u8] },
    /// The sender writes no more on this stream (half-close, a FIN).
    Shut { stream: u32 },
    /// The sender abandons the stream both ways (an RST); its state is gone.
    Reset { stream: u32 },
    /// The sender read `credit` more bytes of the stream: the peer may send that many more.
    Window { stream: u32, credit: u32 },
    /// From the accepting side: open no new stream on this connection (its worker drains);
    /// the streams open finish.
    GoAway,
}

/// The frame types, as on the wire.
const OPEN: u8 = 0;
const DATA: u8 = 1;
const SHUT: u8 = 2;
const RESET: u8 = 3;
const WINDOW: u8 = 4;
const GOAWAY: u8 = 5;

/// A frame's type, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Open,
    Data,
    Shut,
    Reset,
    Window,
    GoAway,
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Kind::Open => "OPEN",
            Kind::Data => "DATA",
            Kind::Shut => "SHUT",
            Kind::Reset => "RESET",
            Kind::Window => "WINDOW",
            Kind::GoAway => "GOAWAY",
        })
    }
}

impl Kind {
    fn of(byte: u8) -> Result<Kind, Error> {
        Ok(match byte {
            OPEN => Kind::Open,
            DATA => Kind::Data,
            SHUT => Kind::Shut,
            RESET => Kind::Reset,
            WINDOW => Kind::Window,
            GOAWAY => Kind::GoAway,
            other => return Err(Error::HopUnknownFrameType(other)),
        })
    }

    fn byte(self) -> u8 {
        match self {
            Kind::Open => OPEN,
            Kind::Data => DATA,
            Kind::Shut => SHUT,
            Kind::Reset => RESET,
            Kind::Window => WINDOW,
            Kind::GoAway => GOAWAY,
        }
    }

    /// The payload length a frame of this type may have: `(least, most)`.
    fn lengths(self) -> (usize, usize) {
        match self {
            Kind::Open => (0, MAX_PAYLOAD),
            Kind::Data => (1, MAX_DATA),
            Kind::Shut | Kind::Reset | Kind::GoAway => (0, 0),
            Kind::Window => (4, 4),
        }
    }
}

impl<'a> Frame<'a> {
    /// The first frame in `buf` and how many bytes it took; `None` while `buf` holds less than a
    /// whole frame (the header, when present, is already judged).
    pub fn decode(buf: &'a [u8]) -> Result<Option<(Frame<'a>, usize)>, Error> {
        let Some(head) = buf.get(..HEADER_LEN) else {
            return Ok(None);
        };
        let word = |at: usize| head.get(at..at + 4).and_then(|w| w.try_into().ok()).map_or(0, u32::from_be_bytes);
        let kind = Kind::of(head[0])?;
        let flags = head[1];
        let stream = word(2);
        let len = word(6);
        if flags != 0 {
            return Err(Error::HopFrameFlags { kind, flags });
        }
        match (kind, stream) {
            (Kind::GoAway, 0) => {}
            (Kind::GoAway, other) => return Err(Error::HopGoAwayOnStream(other)),
            (kind, 0) => return Err(Error::HopStreamZero { kind }),
            _ => {}
        }
        let (least, most) = kind.lengths();
        let size = len as usize;
        if least == most && size != most {
            return Err(Error::HopFrameWrongLength { kind, len, want: most });
        }
        if size > most {
            return Err(Error::HopFrameTooLong { kind, len, max: most });
        }
        if size < least {
            return Err(Error::HopEmptyData(stream));
        }
        let Some(payload) = buf.get(HEADER_LEN..HEADER_LEN + size) else {
            return Ok(None);
        };
        let frame = match kind {
            Kind::Open => Frame::Open { stream, header: payload },
            Kind::Data => Frame::Data { stream, bytes: payload },
            Kind::Shut => Frame::Shut { stream },
            Kind::Reset => Frame::Reset { stream },
            Kind::Window => {
                let credit = payload.try_into().map_or(0, u32::from_be_bytes);
                if credit == 0 {
                    return Err(Error::HopZeroCredit(stream));
                }
                Frame::Window { stream, credit }
            }
            Kind::GoAway => Frame::GoAway,
        };
        Ok(Some((frame, HEADER_LEN + size)))
    }

    /// Appends the frame to `out`.
    ///
    /// # Panics
    /// When the payload is longer than its type allows (a caller's bug, never the peer's).
    pub fn encode(&self, out: &mut Vec<u8>) {
        match *self {
            Frame::Open { stream, header } => with_payload(out, Kind::Open, stream, &[header]),
            Frame::Data { stream, bytes } => with_payload(out, Kind::Data, stream, &[bytes]),
            Frame::Shut { stream } => head(out, Kind::Shut, stream, 0),
            Frame::Reset { stream } => head(out, Kind::Reset, stream, 0),
            Frame::Window { stream, credit } => with_payload(out, Kind::Window, stream, &[&credit.to_be_bytes()]),
            Frame::GoAway => head(out, Kind::GoAway, 0, 0),
        }
    }
}

/// Appends a DATA frame of `bufs`' bytes, their first `len` only (`len` at most [`MAX_DATA`]).
pub(crate) fn encode_data(out: &mut Vec<u8>, stream: u32, bufs: &[impl std::ops::Deref<Target = [u8]>], len: usize) {
    assert!((1..=MAX_DATA).contains(&len), "a DATA frame of {len} bytes");
    head(out, Kind::Data, stream, len);
    let mut left = len;
    for buf in bufs {
        let take = buf.len().min(left);
        out.extend_from_slice(&buf[..take]);
        left -= take;
        if left == 0 {
            break;
        }
    }
}

fn with_payload(out: &mut Vec<u8>, kind: Kind, stream: u32, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    assert!(len <= kind.lengths().1, "a {kind} frame of {len} bytes");
    head(out, kind, stream, len);
    for part in parts {
        out.extend_from_slice(part);
    }
}

fn head(out: &mut Vec<u8>, kind: Kind, stream: u32, len: usize) {
    out.push(kind.byte());
    out.push(0);
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&(len as u32).to_be_bytes());
}
