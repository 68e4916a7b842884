//! `montrace mark [--begin|--end] LABEL`: sends one mark to the `montrace run` that started this
//! process's tree ([`crate::follow::marks::send_mark`]). Its parent in processes.parquet is the
//! shell or program that ran it.
use super::{CommandError, Exit};
use crate::{
    cli::MarkArgs,
    follow::marks::{send_mark, SendError, SOCKET_ENV},
    store::records::MarkKind,
};

pub fn mark(args: MarkArgs) -> Exit {
    let kind = if args.begin {
        MarkKind::Begin
    } else if args.end {
        MarkKind::End
    } else {
        MarkKind::Point
    };
    match send_mark(std::env::var_os(SOCKET_ENV), kind, &args.label) {
        Ok(()) => Ok(0),
        Err(SendError::NoRun) => Err(CommandError::usage_line(format!(
            "montrace mark works inside `montrace run`: {SOCKET_ENV} is not set"
        ))),
        Err(SendError::Invalid(err)) => {
            Err(CommandError::usage_line(format!("montrace mark: {err}")))
        }
        Err(SendError::Failed(err)) => Err(err.into()),
    }
}
