//! Samples on top of the tree: every live process and the machine from /proc (`sampler`), the
//! per-interval figures derived from two readings (`rates`), the run cgroup's kernel totals
//! (`cgroup`), what 100 % means inside a limited container (`capacity`), NVIDIA GPUs (`gpu`), and
//! the kernel's sources of a sweep merged (`sweep`). The host's clocks and facts are `crate::host`,
//! below the kernel tier that uses them too.
pub mod capacity;
pub mod cgroup;
pub mod gpu;
pub mod procstat;
pub mod rates;
pub mod sampler;
pub mod sweep;

/// `crate::host` under its former path, for `agent.rs` (another engineer's file this round): take
/// this out once it imports `crate::host`.
pub use crate::host;
