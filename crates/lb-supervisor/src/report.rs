//! HAProxy's output formats for `show info` and `show stat`, shared by every daemon: the plain
//! `Name: value` lines, `typed` and `json`, and `show schema json`.
//!
//! Tools that read HAProxy's runtime socket (hatop, exporters, the Data Plane API's parsers)
//! match on field names, their order and, in the typed forms, on each field's tags
//! (origin, nature, scope) and type. So the fields here are HAProxy 2.6's, position for
//! position; a daemon fills in what it has and the rest keep HAProxy's neutral value (0, or
//! empty and left out, as HAProxy leaves out an empty field).
//!
//! Main types: [`Info`] (one process's `show info`), [`StatField`] and [`StatObject`] (a
//! daemon's `show stat` columns and rows, for [`stat_typed`] and [`stat_json`]), [`Format`].

use std::fmt::Write as _;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

/// How `show info` and `show stat` answer: HAProxy's plain form, `typed` or `json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Plain,
    Typed,
    Json,
}

impl Format {
    /// The format word among a command's words (`show stat typed`, `show info json`), and the
    /// words left; HAProxy takes `desc` too (descriptions are not kept here, so it is ignored).
    pub fn take<'a>(words: &[&'a str]) -> Result<(Format, Vec<&'a str>), String> {
        let mut format = Format::Plain;
        let mut rest = Vec::new();
        for word in words {
            match *word {
                "typed" => format = Format::Typed,
                "json" => format = Format::Json,
                "desc" | "up" | "no-maint" => {}
                other => rest.push(other),
            }
        }
        Ok((format, rest))
    }
}

/// A value's type as HAProxy names it in the typed forms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Str,
    U32,
    U64,
    S32,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Str => "str",
            Kind::U32 => "u32",
            Kind::U64 => "u64",
            Kind::S32 => "s32",
        }
    }
}

/// HAProxy 2.6's `show info` fields by position: name, tags (origin, nature, scope letters)
/// and type. `None` marks positions HAProxy only fills in builds with features these daemons
/// lack (zlib's memory, 45 and 46).
const INFO_FIELDS: &[Option<(&str, &str, Kind)>] = &[
    Some(("Name", "POS", Kind::Str)),
    Some(("Version", "POS", Kind::Str)),
    Some(("Release_date", "POS", Kind::Str)),
    Some(("Nbthread", "CGS", Kind::U32)),
    Some(("Nbproc", "CGS", Kind::U32)),
    Some(("Process_num", "KGP", Kind::U32)),
    Some(("Pid", "SGP", Kind::U32)),
    Some(("Uptime", "MDP", Kind::Str)),
    Some(("Uptime_sec", "MDP", Kind::U32)),
    Some(("Memmax_MB", "CLP", Kind::U32)),
    Some(("PoolAlloc_MB", "MGP", Kind::U32)),
    Some(("PoolUsed_MB", "MGP", Kind::U32)),
    Some(("PoolFailed", "MCP", Kind::U32)),
    Some(("Ulimit-n", "CLP", Kind::U32)),
    Some(("Maxsock", "CLP", Kind::U32)),
    Some(("Maxconn", "CLP", Kind::U32)),
    Some(("Hard_maxconn", "CLP", Kind::U32)),
    Some(("CurrConns", "MGP", Kind::U32)),
    Some(("CumConns", "MCP", Kind::U32)),
    Some(("CumReq", "MCP", Kind::U32)),
    Some(("MaxSslConns", "MMP", Kind::U32)),
    Some(("CurrSslConns", "MGP", Kind::U32)),
    Some(("CumSslConns", "MCP", Kind::U32)),
    Some(("Maxpipes", "CLP", Kind::U32)),
    Some(("PipesUsed", "MGP", Kind::U32)),
    Some(("PipesFree", "MGP", Kind::U32)),
    Some(("ConnRate", "MRP", Kind::U32)),
    Some(("ConnRateLimit", "CLP", Kind::U32)),
    Some(("MaxConnRate", "MMP", Kind::U32)),
    Some(("SessRate", "MRP", Kind::U32)),
    Some(("SessRateLimit", "CLP", Kind::U32)),
    Some(("MaxSessRate", "MRP", Kind::U32)),
    Some(("SslRate", "MRP", Kind::U32)),
    Some(("SslRateLimit", "CLP", Kind::U32)),
    Some(("MaxSslRate", "MMP", Kind::U32)),
    Some(("SslFrontendKeyRate", "MGP", Kind::U32)),
    Some(("SslFrontendMaxKeyRate", "MMP", Kind::U32)),
    Some(("SslFrontendSessionReuse_pct", "MGP", Kind::U32)),
    Some(("SslBackendKeyRate", "MRP", Kind::U32)),
    Some(("SslBackendMaxKeyRate", "MMP", Kind::U32)),
    Some(("SslCacheLookups", "MCP", Kind::U32)),
    Some(("SslCacheMisses", "MCP", Kind::U32)),
    Some(("CompressBpsIn", "MRP", Kind::U32)),
    Some(("CompressBpsOut", "MRP", Kind::U32)),
    Some(("CompressBpsRateLim", "CLP", Kind::U32)),
    None,
    None,
    Some(("Tasks", "MGP", Kind::U32)),
    Some(("Run_queue", "MGP", Kind::U32)),
    Some(("Idle_pct", "MaP", Kind::U32)),
    Some(("node", "COS", Kind::Str)),
    Some(("description", "COS", Kind::Str)),
    Some(("Stopping", "MGP", Kind::U32)),
    Some(("Jobs", "MGP", Kind::U32)),
    Some(("Unstoppable Jobs", "MGP", Kind::U32)),
    Some(("Listeners", "MGP", Kind::U32)),
    Some(("ActivePeers", "MGP", Kind::U32)),
    Some(("ConnectedPeers", "MGP", Kind::U32)),
    Some(("DroppedLogs", "MGP", Kind::U32)),
    Some(("BusyPolling", "MGP", Kind::U32)),
    Some(("FailedResolutions", "MGP", Kind::U32)),
    Some(("TotalBytesOut", "MGP", Kind::U64)),
    // HAProxy's own spelling, kept: tools match on it.
    Some(("TotalSplicdedBytesOut", "MGP", Kind::U64)),
    Some(("BytesOutRate", "MRP", Kind::U64)),
    Some(("DebugCommandsIssued", "MGP", Kind::U32)),
    Some(("CumRecvLogs", "MCP", Kind::U32)),
    Some(("Build info", "POS", Kind::Str)),
    Some(("Memmax_bytes", "CLP", Kind::U32)),
    Some(("PoolAlloc_bytes", "MGP", Kind::U64)),
    Some(("PoolUsed_bytes", "MGP", Kind::U64)),
    Some(("Start_time_sec", "MDP", Kind::U32)),
    Some(("Tainted", "SGP", Kind::Str)),
];

/// One process's `show info`: every HAProxy field, neutral until set.
#[derive(Debug, Clone)]
pub struct Info {
    values: Vec<String>,
    /// A daemon's own fields, after HAProxy's (`Tls_library`), with their tags and type.
    extra: Vec<(&'static str, &'static str, Kind, String)>,
}

impl Default for Info {
    fn default() -> Self {
        Self::new()
    }
}

impl Info {
    /// Every field at HAProxy's neutral value: 0 for numbers (and `Tainted`), empty for text.
    pub fn new() -> Info {
        let values = INFO_FIELDS
            .iter()
            .map(|field| match field {
                Some((name, _, kind)) if *kind != Kind::Str || *name == "Tainted" => "0".to_owned(),
                _ => String::new(),
            })
            .collect();
        Info { values, extra: Vec::new() }
    }

    /// A field of the daemon's own, printed after HAProxy's, as text, product information.
    pub fn extra(&mut self, name: &'static str, value: impl ToString) -> &mut Info {
        self.extra.push((name, "POS", Kind::Str, value.to_string()));
        self
    }

    /// A counter of the daemon's own (a cumulative 64-bit figure, as HAProxy tags its
    /// `TotalBytesOut`), printed after HAProxy's fields.
    pub fn extra_counter(&mut self, name: &'static str, value: u64) -> &mut Info {
        self.extra.push((name, "MCP", Kind::U64, value.to_string()));
        self
    }

    /// The fields every daemon fills the same way: its name and version, this process, its
    /// threads, the host and the file descriptor limit.
    pub fn process(name: &str, version: &str, threads: usize, started: Instant, started_at: SystemTime) -> Info {
        let uptime = started.elapsed().as_secs();
        let open_files = rustix::process::getrlimit(rustix::process::Resource::Nofile).current.unwrap_or(0);
        let node = nix::unistd::gethostname().ok().and_then(|n| n.into_string().ok()).unwrap_or_default();
        let mut info = Info::new();
        info.set("Name", name)
            .set("Version", version)
            .set("Release_date", RELEASE_DATE)
            .set("Nbthread", threads)
            .set("Nbproc", 1)
            .set("Process_num", 1)
            .set("Pid", std::process::id())
            .set("Uptime", uptime_text(uptime))
            .set("Uptime_sec", uptime)
            .set("Ulimit-n", open_files)
            .set("Maxsock", open_files)
            .set("Idle_pct", idle_percent(threads, started))
            .set("node", node)
            .set("Build info", version)
            .set("Start_time_sec", started_at.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs()));
        info
    }

    /// Set a field by HAProxy's name. A name HAProxy does not have is a programming error, caught
    /// by the daemons' tests.
    pub fn set(&mut self, name: &str, value: impl ToString) -> &mut Info {
        match INFO_FIELDS.iter().position(|f| f.is_some_and(|(n, _, _)| n == name)) {
            Some(i) => self.values[i] = value.to_string(),
            None => debug_assert!(false, "show info has no field {name}"),
        }
        self
    }

    /// A field's value, for tests and for tools of this project.
    pub fn get(&self, name: &str) -> Option<&str> {
        let i = INFO_FIELDS.iter().position(|f| f.is_some_and(|(n, _, _)| n == name))?;
        Some(&self.values[i])
    }

    fn fields(&self) -> impl Iterator<Item = (usize, &'static str, &'static str, Kind, &str)> + '_ {
        let haproxys = INFO_FIELDS.iter().zip(&self.values).enumerate().filter_map(|(pos, (field, value))| {
            let (name, tags, kind) = (*field)?;
            (!value.is_empty()).then_some((pos, name, tags, kind, value.as_str()))
        });
        let own = self
            .extra
            .iter()
            .enumerate()
            .map(|(i, (name, tags, kind, value))| (INFO_FIELDS.len() + i, *name, *tags, *kind, value.as_str()));
        haproxys.chain(own)
    }

    pub fn render(&self, format: Format) -> String {
        let mut out = String::new();
        match format {
            Format::Plain => {
                for (_, name, _, _, value) in self.fields() {
                    let _ = writeln!(out, "{name}: {value}");
                }
            }
            Format::Typed => {
                for (pos, name, tags, kind, value) in self.fields() {
                    let _ = writeln!(out, "{pos}.{name}.1:{tags}:{}:{value}", kind.name());
                }
            }
            Format::Json => {
                let items: Vec<Value> = self
                    .fields()
                    .map(|(pos, name, tags, kind, value)| {
                        json!({
                            "field": {"pos": pos, "name": name},
                            "processNum": 1,
                            "tags": tags_json(tags),
                            "value": typed_value(kind, value),
                        })
                    })
                    .collect();
                out = Value::Array(items).to_string();
                out.push('\n');
            }
        }
        out
    }
}

/// One `show stat` column: its name, tags and type, by object type where HAProxy's tags
/// differ between frontends, backends and servers.
#[derive(Debug, Clone, Copy)]
pub struct StatField {
    pub name: &'static str,
    pub tags: &'static str,
    pub kind: Kind,
}

/// What a `show stat` row describes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ObjType {
    Frontend,
    Backend,
    Server,
}

impl ObjType {
    fn letter(self) -> char {
        match self {
            ObjType::Frontend => 'F',
            ObjType::Backend => 'B',
            ObjType::Server => 'S',
        }
    }

    fn name(self) -> &'static str {
        match self {
            ObjType::Frontend => "Frontend",
            ObjType::Backend => "Backend",
            ObjType::Server => "Server",
        }
    }
}

/// One `show stat` row: its object, proxy id (`iid`), server id (`sid`, 0 for frontends and
/// backends) and its cells, one per column, empty where there is no value.
#[derive(Debug, Clone)]
pub struct StatObject<'a> {
    pub obj: ObjType,
    pub iid: usize,
    pub sid: usize,
    pub cells: &'a [String],
}

/// `show stat typed`: a line per non-empty cell, `F.<iid>.<sid>.<pos>.<name>.1:<tags>:<type>:<value>`,
/// an empty line after each object.
pub fn stat_typed(columns: &dyn Fn(ObjType, usize) -> StatField, rows: &[StatObject<'_>]) -> String {
    let mut out = String::new();
    for row in rows {
        for (pos, cell) in row.cells.iter().enumerate().filter(|(_, c)| !c.is_empty()) {
            let field = columns(row.obj, pos);
            let _ = writeln!(
                out,
                "{}.{}.{}.{pos}.{}.1:{}:{}:{cell}",
                row.obj.letter(),
                row.iid,
                row.sid,
                field.name,
                field.tags,
                field.kind.name()
            );
        }
        out.push('\n');
    }
    out
}

/// `show stat json`: an array per object, of HAProxy's field objects.
pub fn stat_json(columns: &dyn Fn(ObjType, usize) -> StatField, rows: &[StatObject<'_>]) -> String {
    let objects: Vec<Value> = rows
        .iter()
        .map(|row| {
            let fields = row
                .cells
                .iter()
                .enumerate()
                .filter(|(_, c)| !c.is_empty())
                .map(|(pos, cell)| {
                    let field = columns(row.obj, pos);
                    json!({
                        "objType": row.obj.name(),
                        "proxyId": row.iid,
                        "id": row.sid,
                        "field": {"pos": pos, "name": field.name},
                        "processNum": 1,
                        "tags": tags_json(field.tags),
                        "value": typed_value(field.kind, cell),
                    })
                })
                .collect();
            Value::Array(fields)
        })
        .collect();
    let mut out = Value::Array(objects).to_string();
    out.push('\n');
    out
}

/// A value as HAProxy's JSON writes it: numbers as numbers, the rest as strings.
fn typed_value(kind: Kind, value: &str) -> Value {
    let number = match kind {
        Kind::Str => None,
        Kind::U32 | Kind::U64 => value.parse::<u64>().ok().map(Value::from),
        Kind::S32 => value.parse::<i64>().ok().map(Value::from),
    };
    match number {
        Some(n) => json!({"type": kind.name(), "value": n}),
        // A number that does not parse is written as text rather than lost.
        None => json!({"type": "str", "value": value}),
    }
}

/// The three tag letters spelled out, as HAProxy's JSON does.
fn tags_json(tags: &str) -> Value {
    let mut letters = tags.chars();
    let origin = match letters.next() {
        Some('M') => "Metric",
        Some('S') => "Status",
        Some('K') => "Key",
        Some('C') => "Config",
        Some('P') => "Product",
        _ => "Unknown",
    };
    let nature = match letters.next() {
        Some('A') => "Age",
        Some('a') => "Avg",
        Some('C') => "Counter",
        Some('D') => "Duration",
        Some('G') => "Gauge",
        Some('L') => "Limit",
        Some('M') => "Max",
        Some('m') => "Min",
        Some('N') => "Name",
        Some('O') => "Output",
        Some('R') => "Rate",
        Some('T') => "Time",
        _ => "Unknown",
    };
    let scope = match letters.next() {
        Some('C') => "Cluster",
        Some('P') => "Process",
        Some('S') => "Service",
        Some('s') => "System",
        _ => "Unknown",
    };
    json!({"origin": origin, "nature": nature, "scope": scope})
}

/// `show schema json`: the JSON Schema (draft 04) of `show info json`, `show stat json` and an
/// error, in the shape of HAProxy's, so validators written for HAProxy accept ours.
pub fn schema_json() -> String {
    let tags = json!({
        "type": "object",
        "properties": {
            "origin": {"type": "string", "enum": ["Metric", "Status", "Key", "Config", "Product", "Unknown"]},
            "nature": {"type": "string", "enum": ["Gauge", "Limit", "Min", "Max", "Rate", "Counter", "Duration", "Age", "Time", "Name", "Output", "Avg", "Unknown"]},
            "scope": {"type": "string", "enum": ["Cluster", "Process", "Service", "System", "Unknown"]}
        },
        "required": ["origin", "nature", "scope"]
    });
    let typed_value = json!({
        "type": "object",
        "oneOf": [
            {"properties": {"type": {"enum": ["s32", "s64"]}, "value": {"type": "integer"}}},
            {"properties": {"type": {"enum": ["u32", "u64"]}, "value": {"type": "integer", "minimum": 0}}},
            {"properties": {"type": {"enum": ["str"]}, "value": {"type": "string"}}}
        ],
        "required": ["type", "value"]
    });
    let field = json!({
        "type": "object",
        "properties": {"pos": {"type": "integer", "minimum": 0}, "name": {"type": "string"}},
        "required": ["pos", "name"]
    });
    let schema = json!({
        "$schema": "http://json-schema.org/draft-04/schema#",
        "oneOf": [
            {
                "title": "Info",
                "type": "array",
                "items": {
                    "title": "InfoItem",
                    "type": "object",
                    "properties": {
                        "field": {"$ref": "#/definitions/field"},
                        "processNum": {"$ref": "#/definitions/processNum"},
                        "tags": {"$ref": "#/definitions/tags"},
                        "value": {"$ref": "#/definitions/typedValue"}
                    },
                    "required": ["field", "processNum", "tags", "value"]
                }
            },
            {
                "title": "Stat",
                "type": "array",
                "items": {
                    "title": "InfoItem",
                    "type": "object",
                    "properties": {
                        "objType": {"enum": ["Frontend", "Backend", "Listener", "Server", "Unknown"]},
                        "proxyId": {"type": "integer", "minimum": 0},
                        "id": {"type": "integer", "minimum": 0},
                        "field": {"$ref": "#/definitions/field"},
                        "processNum": {"$ref": "#/definitions/processNum"},
                        "tags": {"$ref": "#/definitions/tags"},
                        "value": {"$ref": "#/definitions/typedValue"}
                    },
                    "required": ["objType", "proxyId", "id", "field", "processNum", "tags", "value"]
                }
            },
            {
                "title": "Error",
                "type": "object",
                "properties": {"errorStr": {"type": "string"}},
                "required": ["errorStr"]
            }
        ],
        "definitions": {
            "field": field,
            "processNum": {"type": "integer", "minimum": 1},
            "tags": tags,
            "typedValue": typed_value
        }
    });
    let mut out = schema.to_string();
    out.push('\n');
    out
}

/// The share of the process's threads' time spent idle since the previous `show info` (at
/// least a second back; before that, since the process started), from its CPU time.
fn idle_percent(threads: usize, started: Instant) -> u64 {
    static LAST: Mutex<Option<(Instant, Duration)>> = Mutex::new(None);
    let Ok(usage) = nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_SELF) else {
        return 100;
    };
    let micros = |t: nix::sys::time::TimeVal| {
        Duration::new(t.tv_sec().max(0) as u64, 0) + Duration::from_micros(t.tv_usec().max(0) as u64)
    };
    let cpu = micros(usage.user_time()) + micros(usage.system_time());
    let now = Instant::now();
    let mut last = LAST.lock().unwrap_or_else(PoisonError::into_inner);
    let (since, cpu_then) = last.unwrap_or((started, Duration::ZERO));
    let wall = now.duration_since(since).as_secs_f64() * threads.max(1) as f64;
    if now.duration_since(since) >= Duration::from_secs(1) {
        *last = Some((now, cpu));
    }
    if wall <= 0.0 {
        return 100;
    }
    let busy = (cpu.saturating_sub(cpu_then)).as_secs_f64() / wall;
    (100.0 - busy * 100.0).clamp(0.0, 100.0).round() as u64
}

/// HAProxy's uptime: `0d 0h00m01s`.
pub fn uptime_text(secs: u64) -> String {
    let (days, rest) = (secs / 86_400, secs % 86_400);
    format!("{days}d {}h{:02}m{:02}s", rest / 3600, rest % 3600 / 60, rest % 60)
}

/// This release's date, as HAProxy prints its own (`Release_date`).
pub const RELEASE_DATE: &str = "2026/11/25";

#[cfg(test)]
mod tests;
