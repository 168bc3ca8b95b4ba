//! `log-format` (a JSON object written by hand in HAProxy becomes lb-proxy's JSON log with
//! the same fields; anything else a text template) and `unique-id-format` /
//! `unique-id-header`.

use lb_config::{AccessLogFormat, Template, UniqueId};

/// `text` as lb-proxy's log format. lb-proxy logs captured headers as HAProxy's whole blocks
/// (`%hr`, `%hs`: `{a|b}`), not slot by slot: `%[capture.req.hdr(0)]` (or `res`) becomes the
/// block when that side has one capture (`Ok((format, true))`, braces added), and is refused
/// when it has several.
pub(crate) fn log_format(text: &str, requests: usize, responses: usize) -> Result<(AccessLogFormat, bool), String> {
    let (text, rewritten) = captures_as_blocks(text, requests, responses)?;
    Ok((parse(&text)?, rewritten))
}

fn captures_as_blocks(text: &str, requests: usize, responses: usize) -> Result<(String, bool), String> {
    let mut out = text.to_owned();
    let mut rewritten = false;
    for (side, count, block) in [("req", requests, "%hr"), ("res", responses, "%hs")] {
        let prefix = format!("%[capture.{side}.hdr(");
        while let Some(start) = out.find(&prefix) {
            let rest = &out[start + prefix.len()..];
            let end = rest.find(")]").ok_or_else(|| format!("`{prefix}` without its `)]`"))?;
            if count != 1 || rest[..end].trim() != "0" {
                return Err(format!(
                    "`{prefix}{})]`: lb-proxy logs the captures of a side as one block ({block}), so one capture a side only",
                    &rest[..end]
                ));
            }
            out = format!("{}{block}{}", &out[..start], &rest[end + 2..]);
            rewritten = true;
        }
    }
    Ok((out, rewritten))
}

fn parse(text: &str) -> Result<AccessLogFormat, String> {
    if let Some(fields) = json_fields(text) {
        let fields = fields
            .into_iter()
            .map(|(k, v)| Template::parse(&v).map(|t| (k, t)).map_err(|e| format!("`{v}`: {e}")))
            .collect::<Result<Vec<_>, _>>()?;
        return Ok(AccessLogFormat::Json(fields));
    }
    Template::parse(text).map(AccessLogFormat::Text)
}

/// `{"key":"%ci","status":%ST,…}`: the keys and each value's template (quoted or not);
/// `None` when the text is not such an object.
fn json_fields(text: &str) -> Option<Vec<(String, String)>> {
    let inner = text.trim().strip_prefix('{')?.strip_suffix('}')?;
    let mut fields = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let after_quote = rest.strip_prefix('"')?;
        let end = after_quote.find('"')?;
        let key = after_quote[..end].to_owned();
        rest = after_quote[end + 1..].trim_start().strip_prefix(':')?.trim_start();
        let value;
        if let Some(quoted) = rest.strip_prefix('"') {
            let end = quoted.find('"')?;
            value = quoted[..end].to_owned();
            rest = quoted[end + 1..].trim_start();
        } else {
            let end = rest.find(',').unwrap_or(rest.len());
            value = rest[..end].trim().to_owned();
            rest = &rest[end..];
        }
        fields.push((key, value));
        rest = match rest.strip_prefix(',') {
            Some(more) => more.trim_start(),
            None if rest.is_empty() => rest,
            None => return None,
        };
    }
    (!fields.is_empty()).then_some(fields)
}

/// HAProxy's ID formats that are a random UUID: lb-proxy's default (no format).
const UUID: [&str; 3] = ["%[uuid()]", "%[uuid]", "%[uuid(4)]"];

pub(crate) fn unique_id(format: Option<&str>, header: &str) -> Result<UniqueId, String> {
    let format = match format {
        None => None,
        Some(f) if UUID.contains(&f) => None,
        Some(f) => Some(Template::parse(f).map_err(|e| format!("`{f}`: {e}"))?),
    };
    // HAProxy makes a new ID for every request, whatever the client sent.
    Ok(UniqueId { header: header.to_owned(), format, keep_client: false })
}
