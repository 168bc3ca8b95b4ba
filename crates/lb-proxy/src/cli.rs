//! The command line of `lb-proxy`, parsed by hand: it is four flags, and the binary must start
//! fast and say exactly what was wrong.

use std::ffi::OsString;
use std::path::PathBuf;

pub const USAGE: &str = "\
usage: lb-proxy -f FILE [-c]
  -f FILE   the configuration file (YAML)
  -c        check the configuration and exit: 0 when valid, 1 with the errors otherwise;
            binds nothing
  -V        print the version and exit
  -h        print this help and exit";

/// What the command line asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Args {
    /// Serve with this configuration.
    Run { config: PathBuf },
    /// Check this configuration and exit.
    Check { config: PathBuf },
    Version,
    Help,
}

impl Args {
    /// Parse the arguments after the program name. The error is a one-line message for stderr.
    pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Args, String> {
        let mut config = None;
        let mut check = false;
        let mut args = args.into_iter();
        while let Some(arg) = args.next() {
            match arg.to_str() {
                Some("-f") => match args.next() {
                    Some(path) => config = Some(PathBuf::from(path)),
                    None => return Err("-f needs a file".into()),
                },
                Some("-c") => check = true,
                Some("-V" | "--version") => return Ok(Args::Version),
                Some("-h" | "--help") => return Ok(Args::Help),
                _ => return Err(format!("unknown argument {:?}", arg)),
            }
        }
        let config = config.ok_or("-f FILE is required")?;
        Ok(if check { Args::Check { config } } else { Args::Run { config } })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Args, String> {
        Args::parse(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_the_flags() {
        assert_eq!(parse(&["-f", "a.yaml"]), Ok(Args::Run { config: "a.yaml".into() }));
        assert_eq!(parse(&["-c", "-f", "a.yaml"]), Ok(Args::Check { config: "a.yaml".into() }));
        assert_eq!(parse(&["-V"]), Ok(Args::Version));
        assert!(parse(&[]).is_err());
        assert!(parse(&["-f"]).is_err());
        assert!(parse(&["-x"]).is_err());
    }
}
