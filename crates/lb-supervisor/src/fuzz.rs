//! For the fuzzer (`fuzz/`, targets `control_socket` and `worker_channel`): the bytes a peer
//! sends, over a real socketpair, through the very code that reads them: the control socket's
//! connection loop, and the worker channel's frame receiver on either side. One input is one
//! connection, written whole and then closed, served on a runtime of the calling thread.
//!
//! Writes go through `fdpass::send` (MSG_NOSIGNAL): a fuzz binary's `main` is libFuzzer's, which
//! leaves SIGPIPE deadly, and the reader may close first (a line over the limit).

use std::fmt::Debug;
use std::io;
use std::os::fd::AsFd;
use std::sync::OnceLock;

use serde::de::DeserializeOwned;
use serde::Serialize;
use tokio::io::Interest;
use tokio::net::UnixStream;

use crate::channel::{encode, Channel, HEADER_LEN};
use crate::control::{connection, MAX_LINE};
use crate::fdpass;
use crate::protocol::{ToMaster, ToWorker};
use crate::{Request, Response};

/// An input starting with this byte stands for its rest with the last line repeated past the
/// control socket's line limit: libFuzzer's inputs are a few KiB, the limit is 64 KiB. (The last
/// line only: repeating whole lines would make thousands of requests of one input.)
pub const REPEAT: u8 = b'*';

/// The control connection's answers to `bytes` (see [`REPEAT`]), each decoded.
///
/// # Panics
/// When an answer is not one JSON [`Response`] per line, when a request line goes unanswered
/// (or a line is answered twice), or when a request the master decoded does not decode again, equal, from its
/// own encoding. Never on malformed requests as such (they are answered with an error).
pub fn control_connection(bytes: &[u8]) -> Vec<Response> {
    let input = match bytes.split_first() {
        Some((&REPEAT, rest)) => {
            let (lines, last) = rest.split_at(rest.iter().rposition(|&b| b == b'\n').map_or(0, |at| at + 1));
            lines.iter().chain(last.iter().cycle().take(MAX_LINE + last.len())).copied().collect()
        }
        _ => bytes.to_vec(),
    };
    let answers = block_on(async {
        let (client, server) = UnixStream::pair()?;
        let serving = tokio::spawn(connection(server, |request: Request| async move {
            let line = serde_json::to_string(&request).unwrap_or_default();
            let again: Option<Request> = serde_json::from_str(&line).ok();
            assert_eq!(again.as_ref(), Some(&request), "{request:?} encoded as {line}");
            Response::Runtime { output: line }
        }));
        // The write's failure is the master closing first (a line over the limit): expected.
        let (answers, _) = tokio::join!(read_all(&client), write_all_then_close(&client, &input));
        // A failed check in the handler panics in the connection's task: carried over here.
        if let Err(e) = serving.await {
            if e.is_panic() {
                std::panic::resume_unwind(e.into_panic());
            }
        }
        Ok(answers)
    });
    // One answer per line that is not blank, up to and including a line over the limit.
    let mut expected = 0;
    for line in input.split(|&b| b == b'\n') {
        if line.len() > MAX_LINE {
            expected += 1;
            break;
        }
        expected += usize::from(!line.trim_ascii().is_empty());
    }
    let answers: Vec<&[u8]> = answers.split(|&b| b == b'\n').filter(|l| !l.is_empty()).collect();
    assert_eq!(answers.len(), expected, "answers to {expected} request lines");
    answers
        .iter()
        .map(|line| match serde_json::from_slice(line) {
            Ok(response) => response,
            Err(e) => panic!("answer {:?} is not a response: {e}", String::from_utf8_lossy(line)),
        })
        .collect()
}

/// How many messages the worker channel's receiver decoded from `bytes`, as a worker reading
/// the master and as the master reading a worker.
///
/// # Panics
/// When a decoded message, encoded again, does not decode to itself. Never on malformed frames
/// as such (they are errors).
pub fn channel_frames(bytes: &[u8]) -> (usize, usize) {
    block_on(async { Ok((receive::<ToWorker>(bytes).await?, receive::<ToMaster>(bytes).await?)) })
}

async fn receive<T: Serialize + DeserializeOwned + PartialEq + Debug>(bytes: &[u8]) -> io::Result<usize> {
    let (peer, ours) = UnixStream::pair()?;
    let (_sender, mut receiver) = Channel::new(ours).split();
    let receiving = async {
        let mut decoded = 0;
        // Each frame, decoded or not, takes its header's bytes: more attempts than that are
        // the errors that stay (an impossible header, a cut frame), reported again each time.
        for _ in 0..bytes.len() / HEADER_LEN + 2 {
            match receiver.recv::<T>().await {
                Ok(None) => break,
                Ok(Some((message, fds))) => {
                    decoded += 1;
                    let frame = encode(&message, fds.len())?;
                    let again: T = serde_json::from_slice(frame.get(HEADER_LEN..).unwrap_or_default())?;
                    assert_eq!(again, message, "re-encoded as {}", String::from_utf8_lossy(&frame));
                }
                Err(_) => {}
            }
        }
        Ok::<_, io::Error>(decoded)
    };
    let (decoded, _) = tokio::join!(receiving, write_all_then_close(&peer, bytes));
    decoded
}

async fn write_all_then_close(stream: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        stream.writable().await?;
        match stream.try_io(Interest::WRITABLE, || fdpass::send(stream.as_fd(), bytes, &[])) {
            Ok(n) => bytes = bytes.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    socket2::SockRef::from(stream).shutdown(std::net::Shutdown::Write)
}

async fn read_all(stream: &UnixStream) -> Vec<u8> {
    let mut answers = Vec::new();
    let mut chunk = [0u8; 16 << 10];
    while stream.readable().await.is_ok() {
        match stream.try_read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => answers.extend_from_slice(chunk.get(..n).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(_) => break,
        }
    }
    answers
}

/// Runs `work` on this thread's runtime; an input whose sockets could not even be made counts
/// as nothing received.
fn block_on<T: Default>(work: impl std::future::Future<Output = io::Result<T>>) -> T {
    static RUNTIME: OnceLock<Option<tokio::runtime::Runtime>> = OnceLock::new();
    let runtime = RUNTIME.get_or_init(|| tokio::runtime::Builder::new_current_thread().enable_io().build().ok());
    match runtime {
        Some(runtime) => runtime.block_on(work).unwrap_or_default(),
        None => T::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_request_line_is_answered_and_a_long_line_closes() {
        let answers =
            control_connection(b"{\"command\":\"show_proc\"}\n\nnot json\n{\"command\":\"runtime\",\"line\":\"x\"}");
        assert_eq!(answers.len(), 3, "{answers:?}");
        assert!(matches!(&answers[1], Response::Error { message } if message.starts_with("malformed request")));
        let answers = control_connection(b"*{\"command\":\"reload\"} ");
        assert!(
            matches!(&answers[..], [Response::Error { message }] if message.contains("longer than")),
            "{answers:?}"
        );
    }

    #[test]
    fn frames_decode_on_their_side_and_bad_ones_are_skipped() {
        let frame = |json: &str| {
            let mut frame = u32::try_from(json.len()).unwrap_or(0).to_be_bytes().to_vec();
            frame.extend([0, 0]);
            frame.extend(json.as_bytes());
            frame
        };
        let mut bytes = frame(r#"{"type":"soft_stop"}"#);
        bytes.extend(frame(r#"{"type":"status","connections":3}"#));
        bytes.extend(frame(r#"{"type":"no_such_message"}"#));
        assert_eq!(channel_frames(&bytes), (2, 1));
        assert_eq!(channel_frames(&[0xff; 6]), (0, 0), "a frame past the payload limit");
    }
}
