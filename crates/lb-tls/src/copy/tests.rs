//! Both directions over in-memory pipes: every byte arrives in order, a writer slower than its
//! reader (a pipe of 100 bytes) gets what was held back, and each end sees the other's close.

use tokio::io::{duplex, AsyncReadExt, AsyncWriteExt};

use super::*;

#[tokio::test]
async fn both_directions_arrive_whole_through_slow_pipes_and_end_with_half_close() {
    // client ⇄ (a) copy (b) ⇄ server; the pipes hold 100 bytes, so writes block often.
    let (client, mut a) = duplex(100);
    let (mut b, server) = duplex(100);
    let copy = tokio::spawn(async move { both_ways(&mut a, &mut b, 8 * 1024, 16 * 1024).await });
    let up: Vec<u8> = (0..50_000u32).map(|i| (i % 251) as u8).collect();
    let down: Vec<u8> = (0..200_000u32).map(|i| (i % 241) as u8).collect();
    let (up_sent, down_sent) = (up.clone(), down.clone());
    let client_side = tokio::spawn(async move {
        let (mut read, mut write) = tokio::io::split(client);
        let writer = tokio::spawn(async move {
            write.write_all(&up_sent).await.expect("client writes");
            write.shutdown().await.expect("client closes its side");
        });
        let mut got = Vec::new();
        read.read_to_end(&mut got).await.expect("client reads");
        writer.await.expect("writer");
        got
    });
    let mut got_up = Vec::new();
    let (mut server_read, mut server_write) = tokio::io::split(server);
    let server_writer = tokio::spawn(async move {
        server_write.write_all(&down_sent).await.expect("server writes");
        server_write.shutdown().await.expect("server closes its side");
    });
    server_read.read_to_end(&mut got_up).await.expect("server reads to the client's close");
    server_writer.await.expect("server writer");
    let got_down = client_side.await.expect("client");
    assert_eq!(got_up, up, "client to server, whole and in order");
    assert_eq!(got_down, down, "server to client, whole and in order");
    copy.await.expect("copy task").expect("both directions end cleanly");
}

#[tokio::test]
async fn bytes_written_through_leave_no_buffer_behind() {
    let (mut client, mut from_client) = duplex(64);
    let (mut to_server, _server) = duplex(64);
    client.write_all(b"hello").await.expect("write");
    let mut direction = Direction::new(16 * 1024);
    let polled = poll_fn(|cx| Poll::Ready(direction.poll_copy(cx, &mut from_client, &mut to_server))).await;
    assert!(polled.is_pending(), "waits for more");
    assert_eq!(direction.held.capacity(), 0, "written through, nothing kept");
}
