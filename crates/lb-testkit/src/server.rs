//! [`TestServer`]: a sample API server for the proxy to balance across.

use std::convert::Infallible;
use std::fmt;
use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use socket2::{Domain, Socket, Type};
use tokio::runtime::Runtime;
use tokio::sync::watch;

use crate::client::GeneratedBody;
use crate::wait_until_blocking;

/// How much of a request body `/echo` returns as text.
const ECHO_BODY_LIMIT: usize = 64 * 1024;

/// The runtime every test server of this test process runs on: its own threads, so that a test
/// blocking its own thread (a `Drop`, a blocking wait) never stalls the servers.
pub(crate) fn runtime() -> &'static Runtime {
    static RUNTIME: OnceLock<Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("lb-testkit-server")
            .enable_all()
            .build()
            .expect("starting the test servers' runtime")
    })
}

/// One request as a [`TestServer`] received it.
#[derive(Debug, Clone)]
pub struct RecordedRequest {
    pub method: String,
    pub path: String,
    pub query: Option<String>,
    /// Header names lowercase, in the order received, repeats kept.
    pub headers: Vec<(String, String)>,
    /// Which connection of this server it came on (counted from 1).
    pub connection: u64,
}

impl RecordedRequest {
    /// The first value of header `name` (case-insensitive).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

#[derive(Debug)]
struct Shared {
    name: String,
    healthy: AtomicBool,
    /// Added before answering anything but `/ping`, in ms.
    delay_ms: AtomicU64,
    requests: Mutex<Vec<RecordedRequest>>,
    connections: AtomicU64,
    open_connections: AtomicUsize,
    in_flight: AtomicUsize,
    peak_in_flight: AtomicUsize,
}

#[derive(Debug)]
struct Running {
    stop: watch::Sender<bool>,
    stopped: mpsc::Receiver<()>,
}

/// A sample HTTP/1.1 API server on `127.0.0.1`, answering with its own name:
///
/// | request | answer |
/// | --- | --- |
/// | `GET /ping` | 200 `pong`, or 500 after [`TestServer::set_healthy`]`(false)` |
/// | `/echo` | 200 JSON: `server`, `method`, `path`, `query`, `version`, `headers` (list of `[name, value]` as received, names lowercase), `body_len`, `body` (first 64 KiB, lossy UTF-8), `connection` |
/// | `/slow?ms=N` | waits N ms, then 200 with the name |
/// | `/bytes?n=N` | 200 with N bytes, streamed (`Content-Length: N`) |
/// | `POST`/`PUT /upload` | reads the body frame by frame without keeping it, 200 with the byte count |
/// | `/status?code=N` | status N with the name |
/// | `/hop` | 200 with hop-by-hop headers (`Connection: x-hop`, `X-Hop`, `Keep-Alive`, `Upgrade`) and `X-End: kept` |
/// | anything else | 200 with the name |
///
/// [`TestServer::set_delay`] makes every request but `/ping` wait first.
/// Every response carries `X-Server: NAME`. Every request is recorded ([`TestServer::requests`]).
/// [`TestServer::stop`] closes the listener and every open connection, as a crashed server
/// would; [`TestServer::restart`] listens on the same port again.
pub struct TestServer {
    shared: Arc<Shared>,
    addr: SocketAddr,
    running: Mutex<Option<Running>>,
}

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestServer").field("name", &self.shared.name).field("addr", &self.addr).finish()
    }
}

impl TestServer {
    /// Starts a server named `name` on a free loopback port.
    pub fn start(name: &str) -> TestServer {
        let listener = bind(SocketAddr::from(([127, 0, 0, 1], 0))).expect("binding a test server on 127.0.0.1:0");
        TestServer::from_listener(name, listener)
    }

    /// Starts a server named `name` on `port` (retrying for a few seconds while it is in use).
    pub fn start_on(name: &str, port: u16) -> TestServer {
        TestServer::start_at(name, SocketAddr::from(([127, 0, 0, 1], port)))
    }

    /// Starts a server named `name` on `addr` (any loopback address: hosts of a demo each have
    /// their own, as `127.0.0.11`, `127.0.0.12`), retrying for a few seconds while it is in use.
    pub fn start_at(name: &str, addr: SocketAddr) -> TestServer {
        TestServer::from_listener(name, bind_retrying(addr))
    }

    fn from_listener(name: &str, listener: StdListener) -> TestServer {
        let addr = listener.local_addr().expect("a bound listener's address");
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            healthy: AtomicBool::new(true),
            delay_ms: AtomicU64::new(0),
            requests: Mutex::new(Vec::new()),
            connections: AtomicU64::new(0),
            open_connections: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
        });
        let server = TestServer { shared, addr, running: Mutex::new(None) };
        server.serve(listener);
        server
    }

    fn serve(&self, listener: StdListener) {
        let (stop, stop_rx) = watch::channel(false);
        let (stopped_tx, stopped) = mpsc::channel();
        let shared = self.shared.clone();
        runtime().spawn(async move {
            let listener = tokio::net::TcpListener::from_std(listener).expect("registering a test server listener");
            accept_loop(listener, shared, stop_rx).await;
            let _ = stopped_tx.send(());
        });
        *self.running.lock().unwrap_or_else(|e| e.into_inner()) = Some(Running { stop, stopped });
    }

    pub fn name(&self) -> &str {
        &self.shared.name
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Makes `GET /ping` answer 200 (true) or 500 (false).
    pub fn set_healthy(&self, healthy: bool) {
        self.shared.healthy.store(healthy, Ordering::SeqCst);
    }

    /// Makes every request but `/ping` wait `delay` before it is handled (a stuck server).
    pub fn set_delay(&self, delay: Duration) {
        self.shared.delay_ms.store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Stops listening and closes every open connection; returns once both are done.
    pub fn stop(&self) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(running) = running {
            let _ = running.stop.send(true);
            let _ = running.stopped.recv_timeout(Duration::from_secs(5));
            wait_until_blocking(Duration::from_secs(5), || self.shared.open_connections.load(Ordering::SeqCst) == 0);
        }
    }

    /// Listens again on the same port (after [`TestServer::stop`]).
    pub fn restart(&self) {
        self.stop();
        self.serve(bind_retrying(self.addr));
    }

    pub fn is_running(&self) -> bool {
        self.running.lock().unwrap_or_else(|e| e.into_inner()).is_some()
    }

    /// Every request received so far (health checks included).
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// How many requests were received so far (health checks included).
    pub fn hits(&self) -> usize {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    /// How many requests for `path` were received so far.
    pub fn hits_for(&self, path: &str) -> usize {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|r| r.path == path).count()
    }

    /// Requests received other than health checks (`/ping`).
    pub fn traffic(&self) -> usize {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).iter().filter(|r| r.path != "/ping").count()
    }

    /// Forgets the requests received so far.
    pub fn clear_requests(&self) {
        self.shared.requests.lock().unwrap_or_else(|e| e.into_inner()).clear();
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// The most requests ever handled at once.
    pub fn peak_in_flight(&self) -> usize {
        self.shared.peak_in_flight.load(Ordering::SeqCst)
    }

    /// Connections open right now.
    pub fn open_connections(&self) -> usize {
        self.shared.open_connections.load(Ordering::SeqCst)
    }

    /// Requests being handled right now.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let running = self.running.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(running) = running {
            let _ = running.stop.send(true);
        }
    }
}

/// A listening socket with SO_REUSEADDR (so that a restart can take the port back while old
/// connections linger in TIME_WAIT).
pub(crate) fn bind(addr: SocketAddr) -> std::io::Result<StdListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(1024)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn bind_retrying(addr: SocketAddr) -> StdListener {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match bind(addr) {
            Ok(l) => return l,
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) => panic!("cannot bind a test server on {addr}: {e}"),
        }
    }
}

async fn accept_loop(listener: tokio::net::TcpListener, shared: Arc<Shared>, stop: watch::Receiver<bool>) {
    let mut stopping = stop.clone();
    loop {
        tokio::select! {
            _ = stopping.wait_for(|s| *s) => return,
            accepted = listener.accept() => {
                let Ok((stream, _peer)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let id = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
                shared.open_connections.fetch_add(1, Ordering::SeqCst);
                let shared = shared.clone();
                let mut stop = stop.clone();
                tokio::spawn(async move {
                    let service_shared = shared.clone();
                    let service = service_fn(move |req| handle(service_shared.clone(), id, req));
                    let conn = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = conn => {}
                        _ = stop.wait_for(|s| *s) => {}
                    }
                    shared.open_connections.fetch_sub(1, Ordering::SeqCst);
                });
            }
        }
    }
}

type ResponseBody = BoxBody<Bytes, Infallible>;

fn text(status: StatusCode, name: &str, body: impl Into<Bytes>) -> Response<ResponseBody> {
    Response::builder()
        .status(status)
        .header("x-server", name)
        .header("content-type", "text/plain")
        .body(Full::new(body.into()).boxed())
        .unwrap_or_default()
}

fn param<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?.split('&').find_map(|pair| pair.strip_prefix(key)?.strip_prefix('='))
}

struct InFlight<'a>(&'a AtomicUsize);

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn handle(
    shared: Arc<Shared>,
    connection: u64,
    req: Request<Incoming>,
) -> Result<Response<ResponseBody>, Infallible> {
    let now = shared.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    shared.peak_in_flight.fetch_max(now, Ordering::SeqCst);
    let _in_flight = InFlight(&shared.in_flight);
    let name = shared.name.as_str();
    let path = req.uri().path().to_owned();
    let query = req.uri().query().map(str::to_owned);
    let headers: Vec<(String, String)> = req
        .headers()
        .iter()
        .map(|(n, v)| (n.as_str().to_owned(), String::from_utf8_lossy(v.as_bytes()).into_owned()))
        .collect();
    shared.requests.lock().unwrap_or_else(|e| e.into_inner()).push(RecordedRequest {
        method: req.method().to_string(),
        path: path.clone(),
        query: query.clone(),
        headers: headers.clone(),
        connection,
    });
    let query = query.as_deref();
    let delay = shared.delay_ms.load(Ordering::SeqCst);
    if delay > 0 && path != "/ping" {
        tokio::time::sleep(Duration::from_millis(delay)).await;
    }
    let response = match path.as_str() {
        "/ping" => {
            if shared.healthy.load(Ordering::SeqCst) {
                text(StatusCode::OK, name, "pong")
            } else {
                text(StatusCode::INTERNAL_SERVER_ERROR, name, "unhealthy")
            }
        }
        "/echo" => {
            let method = req.method().to_string();
            let version = format!("{:?}", req.version());
            let mut body = req.into_body();
            let mut len = 0u64;
            let mut kept = Vec::new();
            while let Some(frame) = body.frame().await {
                let Ok(frame) = frame else { break };
                if let Ok(data) = frame.into_data() {
                    len += data.len() as u64;
                    let room = ECHO_BODY_LIMIT.saturating_sub(kept.len());
                    kept.extend_from_slice(&data[..data.len().min(room)]);
                }
            }
            let json = serde_json::json!({
                "server": name,
                "method": method,
                "path": path,
                "query": query,
                "version": version,
                "headers": headers,
                "body_len": len,
                "body": String::from_utf8_lossy(&kept),
                "connection": connection,
            });
            let mut r = text(StatusCode::OK, name, json.to_string());
            r.headers_mut().insert("content-type", http::HeaderValue::from_static("application/json"));
            r
        }
        "/slow" => {
            let ms = param(query, "ms").and_then(|v| v.parse().ok()).unwrap_or(1000);
            tokio::time::sleep(Duration::from_millis(ms)).await;
            text(StatusCode::OK, name, name.to_owned())
        }
        "/bytes" => {
            let n: u64 = param(query, "n").and_then(|v| v.parse().ok()).unwrap_or(0);
            Response::builder()
                .status(StatusCode::OK)
                .header("x-server", name)
                .header("content-type", "application/octet-stream")
                .header("content-length", n)
                .body(GeneratedBody::new(n).boxed())
                .unwrap_or_default()
        }
        "/upload" if req.method() == Method::POST || req.method() == Method::PUT => {
            let mut body = req.into_body();
            let mut len = 0u64;
            let mut failed = false;
            while let Some(frame) = body.frame().await {
                match frame {
                    Ok(frame) => len += frame.data_ref().map_or(0, |d| d.len() as u64),
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                text(StatusCode::BAD_REQUEST, name, format!("body failed after {len} bytes"))
            } else {
                text(StatusCode::OK, name, len.to_string())
            }
        }
        "/status" => {
            let code = param(query, "code")
                .and_then(|v| v.parse::<u16>().ok())
                .and_then(|c| StatusCode::from_u16(c).ok())
                .unwrap_or(StatusCode::OK);
            text(code, name, name.to_owned())
        }
        "/hop" => {
            let mut r = text(StatusCode::OK, name, name.to_owned());
            let h = r.headers_mut();
            h.insert("connection", http::HeaderValue::from_static("x-hop"));
            h.insert("x-hop", http::HeaderValue::from_static("secret"));
            h.insert("keep-alive", http::HeaderValue::from_static("timeout=5"));
            h.insert("upgrade", http::HeaderValue::from_static("foo/1"));
            h.insert("x-end", http::HeaderValue::from_static("kept"));
            r
        }
        _ => text(StatusCode::OK, name, name.to_owned()),
    };
    Ok(response)
}
