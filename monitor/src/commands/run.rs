//! `montrace run -- CMD`: refuses what no run could use (a ring buffer the kernel would not
//! give, a series of no measured repetition), then runs the command ([`crate::run`]).
use super::{ring_buffer_refused, CommandError, Exit};
use crate::{analysis::bench::plan::series_length, cli::RunArgs};

pub fn run(args: RunArgs) -> Exit {
    if let Some(message) = ring_buffer_refused(args.record.ring_buffer_size)
        .or_else(|| series_length(args.warmup, args.repeat).err())
    {
        return Err(CommandError::usage(message));
    }
    crate::run::run(args)
}
