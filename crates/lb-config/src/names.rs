//! The spelling of each enumerated value in the YAML, shared by parsing, rendering and the
//! `Display` impls lb-proxy uses in logs and on the runtime socket.

use std::fmt;

use crate::model::{AdminState, Balance, Facility, HttpReuse, LogFormat, LogHeader, LogTarget, Mode};

/// Declares the YAML spelling of every variant of a fieldless enum, and derives `as_str`,
/// `Display` and the table validation parses from.
macro_rules! keywords {
    ($ty:ident { $($text:literal => $variant:path),+ $(,)? }) => {
        impl $ty {
            pub(crate) const KEYWORDS: &'static [(&'static str, $ty)] = &[$(($text, $variant)),+];

            /// The value as written in the configuration file.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($variant => $text),+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

keywords!(Mode { "http" => Mode::Http, "tcp" => Mode::Tcp });
keywords!(Balance { "leastconn" => Balance::LeastConn, "roundrobin" => Balance::RoundRobin });
keywords!(HttpReuse { "never" => HttpReuse::Never, "safe" => HttpReuse::Safe });
keywords!(LogFormat { "haproxy" => LogFormat::Haproxy, "json" => LogFormat::Json });
keywords!(LogHeader {
    "rfc3164" => LogHeader::Rfc3164,
    "rfc5424" => LogHeader::Rfc5424,
    "iso" => LogHeader::Iso,
    "raw" => LogHeader::Raw,
    "short" => LogHeader::Short,
});
keywords!(AdminState {
    "ready" => AdminState::Ready,
    "drain" => AdminState::Drain,
    "maint" => AdminState::Maint,
});
keywords!(Facility {
    "kern" => Facility::Kern,
    "user" => Facility::User,
    "daemon" => Facility::Daemon,
    "local0" => Facility::Local0,
    "local1" => Facility::Local1,
    "local2" => Facility::Local2,
    "local3" => Facility::Local3,
    "local4" => Facility::Local4,
    "local5" => Facility::Local5,
    "local6" => Facility::Local6,
    "local7" => Facility::Local7,
});

impl Facility {
    /// The RFC 5424 facility number (the `PRI` of a syslog line is `facility * 8 + severity`).
    pub fn code(self) -> u8 {
        self as u8
    }
}

/// Looks `text` up in a keyword table; the error names every accepted value.
pub(crate) fn parse_keyword<T: Copy>(table: &[(&'static str, T)], what: &str, text: &str) -> Result<T, String> {
    let wanted = text.trim();
    table.iter().find(|(name, _)| name.eq_ignore_ascii_case(wanted)).map(|(_, v)| *v).ok_or_else(|| {
        let accepted: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
        format!("unknown {what} `{text}`: expected one of {}", accepted.join(", "))
    })
}

/// Written as in the configuration: `stdout`, `none`, `unix:/dev/log`, `udp:127.0.0.1:514`.
impl fmt::Display for LogTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogTarget::Stdout => f.write_str("stdout"),
            LogTarget::None => f.write_str("none"),
            LogTarget::SyslogUnix(path) => write!(f, "unix:{}", path.display()),
            LogTarget::SyslogUdp(addr) => write!(f, "udp:{addr}"),
        }
    }
}
