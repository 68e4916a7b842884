//! `gpu` in run.json and the printed summary.
use super::*;
pub use crate::store::model::{GpuDeviceSummary, GpuState, GpuSummary};

impl GpuSummary {
    /// What run.json of a montrace from before GPU monitoring says: GPUs were not watched.
    pub fn not_recorded() -> GpuSummary {
        GpuSummary::not_monitored(GpuState::Off, None)
    }

    /// No GPU data, and why (`reason`).
    pub fn not_monitored(status: GpuState, reason: Option<String>) -> GpuSummary {
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
