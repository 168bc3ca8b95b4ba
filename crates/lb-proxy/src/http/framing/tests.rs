use super::{head_end, After, RawRequests};

const CONFLICT: Option<&str> = Some("both Content-Length and Transfer-Encoding");

/// Feeds `input` in pieces of `piece` bytes, claiming each request as hyper would once its head
/// and body are in: returns each claim's conflict.
fn run(input: &[u8], piece: usize, requests: &[(bool, After)]) -> Vec<Option<&'static str>> {
    let mut raw = RawRequests::new(8192);
    let mut seen = Vec::new();
    for chunk in input.chunks(piece) {
        raw.feed(chunk);
    }
    for &(te, after) in requests {
        seen.push(raw.claim(te, false, after).conflict);
    }
    seen
}

#[test]
fn the_end_of_a_head_is_found_as_httparse_finds_it() {
    assert_eq!(head_end(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nrest"), Some(27));
    assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\n\nrest"), Some(24));
    assert_eq!(head_end(b"GET / HTTP/1.1\nHost: x\n\r\nrest"), Some(25));
    // Empty lines before the request line are skipped.
    assert_eq!(head_end(b"\r\n\r\nGET / HTTP/1.1\r\n\r\n"), Some(22));
    for partial in [&b""[..], b"\r\n", b"GET / HTTP/1.1\r\n", b"GET / HTTP/1.1\r\nHost: x\r\n\r", b"GET /\n"] {
        assert_eq!(head_end(partial), None, "{partial:?}");
    }
}

#[test]
fn a_conflict_pipelined_behind_a_body_is_found_whatever_the_read_sizes() {
    let input = b"POST /a HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello\
        POST /b HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n0\r\nT: v\r\n\r\n\
        POST /c HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    let requests = [(false, After::Length(5)), (true, After::Chunked), (true, After::Chunked)];
    for piece in [1, 2, 7, 64, input.len()] {
        assert_eq!(run(input, piece, &requests), [None, None, CONFLICT], "read {piece} bytes at a time");
    }
}

#[test]
fn the_refused_head_is_handed_back_alone() {
    let mut raw = RawRequests::new(8192);
    raw.feed(b"GET / HTTP/1.1\r\nHost: x\r\n\r\nGET /next HTTP/1.1\r\n");
    let claimed = raw.claim(false, true, After::Length(0));
    assert_eq!(claimed.head.as_deref(), Some(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"[..]));
    assert_eq!(raw.take(), b"GET /next HTTP/1.1\r\n");
}

#[test]
fn bodies_are_skipped_not_kept() {
    let mut raw = RawRequests::new(8192);
    raw.feed(b"POST / HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
    raw.claim(false, false, After::Length(100_000));
    for _ in 0..100 {
        raw.feed(&[b'x'; 1000]);
    }
    raw.feed(b"GET /after HTTP/1.1\r\n\r\n");
    assert_eq!(raw.take(), b"GET /after HTTP/1.1\r\n\r\n");
}

#[test]
fn an_upgrade_refused_is_followed_as_any_request() {
    // A server may refuse the upgrade: the next request is checked as usual.
    let input = b"GET / HTTP/1.1\r\nUpgrade: x\r\nConnection: upgrade\r\n\r\n\
        POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n";
    assert_eq!(run(input, 5, &[(false, After::Length(0)), (true, After::Chunked)]), [None, CONFLICT]);
}

#[test]
fn after_a_tunnel_or_an_overflow_nothing_more_is_followed() {
    let mut raw = RawRequests::new(8192);
    raw.feed(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n");
    raw.claim(false, false, After::Length(0));
    raw.stop();
    raw.feed(&[0x81; 4096]);
    assert!(raw.take().is_empty(), "a tunnel's bytes are not kept");

    let mut raw = RawRequests::new(100);
    raw.feed(&[b'a'; 150]);
    raw.feed(&[b'b'; 150]);
    let kept = raw.take();
    assert_eq!(kept.len(), 200, "kept up to twice the buffer");
}

#[test]
fn a_chunk_size_past_64_bits_stops_the_following_without_a_panic() {
    let mut raw = RawRequests::new(8192);
    raw.feed(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
    raw.claim(true, false, After::Chunked);
    raw.feed(b"fffffffffffffffffff\r\n");
    raw.feed(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n");
    assert_eq!(raw.claim(true, false, After::Chunked).conflict, None);
}
