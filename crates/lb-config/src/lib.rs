//! lb-proxy's configuration: the YAML schema, its validation, and the typed values the proxy
//! runs on.
//!
//! lb-proxy reads its configuration with [`Config::load`] at start and on every reload; a file
//! that does not validate is refused as a whole, with one [`Diagnostic`] per problem, located
//! like a compiler message (`proxy.yaml:42:18: backends[1].servers[3].address: invalid port
//! 99999`). lb-watcher, which keeps backend server lists in step with ZooKeeper, builds or edits
//! a [`Config`] and writes it out with [`Config::to_yaml`], which [`Config::parse`] reads back
//! to an equal value.
//!
//! The main types are [`Config`] and its parts ([`Global`], [`Frontend`], [`Backend`],
//! [`Server`], [`Timeouts`], [`ErrorPages`], …), all fully resolved: `defaults:` has been merged
//! into every frontend and backend, durations and addresses are parsed, errorfiles have been
//! read. Loading fails with [`Error`]. The schema is documented for operators in
//! `docs/config-lb-proxy.md`, and `etc/lb-proxy.yaml` is a commented example.
//!
//! # Layout
//!
//! - `model`: the typed, resolved values; what downstream code uses.
//! - `load`: [`Config::load`] and [`Config::parse`], turning serde's errors into diagnostics.
//! - `raw`: serde structs mirroring the YAML, shared by parsing and rendering.
//! - `validate`: raw → typed, collecting every problem; one module per section plus `links`
//!   for the checks across sections (names, binds, backend references, modes).
//! - `check`: [`Checker`], the checks of single values and the diagnostics they record, used by
//!   `validate` and by lb-tls's schema.
//! - `supervision`: the `global` keys lb-supervisor reads, checked once for lb-proxy's and
//!   lb-tls's schemas ([`supervision`], into lb-supervisor's [`Supervision`]).
//! - `locate`: where each value sits in the text, so that validation can say line and column.
//! - `units`, `address`, `names`: durations and sizes, addresses, enumerated keywords.
//! - `policy`: the edge-policy language's typed model (conditions, actions, lists, maps,
//!   templates); `validate::policy` reads it, `render::policy` writes it.
//! - `table`: limit tables (`tables:`, HAProxy's stick tables) and their data types' names.
//! - `error_pages`: the built-in error responses and HAProxy-style errorfiles.
//! - `defaults`: every default value in one place.
//! - `render`: [`Config::to_yaml`].
//! - `error`: [`Error`] and [`Diagnostic`].

#![forbid(unsafe_code)]

mod address;
mod check;
mod defaults;
mod error;
mod error_pages;
mod load;
mod locate;
mod model;
mod names;
mod policy;
mod raw;
mod render;
mod supervision;
mod table;
mod units;
mod validate;

pub use check::Checker;
pub use defaults::MAX_HEADER_SIZE as DEFAULT_MAX_HEADER_SIZE;
pub use error::{Diagnostic, DiagnosticLines, Error};
/// Locating values in YAML text and turning serde's errors into diagnostics, shared with the
/// other daemons' configurations (lb-tls, lb-watcher) so that every file reports
/// `file:line:col: field: message` the same way.
pub use load::serde_diagnostics;
pub use locate::{child, item, DuplicateKey, Locations, Pos};
pub use model::{
    AdminState, Backend, Balance, Bind, CheckKind, Config, ErrorPage, ErrorPages, Facility, Frontend, Global,
    HealthCheck, Http2, HttpReuse, ListenAddr, Log, LogFormat, LogHeader, LogTarget, Mode, Rule, Server, Stats,
    Supervision, Timeouts,
};
pub use policy::{
    check_map_entry, list_file_text, map_file_text, parse_list_entry, parse_list_text, parse_map_text, write_back,
    AccessLogFormat, Capture, Cidr, CmpOp, Compare, Condition, Fetch, Guard, HeaderTemplate, ListKind, MapDef,
    MapMatch, Matcher, Pattern, PatternList, Policy, Redirect, RedirectTo, Reply, RequestAction, RequestRule,
    ResponseAction, ResponseRule, RouteTarget, Template, TemplatePart, Test, UniqueId, Var,
};
pub use supervision::{loopback, supervision, RawCanary, RawNumber, RawSupervision, SocketDefaults};
pub use table::{
    Bucket, ConnectionAction, ConnectionRule, DataType, KeyType, Mark, Store, Table, Tarpit, Track, GENERAL_PURPOSE,
    SLOTS,
};
pub use units::{format_duration, parse_duration};

#[cfg(test)]
mod tests;
