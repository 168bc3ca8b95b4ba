//! UDP datagrams from one client into an HTTP/3 frontend's QUIC endpoint (quinn's state machine
//! with lb-tls's rustls configuration, certificate resolver and ticketer), every connection they
//! open driven until it has nothing more to say: never a panic (`lb_tls::fuzz_quic_datagrams`).
//! Input: datagrams, each a 2-byte big-endian length and its bytes; the seed is a real client's
//! Initial.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lb_tls::fuzz_quic_datagrams(data);
});
