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

use crate::store::records::{GpuProcessRecord, GpuProcessSource, GpuRecord};
use crate::units::{format_bytes, rfc3339};

/// `--gpu`: NVIDIA GPU monitoring through NVML.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum GpuMode {
    /// Monitor GPUs when the NVIDIA driver and a device are there; say why not otherwise.
    Auto,
    Off,
    /// Fail before starting the command when no GPU can be monitored.
    Require,
}

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
    /// MIG mode is on: the GPU is split into instances, and NVML gives no utilization for the
    /// whole GPU (nor, without privileges, the memory of each process). None: the GPU has no MIG.
    pub mig_mode: Option<bool>,
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
    /// The driver said the GPU is lost (`NVML_ERROR_GPU_IS_LOST`: it fell off the bus, or
    /// needs a reset): the figures are None, and the GPU will not answer again.
    pub lost: bool,
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
/// can fail; every other query answers None (or false) for what the GPU does not give. `Send`:
/// a run opens it on a thread beside its start-up (`follow::end::GpuOpening`).
pub trait GpuBackend: Send {
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

mod monitor;
mod nvml;
mod summary;

#[cfg(test)]
pub mod fake;
#[cfg(test)]
mod tests;

pub use monitor::GpuMonitor;
pub use nvml::*;
pub use summary::*;

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
    /// The line to print once GPU monitoring is opened (before the command starts; with `--gpu
    /// auto`, as soon as it has opened beside the start-up): why there is no GPU data (`auto`) on
    /// a machine that seems to have NVIDIA GPUs (the driver library is there). A machine without
    /// the driver gets no line on every run: run.json's `gpu.reason` and `montrace doctor` say it.
    pub fn notice(&self) -> Option<String> {
        match self {
            GpuStatus::Unavailable { reason } if reason.starts_with(nvml::NO_DRIVER_LIBRARY) => {
                None
            }
            GpuStatus::Unavailable { reason } => Some(format!("montrace: no GPU data: {reason}")),
            GpuStatus::Monitoring(monitor) => monitor
                .attribution_unavailable()
                .map(|why| format!("montrace: GPU processes not attributed: {why}")),
            GpuStatus::Off => None,
        }
    }

    /// Why the tree's GPU memory cannot be watched (for `--limit gpu-mem`): no GPU is
    /// monitored, or its processes cannot be attributed. None when it can.
    pub fn tree_memory_unavailable_reason(&self) -> Option<String> {
        match self {
            GpuStatus::Monitoring(monitor) => monitor.attribution_unavailable().map(str::to_owned),
            other => other.unavailable_reason(),
        }
    }

    /// Why no GPU is monitored; None when one is.
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
