//! NVIDIA GPUs through NVML: each sweep reads every GPU (`gpu.parquet`) and the GPU memory and
//! utilization of the tracked processes on it (`gpu_processes.parquet`); a tracked process that
//! used a GPU gets the driver's accounting figures for its whole life once it has exited, when the
//! GPU has accounting mode on.
//!
//! [`GpuBackend`] is the edge: [`NvmlBackend`] talks to the driver (libnvidia-ml.so.1, loaded at
//! run time, so montrace runs where there is no driver), tests use a fake. [`GpuMonitor`] is pure
//! over it: it attributes GPU processes to the tree, derives energy and keeps the run's summary.
//! A figure a GPU does not give (NVML's "not supported", or any failed query) is None, never an
//! error: only starting NVML can fail, and `--gpu` decides what that means ([`GpuMonitor::open`]).
//!
//! Times are wall-clock nanoseconds since the Unix epoch (UTC), as everywhere in montrace; NVML
//! stamps its samples in microseconds of the same clock.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fmt;

use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::struct_wrappers::device::ProcessInfo;
use nvml_wrapper::Nvml;
use serde::Serialize;

use crate::cli::GpuMode;
use crate::model::{GpuProcessRecord, GpuProcessSource, GpuRecord};
use crate::units::{format_bytes, rfc3339};

/// How long after a process's exit the driver may still show its context as running: until then
/// its accounting figures wait for the driver to close it (the GPU context is torn down when the
/// process's files are closed, after the exit event montrace sees).
pub const ACCOUNTING_GRACE_NS: i64 = 2_000_000_000;

/// Accounting figures whose context started this long before the process did belong to an
/// earlier process with the same pid (the driver keys them by pid alone). Allows for the skew
/// between the kernel's start time converted to wall time and the driver's clock.
const ACCOUNTING_START_SLACK_NS: i64 = 1_000_000_000;

/// Why no GPU is monitored.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// No driver library, the driver is not loaded, no device, ...
    #[error("no GPU can be monitored: {reason}")]
    Unavailable { reason: String },
    /// `--gpu require`, and no GPU can be monitored.
    #[error(
        "--gpu require: no GPU can be monitored: {reason}. Install or load the NVIDIA driver, \
         or run with --gpu auto to record without GPU data"
    )]
    Required { reason: String },
}

impl GpuError {
    pub fn reason(&self) -> &str {
        match self {
            GpuError::Unavailable { reason } | GpuError::Required { reason } => reason,
        }
    }
}

/// A GPU as found when monitoring starts.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct GpuDevice {
    /// NVML's index, as `nvidia-smi` numbers the GPUs.
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
}

/// One reading of a GPU, in the driver's units. None: the GPU does not give it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeviceReading {
    pub utilization_gpu_percent: Option<u32>,
    pub utilization_memory_percent: Option<u32>,
    pub memory_used_bytes: Option<u64>,
    pub memory_total_bytes: Option<u64>,
    pub power_mw: Option<u32>,
    /// The driver's energy counter, mJ since the driver was loaded.
    pub energy_mj: Option<u64>,
    pub temperature_c: Option<u32>,
    pub sm_clock_mhz: Option<u32>,
    pub memory_clock_mhz: Option<u32>,
    /// `nvmlClocksThrottleReason*` bits, see [`throttle_reason_names`].
    pub throttle_reasons: Option<u64>,
}

/// A process with a compute or graphics context on a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuProcess {
    pub pid: u32,
    /// GPU memory it holds; None where the driver cannot tell (e.g. under WDDM).
    pub used_memory_bytes: Option<u64>,
}

/// One of the driver's per-process utilization samples (one per driver sample period in which
/// the process used the GPU).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessUtilization {
    pub pid: u32,
    /// When the driver took it, µs since the Unix epoch.
    pub timestamp_us: u64,
    pub sm_percent: u32,
    pub memory_percent: u32,
}

/// The driver's accounting figures for one process on one GPU (`nvmlAccountingStats_t`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AccountingReading {
    pub gpu_utilization_percent: Option<u32>,
    pub memory_utilization_percent: Option<u32>,
    pub max_memory_bytes: Option<u64>,
    /// When its context started, µs since the Unix epoch.
    pub start_time_us: u64,
    /// How long its context was alive, ms; 0 while it runs.
    pub time_ms: u64,
    pub is_running: bool,
}

/// What montrace reads from the GPUs, addressed by NVML index. Only [`GpuBackend::devices`]
/// can fail; every other query answers None (or false) for what the GPU does not give.
pub trait GpuBackend {
    /// The GPUs that can be read, in index order. Err: why none can.
    fn devices(&self) -> Result<Vec<GpuDevice>, GpuError>;
    fn reading(&self, index: u32) -> DeviceReading;
    /// The processes with a compute or graphics context on the GPU (each pid once); None when
    /// the GPU cannot list them.
    fn processes(&self, index: u32) -> Option<Vec<GpuProcess>>;
    /// The driver's per-process utilization samples taken after `since_us` (None: all it
    /// holds). None when the GPU does not give them; empty when there is no new one.
    fn process_utilization(
        &self,
        index: u32,
        since_us: Option<u64>,
    ) -> Option<Vec<ProcessUtilization>>;
    /// Accounting mode is on (root turns it on with `nvidia-smi -am 1`).
    fn accounting_enabled(&self, index: u32) -> bool;
    /// The pids the driver keeps accounting figures for, running or exited.
    fn accounting_pids(&self, index: u32) -> Option<Vec<u32>>;
    fn accounting_stats(&self, index: u32, pid: u32) -> Option<AccountingReading>;
}

/// The real GPUs, through NVML.
pub struct NvmlBackend {
    nvml: Nvml,
}

impl NvmlBackend {
    /// Loads libnvidia-ml.so.1 and starts NVML.
    pub fn init() -> Result<NvmlBackend, GpuError> {
        Self::init_from(None)
    }

    /// `lib`: the driver library to load instead of the default.
    fn init_from(lib: Option<&OsStr>) -> Result<NvmlBackend, GpuError> {
        let mut builder = Nvml::builder();
        if let Some(lib) = lib {
            builder.lib_path(lib);
        }
        builder
            .init()
            .map(|nvml| NvmlBackend { nvml })
            .map_err(|err| GpuError::Unavailable {
                reason: init_failure(&err),
            })
    }

    fn device(&self, index: u32) -> Option<nvml_wrapper::Device<'_>> {
        self.nvml.device_by_index(index).ok()
    }
}

/// How many GPUs NVML finds here; None where NVML does not start (no driver). For tests that
/// need a real GPU.
pub fn nvml_device_count() -> Option<u32> {
    NvmlBackend::init().ok()?.nvml.device_count().ok()
}

/// Why NVML did not start, for people.
fn init_failure(err: &NvmlError) -> String {
    match err {
        NvmlError::LibloadingError(err) => format!("no NVIDIA driver library ({err})"),
        NvmlError::DriverNotLoaded => {
            "the NVIDIA driver library is installed but the driver is not loaded".into()
        }
        NvmlError::NoPermission => "no permission to talk to the NVIDIA driver".into(),
        NvmlError::FailedToLoadSymbol(err) => {
            format!("the NVIDIA driver library is too old for montrace ({err})")
        }
        err => format!("NVML failed to start: {err}"),
    }
}

fn used_memory(memory: UsedGpuMemory) -> Option<u64> {
    match memory {
        UsedGpuMemory::Used(bytes) => Some(bytes),
        UsedGpuMemory::Unavailable => None,
    }
}

impl GpuBackend for NvmlBackend {
    fn devices(&self) -> Result<Vec<GpuDevice>, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|err| GpuError::Unavailable {
                reason: format!("NVML cannot count the GPUs: {err}"),
            })?;
        let mut devices = Vec::new();
        let mut failures = Vec::new();
        for index in 0..count {
            match self.nvml.device_by_index(index) {
                Ok(device) => devices.push(GpuDevice {
                    index,
                    uuid: device.uuid().ok(),
                    name: device.name().ok(),
                    memory_total_bytes: device.memory_info().ok().map(|m| m.total),
                }),
                // A GPU this process may not open (a container's device cgroup) is left out.
                Err(err) => failures.push(format!("GPU {index}: {err}")),
            }
        }
        if devices.is_empty() && !failures.is_empty() {
            return Err(GpuError::Unavailable {
                reason: format!("NVML cannot open any GPU ({})", failures.join("; ")),
            });
        }
        Ok(devices)
    }

    fn reading(&self, index: u32) -> DeviceReading {
        let Some(device) = self.device(index) else {
            return DeviceReading::default();
        };
        let utilization = device.utilization_rates().ok();
        let memory = device.memory_info().ok();
        DeviceReading {
            utilization_gpu_percent: utilization.as_ref().map(|u| u.gpu),
            utilization_memory_percent: utilization.as_ref().map(|u| u.memory),
            memory_used_bytes: memory.as_ref().map(|m| m.used),
            memory_total_bytes: memory.as_ref().map(|m| m.total),
            power_mw: device.power_usage().ok(),
            energy_mj: device.total_energy_consumption().ok(),
            temperature_c: device.temperature(TemperatureSensor::Gpu).ok(),
            sm_clock_mhz: device.clock_info(Clock::SM).ok(),
            memory_clock_mhz: device.clock_info(Clock::Memory).ok(),
            throttle_reasons: device.current_throttle_reasons().ok().map(|r| r.bits()),
        }
    }

    fn processes(&self, index: u32) -> Option<Vec<GpuProcess>> {
        let device = self.device(index)?;
        let compute = device.running_compute_processes();
        let graphics = device.running_graphics_processes();
        if compute.is_err() && graphics.is_err() {
            return None;
        }
        let listed: Vec<ProcessInfo> = compute
            .unwrap_or_default()
            .into_iter()
            .chain(graphics.unwrap_or_default())
            .collect();
        Some(merge_processes(listed.into_iter().map(|p| GpuProcess {
            pid: p.pid,
            used_memory_bytes: used_memory(p.used_gpu_memory),
        })))
    }

    fn process_utilization(
        &self,
        index: u32,
        since_us: Option<u64>,
    ) -> Option<Vec<ProcessUtilization>> {
        let device = self.device(index)?;
        match device.process_utilization_stats(since_us) {
            Ok(samples) => Some(
                samples
                    .into_iter()
                    .map(|s| ProcessUtilization {
                        pid: s.pid,
                        timestamp_us: s.timestamp,
                        sm_percent: s.sm_util,
                        memory_percent: s.mem_util,
                    })
                    .collect(),
            ),
            // The driver says NOT_FOUND when it took no sample since `since_us`.
            Err(NvmlError::NotFound) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    fn accounting_enabled(&self, index: u32) -> bool {
        self.device(index)
            .and_then(|d| d.is_accounting_enabled().ok())
            .unwrap_or(false)
    }

    fn accounting_pids(&self, index: u32) -> Option<Vec<u32>> {
        self.device(index)?.accounting_pids().ok()
    }

    fn accounting_stats(&self, index: u32, pid: u32) -> Option<AccountingReading> {
        let stats = self.device(index)?.accounting_stats_for(pid).ok()?;
        Some(AccountingReading {
            gpu_utilization_percent: stats.gpu_utilization,
            memory_utilization_percent: stats.memory_utilization,
            max_memory_bytes: stats.max_memory_usage,
            start_time_us: stats.start_time,
            time_ms: stats.time,
            is_running: stats.is_running,
        })
    }
}

/// One entry per pid: a process with both a compute and a graphics context is listed twice,
/// with the same memory.
fn merge_processes(listed: impl Iterator<Item = GpuProcess>) -> Vec<GpuProcess> {
    let mut merged: Vec<GpuProcess> = Vec::new();
    for process in listed {
        match merged.iter_mut().find(|p| p.pid == process.pid) {
            Some(seen) => {
                seen.used_memory_bytes = seen.used_memory_bytes.max(process.used_memory_bytes)
            }
            None => merged.push(process),
        }
    }
    merged
}

/// The `nvmlClocksThrottleReason*` bits (nvml.h) and the names montrace writes for them.
const THROTTLE_REASONS: &[(u64, &str)] = &[
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
];

/// The names of the reasons set in `bits`, in bit order; bits montrace does not know come last,
/// as one hexadecimal number (`0x1000`). Empty when nothing holds the clocks down.
pub fn throttle_reason_names(bits: u64) -> Vec<String> {
    let mut names: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(bit, _)| bits & bit != 0)
        .map(|(_, name)| (*name).to_owned())
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |all, (bit, _)| all | bit);
    if bits & !known != 0 {
        names.push(format!("{:#x}", bits & !known));
    }
    names
}

/// What `--gpu` and the machine allow.
#[derive(Debug)]
pub enum GpuStatus {
    /// `--gpu off`.
    Off,
    /// `--gpu auto` and no GPU can be monitored.
    Unavailable {
        reason: String,
    },
    Monitoring(GpuMonitor),
}

impl GpuStatus {
    /// The line to print before the command starts: why there is no GPU data (`--gpu auto`).
    pub fn notice(&self) -> Option<String> {
        match self {
            GpuStatus::Unavailable { reason } => Some(format!("montrace: no GPU data: {reason}")),
            GpuStatus::Off | GpuStatus::Monitoring(_) => None,
        }
    }

    /// Why no GPU is monitored (for what needs one, like `--limit gpu-mem`); None when one is.
    pub fn unavailable_reason(&self) -> Option<String> {
        match self {
            GpuStatus::Off => Some("--gpu off".into()),
            GpuStatus::Unavailable { reason } => Some(reason.clone()),
            GpuStatus::Monitoring(_) => None,
        }
    }

    pub fn monitor_mut(&mut self) -> Option<&mut GpuMonitor> {
        match self {
            GpuStatus::Monitoring(monitor) => Some(monitor),
            _ => None,
        }
    }

    /// What run.json says under `gpu`.
    pub fn summary(&self) -> GpuSummary {
        match self {
            GpuStatus::Off => GpuSummary::not_monitored(GpuState::Off, None),
            GpuStatus::Unavailable { reason } => {
                GpuSummary::not_monitored(GpuState::Unavailable, Some(reason.clone()))
            }
            GpuStatus::Monitoring(monitor) => monitor.summary(),
        }
    }
}

/// A tracked process that exited while some GPU had accounting mode on: its figures are read at
/// the next sweep (see [`ACCOUNTING_GRACE_NS`]).
#[derive(Clone, Debug)]
struct PendingExit {
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
        }
    }

    /// Forgets the run so far (not the device).
    fn reset(&mut self) {
        *self = DeviceState::new(self.info.clone(), self.accounting);
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
    pending: Vec<PendingExit>,
    /// Most GPU memory the tree held at one sweep, and when (the first sweep with it).
    tree_peak: Option<(u64, i64)>,
    last_tree_memory: Option<u64>,
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
        Self::open_with(mode, || {
            NvmlBackend::init().map(|b| Box::new(b) as Box<dyn GpuBackend>)
        })
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
        })
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
        for device in &mut self.devices {
            let index = device.info.index;
            gpus.push(device.record(time_ns, self.backend.reading(index)));
            let Some(holders) = self.backend.processes(index) else {
                continue;
            };
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

/// `gpu.status` in run.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum GpuState {
    Monitored,
    Unavailable,
    Off,
}

/// `gpu` in run.json.
#[derive(Clone, Debug, PartialEq, Serialize)]
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
    /// Energy all GPUs used from the first sweep to the last; None when none reports energy.
    pub energy_joules: Option<f64>,
}

/// One GPU in run.json, over the run.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GpuDeviceSummary {
    pub index: u32,
    pub uuid: Option<String>,
    pub name: Option<String>,
    pub memory_total_bytes: Option<u64>,
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

impl GpuSummary {
    fn not_monitored(status: GpuState, reason: Option<String>) -> GpuSummary {
        GpuSummary {
            status,
            reason,
            devices: Vec::new(),
            tree_peak_memory_bytes: None,
            tree_peak_memory_time: None,
            energy_joules: None,
        }
    }

    /// The figures summary.json keeps (names from `metrics::METRICS`); None: absent.
    pub fn metrics(&self) -> [(&'static str, Option<f64>); 2] {
        [
            (
                "gpu_peak_memory_bytes",
                self.tree_peak_memory_bytes.map(|b| b as f64),
            ),
            ("gpu_energy_joules", self.energy_joules),
        ]
    }

    /// Lines for the printed summary, aligned with `summary::format_summary`'s; none for
    /// `--gpu off`.
    pub fn format_lines(&self) -> Vec<String> {
        match self.status {
            GpuState::Off => Vec::new(),
            GpuState::Unavailable => vec![format!(
                "  GPU                  unavailable ({})",
                self.reason.as_deref().unwrap_or("unknown reason")
            )],
            GpuState::Monitored => {
                let mut lines: Vec<String> = self
                    .devices
                    .iter()
                    .map(|d| {
                        let mut parts = Vec::new();
                        if let (Some(mean), Some(max)) = (
                            d.utilization_gpu_mean_percent,
                            d.utilization_gpu_max_percent,
                        ) {
                            parts.push(format!("busy {mean:.1}% mean, {max:.0}% max"));
                        }
                        if let Some(used) = d.memory_used_max_bytes {
                            parts.push(format!("memory {} max", format_bytes(used)));
                        }
                        if let Some(joules) = d.energy_joules {
                            parts.push(format!("{joules:.1} J"));
                        }
                        format!(
                            "  {:<20} {}: {}",
                            format!("GPU {}", d.index),
                            d.name.as_deref().unwrap_or("unnamed GPU"),
                            if parts.is_empty() {
                                "no figures".to_owned()
                            } else {
                                parts.join(", ")
                            }
                        )
                    })
                    .collect();
                lines.push(format!(
                    "  GPU memory, tree     {}",
                    self.tree_peak_memory_bytes
                        .map_or("n/a".to_owned(), |b| format!("{} peak", format_bytes(b)))
                ));
                if self.devices.len() > 1 {
                    if let Some(joules) = self.energy_joules {
                        lines.push(format!("  GPU energy, all      {joules:.1} J"));
                    }
                }
                lines
            }
        }
    }
}

/// A fake GPU for tests: what each query answers is plain data the test sets, shared with the
/// monitor through an `Rc`, so the test can change it between sweeps.
#[cfg(test)]
pub mod fake {
    use super::*;
    use std::cell::RefCell;
    use std::rc::Rc;

    #[derive(Clone, Debug, Default)]
    pub struct FakeDevice {
        pub info: GpuDevice,
        pub reading: DeviceReading,
        /// None: cannot list processes.
        pub processes: Option<Vec<GpuProcess>>,
        /// None: no per-process utilization; the backend filters by `since_us` like the driver.
        pub utilization: Option<Vec<ProcessUtilization>>,
        pub accounting: bool,
        pub accounting_stats: HashMap<u32, AccountingReading>,
    }

    /// Cloning shares the devices.
    #[derive(Clone, Debug, Default)]
    pub struct FakeBackend {
        pub devices: Rc<RefCell<Vec<FakeDevice>>>,
        /// Err: what `devices()` answers.
        pub failure: Option<GpuError>,
        /// The `since_us` of each process_utilization call, for the tests to check.
        pub utilization_queries: Rc<RefCell<Vec<Option<u64>>>>,
    }

    impl FakeBackend {
        pub fn new(devices: Vec<FakeDevice>) -> FakeBackend {
            FakeBackend {
                devices: Rc::new(RefCell::new(devices)),
                ..Default::default()
            }
        }

        pub fn boxed(&self) -> Box<dyn GpuBackend> {
            Box::new(self.clone())
        }

        fn with<T>(&self, index: u32, f: impl FnOnce(&FakeDevice) -> T) -> Option<T> {
            self.devices
                .borrow()
                .iter()
                .find(|d| d.info.index == index)
                .map(f)
        }
    }

    impl GpuBackend for FakeBackend {
        fn devices(&self) -> Result<Vec<GpuDevice>, GpuError> {
            match &self.failure {
                Some(err) => Err(err.clone()),
                None => Ok(self
                    .devices
                    .borrow()
                    .iter()
                    .map(|d| d.info.clone())
                    .collect()),
            }
        }

        fn reading(&self, index: u32) -> DeviceReading {
            self.with(index, |d| d.reading.clone()).unwrap_or_default()
        }

        fn processes(&self, index: u32) -> Option<Vec<GpuProcess>> {
            self.with(index, |d| d.processes.clone()).flatten()
        }

        fn process_utilization(
            &self,
            index: u32,
            since_us: Option<u64>,
        ) -> Option<Vec<ProcessUtilization>> {
            self.utilization_queries.borrow_mut().push(since_us);
            let samples = self.with(index, |d| d.utilization.clone()).flatten()?;
            let since = since_us.unwrap_or(0);
            Some(
                samples
                    .into_iter()
                    .filter(|s| s.timestamp_us > since)
                    .collect(),
            )
        }

        fn accounting_enabled(&self, index: u32) -> bool {
            self.with(index, |d| d.accounting).unwrap_or(false)
        }

        fn accounting_pids(&self, index: u32) -> Option<Vec<u32>> {
            self.with(index, |d| {
                d.accounting
                    .then(|| d.accounting_stats.keys().copied().collect())
            })
            .flatten()
        }

        fn accounting_stats(&self, index: u32, pid: u32) -> Option<AccountingReading> {
            self.with(index, |d| {
                d.accounting
                    .then(|| d.accounting_stats.get(&pid).copied())
                    .flatten()
            })
            .flatten()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{FakeBackend, FakeDevice};
    use super::*;

    const SEC: i64 = 1_000_000_000;
    /// 2023-11-14T22:13:20Z: the run's first sweep.
    const T0: i64 = 1_700_000_000 * SEC;

    fn h100(index: u32) -> GpuDevice {
        GpuDevice {
            index,
            uuid: Some(format!("GPU-0000000{index}-aaaa-bbbb-cccc-dddddddddddd")),
            name: Some("NVIDIA H100 80GB HBM3".into()),
            memory_total_bytes: Some(80 << 30),
        }
    }

    fn full_reading() -> DeviceReading {
        DeviceReading {
            utilization_gpu_percent: Some(90),
            utilization_memory_percent: Some(40),
            memory_used_bytes: Some(10 << 30),
            memory_total_bytes: Some(80 << 30),
            power_mw: Some(350_500),
            energy_mj: Some(5_000_000),
            temperature_c: Some(61),
            sm_clock_mhz: Some(1980),
            memory_clock_mhz: Some(2619),
            throttle_reasons: Some(0x4 | 0x40),
        }
    }

    fn device(index: u32) -> FakeDevice {
        FakeDevice {
            info: h100(index),
            reading: full_reading(),
            processes: Some(Vec::new()),
            utilization: Some(Vec::new()),
            ..Default::default()
        }
    }

    fn monitor(fake: &FakeBackend) -> GpuMonitor {
        GpuMonitor::new(fake.boxed()).unwrap()
    }

    fn holder(pid: u32, bytes: u64) -> GpuProcess {
        GpuProcess {
            pid,
            used_memory_bytes: Some(bytes),
        }
    }

    fn util(pid: u32, time_ns: i64, sm: u32, memory: u32) -> ProcessUtilization {
        ProcessUtilization {
            pid,
            timestamp_us: (time_ns / 1000) as u64,
            sm_percent: sm,
            memory_percent: memory,
        }
    }

    /// The tracked processes: pid -> start time.
    fn tree(processes: &[(u32, i64)]) -> impl Fn(u32) -> Option<i64> + '_ {
        move |pid| processes.iter().find(|(p, _)| *p == pid).map(|(_, s)| *s)
    }

    #[test]
    fn a_sweep_reads_every_figure_of_every_gpu() {
        let fake = FakeBackend::new(vec![device(0), device(1)]);
        let mut gpus = monitor(&fake);
        let (rows, processes) = gpus.sample(T0, tree(&[]));
        assert!(processes.is_empty());
        assert_eq!(rows.len(), 2);
        assert_eq!(
            rows[0],
            GpuRecord {
                time_ns: T0,
                gpu_index: 0,
                uuid: Some("GPU-00000000-aaaa-bbbb-cccc-dddddddddddd".into()),
                name: Some("NVIDIA H100 80GB HBM3".into()),
                utilization_gpu_percent: Some(90.0),
                utilization_memory_percent: Some(40.0),
                memory_used_bytes: Some(10 << 30),
                memory_total_bytes: Some(80 << 30),
                power_watts: Some(350.5),
                // Relative to the first reading.
                energy_joules: Some(0.0),
                temperature_c: Some(61),
                sm_clock_mhz: Some(1980),
                memory_clock_mhz: Some(2619),
                throttle_reasons: Some(vec!["sw_power_cap".into(), "hw_thermal_slowdown".into()]),
            }
        );
        assert_eq!(rows[1].gpu_index, 1);

        // The counter goes on: 1234.5 J later.
        fake.devices.borrow_mut()[0].reading.energy_mj = Some(5_000_000 + 1_234_500);
        fake.devices.borrow_mut()[0].reading.utilization_gpu_percent = Some(30);
        let (rows, _) = gpus.sample(T0 + SEC, tree(&[]));
        assert_eq!(rows[0].energy_joules, Some(1234.5));
        assert_eq!(rows[1].energy_joules, Some(0.0));

        let summary = gpus.summary();
        assert_eq!(summary.status, GpuState::Monitored);
        assert_eq!(summary.energy_joules, Some(1234.5));
        let gpu0 = &summary.devices[0];
        assert_eq!(gpu0.samples, 2);
        assert_eq!(gpu0.utilization_gpu_mean_percent, Some(60.0));
        assert_eq!(gpu0.utilization_gpu_max_percent, Some(90.0));
        assert_eq!(gpu0.energy_joules, Some(1234.5));
        assert_eq!(gpu0.power_max_watts, Some(350.5));
        assert_eq!(gpu0.memory_used_max_bytes, Some(10 << 30));
        assert_eq!(gpu0.name.as_deref(), Some("NVIDIA H100 80GB HBM3"));
        assert_eq!(summary.devices[1].energy_joules, Some(0.0));
        // No GPU process at all: the tree held none.
        assert_eq!(summary.tree_peak_memory_bytes, Some(0));
    }

    #[test]
    fn what_a_gpu_does_not_support_is_null() {
        let mut bare = device(0);
        bare.info.uuid = None;
        bare.info.name = None;
        bare.info.memory_total_bytes = None;
        bare.reading = DeviceReading::default();
        bare.processes = None;
        bare.utilization = None;
        let fake = FakeBackend::new(vec![bare]);
        let mut gpus = monitor(&fake);
        let (rows, processes) = gpus.sample(T0, tree(&[(7, T0 - SEC)]));
        assert_eq!(
            rows,
            [GpuRecord {
                time_ns: T0,
                ..Default::default()
            }]
        );
        assert!(processes.is_empty());
        let summary = gpus.summary();
        assert_eq!(summary.energy_joules, None);
        assert_eq!(summary.tree_peak_memory_bytes, None);
        assert_eq!(summary.devices[0].utilization_gpu_mean_percent, None);
        assert_eq!(summary.devices[0].samples, 1);
        assert_eq!(gpus.last_tree_memory_bytes(), None);
        let json = serde_json::to_value(&summary).unwrap();
        assert_eq!(json["devices"][0]["energy_joules"], serde_json::Value::Null);

        // The row writes as nulls (every nullable column).
        let batch = crate::schema::gpu_batch(&rows).unwrap();
        for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
            assert_eq!(
                column.null_count() == 1,
                field.is_nullable(),
                "{}",
                field.name()
            );
        }
    }

    #[test]
    fn processes_are_attributed_only_to_the_tree() {
        let mut gpu0 = device(0);
        // 10: in the tree; 20: someone else's job; 30: in the tree, no memory figure.
        gpu0.processes = Some(vec![
            holder(10, 3 << 30),
            holder(20, 40 << 30),
            GpuProcess {
                pid: 30,
                used_memory_bytes: None,
            },
        ]);
        gpu0.utilization = Some(vec![
            util(10, T0 - SEC / 2, 80, 30),
            util(10, T0 - SEC / 4, 100, 50),
            util(20, T0 - SEC / 4, 99, 99),
        ]);
        let mut gpu1 = device(1);
        gpu1.processes = Some(vec![holder(10, 1 << 30)]);
        let fake = FakeBackend::new(vec![gpu0, gpu1]);
        let mut gpus = monitor(&fake);
        let started = [(10, T0 - 5 * SEC), (30, T0 - 5 * SEC)];

        let (_, rows) = gpus.sample(T0, tree(&started));
        assert_eq!(
            rows,
            [
                GpuProcessRecord {
                    time_ns: T0,
                    gpu_index: 0,
                    pid: 10,
                    start_time_ns: T0 - 5 * SEC,
                    source: GpuProcessSource::Sample,
                    gpu_memory_bytes: Some(3 << 30),
                    // The mean of its two samples.
                    sm_utilization_percent: Some(90.0),
                    memory_utilization_percent: Some(40.0),
                    ..Default::default()
                },
                GpuProcessRecord {
                    time_ns: T0,
                    gpu_index: 0,
                    pid: 30,
                    start_time_ns: T0 - 5 * SEC,
                    ..Default::default()
                },
                GpuProcessRecord {
                    time_ns: T0,
                    gpu_index: 1,
                    pid: 10,
                    start_time_ns: T0 - 5 * SEC,
                    gpu_memory_bytes: Some(1 << 30),
                    ..Default::default()
                },
            ]
        );
        assert!(rows.iter().all(|r| r.pid != 20));
        // The tree's memory is its own processes' on both GPUs, not pid 20's.
        assert_eq!(gpus.last_tree_memory_bytes(), Some(4 << 30));

        // The next sweep asks only for newer utilization samples, and gets none: null.
        fake.devices.borrow_mut()[0].processes = Some(vec![holder(10, 6 << 30)]);
        fake.devices.borrow_mut()[1].processes = Some(Vec::new());
        let (_, rows) = gpus.sample(T0 + SEC, tree(&started));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].gpu_memory_bytes, Some(6 << 30));
        assert_eq!(rows[0].sm_utilization_percent, None);
        let since = (T0 - SEC / 4) as u64 / 1000;
        assert_eq!(
            fake.utilization_queries.borrow()[2..],
            [Some(since), None],
            "GPU 0 asks from its newest sample, GPU 1 (none yet) for all"
        );

        fake.devices.borrow_mut()[0].processes = Some(vec![holder(10, 2 << 30)]);
        gpus.sample(T0 + 2 * SEC, tree(&started));
        let summary = gpus.summary();
        assert_eq!(summary.tree_peak_memory_bytes, Some(6 << 30));
        assert_eq!(
            summary.tree_peak_memory_time.as_deref(),
            Some("2023-11-14T22:13:21.000000Z")
        );
        assert_eq!(gpus.last_tree_memory_bytes(), Some(2 << 30));
        assert_eq!(
            summary.metrics()[0],
            ("gpu_peak_memory_bytes", Some((6u64 << 30) as f64))
        );
    }

    #[test]
    fn utilization_from_before_a_process_started_is_not_its() {
        let mut gpu = device(0);
        gpu.processes = Some(vec![holder(10, 1 << 30)]);
        // A sample of an earlier process that had pid 10, then one of ours.
        gpu.utilization = Some(vec![
            util(10, T0 - 3 * SEC, 100, 100),
            util(10, T0 - SEC / 2, 20, 10),
        ]);
        let fake = FakeBackend::new(vec![gpu]);
        let mut gpus = monitor(&fake);
        let (_, rows) = gpus.sample(T0, tree(&[(10, T0 - SEC)]));
        assert_eq!(rows[0].sm_utilization_percent, Some(20.0));
        assert_eq!(rows[0].memory_utilization_percent, Some(10.0));
    }

    #[test]
    fn a_process_with_both_contexts_is_one_row() {
        let merged = merge_processes(
            [
                holder(5, 100),
                holder(6, 7),
                GpuProcess {
                    pid: 5,
                    used_memory_bytes: None,
                },
            ]
            .into_iter(),
        );
        assert_eq!(merged, [holder(5, 100), holder(6, 7)]);
    }

    fn accounting_device(stats: &[(u32, AccountingReading)]) -> FakeDevice {
        FakeDevice {
            accounting: true,
            accounting_stats: stats.iter().copied().collect(),
            ..device(0)
        }
    }

    fn finished(start_ns: i64) -> AccountingReading {
        AccountingReading {
            gpu_utilization_percent: Some(75),
            memory_utilization_percent: Some(20),
            max_memory_bytes: Some(5 << 30),
            start_time_us: (start_ns / 1000) as u64,
            time_ms: 1500,
            is_running: false,
        }
    }

    #[test]
    fn an_exited_gpu_process_gets_its_accounting_figures() {
        let start = T0 - 10 * SEC;
        // 10 used the GPU; 11 did not (the driver has no figures for it).
        let fake = FakeBackend::new(vec![accounting_device(&[(10, finished(start + SEC))])]);
        let mut gpus = monitor(&fake);
        assert!(gpus.summary().devices[0].accounting_mode);
        gpus.on_exit(10, start, T0 - SEC / 2);
        gpus.on_exit(11, start, T0 - SEC / 2);
        let (_, rows) = gpus.sample(T0, tree(&[]));
        assert_eq!(
            rows,
            [GpuProcessRecord {
                time_ns: T0 - SEC / 2,
                gpu_index: 0,
                pid: 10,
                start_time_ns: start,
                source: GpuProcessSource::Accounting,
                max_gpu_memory_bytes: Some(5 << 30),
                lifetime_gpu_utilization_percent: Some(75.0),
                lifetime_memory_utilization_percent: Some(20.0),
                context_time_ns: Some(1_500_000_000),
                ..Default::default()
            }]
        );
        // Read once.
        assert!(gpus.sample(T0 + SEC, tree(&[])).1.is_empty());
        assert!(gpus.finish(T0 + 2 * SEC).is_empty());
    }

    #[test]
    fn accounting_waits_for_the_driver_to_close_the_context() {
        let start = T0 - 10 * SEC;
        let running = AccountingReading {
            is_running: true,
            time_ms: 0,
            ..finished(start + SEC)
        };
        let fake = FakeBackend::new(vec![accounting_device(&[(10, running), (12, running)])]);
        let mut gpus = monitor(&fake);
        gpus.on_exit(10, start, T0);
        gpus.on_exit(12, start, T0);
        assert!(gpus.sample(T0 + SEC / 5, tree(&[])).1.is_empty());
        // The driver closed 10's context; 12's stays open past the grace time.
        fake.devices.borrow_mut()[0]
            .accounting_stats
            .insert(10, finished(start + SEC));
        let (_, rows) = gpus.sample(T0 + SEC / 2, tree(&[]));
        assert_eq!(rows.len(), 1);
        assert_eq!(
            (rows[0].pid, rows[0].context_time_ns),
            (10, Some(1_500_000_000))
        );
        let (_, rows) = gpus.sample(T0 + ACCOUNTING_GRACE_NS, tree(&[]));
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].pid, 12);
        assert_eq!(rows[0].context_time_ns, None);
        assert_eq!(rows[0].max_gpu_memory_bytes, Some(5 << 30));

        // finish() takes what is there, at once.
        gpus.on_exit(12, start, T0 + 3 * SEC);
        assert_eq!(gpus.finish(T0 + 3 * SEC).len(), 1);
    }

    #[test]
    fn accounting_of_an_earlier_process_with_the_same_pid_is_not_taken() {
        let start = T0 - 10 * SEC;
        let fake = FakeBackend::new(vec![accounting_device(&[(10, finished(start - 60 * SEC))])]);
        let mut gpus = monitor(&fake);
        gpus.on_exit(10, start, T0);
        assert!(gpus.sample(T0 + SEC, tree(&[])).1.is_empty());
    }

    #[test]
    fn without_accounting_mode_an_exit_costs_nothing() {
        let mut gpu = device(0);
        gpu.accounting_stats.insert(10, finished(T0));
        let fake = FakeBackend::new(vec![gpu]);
        let mut gpus = monitor(&fake);
        gpus.on_exit(10, T0 - SEC, T0);
        assert!(gpus.pending.is_empty());
        assert!(gpus.finish(T0).is_empty());
    }

    #[test]
    fn reset_starts_a_new_run() {
        let mut gpu = device(0);
        gpu.processes = Some(vec![holder(1, 100)]);
        let fake = FakeBackend::new(vec![gpu]);
        let mut gpus = monitor(&fake);
        gpus.sample(T0, tree(&[(1, T0 - SEC)]));
        fake.devices.borrow_mut()[0].reading.energy_mj = Some(6_000_000);
        gpus.sample(T0 + SEC, tree(&[(1, T0 - SEC)]));
        assert_eq!(gpus.summary().energy_joules, Some(1000.0));
        gpus.reset();
        let summary = gpus.summary();
        assert_eq!(summary.energy_joules, None);
        assert_eq!(summary.tree_peak_memory_bytes, None);
        assert_eq!(summary.devices[0].samples, 0);
        // The energy baseline is taken again.
        let (rows, _) = gpus.sample(T0 + 2 * SEC, tree(&[]));
        assert_eq!(rows[0].energy_joules, Some(0.0));
    }

    fn unavailable(reason: &str) -> impl FnOnce() -> Result<Box<dyn GpuBackend>, GpuError> + '_ {
        move || {
            Err(GpuError::Unavailable {
                reason: reason.into(),
            })
        }
    }

    #[test]
    fn auto_without_a_gpu_goes_on_and_says_why() {
        let status = GpuMonitor::open_with(GpuMode::Auto, unavailable("no driver")).unwrap();
        assert_eq!(
            status.notice().as_deref(),
            Some("montrace: no GPU data: no driver")
        );
        let summary = status.summary();
        assert_eq!(
            serde_json::to_value(&summary).unwrap(),
            serde_json::json!({
                "status": "unavailable",
                "reason": "no driver",
                "devices": [],
                "tree_peak_memory_bytes": null,
                "tree_peak_memory_time": null,
                "energy_joules": null,
            })
        );
        assert_eq!(
            summary.metrics(),
            [("gpu_peak_memory_bytes", None), ("gpu_energy_joules", None)]
        );
        assert_eq!(
            summary.format_lines(),
            ["  GPU                  unavailable (no driver)"]
        );
    }

    #[test]
    fn require_without_a_gpu_fails() {
        let err = GpuMonitor::open_with(GpuMode::Require, unavailable("no driver")).unwrap_err();
        assert_eq!(
            err,
            GpuError::Required {
                reason: "no driver".into()
            }
        );
        let message = err.to_string();
        assert!(
            message.starts_with("--gpu require: no GPU can be monitored: no driver."),
            "{message}"
        );
        assert!(message.contains("--gpu auto"), "{message}");
    }

    #[test]
    fn a_driver_without_devices_is_no_gpu() {
        let none = FakeBackend::new(Vec::new());
        let status = GpuMonitor::open_with(GpuMode::Auto, || Ok(none.boxed())).unwrap();
        let GpuStatus::Unavailable { reason } = status else {
            panic!("{status:?}");
        };
        assert!(reason.contains("no GPU"), "{reason}");
        assert!(GpuMonitor::open_with(GpuMode::Require, || Ok(none.boxed())).is_err());

        let mut failing = FakeBackend::new(Vec::new());
        failing.failure = Some(GpuError::Unavailable {
            reason: "NVML cannot open any GPU".into(),
        });
        let err = GpuMonitor::open_with(GpuMode::Require, || Ok(failing.boxed())).unwrap_err();
        assert_eq!(err.reason(), "NVML cannot open any GPU");
    }

    #[test]
    fn off_does_not_look_for_a_gpu() {
        let status = GpuMonitor::open_with(GpuMode::Off, || panic!("NVML started")).unwrap();
        assert!(matches!(status, GpuStatus::Off));
        assert_eq!(status.notice(), None);
        assert_eq!(status.summary().status, GpuState::Off);
        assert!(status.summary().format_lines().is_empty());
    }

    #[test]
    fn with_a_gpu_auto_and_require_monitor_it() {
        let fake = FakeBackend::new(vec![device(0)]);
        for mode in [GpuMode::Auto, GpuMode::Require] {
            let mut status = GpuMonitor::open_with(mode, || Ok(fake.boxed())).unwrap();
            assert_eq!(status.notice(), None);
            let gpus = status.monitor_mut().unwrap();
            assert_eq!(gpus.devices(), [&h100(0)]);
        }
    }

    /// The driver library cannot be loaded: the reason names it (a name that exists nowhere,
    /// so this holds on machines with a GPU too).
    #[test]
    fn a_missing_driver_library_is_named() {
        let err = NvmlBackend::init_from(Some(OsStr::new("libnvidia-ml-montrace-test.so.1")))
            .err()
            .unwrap();
        let reason = err.reason();
        assert!(reason.starts_with("no NVIDIA driver library ("), "{reason}");
        assert!(
            reason.contains("libnvidia-ml-montrace-test.so.1"),
            "{reason}"
        );
    }

    /// On a machine without the NVIDIA driver (ours), `auto` goes on and `require` fails, both
    /// naming the missing library. Where NVML starts, it must find a GPU.
    #[test]
    fn the_real_nvml_without_a_driver() {
        match NvmlBackend::init() {
            Err(err) => {
                let reason = err.reason().to_owned();
                if !reason.contains("driver is not loaded") {
                    assert!(reason.contains("libnvidia-ml.so.1"), "{reason}");
                }
                let status = GpuMonitor::open(GpuMode::Auto).unwrap();
                assert_eq!(
                    status.notice(),
                    Some(format!("montrace: no GPU data: {reason}"))
                );
                let err = GpuMonitor::open(GpuMode::Require).unwrap_err();
                assert_eq!(err, GpuError::Required { reason });
                assert_eq!(nvml_device_count(), None);
            }
            Ok(_) => eprintln!("NVML is here: the real-NVML test covers it"),
        }
    }

    #[test]
    fn throttle_reasons_have_names() {
        use nvml_wrapper::bitmasks::device::ThrottleReasons as R;
        assert_eq!(throttle_reason_names(0), Vec::<String>::new());
        assert_eq!(throttle_reason_names(0x1 | 0x1000), ["gpu_idle", "0x1000"]);
        // Our table has NVML's bits.
        for (flag, name) in [
            (R::GPU_IDLE, "gpu_idle"),
            (
                R::APPLICATIONS_CLOCKS_SETTING,
                "applications_clocks_setting",
            ),
            (R::SW_POWER_CAP, "sw_power_cap"),
            (R::HW_SLOWDOWN, "hw_slowdown"),
            (R::SYNC_BOOST, "sync_boost"),
            (R::SW_THERMAL_SLOWDOWN, "sw_thermal_slowdown"),
            (R::HW_THERMAL_SLOWDOWN, "hw_thermal_slowdown"),
            (R::HW_POWER_BRAKE_SLOWDOWN, "hw_power_brake_slowdown"),
            (R::DISPLAY_CLOCK_SETTING, "display_clock_setting"),
        ] {
            assert_eq!(throttle_reason_names(flag.bits()), [name]);
        }
    }

    #[test]
    fn summary_lines() {
        let fake = FakeBackend::new(vec![device(0)]);
        let mut gpus = monitor(&fake);
        gpus.sample(T0, tree(&[]));
        assert_eq!(
            gpus.summary().format_lines(),
            [
                "  GPU 0                NVIDIA H100 80GB HBM3: busy 90.0% mean, 90% max, memory 10.0 GiB max, 0.0 J",
                "  GPU memory, tree     0 B peak",
            ]
        );
    }

    /// The real NVML on a real GPU (`cargo xtask test` runs it where `nvidia-smi -L` lists one).
    #[test]
    #[ignore = "needs an NVIDIA GPU: run by cargo xtask test when NVML finds one"]
    fn real_nvml_samples_a_gpu() {
        let backend = NvmlBackend::init().expect("NVML starts");
        let devices = backend.devices().expect("NVML lists the GPUs");
        assert!(!devices.is_empty(), "NVML found no GPU");
        for d in &devices {
            eprintln!(
                "GPU {}: {:?} {:?} {:?}",
                d.index, d.name, d.uuid, d.memory_total_bytes
            );
            assert!(
                d.uuid
                    .as_deref()
                    .is_some_and(|u| u.starts_with("GPU-") || u.starts_with("MIG-")),
                "{d:?}"
            );
            assert!(d.name.as_deref().is_some_and(|n| !n.is_empty()), "{d:?}");
        }
        let mut status = GpuMonitor::open(GpuMode::Require).expect("--gpu require works here");
        let gpus = status.monitor_mut().unwrap();
        let now = crate::host::realtime_ns();
        let me = std::process::id();
        let (rows, processes) = gpus.sample(now, |pid| (pid == me).then_some(0));
        std::thread::sleep(std::time::Duration::from_millis(200));
        let (rows2, _) = gpus.sample(now + 200_000_000, |_| None);
        assert_eq!(rows.len(), devices.len());
        for (row, later) in rows.iter().zip(&rows2) {
            eprintln!("{row:?}");
            assert_eq!(row.time_ns, now);
            let total = row.memory_total_bytes.expect("every GPU gives its memory");
            assert!(total >= 1 << 30, "{row:?}");
            let used = row
                .memory_used_bytes
                .expect("every GPU gives its memory use");
            assert!(used <= total, "{row:?}");
            if let Some(u) = row.utilization_gpu_percent {
                assert!((0.0..=100.0).contains(&u), "{row:?}");
            }
            if let Some(w) = row.power_watts {
                assert!(w > 1.0 && w < 2000.0, "{row:?}");
            }
            if let Some(t) = row.temperature_c {
                assert!(t > 0 && t < 120, "{row:?}");
            }
            if let Some(mhz) = row.sm_clock_mhz {
                assert!(mhz < 5000, "{row:?}");
            }
            assert_eq!(
                row.energy_joules.map(|e| e == 0.0),
                row.energy_joules.map(|_| true)
            );
            if let (Some(_), Some(later)) = (row.energy_joules, later.energy_joules) {
                assert!((0.0..1000.0).contains(&later), "{later:?}");
            }
        }
        // This test holds no GPU context, so it is on no GPU.
        assert!(processes.is_empty(), "{processes:?}");
        eprintln!("{}", gpus.summary().format_lines().join("\n"));
    }
}
