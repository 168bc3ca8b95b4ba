//! `http-request`, `http-response`, `redirect`, `monitor-uri` and the `capture request|response
//! header` lines into lb-proxy's `http_request` and `http_response` rules.

use lb_config::{
    Capture, Condition, Fetch, Guard, HeaderTemplate, Matcher, Redirect, RedirectTo, Reply, RequestAction, RequestRule,
    ResponseAction, ResponseRule, Template, Test,
};

use super::condition::{guard, split_guard, Acls, Shared};
use super::lexer::Line;

/// What a rule line needs to resolve its condition.
pub(crate) struct Scope<'a> {
    pub(crate) acls: &'a Acls,
    pub(crate) proxy: &'a str,
    pub(crate) shared: &'a mut Shared,
}

fn guard_of(words: Option<&[String]>, scope: &mut Scope<'_>) -> Result<Option<Guard>, String> {
    words.map(|w| guard(w, scope.acls, scope.proxy, scope.shared)).transpose()
}

fn template(text: &str) -> Result<Template, String> {
    Template::parse(text).map_err(|e| format!("`{text}`: {e}"))
}

/// `http-request ACTION … [if|unless …]`, or `redirect …` (the same as `http-request redirect`).
pub(crate) fn request(line: &Line, scope: &mut Scope<'_>) -> Result<RequestRule, String> {
    let words = if line.word(0) == "redirect" { &line.words[..] } else { &line.words[1..] };
    let (action, condition) = split_guard(words);
    let guard = guard_of(condition, scope)?;
    let args = &action[1.min(action.len())..];
    let action = match action.first().map(String::as_str).unwrap_or("") {
        "deny" => RequestAction::Deny(reply(args, 403)?),
        "return" => RequestAction::Return(reply(args, 200)?),
        "redirect" => RequestAction::Redirect(redirect(args)?),
        "allow" => RequestAction::Allow,
        verb @ ("set-header" | "add-header" | "del-header") => match header_edit(verb, args)? {
            HeaderEdit::Set(h) => RequestAction::SetHeader(h),
            HeaderEdit::Add(h) => RequestAction::AddHeader(h),
            HeaderEdit::Del(name) => RequestAction::DelHeader(name),
        },
        "set-path" => match args {
            [path] => RequestAction::SetPath(template(path)?),
            _ => return Err("expected one path format".to_owned()),
        },
        "capture" => match args {
            [sample, len, n] if len == "len" => RequestAction::Capture(capture(sample, n, "req")?),
            _ => {
                return Err(
                    "lb-proxy captures a request header with a length (`capture req.hdr(NAME) len N`)".to_owned()
                )
            }
        },
        other => return Err(unsupported(other)),
    };
    Ok(RequestRule { action, guard })
}

/// `http-response ACTION … [if|unless …]`.
pub(crate) fn response(line: &Line, scope: &mut Scope<'_>) -> Result<ResponseRule, String> {
    let (action, condition) = split_guard(&line.words[1..]);
    let guard = guard_of(condition, scope)?;
    let args = &action[1.min(action.len())..];
    let action = match action.first().map(String::as_str).unwrap_or("") {
        "deny" => ResponseAction::Deny(reply(args, 502)?),
        verb @ ("set-header" | "add-header" | "del-header") => match header_edit(verb, args)? {
            HeaderEdit::Set(h) => ResponseAction::SetHeader(h),
            HeaderEdit::Add(h) => ResponseAction::AddHeader(h),
            HeaderEdit::Del(name) => ResponseAction::DelHeader(name),
        },
        other => return Err(unsupported(other)),
    };
    Ok(ResponseRule { action, guard })
}

/// `set-header`, `add-header` and `del-header`, alike for requests and responses.
enum HeaderEdit {
    Set(HeaderTemplate),
    Add(HeaderTemplate),
    Del(String),
}

fn header_edit(verb: &str, args: &[String]) -> Result<HeaderEdit, String> {
    match (verb, args) {
        ("del-header", [name]) => Ok(HeaderEdit::Del(name.clone())),
        ("del-header", _) => Err("lb-proxy deletes a header by its exact name (`-m` is not translated)".to_owned()),
        (_, [name, value]) => {
            let header = HeaderTemplate { name: name.clone(), value: template(value)? };
            Ok(if verb == "set-header" { HeaderEdit::Set(header) } else { HeaderEdit::Add(header) })
        }
        _ => Err("expected a header name and a value".to_owned()),
    }
}

fn unsupported(action: &str) -> String {
    let why = match action {
        "tarpit" | "reject" | "silent-drop" => "lb-proxy refuses with `deny` (a status)",
        "auth" => "lb-proxy has no HTTP authentication",
        "set-var" | "unset-var" | "set-var-fmt" => "lb-proxy has no variables",
        "track-sc0" | "track-sc1" | "track-sc2" | "sc-inc-gpc0" | "sc-inc-gpc1" => "lb-proxy has no stick tables",
        "set-uri" | "replace-uri" | "replace-path" | "set-query" | "set-method" | "normalize-uri" | "replace-value"
        | "replace-header" | "set-status" => "lb-proxy rewrites with set-header, add-header, del-header and set-path",
        "use-service" | "lua" => "lb-proxy has no services or Lua",
        "set-log-level"
        | "set-timeout"
        | "set-priority-class"
        | "set-priority-offset"
        | "set-src"
        | "set-dst"
        | "set-mark"
        | "set-tos"
        | "wait-for-body"
        | "wait-for-handshake"
        | "early-hint"
        | "do-resolve" => "lb-proxy has no such action",
        _ => "not an action lb-proxy has",
    };
    format!("`{action}`: {why}")
}

/// `[status N | deny_status N] [content-type T] [string S | file F] [hdr NAME VALUE]…`.
fn reply(args: &[String], default_status: u16) -> Result<Reply, String> {
    let mut reply = Reply::status(default_status);
    let mut words = args.iter();
    while let Some(word) = words.next() {
        let mut value = || words.next().cloned().ok_or_else(|| format!("`{word}` needs a value"));
        match word.as_str() {
            "status" | "deny_status" => {
                let v = value()?;
                reply.status = v.parse().map_err(|_| format!("`{v}` is not a status"))?;
            }
            "content-type" => reply.content_type = Some(value()?),
            "string" => reply.body = value()?.into_bytes().into(),
            "file" => reply.body_file = Some(value()?.into()),
            "hdr" => {
                let name = value()?;
                let v = words.next().ok_or("`hdr` needs a name and a value")?;
                reply.headers.push((name, template(v)?));
            }
            "errorfile" | "errorfiles" => {
                return Err(
                    "a reply from an errorfile is not translated: write `status`, `content-type` and `file`".to_owned()
                )
            }
            "lf-string" | "lf-file" => return Err("a reply body made from a log-format is not translated".to_owned()),
            other => return Err(format!("`{other}` is not translated")),
        }
    }
    Ok(reply)
}

/// `location L | prefix P | scheme S [code N] [drop-query]`.
fn redirect(args: &[String]) -> Result<Redirect, String> {
    let mut words = args.iter();
    let to = match (words.next().map(String::as_str), words.next()) {
        (Some("location"), Some(l)) => RedirectTo::Location(template(l)?),
        (Some("prefix"), Some(p)) => RedirectTo::Prefix(p.clone()),
        (Some("scheme"), Some(s)) => RedirectTo::Scheme(s.clone()),
        _ => return Err("expected `redirect location|prefix|scheme VALUE`".to_owned()),
    };
    let mut redirect = Redirect { to, code: 302, keep_query: true };
    while let Some(word) = words.next() {
        match word.as_str() {
            "code" => {
                let code = words.next().map(String::as_str).unwrap_or("");
                redirect.code = code.parse().map_err(|_| format!("`{code}` is not a redirect code"))?;
            }
            "drop-query" => redirect.keep_query = false,
            other => return Err(format!("redirect option `{other}` is not translated")),
        }
    }
    Ok(redirect)
}

/// `req.hdr(NAME)` (or `hdr`, `res.hdr`, `shdr`) and a length into a capture.
fn capture(sample: &str, length: &str, side: &str) -> Result<Capture, String> {
    let header = ["req.hdr(", "hdr(", "res.hdr(", "shdr("]
        .iter()
        .find_map(|p| sample.strip_prefix(p))
        .and_then(|rest| rest.strip_suffix(')'))
        .filter(|h| !h.is_empty())
        .ok_or_else(|| format!("`{sample}`: lb-proxy captures headers ({side}.hdr(NAME))"))?;
    let length = length.parse().map_err(|_| format!("`{length}` is not a length"))?;
    Ok(Capture { header: header.to_owned(), length })
}

/// `capture request header NAME len N` / `capture response header NAME len N`.
pub(crate) fn capture_line(line: &Line) -> Result<(bool, Capture), String> {
    match line.words.as_slice() {
        [_, side, kind, name, len, n]
            if kind == "header" && len == "len" && (side == "request" || side == "response") =>
        {
            let length = n.parse().map_err(|_| format!("`{n}` is not a length"))?;
            Ok((side == "request", Capture { header: name.clone(), length }))
        }
        [_, _, kind, ..] if kind == "cookie" => Err("lb-proxy captures headers, not cookies".to_owned()),
        _ => Err("expected `capture request|response header NAME len N`".to_owned()),
    }
}

/// `monitor-uri URI`: a 200 for that URI, before everything else.
pub(crate) fn monitor_uri(line: &Line) -> Result<RequestRule, String> {
    let uri = line.word(1);
    if uri.is_empty() {
        return Err("expected `monitor-uri URI`".to_owned());
    }
    let test = Test { fetch: Fetch::Uri, matcher: Matcher::Equals(uri.to_owned()), ignore_case: false };
    let reply = Reply { content_type: Some("text/plain".to_owned()), body: "OK\n".into(), ..Reply::status(200) };
    Ok(RequestRule {
        action: RequestAction::Return(reply),
        guard: Some(Guard { condition: Condition::Test(test), negate: false }),
    })
}
