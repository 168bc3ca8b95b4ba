//! What a new lb-proxy worker reads from the old one at a reload: the limit tables' hand-over
//! (a full one, or the late count after the drain), as the bytes before the channel's base64
//! (or, when the first byte is odd, the channel's text as it comes), taken by tables of each key
//! type and layout (`lb_proxy::FuzzHandover`, where the tables and the checks are). Never a
//! panic; no table past its size; what the tables then hold, handed on to a next worker, fits.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    lb_proxy::FuzzHandover::default().input(data);
});
