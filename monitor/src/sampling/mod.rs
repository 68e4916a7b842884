//! Samples on top of the tree: every live process and the machine from /proc (`sampler`), the
//! per-interval figures derived from two readings (`rates`), the run cgroup's kernel totals
//! (`cgroup`), what 100 % means inside a limited container (`capacity`), NVIDIA GPUs (`gpu`), the
//! host's clocks and facts (`host`), and the kernel's sources of a sweep merged (`sweep`).
pub mod capacity;
pub mod cgroup;
pub mod gpu;
pub mod host;
pub mod procstat;
pub mod rates;
pub mod sampler;
pub mod sweep;
