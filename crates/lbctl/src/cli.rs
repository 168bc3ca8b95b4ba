//! The command line: `lbctl [-s SOCKET | -f CONFIG] [--json] COMMAND…`.
//!
//! Parsed by hand: five options do not need a parser crate. Options go before the command;
//! everything from the first word on is the command, so a runtime command may contain words
//! that look like options.

use std::ffi::OsString;
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

use lb_supervisor::{CanaryAsk, Request, Share};

use crate::socket::{DEFAULT_SOCKET, ENV_SOCKET};

/// `lbctl --help`.
pub(crate) fn help() -> String {
    format!(
        "\
lbctl: the operator's command line for an lb daemon (lb-proxy, lb-tls), talking to its master
process over the control socket.

Usage: lbctl [-s SOCKET | -f CONFIG] [--json] COMMAND...

Commands:
  reload [--canary SHARE --for DURATION | --canary off]
               Start a new worker on the configuration file as it is now and wait until it
               serves. If it fails, the previous worker keeps serving and the errors are
               printed. With a canary (global.canary, or --canary 10% --for 30s), the new
               worker takes SHARE of new connections for DURATION and is promoted or rolled
               back by its figures; the answer comes with the verdict.
  rollback     Roll back the canary under way: the new worker drains, the current one keeps
               serving, and the reload that started it fails. Without a canary: start a worker
               on the configuration the previous worker served (kept by the master).
  show proc    The master and its workers: PID, role, generation, reloads, uptime, version,
               client connections.
  WORDS...     Any other words are a runtime command for the current worker: show stat,
               show servers state, show info, show sess, set server B/S state ready|drain|maint,
               set server B/S weight N, enable|disable server B/S, add server B/S ADDR:PORT
               [check] [weight N] [slowstart T], del server B/S, shutdown sessions server B/S,
               help. show stat and show servers state are printed as tables (--json: objects
               by column name); other answers as they come.
  register     Register a server in ZooKeeper for lb-watcher (lbctl register --help).
  import-haproxy FILE
               Translate a haproxy.cfg into lb-proxy's configuration, on stdout
               (lbctl import-haproxy --help).

Options (before the command):
  -s, --socket SOCKET   The master's control socket.
  -f, --config CONFIG   Use the control socket of this configuration file (global.control_socket;
                        a relative path is taken from the file's directory).
      --json            Print the master's answer as JSON (exit statuses unchanged).
  -h, --help            Print this help.
  -V, --version         Print lbctl's version.

The socket is the one given with -s, else the one of -f, else ${ENV_SOCKET}, else
{DEFAULT_SOCKET}.

Exit status:
  0   Success.
  1   The command failed: the reload failed (the previous worker keeps serving), or the
      master answered with an error.
  2   Usage error: bad command line, or the -f file cannot be read.
  69  The master cannot be reached (not running? wrong socket?) or did not answer. After a
      reload, its outcome is then unknown.
"
    )
}

/// Where the control socket is to be found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum SocketChoice {
    /// `-s`.
    Path(PathBuf),
    /// `-f`: the configuration file's `global.control_socket`.
    Config(PathBuf),
    /// Neither: the environment, else the default.
    Default,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cli {
    pub(crate) socket: SocketChoice,
    pub(crate) json: bool,
    pub(crate) request: Request,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Parsed {
    Run(Cli),
    Help,
    Version,
}

/// A wrong command line, said in a sentence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Usage(String);

impl fmt::Display for Usage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

fn usage(message: impl Into<String>) -> Usage {
    Usage(message.into())
}

/// Parse the arguments after the program name.
pub(crate) fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Parsed, Usage> {
    let mut args = args.into_iter();
    let mut socket = None;
    let mut config = None;
    let mut json = false;
    let mut words = Vec::new();

    while let Some(arg) = args.next() {
        let bytes = arg.as_bytes();
        if bytes == b"--" {
            words.extend(args.by_ref());
            break;
        }
        if !bytes.starts_with(b"-") || bytes == b"-" {
            words.push(arg);
            words.extend(args.by_ref());
            break;
        }
        // `--name=value`, `-xvalue` or `--name value` / `-x value`.
        let (name, inline) = split_option(arg);
        let mut value = |name: &str| match inline.clone().or_else(|| args.next()) {
            Some(value) if !value.is_empty() => Ok(PathBuf::from(value)),
            _ => Err(usage(format!("{name} needs a path"))),
        };
        match name.as_str() {
            "-h" | "--help" => return Ok(Parsed::Help),
            "-V" | "--version" => return Ok(Parsed::Version),
            "--json" if inline.is_some() => return Err(usage("--json takes no value")),
            "--json" => json = true,
            "-s" | "--socket" => socket = Some(value(&name)?),
            "-f" | "--config" => config = Some(value(&name)?),
            _ => return Err(usage(format!("unknown option '{name}'"))),
        }
    }

    let socket = match (socket, config) {
        (Some(_), Some(_)) => return Err(usage("-s and -f cannot be used together")),
        (Some(path), None) => SocketChoice::Path(path),
        (None, Some(file)) => SocketChoice::Config(file),
        (None, None) => SocketChoice::Default,
    };
    let request = request(words)?;
    Ok(Parsed::Run(Cli { socket, json, request }))
}

/// An option's name and the value written in the same argument, if any.
fn split_option(arg: OsString) -> (String, Option<OsString>) {
    let bytes = arg.into_vec();
    let at = if bytes.starts_with(b"--") {
        bytes.iter().position(|&b| b == b'=').map(|at| (at, at + 1))
    } else {
        // `-sPATH`: a short option is a dash and one ASCII letter.
        (bytes.len() > 2 && bytes[1].is_ascii()).then_some((2, 2))
    };
    let (name, value) = match at {
        Some((end, start)) => (&bytes[..end], Some(OsString::from_vec(bytes[start..].to_vec()))),
        None => (&bytes[..], None),
    };
    (String::from_utf8_lossy(name).into_owned(), value)
}

/// The command words as a request: `reload`, `show proc`, or a runtime command line.
fn request(words: Vec<OsString>) -> Result<Request, Usage> {
    let words = words
        .into_iter()
        .map(|w| w.into_string().map_err(|w| usage(format!("{w:?} is not UTF-8"))))
        .collect::<Result<Vec<String>, Usage>>()?;
    // Split on whitespace too, so that `lbctl 'show proc'` is `show proc`.
    let tokens: Vec<&str> = words.iter().flat_map(|w| w.split_whitespace()).collect();
    let (request, arity) = match tokens.as_slice() {
        [] => return Err(usage("no command given")),
        ["reload", "--canary", ..] => return reload_with(&tokens[1..]),
        ["reload", ..] => (Request::Reload, 1),
        ["rollback", ..] => (Request::Rollback, 1),
        ["show", "proc", ..] => (Request::ShowProc, 2),
        _ => return Ok(Request::Runtime { line: words.join(" ") }),
    };
    if let Some(extra) = tokens.get(arity) {
        let command = tokens[..arity].join(" ");
        let hint = if extra.starts_with('-') { " (options go before the command)" } else { "" };
        return Err(usage(format!("'{command}' takes no arguments, got '{extra}'{hint}")));
    }
    Ok(request)
}

/// `reload --canary SHARE --for DURATION` (in either order) or `reload --canary off`.
fn reload_with(options: &[&str]) -> Result<Request, Usage> {
    let (mut share, mut window) = (None, None);
    let mut rest = options.iter();
    while let Some(option) = rest.next() {
        let mut value = |name: &str| rest.next().copied().ok_or_else(|| usage(format!("{name} needs a value")));
        match *option {
            "--canary" => share = Some(value("--canary")?),
            "--for" => window = Some(value("--for")?),
            other => return Err(usage(format!("'reload' takes --canary and --for, got '{other}'"))),
        }
    }
    let canary = match (share, window) {
        (Some("off"), None) => CanaryAsk::Off,
        (Some("off"), Some(_)) => return Err(usage("--canary off takes no --for")),
        (Some(share), window) => {
            let share = Share::parse(share).map_err(|e| usage(format!("--canary: {e}")))?;
            let window = window.ok_or_else(|| usage("--canary needs --for DURATION (the window, e.g. 30s)"))?;
            let duration = lb_config::parse_duration(window).map_err(|e| usage(format!("--for: {e}")))?;
            if duration.is_zero() || duration > std::time::Duration::from_secs(3600) {
                return Err(usage("--for: the window must be from 1ms to 1h"));
            }
            CanaryAsk::On { share, duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX) }
        }
        (None, _) => return Err(usage("--for goes with --canary SHARE")),
    };
    Ok(Request::ReloadWith { canary })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> Result<Parsed, Usage> {
        parse(args.iter().map(OsString::from))
    }

    fn cli(socket: SocketChoice, json: bool, request: Request) -> Result<Parsed, Usage> {
        Ok(Parsed::Run(Cli { socket, json, request }))
    }

    #[test]
    fn commands() {
        assert_eq!(run(&["reload"]), cli(SocketChoice::Default, false, Request::Reload));
        let canary = CanaryAsk::On { share: Share::parse("10%").expect("a share"), duration_ms: 30_000 };
        let with = |canary| cli(SocketChoice::Default, false, Request::ReloadWith { canary });
        assert_eq!(run(&["reload", "--canary", "10%", "--for", "30s"]), with(canary));
        assert_eq!(run(&["reload", "--canary", "off"]), with(CanaryAsk::Off));
        assert_eq!(run(&["rollback"]), cli(SocketChoice::Default, false, Request::Rollback));
        assert_eq!(run(&["show", "proc"]), cli(SocketChoice::Default, false, Request::ShowProc));
        assert_eq!(run(&["show proc"]), cli(SocketChoice::Default, false, Request::ShowProc));
        let line = "set server api/a1 weight 0".to_owned();
        let words: Vec<&str> = line.split(' ').collect();
        assert_eq!(run(&words), cli(SocketChoice::Default, false, Request::Runtime { line }));
        let show = Request::Runtime { line: "show".to_owned() };
        assert_eq!(run(&["show"]), cli(SocketChoice::Default, false, show));
    }

    #[test]
    fn options() {
        let s = SocketChoice::Path(PathBuf::from("/run/m.sock"));
        assert_eq!(run(&["-s", "/run/m.sock", "reload"]), cli(s.clone(), false, Request::Reload));
        assert_eq!(run(&["--socket=/run/m.sock", "reload"]), cli(s.clone(), false, Request::Reload));
        assert_eq!(run(&["-s/run/m.sock", "--json", "reload"]), cli(s, true, Request::Reload));
        let f = SocketChoice::Config(PathBuf::from("lb.yaml"));
        assert_eq!(run(&["--config", "lb.yaml", "show", "proc"]), cli(f, false, Request::ShowProc));
        assert_eq!(run(&["--help", "-s"]), Ok(Parsed::Help));
        assert_eq!(run(&["-V"]), Ok(Parsed::Version));
        // After `--` or the first word, everything belongs to the command.
        let line = "set -x --json".to_owned();
        assert_eq!(run(&["set", "-x", "--json"]), cli(SocketChoice::Default, false, Request::Runtime { line }));
        let line = "-weird".to_owned();
        assert_eq!(run(&["--", "-weird"]), cli(SocketChoice::Default, false, Request::Runtime { line }));
    }

    #[test]
    fn usage_errors() {
        let message = |args: &[&str]| match run(args) {
            Err(Usage(message)) => message,
            other => format!("not a usage error: {other:?}"),
        };
        assert_eq!(message(&[]), "no command given");
        assert_eq!(message(&["--json"]), "no command given");
        assert_eq!(message(&["-x", "reload"]), "unknown option '-x'");
        assert_eq!(message(&["--json=yes", "reload"]), "--json takes no value");
        assert_eq!(message(&["-s"]), "-s needs a path");
        assert_eq!(message(&["--socket=", "reload"]), "--socket needs a path");
        assert_eq!(message(&["-s", "a", "-f", "b", "reload"]), "-s and -f cannot be used together");
        assert_eq!(message(&["reload", "now"]), "'reload' takes no arguments, got 'now'");
        assert_eq!(message(&["reload", "--canary", "10%"]), "--canary needs --for DURATION (the window, e.g. 30s)");
        assert_eq!(message(&["reload", "--canary", "0%", "--for", "1s"]).split(':').next(), Some("--canary"));
        assert_eq!(message(&["reload", "--canary", "10%", "--for", "soon"]).split(':').next(), Some("--for"));
        assert_eq!(message(&["reload", "--canary", "10%", "--for"]), "--for needs a value");
        assert_eq!(message(&["rollback", "now"]), "'rollback' takes no arguments, got 'now'");
        assert_eq!(
            message(&["show", "proc", "--json"]),
            "'show proc' takes no arguments, got '--json' (options go before the command)"
        );
    }

    #[test]
    fn help_documents_the_exit_statuses() {
        let help = help();
        for line in ["  0   Success.", "  1   The command failed", "  2   Usage error", "  69  The master"] {
            assert!(help.contains(line), "{line:?} missing");
        }
        assert!(help.contains("$LBCTL_SOCKET") && help.contains("/var/run/lb/lb-proxy.sock"));
    }
}
