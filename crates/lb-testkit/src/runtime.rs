//! The runtime socket and what comes out of it, read the way the tools that use them read them:
//!
//! - [`ProxyProcess::runtime`](crate::ProxyProcess::runtime) (the runtime socket) and
//!   [`ProxyProcess::runtime_command`](crate::ProxyProcess::runtime_command) (the control socket);
//! - [`send_line`]: one line of commands on the Unix runtime socket (what `socat` does);
//! - [`parse_stat_csv`]: `show stat`'s CSV, parsed from HAProxy's documented format
//!   (management.txt, "9.1. CSV format": a first line `# ` + column titles, then classic CSV,
//!   comma-delimited, `"` as an optional text delimiter with `""` inside, every line ending with
//!   a comma), each row a map from column title to value;
//! - [`parse_servers_state`]: `show servers state` by its header's column names;
//! - [`parse_prometheus`]: Prometheus' text exposition format 0.0.4, strictly (HELP/TYPE before
//!   samples, metric and label names, escapes, values).

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

impl crate::ProxyProcess {
    /// One line of runtime commands on the runtime socket, as `socat` would send it; the
    /// whole answer (each command's output followed by an empty line).
    pub fn runtime(&self, line: &str) -> String {
        send_line(self.runtime_socket(), line).unwrap_or_else(|e| panic!("runtime socket: {e}"))
    }

    /// One runtime command through the control socket (what lbctl and lb-watcher do):
    /// `Ok(output)` or `Err(message)` when refused.
    pub async fn runtime_command(&self, line: &str) -> Result<String, String> {
        let request = lb_supervisor::Request::Runtime { line: line.to_owned() };
        match lb_supervisor::control::call(self.control_socket(), &request).await {
            Ok(lb_supervisor::Response::Runtime { output }) => Ok(output),
            Ok(lb_supervisor::Response::Error { message }) => Err(message),
            Ok(other) => panic!("unexpected answer to {line:?}: {other:?}"),
            Err(e) => panic!("control socket: {e}"),
        }
    }

    /// A command that must be accepted: its output (panics naming the refusal).
    pub async fn runtime_ok(&self, line: &str) -> String {
        self.runtime_command(line).await.unwrap_or_else(|e| panic!("{line}: refused: {e}"))
    }

    /// A command that must be refused: the refusal (panics when it was accepted).
    pub async fn runtime_refused(&self, line: &str) -> String {
        match self.runtime_command(line).await {
            Err(message) => message,
            Ok(output) => panic!("{line}: accepted ({output:?}), should be refused"),
        }
    }
}

/// Send `line` on the runtime socket and read until the daemon closes the connection.
pub fn send_line(socket: &Path, line: &str) -> std::io::Result<String> {
    let mut stream = UnixStream::connect(socket)?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(line.as_bytes())?;
    stream.write_all(b"\n")?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer)?;
    Ok(answer)
}

/// One row of `show stat`, by column title.
pub type StatRow = HashMap<String, String>;

/// Parse `show stat`'s CSV; the column titles come back too, in order.
pub fn parse_stat_csv(text: &str) -> Result<(Vec<String>, Vec<StatRow>), String> {
    let mut lines = text.lines();
    let header = lines.next().ok_or("empty output")?;
    let titles = header.strip_prefix("# ").ok_or_else(|| format!("the first line must start with '# ': {header:?}"))?;
    let mut columns: Vec<String> = titles.split(',').map(str::to_owned).collect();
    // Every line ends with a comma: the last field is empty and is not a column.
    if columns.last().is_some_and(String::is_empty) {
        columns.pop();
    }
    let mut rows = Vec::new();
    for (n, line) in lines.enumerate() {
        if line.is_empty() {
            continue;
        }
        let mut fields = split_csv_line(line).map_err(|e| format!("line {}: {e}", n + 2))?;
        if fields.len() == columns.len() + 1 && fields.last().is_some_and(String::is_empty) {
            fields.pop();
        }
        if fields.len() != columns.len() {
            return Err(format!("line {}: {} fields for {} columns", n + 2, fields.len(), columns.len()));
        }
        rows.push(columns.iter().cloned().zip(fields).collect());
    }
    Ok((columns, rows))
}

/// RFC 4180 fields of one line.
fn split_csv_line(line: &str) -> Result<Vec<String>, String> {
    let mut fields = Vec::new();
    let mut chars = line.chars().peekable();
    loop {
        let mut field = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next() {
                    Some('"') if chars.peek() == Some(&'"') => {
                        chars.next();
                        field.push('"');
                    }
                    Some('"') => break,
                    Some(c) => field.push(c),
                    None => return Err("unterminated quoted field".into()),
                }
            }
            match chars.next() {
                None => {
                    fields.push(field);
                    return Ok(fields);
                }
                Some(',') => {}
                Some(c) => return Err(format!("'{c}' after a quoted field")),
            }
        } else {
            loop {
                match chars.next() {
                    None => {
                        fields.push(field);
                        return Ok(fields);
                    }
                    Some(',') => break,
                    Some('"') => return Err("a quote inside an unquoted field".into()),
                    Some(c) => field.push(c),
                }
            }
        }
        fields.push(field);
    }
}

/// `show servers state`: the version line must be `1`; each row by the header's column names.
pub fn parse_servers_state(text: &str) -> Result<Vec<HashMap<String, String>>, String> {
    let mut lines = text.lines();
    match lines.next() {
        Some("1") => {}
        other => return Err(format!("expected the version line '1', got {other:?}")),
    }
    let header = lines.next().ok_or("no header")?;
    let names: Vec<&str> =
        header.strip_prefix("# ").ok_or_else(|| format!("bad header {header:?}"))?.split(' ').collect();
    let mut rows = Vec::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() != names.len() {
            return Err(format!("{} fields for {} columns: {line:?}", fields.len(), names.len()));
        }
        rows.push(names.iter().map(|n| n.to_string()).zip(fields.into_iter().map(str::to_owned)).collect());
    }
    Ok(rows)
}

/// A parsed `/metrics` body: families by name.
#[derive(Debug, Default)]
pub struct Metrics {
    pub families: BTreeMap<String, Family>,
}

#[derive(Debug, Default)]
pub struct Family {
    pub kind: String,
    pub help: String,
    pub samples: Vec<Sample>,
}

#[derive(Debug, Clone)]
pub struct Sample {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

impl Metrics {
    /// The value of `name` with exactly these labels.
    /// A histogram's `_bucket`, `_sum` and `_count` samples are found by their own names.
    pub fn value(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let family = self.families.get(name).or_else(|| self.families.get(histogram_family(name)?))?;
        let want: BTreeMap<String, String> = labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        family.samples.iter().find(|s| s.name == name && s.labels == want).map(|s| s.value)
    }
}

/// The family of a histogram's or summary's sample name (`x_bucket`, `x_sum`, `x_count` → `x`).
fn histogram_family(name: &str) -> Option<&str> {
    ["_bucket", "_sum", "_count"].iter().find_map(|suffix| name.strip_suffix(suffix))
}

fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Parse Prometheus' text format, refusing what a Prometheus server would refuse.
pub fn parse_prometheus(text: &str) -> Result<Metrics, String> {
    let mut metrics = Metrics::default();
    for (n, line) in text.lines().enumerate() {
        let at = |e: String| format!("line {}: {e}: {line:?}", n + 1);
        if line.trim().is_empty() {
            continue;
        }
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (keyword, name, tail) = (parts.next(), parts.next(), parts.next().unwrap_or(""));
            let Some(name) = name else { continue };
            match keyword {
                Some("HELP") => {
                    if !valid_metric_name(name) {
                        return Err(at("bad metric name".into()));
                    }
                    metrics.families.entry(name.to_owned()).or_default().help = tail.to_owned();
                }
                Some("TYPE") => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&tail) {
                        return Err(at(format!("unknown type {tail:?}")));
                    }
                    let family = metrics.families.entry(name.to_owned()).or_default();
                    if !family.kind.is_empty() {
                        return Err(at("second TYPE line".into()));
                    }
                    if !family.samples.is_empty() {
                        return Err(at("TYPE after samples".into()));
                    }
                    family.kind = tail.to_owned();
                }
                _ => {}
            }
            continue;
        }
        if line.starts_with('#') {
            continue;
        }
        let sample = parse_sample(line).map_err(at)?;
        let family_name = match metrics.families.get(&sample.name) {
            Some(_) => sample.name.clone(),
            None => histogram_family(&sample.name)
                .filter(|f| metrics.families.get(*f).is_some_and(|f| f.kind == "histogram" || f.kind == "summary"))
                .map(str::to_owned)
                .ok_or_else(|| at(format!("sample of {} before its TYPE", sample.name)))?,
        };
        let family = metrics.families.get_mut(&family_name).expect("found above");
        if family.kind.is_empty() {
            return Err(at("sample before TYPE".into()));
        }
        if family.samples.iter().any(|s| s.name == sample.name && s.labels == sample.labels) {
            return Err(at("duplicate sample".into()));
        }
        if family.kind == "counter" && (sample.value < 0.0 || sample.value.is_nan()) {
            return Err(at("negative counter".into()));
        }
        family.samples.push(sample);
    }
    Ok(metrics)
}

fn parse_sample(line: &str) -> Result<Sample, String> {
    let name_end = line.find(['{', ' ']).ok_or("no value")?;
    let name = &line[..name_end];
    if !valid_metric_name(name) {
        return Err(format!("bad metric name {name:?}"));
    }
    let mut rest = &line[name_end..];
    let mut labels = BTreeMap::new();
    if let Some(after) = rest.strip_prefix('{') {
        let mut chars = after.char_indices().peekable();
        let end;
        loop {
            while chars.peek().is_some_and(|(_, c)| *c == ',' || *c == ' ') {
                chars.next();
            }
            if let Some(&(i, '}')) = chars.peek() {
                end = i + 1;
                break;
            }
            let mut key = String::new();
            for (_, c) in chars.by_ref() {
                if c == '=' {
                    break;
                }
                key.push(c);
            }
            if !valid_label_name(&key) {
                return Err(format!("bad label name {key:?}"));
            }
            if chars.next().map(|(_, c)| c) != Some('"') {
                return Err("label value must be quoted".into());
            }
            let mut value = String::new();
            loop {
                match chars.next().map(|(_, c)| c) {
                    Some('\\') => match chars.next().map(|(_, c)| c) {
                        Some('\\') => value.push('\\'),
                        Some('"') => value.push('"'),
                        Some('n') => value.push('\n'),
                        other => return Err(format!("bad escape {other:?}")),
                    },
                    Some('"') => break,
                    Some(c) => value.push(c),
                    None => return Err("unterminated label value".into()),
                }
            }
            if labels.insert(key.clone(), value).is_some() {
                return Err(format!("label {key} twice"));
            }
        }
        rest = &after[end..];
    }
    let mut parts = rest.split_whitespace();
    let value = parts.next().ok_or("no value")?;
    let value: f64 = match value {
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        "NaN" => f64::NAN,
        v => v.parse().map_err(|_| format!("bad value {v:?}"))?,
    };
    if let Some(ts) = parts.next() {
        ts.parse::<i64>().map_err(|_| format!("bad timestamp {ts:?}"))?;
    }
    if parts.next().is_some() {
        return Err("trailing text".into());
    }
    Ok(Sample { name: name.to_owned(), labels, value })
}

/// `promtool check metrics` on `text`: its complaints, empty when there are none.
pub fn promtool_check(text: &str) -> String {
    let mut promtool = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("promtool (scripts/install-deps test installs it)");
    std::io::Write::write_all(&mut promtool.stdin.take().expect("stdin"), text.as_bytes()).expect("to promtool");
    let checked = promtool.wait_with_output().expect("promtool");
    let mut complaints = String::from_utf8_lossy(&checked.stdout).into_owned();
    complaints.push_str(&String::from_utf8_lossy(&checked.stderr));
    if !checked.status.success() && complaints.is_empty() {
        complaints = format!("promtool failed: {}", checked.status);
    }
    complaints
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_as_documented() {
        let text = "# pxname,svname,status,\nweb,FRONTEND,OPEN,\n\"a,b\",\"say \"\"hi\"\"\",UP,\n";
        let (columns, rows) = parse_stat_csv(text).unwrap_or_default();
        assert_eq!(columns, ["pxname", "svname", "status"]);
        assert_eq!(rows[1]["pxname"], "a,b");
        assert_eq!(rows[1]["svname"], "say \"hi\"");
        assert!(parse_stat_csv("pxname,svname\n").is_err());
        assert!(parse_stat_csv("# a,b,\n1,2,3,4,\n").is_err());
    }

    #[test]
    fn prometheus_text() {
        let text = "# HELP x_total X.\n# TYPE x_total counter\nx_total{a=\"q\\\"\",b=\"2\"} 3\nx_total 4 1700000000\n";
        let m = parse_prometheus(text).unwrap_or_default();
        assert_eq!(m.value("x_total", &[("a", "q\""), ("b", "2")]), Some(3.0));
        assert_eq!(m.value("x_total", &[]), Some(4.0));
        assert!(parse_prometheus("x 1\n").is_err(), "sample without TYPE");
        assert!(parse_prometheus("# TYPE x counter\nx -1\n").is_err());
        assert!(parse_prometheus("# TYPE x gauge\nx{1a=\"b\"} 1\n").is_err());
    }
}
