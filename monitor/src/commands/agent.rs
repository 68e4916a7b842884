//! `montrace agent`: the resident agent ([`crate::agent`]) in the foreground, until SIGTERM.
use super::{CommandError, Exit};
use crate::{agent, cli::AgentArgs};

pub fn agent(args: AgentArgs) -> Exit {
    if let Some(why) = agent::cannot_serve() {
        return Err(CommandError::usage(why));
    }
    agent::serve_until_stopped(agent::Options {
        socket: agent::socket_path(args.socket),
        ring_buffer_bytes: args.ring_buffer_size,
        tracepoints: args.tracepoints,
        client_buffer: usize::try_from(args.client_buffer).unwrap_or(usize::MAX),
        history: args.history.map(|dir| agent::history::recorder::Options {
            dir,
            period: args.history_period,
            max_bytes: args.history_max_bytes,
            max_age: args.history_max_age,
        }),
    })?;
    Ok(0)
}
