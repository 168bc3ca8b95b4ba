//! Templates in HAProxy's log-format syntax (configuration.txt §8.2.6): literal text, `%xx`
//! variables (`%ci`, `%ST`, `%{+Q}r` …), `%[fetch]` sample fetches (`%[src]`,
//! `%[req.hdr(host)]`, `%[ssl_fc_sni]` …) and `%%`. The same templates make access-log lines,
//! header values, paths and redirect locations, so an operator learns one syntax.

use super::Fetch;

/// A parsed template and the text it was written as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    pub source: String,
    pub parts: Vec<TemplatePart>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TemplatePart {
    Literal(String),
    /// A variable; `quote`: written inside double quotes (`%{+Q}`).
    Var {
        var: Var,
        quote: bool,
    },
}

/// The variables of HAProxy's log-format that lb-proxy knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Var {
    ClientIp,
    ClientPort,
    FrontendIp,
    FrontendPort,
    /// `%t`: the accept date, `%tr`: the request's date (HAProxy's formats).
    AcceptDate,
    RequestDate,
    /// Seconds since the epoch at the request's start.
    Timestamp,
    Frontend,
    /// The frontend, with `~` after it for a TLS connection.
    FrontendTransport,
    Backend,
    Server,
    /// Timers in milliseconds: TR, Tw, Tc, Tr, Ta, Tt.
    TimeRequest,
    TimeQueue,
    TimeConnect,
    TimeResponse,
    TimeActive,
    TimeTotal,
    Status,
    BytesRead,
    BytesUploaded,
    TermState,
    TermStateCookie,
    Actconn,
    Feconn,
    Beconn,
    Srvconn,
    Retries,
    SrvQueue,
    BackendQueue,
    /// The request and response capture blocks, `{a|b}`.
    CapturedRequest,
    CapturedResponse,
    RequestLine,
    Method,
    Uri,
    Path,
    /// The query with its `?` (empty when none).
    Query,
    HttpVersion,
    UniqueId,
    Pid,
    /// The request counter of the process.
    RequestCounter,
    Hostname,
    TlsVersion,
    TlsCipher,
    /// A sample fetch, `%[…]`.
    Fetch(Fetch),
}

/// `%xx` name → variable. Longest names first where one is a prefix of another is not needed:
/// a name runs until the first character that cannot be part of one.
const VARS: &[(&str, Var)] = &[
    ("ci", Var::ClientIp),
    ("cp", Var::ClientPort),
    ("fi", Var::FrontendIp),
    ("fp", Var::FrontendPort),
    ("t", Var::AcceptDate),
    ("tr", Var::RequestDate),
    ("Ts", Var::Timestamp),
    ("f", Var::Frontend),
    ("ft", Var::FrontendTransport),
    ("b", Var::Backend),
    ("s", Var::Server),
    ("TR", Var::TimeRequest),
    ("Tw", Var::TimeQueue),
    ("Tc", Var::TimeConnect),
    ("Tr", Var::TimeResponse),
    ("Ta", Var::TimeActive),
    ("Tt", Var::TimeTotal),
    ("ST", Var::Status),
    ("B", Var::BytesRead),
    ("U", Var::BytesUploaded),
    ("ts", Var::TermState),
    ("tsc", Var::TermStateCookie),
    ("ac", Var::Actconn),
    ("fc", Var::Feconn),
    ("bc", Var::Beconn),
    ("sc", Var::Srvconn),
    ("rc", Var::Retries),
    ("sq", Var::SrvQueue),
    ("bq", Var::BackendQueue),
    ("hr", Var::CapturedRequest),
    ("hs", Var::CapturedResponse),
    ("r", Var::RequestLine),
    ("HM", Var::Method),
    ("HU", Var::Uri),
    ("HP", Var::Path),
    ("HQ", Var::Query),
    ("HV", Var::HttpVersion),
    ("ID", Var::UniqueId),
    ("pid", Var::Pid),
    ("rt", Var::RequestCounter),
    ("H", Var::Hostname),
    ("sslv", Var::TlsVersion),
    ("sslc", Var::TlsCipher),
];

/// `%[name]` and `%[name(arg)]` fetches → variable.
fn fetch_var(name: &str, arg: Option<&str>) -> Option<Var> {
    let fetch = |f: Fetch| Some(Var::Fetch(f));
    match (name, arg) {
        ("src", None) => Some(Var::ClientIp),
        ("src_port", None) => Some(Var::ClientPort),
        ("dst", None) => Some(Var::FrontendIp),
        ("dst_port", None) => Some(Var::FrontendPort),
        ("method", None) => Some(Var::Method),
        ("path", None) => Some(Var::Path),
        ("url", None) => Some(Var::Uri),
        ("query", None) => Some(Var::Query),
        ("unique-id", None) => Some(Var::UniqueId),
        ("fe_name", None) => Some(Var::Frontend),
        ("be_name", None) => Some(Var::Backend),
        ("srv_name", None) => Some(Var::Server),
        ("status", None) => Some(Var::Status),
        ("ssl_fc_sni", None) => fetch(Fetch::Sni),
        ("ssl_fc_alpn", None) => fetch(Fetch::Alpn),
        ("ssl_fc_protocol", None) => Some(Var::TlsVersion),
        ("ssl_fc_cipher", None) => Some(Var::TlsCipher),
        ("req.hdr" | "hdr" | "req.fhdr" | "fhdr", Some(h)) => fetch(Fetch::Header(h.to_ascii_lowercase())),
        ("res.hdr" | "shdr" | "res.fhdr", Some(h)) => fetch(Fetch::ResponseHeader(h.to_ascii_lowercase())),
        ("req.cook" | "cook", Some(c)) => fetch(Fetch::Cookie(c.to_owned())),
        ("urlp" | "url_param", Some(p)) => fetch(Fetch::Query(p.to_owned())),
        _ => None,
    }
}

impl Var {
    /// The value is a number (JSON logs write it unquoted).
    pub fn is_numeric(&self) -> bool {
        matches!(
            self,
            Var::ClientPort
                | Var::FrontendPort
                | Var::Timestamp
                | Var::TimeRequest
                | Var::TimeQueue
                | Var::TimeConnect
                | Var::TimeResponse
                | Var::TimeActive
                | Var::TimeTotal
                | Var::Status
                | Var::BytesRead
                | Var::BytesUploaded
                | Var::Actconn
                | Var::Feconn
                | Var::Beconn
                | Var::Srvconn
                | Var::Retries
                | Var::SrvQueue
                | Var::BackendQueue
                | Var::Pid
                | Var::RequestCounter
        )
    }
}

impl Template {
    /// Parses `text`; the error says what is wrong and at which character.
    pub fn parse(text: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut rest = text;
        while let Some(at) = rest.find('%') {
            literal.push_str(&rest[..at]);
            let offset = text.len() - rest.len() + at;
            rest = &rest[at + 1..];
            if let Some(after) = rest.strip_prefix('%') {
                literal.push('%');
                rest = after;
                continue;
            }
            let mut quote = false;
            if let Some(after) = rest.strip_prefix('{') {
                let Some(end) = after.find('}') else {
                    return Err(format!("at character {}: `%{{` without its `}}`", offset + 1));
                };
                for flag in after[..end].split(',') {
                    match flag {
                        "+Q" => quote = true,
                        "-Q" | "+X" | "-X" | "+E" | "-E" | "" => {}
                        other => return Err(format!("at character {}: unknown flag `{other}`", offset + 1)),
                    }
                }
                rest = &after[end + 1..];
            }
            let var = if let Some(after) = rest.strip_prefix('[') {
                let Some(end) = after.find(']') else {
                    return Err(format!("at character {}: `%[` without its `]`", offset + 1));
                };
                let expr = after[..end].trim();
                rest = &after[end + 1..];
                parse_fetch(expr).map_err(|e| format!("at character {}: {e}", offset + 1))?
            } else {
                let len = rest.find(|c: char| !c.is_ascii_alphanumeric()).unwrap_or(rest.len());
                let name = &rest[..len];
                // The longest known name that the text starts with: `%tsc` before `%ts`, and
                // `%ci:%cp` stops at the colon.
                let found = VARS.iter().filter(|(n, _)| name.starts_with(n)).max_by_key(|(n, _)| n.len());
                let Some((n, var)) = found else {
                    let shown = if name.is_empty() {
                        rest.chars().next().map(String::from).unwrap_or_default()
                    } else {
                        name.to_owned()
                    };
                    return Err(format!(
                        "at character {}: unknown variable `%{shown}` (write `%%` for a percent sign)",
                        offset + 1
                    ));
                };
                rest = &rest[n.len()..];
                var.clone()
            };
            if !literal.is_empty() {
                parts.push(TemplatePart::Literal(std::mem::take(&mut literal)));
            }
            parts.push(TemplatePart::Var { var, quote });
        }
        literal.push_str(rest);
        if !literal.is_empty() {
            parts.push(TemplatePart::Literal(literal));
        }
        Ok(Template { source: text.to_owned(), parts })
    }

    /// Only literal text: the value is the same for every request.
    pub fn literal(&self) -> Option<String> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                TemplatePart::Literal(text) => out.push_str(text),
                TemplatePart::Var { .. } => return None,
            }
        }
        Some(out)
    }

    /// The variables it uses.
    pub fn vars(&self) -> impl Iterator<Item = &Var> {
        self.parts.iter().filter_map(|p| match p {
            TemplatePart::Var { var, .. } => Some(var),
            TemplatePart::Literal(_) => None,
        })
    }
}

/// `name`, `name(arg)`, optionally followed by converters HAProxy users write out of habit
/// (`,lower`): refused with a message rather than silently ignored.
fn parse_fetch(expr: &str) -> Result<Var, String> {
    if let Some((_, converter)) = expr.split_once(',') {
        return Err(format!("converters are not supported (`,{converter}`)"));
    }
    let (name, arg) = match expr.split_once('(') {
        Some((name, rest)) => {
            let Some(arg) = rest.strip_suffix(')') else {
                return Err(format!("`{expr}`: `(` without its `)`"));
            };
            (name.trim(), Some(arg.trim()))
        }
        None => (expr, None),
    };
    fetch_var(name, arg.filter(|a| !a.is_empty())).ok_or_else(|| format!("unknown sample fetch `{expr}`"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn haproxy_httplog_parses() {
        let t = Template::parse(
            "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %CC %CS %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r",
        );
        // %CC and %CS (cookies) are not known: the error names them.
        assert!(t.expect_err("CC").contains("%CC"));
        let t = Template::parse(
            "%ci:%cp [%tr] %ft %b/%s %TR/%Tw/%Tc/%Tr/%Ta %ST %B %tsc %ac/%fc/%bc/%sc/%rc %sq/%bq %hr %hs %{+Q}r",
        )
        .expect("parses");
        assert_eq!(t.parts[0], TemplatePart::Var { var: Var::ClientIp, quote: false });
        assert_eq!(t.parts[1], TemplatePart::Literal(":".into()));
        assert!(t.parts.contains(&TemplatePart::Var { var: Var::TermStateCookie, quote: false }));
        assert_eq!(t.parts.last(), Some(&TemplatePart::Var { var: Var::RequestLine, quote: true }));
    }

    #[test]
    fn fetches_percent_and_errors() {
        let t = Template::parse("100%% %[req.hdr(X-Id)] %[src]").expect("parses");
        assert_eq!(t.parts[0], TemplatePart::Literal("100% ".into()));
        assert_eq!(t.parts[1], TemplatePart::Var { var: Var::Fetch(Fetch::Header("x-id".into())), quote: false });
        assert_eq!(t.literal(), None);
        assert_eq!(
            Template::parse("max-age=31536000").expect("literal").literal().as_deref(),
            Some("max-age=31536000")
        );
        for bad in ["%", "%zz", "%[nope]", "%[hdr(x),lower]", "%{+Q", "%[src"] {
            assert!(Template::parse(bad).is_err(), "{bad}");
        }
    }
}
