//! An HTTP/1.1 client on hyper's connection API: one connection per request ([`get`],
//! [`send`]), or a kept-alive [`Connection`] for several; HTTP/2 with prior knowledge
//! ([`H2Connection`]); bodies generated on the fly and
//! downloads counted as they stream, never held whole.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use anyhow::{bail, Context as _};
use bytes::Bytes;
use http::{HeaderMap, Method, Request, Version};
use http_body::{Body, Frame, SizeHint};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Empty, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

/// Every client call gives up after this long (tests that need longer say so).
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The body type the client sends.
pub type ClientBody = BoxBody<Bytes, Infallible>;

/// A response read whole (use [`download`] for large ones).
#[derive(Debug, Clone)]
pub struct Response {
    pub status: u16,
    pub version: Version,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// The body as (lossy) UTF-8.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("response body is not JSON ({e}): {}", self.text()))
    }

    /// The first value of header `name`.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The `X-Server` header the test servers set: which server answered.
    pub fn server(&self) -> Option<&str> {
        self.header("x-server")
    }
}

/// A body of `n` bytes produced 64 KiB at a time from one shared buffer: a gigabyte costs no
/// memory. Its size hint is exact, so hyper sends it with `Content-Length`.
#[derive(Debug)]
pub struct GeneratedBody {
    remaining: u64,
    chunk: Bytes,
}

impl GeneratedBody {
    pub const CHUNK: usize = 64 * 1024;

    pub fn new(n: u64) -> GeneratedBody {
        let pattern: Vec<u8> = (0..Self::CHUNK).map(|i| b'a' + (i % 26) as u8).collect();
        GeneratedBody { remaining: n, chunk: Bytes::from(pattern) }
    }
}

impl Body for GeneratedBody {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(mut self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if self.remaining == 0 {
            return Poll::Ready(None);
        }
        let n = self.remaining.min(Self::CHUNK as u64);
        self.remaining -= n;
        Poll::Ready(Some(Ok(Frame::data(self.chunk.slice(..n as usize)))))
    }

    fn is_end_stream(&self) -> bool {
        self.remaining == 0
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.remaining)
    }
}

/// An empty body.
pub fn empty() -> ClientBody {
    Empty::new().boxed()
}

/// A body holding `bytes`.
pub fn full(bytes: impl Into<Bytes>) -> ClientBody {
    Full::new(bytes.into()).boxed()
}

/// A `GET path` request for `addr` (with its `Host` header).
pub fn get_request(addr: SocketAddr, path: &str) -> Request<ClientBody> {
    request(Method::GET, addr, path, empty())
}

/// A request for `addr` with `Host: addr` set.
pub fn request(method: Method, addr: SocketAddr, path: &str, body: ClientBody) -> Request<ClientBody> {
    let mut req = Request::new(body);
    *req.method_mut() = method;
    *req.uri_mut() = path.parse().expect("a valid request path");
    req.headers_mut().insert(http::header::HOST, addr.to_string().parse().expect("an address is a valid Host"));
    req
}

/// A client connection that can carry several requests one after another (keep-alive).
#[derive(Debug)]
pub struct Connection {
    sender: SendRequest<ClientBody>,
    addr: SocketAddr,
    local: SocketAddr,
}

impl Connection {
    /// Connects to `addr` and runs the HTTP/1.1 handshake.
    pub async fn open(addr: SocketAddr) -> anyhow::Result<Connection> {
        let stream = tokio::time::timeout(REQUEST_TIMEOUT, TcpStream::connect(addr))
            .await
            .context("connect timed out")?
            .with_context(|| format!("connecting to {addr}"))?;
        let _ = stream.set_nodelay(true);
        let local = stream.local_addr()?;
        let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.context("HTTP handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(Connection { sender, addr, local })
    }

    /// The client side's own address (what the proxy sees as the client).
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// True when the connection can no longer carry requests (the peer closed it).
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed()
    }

    /// `GET path` on this connection, response read whole.
    pub async fn get(&mut self, path: &str) -> anyhow::Result<Response> {
        let req = get_request(self.addr, path);
        self.send(req).await
    }

    /// Sends `req` on this connection and reads the response whole (within 30 s).
    pub async fn send(&mut self, req: Request<ClientBody>) -> anyhow::Result<Response> {
        tokio::time::timeout(REQUEST_TIMEOUT, async {
            self.sender.ready().await.context("connection not ready (closed?)")?;
            let response = self.sender.send_request(req).await.context("sending the request")?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.context("reading the response body")?.to_bytes();
            Ok(Response { status: parts.status.as_u16(), version: parts.version, headers: parts.headers, body })
        })
        .await
        .context("request timed out")?
    }

    /// Sends `req` and counts the response body's bytes as they arrive, keeping none of them.
    pub async fn send_counted(
        &mut self,
        req: Request<ClientBody>,
        within: Duration,
    ) -> anyhow::Result<(u16, HeaderMap, u64)> {
        tokio::time::timeout(within, async {
            self.sender.ready().await.context("connection not ready (closed?)")?;
            let response = self.sender.send_request(req).await.context("sending the request")?;
            let (parts, mut body) = response.into_parts();
            let mut n = 0u64;
            while let Some(frame) = body.frame().await {
                let frame = frame.with_context(|| format!("reading the response body after {n} bytes"))?;
                if let Some(data) = frame.data_ref() {
                    n += data.len() as u64;
                }
            }
            Ok((parts.status.as_u16(), parts.headers, n))
        })
        .await
        .with_context(|| format!("request timed out after {within:?}"))?
    }
}

/// An HTTP/2 connection with prior knowledge (h2c), as a client that multiplexes: clone it to
/// send requests on it from several tasks at once.
#[derive(Debug, Clone)]
pub struct H2Connection {
    sender: hyper::client::conn::http2::SendRequest<ClientBody>,
    addr: SocketAddr,
}

impl H2Connection {
    /// Connects to `addr` and runs the HTTP/2 handshake (preface and SETTINGS).
    pub async fn open(addr: SocketAddr) -> anyhow::Result<H2Connection> {
        let stream = tokio::time::timeout(REQUEST_TIMEOUT, TcpStream::connect(addr))
            .await
            .context("connect timed out")?
            .with_context(|| format!("connecting to {addr}"))?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) =
            hyper::client::conn::http2::handshake(hyper_util::rt::TokioExecutor::new(), TokioIo::new(stream))
                .await
                .context("HTTP/2 handshake")?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(H2Connection { sender, addr })
    }

    /// True once the server has said GOAWAY or closed the connection: no new stream goes on it.
    pub fn is_closed(&self) -> bool {
        self.sender.is_closed() || !self.sender.is_ready()
    }

    /// `GET path` as a new stream, response read whole (within 30 s).
    pub async fn get(&self, path: &str) -> anyhow::Result<Response> {
        let req = Request::builder()
            .uri(format!("http://{}{path}", self.addr))
            .version(Version::HTTP_2)
            .body(empty())
            .expect("a valid request");
        let mut sender = self.sender.clone();
        tokio::time::timeout(REQUEST_TIMEOUT, async {
            sender.ready().await.context("connection not ready (GOAWAY or closed)")?;
            let response = sender.send_request(req).await.context("sending the request")?;
            let (parts, body) = response.into_parts();
            let body = body.collect().await.context("reading the response body")?.to_bytes();
            Ok(Response { status: parts.status.as_u16(), version: parts.version, headers: parts.headers, body })
        })
        .await
        .context("request timed out")?
    }
}

/// `GET path` on a new connection.
pub async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<Response> {
    Connection::open(addr).await?.get(path).await
}

/// Sends `req` on a new connection.
pub async fn send(addr: SocketAddr, req: Request<ClientBody>) -> anyhow::Result<Response> {
    Connection::open(addr).await?.send(req).await
}

/// `method path` with a generated body of `n` bytes (never in memory) on a new connection;
/// the response is read whole.
pub async fn upload(
    addr: SocketAddr,
    method: Method,
    path: &str,
    n: u64,
    within: Duration,
) -> anyhow::Result<Response> {
    let mut conn = Connection::open(addr).await?;
    let req = request(method, addr, path, GeneratedBody::new(n).boxed());
    let (status, headers, body) = tokio::time::timeout(within, async {
        conn.sender.ready().await?;
        let response = conn.sender.send_request(req).await?;
        let (parts, body) = response.into_parts();
        let body = body.collect().await?.to_bytes();
        anyhow::Ok((parts.status, parts.headers, body))
    })
    .await
    .with_context(|| format!("upload timed out after {within:?}"))??;
    Ok(Response { status: status.as_u16(), version: Version::HTTP_11, headers, body })
}

/// `GET path` on a new connection, counting the body's bytes as they stream.
pub async fn download(addr: SocketAddr, path: &str, within: Duration) -> anyhow::Result<(u16, u64)> {
    let mut conn = Connection::open(addr).await?;
    let (status, _, n) = conn.send_counted(get_request(addr, path), within).await?;
    Ok((status, n))
}

/// `GET path` on a new connection; fails unless the status is 200.
pub async fn get_ok(addr: SocketAddr, path: &str) -> anyhow::Result<Response> {
    let r = get(addr, path).await?;
    if r.status != 200 {
        bail!("GET {path}: status {} ({})", r.status, r.text());
    }
    Ok(r)
}
