//! The hop for one QUIC connection (docs/architecture.md, "The hop between lb-tls and
//! lb-proxy"): a connection to lb-proxy, the PROXY v2 header with ALPN `h3`, then HTTP/2 with
//! prior knowledge, each HTTP/3 request one HTTP/2 stream, bodies streamed both ways. With
//! `backend.multiplex`, the connection is a stream of this thread's hop connection (`hops`),
//! the PROXY header in its OPEN, as for a TLS client.
//!
//! A QUIC connection outlives lb-proxy's workers and its idle timeout: lb-proxy says GOAWAY on
//! a draining worker's hops and on a hop idle past `http_keep_alive`, then closes it once its
//! requests have ended; from the GOAWAY on, the connection's next request takes a new hop
//! (`Line`), which reaches the current worker. A request lb-proxy did not take (sent as the
//! GOAWAY crossed it) goes again on the new hop when hyper gives it back unsent, else it is
//! refused to the client with H3_REQUEST_REJECTED, which tells it the request was not processed
//! and may be sent again (RFC 9114 §4.1.1).

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{Buf, Bytes};
use http_body_util::BodyExt;
use hyper::body::{Body, Frame, Incoming};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::{mpsc, oneshot};

use crate::conn::{connect_backend, Backend};
use crate::serve::Shared;

/// Request body frames in flight from the QUIC stream to the hop, per request.
const BODY_FRAMES: usize = 4;

/// A request body fed from the QUIC stream; none when the stream had ended before the request
/// went up (then known empty: the hop's HEADERS frame ends the stream).
#[derive(Debug)]
pub(crate) struct HopBody {
    frames: Option<mpsc::Receiver<Result<Frame<Bytes>, std::io::Error>>>,
}

impl Body for HopBody {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        match &mut self.frames {
            Some(frames) => frames.poll_recv(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.frames.is_none()
    }
}

type Hop = SendRequest<HopBody>;

/// A QUIC connection's way to lb-proxy: its current hop, replaced by a new one (the same PROXY
/// header) once lb-proxy has said GOAWAY on it or it broke.
pub(crate) struct Line {
    shared: Arc<Shared>,
    /// The QUIC frontend's index, for its counters.
    frontend: usize,
    header: Box<[u8]>,
    /// Held while a new hop is opened, so that the requests then waiting share it.
    current: tokio::sync::Mutex<Hop>,
    /// New hops that could not be opened: a request that waited for `current` while one failed
    /// takes that failure as its own rather than trying again (each try may last
    /// `backend_connect_timeout`, and a hundred requests would wait for a hundred tries).
    failures: AtomicU64,
}

impl Line {
    /// The first hop, opened now; or why not, as the backend failure log says it.
    pub(crate) async fn open(shared: Arc<Shared>, frontend: usize, header: Vec<u8>) -> Result<Arc<Line>, String> {
        let current = tokio::sync::Mutex::new(connect(&shared, &header).await?);
        Ok(Arc::new(Line { shared, frontend, header: header.into(), current, failures: AtomicU64::new(0) }))
    }

    /// The hop to send on: the current one, or a new one when lb-proxy has said GOAWAY on it
    /// (hyper's `SendRequest` is closed from then on) or it broke; none (counted and logged) when
    /// lb-proxy cannot be reached.
    async fn hop(&self) -> Option<Hop> {
        let failures = self.failures.load(Ordering::Relaxed);
        let mut current = self.current.lock().await;
        if current.is_closed() {
            if self.failures.load(Ordering::Relaxed) != failures {
                return None;
            }
            match connect(&self.shared, &self.header).await {
                Ok(hop) => *current = hop,
                Err(why) => {
                    self.failures.fetch_add(1, Ordering::Relaxed);
                    self.shared.stats.frontend(self.frontend).backend_failed();
                    let address = &self.shared.config.backend.address;
                    self.shared.backend_log.warn("backend failures", || {
                        format!("backend {address} {why}: answering 502 to a request of an open QUIC connection")
                    });
                    return None;
                }
            }
        }
        Some(current.clone())
    }
}

/// A hop to lb-proxy with HTTP/2 started on it, `header` its PROXY header (in the stream's
/// OPEN on the multiplexed hop, else written first); or why not, as the backend failure log
/// says it.
async fn connect(shared: &Shared, header: &[u8]) -> Result<Hop, String> {
    match connect_backend(shared, header).await? {
        Backend::Stream(stream) => start(stream).await,
        Backend::Tcp(mut stream) => {
            write_header(&mut stream, header).await?;
            start(stream).await
        }
        Backend::Unix(mut stream) => {
            write_header(&mut stream, header).await?;
            start(stream).await
        }
    }
}

async fn write_header(io: &mut (impl AsyncWrite + Unpin), header: &[u8]) -> Result<(), String> {
    io.write_all(header).await.map_err(|e| format!("writing the PROXY header: {e}"))
}

/// Starts HTTP/2 on `io`; the connection is driven by a task of its own, which ends when the
/// hop closes.
async fn start<S>(io: S) -> Result<Hop, String>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (hop, connection) = hyper::client::conn::http2::Builder::new(Boxing)
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| format!("HTTP/2 handshake: {e}"))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    Ok(hop)
}

/// Runs hyper's tasks (two per request) on tokio, each boxed: tokio keeps a task's future in
/// place and moves the whole of it at each step of the task's life (spawn, then its end), where
/// a box is moved as a pointer (with the request's own task boxed too, 4.6 k instructions fewer
/// per request: docs/benchmarks.md, "HTTP/3 towards clients").
#[derive(Clone, Copy)]
struct Boxing;

impl<F> hyper::rt::Executor<F> for Boxing
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, task: F) {
        tokio::spawn(Box::pin(task));
    }
}

type Stream = h3::server::RequestStream<h3_quinn::BidiStream<Bytes>, Bytes>;

/// Times a request goes again on a new hop when the one it was given to closed before sending
/// it (lb-proxy drained it meanwhile): more would be a hop that closes as soon as it opens.
const RESENDS: usize = 2;

/// One HTTP/3 request through the hop: its body goes up while the response comes down.
pub(crate) async fn exchange(line: Arc<Line>, request: http::Request<()>, stream: Stream) {
    let (mut down, mut up) = stream.split();
    // What the stream already holds. Most GETs come with their stream's end in the same packet:
    // their body is then known empty, and the hop sends one HEADERS frame ending the stream
    // rather than HEADERS and, once the body is polled, an empty DATA frame (two writes, and
    // two wake-ups of lb-proxy).
    let mut reading_data = true;
    let (mut first, empty) = match now(|cx| poll_upload(&mut up, &mut reading_data, cx)) {
        Poll::Pending => (None, false),
        Poll::Ready(None) => (None, true),
        Poll::Ready(Some(frame)) => (Some(frame), false),
    };
    // A channel only for a body to come: tokio's allocates its first block of 32 frames at once.
    // With it, how the exchange ended, for an upload still under way then.
    let (frames, body, stop, stopped) = if empty {
        (None, None, None, None)
    } else {
        let (frames, body) = mpsc::channel(BODY_FRAMES);
        let (stop, stopped) = oneshot::channel();
        (Some(frames), Some(body), Some(stop), Some(stopped))
    };
    let upload = async move {
        let (Some(frames), Some(mut stopped)) = (frames, stopped) else { return };
        loop {
            let frame = match first.take() {
                Some(frame) => frame,
                None => {
                    let next = std::future::poll_fn(|cx| poll_upload(&mut up, &mut reading_data, cx));
                    let code = tokio::select! {
                        next = next => match next {
                            Some(frame) => Ok(frame),
                            None => return,
                        },
                        code = &mut stopped => Err(code.unwrap_or(h3::error::Code::H3_NO_ERROR)),
                    };
                    match code {
                        Ok(frame) => frame,
                        // The exchange ended without the rest of the body: the client stops
                        // sending it (RFC 9114 §4.1, §4.1.1) rather than the stream waiting for it.
                        Err(code) => return up.stop_sending(code),
                    }
                }
            };
            let last = !frame.as_ref().is_ok_and(Frame::is_data);
            if frames.send(frame).await.is_err() || last {
                return;
            }
        }
    };
    let body = HopBody { frames: body };
    let (parts, ()) = request.into_parts();
    let request = http::Request::from_parts(parts, body);
    let download = async move {
        let ended = respond(&line, request, &mut down).await;
        if let Some(stop) = stop {
            let _ = stop.send(ended);
        }
    };
    tokio::join!(upload, download);
}

/// Sends `request` up the line and its response down to the client; how the exchange ended:
/// H3_REQUEST_REJECTED when lb-proxy did not process the request (the client may send it again
/// on any connection), else H3_NO_ERROR (a response was sent, or the stream was reset).
async fn respond(line: &Line, mut request: http::Request<HopBody>, down: &mut Download) -> h3::error::Code {
    use h3::error::Code;
    let mut resends = 0;
    let response = loop {
        let Some(mut hop) = line.hop().await else {
            answer(down, http::StatusCode::BAD_GATEWAY).await;
            return Code::H3_NO_ERROR;
        };
        match hop.try_send_request(request).await {
            Ok(response) => break response,
            Err(mut e) => match e.take_message() {
                // Given back unsent: the hop closed first.
                Some(unsent) if resends < RESENDS => {
                    resends += 1;
                    request = unsent;
                }
                // Not sent, or sent and not processed (beyond the GOAWAY, refused).
                unsent if unsent.is_some() || unprocessed(e.error()) => {
                    down.stop_stream(Code::H3_REQUEST_REJECTED);
                    return Code::H3_REQUEST_REJECTED;
                }
                _ => {
                    answer(down, http::StatusCode::BAD_GATEWAY).await;
                    return Code::H3_NO_ERROR;
                }
            },
        }
    };
    let (parts, body) = response.into_parts();
    if down.send_response(http::Response::from_parts(parts, ())).await.is_ok() {
        relay(body, down).await;
    }
    Code::H3_NO_ERROR
}

/// lb-proxy did not process the request (RFC 9113 §8.7): its stream came after the last one
/// lb-proxy's GOAWAY named, or lb-proxy refused it; or it was never opened, the connection
/// having gone away first. (hyper fails a request whose stream opened as the GOAWAY came only
/// by its stream's own fate: vendor/hyper's change to its HTTP/2 client.)
fn unprocessed(e: &hyper::Error) -> bool {
    let h2 = std::error::Error::source(e).and_then(|s| s.downcast_ref::<h2::Error>());
    h2.is_some_and(|e| {
        e.is_remote() && (e.is_go_away() || (e.is_reset() && e.reason() == Some(h2::Reason::REFUSED_STREAM)))
    })
}

type Upload = h3::server::RequestStream<h3_quinn::RecvStream, Bytes>;
type Download = h3::server::RequestStream<h3_quinn::SendStream<Bytes>, Bytes>;

/// The request body's next frame from the QUIC stream: its data while `reading_data`, then its
/// trailers; None at its end.
fn poll_upload(
    up: &mut Upload,
    reading_data: &mut bool,
    cx: &mut Context<'_>,
) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
    if *reading_data {
        match std::task::ready!(up.poll_recv_data(cx)) {
            Ok(Some(mut data)) => return Poll::Ready(Some(Ok(Frame::data(data.copy_to_bytes(data.remaining()))))),
            Ok(None) => *reading_data = false,
            Err(e) => return Poll::Ready(Some(Err(std::io::Error::other(e.to_string())))),
        }
    }
    Poll::Ready(match std::task::ready!(up.poll_recv_trailers(cx)) {
        Ok(Some(trailers)) => Some(Ok(Frame::trailers(trailers))),
        Ok(None) => None,
        Err(e) => Some(Err(std::io::Error::other(e.to_string()))),
    })
}

/// `poll` once, with a waker that does nothing: what is ready now.
fn now<T>(poll: impl FnOnce(&mut Context<'_>) -> Poll<T>) -> Poll<T> {
    poll(&mut Context::from_waker(std::task::Waker::noop()))
}

/// The response body, frame by frame, then the end of the stream.
async fn relay(mut body: Incoming, down: &mut Download) {
    while let Some(frame) = body.frame().await {
        let sent = match frame.map(Frame::into_data) {
            Ok(Ok(data)) => down.send_data(data).await,
            Ok(Err(frame)) => match frame.into_trailers() {
                Ok(trailers) => down.send_trailers(trailers).await,
                Err(_) => Ok(()),
            },
            Err(_) => {
                // lb-proxy reset the stream: reset it towards the client too.
                down.stop_stream(h3::error::Code::H3_INTERNAL_ERROR);
                return;
            }
        };
        if sent.is_err() {
            return;
        }
    }
    let _ = down.finish().await;
}

/// A request in early data whose method is not safe to replay: 425 Too Early (RFC 8470), which
/// tells the client to send it again once the handshake is complete.
pub(crate) async fn too_early(stream: Stream) {
    let (mut down, _) = stream.split();
    answer(&mut down, http::StatusCode::TOO_EARLY).await;
}

/// An answer of our own, without a body: 502 when lb-proxy could not be asked (as lb-proxy
/// answers when its servers cannot be), 425 for early data.
async fn answer(down: &mut Download, status: http::StatusCode) {
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    if down.send_response(response).await.is_ok() {
        let _ = down.finish().await;
    }
}
