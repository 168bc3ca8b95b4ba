//! The multiplexed hop's frames as lb-proxy reads them from lb-tls
//! (`lb_supervisor::hop::fuzz_frames`): the decoder refuses bad bytes with an error, never a
//! panic; every frame decoded encodes back to its bytes; the streams' state takes any sequence.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lb_supervisor::hop::fuzz_frames(data);
});
