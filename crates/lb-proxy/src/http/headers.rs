//! Header rules of a forwarding proxy: what must not cross a hop, what we add, and the request
//! shapes we refuse because two parsers could read them differently (request smuggling).

use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::Request;

/// Headers that describe one hop's connection and never travel on (RFC 9110 §7.6.1), and the
/// two legacy ones of the same kind. `Connection` first. (A static: a const array would be
/// built and dropped at every use.)
static HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
    header::PROXY_AUTHENTICATE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// Where `Upgrade` stands in [`HOP_BY_HOP`].
const UPGRADE_INDEX: usize = 4;

/// The index of `name` in [`HOP_BY_HOP`] (a match on the name: cheaper than comparing it with
/// each of them).
fn hop_by_hop_index(name: &HeaderName) -> Option<usize> {
    Some(match name.as_str() {
        "connection" => 0,
        "te" => 1,
        "trailer" => 2,
        "transfer-encoding" => 3,
        "upgrade" => UPGRADE_INDEX,
        "proxy-authenticate" => 5,
        "keep-alive" => 6,
        "proxy-connection" => 7,
        _ => return None,
    })
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// The index in [`HOP_BY_HOP`] of a token of a `Connection` value, in any case.
fn hop_by_hop_index_of_token(token: &[u8]) -> Option<usize> {
    // The spellings clients and servers send go without a case-folding comparison.
    if matches!(token, b"keep-alive" | b"Keep-Alive") {
        return Some(6);
    }
    HOP_BY_HOP.iter().position(|name| name.as_str().as_bytes().eq_ignore_ascii_case(token))
}

/// Remove hop-by-hop headers, including those the `Connection` header names. Returns the
/// `Upgrade` value removed when `Connection` listed `upgrade` (a request asking to switch
/// protocols: the caller decides whether it travels on), found on the way at no extra cost.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) -> Option<HeaderValue> {
    // Look before removing: a remove hashes its name and probes the map, and most messages
    // carry none of these but `Connection`. One bit per HOP_BY_HOP name present.
    let mut present = 0u8;
    // A field named `close` (reserved, but possible) goes too when `Connection: close` names it.
    let mut close_field = false;
    for name in headers.keys() {
        if let Some(i) = hop_by_hop_index(name) {
            present |= 1 << i;
        } else if name.as_str() == "close" {
            close_field = true;
        }
    }
    if present == 0 {
        return None;
    }
    let mut asks_upgrade = false;
    if present & 1 != 0 {
        // The other names `Connection` lists (collected first: removing needs the map). Nearly
        // always it lists only `keep-alive` or `close`: the first goes below with the fixed
        // names if present (a listed hop-by-hop name that is present has its bit already), the
        // second rarely names a field; so the usual message allocates and parses nothing here.
        let mut listed: Vec<HeaderName> = Vec::new();
        for value in headers.get_all(header::CONNECTION) {
            for token in value.as_bytes().split(|&b| b == b',') {
                let token = token.trim_ascii();
                asks_upgrade |= token.eq_ignore_ascii_case(b"upgrade");
                if token.eq_ignore_ascii_case(b"close") && !close_field {
                    continue;
                }
                if token.is_empty() || hop_by_hop_index_of_token(token).is_some() {
                    continue;
                }
                // Not a valid header name: nothing to remove.
                if let Ok(name) = HeaderName::from_bytes(token) {
                    listed.push(name);
                }
            }
        }
        for name in &listed {
            headers.remove(name);
        }
    }
    let mut upgrade = None;
    for (i, name) in HOP_BY_HOP.iter().enumerate() {
        if present & (1 << i) != 0 {
            let removed = headers.remove(name);
            if i == UPGRADE_INDEX {
                upgrade = removed;
            }
        }
    }
    upgrade.filter(|_| asks_upgrade)
}

/// An HTTP/2 request made ready for HTTP/1.1: `Host` from `:authority` when the client sent no
/// `Host`, and its `cookie` fields joined into one (RFC 9113 §8.2.3 lets HTTP/2 split them).
pub(crate) fn from_http2(headers: &mut HeaderMap, uri: &http::Uri) {
    if !headers.contains_key(header::HOST) {
        if let Some(value) = uri.authority().and_then(|a| HeaderValue::from_str(a.as_str()).ok()) {
            headers.insert(header::HOST, value);
        }
    }
    let mut cookies = headers.get_all(header::COOKIE).iter();
    if let (Some(first), Some(_)) = (cookies.next(), cookies.next()) {
        let mut joined = first.as_bytes().to_vec();
        for more in headers.get_all(header::COOKIE).iter().skip(1) {
            joined.extend_from_slice(b"; ");
            joined.extend_from_slice(more.as_bytes());
        }
        if let Ok(value) = HeaderValue::from_bytes(&joined) {
            headers.insert(header::COOKIE, value);
        }
    }
}

/// What a request's framing headers say: whether it has `Transfer-Encoding`, and why it is
/// refused before it is forwarded (400), if it is. Two look-ups in the map, whatever the request.
pub(crate) fn framing<B>(req: &Request<B>) -> (bool, Option<&'static str>) {
    let headers = req.headers();
    let mut te = headers.get_all(header::TRANSFER_ENCODING).iter();
    let mut lengths = headers.get_all(header::CONTENT_LENGTH).iter();
    let (first_te, first_length) = (te.next(), lengths.next());
    let reason = if first_te.is_some() && first_length.is_some() {
        Some("both Content-Length and Transfer-Encoding")
    } else if first_length
        .is_some_and(|first| lengths.any(|other| other != first) || first.to_str().map_or(true, |v| v.contains(',')))
    {
        Some("conflicting Content-Length")
    } else if first_te.is_some_and(|first| te.next().is_some() || !first.as_bytes().eq_ignore_ascii_case(b"chunked")) {
        Some("Transfer-Encoding other than a single chunked")
    } else {
        None
    };
    (first_te.is_some(), reason)
}

/// The `X-Forwarded-For` value for a client, made once per connection.
pub(crate) fn forwarded_for(client_ip: Option<std::net::IpAddr>) -> Option<HeaderValue> {
    let text = match client_ip? {
        std::net::IpAddr::V4(ip) => {
            let mut text = String::with_capacity(15);
            crate::text::push_ipv4(&mut text, ip);
            text
        }
        ip => ip.to_string(),
    };
    // The String's buffer becomes the value's: no second copy.
    HeaderValue::try_from(text).ok()
}

/// Add `X-Forwarded-For` (appended, as HAProxy's `option forwardfor` does; the value from
/// [`forwarded_for`]) and set `X-Forwarded-Proto`.
pub(crate) fn add_forwarded(headers: &mut HeaderMap, forwarded_for: Option<&HeaderValue>, https: bool) {
    if let Some(value) = forwarded_for {
        headers.append(X_FORWARDED_FOR, value.clone());
    }
    let proto = if https { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
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
        let refused = |headers: &[(&str, &str)]| framing(&req(headers)).1.is_some();
        assert!(refused(&[("content-length", "5"), ("transfer-encoding", "chunked")]));
        assert!(refused(&[("content-length", "5"), ("content-length", "6")]));
        assert!(refused(&[("content-length", "5, 6")]));
        assert!(refused(&[("transfer-encoding", "gzip, chunked")]));
        assert!(refused(&[("transfer-encoding", "chunked"), ("transfer-encoding", "chunked")]));
        assert!(!refused(&[("content-length", "5"), ("content-length", "5")]));
        assert_eq!(framing(&req(&[("content-length", "5")])), (false, None));
        assert_eq!(framing(&req(&[("transfer-encoding", "Chunked")])), (true, None));
        assert_eq!(framing(&req(&[])), (false, None));
    }

    #[test]
    fn stripping_gives_back_an_upgrade_that_connection_asks_for() {
        let stripped = |fields: &[(&'static str, &'static str)]| {
            let mut h = HeaderMap::new();
            for (name, value) in fields {
                h.append(*name, HeaderValue::from_static(value));
            }
            let upgrade = strip_hop_by_hop(&mut h);
            assert!(!h.contains_key(header::UPGRADE) && !h.contains_key(header::CONNECTION));
            upgrade
        };
        let websocket = HeaderValue::from_static("websocket");
        assert_eq!(stripped(&[("connection", "Upgrade"), ("upgrade", "websocket")]), Some(websocket.clone()));
        assert_eq!(stripped(&[("connection", "keep-alive, upgrade"), ("upgrade", "websocket")]), Some(websocket));
        assert_eq!(stripped(&[("upgrade", "websocket")]), None, "Connection must ask for it");
        assert_eq!(stripped(&[("connection", "upgrade")]), None, "nothing to upgrade to");
        assert_eq!(stripped(&[("connection", "keep-alive")]), None);
    }

    /// The names left after stripping a header map made of `fields` (appended in order).
    fn kept_after_stripping(fields: &[(&'static str, &'static str)]) -> Vec<String> {
        let mut h = HeaderMap::new();
        for (name, value) in fields {
            h.append(*name, HeaderValue::from_static(value));
        }
        strip_hop_by_hop(&mut h);
        h.keys().map(|k| k.as_str().to_owned()).collect()
    }

    #[test]
    fn strips_hop_by_hop_and_named() {
        let kept = kept_after_stripping(&[
            ("connection", "close, x-private"),
            ("x-private", "1"),
            ("keep-alive", "timeout=5"),
            ("x-kept", "1"),
        ]);
        assert_eq!(kept, ["x-kept"]);

        // Several Connection headers, listed names in any case, every fixed hop-by-hop name.
        let mut fields = vec![("connection", "X-One , ,bad name"), ("connection", "x-TWO")];
        for name in [
            "x-one",
            "x-two",
            "te",
            "trailer",
            "transfer-encoding",
            "upgrade",
            "proxy-authenticate",
            "proxy-connection",
            "keep-alive",
            "x-kept",
        ] {
            fields.push((name, "1"));
        }
        assert_eq!(kept_after_stripping(&fields), ["x-kept"]);

        // `close` and listed hop-by-hop names in any case: the fixed names still go, the rest stay.
        let kept = kept_after_stripping(&[
            ("connection", "Close, Keep-Alive, TE"),
            ("keep-alive", "timeout=5"),
            ("x-kept", "1"),
        ]);
        assert_eq!(kept, ["x-kept"]);
        // A field named `close` is listed by `Connection: close`: it goes too.
        let kept = kept_after_stripping(&[("connection", "close"), ("close", "1"), ("x-kept", "1")]);
        assert_eq!(kept, ["x-kept"]);

        // Nothing to strip: untouched.
        assert_eq!(kept_after_stripping(&[("host", "a"), ("x-kept", "1")]), ["host", "x-kept"]);
    }

    #[test]
    fn hop_by_hop_index_matches_the_list() {
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index(name), Some(i));
        }
        assert_eq!(hop_by_hop_index(&header::HOST), None);
        for (i, name) in HOP_BY_HOP.iter().enumerate() {
            assert_eq!(hop_by_hop_index_of_token(name.as_str().to_ascii_uppercase().as_bytes()), Some(i));
        }
        assert_eq!(hop_by_hop_index_of_token(b"close"), None);
    }

    #[test]
    fn forwarded_for_appends() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("1.2.3.4"));
        add_forwarded(&mut h, forwarded_for("10.0.0.1".parse().ok()).as_ref(), true);
        let all: Vec<_> = h.get_all("x-forwarded-for").iter().collect();
        assert_eq!(all, ["1.2.3.4", "10.0.0.1"]);
        assert_eq!(h["x-forwarded-proto"], "https");
    }
}
