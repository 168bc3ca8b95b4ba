//! The frontend's policy around one request: its `http_request` rules (and request ID) before
//! routing, its `http_response` rules on the server's response, and the answers its rules give
//! (`deny`, `return`, `redirect`), with what the exchange keeps for the log (captures, the ID).

use http::header::{self, HeaderValue};
use http::{Response, StatusCode, Uri};
use lb_config::Reply;

use super::body::ResponseBody;
use super::forward::{error, Exchange};
use super::ConnCtx;
use crate::policy::{render, Captured, Final, RequestVars, RequestView, Subject};
use crate::tables::{Reason, Tracked};

/// What an exchange carries for the frontend's policy: captures, the request ID, and the
/// request's head when a response rule reads it. Boxed and absent for frontends without rules
/// that need it, so that an exchange stays small.
#[derive(Debug, Default)]
pub(crate) struct PolicyFacts {
    pub(crate) captured: Captured,
    pub(crate) unique_id: Option<String>,
    /// Boxed: few frontends keep it, and every copy of the facts would carry its size.
    pub(crate) request: Option<Box<(http::Method, Uri, http::HeaderMap)>>,
    /// The limit-table entries the request tracks (`track`), counted down when it ends.
    pub(crate) tracked: Tracked,
}

/// Puts back the equal Content-Length lines hyper merged; true when there were some.
pub(super) fn restore_content_lengths(ctx: &ConnCtx, headers: &mut http::HeaderMap) -> bool {
    let raw = ctx.raw_content_lengths().unwrap_or(0);
    let Some(value) = headers.get(header::CONTENT_LENGTH).cloned() else { return false };
    let have = headers.get_all(header::CONTENT_LENGTH).iter().count();
    for _ in have..raw {
        headers.append(header::CONTENT_LENGTH, value.clone());
    }
    raw > have
}

/// Runs the `http_request` rules (and makes the request ID) on the exchange where it is; `Some`
/// is a rule's answer, for [`rule_answer`]. (The exchange is large: taken and given back by
/// value it was copied twice per request.)
pub(super) fn request_policy<'p>(
    ex: &mut Exchange,
    ctx: &'p ConnCtx,
    parts: &mut http::request::Parts,
) -> Option<Final<'p>> {
    let policy = &ctx.fe.policy;
    // The exchange gets a box for its facts only when they outlive the rules (an ID, tracked
    // entries); a frontend whose rules only rewrite or refuse allocates none per request.
    let mut local = None;
    let facts: &mut PolicyFacts = match ex.policy.as_deref_mut() {
        Some(facts) => facts,
        None => local.insert(PolicyFacts::default()),
    };
    if let Some(uid) = &policy.unique_id {
        let id = unique_id(uid, parts, ctx);
        if let (Ok(name), Ok(value)) = (http::HeaderName::from_bytes(uid.header.as_bytes()), HeaderValue::from_str(&id))
        {
            // Set before the rules, so that they see (and may use) it as the server will.
            parts.headers.insert(name, value);
        }
        facts.unique_id = Some(id);
    }
    let outcome = policy.on_request(
        parts,
        &ctx.facts,
        ctx.fe.name(),
        facts.unique_id.as_deref(),
        &mut facts.captured,
        &mut facts.tracked,
    );
    if let Some(facts) = local.take_if(|f| f.unique_id.is_some() || !f.tracked.is_empty() || f.tracked.delay_ms > 0) {
        ex.policy = Some(Box::new(facts));
    }
    outcome
}

/// The answer a rule gave ([`request_policy`]), and how long to hold it first (a tarpit's
/// delay).
pub(super) fn rule_answer(
    ex: Exchange,
    ctx: &ConnCtx,
    outcome: Final<'_>,
) -> (Response<ResponseBody>, std::time::Duration) {
    let counted = |c: &std::sync::atomic::AtomicU64| c.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut hold = std::time::Duration::ZERO;
    let answer = match outcome {
        Final::Deny(reply) => {
            counted(&ctx.fe.counters.denied_requests);
            refusal(ex, reply, *b"PR", Reason::Deny, None)
        }
        Final::Tarpit(tarpit) => {
            counted(&ctx.fe.counters.denied_requests);
            hold = tarpit.delay;
            refusal(ex, &tarpit.reply, *b"PT", Reason::Tarpit, None)
        }
        Final::LimitReq { retry_after_ms } => {
            counted(&ctx.fe.counters.denied_requests);
            refusal(ex, &Reply::status(429), *b"PR", Reason::LimitReq, Some(retry_after_ms.div_ceil(1000).max(1)))
        }
        Final::Return(reply) => {
            counted(&ctx.fe.counters.intercepted);
            own_reply(ex, reply, *b"LR", None)
        }
        Final::Redirect { code, location } => {
            counted(&ctx.fe.counters.intercepted);
            own_reply(ex, &Reply::status(code), *b"LR", Some(location))
        }
    };
    (answer, hold)
}

/// A `deny`, `tarpit` or `limit_req` refusal: counted against the tables its rule read, and a
/// 429 or 503 says when to come back (`Retry-After`) unless the rule sets it itself.
fn refusal(
    ex: Exchange,
    reply: &Reply,
    termination: [u8; 2],
    reason: Reason,
    retry_after: Option<u64>,
) -> Response<ResponseBody> {
    let tracked = ex.policy.as_ref().map(|p| &p.tracked);
    let mut retry_after = retry_after;
    if let Some(tracked) = tracked.filter(|t| !t.is_empty()) {
        if reason != Reason::LimitReq {
            tracked.refused(tracked.read_by_refusal, reason);
        }
        let own = reply.headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("retry-after"));
        if retry_after.is_none() && !own && matches!(reply.status, 429 | 503) {
            retry_after = Some(tracked.retry_after_secs());
        }
    }
    let mut response = own_reply(ex, reply, termination, None);
    if let Some(secs) = retry_after {
        response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}

/// Runs the `http_response` rules on the server's response head; `Some` when one denies it.
pub(super) fn response_policy(ex: &mut Exchange, parts: &mut http::response::Parts) -> Option<Reply> {
    let ctx = ex.ctx.clone();
    // Without a box (nothing captured, no ID, no request kept) the rules run on empty facts.
    let mut local = PolicyFacts::default();
    let facts = ex.policy.as_deref_mut().unwrap_or(&mut local);
    let req = facts.request.as_deref().map(|(method, uri, headers)| RequestView { method, uri, headers });
    let status = parts.status.as_u16();
    let reply = ctx.fe.policy.on_response(
        status,
        &mut parts.headers,
        req,
        &ctx.facts,
        ctx.fe.name(),
        facts.unique_id.as_deref(),
        &mut facts.captured,
    )?;
    Some(reply.clone())
}

/// The request's ID: the client's own when it sent a sane one and the frontend keeps it, else
/// a new one (from the format, or a random UUID).
fn unique_id(uid: &lb_config::UniqueId, parts: &http::request::Parts, ctx: &ConnCtx) -> String {
    if uid.keep_client {
        let given = parts.headers.get(uid.header.as_str()).and_then(|v| v.to_str().ok());
        if let Some(id) = given.filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic())) {
            return id.to_owned();
        }
    }
    match &uid.format {
        Some(format) => {
            let subject = Subject {
                req: Some(RequestView::of(parts)),
                facts: &ctx.facts,
                frontend: ctx.fe.name(),
                response: None,
                tracked: None,
            };
            let mut out = String::new();
            render(format, &RequestVars { subject: &subject, unique_id: None }, &mut out);
            out
        }
        None => uuid_v4(),
    }
}

fn uuid_v4() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    // One allocation: the groups written straight from the number.
    let n = u128::from_be_bytes(bytes);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        n >> 96,
        (n >> 80) & 0xffff,
        (n >> 64) & 0xffff,
        (n >> 48) & 0xffff,
        n & 0xffff_ffff_ffff
    )
}

/// A response of a rule (`deny`, `return`, `redirect`, an `http_response` deny): the rule's own
/// body and headers, or, for a `deny` without a body, the frontend's error page for its status.
pub(super) fn own_reply(
    mut ex: Exchange,
    reply: &Reply,
    termination: [u8; 2],
    location: Option<String>,
) -> Response<ResponseBody> {
    let pages = &ex.ctx.fe.config.error_pages;
    let use_page = reply.body.is_empty()
        && reply.content_type.is_none()
        && location.is_none()
        && pages.pages.contains_key(&reply.status);
    if use_page {
        return error(ex, reply.status, termination);
    }
    ex.status = i32::from(reply.status);
    ex.termination = termination;
    ex.upstream = None;
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(reply.status).unwrap_or(StatusCode::FORBIDDEN);
    let headers = response.headers_mut();
    if let Some(t) = &reply.content_type {
        if let Ok(v) = HeaderValue::from_str(t) {
            headers.insert(header::CONTENT_TYPE, v);
        }
    }
    if let Some(location) = location.and_then(|l| HeaderValue::from_str(&l).ok()) {
        headers.insert(header::LOCATION, location);
    }
    if !reply.headers.is_empty() {
        let ctx = ex.ctx.clone();
        let subject = Subject { req: None, facts: &ctx.facts, frontend: ctx.fe.name(), response: None, tracked: None };
        let unique_id = ex.policy.as_ref().and_then(|p| p.unique_id.clone());
        let vars = RequestVars { subject: &subject, unique_id: unique_id.as_deref() };
        for (name, template) in &reply.headers {
            let mut value = String::new();
            render(template, &vars, &mut value);
            if let (Ok(n), Ok(v)) = (http::HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(&value)) {
                headers.append(n, v);
            }
        }
    }
    if ex.ctx.shutdown.is_draining() && !ex.ctx.is_h2() {
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    }
    let body = reply.body.clone();
    let (parts, ()) = response.into_parts();
    Response::from_parts(parts, ResponseBody::full(body, Box::new(ex)))
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_version_4_uuids() {
        for _ in 0..100 {
            let id = super::uuid_v4();
            let groups: Vec<&str> = id.split('-').collect();
            assert_eq!(groups.iter().map(|g| g.len()).collect::<Vec<_>>(), [8, 4, 4, 4, 12], "{id}");
            assert!(groups[2].starts_with('4') && "89ab".contains(&groups[3][..1]), "{id}");
            assert!(id.bytes().all(|b| b == b'-' || b.is_ascii_hexdigit()), "{id}");
        }
    }
}
