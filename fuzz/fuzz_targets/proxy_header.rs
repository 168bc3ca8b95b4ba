//! PROXY protocol headers from arbitrary bytes: no panic, and the streaming reader and the parser
//! agree (`fuzz_parse` asserts it).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = lb_proxy::fuzz_parse(data);
});
