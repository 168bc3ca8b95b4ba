//! One client connection: the optional PROXY header from a load balancer in front, the TLS
//! handshake (both within `handshake_timeout`), the backend connection (within
//! `backend_connect_timeout`), the PROXY header to the backend, then a bidirectional copy with
//! half-close until both directions are done, or a hard stop. With `backend.multiplex`, the
//! backend connection is a stream of this thread's hop connection (`hops`), the PROXY header
//! its OPEN.
//!
//! The backend is connected only after the handshake succeeded: a failed handshake never shows
//! up at lb-proxy as a connection without a PROXY header.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lb_supervisor::hop::HopStream;
use lb_supervisor::{Quiet, Shutdown};
use openssl::ssl::Ssl;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpStream, UnixStream};

use crate::config::{BackendAddr, WriteProxy};
use crate::copy;
use crate::counted::Counted;
use crate::drained::{Drained, ReadReady, Socket};
use crate::ffi;
use crate::library::reason_words;
use crate::proxy_header;
use crate::serve::{Admission, Shared};
use crate::stats::{Failure, FrontendStats};
use crate::stream::TlsStream;

/// An accepted client socket.
#[derive(Debug)]
pub(crate) enum Client {
    Tcp { stream: TcpStream, peer: SocketAddr, local: Option<SocketAddr> },
    Unix(UnixStream),
}

const TO_BACKEND_BUF: usize = 8 * 1024;
/// The largest TLS record's plaintext.
const TO_CLIENT_BUF: usize = 16 * 1024;

/// How long a close_notify to a client we are dropping may take.
const CLOSE_GRACE: Duration = Duration::from_secs(1);

pub(crate) async fn handle(
    admission: Admission,
    shared: Arc<Shared>,
    frontend: usize,
    client: Client,
    mut shutdown: Shutdown,
) {
    // The stop is polled again only when it wakes the task (see `Quiet`), not at every wake-up
    // of the copy (500 instructions a request).
    tokio::select! {
        biased;
        _ = async {
            match client {
                Client::Tcp { stream, peer, local } => serve(&shared, frontend, stream, Some(peer), local).await,
                Client::Unix(stream) => serve(&shared, frontend, stream, None, None).await,
            }
        } => {}
        _ = Quiet::new(shutdown.stopped()) => {}
    }
    drop(admission);
}

async fn serve<S>(shared: &Shared, frontend: usize, mut stream: S, peer: Option<SocketAddr>, local: Option<SocketAddr>)
where
    S: AsyncRead + AsyncWrite + AckNow + ReadReady + Unpin + Send,
{
    let config = &shared.config;
    let fe = &config.frontends[frontend];
    let started = Instant::now();
    let timeout = config.global.handshake_timeout;
    let who = |client: Option<SocketAddr>| client.map_or_else(|| "unix".to_owned(), |c| c.to_string());
    let stats = shared.stats.frontend(frontend);
    let handshake = async {
        let received = match fe.proxy_proxy {
            true => Some(proxy_header::read(&mut stream).await.map_err(|e| (Failure::ProxyHeader, e))?),
            false => None,
        };
        let mut ssl = Ssl::new(&fe.acceptor.initial).map_err(|e| (Failure::Other, e.to_string()))?;
        ffi::shed_handshake_config(&mut ssl);
        let mut tls = TlsStream::new(ssl, Socket::new(stream)).map_err(|e| (Failure::Other, e.to_string()))?;
        match tls.accept().await {
            Ok(()) => {
                tls.get_ref().get_ref().ack_now();
                tls.send_tickets().await;
                Ok((received, tls))
            }
            Err(e) => {
                let reason = handshake_reason(&e, tls.ssl().servername(openssl::ssl::NameType::HOST_NAME));
                Err((Failure::of_reason(&reason), reason))
            }
        }
    };
    // Boxed, as the backend's connect below, and freed once done: inline, its state (the
    // PROXY header read, the handshake's own futures) would be room the connection's task
    // keeps for its whole life.
    let (received, mut tls) = match tokio::time::timeout(timeout, Box::pin(handshake)).await {
        Ok(Ok(done)) => done,
        Ok(Err((failure, reason))) => {
            stats.failed(failure);
            shared.handshake_log.warn("handshake failures", || {
                format!("handshake failed: client {} on {}: {reason}", who(peer), fe.bind)
            });
            return;
        }
        Err(_) => {
            stats.failed(Failure::Timeout);
            shared.handshake_log.warn("handshake failures", || {
                format!("handshake failed: client {} on {}: no handshake within {timeout:?}", who(peer), fe.bind)
            });
            return;
        }
    };
    let ssl = tls.ssl();
    stats.handshake(ssl.session_reused(), ssl.version_str(), ssl.current_cipher().map(|c| c.name()));
    let (client, header) = backend_header(config.backend.write_proxy, received, peer, local, tls.ssl());
    let address = &config.backend.address;
    // The connect is boxed: its state is freed once done, not kept in the connection's task
    // for its whole life.
    let why = match Box::pin(connect_backend(shared, &header)).await {
        // The header went in the stream's OPEN.
        Ok(Backend::Stream(stream)) => return forward(tls, stream, Vec::new(), stats).await,
        Ok(Backend::Tcp(backend)) => return forward(tls, backend, header, stats).await,
        Ok(Backend::Unix(backend)) => return forward(tls, backend, header, stats).await,
        Err(why) => why,
    };
    stats.backend_failed();
    shared.backend_log.warn("backend failures", || {
        format!(
            "backend {address} {why}: closing client {} on {} after {} ms",
            who(client),
            fe.bind,
            started.elapsed().as_millis()
        )
    });
    close(&mut tls).await;
}

/// The client the backend is told of, and the PROXY header that tells it. A function of its
/// own so that the header received is not kept for the connection's life (an async function
/// keeps room for a borrowed local until its scope ends).
fn backend_header(
    write_proxy: WriteProxy,
    received: Option<proxy_header::Received>,
    peer: Option<SocketAddr>,
    local: Option<SocketAddr>,
    ssl: &openssl::ssl::SslRef,
) -> (Option<SocketAddr>, Vec<u8>) {
    let (client, local) = match received.as_ref().and_then(|r| r.addresses) {
        Some((client, local)) => (Some(client), Some(local)),
        None => (peer, local),
    };
    let header = match write_proxy {
        WriteProxy::V2 => proxy_header::v2(client, local, ssl),
        WriteProxy::V1 => proxy_header::v1(client, local),
        // Passed on as received, so the backend still learns the real client.
        WriteProxy::None => received.map(|r| r.bytes).unwrap_or_default(),
    };
    (client, header)
}

/// Acknowledge what the client sent without the kernel's delayed-ACK wait. A TLS 1.3 handshake
/// ends with the client's Finished; without tickets (`session_tickets: false`) the server has
/// nothing to send after it, and a client that leaves Nagle on then holds its first request
/// until our ACK, which the kernel delays by up to 40 ms. (With tickets, the ticket sent right
/// after the handshake carries the ACK.)
pub(crate) trait AckNow {
    fn ack_now(&self);
}

impl AckNow for TcpStream {
    fn ack_now(&self) {
        #[cfg(target_os = "linux")]
        {
            let _ = socket2::SockRef::from(self).set_tcp_quickack(true);
        }
    }
}

impl AckNow for UnixStream {
    fn ack_now(&self) {}
}

/// A way to lb-proxy (the backend) for one client connection, TLS or QUIC.
pub(crate) enum Backend {
    /// A stream of this thread's multiplexed hop connection (`backend.multiplex`), announced
    /// by the PROXY header in its OPEN.
    Stream(HopStream),
    /// A connection of its own, on which the PROXY header is still to be written.
    Tcp(TcpStream),
    Unix(UnixStream),
}

/// A way to lb-proxy within `backend_connect_timeout`, `header` announcing it on the
/// multiplexed hop; or why there is none, as the failure log says it.
pub(crate) async fn connect_backend(shared: &Shared, header: &[u8]) -> Result<Backend, String> {
    let config = &shared.config;
    let timeout = config.global.backend_connect_timeout;
    Ok(match (&shared.hops, &config.backend.address) {
        (Some(hops), _) => Backend::Stream(hops.open(header).await?),
        (None, BackendAddr::Tcp(a)) => {
            let stream = connect_within(timeout, TcpStream::connect(a)).await?;
            let _ = stream.set_nodelay(true);
            Backend::Tcp(stream)
        }
        (None, BackendAddr::Unix(p)) => Backend::Unix(connect_within(timeout, UnixStream::connect(p)).await?),
    })
}

/// A backend connection within `timeout`, or why there is none, as the failure log says it.
pub(crate) async fn connect_within<S>(
    timeout: Duration,
    connect: impl Future<Output = std::io::Result<S>>,
) -> Result<S, String> {
    match tokio::time::timeout(timeout, connect).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(e)) => Err(format!("refused the connection ({e})")),
        Err(_) => Err(format!("did not accept within {timeout:?}")),
    }
}

/// Why a handshake failed, in words an operator can act on: OpenSSL's reasons (`no shared
/// cipher`, `unsupported protocol`, `tlsv1 alert unknown ca`…), or what the client did.
fn handshake_reason(e: &openssl::ssl::Error, sni: Option<&str>) -> String {
    let what = match (e.ssl_error(), e.io_error()) {
        (Some(stack), _) => {
            let reasons: Vec<String> = stack
                .errors()
                .iter()
                .map(|err| err.reason().map_or_else(|| err.to_string(), |r| reason_words(r).into_owned()))
                .collect();
            reasons.join("; ")
        }
        (None, Some(io)) => format!("connection error: {io}"),
        (None, None) if e.code() == openssl::ssl::ErrorCode::SYSCALL => "client closed the connection".to_owned(),
        (None, None) => e.to_string(),
    };
    match sni {
        Some(name) => format!("{what} (SNI {name})"),
        None => what,
    }
}

/// A close_notify, then the socket closes when `tls` drops.
async fn close<S: AsyncRead + AsyncWrite + Unpin>(tls: &mut TlsStream<S>) {
    let _ = tokio::time::timeout(CLOSE_GRACE, tls.shutdown()).await;
}

/// The header, then both directions until each has ended (a finished direction shuts the
/// other side's write half down: half-close is kept), counted in `stats`.
async fn forward<S, B>(mut tls: TlsStream<Socket<S>>, mut backend: B, header: Vec<u8>, stats: &FrontendStats)
where
    S: AsyncRead + AsyncWrite + ReadReady + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    if !header.is_empty() && backend.write_all(&header).await.is_err() {
        close(&mut tls).await;
        return;
    }
    // Not kept for the connection's life (the task's state would hold it while idle).
    drop(header);
    let mut backend = Counted::new(backend, stats);
    // Responses are the bulk: read them 16 KiB at a time, one full TLS record per write.
    // Requests go in 8 KiB reads. (Into the thread's buffer: the connection holds one only
    // while bytes wait for a slow peer.)
    let mut tls = Drained::new(tls);
    let _ = copy::both_ways(&mut tls, &mut backend, TO_BACKEND_BUF, TO_CLIENT_BUF).await;
}
