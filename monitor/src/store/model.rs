//! The bottom-layer vocabulary: the types that run.json and summary.json embed, owned here so
//! that the store depends on nothing above it (issue 30). The layers that produce them (kernel,
//! sampling, analysis, fleet) use them from here, keep their behaviour (`impl` blocks) beside
//! the code that fills them, and re-export them under their old paths.
use serde::{Deserialize, Serialize};

// ---- run.json `time` (computed by `analysis::critical`)

/// One step of the critical path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub pid: u32,
    pub command: String,
    /// Seconds after the command's exec (an attach: the attach).
    pub start_s: f64,
    pub duration_s: f64,
    pub cpu_s: f64,
    /// Waiting for a CPU and blocked (D state), when known (BTF tracepoints).
    pub run_queue_s: Option<f64>,
    pub blocked_s: Option<f64>,
}

#[cfg(test)]
impl Step {
    /// A step of `pid` at `start_s`, lasting `duration_s`, with no other figures.
    pub fn at(pid: u32, start_s: f64, duration_s: f64) -> Step {
        Step {
            pid,
            command: String::new(),
            start_s,
            duration_s,
            cpu_s: 0.0,
            run_queue_s: None,
            blocked_s: None,
        }
    }
}

/// run.json `time`: where the command's wall time went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeAnalysis {
    /// The steps that bounded the wall time, in order.
    pub critical_path: Vec<Step>,
    /// Their durations summed: the wall time no amount of parallelism would have saved.
    pub critical_path_s: f64,
    /// The steps on the path, kept or not (`critical_path` keeps the longest
    /// `analysis::critical::KEPT_STEPS`).
    #[serde(default)]
    pub critical_path_steps: usize,
    /// Processes running or waiting to run, on average over the wall time: the tree's CPU time
    /// plus its run-queue delay (when known), over the wall time.
    pub avg_parallelism: f64,
    /// CPUs' worth of time used, on average: the tree's CPU time over the wall time.
    pub avg_cores_used: f64,
    /// The share of the wall time (0 to 1) during which at most one process of the tree was
    /// busy, on a CPU or runnable: the time the command ran serially. Estimated from the
    /// samples (`analysis::critical::Load::serial_share`); None in runs before it, or when no
    /// time passed.
    #[serde(default)]
    pub serial_share: Option<f64>,
}

// ---- run.json `context` and summary.json `context` (gathered by `fleet::context`)

/// The machine, the checkout, the CI job, the batch job or the pod a run came from. Every part
/// is absent where it does not apply.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Context {
    pub host: String,
    pub kernel: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_model: Option<String>,
    /// Online CPUs of the host (run.json `capacity` has what the run may use).
    pub cpus: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub git: Option<Git>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ci: Option<Ci>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub slurm: Option<Slurm>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kubernetes: Option<Kubernetes>,
}

/// The git checkout of the working directory montrace ran in, as git itself answered (run as
/// the user, never as root: see `fleet::context::gather`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Git {
    pub commit: Option<String>,
    /// None on a detached HEAD.
    pub branch: Option<String>,
    /// Tracked files modified, staged or not (untracked files do not count). None when git
    /// could not say.
    pub dirty: Option<bool>,
}

/// A CI job, from the variables its runner sets.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Ci {
    /// `github`, `gitlab`, `jenkins` or `buildkite`.
    pub system: String,
    /// The repository or project, the pipeline (workflow run, pipeline, build), the job.
    pub repository: Option<String>,
    pub pipeline: Option<String>,
    pub job: Option<String>,
    pub commit: Option<String>,
    pub branch: Option<String>,
    pub url: Option<String>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Slurm {
    pub job_id: Option<String>,
    pub step_id: Option<String>,
    pub array_job_id: Option<String>,
    pub array_task_id: Option<String>,
    pub cluster: Option<String>,
    /// The job's user, partition and account (None where the cluster keeps no accounts).
    pub user: Option<String>,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// The node this task ran on and its rank in the step (`SLURM_PROCID`).
    pub node: Option<String>,
    pub task_id: Option<String>,
    /// What the job asked for (its allocation, as `scontrol show job` says at the run's end):
    /// CPUs, memory, time limit (None: unlimited) and GPUs.
    pub requested_cpus: Option<u32>,
    pub requested_memory_bytes: Option<u64>,
    pub time_limit_s: Option<u64>,
    pub requested_gpus: Option<u32>,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Kubernetes {
    pub namespace: Option<String>,
    pub pod: Option<String>,
    /// From the cgroup path (`.../kubepods.../pod<uid>/...`).
    pub pod_uid: Option<String>,
    /// The container's id (64 hex digits) from the cgroup path: the segment after the pod's
    /// (`<id>` with cgroupfs, `cri-containerd-<id>.scope`, `crio-<id>.scope`, `docker-<id>.scope`
    /// with systemd), as `crictl ps` and `kubectl get pod -o yaml` (`containerID`) show it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub container_id: Option<String>,
}

// ---- run.json `tree_memory_peaks` (summed by `sampling::sampler::tree_memory`)

/// Where the tree's memory figure (the `rss` limit, run.json `tree_memory_peaks.rss_bytes`, the
/// stream's `rss_bytes`) comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TreeMemorySource {
    /// The run cgroup's resident memory: memory.stat `anon` + `file_mapped` (v2), `total_rss` +
    /// `total_mapped_file` (v1). Page cache that no process maps is left out.
    Cgroup,
    /// The sum of PSS over the tree's address spaces (RSS for a process whose PSS is unknown).
    Pss,
    /// The sum of RSS over the tree's address spaces.
    RssByAddressSpace,
}

/// A sweep's sums over the tree's address spaces (None: no process had the figure).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SweepMemory {
    pub rss: Option<u64>,
    pub uss: Option<u64>,
    pub pss: Option<u64>,
    /// PSS, or RSS where a process has no PSS.
    pub pss_or_rss: Option<u64>,
}

// ---- run.json `cgroup` (read by `sampling::cgroup`)

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupVersion {
    V1,
    V2,
}

/// The kernel's totals for the run's cgroup. None: the kernel does not provide that figure here
/// (e.g. `memory.peak` before Linux 5.19, v1 `pids` without `pids.peak`, no io/blkio controller).
/// Memory figures include the page cache charged to the cgroup.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default)]
pub struct CgroupTotals {
    pub cpu_usage_ns: Option<u64>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub memory_peak_bytes: Option<u64>,
    pub io_read_bytes: Option<u64>,
    pub io_write_bytes: Option<u64>,
    pub pids_peak: Option<u64>,
}

// ---- run.json `capacity` (read by `sampling::capacity`)

/// The CPU and memory the run may use, and where each figure comes from.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Capacity {
    /// CPUs' worth of time per second (a cgroup quota may be fractional, e.g. 1.5).
    pub cpu_cores: f64,
    /// `host`, or the limit that set it, e.g. `cgroup v2 cpu.max (/sys/fs/cgroup/job/cpu.max)`.
    pub cpu_basis: String,
    pub memory_bytes: u64,
    /// `host` (MemTotal), or e.g. `cgroup v1 memory.limit_in_bytes (/sys/fs/cgroup/memory/...)`.
    pub memory_basis: String,
}

// ---- run.json `gpu` (summed by `sampling::gpu`)

/// `gpu.status` in run.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuState {
    Monitored,
    Unavailable,
    Off,
}

/// `gpu` in run.json.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct GpuSummary {
    pub status: GpuState,
    /// Why no GPU was monitored (`unavailable`).
    pub reason: Option<String>,
    /// The GPUs seen, in index order.
    pub devices: Vec<GpuDeviceSummary>,
    /// Most GPU memory the tree held at one sweep (sum over its processes and GPUs); 0 when
    /// none of its processes held any, None when no GPU could list its processes.
    pub tree_peak_memory_bytes: Option<u64>,
    /// When that was (the first sweep with it), RFC 3339.
    pub tree_peak_memory_time: Option<String>,
    /// Why the GPUs' processes could not be attributed to the tree (montrace ran in a PID
    /// namespace of its own, where the driver's pids mean nothing); None when they were.
    pub attribution_unavailable: Option<String>,
    /// Energy all GPUs used from the first sweep to the last; None when none reports energy.
    pub energy_joules: Option<f64>,
}

/// One GPU in run.json, over the run.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub struct GpuDeviceSummary {
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
    /// MIG mode was on when the run started (None: the GPU has no MIG). NVML then gives no
    /// utilization for the whole GPU.
    pub mig_mode: Option<bool>,
    /// When the driver said the GPU was lost (`GPU_IS_LOST`), RFC 3339: no sample after it.
    pub lost_time: Option<String>,
    /// Accounting mode was on when the run started (lifetime figures of exited processes).
    pub accounting_mode: bool,
    pub samples: u64,
    pub utilization_gpu_mean_percent: Option<f64>,
    pub utilization_gpu_max_percent: Option<f64>,
    /// Most memory in use on the GPU, by any process.
    pub memory_used_max_bytes: Option<u64>,
    pub power_max_watts: Option<f64>,
    /// Energy it used from the first sweep to the last.
    pub energy_joules: Option<f64>,
}

// ---- run.json `tracking_mode` and `lost_events` (`kernel::ebpf` attaches and counts)

/// How montrace's programs are attached to the scheduler's process tracepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TrackingMode {
    /// BTF-enabled tracepoints (`tp_btf`): typed arguments, no tracefs needed.
    TpBtf,
    /// Classic tracepoints through tracefs (mounted when missing).
    Tracepoint,
    /// No eBPF: the tree is found by polling /proc (see `polling`).
    Polling,
}

impl TrackingMode {
    /// As run.json writes it (`tp_btf`, `tracepoint`, `polling`).
    pub fn name(self) -> &'static str {
        match self {
            TrackingMode::TpBtf => "tp_btf",
            TrackingMode::Tracepoint => "tracepoint",
            TrackingMode::Polling => "polling",
        }
    }

    /// In words, for people.
    pub fn described(self) -> &'static str {
        match self {
            TrackingMode::TpBtf => "BTF tracepoints",
            TrackingMode::Tracepoint => "classic tracepoints",
            TrackingMode::Polling => "polling",
        }
    }
}

/// Kernel-side counters of what could not be delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LostEvents {
    /// Events dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// New processes that could not be tracked because the tracked map was full.
    pub track_map_full: u64,
    /// Kernel reads that failed (some field of an event is zero).
    pub read_errors: u64,
    /// Exits sent without waiting for their final context switch (a full pending map): their
    /// CPU time lacks the last slice since the thread's last tick.
    pub exits_without_final_cpu: u64,
}

// ---- run.json `features` (`kernel::features` finds them)

/// One row of the table: a feature, whether this run (or a run here) has it, and what it is or
/// why not.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Feature {
    pub name: String,
    pub available: bool,
    pub detail: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracking_mode_names_are_run_jsons() {
        for mode in [
            TrackingMode::TpBtf,
            TrackingMode::Tracepoint,
            TrackingMode::Polling,
        ] {
            assert_eq!(serde_json::to_value(mode).unwrap(), mode.name());
        }
    }
}
