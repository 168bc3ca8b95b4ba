//! The responses lb-proxy writes itself (400, 403, 408, 413, 500, 502, 503, 504), from the frontend's
//! error pages (configured errorfiles or the built-in JSON).

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Response, StatusCode};
use lb_config::ErrorPages;

/// The error page for `status` as a response, its body ready to send.
pub(crate) fn response(pages: &ErrorPages, status: u16) -> (Response<()>, Bytes) {
    let page = pages.get(status);
    let mut response = Response::new(());
    *response.status_mut() = StatusCode::from_u16(page.status).unwrap_or(StatusCode::SERVICE_UNAVAILABLE);
    for (name, value) in &page.headers {
        if let (Ok(n), Ok(v)) = (HeaderName::from_bytes(name.as_bytes()), HeaderValue::from_str(value)) {
            if n != http::header::CONTENT_LENGTH && n != http::header::TRANSFER_ENCODING {
                response.headers_mut().append(n, v);
            }
        }
    }
    (response, Bytes::from(page.body.clone()))
}

/// The error page for `status` as raw HTTP/1.1 bytes, for when hyper cannot write it (the
/// request never finished arriving). The connection is closed after it.
pub(crate) fn raw(pages: &ErrorPages, status: u16) -> Vec<u8> {
    let (response, body) = response(pages, status);
    let mut out = format!(
        "HTTP/1.1 {} {}\r\n",
        response.status().as_u16(),
        response.status().canonical_reason().unwrap_or("Error")
    )
    .into_bytes();
    for (name, value) in response.headers() {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(format!("content-length: {}\r\nconnection: close\r\n\r\n", body.len()).as_bytes());
    out.extend_from_slice(&body);
    out
}
