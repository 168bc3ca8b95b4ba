//! An HTTP/1 client's bytes through hyper's server as lb-proxy configures it, then lb-proxy's
//! own checks in front of forwarding (`lb_proxy::fuzz_request_head`): the framing refusals
//! (Content-Length with Transfer-Encoding, conflicting lengths, codings other than chunked) on
//! the parsed request and on the raw head, hop-by-hop stripping, the log's request line, the
//! origin-form URI servers get. No panic; a first request carrying both framing headers is
//! refused; nothing hop-by-hop is left. Each input is served twice, read whole and in 7-byte
//! reads (a head split across reads), and the first request's verdict must not differ.
//!
//! Only the first: lb-proxy keeps the raw head of a request only when its bytes arrive after
//! the previous response, so a pipelined request (read with its predecessor, or during it) has
//! no raw-head check, and whether it does depends on how the bytes were read. Its parsed-head
//! checks still apply, and hyper closes the connection after a request with both headers.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = lb_proxy::fuzz_request_head(data, usize::MAX);
    let split = lb_proxy::fuzz_request_head(data, 7);
    assert_eq!(whole.first(), split.first(), "the first answer depends on how the bytes were read");
});
