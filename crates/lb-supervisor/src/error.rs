//! The one error type of lb-supervisor.

use std::io;
use std::path::PathBuf;

use crate::hop::Kind;
use crate::ListenAddr;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot bind {address}: {source}")]
    Bind {
        address: ListenAddr,
        #[source]
        source: io::Error,
    },

    #[error("control socket {path}: {source}")]
    ControlSocket {
        path: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("control socket {path}: malformed answer: {source}")]
    ControlProtocol {
        path: PathBuf,
        #[source]
        source: serde_json::Error,
    },

    #[error("worker channel: {source}")]
    Channel {
        #[source]
        source: io::Error,
    },

    #[error("starting worker {exe}: {source}")]
    Spawn {
        exe: PathBuf,
        #[source]
        source: io::Error,
    },

    #[error("{what}: {source}")]
    Privileges {
        what: String,
        #[source]
        source: nix::Error,
    },

    #[error("sd_notify to {socket}: {source}")]
    Notify {
        socket: String,
        #[source]
        source: io::Error,
    },

    // The multiplexed hop (`hop`): bytes that are not a frame.
    #[error("hop: bad frame: unknown frame type {0:#04x}")]
    HopUnknownFrameType(u8),

    #[error("hop: bad frame: {kind} frame with flags {flags:#04x} (none are defined)")]
    HopFrameFlags { kind: Kind, flags: u8 },

    #[error("hop: bad frame: {kind} frame on stream 0")]
    HopStreamZero { kind: Kind },

    #[error("hop: bad frame: GOAWAY frame on stream {0} (it is for stream 0)")]
    HopGoAwayOnStream(u32),

    #[error("hop: bad frame: {kind} frame of {len} bytes (at most {max})")]
    HopFrameTooLong { kind: Kind, len: u32, max: usize },

    #[error("hop: bad frame: {kind} frame of {len} bytes (exactly {want})")]
    HopFrameWrongLength { kind: Kind, len: u32, want: usize },

    #[error("hop: bad frame: empty DATA frame on stream {0}")]
    HopEmptyData(u32),

    #[error("hop: bad frame: WINDOW frame granting 0 bytes on stream {0}")]
    HopZeroCredit(u32),

    // The multiplexed hop: why a connection ended, or a stream could not be opened on it.
    #[error("hop: the peer does not speak the hop protocol (it began with \"{0}\")")]
    NotAHop(String),

    #[error(
        "hop: the peer closed the connection before the hop's preface (not an accept_proxy bind of an lb-proxy \
         that takes the multiplexed hop?)"
    )]
    HopNoPreface,

    #[error("hop: {0} frame from the wrong side")]
    HopWrongSide(&'static str),

    #[error("hop: frame for stream {0}, which was never opened")]
    HopUnknownStream(u32),

    #[error("hop: OPEN of stream {stream}, not above the last opened ({highest})")]
    HopStreamReused { stream: u32, highest: u32 },

    #[error("hop: DATA on stream {0} after its SHUT")]
    HopDataAfterShut(u32),

    #[error("hop: DATA of {len} bytes on stream {stream} past its window ({window} bytes)")]
    HopFlowControl { stream: u32, len: usize, window: u32 },

    #[error("hop: WINDOW of {credit} bytes on stream {stream} past the largest window")]
    HopCreditOverflow { stream: u32, credit: u32 },

    #[error("hop: connection closed inside a frame ({0} bytes of it received)")]
    HopTruncated(usize),

    #[error("hop: connection closed with {0} streams open")]
    HopClosedWithStreams(usize),

    #[error("hop: {source}")]
    HopIo {
        #[source]
        source: io::Error,
    },

    #[error("hop: the hop connection takes no new streams ({0})")]
    HopRefused(&'static str),
}
