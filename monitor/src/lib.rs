//! montrace: follows a command's exact process tree with eBPF and records what every process used.
//!
//! Data flow: `ebpf` (load, attach; the kernel edge) -> `decode` (ring bytes -> events) ->
//! `tracker` (process tree state machine) -> `schema` + `writer` (Arrow/Parquet, crash-safe parts)
//! and `summary` (run.json, the printed summary). `sampler` reads /proc and `rates` derives
//! per-interval figures from two readings; `cgroup` gives the kernel's totals for the tree.
//! `launch` starts the command; `run` ties it together.
pub mod attach;
pub mod btf;
pub mod cgroup;
pub mod cli;
pub mod compare;
pub mod decode;
pub mod doctor;
pub mod ebpf;
pub mod export;
pub mod follow;
pub mod gpu;
pub mod host;
pub mod launch;
pub mod limits;
pub mod live;
pub mod marks;
pub mod metrics;
pub mod model;
pub mod polling;
pub mod privilege;
pub mod rates;
pub mod recorder;
pub mod report;
pub mod run;
pub mod sampler;
pub mod schema;
pub mod summary;
pub mod term;
pub mod tracker;
pub mod units;
pub mod userfs;
pub mod writer;
