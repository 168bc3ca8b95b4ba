//! The record count over any cut of the bytes, and the stream in a real session: records that
//! arrive together are all read, and a read that would find nothing waits for the socket.

use std::io::{Read as _, Write as _};
use std::time::Duration;

use openssl::ssl::{Ssl, SslContext, SslContextBuilder, SslMethod, SslVerifyMode};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;

use super::*;

fn record(body: usize) -> Vec<u8> {
    let mut r = vec![23, 3, 3];
    r.extend_from_slice(&u16::try_from(body).unwrap_or(u16::MAX).to_be_bytes());
    r.resize(RECORD_HEADER + body, 0xaa);
    r
}

#[test]
fn counts_records_however_the_bytes_are_cut() {
    let stream: Vec<u8> = [record(0), record(1), record(300), record(16401), record(2)].concat();
    for cut in [1, 2, 4, 5, 6, 7, 300, 305, 4096, stream.len()] {
        let mut records = Records::default();
        let mut counts = Vec::new();
        for chunk in stream.chunks(cut) {
            records.feed(chunk);
            counts.push(records.complete);
        }
        assert_eq!(records.complete, 5, "cut {cut}");
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
    }
    let mut records = Records::default();
    records.feed(&stream[..stream.len() - 1]);
    assert_eq!(records.complete, 4, "the last record is one byte short");
}

/// A server context with a fresh self-signed P-256 certificate, reading ahead as lb-tls does.
fn server() -> SslContext {
    let mut b = crate::test_server::self_signed("drained.test");
    crate::ffi::set_read_ahead(&mut b);
    b.build()
}

/// Reads exactly `want` bytes, or fails after a few seconds (a read wrongly left waiting).
async fn read_exactly(tls: &mut Drained<UnixStream>, want: usize) -> Vec<u8> {
    let mut got = vec![0; want];
    tokio::time::timeout(Duration::from_secs(5), tls.read_exact(&mut got))
        .await
        .expect("the bytes came in time")
        .expect("read");
    got
}

#[tokio::test]
async fn records_that_arrive_together_are_all_read() {
    let (ours, theirs) = UnixStream::pair().expect("a socket pair");
    let theirs = theirs.into_std().expect("a std socket");
    theirs.set_nonblocking(false).expect("blocking");
    // The client: one record, then (once answered) three records in a row, then one more.
    let client = std::thread::spawn(move || {
        let mut ctx = SslContextBuilder::new(SslMethod::tls_client()).expect("a context");
        ctx.set_verify(SslVerifyMode::NONE);
        let ssl = Ssl::new(&ctx.build()).expect("an ssl");
        let mut tls = ssl.connect(theirs).expect("a handshake");
        tls.write_all(b"a").expect("write");
        let mut answer = [0u8; 1];
        tls.read_exact(&mut answer).expect("the answer");
        for piece in [&b"one"[..], b"two", b"three"] {
            tls.write_all(piece).expect("write");
        }
        tls.read_exact(&mut answer).expect("the answer");
        tls.write_all(b"last").expect("write");
        tls.read_exact(&mut answer).expect("the answer");
    });
    let mut tls = TlsStream::new(Ssl::new(&server()).expect("an ssl"), Socket::new(ours)).expect("a stream");
    tls.accept().await.expect("a handshake");
    let mut tls = Drained::new(tls);
    assert_eq!(read_exactly(&mut tls, 1).await, b"a");
    // Nothing more yet: the read waits (and from then on the stream knows the socket is empty).
    let mut more = [0u8; 16];
    assert!(tokio::time::timeout(Duration::from_millis(50), tls.read(&mut more)).await.is_err());
    tls.write_all(b"!").await.expect("answer");
    // The three records land in the socket before the next read, which takes them all at once.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(read_exactly(&mut tls, 11).await, b"onetwothree");
    tls.write_all(b"!").await.expect("answer");
    assert_eq!(read_exactly(&mut tls, 4).await, b"last");
    tls.write_all(b"!").await.expect("answer");
    client.join().expect("the client");
}
