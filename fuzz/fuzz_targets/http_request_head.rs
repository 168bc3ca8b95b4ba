//! An HTTP/1 client's bytes through hyper's server as lb-proxy configures it, then lb-proxy's
//! own checks in front of forwarding (`lb_proxy::fuzz_request_head`): the framing refusals
//! (Content-Length with Transfer-Encoding, conflicting lengths, codings other than chunked) on
//! the parsed request and on the raw head, hop-by-hop stripping, the log's request line, the
//! origin-form URI servers get. No panic; a first request carrying both framing headers is
//! refused; nothing hop-by-hop is left. Each input is served twice, read whole and in 7-byte
//! reads (heads and bodies split across reads), and the verdicts must not differ: lb-proxy
//! follows the requests' framing beside hyper, so a pipelined request gets the raw-head check
//! however its bytes arrived.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let whole = lb_proxy::fuzz_request_head(data, usize::MAX);
    let split = lb_proxy::fuzz_request_head(data, 7);
    assert_eq!(whole, split, "the answers depend on how the bytes were read");
});
