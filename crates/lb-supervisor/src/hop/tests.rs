use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;

const WAIT: Duration = Duration::from_secs(10);

fn every_frame() -> Vec<Frame<'static>> {
    vec![
        Frame::Open { stream: 1, header: b"\r\n\r\n\0\r\nQUIT\n!\x11\0\x0c" },
        Frame::Open { stream: 7, header: b"" },
        Frame::Data { stream: 2, bytes: b"GET / HTTP/1.1\r\n\r\n" },
        Frame::Shut { stream: 3 },
        Frame::Reset { stream: u32::MAX },
        Frame::Window { stream: 4, credit: 65_536 },
        Frame::GoAway,
    ]
}

#[test]
fn frames_round_trip_and_wait_for_their_last_byte() {
    let mut all = Vec::new();
    for frame in every_frame() {
        let mut bytes = Vec::new();
        frame.encode(&mut bytes);
        assert_eq!(Frame::decode(&bytes).expect("a whole frame"), Some((frame, bytes.len())), "{frame:?}");
        for cut in 0..bytes.len() {
            assert_eq!(Frame::decode(&bytes[..cut]).expect("part of a frame"), None, "{frame:?} cut at {cut}");
        }
        all.extend_from_slice(&bytes);
    }
    // Back to back, each takes exactly its own bytes.
    let mut rest = &all[..];
    for frame in every_frame() {
        let (got, used) = Frame::decode(rest).expect("hop test step").expect("hop test step");
        assert_eq!(got, frame);
        rest = &rest[used..];
    }
    assert!(rest.is_empty());
}

fn header(kind: u8, flags: u8, stream: u32, len: u32) -> Vec<u8> {
    let mut out = vec![kind, flags];
    out.extend_from_slice(&stream.to_be_bytes());
    out.extend_from_slice(&len.to_be_bytes());
    out
}

#[test]
fn every_bad_frame_is_an_error_before_its_payload() {
    let cases: Vec<(Vec<u8>, Error)> = vec![
        (header(6, 0, 1, 0), Error::HopUnknownFrameType(6)),
        (header(0xff, 0, 1, 0), Error::HopUnknownFrameType(0xff)),
        (header(1, 0x80, 1, 1), Error::HopFrameFlags { kind: Kind::Data, flags: 0x80 }),
        (header(0, 0, 0, 0), Error::HopStreamZero { kind: Kind::Open }),
        (header(1, 0, 0, 1), Error::HopStreamZero { kind: Kind::Data }),
        (header(4, 0, 0, 4), Error::HopStreamZero { kind: Kind::Window }),
        (header(5, 0, 9, 0), Error::HopGoAwayOnStream(9)),
        (header(5, 0, 0, 1), Error::HopFrameWrongLength { kind: Kind::GoAway, len: 1, want: 0 }),
        (header(2, 0, 1, 4), Error::HopFrameWrongLength { kind: Kind::Shut, len: 4, want: 0 }),
        (header(3, 0, 1, 1), Error::HopFrameWrongLength { kind: Kind::Reset, len: 1, want: 0 }),
        (header(4, 0, 1, 8), Error::HopFrameWrongLength { kind: Kind::Window, len: 8, want: 4 }),
        (header(4, 0, 1, 0), Error::HopFrameWrongLength { kind: Kind::Window, len: 0, want: 4 }),
        (header(1, 0, 1, 65_537), Error::HopFrameTooLong { kind: Kind::Data, len: 65_537, max: MAX_DATA }),
        (header(1, 0, 1, u32::MAX), Error::HopFrameTooLong { kind: Kind::Data, len: u32::MAX, max: MAX_DATA }),
        (header(0, 0, 1, 65_552), Error::HopFrameTooLong { kind: Kind::Open, len: 65_552, max: MAX_PAYLOAD }),
        (header(1, 0, 5, 0), Error::HopEmptyData(5)),
        ([header(4, 0, 3, 4), vec![0; 4]].concat(), Error::HopZeroCredit(3)),
    ];
    for (bytes, want) in cases {
        // Error holds io errors, so it has no PartialEq; these variants' Debug is their fields.
        let got = Frame::decode(&bytes).expect_err("a bad frame");
        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{bytes:?}");
        assert!(got.to_string().starts_with("hop: bad frame: "), "{got}");
    }
}

/// A connected pair over a real socketpair, both drivers running.
async fn pair(
) -> (HopClient, Incoming, tokio::task::JoinHandle<Result<(), Error>>, tokio::task::JoinHandle<Result<(), Error>>) {
    let (a, mut b) = UnixStream::pair().expect("hop test step");
    // lb-proxy reads the preface itself before it hands the connection over.
    let (client, client_driver) = connect(a);
    let client_driver = tokio::spawn(client_driver);
    let mut preface = [0; 8];
    b.read_exact(&mut preface).await.expect("hop test step");
    assert_eq!(&preface, PREFACE);
    let (incoming, server_driver) = accept(b);
    (client, incoming, client_driver, tokio::spawn(server_driver))
}

async fn within<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, f).await.unwrap_or_else(|_| panic!("{what}: no answer within {WAIT:?}"))
}

#[tokio::test]
async fn a_stream_carries_its_header_and_bytes_both_ways_with_half_close() {
    let (client, mut incoming, client_driver, server_driver) = pair().await;
    let mut c = client.open(b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n").expect("hop test step");
    c.write_all(b"request").await.expect("hop test step");
    c.shutdown().await.expect("hop test step");
    let (mut s, header) = within("accept", incoming.accept()).await.expect("hop test step");
    assert_eq!(header, b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n");
    let mut got = Vec::new();
    within("read to the client's SHUT", s.read_to_end(&mut got)).await.expect("hop test step");
    assert_eq!(got, b"request");
    // The other direction is still open after the client's half-close.
    s.write_all(b"response").await.expect("hop test step");
    s.shutdown().await.expect("hop test step");
    let mut got = Vec::new();
    within("read to the server's SHUT", c.read_to_end(&mut got)).await.expect("hop test step");
    assert_eq!(got, b"response");
    assert!(c.write_all(b"more").await.is_err(), "a write after shutdown fails");
    drop((c, s));
    // Once the client handle is gone and no stream is open, the connection closes cleanly.
    drop(client);
    within("client driver", client_driver).await.expect("hop test step").expect("hop test step");
    within("server driver", server_driver).await.expect("hop test step").expect("hop test step");
    assert!(within("accept after the end", incoming.accept()).await.is_none());
}

#[tokio::test]
async fn a_reader_that_does_not_read_stops_only_its_own_writer() {
    let (client, mut incoming, _cd, _sd) = pair().await;
    let mut slow = client.open(b"slow").expect("hop test step");
    let mut fast = client.open(b"fast").expect("hop test step");
    let (mut slow_server, _) = within("accept", incoming.accept()).await.expect("hop test step");
    let (mut fast_server, _) = within("accept", incoming.accept()).await.expect("hop test step");

    // Writes to the slow stream stop at its window.
    let big = vec![7u8; 1024 * 1024];
    let mut written = 0;
    while written < big.len() {
        match tokio::time::timeout(Duration::from_millis(300), slow.write(&big[written..])).await {
            Ok(n) => written += n.expect("hop test step"),
            Err(_) => break,
        }
    }
    assert_eq!(written, 256 * 1024, "the writer stops at the stream's window");

    // Meanwhile the other stream flows, more than a window's worth.
    let echo = tokio::spawn(async move {
        let mut buf = vec![0; 200_000];
        fast_server.read_exact(&mut buf).await.expect("hop test step");
        fast_server.write_all(&buf).await.expect("hop test step");
    });
    let fast_bytes: Vec<u8> = (0..200_000u32).map(|i| i as u8).collect();
    within("fast stream", fast.write_all(&fast_bytes)).await.expect("hop test step");
    let mut back = vec![0; 200_000];
    within("fast echo", fast.read_exact(&mut back)).await.expect("hop test step");
    assert_eq!(back, fast_bytes);
    echo.await.expect("hop test step");

    // Once read, the slow stream goes on to its end.
    let reader = tokio::spawn(async move {
        let mut got = Vec::new();
        slow_server.read_to_end(&mut got).await.expect("hop test step");
        got.len()
    });
    within("rest of the slow stream", slow.write_all(&big[written..])).await.expect("hop test step");
    slow.shutdown().await.expect("hop test step");
    assert_eq!(within("slow reader", reader).await.expect("hop test step"), big.len());
}

#[tokio::test]
async fn goaway_refuses_new_streams_and_lets_open_ones_finish() {
    let (client, mut incoming, client_driver, server_driver) = pair().await;
    let mut c = client.open(b"").expect("hop test step");
    let (mut s, _) = within("accept", incoming.accept()).await.expect("hop test step");
    incoming.go_away();
    within("GOAWAY seen", async {
        while client.is_open() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(matches!(client.open(b""), Err(Error::HopRefused(_))));
    // The open stream still works both ways.
    c.write_all(b"ping").await.expect("hop test step");
    let mut buf = [0; 4];
    within("ping", s.read_exact(&mut buf)).await.expect("hop test step");
    s.write_all(b"pong").await.expect("hop test step");
    within("pong", c.read_exact(&mut buf)).await.expect("hop test step");
    assert_eq!(&buf, b"pong");
    c.shutdown().await.expect("hop test step");
    s.shutdown().await.expect("hop test step");
    drop((c, s));
    // Idle after GOAWAY: the connecting side closes the connection, though its handle lives.
    within("client driver", client_driver).await.expect("hop test step").expect("hop test step");
    within("server driver", server_driver).await.expect("hop test step").expect("hop test step");
    drop(client);
}

#[tokio::test]
async fn a_stream_dropped_with_unread_bytes_is_reset() {
    let (client, mut incoming, _cd, _sd) = pair().await;
    let mut c = client.open(b"").expect("hop test step");
    c.write_all(b"unread").await.expect("hop test step");
    let (s, _) = within("accept", incoming.accept()).await.expect("hop test step");
    within("bytes arrive", async {
        while incoming.conn.lock().streams.get(&s.id()).map_or(0, |slot| slot.unread()) == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    drop(s);
    let mut buf = [0; 4];
    let err = within("read after reset", c.read(&mut buf)).await.expect_err("an error");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionReset);
    assert_eq!(c.write(b"x").await.expect_err("an error").kind(), std::io::ErrorKind::ConnectionReset);
    // The connection itself serves on.
    let mut c2 = client.open(b"").expect("hop test step");
    c2.write_all(b"ok").await.expect("hop test step");
    let (mut s2, _) = within("accept", incoming.accept()).await.expect("hop test step");
    within("second stream", s2.read_exact(&mut buf[..2])).await.expect("hop test step");
}

#[tokio::test]
async fn a_stream_dropped_after_reading_all_ends_cleanly_and_answers_late_data_with_reset() {
    let (client, mut incoming, _cd, _sd) = pair().await;
    let mut c = client.open(b"").expect("hop test step");
    let (s, _) = within("accept", incoming.accept()).await.expect("hop test step");
    drop(s);
    let mut got = Vec::new();
    within("EOF", c.read_to_end(&mut got)).await.expect("hop test step");
    assert!(got.is_empty());
    c.write_all(b"late").await.expect("hop test step");
    within("reset", async {
        loop {
            match c.write(b"x").await {
                Ok(_) => tokio::time::sleep(Duration::from_millis(5)).await,
                Err(e) => break assert_eq!(e.kind(), std::io::ErrorKind::ConnectionReset),
            }
        }
    })
    .await;
    drop(c);
    within("no state left", async {
        while !incoming.conn.lock().streams.is_empty() || !client.conn.lock().streams.is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_streams_at_once() {
    let (client, mut incoming, _cd, _sd) = pair().await;
    let server = tokio::spawn(async move {
        let mut echoes = Vec::new();
        while let Some((mut s, header)) = incoming.accept().await {
            echoes.push(tokio::spawn(async move {
                let mut got = Vec::new();
                s.read_to_end(&mut got).await.expect("hop test step");
                s.write_all(&header).await.expect("hop test step");
                s.write_all(&got).await.expect("hop test step");
            }));
        }
    });
    let mut clients = Vec::new();
    for i in 0..300u32 {
        let mut c = client.open(format!("#{i}:").as_bytes()).expect("hop test step");
        clients.push(tokio::spawn(async move {
            let body = vec![i as u8; 10_000 + i as usize * 100];
            c.write_all(&body).await.expect("hop test step");
            c.shutdown().await.expect("hop test step");
            let mut got = Vec::new();
            c.read_to_end(&mut got).await.expect("hop test step");
            assert_eq!(got, [format!("#{i}:").into_bytes(), body].concat());
        }));
    }
    for c in clients {
        within("stream", c).await.expect("hop test step");
    }
    drop(client);
    within("server", server).await.expect("hop test step");
}

#[tokio::test]
async fn a_broken_connection_fails_its_streams() {
    let (client, mut incoming, _cd, server_driver) = pair().await;
    let mut c = client.open(b"").expect("hop test step");
    let (_s, _) = within("accept", incoming.accept()).await.expect("hop test step");
    server_driver.abort();
    let mut buf = [0; 1];
    let err = within("read", c.read(&mut buf)).await.expect_err("an error");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionAborted, "{err}");
    within("connection ends", async {
        while client.is_open() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(matches!(client.open(b""), Err(Error::HopRefused(_))));
}

#[tokio::test]
async fn bad_bytes_end_the_connection_with_the_reason() {
    let (mut a, b) = UnixStream::pair().expect("hop test step");
    let (_incoming, driver) = accept(b);
    let driver = tokio::spawn(driver);
    a.write_all(&header(9, 0, 1, 0)).await.expect("hop test step");
    let err = within("driver", driver).await.expect("hop test step").expect_err("an error");
    assert_eq!(err.to_string(), "hop: bad frame: unknown frame type 0x09");

    // Data past the window.
    let (mut a, b) = UnixStream::pair().expect("hop test step");
    let (_incoming, driver) = accept(b);
    let driver = tokio::spawn(driver);
    let mut bytes = Vec::new();
    Frame::Open { stream: 1, header: b"" }.encode(&mut bytes);
    for _ in 0..5 {
        Frame::Data { stream: 1, bytes: &[0; 60_000] }.encode(&mut bytes);
    }
    a.write_all(&bytes).await.expect("hop test step");
    let err = within("driver", driver).await.expect("hop test step").expect_err("an error");
    assert!(matches!(err, Error::HopFlowControl { stream: 1, len: 60_000, window: 22_144 }), "{err}");

    // A frame for a stream never opened, and the peer's own GOAWAY.
    for (frame, want) in [
        (Frame::Shut { stream: 3 }, "hop: frame for stream 3, which was never opened"),
        (Frame::GoAway, "hop: GOAWAY frame from the wrong side"),
    ] {
        let (mut a, b) = UnixStream::pair().expect("hop test step");
        let (_incoming, driver) = accept(b);
        let driver = tokio::spawn(driver);
        let mut bytes = Vec::new();
        frame.encode(&mut bytes);
        a.write_all(&bytes).await.expect("hop test step");
        assert_eq!(within("driver", driver).await.expect("hop test step").expect_err("an error").to_string(), want);
    }

    // Cut inside a frame.
    let (mut a, b) = UnixStream::pair().expect("hop test step");
    let (_incoming, driver) = accept(b);
    let driver = tokio::spawn(driver);
    a.write_all(&header(1, 0, 1, 100)[..7]).await.expect("hop test step");
    a.shutdown().await.expect("hop test step");
    let err = within("driver", driver).await.expect("hop test step").expect_err("an error");
    assert_eq!(err.to_string(), "hop: connection closed inside a frame (7 bytes of it received)");
}

#[tokio::test]
async fn a_peer_that_is_not_a_hop_is_named() {
    let (a, mut b) = UnixStream::pair().expect("hop test step");
    let (client, driver) = connect(a);
    let driver = tokio::spawn(driver);
    let _stream = client.open(b"").expect("hop test step");
    b.write_all(b"HTTP/1.1 400 Bad Request\r\n").await.expect("hop test step");
    let err = within("driver", driver).await.expect("hop test step").expect_err("an error");
    assert_eq!(err.to_string(), "hop: the peer does not speak the hop protocol (it began with \"HTTP/1.1\")");
}

#[test]
fn the_fuzz_entry_takes_frames_up_to_the_first_error() {
    let mut bytes = Vec::new();
    Frame::Open { stream: 1, header: b"" }.encode(&mut bytes);
    Frame::Data { stream: 1, bytes: b"abc" }.encode(&mut bytes);
    Frame::Window { stream: 1, credit: 10 }.encode(&mut bytes);
    Frame::Shut { stream: 1 }.encode(&mut bytes);
    assert_eq!(fuzz_frames(&bytes), 4);
    Frame::Data { stream: 1, bytes: b"after shut" }.encode(&mut bytes);
    Frame::Reset { stream: 1 }.encode(&mut bytes);
    assert_eq!(fuzz_frames(&bytes), 4);
    for seed in
        std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/../../fuzz/seeds/hop_frames")).expect("hop test step")
    {
        let _ = fuzz_frames(&std::fs::read(seed.expect("hop test step").path()).expect("hop test step"));
    }
}

#[tokio::test]
async fn a_peer_that_closes_without_the_preface_is_named() {
    let (a, mut b) = UnixStream::pair().expect("socketpair");
    let (client, driver) = connect(a);
    let driver = tokio::spawn(driver);
    let _stream = client.open(b"").expect("a stream");
    b.shutdown().await.expect("shutdown");
    let err = within("driver", driver).await.expect("driver task").expect_err("an error");
    assert!(matches!(err, Error::HopNoPreface), "{err}");
}
