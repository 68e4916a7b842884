//! `gpu` in run.json and the printed summary.
use super::*;

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

impl GpuSummary {
    /// What run.json of a montrace from before GPU monitoring says: GPUs were not watched.
    pub fn not_recorded() -> GpuSummary {
        GpuSummary::not_monitored(GpuState::Off, None)
    }

    pub(super) fn not_monitored(status: GpuState, reason: Option<String>) -> GpuSummary {
        GpuSummary {
            status,
            reason,
            devices: Vec::new(),
            tree_peak_memory_bytes: None,
            tree_peak_memory_time: None,
            attribution_unavailable: None,
            energy_joules: None,
        }
    }

    /// The figures summary.json keeps (names from `summary_json::METRICS`); None: absent.
    pub fn metrics(&self) -> [(&'static str, Option<f64>); 2] {
        [
            (
                "gpu_peak_memory_bytes",
                self.tree_peak_memory_bytes.map(|b| b as f64),
            ),
            ("gpu_energy_joules", self.energy_joules),
        ]
    }

    /// Lines for the printed summary, aligned with `run_json::format_summary`'s; none for
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
                        if d.mig_mode == Some(true) {
                            parts.push("MIG mode".to_owned());
                        }
                        if let Some(time) = &d.lost_time {
                            parts.push(format!("lost at {time}, not sampled since"));
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
                    match (&self.attribution_unavailable, self.tree_peak_memory_bytes) {
                        (Some(_), _) =>
                            "not attributed (see run.json gpu.attribution_unavailable)".to_owned(),
                        (None, Some(b)) => format!("{} peak", format_bytes(b)),
                        (None, None) => "n/a".to_owned(),
                    }
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
