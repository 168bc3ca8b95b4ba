//! lb-supervisor's worker channel: the bytes a peer writes (frames of a 4-byte length, a 2-byte
//! fd count and JSON) through the real receiver, read as a worker reads the master and as the
//! master reads a worker (`lb_supervisor::fuzz::channel_frames`, over a real socketpair): errors
//! for bad frames, never a panic or a wait past the end of the stream; every message decoded,
//! encoded again, decodes to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lb_supervisor::fuzz::channel_frames(data);
});
