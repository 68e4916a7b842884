//! montrace: follows a command's exact process tree with eBPF and records what every process used.
//!
//! Data flow: `ebpf` (load, attach; the kernel edge) -> `decode` (ring bytes -> events) ->
//! `tracker` (process tree state machine) -> `schema` + `writer` (Arrow/Parquet) and `summary`
//! (run.json, the printed summary). `launch` starts the command; `run` ties it together.
pub mod btf;
pub mod cli;
pub mod decode;
pub mod ebpf;
pub mod host;
pub mod launch;
pub mod model;
pub mod run;
pub mod schema;
pub mod summary;
pub mod tracker;
pub mod units;
pub mod writer;
