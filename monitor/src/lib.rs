//! montrace: follows a command's exact process tree with eBPF and records what every process used.
//!
//! The folders follow the flow of a run:
//!
//! ```text
//! cli ─> commands ─> run / attach ─> follow::launch (the command, held until tracked, exec'd)
//!                  │                  follow::session (one recording, shared by both)
//!                  │
//!   kernel (btf, ebpf, decode, privilege) ──events──> tracking (tracker, polling)
//!   sampling (sampler, rates, cgroup, gpu, sweep) ────────────┐        │
//!                  └─> follow (the loop, its decisions, recorder) <────┘
//!                                 └─> store (records, schema, writer, run_json, summary_json,
//!                                             userfs) ─> the run directory
//!   analysis (report, compare, export) <── the run directory
//! ```
//! `doctor` says which mode a run gets; `term` writes to the terminal without ever failing;
//! `units` parses and formats durations, sizes and times; `host` reads the clocks and the host's
//! facts.
//! `commands` holds one entry point per subcommand, whose errors `main` says once;
//! `exit_code` holds every exit status; `store::model` the types run.json embeds. No import runs
//! upward between these folders (the layers and their test: `layers.rs`).
pub mod agent;
pub mod analysis;
pub mod attach;
pub mod cli;
pub mod commands;
pub mod doctor;
pub mod exit_code;
pub mod fleet;
#[cfg(test)]
mod fn_length;
pub mod follow;
pub mod host;
pub mod kernel;
#[cfg(test)]
mod layers;
pub mod run;
pub mod sampling;
pub mod store;
pub mod term;
pub mod tracking;
pub mod units;
