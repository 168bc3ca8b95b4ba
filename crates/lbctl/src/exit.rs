//! The exit statuses lbctl promises to scripts. Changing one breaks someone's deploy script.

use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    /// The command did what was asked.
    Success = 0,
    /// The master answered that the command failed: a reload that failed (the previous worker
    /// keeps serving) or an error for a runtime command.
    Failed = 1,
    /// The command line is wrong, or the configuration file of `-f` cannot be used.
    Usage = 2,
    /// `EX_UNAVAILABLE` from sysexits.h: the master could not be reached, or did not answer.
    /// After a reload this means its outcome is unknown, not that it failed.
    Unavailable = 69,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> Self {
        ExitCode::from(exit as u8)
    }
}
