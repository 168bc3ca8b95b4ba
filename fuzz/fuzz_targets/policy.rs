//! The policy language on hostile input (`lb_proxy::fuzz_policy`): the first line is a template
//! (HAProxy's log-format syntax) parsed and rendered; the rest is a request head run through a
//! policy using every fetch, matcher and action (captures, header templates, set_path, redirects,
//! maps, lists, regular expressions, response rules). No panic, and no header value with CR, LF
//! or NUL.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    lb_proxy::fuzz_policy(data);
});
