//! lb-supervisor's control socket, master side: the bytes a client (lbctl, lb-watcher, or
//! anyone who can connect) writes, then its end of the stream, through the connection loop the
//! master runs (`lb_supervisor::fuzz::control_connection`, over a real socketpair). Every request
//! line gets one JSON answer (an error for a malformed one), never a panic; a line over 64 KiB
//! closes the connection (an input starting with `*` is its rest with the last line repeated
//! past that); every request decoded re-encodes to a line that decodes the same.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lb_supervisor::fuzz::control_connection(data);
});
