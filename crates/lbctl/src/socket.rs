//! Which control socket to talk to: `-s`, else `-f`'s configuration, else `$LBCTL_SOCKET`, else
//! the default.
//!
//! The configuration is read as plain YAML rather than through lb-proxy's or lb-tls's own
//! configuration crates: both have `global.control_socket`, and lbctl must not depend on every
//! daemon (nor refuse a file only because another part of it does not validate).

use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context};
use serde_yaml::Value;

use crate::cli::SocketChoice;

/// Where lb-proxy puts its control socket when the configuration does not say.
pub(crate) const DEFAULT_SOCKET: &str = lb_supervisor::control::DEFAULT_SOCKET;

/// The environment variable naming the socket when neither `-s` nor `-f` is given.
pub(crate) const ENV_SOCKET: &str = "LBCTL_SOCKET";

/// The socket to use; `env` is the value of [`ENV_SOCKET`].
pub(crate) fn resolve(choice: &SocketChoice, env: Option<OsString>) -> anyhow::Result<PathBuf> {
    match choice {
        SocketChoice::Path(path) => Ok(path.clone()),
        SocketChoice::Config(file) => from_config(file),
        SocketChoice::Default => {
            Ok(env.filter(|value| !value.is_empty()).map_or_else(|| PathBuf::from(DEFAULT_SOCKET), PathBuf::from))
        }
    }
}

/// The `global.control_socket` of the configuration `file`, made absolute as the daemons do: a
/// relative path is taken from the file's directory.
fn from_config(file: &Path) -> anyhow::Result<PathBuf> {
    let text = fs::read_to_string(file).with_context(|| format!("cannot read {}", file.display()))?;
    let Some(socket) = control_socket(&text).with_context(|| file.display().to_string())? else {
        // Not written: the daemon uses its default.
        return Ok(PathBuf::from(DEFAULT_SOCKET));
    };
    if socket.is_absolute() {
        return Ok(socket);
    }
    let file = std::path::absolute(file).with_context(|| format!("cannot resolve {}", file.display()))?;
    Ok(file.parent().map_or(socket.clone(), |dir| dir.join(&socket)))
}

/// `global.control_socket` as written in the YAML `text`, if it is.
fn control_socket(text: &str) -> anyhow::Result<Option<PathBuf>> {
    let document: Value = serde_yaml::from_str(text).context("not valid YAML")?;
    match document.get("global").and_then(|global| global.get("control_socket")) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(path)) if !path.trim().is_empty() => Ok(Some(PathBuf::from(path))),
        Some(_) => bail!("global.control_socket must be a path"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_socket_from_yaml() -> anyhow::Result<()> {
        let yaml = "global:\n  max_connections: 10\n  control_socket: /run/lb/master.sock\nfrontends: {}\n";
        assert_eq!(control_socket(yaml)?, Some(PathBuf::from("/run/lb/master.sock")));
        assert_eq!(control_socket("global:\n  user: lb\n")?, None);
        assert_eq!(control_socket("frontends: {}\n")?, None);
        assert_eq!(control_socket("")?, None);
        for bad in ["global:\n  control_socket: 12\n", "global:\n  control_socket: ''\n", "global: [\n"] {
            assert!(control_socket(bad).is_err(), "{bad:?}");
        }
        Ok(())
    }

    #[test]
    fn relative_paths_are_taken_from_the_file_directory() -> anyhow::Result<()> {
        let dir = tempfile::tempdir()?;
        let file = dir.path().join("lb.yaml");
        fs::write(&file, "global:\n  control_socket: run/master.sock\n")?;
        assert_eq!(from_config(&file)?, dir.path().join("run/master.sock"));
        fs::write(&file, "frontends: {}\n")?;
        assert_eq!(from_config(&file)?, PathBuf::from(DEFAULT_SOCKET));
        Ok(())
    }

    #[test]
    fn precedence() -> anyhow::Result<()> {
        let env = || Some(OsString::from("/env.sock"));
        assert_eq!(resolve(&SocketChoice::Path("/s.sock".into()), env())?, PathBuf::from("/s.sock"));
        assert_eq!(resolve(&SocketChoice::Default, env())?, PathBuf::from("/env.sock"));
        assert_eq!(resolve(&SocketChoice::Default, Some(OsString::new()))?, PathBuf::from(DEFAULT_SOCKET));
        assert_eq!(resolve(&SocketChoice::Default, None)?, PathBuf::from(DEFAULT_SOCKET));
        let missing = SocketChoice::Config("/nonexistent/lb.yaml".into());
        let error = format!("{:#}", resolve(&missing, env()).err().context("a missing file resolved")?);
        assert!(error.starts_with("cannot read /nonexistent/lb.yaml: "), "{error}");
        Ok(())
    }
}
