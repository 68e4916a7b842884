//! The subcommands, one file each, on top of every other layer: each parses what its arguments
//! say, calls the domain, and maps the result to an exit status. Nothing below imports this
//! layer or `cli`'s argument structs for an entry point.
//!
//! A command returns `Ok(status)` (0, a comparison's 1 or 3, a command's own status passed
//! through, 127 for a command not found) or a [`CommandError`]: a usage error (bad arguments, a
//! missing or unusable input: exit status 2) or montrace's own failure (125). `main` prints the
//! error's line and exits with its status, in one place.
use std::fmt::Display;

use crate::exit_code::{EXIT_MONTRACE_FAILED, EXIT_USAGE};

pub mod agent;
pub mod attach;
pub mod bench;
pub mod compare;
pub mod doctor;
pub mod export;
pub mod history;
pub mod mark;
pub mod publish;
pub mod report;
pub mod run;
pub mod setcap;
pub mod slurm;

/// What a command ends with: its exit status, or why it could not do its work.
pub type Exit = Result<i32, CommandError>;

/// Why a command did not do its work.
#[derive(Debug)]
pub enum CommandError {
    /// Bad arguments or an unusable input; the line said on stderr (exit status 2).
    Usage(String),
    /// montrace failed itself (exit status 125).
    Failed(anyhow::Error),
}

impl CommandError {
    /// A usage error said as `montrace: error: MESSAGE`.
    pub fn usage(message: impl Display) -> CommandError {
        CommandError::Usage(format!("montrace: error: {message}"))
    }

    /// A usage error said as `line` exactly (a subcommand's own prefix).
    pub fn usage_line(line: impl Into<String>) -> CommandError {
        CommandError::Usage(line.into())
    }

    /// The exit status it gives.
    pub fn exit_code(&self) -> i32 {
        match self {
            CommandError::Usage(_) => EXIT_USAGE,
            CommandError::Failed(_) => EXIT_MONTRACE_FAILED,
        }
    }

    /// The line said on stderr.
    pub fn line(&self) -> String {
        match self {
            CommandError::Usage(line) => line.clone(),
            CommandError::Failed(err) => {
                format!("montrace: error: {}", crate::term::error_line(err))
            }
        }
    }
}

/// Why `--ring-buffer-size` cannot be had, if it cannot (root may ask for more than a user).
fn ring_buffer_refused(bytes: u32) -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    crate::kernel::privilege::check_ring_buffer_size(bytes, root).err()
}

impl From<anyhow::Error> for CommandError {
    fn from(err: anyhow::Error) -> CommandError {
        CommandError::Failed(err)
    }
}

impl From<std::io::Error> for CommandError {
    fn from(err: std::io::Error) -> CommandError {
        CommandError::Failed(err.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_error_says_one_line_and_gives_its_status() {
        let usage = CommandError::usage("no such run");
        assert_eq!(
            (usage.line(), usage.exit_code()),
            ("montrace: error: no such run".to_string(), EXIT_USAGE)
        );
        let own = CommandError::usage_line("montrace mark: empty label");
        assert_eq!(own.line(), "montrace mark: empty label");
        let failed =
            CommandError::from(anyhow::anyhow!("disk full").context("cannot write /x/run.json"));
        assert_eq!(
            (failed.line(), failed.exit_code()),
            (
                "montrace: error: cannot write /x/run.json: disk full".to_string(),
                EXIT_MONTRACE_FAILED
            )
        );
    }
}
