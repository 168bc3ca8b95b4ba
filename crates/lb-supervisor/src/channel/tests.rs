//! Channel tests over real socketpairs.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use serde::{Deserialize, Serialize};

use super::*;
use crate::protocol::{Settings, ToMaster, ToWorker};
use crate::ListenAddr;

type Halves = (ChannelSender, ChannelReceiver);

fn halves() -> (Halves, Halves) {
    let (a, b) = UnixStream::pair().expect("socketpair");
    (Channel::new(a).split(), Channel::new(b).split())
}

/// A receiving channel and the plain (blocking) socket that feeds it, to write any bytes.
fn raw_feed() -> (std::os::unix::net::UnixStream, ChannelReceiver) {
    let (a, b) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    b.set_nonblocking(true).expect("nonblocking");
    let (_, rx) = Channel::new(UnixStream::from_std(b).expect("register")).split();
    (a, rx)
}

fn frame(payload: &[u8], fds: u16) -> Vec<u8> {
    let len = u32::try_from(payload.len()).expect("small payload");
    let mut frame = len.to_be_bytes().to_vec();
    frame.extend(fds.to_be_bytes());
    frame.extend(payload);
    frame
}

fn write_raw(sock: &std::os::unix::net::UnixStream, bytes: &[u8], fds: &[BorrowedFd<'_>]) {
    let n = fdpass::send(sock.as_fd(), bytes, fds).expect("raw send");
    assert_eq!(n, bytes.len());
}

fn is_cloexec(fd: &impl AsFd) -> bool {
    let flags = fcntl(fd.as_fd(), FcntlArg::F_GETFD).expect("F_GETFD");
    FdFlag::from_bits_truncate(flags).contains(FdFlag::FD_CLOEXEC)
}

fn listeners(n: usize) -> Vec<TcpListener> {
    (0..n).map(|_| TcpListener::bind("127.0.0.1:0").expect("bind")).collect()
}

fn local_addr(fd: OwnedFd) -> SocketAddr {
    TcpListener::from(fd).local_addr().expect("local_addr")
}

async fn expect_invalid(rx: &mut ChannelReceiver, needle: &str) {
    let err = rx.recv::<serde_json::Value>().await.expect_err("invalid frame");
    assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    assert!(err.to_string().contains(needle), "{err:?} does not mention {needle:?}");
}

#[tokio::test]
async fn messages_round_trip() {
    let ((to_worker, mut from_worker), (to_master, mut from_master)) = halves();
    let address: ListenAddr = "127.0.0.1:8080".parse().expect("address");
    let sent = vec![
        ToWorker::Sockets { generation: 3, addresses: vec![address.clone()], last: true, canary: None },
        ToWorker::Status,
        ToWorker::BindFailed { address, error: "in use".to_owned() },
        ToWorker::SoftStop,
    ];
    for msg in &sent {
        to_worker.send(msg, &[]).await.expect("send");
    }
    for msg in &sent {
        let (got, fds) = from_master.recv::<ToWorker>().await.expect("recv").expect("a message");
        assert_eq!(&got, msg);
        assert!(fds.is_empty());
    }
    let ready = ToMaster::Ready {
        pid: 42,
        generation: 3,
        version: "0.1.0".to_owned(),
        listening: vec![],
        settings: Settings::default(),
        canary: None,
    };
    to_master.send(&ready, &[]).await.expect("send");
    let (got, _) = from_worker.recv::<ToMaster>().await.expect("recv").expect("a message");
    assert_eq!(got, ready);
}

#[tokio::test]
async fn fds_arrive_as_the_same_sockets_with_cloexec() {
    let ((tx, _), (_, mut rx)) = halves();
    let sockets = listeners(3);
    let fds: Vec<BorrowedFd<'_>> = sockets.iter().map(AsFd::as_fd).collect();
    tx.send(&ToWorker::Status, &fds).await.expect("send");
    let (_, got) = rx.recv::<ToWorker>().await.expect("recv").expect("a message");
    assert_eq!(got.len(), sockets.len());
    for (fd, original) in got.into_iter().zip(&sockets) {
        assert!(is_cloexec(&fd), "received fd without FD_CLOEXEC");
        assert_ne!(fd.as_raw_fd(), original.as_raw_fd());
        assert_eq!(local_addr(fd), original.local_addr().expect("local_addr"));
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Batch {
    index: usize,
    ports: Vec<u16>,
    padding: String,
}

#[tokio::test]
async fn many_fds_in_batches_keep_their_order() {
    // 200 sockets as 64 + 64 + 64 + 8, each frame padded past the socket buffer so that it goes
    // out in several writes while the receiver reads concurrently.
    let sockets = listeners(200);
    let ports: Vec<u16> = sockets.iter().map(|l| l.local_addr().expect("local_addr").port()).collect();
    let ((tx, _keep_rx), (_keep_tx, mut rx)) = halves();
    let sender = tokio::spawn(async move {
        for (index, batch) in sockets.chunks(MAX_FDS_PER_MESSAGE).enumerate() {
            let fds: Vec<BorrowedFd<'_>> = batch.iter().map(AsFd::as_fd).collect();
            let ports = batch.iter().map(|l| l.local_addr().expect("local_addr").port()).collect();
            let msg = Batch { index, ports, padding: "x".repeat(300_000) };
            tx.send(&msg, &fds).await.expect("send");
        }
    });
    let mut received = Vec::new();
    for index in 0..4 {
        let (batch, fds) = rx.recv::<Batch>().await.expect("recv").expect("a batch");
        assert_eq!(batch.index, index);
        let got: Vec<u16> = fds.into_iter().map(|fd| local_addr(fd).port()).collect();
        assert_eq!(got, batch.ports, "fds of batch {index} out of order");
        received.extend(got);
    }
    sender.await.expect("sender");
    assert_eq!(received, ports);
}

#[tokio::test]
async fn a_frame_split_across_many_small_writes() {
    let (raw, mut rx) = raw_feed();
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let bound = listener.local_addr().expect("local_addr");
    let first = ToWorker::Bound { address: ListenAddr::Tcp(bound) };
    let second = ToWorker::HardStop;
    let mut bytes = frame(&serde_json::to_vec(&first).expect("json"), 1);
    bytes.extend(frame(&serde_json::to_vec(&second).expect("json"), 0));
    let writer = std::thread::spawn(move || {
        for (i, chunk) in bytes.chunks(3).enumerate() {
            let fds = if i == 0 { vec![listener.as_fd()] } else { vec![] };
            write_raw(&raw, chunk, &fds);
            std::thread::sleep(Duration::from_millis(1));
        }
    });
    let (got, fds) = rx.recv::<ToWorker>().await.expect("recv").expect("first");
    assert_eq!(got, first);
    assert_eq!(fds.into_iter().map(local_addr).collect::<Vec<_>>(), vec![bound]);
    let (got, fds) = rx.recv::<ToWorker>().await.expect("recv").expect("second");
    assert_eq!(got, second);
    assert!(fds.is_empty());
    writer.join().expect("writer");
    assert!(rx.recv::<ToWorker>().await.expect("eof").is_none());
}

#[tokio::test]
async fn an_oversized_length_is_invalid_data_and_stays() {
    let (raw, mut rx) = raw_feed();
    write_raw(&raw, &[0xff, 0xff, 0xff, 0xff, 0, 0], &[]);
    expect_invalid(&mut rx, "limit").await;
    // The stream is out of sync for good: the same answer again, not a guess at the next frame.
    expect_invalid(&mut rx, "limit").await;
}

#[tokio::test]
async fn too_many_announced_fds_is_invalid_data() {
    let (raw, mut rx) = raw_feed();
    write_raw(&raw, &frame(b"{}", 65), &[]);
    expect_invalid(&mut rx, "65 fds").await;
}

#[tokio::test]
async fn missing_fds_are_invalid_data() {
    let (raw, mut rx) = raw_feed();
    write_raw(&raw, &frame(b"{}", 2), &[raw.as_fd()]);
    expect_invalid(&mut rx, "only 1 arrived").await;
}

#[tokio::test]
async fn unclaimed_fds_are_invalid_data() {
    let (raw, mut rx) = raw_feed();
    write_raw(&raw, &frame(b"{}", 0), &[raw.as_fd()]);
    let (_, fds) = rx.recv::<serde_json::Value>().await.expect("recv").expect("a message");
    assert!(fds.is_empty());
    expect_invalid(&mut rx, "no frame announced").await;
}

#[tokio::test]
async fn malformed_json_costs_only_its_frame() {
    let (raw, mut rx) = raw_feed();
    write_raw(&raw, &frame(b"hello", 1), &[raw.as_fd()]);
    write_raw(&raw, &frame(br#"{"type":"status"}"#, 0), &[]);
    expect_invalid(&mut rx, "malformed message").await;
    let (got, fds) = rx.recv::<ToWorker>().await.expect("recv").expect("the next frame");
    assert_eq!(got, ToWorker::Status);
    assert!(fds.is_empty());
}

#[tokio::test]
async fn eof_is_none_and_eof_mid_frame_is_an_error() {
    let ((tx, rx), (_, mut peer)) = halves();
    tx.send(&ToWorker::SoftStop, &[]).await.expect("send");
    drop((tx, rx));
    let (got, _) = peer.recv::<ToWorker>().await.expect("recv").expect("sent before close");
    assert_eq!(got, ToWorker::SoftStop);
    assert!(peer.recv::<ToWorker>().await.expect("eof").is_none());
    assert!(peer.recv::<ToWorker>().await.expect("still eof").is_none());

    let (raw, mut rx) = raw_feed();
    write_raw(&raw, frame(b"{}", 0).get(..4).expect("prefix"), &[]);
    drop(raw);
    let err = rx.recv::<ToWorker>().await.expect_err("truncated frame");
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
}

#[tokio::test]
async fn from_inherited_fd_sets_cloexec_and_works() {
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().expect("socketpair");
    // As inherited across exec: close-on-exec cleared, blocking.
    fcntl(&ours, FcntlArg::F_SETFD(FdFlag::empty())).expect("clear cloexec");
    let channel = Channel::from_inherited_fd(OwnedFd::from(ours)).expect("channel");
    assert!(is_cloexec(&channel.stream));
    let (tx, _rx) = channel.split();
    theirs.set_nonblocking(true).expect("nonblocking");
    let (_, mut peer) = Channel::new(UnixStream::from_std(theirs).expect("register")).split();
    tx.send(&ToMaster::Ack, &[]).await.expect("send");
    let (got, _) = peer.recv::<ToMaster>().await.expect("recv").expect("a message");
    assert_eq!(got, ToMaster::Ack);
}

#[tokio::test]
async fn from_inherited_fd_refuses_other_fds() {
    let file = tempfile::tempfile().expect("tempfile");
    assert!(Channel::from_inherited_fd(OwnedFd::from(file)).is_err());
    let udp = std::net::UdpSocket::bind("127.0.0.1:0").expect("udp");
    assert!(Channel::from_inherited_fd(OwnedFd::from(udp)).is_err());
    let (datagram, _) = std::os::unix::net::UnixDatagram::pair().expect("pair");
    assert!(Channel::from_inherited_fd(OwnedFd::from(datagram)).is_err());
}

#[derive(Debug, Serialize, Deserialize)]
struct Tagged {
    task: usize,
    seq: usize,
    body: String,
}

#[tokio::test]
async fn concurrent_senders_never_interleave() {
    let ((tx, _keep_rx), (_keep_tx, mut rx)) = halves();
    let tasks: Vec<_> = (0..8)
        .map(|task| {
            let tx = tx.clone();
            tokio::spawn(async move {
                for seq in 0..20 {
                    let body = char::from(b'a' + u8::try_from(task).expect("small")).to_string().repeat(50_000);
                    tx.send(&Tagged { task, seq, body }, &[]).await.expect("send");
                }
            })
        })
        .collect();
    let mut next = [0usize; 8];
    for _ in 0..160 {
        let (msg, _) = rx.recv::<Tagged>().await.expect("recv").expect("a message");
        let expected = next.get_mut(msg.task).expect("known task");
        assert_eq!(msg.seq, *expected);
        *expected += 1;
        assert_eq!(msg.body.len(), 50_000);
        assert!(msg.body.bytes().all(|b| usize::from(b - b'a') == msg.task));
    }
    for task in tasks {
        task.await.expect("task");
    }
}

#[tokio::test]
async fn a_send_cancelled_mid_frame_closes_the_sending_side() {
    let ((tx, _keep_rx), (_keep_tx, _peer)) = halves();
    let big = "x".repeat(4 << 20);
    let sending = tokio::time::timeout(Duration::from_millis(50), tx.send(&big, &[])).await;
    assert!(sending.is_err(), "a 4 MiB frame cannot fit while nobody reads");
    let err = tx.send(&ToWorker::Status, &[]).await.expect_err("torn channel");
    assert_eq!(err.kind(), io::ErrorKind::BrokenPipe);
}

#[tokio::test]
async fn sending_beyond_the_limits_is_refused() {
    let ((tx, _keep_rx), (_keep_tx, _peer)) = halves();
    let err = tx.send(&"x".repeat(MAX_PAYLOAD), &[]).await.expect_err("too big");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    let sockets = listeners(1);
    let fds: Vec<BorrowedFd<'_>> = (0..=MAX_FDS_PER_MESSAGE).filter_map(|_| sockets.first()).map(AsFd::as_fd).collect();
    let err = tx.send(&ToWorker::Status, &fds).await.expect_err("too many fds");
    assert_eq!(err.kind(), io::ErrorKind::InvalidInput);
    // Refused before anything went out: the channel still works.
    tx.send(&ToWorker::Status, &[]).await.expect("send");
}

#[test]
fn frame_layout() {
    let bytes = encode(&ToWorker::Status, 2).expect("encode");
    let payload = br#"{"type":"status"}"#;
    assert_eq!(bytes, frame(payload, 2));
}
