//! One request: check it, route it, forward it on a server connection, stream the response back,
//! and write its log line when the response has ended.

use std::convert::Infallible;
use std::future::{poll_fn, Future};
use std::pin::pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode, Uri, Version};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use super::activity::LogWhenSent;
use super::body::{BodyEnd, ClientFailure, ClientSide, OnEnd, RequestBody, ResponseBody};
use super::rules::{own_reply, request_policy, response_policy, restore_content_lengths, rule_answer, PolicyFacts};
use super::upstream::{acquire, fresh, ServerConn, Upstream};
use super::{errors, headers, tunnel, ConnCtx};
use crate::backend::{BackendState, ServerState};
use crate::connect::ConnectFailure;
use crate::counters::{Sample, Transfer};
use crate::log::HttpLog;
use crate::policy::{Captured, RequestView, Subject};

/// What the log line of one request needs, filled in as the request goes.
#[derive(Debug)]
pub(crate) struct Exchange {
    pub(crate) ctx: Arc<ConnCtx>,
    /// The first byte of the request came (the log's accept date, and where its timers start).
    pub(crate) started: Instant,
    pub(crate) tr: i64,
    pub(crate) backend: Option<Arc<BackendState>>,
    pub(crate) server: Option<Arc<ServerState>>,
    pub(crate) tw: i64,
    pub(crate) tc: i64,
    pub(crate) tresp: i64,
    pub(crate) status: i32,
    pub(crate) retries: u32,
    pub(crate) termination: [u8; 2],
    pub(crate) request_line: String,
    pub(crate) upstream: Option<Upstream>,
    /// The request body's bytes, for an HTTP/2 stream's log line.
    pub(crate) client_side: Option<Arc<ClientSide>>,
    /// An HTTP/2 stream stays counted as open until its exchange is gone.
    pub(crate) _stream: Option<super::h2::StreamGuard>,
    /// What the rules captured for the log, and the request's ID (`unique_id`).
    pub(crate) policy: Option<Box<PolicyFacts>>,
}

impl Exchange {
    pub(crate) fn log(&self, bytes: Transfer) {
        let ctx = &self.ctx;
        let backend = self.backend.as_deref();
        let server = self.server.as_deref();
        // One reading of each clock for the counters and the line: the wall clock now, and how
        // long ago the request began (its accept date is the one minus the other).
        let (wall, ta) = (SystemTime::now(), self.started.elapsed());
        // Counted where the request is logged: its status, bytes and ending are known here.
        let now = Some(wall.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        ctx.proxy.counters.request(now, self.status, bytes, self.termination);
        if let Some(tracked) = self.policy.as_ref().map(|p| &p.tracked).filter(|t| !t.is_empty()) {
            let now = crate::tables::Now::at(wall);
            tracked.answered(now, u16::try_from(self.status).unwrap_or(0), bytes.from_client, bytes.to_client);
        }
        ctx.fe.counters.request(now, self.status, bytes, self.termination);
        if self.request_line == "<BADREQ>" {
            ctx.fe.counters.request_errors.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        if let Some(backend) = backend {
            backend.counters.request(None, self.status, bytes, self.termination);
        }
        if let Some(server) = server {
            server.counters.request(None, self.status, bytes, self.termination);
            // Times of a request that reached a server (HAProxy's qtime, ctime, rtime, ttime).
            let ms = |t: i64| u64::try_from(t).unwrap_or(0);
            let sample = Sample {
                queue_ms: ms(self.tw),
                connect_ms: ms(self.tc),
                response_ms: ms(self.tresp),
                total_ms: ta.as_millis() as u64,
            };
            server.counters.times.add(&sample);
            if let Some(backend) = backend {
                backend.counters.times.add(&sample);
                backend.counters.durations.add(&sample);
            }
        }
        let record = HttpLog {
            facts: &ctx.facts,
            accept_date: wall.checked_sub(ta).unwrap_or(wall),
            frontend: ctx.fe.name(),
            backend: backend.map_or(ctx.fe.name(), |b| b.name()),
            server: server.map_or("<NOSRV>", |s| s.name()),
            tr: self.tr,
            tw: self.tw,
            tc: self.tc,
            tresp: self.tresp,
            ta: ta.as_millis() as i64,
            status: self.status,
            bytes_read: bytes.to_client,
            termination: self.termination,
            actconn: ctx.proxy.actconn(),
            feconn: ctx.fe.feconn(),
            beconn: backend.map_or(0, |b| b.current_conns()),
            srv_conn: server.map_or(0, |s| s.current_conns()),
            retries: self.retries,
            srv_queue: 0,
            backend_queue: backend.map_or(0, |b| b.queued()),
            request_line: &self.request_line,
            format: ctx.fe.config.log_format.as_ref(),
            captured: self.policy.as_ref().map(|p| &p.captured),
            unique_id: self.policy.as_ref().and_then(|p| p.unique_id.as_deref()),
            bytes_uploaded: bytes.from_client,
        };
        ctx.proxy.logger.http(&record, wall);
    }
}

impl OnEnd for Exchange {
    fn end(mut self: Box<Self>, how: BodyEnd, body_bytes: u64) {
        if self.termination == *b"--" {
            self.termination = match how {
                BodyEnd::Complete => *b"--",
                BodyEnd::ClientGone => *b"CD",
                BodyEnd::ServerError => *b"SD",
                BodyEnd::ServerTimeout => *b"sD",
            };
        }
        let ctx = self.ctx.clone();
        if let Some(up) = self.upstream.take() {
            // Only a connection whose exchange ended cleanly may carry another request.
            if how == BodyEnd::Complete && !up.conn.sender.is_closed() {
                match up.backend.config().http_reuse {
                    lb_config::HttpReuse::Never => {
                        let mut pinned = lock(&ctx.pinned);
                        // HTTP/1: the one connection; HTTP/2: one per stream served at once.
                        let keep = if ctx.is_h2() { ctx.fe.config.http2.max_concurrent_streams as usize } else { 1 };
                        if pinned.len() < keep {
                            // One slot to start with, not a growing vector's four: an idle
                            // HTTP/1 connection keeps this for its life.
                            if pinned.capacity() == 0 {
                                pinned.reserve_exact(1);
                            }
                            pinned.push(up);
                        }
                    }
                    lb_config::HttpReuse::Safe => {
                        ctx.proxy.pool.put(up.backend.name(), up.server.index(), Box::new(up.conn))
                    }
                }
            }
        }
        ctx.request_ended(self, body_bytes);
    }
}

impl LogWhenSent for Exchange {
    fn log(self: Box<Self>, bytes: Transfer) {
        Exchange::log(&self, bytes);
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// hyper's service: every request gets a response, never an error (errors are our pages).
pub(crate) async fn handle(ctx: Arc<ConnCtx>, req: Request<Incoming>) -> Result<Response<ResponseBody>, Infallible> {
    let (has_te, refused) = headers::framing(&req);
    let (first_byte, conflict, stream) = ctx.request_started(&req, has_te, refused);
    let mut ex = Exchange {
        ctx: ctx.clone(),
        started: first_byte,
        tr: first_byte.elapsed().as_millis() as i64,
        backend: None,
        server: None,
        tw: -1,
        tc: -1,
        tresp: -1,
        status: -1,
        retries: 0,
        termination: *b"--",
        request_line: request_line(&req),
        upstream: None,
        client_side: None,
        _stream: stream,
        policy: None,
    };
    if let Some(reason) = conflict.or(refused) {
        tracing::debug!(frontend = ctx.fe.name(), client = ?ctx.facts.client, "refused request: {reason}");
        return Ok(error(ex, 400, *b"PR"));
    }
    let (mut parts, body) = req.into_parts();
    let policy = &ctx.fe.policy;
    if policy.captures() || policy.unique_id.is_some() || policy.response_reads_request {
        let captured =
            Captured { request: vec![None; policy.request_captures], response: vec![None; policy.response_captures] };
        ex.policy = Some(Box::new(PolicyFacts { captured, ..PolicyFacts::default() }));
    }
    if policy.has_request_rules() {
        // The rules see each Content-Length line the client sent (hyper kept one of equal ones);
        // the server gets one.
        let duplicated = policy.reads_content_length && restore_content_lengths(&ctx, &mut parts.headers);
        if let Some(outcome) = request_policy(&mut ex, &ctx, &mut parts) {
            let (answer, hold) = rule_answer(ex, &ctx, outcome);
            // A tarpit: the answer waits, the client with it.
            if !hold.is_zero() {
                tokio::time::sleep(hold).await;
            }
            return Ok(answer);
        }
        if duplicated {
            if let Some(v) = parts.headers.get(header::CONTENT_LENGTH).cloned() {
                parts.headers.insert(header::CONTENT_LENGTH, v);
            }
        }
        // A `limit_req` bucket without `nodelay`: the request goes on at the table's rate.
        if let Some(ms) = ex.policy.as_ref().map(|p| p.tracked.delay_ms).filter(|&ms| ms > 0) {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
    }
    let tracked = ex.policy.as_ref().map(|p| &p.tracked).filter(|t| !t.is_empty());
    let subject = Subject {
        req: Some(RequestView::of(&parts)),
        facts: &ctx.facts,
        frontend: ctx.fe.name(),
        response: None,
        tracked,
    };
    let Some(backend) = policy.route(&subject).cloned() else {
        return Ok(error(ex, 503, *b"SC"));
    };
    ex.backend = Some(backend.clone());
    if policy.response_reads_request {
        if let Some(p) = ex.policy.as_mut() {
            p.request = Some(Box::new((parts.method.clone(), parts.uri.clone(), parts.headers.clone())));
        }
    }

    let upgrade = headers::strip_hop_by_hop(&mut parts.headers);
    // An upgrade (WebSocket) is passed on: the two headers that ask for it travel this hop too.
    let client_upgrade = match upgrade.filter(|u| tunnel::passes(parts.version, &parts.headers, has_te, u)) {
        Some(protocol) => {
            parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
            parts.headers.insert(header::UPGRADE, protocol);
            parts.extensions.remove::<OnUpgrade>()
        }
        None => None,
    };
    if ctx.fe.config.forward_for {
        headers::add_forwarded(&mut parts.headers, ctx.forwarded_for.as_ref(), ctx.https);
    }
    if parts.version == Version::HTTP_2 {
        headers::from_http2(&mut parts.headers, &parts.uri);
    }
    parts.uri = origin_form(&parts.uri);
    parts.version = Version::HTTP_11;
    let limit = ctx.fe.config.max_body_size.map(|n| n as u64);
    // An announced length past the limit is refused before a byte of the body is read (an
    // `Expect: 100-continue` client then sends none).
    if limit.is_some_and(|limit| http_body::Body::size_hint(&body).exact().is_some_and(|length| length > limit)) {
        return Ok(error(ex, 413, *b"PR"));
    }
    let (body, client_side) = RequestBody::new(body, ctx.fe.config.timeouts.client, limit);
    if ctx.is_h2() {
        ex.client_side = Some(client_side.clone());
    }
    let mut req = Request::from_parts(parts, body);

    let pinned = lock(&ctx.pinned).pop();
    let mut up = match acquire(&backend, pinned, &ctx.proxy.pool, &mut ex.retries).await {
        Ok(up) => up,
        Err(failure) => return Ok(connect_failed(ex, failure)),
    };
    let timeout = backend.config().timeouts.server;
    let response = loop {
        ex.server = Some(up.server.clone());
        ex.tw = up.queue_ms;
        ex.tc = up.connect_ms;
        let sent = Instant::now();
        let outcome = {
            let ServerConn { sender, response_timer, .. } = &mut up.conn;
            response_timer.as_mut().reset((sent + timeout).into());
            // Polled step by step rather than as one async block owning the request: the request
            // moves straight into hyper and only the response moves out (each move of a request,
            // or of a future holding one, copies a few hundred bytes). At each step hyper is
            // polled before the timer: a response that is there wins over a timer that is due.
            let ready = poll_fn(|cx| match sender.poll_ready(cx) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending => response_timer.as_mut().poll(cx).map(|()| None),
            })
            .await;
            match ready {
                Some(Ok(())) => {
                    let mut response = pin!(sender.try_send_request(req));
                    poll_fn(|cx| match response.as_mut().poll(cx) {
                        Poll::Ready(r) => Poll::Ready(Some(r.map_err(|mut e| {
                            let unsent = e.take_message();
                            (e.into_error(), unsent)
                        }))),
                        Poll::Pending => response_timer.as_mut().poll(cx).map(|()| None),
                    })
                    .await
                }
                Some(Err(e)) => Some(Err((e, Some(req)))),
                None => None,
            }
        };
        match outcome {
            Some(Ok(response)) => {
                ex.tresp = sent.elapsed().as_millis() as i64;
                break response;
            }
            Some(Err((e, unsent))) => {
                // A reused connection the server closed while idle: when the request never
                // left, it goes on a new connection.
                match (up.reused, unsent) {
                    (true, Some(again)) => {
                        req = again;
                        up = match fresh(&backend, &mut ex.retries).await {
                            Ok(up) => up,
                            Err(failure) => return Ok(connect_failed(ex, failure)),
                        };
                    }
                    _ => {
                        tracing::debug!(backend = backend.name(), server = up.server.name(), "request failed: {e}");
                        ex.upstream = Some(up);
                        let failed = *lock(&client_side.failure);
                        return Ok(match failed {
                            Some(ClientFailure::TimedOut) => error(ex, 408, *b"cD"),
                            Some(ClientFailure::Aborted) => error(ex, 400, *b"CD"),
                            Some(ClientFailure::TooLarge) => error(ex, 413, *b"PR"),
                            None => error(ex, 502, *b"SH"),
                        });
                    }
                }
            }
            None => {
                ex.upstream = Some(up);
                return Ok(error(ex, 504, *b"sH"));
            }
        }
    };

    let (mut parts, body) = response.into_parts();
    ex.status = i32::from(parts.status.as_u16());
    if parts.status == StatusCode::SWITCHING_PROTOCOLS {
        ex.upstream = Some(up);
        return Ok(switch_protocols(ex, parts, client_upgrade, backend.config().timeouts.tunnel));
    }
    headers::strip_hop_by_hop(&mut parts.headers);
    if ctx.fe.policy.has_response_rules() {
        if let Some(reply) = response_policy(&mut ex, &mut parts) {
            // The server's body is not read: its connection cannot carry another request.
            drop(body);
            drop(up);
            return Ok(own_reply(ex, &reply, *b"PH", None));
        }
    }
    // (HTTP/2 has no such header: a drain sends GOAWAY instead.)
    if ctx.shutdown.is_draining() && !ctx.is_h2() {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    ex.upstream = Some(up);
    let mut body = ResponseBody::upstream(body, timeout, Box::new(ex));
    if let Some(due) = ctx.body_due() {
        body = body.telling(due.clone());
    }
    Ok(Response::from_parts(parts, body))
}

/// The server agreed to switch protocols: answer the client's 101 and leave the tunnel for the
/// connection's task, which runs it once hyper has sent the 101 (see `tunnel`). A 101 to a
/// request that asked for no upgrade is the server's error (502).
fn switch_protocols(
    ex: Exchange,
    mut parts: http::response::Parts,
    client: Option<OnUpgrade>,
    timeout: std::time::Duration,
) -> Response<ResponseBody> {
    let server = parts.extensions.remove::<OnUpgrade>();
    let protocol = parts.headers.get(header::UPGRADE).cloned();
    let (Some(client), Some(server), Some(protocol)) = (client, server, protocol) else {
        tracing::debug!(frontend = ex.ctx.fe.name(), "101 from a server without an upgrade to switch to");
        return error(ex, 502, *b"SH");
    };
    headers::strip_hop_by_hop(&mut parts.headers);
    parts.headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    parts.headers.insert(header::UPGRADE, protocol);
    let ctx = ex.ctx.clone();
    *lock(&ctx.tunnel) = Some(Box::new(tunnel::Pending { exchange: ex, client, server, timeout }));
    Response::from_parts(parts, ResponseBody::empty())
}

/// A response lb-proxy writes itself; the exchange is logged when it has been sent.
pub(super) fn error(mut ex: Exchange, status: u16, termination: [u8; 2]) -> Response<ResponseBody> {
    ex.status = i32::from(status);
    ex.termination = termination;
    // A pinned server connection that failed is not trusted again.
    ex.upstream = ex.upstream.take().filter(|_| status < 500 && status != 408);
    let (response, body) = errors::response(&ex.ctx.fe.config.error_pages, status);
    // 413: the rest of the body is not read, so the connection cannot carry another request.
    let close = (matches!(status, 400 | 408 | 413) || ex.ctx.shutdown.is_draining()) && !ex.ctx.is_h2();
    let (mut parts, ()) = response.into_parts();
    if close {
        parts.headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    Response::from_parts(parts, ResponseBody::full(body, Box::new(ex)))
}

fn connect_failed(mut ex: Exchange, failure: ConnectFailure) -> Response<ResponseBody> {
    match failure {
        ConnectFailure::NoServer => error(ex, 503, *b"SC"),
        ConnectFailure::QueueTimeout => error(ex, 503, *b"sQ"),
        ConnectFailure::Failed { server, timed_out, error: e } => {
            tracing::debug!(server = server.name(), "connect failed: {e}");
            ex.server = Some(server);
            error(ex, 503, if timed_out { *b"sC" } else { *b"SC" })
        }
    }
}

/// `<method> <uri> <version>` for the log: what `format!("{} {} {:?}", method, uri, version)`
/// writes, in one allocation and without the formatting machinery.
pub(super) fn request_line<B>(req: &Request<B>) -> String {
    let version = req.version();
    let version = if version == Version::HTTP_11 {
        "HTTP/1.1"
    } else if version == Version::HTTP_2 {
        // HAProxy's line for a stream: the path, as an HTTP/1 request has it.
        let path = req.uri().path_and_query().map_or("/", |pq| pq.as_str());
        return format!("{} {path} HTTP/2.0", req.method());
    } else if version == Version::HTTP_10 {
        "HTTP/1.0"
    } else {
        return format!("{} {} {:?}", req.method(), req.uri(), version);
    };
    let (method, uri) = (req.method().as_str(), req.uri());
    let (scheme, authority) = (uri.scheme_str(), uri.authority().map(|a| a.as_str()));
    let (path, query) = (uri.path(), uri.query());
    let len = method.len()
        + scheme.map_or(0, |s| s.len() + 3)
        + authority.map_or(0, str::len)
        + path.len()
        + query.map_or(0, |q| q.len() + 1)
        + version.len()
        + 2;
    let mut line = String::with_capacity(len);
    line.push_str(method);
    line.push(' ');
    if let Some(scheme) = scheme {
        line.push_str(scheme);
        line.push_str("://");
    }
    line.push_str(authority.unwrap_or_default());
    line.push_str(path);
    if let Some(query) = query {
        line.push('?');
        line.push_str(query);
    }
    line.push(' ');
    line.push_str(version);
    line
}

/// Servers get the path and query only, whatever form the client used.
pub(super) fn origin_form(uri: &Uri) -> Uri {
    match uri.path_and_query().map(|pq| Uri::from(pq.clone())) {
        // An absolute URI whose path was only a fragment (`http://h#x`: the parser drops it)
        // keeps an empty path, which would go out as an empty request target (`GET  HTTP/1.1`).
        Some(origin) if !origin.path().is_empty() => origin,
        _ => Uri::from_static("/"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_line_as_format_writes_it() {
        let uris = ["/", "/a/b?x=1&y", "*", "http://example.com:8080/p?q", "https://h", "example.com:443", "/?"];
        for version in [Version::HTTP_09, Version::HTTP_10, Version::HTTP_11] {
            for method in ["GET", "CONNECT", "OPTIONS", "PURGE"] {
                for uri in uris {
                    let req = Request::builder().method(method).uri(uri).version(version).body(()).expect("request");
                    assert_eq!(request_line(&req), format!("{} {} {:?}", req.method(), req.uri(), req.version()));
                }
            }
        }
        let h2 = |uri: &str| Request::builder().uri(uri).version(Version::HTTP_2).body(()).expect("request");
        assert_eq!(request_line(&h2("https://api.example.com/a/b?x=1&y")), "GET /a/b?x=1&y HTTP/2.0");
        assert_eq!(request_line(&h2("https://api.example.com")), "GET / HTTP/2.0");
    }

    /// Found by the fuzz target `http_request_head`: `GET http://example.com#x HTTP/1.1` went to
    /// the server as `GET  HTTP/1.1`.
    #[test]
    fn origin_form_is_never_empty() {
        for (uri, origin) in [
            ("http://example.com#x", "/"),
            ("http://example#com:8080/p?q", "/"),
            ("http://example.com", "/"),
            ("http://h?q", "/?q"),
            ("http://h/a?b#c", "/a?b"),
            ("/a/b?x=1", "/a/b?x=1"),
            ("*", "*"),
            ("example.com:443", "/"),
        ] {
            let uri: Uri = uri.parse().expect("a URI");
            assert_eq!(origin_form(&uri).to_string(), origin, "{uri}");
        }
    }
}
