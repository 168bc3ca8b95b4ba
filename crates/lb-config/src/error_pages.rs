//! The responses lb-proxy sends for the errors it generates itself: built-in JSON defaults,
//! and HAProxy-style errorfiles (a raw HTTP/1.x response: status line, headers, blank line,
//! body) read at load time.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::sync::LazyLock;

use crate::model::{ErrorPage, ErrorPages};

/// Larger errorfiles are refused: they are sent from memory on every error, and a huge one is
/// almost certainly the wrong file.
const MAX_ERROR_FILE: u64 = 1024 * 1024;

/// Headers that describe how the file was framed, not the response lb-proxy will send: the
/// proxy frames the body itself, so a stale `Content-Length` left in a hand-edited file must
/// not reach clients.
const FRAMING_HEADERS: [&str; 2] = ["content-length", "transfer-encoding"];

static BUILT_IN: LazyLock<ErrorPages> = LazyLock::new(ErrorPages::defaults);

impl ErrorPages {
    /// The statuses lb-proxy generates, each of which has a page.
    pub const STATUSES: [u16; 8] = [400, 403, 408, 413, 500, 502, 503, 504];

    /// Every status with its built-in JSON page.
    pub fn defaults() -> ErrorPages {
        let pages = Self::STATUSES.iter().map(|&s| (s, ErrorPage::built_in(s))).collect();
        ErrorPages { pages }
    }

    /// The page for `status`. A validated configuration has all of [`Self::STATUSES`]; for a
    /// hand-built value missing one, the built-in page is returned, and a status outside the
    /// list gets the 500 page, so that callers always have something to send.
    pub fn get(&self, status: u16) -> &ErrorPage {
        self.pages
            .get(&status)
            .or_else(|| BUILT_IN.pages.get(&status))
            .or_else(|| self.pages.get(&500))
            .unwrap_or(&BUILT_IN_500)
    }
}

static BUILT_IN_500: LazyLock<ErrorPage> = LazyLock::new(|| ErrorPage::built_in(500));

impl Default for ErrorPages {
    fn default() -> Self {
        ErrorPages::defaults()
    }
}

impl ErrorPage {
    /// The built-in page: a small JSON document, like
    /// `{"status":503,"error":"Service Unavailable","message":"No server is available to handle this request."}`.
    pub fn built_in(status: u16) -> ErrorPage {
        let (reason, message) = match status {
            400 => ("Bad Request", "The request could not be understood."),
            403 => ("Forbidden", "Request forbidden by administrative rules."),
            408 => ("Request Timeout", "The request was not received in time."),
            413 => ("Payload Too Large", "The request body is larger than this service accepts."),
            502 => ("Bad Gateway", "The server returned an invalid or incomplete response."),
            503 => ("Service Unavailable", "No server is available to handle this request."),
            504 => ("Gateway Timeout", "The server didn't respond in time."),
            _ => ("Internal Server Error", "An internal error occurred."),
        };
        let body = format!(r#"{{"status":{status},"error":"{reason}","message":"{message}"}}"#).into_bytes();
        ErrorPage {
            status,
            headers: vec![
                ("content-type".to_owned(), "application/json".to_owned()),
                ("cache-control".to_owned(), "no-cache".to_owned()),
            ],
            body,
            source: None,
        }
    }
}

/// Parses an `error_files` key; the message explains which keys exist.
pub(crate) fn parse_status_key(key: &str) -> Result<u16, String> {
    match key.trim().parse::<u16>() {
        Ok(status) if ErrorPages::STATUSES.contains(&status) => Ok(status),
        _ => Err(format!(
            "`{key}` is not a status lb-proxy generates: expected one of 400, 403, 408, 413, 500, \
             502, 503, 504"
        )),
    }
}

/// Reads and parses the errorfile for `status`.
pub(crate) fn load_error_file(path: &Path, status: u16) -> Result<ErrorPage, String> {
    let mut bytes = Vec::new();
    File::open(path)
        .and_then(|file| file.take(MAX_ERROR_FILE + 1).read_to_end(&mut bytes))
        .map_err(|e| format!("cannot read error file {}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_ERROR_FILE {
        return Err(format!("error file {} is larger than 1 MiB", path.display()));
    }
    let mut page = parse_error_file(&bytes)
        .map_err(|e| format!("error file {} is not a valid HTTP/1.x response: {e}", path.display()))?;
    if page.status != status {
        return Err(format!(
            "error file {} has status {}, but is configured for {status}",
            path.display(),
            page.status
        ));
    }
    page.source = Some(path.to_path_buf());
    Ok(page)
}

/// A raw HTTP/1.x response → status, headers (framing headers dropped) and body.
pub(crate) fn parse_error_file(bytes: &[u8]) -> Result<ErrorPage, String> {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut response = httparse::Response::new(&mut headers);
    let header_len = match response.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return Err("incomplete header section (it must end with an empty line)".to_owned())
        }
        Err(e) => return Err(e.to_string()),
    };
    let status = response.code.ok_or("missing status code")?;
    let mut parsed = Vec::new();
    for header in response.headers.iter() {
        let value = std::str::from_utf8(header.value).map_err(|_| format!("header `{}` is not UTF-8", header.name))?;
        if !FRAMING_HEADERS.iter().any(|h| header.name.eq_ignore_ascii_case(h)) {
            parsed.push((header.name.to_owned(), value.to_owned()));
        }
    }
    let body = bytes.get(header_len..).unwrap_or_default().to_vec();
    Ok(ErrorPage { status, headers: parsed, body, source: None })
}

/// `base` with `overrides` laid over it.
pub(crate) fn merged(base: &ErrorPages, overrides: BTreeMap<u16, ErrorPage>) -> ErrorPages {
    let mut pages = base.pages.clone();
    pages.extend(overrides);
    ErrorPages { pages }
}
