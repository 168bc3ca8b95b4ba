//! The answers of `show stat`, `show servers state` and `show info` for a person (aligned
//! tables of the columns that matter) and for a program (`--json`: every column, as JSON
//! objects named by the daemon's own column names, numbers as numbers, empty cells left out).
//!
//! The daemon's text is HAProxy's format (CSV with a `# ` header, space-separated rows under a
//! `# ` header, `Name: value` lines); lbctl only reshapes it, so it works the same against
//! lb-proxy and lb-tls.

use std::fmt::Write as _;

use serde_json::{Map, Value};

/// Which runtime answers lbctl knows how to reshape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Stat,
    ServersState,
    Info,
}

impl Shape {
    /// The shape of the answer to `line`, when it is one command lbctl reshapes.
    pub(crate) fn of(line: &str) -> Option<Shape> {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["show", "stat"] | ["show", "stat", _, _, _] => Some(Shape::Stat),
            ["show", "servers", "state", ..] => Some(Shape::ServersState),
            ["show", "info"] => Some(Shape::Info),
            _ => None,
        }
    }
}

/// The columns of `show stat` worth a terminal's width, with their headings.
const STAT_COLUMNS: [(&str, &str); 13] = [
    ("pxname", "NAME"),
    ("svname", "SERVER"),
    ("status", "STATUS"),
    ("weight", "WEIGHT"),
    ("scur", "CUR"),
    ("smax", "MAX"),
    ("stot", "TOTAL"),
    ("req_tot", "REQUESTS"),
    ("hrsp_5xx", "5XX"),
    ("bin", "BYTES_IN"),
    ("bout", "BYTES_OUT"),
    ("check_status", "CHECK"),
    ("lastchg", "LASTCHG"),
];

const STATE_COLUMNS: [(&str, &str); 8] = [
    ("be_name", "BACKEND"),
    ("srv_name", "SERVER"),
    ("srv_addr", "ADDRESS"),
    ("srv_port", "PORT"),
    ("srv_op_state", "OP"),
    ("srv_admin_state", "ADMIN"),
    ("srv_uweight", "WEIGHT"),
    ("srv_time_since_last_change", "LASTCHG"),
];

/// Rows of a `# `-headed table: `show stat` (CSV) or `show servers state` (spaces).
pub(crate) fn rows(shape: Shape, text: &str) -> Result<Vec<Vec<(String, String)>>, String> {
    let mut lines = text.lines().filter(|l| !l.is_empty());
    if shape == Shape::ServersState {
        match lines.next() {
            Some("1") => {}
            other => return Err(format!("unknown servers state version {other:?}")),
        }
    }
    let header = lines.next().and_then(|h| h.strip_prefix("# ")).ok_or("no '# ' header line")?;
    let split = |line: &str| -> Vec<String> {
        match shape {
            Shape::Stat => csv_fields(line),
            _ => line.split(' ').map(str::to_owned).collect(),
        }
    };
    let names = split(header);
    Ok(lines.map(|line| names.iter().cloned().zip(split(line)).filter(|(n, _)| !n.is_empty()).collect()).collect())
}

/// One CSV line's fields (`"` quoting, `""` inside).
fn csv_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut quoted = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        let field = fields.last_mut();
        match (c, quoted, field) {
            ('"', true, Some(f)) if chars.peek() == Some(&'"') => {
                chars.next();
                f.push('"');
            }
            ('"', _, _) => quoted = !quoted,
            (',', false, _) => fields.push(String::new()),
            (c, _, Some(f)) => f.push(c),
            (_, _, None) => {}
        }
    }
    fields
}

/// `show info`'s `Name: value` lines.
fn info_pairs(text: &str) -> Vec<(String, String)> {
    text.lines().filter_map(|l| l.split_once(": ")).map(|(k, v)| (k.to_owned(), v.to_owned())).collect()
}

fn value(text: &str) -> Value {
    match text.parse::<i64>() {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(text),
    }
}

fn object(pairs: &[(String, String)]) -> Value {
    let map: Map<String, Value> =
        pairs.iter().filter(|(_, v)| !v.is_empty()).map(|(k, v)| (k.clone(), value(v))).collect();
    Value::Object(map)
}

/// The answer as JSON: an array of row objects, or one object for `show info`.
pub(crate) fn json(shape: Shape, text: &str) -> Result<Value, String> {
    if shape == Shape::Info {
        return Ok(object(&info_pairs(text)));
    }
    Ok(Value::Array(rows(shape, text)?.iter().map(|r| object(r)).collect()))
}

/// The answer as an aligned table.
pub(crate) fn human(shape: Shape, text: &str) -> Result<String, String> {
    let columns: &[(&str, &str)] = match shape {
        Shape::Stat => &STAT_COLUMNS,
        Shape::ServersState => &STATE_COLUMNS,
        Shape::Info => return Ok(text.to_owned()),
    };
    let rows = rows(shape, text)?;
    let cells: Vec<Vec<String>> = rows
        .iter()
        .map(|row| {
            columns
                .iter()
                .map(|(name, _)| {
                    let cell = row.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str()).unwrap_or("");
                    if cell.is_empty() {
                        "-".to_owned()
                    } else {
                        describe(shape, name, cell)
                    }
                })
                .collect()
        })
        .collect();
    Ok(align(&columns.iter().map(|(_, h)| (*h).to_owned()).collect::<Vec<_>>(), &cells))
}

/// Numeric codes of `show servers state` in words.
fn describe(shape: Shape, column: &str, cell: &str) -> String {
    match (shape, column, cell) {
        (Shape::ServersState, "srv_op_state", "0") => "stopped".into(),
        (Shape::ServersState, "srv_op_state", "2") => "running".into(),
        (Shape::ServersState, "srv_admin_state", "0") => "ready".into(),
        (Shape::ServersState, "srv_admin_state", "1") => "maint".into(),
        (Shape::ServersState, "srv_admin_state", "8") => "drain".into(),
        _ => cell.to_owned(),
    }
}

fn align(header: &[String], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    for row in std::iter::once(header).chain(rows.iter().map(Vec::as_slice)) {
        let mut line = String::new();
        for (cell, w) in row.iter().zip(&widths) {
            let _ = write!(line, "{cell:<w$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str =
        "# pxname,svname,scur,status,weight,check_status,\nweb,FRONTEND,3,OPEN,,,\napi,\"a,1\",0,UP,1,L7OK,\n";
    const STATE: &str = "1\n# be_id be_name srv_id srv_name srv_addr srv_op_state srv_admin_state srv_uweight \
srv_iweight srv_time_since_last_change srv_port\n3 api 1 a1 10.0.0.1 2 8 5 1 12 8080\n";

    #[test]
    fn shapes() {
        assert_eq!(Shape::of("show stat"), Some(Shape::Stat));
        assert_eq!(Shape::of("show stat api 4 -1"), Some(Shape::Stat));
        assert_eq!(Shape::of(" show  servers state api"), Some(Shape::ServersState));
        assert_eq!(Shape::of("show info"), Some(Shape::Info));
        assert_eq!(Shape::of("show stat typed"), None);
        assert_eq!(Shape::of("set server a/b state drain"), None);
    }

    #[test]
    fn stat_as_json_and_table() -> Result<(), String> {
        let json = json(Shape::Stat, STAT)?;
        assert_eq!(json[0]["pxname"], "web");
        assert_eq!(json[0]["scur"], 3);
        assert!(json[0].get("weight").is_none(), "empty cells are left out");
        assert_eq!(json[1]["svname"], "a,1");
        let table = human(Shape::Stat, STAT)?;
        let mut lines = table.lines();
        assert!(lines.next().is_some_and(|l| l.starts_with("NAME  SERVER    STATUS  WEIGHT  CUR")), "{table}");
        assert!(lines.next().is_some_and(|l| l.starts_with("web   FRONTEND  OPEN    -       3")), "{table}");
        Ok(())
    }

    #[test]
    fn servers_state_as_json_and_table() -> Result<(), String> {
        let json = json(Shape::ServersState, STATE)?;
        assert_eq!(json[0]["srv_name"], "a1");
        assert_eq!(json[0]["srv_admin_state"], 8);
        let table = human(Shape::ServersState, STATE)?;
        assert!(table.contains("api      a1      10.0.0.1  8080  running  drain  5       12"), "{table}");
        assert!(rows(Shape::ServersState, "2\n# a\n").is_err());
        Ok(())
    }

    #[test]
    fn info_as_json() -> Result<(), String> {
        let json = json(Shape::Info, "Name: lb-proxy\nPid: 12\nUptime: 0d 0h01m00s\n")?;
        assert_eq!(json["Pid"], 12);
        assert_eq!(json["Uptime"], "0d 0h01m00s");
        Ok(())
    }
}
