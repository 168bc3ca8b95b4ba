//! Built-in error pages and HAProxy-style errorfiles.

use super::{errors, load_rich, MINIMAL};
use crate::error_pages::parse_error_file;
use crate::{Config, ErrorPage, ErrorPages};

#[test]
fn every_generated_status_has_a_json_default() {
    let pages = ErrorPages::defaults();
    assert_eq!(pages.pages.keys().copied().collect::<Vec<_>>(), ErrorPages::STATUSES);
    let page = pages.get(503);
    assert_eq!(page.status, 503);
    assert_eq!(
        String::from_utf8_lossy(&page.body),
        r#"{"status":503,"error":"Service Unavailable","message":"No server is available to handle this request."}"#
    );
    let headers = [("content-type", "application/json"), ("cache-control", "no-cache")];
    let expected: Vec<(String, String)> = headers.iter().map(|(n, v)| ((*n).to_owned(), (*v).to_owned())).collect();
    assert_eq!(page.headers, expected);
    assert_eq!(page.source, None);
    for status in ErrorPages::STATUSES {
        let body = String::from_utf8_lossy(&pages.get(status).body).into_owned();
        assert!(body.starts_with(&format!("{{\"status\":{status},\"error\":\"")), "{body}");
    }
    assert_eq!(ErrorPages::default(), pages);
}

#[test]
fn get_always_has_an_answer() {
    let empty = ErrorPages { pages: Default::default() };
    assert_eq!(empty.get(502), &ErrorPage::built_in(502));
    assert_eq!(empty.get(404), &ErrorPage::built_in(500));
    assert_eq!(ErrorPages::defaults().get(200).status, 500);
}

#[test]
fn errorfiles_are_raw_http_responses() {
    let page = parse_error_file(
        b"HTTP/1.0 503 Service Unavailable\r\nCache-Control: no-cache\r\nContent-Length: 999\r\n\
          Content-Type: text/html\r\n\r\n<h1>down</h1>\n",
    )
    .expect("valid errorfile");
    assert_eq!(page.status, 503);
    // Content-Length describes the file, not what lb-proxy sends: it is dropped.
    let names: Vec<&str> = page.headers.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["Cache-Control", "Content-Type"]);
    assert_eq!(page.body, b"<h1>down</h1>\n");

    // Files edited on Unix often have bare LF line ends.
    let page = parse_error_file(b"HTTP/1.1 502 Bad Gateway\nContent-Type: text/plain\n\nbad\n").expect("LF errorfile");
    assert_eq!((page.status, page.body.as_slice()), (502, &b"bad\n"[..]));

    assert!(parse_error_file(b"<html>oops</html>").is_err());
    assert!(parse_error_file(b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/html\r\n")
        .expect_err("no blank line")
        .contains("incomplete"));
}

#[test]
fn configured_errorfiles_merge_over_defaults() {
    let (dir, config) = load_rich();
    let https = config.frontend("https_in").expect("https_in");
    let p503 = https.error_pages.get(503);
    assert_eq!(p503.body, b"<h1>503 https</h1>\n");
    assert_eq!(p503.source.as_deref(), Some(dir.path().join("errors/503-https.http").as_path()));
    assert_eq!(https.error_pages.get(502).body, b"<h1>502</h1>\n", "from defaults");
    assert_eq!(https.error_pages.get(504), &ErrorPage::built_in(504));
    let tcp = config.frontend("tcp_in").expect("tcp_in");
    assert_eq!(tcp.error_pages.get(503).body, b"<h1>503 default</h1>\n");
    assert_eq!(tcp.error_pages.pages.len(), 8, "a page for every status lb-proxy generates");
}

#[test]
fn errorfile_problems_point_at_the_status_key() {
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::write(dir.path().join("502.http"), "HTTP/1.0 502 Bad Gateway\r\n\r\n").expect("write");
    std::fs::write(dir.path().join("junk.http"), "<h1>not http</h1>\n").expect("write");
    let text = MINIMAL.replace(
        "frontends:",
        "defaults:\n  error_files:\n    404: 502.http\n    503: 502.http\n    504: junk.http\n    \
         500: missing.http\nfrontends:",
    );
    std::fs::write(dir.path().join("proxy.yaml"), &text).expect("write");
    let e = Config::load(&dir.path().join("proxy.yaml")).expect_err("invalid");
    let shown: Vec<String> = e
        .diagnostics()
        .iter()
        .map(|d| {
            format!(
                "{}:{}: {}: {}",
                d.line,
                d.column,
                d.field,
                d.message.replace(&dir.path().display().to_string(), "DIR")
            )
        })
        .collect();
    assert_eq!(shown.len(), 4, "{shown:#?}");
    assert_eq!(
        shown[0],
        "3:5: defaults.error_files.404: `404` is not a status lb-proxy generates: expected one of \
         400, 403, 408, 413, 500, 502, 503, 504"
    );
    assert_eq!(
        shown[1],
        "4:5: defaults.error_files.503: error file DIR/502.http has status 502, but is configured for 503"
    );
    assert!(
        shown[2]
            .starts_with("5:5: defaults.error_files.504: error file DIR/junk.http is not a valid HTTP/1.x response"),
        "{}",
        shown[2]
    );
    assert!(
        shown[3].starts_with("6:5: defaults.error_files.500: cannot read error file DIR/missing.http"),
        "{}",
        shown[3]
    );
}

#[test]
fn frontend_errorfile_problems_carry_the_frontend_path() {
    let text =
        MINIMAL.replace("    default_backend", "    error_files: { 503: /nonexistent/503.http }\n    default_backend");
    let all = errors(&text);
    assert_eq!(all.len(), 1);
    assert!(
        all[0]
            .starts_with("proxy.yaml:4:20: frontends[0].error_files.503: cannot read error file /nonexistent/503.http"),
        "{}",
        all[0]
    );
}
