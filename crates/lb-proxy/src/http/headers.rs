//! Header rules of a forwarding proxy: what must not cross a hop, what we add, and the request
//! shapes we refuse because two parsers could read them differently (request smuggling).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Request;

/// Headers that describe one hop's connection and never travel on (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 6] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
];

/// Remove hop-by-hop headers, including those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|token| HeaderName::from_bytes(token.trim().as_bytes()).ok())
        .collect();
    for name in named.iter().chain(HOP_BY_HOP.iter()) {
        headers.remove(name);
    }
    headers.remove("keep-alive");
    headers.remove("proxy-connection");
}

/// Why a request is refused before it is forwarded (400).
pub(crate) fn smuggling_reason<B>(req: &Request<B>) -> Option<&'static str> {
    let headers = req.headers();
    if headers.contains_key(header::TRANSFER_ENCODING) && headers.contains_key(header::CONTENT_LENGTH) {
        return Some("both Content-Length and Transfer-Encoding");
    }
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    if let Some(first) = lengths.next() {
        if lengths.any(|other| other != first) || first.to_str().map_or(true, |v| v.contains(',')) {
            return Some("conflicting Content-Length");
        }
    }
    let te: Vec<&HeaderValue> = headers.get_all(header::TRANSFER_ENCODING).iter().collect();
    if te.len() > 1 || te.first().is_some_and(|v| !v.as_bytes().eq_ignore_ascii_case(b"chunked")) {
        return Some("Transfer-Encoding other than a single chunked");
    }
    None
}

/// Add `X-Forwarded-For` (appended, as HAProxy's `option forwardfor` does) and set
/// `X-Forwarded-Proto`.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, client_ip: Option<std::net::IpAddr>, https: bool) {
    if let Some(ip) = client_ip {
        if let Ok(value) = HeaderValue::from_str(&ip.to_string()) {
            headers.append(HeaderName::from_static("x-forwarded-for"), value);
        }
    }
    let proto = if https { "https" } else { "http" };
    headers.insert(HeaderName::from_static("x-forwarded-proto"), HeaderValue::from_static(proto));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(headers: &[(&str, &str)]) -> Request<()> {
        let mut b = Request::builder().uri("/");
        for (k, v) in headers {
            b = b.header(*k, *v);
        }
        b.body(()).unwrap_or_default()
    }

    #[test]
    fn refuses_smuggling_shapes() {
        assert!(smuggling_reason(&req(&[("content-length", "5"), ("transfer-encoding", "chunked")])).is_some());
        assert!(smuggling_reason(&req(&[("content-length", "5"), ("content-length", "6")])).is_some());
        assert!(smuggling_reason(&req(&[("content-length", "5, 6")])).is_some());
        assert!(smuggling_reason(&req(&[("transfer-encoding", "gzip, chunked")])).is_some());
        assert!(smuggling_reason(&req(&[("content-length", "5")])).is_none());
        assert!(smuggling_reason(&req(&[("transfer-encoding", "chunked")])).is_none());
    }

    #[test]
    fn strips_hop_by_hop_and_named() {
        let mut h = HeaderMap::new();
        h.insert("connection", HeaderValue::from_static("close, x-private"));
        h.insert("x-private", HeaderValue::from_static("1"));
        h.insert("keep-alive", HeaderValue::from_static("timeout=5"));
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        add_forwarded(&mut h, "10.0.0.1".parse().ok(), true);
        let all: Vec<_> = h.get_all("x-forwarded-for").iter().collect();
        assert_eq!(all, ["1.2.3.4", "10.0.0.1"]);
        assert_eq!(h["x-forwarded-proto"], "https");
    }
}
