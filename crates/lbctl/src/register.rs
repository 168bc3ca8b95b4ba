//! `lbctl register`: registers this machine (or any address) in ZooKeeper the registrar's way,
//! as an ephemeral node that lives as long as the command runs, for lb-watcher to pick up.
//!
//! ```text
//! lbctl register --zk HOST:PORT[,HOST:PORT…][/chroot] --path /com/example/us-east/api \
//!     --name web1 --address 10.0.0.5 [--type host|load_balancer] [--port N]… [--session-timeout 10s]
//! ```
//!
//! The node is created again after a session expiry and deleted on SIGTERM or Ctrl-C.

use std::ffi::OsString;
use std::net::IpAddr;
use std::process::ExitCode;
use std::time::Duration;

use lb_watcher::register::{self, Registration};

use crate::exit::Exit;

pub(crate) const HELP: &str = "\
Usage: lbctl register --zk HOST:PORT[,...][/CHROOT] --path PATH --name NAME --address IP
                      [--type host|load_balancer] [--port N]... [--session-timeout DURATION]

Registers NAME under the ZooKeeper PATH as an ephemeral node holding the registrar JSON
({\"type\":\"host\",\"address\":IP,\"ttl\":60,\"host\":{\"address\":IP}}), keeps it while running
(created again after a session expiry) and deletes it on SIGTERM or Ctrl-C.
--port (repeatable) adds ports to the record (for --type load_balancer).
";

/// Parses `args` (after `register`) into a registration.
pub(crate) fn parse(args: Vec<OsString>) -> Result<Option<Registration>, String> {
    let mut zk = None;
    let mut path = None;
    let mut name = None;
    let mut address = None;
    let mut record_type = "host".to_owned();
    let mut ports = Vec::new();
    let mut session_timeout = Duration::from_secs(10);
    let mut args = args.into_iter().map(|a| a.into_string().map_err(|a| format!("{a:?} is not UTF-8")));
    while let Some(arg) = args.next() {
        let arg = arg?;
        if arg == "-h" || arg == "--help" {
            return Ok(None);
        }
        let mut value = || args.next().transpose()?.filter(|v| !v.is_empty()).ok_or(format!("{arg} needs a value"));
        match arg.as_str() {
            "--zk" => zk = Some(value()?),
            "--path" => path = Some(value()?),
            "--name" => name = Some(value()?),
            "--address" => {
                let text = value()?;
                address = Some(text.parse::<IpAddr>().map_err(|_| format!("--address {text}: not an IP address"))?);
            }
            "--type" => record_type = value()?,
            "--port" => {
                let text = value()?;
                ports.push(text.parse::<u16>().ok().filter(|p| *p > 0).ok_or(format!("--port {text}: not a port"))?);
            }
            "--session-timeout" => {
                let text = value()?;
                session_timeout = lb_config::parse_duration(&text).map_err(|e| format!("--session-timeout: {e}"))?;
            }
            other => return Err(format!("register: unknown argument '{other}'")),
        }
    }
    let path = path.ok_or("register: --path is required")?;
    if !path.starts_with('/') {
        return Err(format!("--path {path}: must be absolute"));
    }
    let name = name.ok_or("register: --name is required")?;
    if !lb_watcher::node::valid_server_name(&name) {
        return Err(format!("--name {name}: letters, digits, `_`, `.` and `-` only"));
    }
    Ok(Some(Registration {
        zookeeper: zk.ok_or("register: --zk is required")?,
        path,
        name,
        address: address.ok_or("register: --address is required")?,
        record_type,
        ports,
        session_timeout,
    }))
}

/// `lbctl register …`: runs until SIGTERM or Ctrl-C.
pub(crate) fn main(args: Vec<OsString>) -> ExitCode {
    let registration = match parse(args) {
        Ok(Some(r)) => r,
        Ok(None) => return crate::emit(HELP, "", Exit::Success),
        Err(message) => return crate::emit("", &format!("lbctl: {message}\n{HELP}"), Exit::Usage),
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("LB_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,zookeeper_client=warn"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(false).try_init();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => return crate::emit("", &format!("lbctl: {e}\n"), Exit::Failed),
    };
    let result = runtime.block_on(async move {
        let (stop, shutdown) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
                return;
            };
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
            let _ = stop.send(true);
        });
        register::run(registration, shutdown, None).await
    });
    match result {
        Ok(()) => Exit::Success.into(),
        Err(e) => crate::emit("", &format!("lbctl: {e}\n"), Exit::Failed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<OsString> {
        list.iter().map(OsString::from).collect()
    }

    #[test]
    fn parses() {
        let r = parse(args(&[
            "--zk",
            "127.0.0.1:2181",
            "--path",
            "/com/example/api",
            "--name",
            "web1",
            "--address",
            "10.0.0.5",
        ]));
        let r = r.ok().flatten().map(|r| (r.node_path(), r.data()));
        assert_eq!(
            r,
            Some((
                "/com/example/api/web1".to_owned(),
                r#"{"address":"10.0.0.5","host":{"address":"10.0.0.5"},"ttl":60,"type":"host"}"#.to_owned()
            ))
        );
        let lb = parse(args(&[
            "--zk",
            "z:1",
            "--path",
            "/a",
            "--name",
            "n",
            "--address",
            "::1",
            "--type",
            "load_balancer",
            "--port",
            "80",
        ]));
        assert!(lb
            .ok()
            .flatten()
            .is_some_and(|r| r.data().contains(r#""load_balancer":{"address":"::1","ports":[80]}"#)));
        assert!(parse(args(&["--zk", "z:1", "--path", "a", "--name", "n", "--address", "1.2.3.4"])).is_err());
        assert!(parse(args(&["--zk", "z:1", "--path", "/a", "--name", "n", "--address", "host"])).is_err());
        assert!(parse(args(&["--path", "/a", "--name", "n", "--address", "1.2.3.4"])).is_err());
        assert_eq!(parse(args(&["--help"])).map(|r| r.is_none()), Ok(true));
    }
}
