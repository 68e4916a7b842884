//! The records montrace writes: one per process and one per lifecycle event. Pure data: the
//! tracker fills them from kernel events, the writer turns them into Parquet rows, the summary
//! reads them. Times are wall-clock nanoseconds since the Unix epoch (UTC).

/// A process for its whole life, keyed by (`pid`, `start_time_ns`) so a reused pid is a new row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessRecord {
    pub pid: u32,
    /// When the kernel created the process (`task_struct::start_boottime`, as wall time).
    pub start_time_ns: i64,
    /// The process that forked it; kept after reparenting. None for the command montrace started
    /// (its parent is montrace itself) and for a process whose fork event was lost.
    pub parent_pid: Option<u32>,
    pub parent_start_time_ns: Option<i64>,
    /// When its last thread exited; None while alive.
    pub end_time_ns: Option<i64>,
    /// The program it ran: the path of its last execve (as the kernel saw it), or, for a child
    /// that never exec'd, its parent's program (a forked child runs its parent's code).
    pub filename: Option<String>,
    /// argv of the last execve, read in the kernel at exec (cut at 512 bytes).
    pub argv: Option<Vec<String>>,
    /// True when argv was longer than what the kernel side kept.
    pub argv_truncated: bool,
    /// The kernel's short command name (`comm`), as of the last event seen.
    pub comm: String,
    /// How many times it called execve while tracked.
    pub exec_count: u32,
    /// Exit status when it exited normally.
    pub exit_code: Option<i32>,
    /// Signal number when a signal killed it.
    pub exit_signal: Option<i32>,
    pub core_dumped: bool,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    /// Peak resident memory of its own address space (VmHWM at exit), bytes; None when it had no
    /// address space at exit.
    pub peak_rss_bytes: Option<u64>,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    pub voluntary_ctxt_switches: Option<u64>,
    pub involuntary_ctxt_switches: Option<u64>,
    /// Storage I/O (`/proc/PID/io` read_bytes/write_bytes), bytes.
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    /// Bytes through read/write-like syscalls (`rchar`/`wchar`).
    pub read_chars: Option<u64>,
    pub write_chars: Option<u64>,
    /// Time its threads spent off the CPU while tracked, summed over them: runnable waiting for
    /// a CPU, blocked uninterruptibly (the D state, mostly I/O), sleeping. None where montrace
    /// does not follow it (classic tracepoints, polling) or the process has not ended.
    pub run_queue_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    pub sleep_ns: Option<u64>,
    /// Bytes sent and received through sockets (IPv4 and IPv6; unix), from every send and
    /// receive. None where they are not counted (before Linux 6.3, classic tracepoints, polling).
    pub net_inet_sent_bytes: Option<u64>,
    pub net_inet_received_bytes: Option<u64>,
    pub net_unix_sent_bytes: Option<u64>,
    pub net_unix_received_bytes: Option<u64>,
    /// Still running when montrace stopped (its figures are then null).
    pub alive_at_end: bool,
}

/// `EventRecord::kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Fork,
    Exec,
    Exit,
    ThreadExit,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Fork => "fork",
            EventKind::Exec => "exec",
            EventKind::Exit => "exit",
            EventKind::ThreadExit => "thread_exit",
        }
    }
}

/// One row of the lifecycle stream. Fields that do not apply to the kind are None.
#[derive(Clone, Debug, PartialEq)]
pub struct EventRecord {
    pub time_ns: i64,
    pub kind: EventKind,
    pub pid: u32,
    pub start_time_ns: i64,
    /// fork: the parent.
    pub parent_pid: Option<u32>,
    pub parent_start_time_ns: Option<i64>,
    /// exec: what was exec'd.
    pub filename: Option<String>,
    pub argv: Option<Vec<String>>,
    /// exit / thread_exit: the exiting thread.
    pub tid: Option<u32>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
}

/// Where a row of samples.parquet came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SampleSource {
    /// A periodic read of /proc.
    #[default]
    Procfs,
    /// The process's exit event (its last figures, from the kernel at exit).
    Exit,
}

impl SampleSource {
    pub fn as_str(self) -> &'static str {
        match self {
            SampleSource::Procfs => "procfs",
            SampleSource::Exit => "exit",
        }
    }
}

/// One row of samples.parquet: a live process at one moment. Counters are cumulative since the
/// process started; `cpu_percent` is derived from the previous row of the same process.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SampleRecord {
    pub time_ns: i64,
    pub pid: u32,
    /// Joins with processes.parquet.
    pub start_time_ns: i64,
    pub source: SampleSource,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    /// Share of one CPU since the previous sample of this process (or since it started, for
    /// its first sample): 100 = one core busy. Above 100 for a multi-threaded process.
    pub cpu_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    /// Private memory (smaps_rollup Private_Clean + Private_Dirty); None with --memory-detail basic.
    pub uss_bytes: Option<u64>,
    /// Proportional set size (shared pages divided among their users).
    pub pss_bytes: Option<u64>,
    pub swap_bytes: Option<u64>,
    pub vms_bytes: Option<u64>,
    pub threads: Option<u32>,
    pub fds: Option<u32>,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
    pub read_chars: Option<u64>,
    pub write_chars: Option<u64>,
    pub minor_faults: Option<u64>,
    pub major_faults: Option<u64>,
    /// One-letter state from /proc/PID/stat (R, S, D, Z, ...); "X" for the exit row.
    pub state: Option<String>,
    /// Time its threads spent off the CPU so far (as processes.parquet's figures, summed over
    /// its threads, live and exited): runnable waiting for a CPU, blocked (D state), sleeping.
    /// None where montrace's programs do not follow it (classic tracepoints, polling).
    pub run_queue_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    pub sleep_ns: Option<u64>,
    /// The run-queue delay and the blocked time since the previous sample of this process (or
    /// since it started), as a share of that interval: 100 = one thread waiting all along.
    pub run_queue_percent: Option<f64>,
    pub blocked_percent: Option<f64>,
}

/// One row of system.parquet: the whole machine at one moment. Percentages cover all CPUs
/// (100 = every CPU busy) over the interval since the previous row.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemRecord {
    pub time_ns: i64,
    pub cpu_user_percent: Option<f64>,
    pub cpu_nice_percent: Option<f64>,
    pub cpu_system_percent: Option<f64>,
    pub cpu_idle_percent: Option<f64>,
    pub cpu_iowait_percent: Option<f64>,
    /// Hard and soft interrupts.
    pub cpu_irq_percent: Option<f64>,
    pub cpu_steal_percent: Option<f64>,
    pub mem_total_bytes: u64,
    pub mem_available_bytes: u64,
    /// total - available.
    pub mem_used_bytes: u64,
    /// Page cache + reclaimable slab (Cached + SReclaimable).
    pub mem_cached_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_used_bytes: u64,
    pub load_1: f64,
    pub load_5: f64,
    pub load_15: f64,
    /// Pressure stall information, share of time stalled over the last 10 s (percent); None
    /// where the kernel has no PSI.
    pub psi_cpu_some_avg10: Option<f64>,
    pub psi_memory_some_avg10: Option<f64>,
    pub psi_memory_full_avg10: Option<f64>,
    pub psi_io_some_avg10: Option<f64>,
    pub psi_io_full_avg10: Option<f64>,
    /// The run cgroup's own pressure: the share of the time since the previous row (percent)
    /// during which some (at least one) or all of the tree's tasks were stalled waiting for a
    /// CPU, for memory (reclaim, swap-in, thrashing) or for I/O. None without a cgroup v2 run
    /// cgroup (v1 keeps no pressure per cgroup), without PSI, and in the first row.
    pub run_cpu_some_percent: Option<f64>,
    pub run_cpu_full_percent: Option<f64>,
    pub run_memory_some_percent: Option<f64>,
    pub run_memory_full_percent: Option<f64>,
    pub run_io_some_percent: Option<f64>,
    pub run_io_full_percent: Option<f64>,
    /// The tree's memory at this sweep, each memory image once: its resident memory as run.json
    /// `tree_memory_peaks.source` counts it (what `--limit rss` checks), and USS and PSS summed
    /// over its address spaces. None where no process of the tree had the figure.
    pub tree_rss_bytes: Option<u64>,
    pub tree_uss_bytes: Option<u64>,
    pub tree_pss_bytes: Option<u64>,
}

/// `MarkRecord::kind`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MarkKind {
    /// A moment.
    #[default]
    Point,
    /// A phase starts (`montrace mark --begin LABEL`).
    Begin,
    /// The phase of the same label ends.
    End,
}

impl MarkKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MarkKind::Point => "point",
            MarkKind::Begin => "begin",
            MarkKind::End => "end",
        }
    }
}

/// One row of marks.parquet: a phase mark a monitored program sent.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MarkRecord {
    pub time_ns: i64,
    /// The process that sent it (from the socket's peer credentials).
    pub pid: u32,
    /// Its start time when it belongs to the tree; None otherwise.
    pub start_time_ns: Option<i64>,
    pub label: String,
    pub kind: MarkKind,
}

/// One row of gpu.parquet: one NVIDIA GPU at one sampling sweep. A figure the device does not
/// report (NVML says "not supported", or the query failed) is None.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRecord {
    pub time_ns: i64,
    /// NVML's index, as `nvidia-smi` numbers the GPUs (CUDA may number them otherwise, see
    /// `CUDA_DEVICE_ORDER`); `uuid` names a GPU for good.
    pub gpu_index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    /// Share of the driver's last sample period (1/6 s to 1 s) in which a kernel ran.
    pub utilization_gpu_percent: Option<f64>,
    /// Share of that period in which device memory was read or written.
    pub utilization_memory_percent: Option<f64>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_watts: Option<f64>,
    /// Energy the GPU used since montrace first read it in this run (the driver's counter,
    /// `nvmlDeviceGetTotalEnergyConsumption`, minus its first reading).
    pub energy_joules: Option<f64>,
    pub temperature_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// Why the clocks are held down now (`sw_power_cap`, `hw_thermal_slowdown`, ...); empty when
    /// nothing holds them.
    pub throttle_reasons: Option<Vec<String>>,
}

/// Where a row of gpu_processes.parquet came from.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GpuProcessSource {
    /// The process held GPU memory at a sampling sweep.
    #[default]
    Sample,
    /// The driver's accounting figures for the process's whole life, read after it exited.
    Accounting,
}

impl GpuProcessSource {
    pub fn as_str(self) -> &'static str {
        match self {
            GpuProcessSource::Sample => "sample",
            GpuProcessSource::Accounting => "accounting",
        }
    }
}

/// One row of gpu_processes.parquet: a tracked process on one GPU. `sample` rows fill the
/// sweep's columns, `accounting` rows the lifetime ones; the others are None.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuProcessRecord {
    /// The sweep's time (`sample`), or the process's exit (`accounting`).
    pub time_ns: i64,
    pub gpu_index: u32,
    pub pid: u32,
    /// Joins with processes.parquet.
    pub start_time_ns: i64,
    pub source: GpuProcessSource,
    /// GPU memory it holds now (`sample`).
    pub gpu_memory_bytes: Option<u64>,
    /// Its share of the SM / memory-controller time since the previous sweep, from the driver's
    /// per-process utilization samples (`sample`).
    pub sm_utilization_percent: Option<f64>,
    pub memory_utilization_percent: Option<f64>,
    /// The most GPU memory it ever held on this GPU (`accounting`).
    pub max_gpu_memory_bytes: Option<u64>,
    /// Share of its life in which a kernel ran on this GPU (`accounting`).
    pub lifetime_gpu_utilization_percent: Option<f64>,
    /// Share of its life in which this GPU's memory was read or written (`accounting`).
    pub lifetime_memory_utilization_percent: Option<f64>,
    /// How long its GPU context was alive (`accounting`; ms precision).
    pub context_time_ns: Option<u64>,
}

/// One row of a published dataset's `runs` table (`montrace publish`): a run, its labels,
/// context and headline figures. Its `run_id`, `date` and `host` are the dataset's partition
/// values (directory names), not columns of the file.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunRecord {
    pub start_time_ns: i64,
    pub end_time_ns: i64,
    pub command: String,
    pub argv: Vec<String>,
    pub labels: std::collections::BTreeMap<String, String>,
    pub exit_status: i32,
    pub tracking_mode: String,
    pub montrace_version: String,
    pub kernel: String,
    pub cpu_model: Option<String>,
    pub cpus: Option<u32>,
    pub memory_bytes: Option<u64>,
    pub git_commit: Option<String>,
    pub git_branch: Option<String>,
    pub git_dirty: Option<bool>,
    pub ci_system: Option<String>,
    pub ci_repository: Option<String>,
    pub ci_pipeline: Option<String>,
    pub ci_job: Option<String>,
    pub slurm_job_id: Option<String>,
    pub slurm_array_task_id: Option<String>,
    /// The rest of the run's Slurm context (step, user, partition, account, what the job asked
    /// for); default outside Slurm.
    pub slurm: crate::store::model::Slurm,
    pub k8s_namespace: Option<String>,
    pub k8s_pod: Option<String>,
    pub k8s_pod_uid: Option<String>,
    pub k8s_container_id: Option<String>,
    pub wall_s: f64,
    pub cpu_s: f64,
    pub peak_rss_bytes: Option<u64>,
    pub processes: u64,
    pub max_concurrent: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub critical_path_s: Option<f64>,
    pub lost_events: u64,
    /// Every summary.json metric of the run (`metrics['cpu_user_s']`): what `compare` gates on
    /// when its baseline is a dataset.
    pub metrics: std::collections::BTreeMap<String, f64>,
}
