//! `montrace attach PID`: refuses a ring buffer the kernel would not give, then follows the
//! process ([`crate::attach`]).
use super::{ring_buffer_refused, CommandError, Exit};
use crate::cli::AttachArgs;

pub fn attach(args: AttachArgs) -> Exit {
    if let Some(message) = ring_buffer_refused(args.record.ring_buffer_size) {
        return Err(CommandError::usage(message));
    }
    crate::attach::attach(args)
}
