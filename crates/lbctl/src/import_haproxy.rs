//! `lbctl import-haproxy FILE`: reads a haproxy.cfg and writes the equivalent lb-proxy
//! configuration to standard output, built as lb-config's typed values and written with
//! [`lb_config::Config::to_yaml`]; with `--tls-config OUT`, the `bind … ssl crt …` lines become
//! an lb-tls configuration in OUT (built as [`lb_tls::Draft`]) and an lb-proxy bind on the Unix
//! socket lb-tls forwards to. Every line it cannot translate is named on standard error with
//! the reason (`haproxy.cfg:12: option dontlognull: not translated: …`), as are translations
//! that differ from HAProxy's behaviour (`…: note: …`).
//!
//! Exit status: 0 when every line was translated; 1 when some were not (the output is still
//! written), or the result does not load; 2 on a usage error or an unreadable file.
//!
//! # Layout
//! - `lexer`: lines into words (HAProxy's quoting, escapes, comments, variables).
//! - `sections`: words into sections, and which `defaults` each proxy inherits.
//! - `global`: the `global` section; `settings`: what `defaults` passes on and proxies set.
//! - `proxy`: frontends, backends, listens and the stats page; `bind`: binds and their TLS
//!   settings; `server`: servers and health checks.
//! - `condition`: ACLs and conditions into lb-proxy's typed conditions, lists; `actions`:
//!   `http-request`, `http-response`, `capture`, `redirect`, `monitor-uri`; `logging`:
//!   `log-format` (JSON objects recognised) and `unique-id-*`; `maps`: backends chosen by a
//!   map file.
//! - `values`: times, counts, addresses; `report`: what goes to standard error.

mod actions;
mod bind;
mod condition;
mod global;
mod lexer;
mod logging;
mod maps;
mod proxy;
mod report;
mod sections;
mod server;
mod settings;
mod values;

#[cfg(test)]
mod tests;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use lb_config::Config;
use lb_tls::{BackendAddr, Draft, DraftFrontend, WriteProxy};

use crate::exit::Exit;
use proxy::TlsTarget;
use report::Report;
use sections::Kind;

const HELP: &str = "\
lbctl import-haproxy: translate a haproxy.cfg into lb-proxy's configuration (and lb-tls's).

Usage: lbctl import-haproxy [--tls-config OUT] [--tls-socket PATH] [--tls-control-socket PATH] FILE

Writes the lb-proxy YAML to standard output; names on standard error every line not
translated and why, and every translation that behaves differently from HAProxy.

Options:
      --tls-config OUT          Write lb-tls's configuration for the `bind ... ssl crt ...`
                                lines to OUT; without it those binds are not translated.
      --tls-socket PATH         The Unix socket lb-tls forwards to and lb-proxy listens on
                                (default /var/run/lb/proxy-tls.sock).
      --tls-control-socket PATH lb-tls's control socket (default /var/run/lb/lb-tls.sock).
      --control-socket PATH     lb-proxy's control socket (default /var/run/lb/lb-proxy.sock).
  -h, --help                    Print this help.

Exit status: 0 every line translated; 1 some lines not translated (the output is written)
or the result does not load; 2 usage error or unreadable file.
";

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) file: PathBuf,
    pub(crate) tls_config: Option<PathBuf>,
    pub(crate) tls_socket: PathBuf,
    pub(crate) tls_control_socket: PathBuf,
    /// lb-proxy's control socket; `None`: lb-proxy's default.
    pub(crate) control_socket: Option<PathBuf>,
}

/// What a translation gives: lb-proxy's configuration, lb-tls's (when asked and needed), the report.
#[derive(Debug)]
pub(crate) struct Translation {
    pub(crate) config: Config,
    pub(crate) tls: Option<Draft>,
    pub(crate) report: Report,
}

pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    let options = match parse_args(args) {
        Ok(Some(options)) => options,
        Ok(None) => return crate::emit(HELP, "", Exit::Success),
        Err(usage) => {
            let message =
                format!("lbctl import-haproxy: {usage}\nTry 'lbctl import-haproxy --help' for more information.\n");
            return crate::emit("", &message, Exit::Usage);
        }
    };
    let text = match std::fs::read(&options.file) {
        Ok(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
        Err(e) => {
            return crate::emit(
                "",
                &format!("lbctl import-haproxy: cannot read {}: {e}\n", options.file.display()),
                Exit::Usage,
            )
        }
    };
    let env = |name: &str| std::env::var(name).ok();
    let translation = translate(&text, &options, &env);
    let file_name = options.file.display().to_string();
    let mut stderr = translation.report.render(&file_name);
    let yaml = translation.config.to_yaml();
    let mut failed = translation.report.untranslated() > 0;
    // What lb-proxy -c would say, so that a translation that does not load is known at once
    // (an errorfile missing on this machine, say).
    if let Err(e) = Config::parse(&yaml, "(translation)") {
        failed = true;
        stderr.push_str(&format!("lbctl import-haproxy: the translation does not load here:\n{e}\n"));
    }
    match (&translation.tls, &options.tls_config) {
        (Some(draft), Some(out)) => match std::fs::write(out, draft.to_yaml()) {
            Ok(()) => {
                stderr.push_str(&format!("lbctl import-haproxy: lb-tls configuration written to {}\n", out.display()))
            }
            Err(e) => {
                failed = true;
                stderr.push_str(&format!("lbctl import-haproxy: cannot write {}: {e}\n", out.display()));
            }
        },
        (None, Some(out)) => {
            stderr.push_str(&format!("lbctl import-haproxy: no `ssl` bind: {} not written\n", out.display()))
        }
        _ => {}
    }
    let untranslated = translation.report.untranslated();
    stderr.push_str(&format!(
        "lbctl import-haproxy: {} line{} not translated, {} note{}\n",
        untranslated,
        if untranslated == 1 { "" } else { "s" },
        translation.report.items().len() - untranslated,
        if translation.report.items().len() - untranslated == 1 { "" } else { "s" },
    ));
    crate::emit(&yaml, &stderr, if failed { Exit::Failed } else { Exit::Success })
}

fn parse_args(args: Vec<OsString>) -> Result<Option<Options>, String> {
    let mut file = None;
    let mut tls_config = None;
    let mut tls_socket = PathBuf::from("/var/run/lb/proxy-tls.sock");
    let mut tls_control_socket = PathBuf::from("/var/run/lb/lb-tls.sock");
    let mut control_socket = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        let text = arg.to_string_lossy().into_owned();
        let (name, inline) = match text.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n.to_owned(), Some(PathBuf::from(v))),
            _ => (text.clone(), None),
        };
        let mut value =
            || inline.clone().or_else(|| args.next().map(PathBuf::from)).ok_or(format!("{name} needs a value"));
        match name.as_str() {
            "-h" | "--help" => return Ok(None),
            "--tls-config" => tls_config = Some(value()?),
            "--tls-socket" => tls_socket = value()?,
            "--tls-control-socket" => tls_control_socket = value()?,
            "--control-socket" => control_socket = Some(value()?),
            "--" => file = args.next().map(PathBuf::from),
            _ if name.starts_with('-') && name != "-" => return Err(format!("unknown option `{name}`")),
            _ if file.is_some() => return Err(format!("one file only (`{text}` is a second)")),
            _ => file = Some(PathBuf::from(arg)),
        }
    }
    let file = file.ok_or("the haproxy.cfg to translate is missing")?;
    Ok(Some(Options { file, tls_config, tls_socket, tls_control_socket, control_socket }))
}

/// The translation of haproxy.cfg `text`; `env` gives the variables `"${NAME}"` expands to.
pub(crate) fn translate(text: &str, options: &Options, env: &dyn Fn(&str) -> Option<String>) -> Translation {
    let mut report = Report::default();
    let lines = lexer::lines(text, env, &mut report);
    let sections = sections::sections(lines, &mut report);
    let global_lines: Vec<lexer::Line> =
        sections.iter().filter(|s| s.kind == Kind::Global).flat_map(|s| s.body.clone()).collect();
    let parts = global::global(&global_lines, &mut report);
    let target = options.tls_config.as_ref().map(|_| TlsTarget { socket: options.tls_socket.clone() });
    let mut shared = condition::Shared::default();
    let proxies = proxy::proxies(&sections, &parts.bases, target.as_ref(), &mut shared, &mut report);
    let mut global = parts.global.clone();
    global.stats = proxies.stats;
    if let Some(socket) = &options.control_socket {
        global.supervision.control_socket = socket.clone();
    }
    let tls = (!proxies.tls_binds.is_empty()).then(|| Draft {
        control_socket: options.tls_control_socket.clone(),
        runtime_socket: None,
        user: global.supervision.user.clone(),
        group: global.supervision.group.clone(),
        max_connections: parts.maxconn,
        tls: parts.tls.clone(),
        backend: lb_tls::Backend {
            address: BackendAddr::Unix(options.tls_socket.clone()),
            write_proxy: WriteProxy::V2,
            multiplex: false,
        },
        frontends: proxies
            .tls_binds
            .iter()
            .flat_map(|b| {
                b.addresses.iter().map(|address| DraftFrontend {
                    bind: address.clone(),
                    proxy_proxy: b.accept_proxy,
                    tls: b.ssl.clone(),
                })
            })
            .collect(),
    });
    let config = Config {
        global,
        frontends: proxies.frontends,
        backends: proxies.backends,
        policy: shared.policy,
        tables: Vec::new(),
    };
    Translation { config, tls, report }
}

/// For the tests: the options for `file` alone.
#[cfg(test)]
pub(crate) fn options(file: &std::path::Path) -> Options {
    Options {
        file: file.to_path_buf(),
        tls_config: None,
        tls_socket: PathBuf::from("/var/run/lb/proxy-tls.sock"),
        tls_control_socket: PathBuf::from("/var/run/lb/lb-tls.sock"),
        control_socket: None,
    }
}
