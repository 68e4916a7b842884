//! [`GpuMonitor`]: pure over a [`GpuBackend`]: attributes GPU processes to the tree, derives
//! energy, reads accounting figures after exits, and keeps the run's summary.
use super::*;

/// A tracked process that exited while some GPU had accounting mode on: its figures are read at
/// the next sweep (see [`ACCOUNTING_GRACE_NS`]).
#[derive(Clone, Debug)]
pub(super) struct PendingExit {
    pid: u32,
    start_time_ns: i64,
    exit_ns: i64,
    /// Positions in `GpuMonitor::devices` still to read.
    devices: Vec<usize>,
}

/// One GPU's state over the run.
#[derive(Clone, Debug)]
struct DeviceState {
    info: GpuDevice,
    accounting: bool,
    /// The energy counter's first reading, mJ.
    first_energy_mj: Option<u64>,
    /// Newest per-process utilization sample seen, µs: the next query asks for later ones.
    utilization_seen_us: Option<u64>,
    samples: u64,
    utilization_sum: f64,
    utilization_count: u64,
    utilization_max: Option<f64>,
    memory_used_max: Option<u64>,
    power_max_watts: Option<f64>,
    energy_joules: Option<f64>,
    /// When the driver said the GPU is lost: it is read no more.
    lost_ns: Option<i64>,
}

impl DeviceState {
    fn new(info: GpuDevice, accounting: bool) -> DeviceState {
        DeviceState {
            info,
            accounting,
            first_energy_mj: None,
            utilization_seen_us: None,
            samples: 0,
            utilization_sum: 0.0,
            utilization_count: 0,
            utilization_max: None,
            memory_used_max: None,
            power_max_watts: None,
            energy_joules: None,
            lost_ns: None,
        }
    }

    /// Forgets the run so far (not the device, nor that it is lost).
    fn reset(&mut self) {
        let lost_ns = self.lost_ns;
        *self = DeviceState::new(self.info.clone(), self.accounting);
        self.lost_ns = lost_ns;
    }

    /// The gpu.parquet row of a reading, folded into the run's figures.
    fn record(&mut self, time_ns: i64, reading: DeviceReading) -> GpuRecord {
        // A counter that went back (the driver was reloaded) reads as no energy since.
        let energy_joules = reading.energy_mj.map(|mj| {
            let first = *self.first_energy_mj.get_or_insert(mj);
            mj.saturating_sub(first) as f64 / 1e3
        });
        let utilization = reading.utilization_gpu_percent.map(f64::from);
        let power_watts = reading.power_mw.map(|mw| f64::from(mw) / 1e3);
        self.samples += 1;
        if let Some(u) = utilization {
            self.utilization_sum += u;
            self.utilization_count += 1;
            self.utilization_max = Some(self.utilization_max.map_or(u, |m| m.max(u)));
        }
        if let Some(used) = reading.memory_used_bytes {
            self.memory_used_max = Some(self.memory_used_max.map_or(used, |m| m.max(used)));
        }
        if let Some(w) = power_watts {
            self.power_max_watts = Some(self.power_max_watts.map_or(w, |m| m.max(w)));
        }
        if energy_joules.is_some() {
            self.energy_joules = energy_joules;
        }
        GpuRecord {
            time_ns,
            gpu_index: self.info.index,
            uuid: self.info.uuid.clone(),
            name: self.info.name.clone(),
            utilization_gpu_percent: utilization,
            utilization_memory_percent: reading.utilization_memory_percent.map(f64::from),
            memory_used_bytes: reading.memory_used_bytes,
            memory_total_bytes: reading.memory_total_bytes.or(self.info.memory_total_bytes),
            power_watts,
            energy_joules,
            temperature_c: reading.temperature_c,
            sm_clock_mhz: reading.sm_clock_mhz,
            memory_clock_mhz: reading.memory_clock_mhz,
            throttle_reasons: reading.throttle_reasons.map(throttle_reason_names),
        }
    }

    fn summary(&self) -> GpuDeviceSummary {
        GpuDeviceSummary {
            index: self.info.index,
            uuid: self.info.uuid.clone(),
            name: self.info.name.clone(),
            memory_total_bytes: self.info.memory_total_bytes,
            mig_mode: self.info.mig_mode,
            lost_time: self.lost_ns.map(rfc3339),
            accounting_mode: self.accounting,
            samples: self.samples,
            utilization_gpu_mean_percent: (self.utilization_count > 0)
                .then(|| self.utilization_sum / self.utilization_count as f64),
            utilization_gpu_max_percent: self.utilization_max,
            memory_used_max_bytes: self.memory_used_max,
            power_max_watts: self.power_max_watts,
            energy_joules: self.energy_joules,
        }
    }
}

/// Mean SM and memory utilization of `pid` over the samples taken since it started (older ones
/// belong to an earlier process with the same pid). None when the driver has no sample of it:
/// it reports only processes that used the GPU in its sample period, and may take fewer samples
/// than montrace sweeps.
fn mean_utilization(
    samples: &[ProcessUtilization],
    pid: u32,
    start_time_ns: i64,
) -> (Option<f64>, Option<f64>) {
    let mut count = 0u32;
    let (mut sm, mut memory) = (0.0, 0.0);
    for s in samples
        .iter()
        .filter(|s| s.pid == pid && i128::from(s.timestamp_us) * 1000 >= i128::from(start_time_ns))
    {
        count += 1;
        sm += f64::from(s.sm_percent);
        memory += f64::from(s.memory_percent);
    }
    if count == 0 {
        (None, None)
    } else {
        (Some(sm / f64::from(count)), Some(memory / f64::from(count)))
    }
}

/// The GPUs of a run: reads them each sweep, attributes their processes to the tree, reads the
/// accounting figures of tracked processes that exited, and keeps the run's summary.
pub struct GpuMonitor {
    backend: Box<dyn GpuBackend>,
    devices: Vec<DeviceState>,
    /// Positions in `devices` of the GPUs with accounting mode on.
    accounting: Vec<usize>,
    pub(super) pending: Vec<PendingExit>,
    /// Most GPU memory the tree held at one sweep, and when (the first sweep with it).
    tree_peak: Option<(u64, i64)>,
    last_tree_memory: Option<u64>,
    /// Err: why the driver's pids cannot be taken for montrace's (see [`pid_attribution`]);
    /// then no GPU process is attributed to the tree.
    attribution: Result<(), String>,
    /// Most GPU processes seen at one sweep that could not be attributed (`attribution` Err).
    unattributed_max: usize,
}

impl fmt::Debug for GpuMonitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("GpuMonitor")
            .field("devices", &self.devices)
            .field("pending", &self.pending)
            .finish_non_exhaustive()
    }
}

impl GpuMonitor {
    /// Starts GPU monitoring as `--gpu` asks, through NVML. Call it before the command starts:
    /// with `require` and no GPU it fails, and nothing should have run.
    pub fn open(mode: GpuMode) -> Result<GpuStatus, GpuError> {
        let mut status = Self::open_with(mode, || {
            NvmlBackend::init().map(|b| Box::new(b) as Box<dyn GpuBackend>)
        })?;
        if let Some(monitor) = status.monitor_mut() {
            monitor.set_attribution(pid_attribution(own_pid_namespace().as_deref()));
        }
        Ok(status)
    }

    /// [`GpuMonitor::open`] with another backend. `init` is not called for `--gpu off`.
    pub fn open_with(
        mode: GpuMode,
        init: impl FnOnce() -> Result<Box<dyn GpuBackend>, GpuError>,
    ) -> Result<GpuStatus, GpuError> {
        if mode == GpuMode::Off {
            return Ok(GpuStatus::Off);
        }
        match init().and_then(GpuMonitor::new) {
            Ok(monitor) => Ok(GpuStatus::Monitoring(monitor)),
            Err(err) if mode == GpuMode::Auto => Ok(GpuStatus::Unavailable {
                reason: err.reason().to_owned(),
            }),
            Err(err) => Err(GpuError::Required {
                reason: err.reason().to_owned(),
            }),
        }
    }

    /// Monitors every GPU the backend lists; fails when there is none.
    pub fn new(backend: Box<dyn GpuBackend>) -> Result<GpuMonitor, GpuError> {
        let found = backend.devices()?;
        if found.is_empty() {
            return Err(GpuError::Unavailable {
                reason: "the NVIDIA driver is loaded but has no GPU".into(),
            });
        }
        let devices: Vec<DeviceState> = found
            .into_iter()
            .map(|info| {
                let accounting = backend.accounting_enabled(info.index);
                DeviceState::new(info, accounting)
            })
            .collect();
        let accounting = (0..devices.len())
            .filter(|&i| devices[i].accounting)
            .collect();
        Ok(GpuMonitor {
            backend,
            devices,
            accounting,
            pending: Vec::new(),
            tree_peak: None,
            last_tree_memory: None,
            attribution: Ok(()),
            unattributed_max: 0,
        })
    }

    /// Whether the driver's pids are montrace's (Err: why not, and no process is attributed).
    pub fn set_attribution(&mut self, attribution: Result<(), String>) {
        self.attribution = attribution;
    }

    /// Why GPU processes cannot be attributed to the tree; None when they can.
    pub fn attribution_unavailable(&self) -> Option<&str> {
        self.attribution.as_ref().err().map(String::as_str)
    }

    /// The GPUs monitored.
    pub fn devices(&self) -> Vec<&GpuDevice> {
        self.devices.iter().map(|d| &d.info).collect()
    }

    /// Starts a new run on the same GPUs (`--repeat`): forgets the figures so far.
    pub fn reset(&mut self) {
        self.devices.iter_mut().for_each(DeviceState::reset);
        self.pending.clear();
        self.tree_peak = None;
        self.last_tree_memory = None;
        self.unattributed_max = 0;
    }

    /// One sweep at `time_ns`: a gpu.parquet row per GPU, and the gpu_processes.parquet rows of
    /// the tracked processes on them, followed by the accounting rows of exited processes that
    /// became ready. `tracked(pid)` is the start time of the tracked process with that pid,
    /// None for a pid outside the tree: GPU processes outside the tree are not recorded.
    pub fn sample(
        &mut self,
        time_ns: i64,
        tracked: impl Fn(u32) -> Option<i64>,
    ) -> (Vec<GpuRecord>, Vec<GpuProcessRecord>) {
        let mut gpus = Vec::with_capacity(self.devices.len());
        let mut processes = Vec::new();
        // None until some GPU could list its processes.
        let mut tree_memory: Option<u64> = None;
        let mut unattributed = 0;
        for device in &mut self.devices {
            let index = device.info.index;
            if device.lost_ns.is_some() {
                continue;
            }
            let reading = self.backend.reading(index);
            if reading.lost {
                device.lost_ns = Some(time_ns);
                crate::say!(
                    "montrace: GPU {index} ({}) is lost (NVML: GPU_IS_LOST, it fell off the bus \
                     or needs a reset): its sampling stopped; the run goes on",
                    device.info.name.as_deref().unwrap_or("unnamed GPU")
                );
                continue;
            }
            gpus.push(device.record(time_ns, reading));
            let Some(holders) = self.backend.processes(index) else {
                continue;
            };
            if self.attribution.is_err() {
                unattributed += holders.len();
                continue;
            }
            let tree = tree_memory.get_or_insert(0);
            let utilization = self
                .backend
                .process_utilization(index, device.utilization_seen_us);
            if let Some(newest) = utilization.iter().flatten().map(|u| u.timestamp_us).max() {
                device.utilization_seen_us = Some(newest);
            }
            for holder in holders {
                let Some(start_time_ns) = tracked(holder.pid) else {
                    continue;
                };
                let (sm, memory) = utilization.as_deref().map_or((None, None), |samples| {
                    mean_utilization(samples, holder.pid, start_time_ns)
                });
                *tree += holder.used_memory_bytes.unwrap_or(0);
                processes.push(GpuProcessRecord {
                    time_ns,
                    gpu_index: index,
                    pid: holder.pid,
                    start_time_ns,
                    source: GpuProcessSource::Sample,
                    gpu_memory_bytes: holder.used_memory_bytes,
                    sm_utilization_percent: sm,
                    memory_utilization_percent: memory,
                    ..Default::default()
                });
            }
        }
        if let Some(bytes) = tree_memory {
            if self.tree_peak.is_none_or(|(peak, _)| bytes > peak) {
                self.tree_peak = Some((bytes, time_ns));
            }
        }
        self.last_tree_memory = tree_memory;
        self.unattributed_max = self.unattributed_max.max(unattributed);
        processes.extend(self.resolve_exits(time_ns, false));
        (gpus, processes)
    }

    /// A tracked process exited at `time_ns`. When a GPU has accounting mode on, its figures
    /// are read at a later [`GpuMonitor::sample`] (or [`GpuMonitor::finish`]), once the driver
    /// has closed its context; they come back among that call's rows, stamped `time_ns`.
    pub fn on_exit(&mut self, pid: u32, start_time_ns: i64, time_ns: i64) {
        if self.accounting.is_empty() {
            return;
        }
        self.pending.push(PendingExit {
            pid,
            start_time_ns,
            exit_ns: time_ns,
            devices: self.accounting.clone(),
        });
    }

    /// The end of the run: the accounting rows still waiting, whatever the driver says now.
    pub fn finish(&mut self, time_ns: i64) -> Vec<GpuProcessRecord> {
        self.resolve_exits(time_ns, true)
    }

    /// Sum of the GPU memory the tracked processes held at the last sweep; None before the
    /// first sweep, or when no GPU can list its processes (for `--limit gpu-mem`).
    pub fn last_tree_memory_bytes(&self) -> Option<u64> {
        self.last_tree_memory
    }

    /// Reads the accounting figures of the exited processes that the driver knows. A process
    /// whose context is still open waits, up to [`ACCOUNTING_GRACE_NS`] after its exit, unless
    /// `last`.
    fn resolve_exits(&mut self, now_ns: i64, last: bool) -> Vec<GpuProcessRecord> {
        let mut rows = Vec::new();
        if self.pending.is_empty() {
            return rows;
        }
        // One query per GPU tells which exited processes used it at all.
        let users: HashMap<usize, HashSet<u32>> = self
            .accounting
            .iter()
            .filter_map(|&pos| {
                let pids = self.backend.accounting_pids(self.devices[pos].info.index)?;
                Some((pos, pids.into_iter().collect()))
            })
            .collect();
        let backend = &self.backend;
        let devices = &self.devices;
        self.pending.retain_mut(|exit| {
            let mut waiting = std::mem::take(&mut exit.devices);
            waiting.retain(|&pos| {
                if !users.get(&pos).is_some_and(|pids| pids.contains(&exit.pid)) {
                    return false;
                }
                let index = devices[pos].info.index;
                let Some(stats) = backend.accounting_stats(index, exit.pid) else {
                    return false;
                };
                let context_start_ns = i64::try_from(stats.start_time_us)
                    .unwrap_or(i64::MAX / 1000)
                    .saturating_mul(1000);
                if stats.start_time_us != 0
                    && context_start_ns + ACCOUNTING_START_SLACK_NS < exit.start_time_ns
                {
                    return false; // an earlier process with this pid
                }
                if stats.is_running && !last && now_ns - exit.exit_ns < ACCOUNTING_GRACE_NS {
                    return true;
                }
                rows.push(accounting_row(exit, index, &stats));
                false
            });
            exit.devices = waiting;
            !exit.devices.is_empty()
        });
        rows
    }

    /// The run's GPU figures for run.json and the printed summary.
    pub fn summary(&self) -> GpuSummary {
        let devices: Vec<GpuDeviceSummary> =
            self.devices.iter().map(DeviceState::summary).collect();
        let energies: Vec<f64> = devices.iter().filter_map(|d| d.energy_joules).collect();
        GpuSummary {
            status: GpuState::Monitored,
            reason: None,
            tree_peak_memory_bytes: self.tree_peak.map(|(bytes, _)| bytes),
            attribution_unavailable: self.attribution.as_ref().err().map(|why| {
                format!(
                    "{why}: {} GPU process(es) at most at one sweep were left unattributed",
                    self.unattributed_max
                )
            }),
            tree_peak_memory_time: self.tree_peak.map(|(_, time)| rfc3339(time)),
            energy_joules: (!energies.is_empty()).then(|| energies.iter().sum()),
            devices,
        }
    }
}

fn accounting_row(
    exit: &PendingExit,
    gpu_index: u32,
    stats: &AccountingReading,
) -> GpuProcessRecord {
    GpuProcessRecord {
        time_ns: exit.exit_ns,
        gpu_index,
        pid: exit.pid,
        start_time_ns: exit.start_time_ns,
        source: GpuProcessSource::Accounting,
        max_gpu_memory_bytes: stats.max_memory_bytes,
        lifetime_gpu_utilization_percent: stats.gpu_utilization_percent.map(f64::from),
        lifetime_memory_utilization_percent: stats.memory_utilization_percent.map(f64::from),
        // The driver says 0 while the context is open.
        context_time_ns: (!stats.is_running).then(|| stats.time_ms.saturating_mul(1_000_000)),
        ..Default::default()
    }
}

/// The PID namespace montrace runs in, as `/proc/self/ns/pid` names it (`pid:[4026531836]`);
/// None where it cannot be read.
fn own_pid_namespace() -> Option<String> {
    std::fs::read_link("/proc/self/ns/pid")
        .ok()
        .map(|link| link.to_string_lossy().into_owned())
}

/// The initial PID namespace's inode (`PROC_PID_INIT_INO` in the kernel).
const INITIAL_PID_NAMESPACE: &str = "pid:[4026531836]";

/// Whether the pids NVML gives are montrace's. The driver knows no PID namespaces: it gives
/// every process's pid in the initial namespace (the host's). Inside a container with a PID
/// namespace of its own, the same number is another process, or none: those pids cannot be
/// mapped from inside, so none is attributed (Err says why), never to the wrong process.
pub(super) fn pid_attribution(namespace: Option<&str>) -> Result<(), String> {
    match namespace {
        Some(INITIAL_PID_NAMESPACE) => Ok(()),
        Some(other) => Err(format!(
            "montrace runs in a PID namespace of its own ({other}, a container's), and the \
             NVIDIA driver gives the host's pids, which cannot be mapped from inside: no GPU \
             process is attributed to the tree (run montrace on the host, or with the host's PID \
             namespace, e.g. docker --pid=host)"
        )),
        None => Err(
            "montrace cannot read its PID namespace (/proc/self/ns/pid), so it cannot \
                     tell whether the NVIDIA driver's pids are its own: no GPU process is \
                     attributed to the tree"
                .into(),
        ),
    }
}
