//! `--limit`: resource limits that stop the run when the tree crosses them. Parsing and the
//! check are pure; `run` feeds the current usage in and stops the tree on a breach.
use std::time::Duration;

use crate::units;

/// One `--limit KEY=VALUE`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Limit {
    /// Resident memory of the whole tree (sum over its live processes at a sample), bytes.
    Rss(u64),
    /// CPU time of the whole tree (user + system, exited and live processes).
    Cpu(Duration),
    /// Wall time since the start.
    Wall(Duration),
    /// Processes started, the command included.
    Procs(u64),
    /// GPU memory the tree's processes hold (sum over every GPU at a sample), bytes. Needs GPU
    /// monitoring: `run` refuses it up front where no GPU can be monitored.
    GpuMem(u64),
}

impl Limit {
    pub fn name(&self) -> &'static str {
        match self {
            Limit::Rss(_) => "rss",
            Limit::Cpu(_) => "cpu",
            Limit::Wall(_) => "wall",
            Limit::Procs(_) => "procs",
            Limit::GpuMem(_) => "gpu-mem",
        }
    }

    /// The threshold in the unit reported (bytes, seconds, processes).
    pub fn threshold(&self) -> f64 {
        match *self {
            Limit::Rss(bytes) | Limit::GpuMem(bytes) => bytes as f64,
            Limit::Cpu(d) | Limit::Wall(d) => d.as_secs_f64(),
            Limit::Procs(n) => n as f64,
        }
    }
}

/// Parses `rss=2GiB`, `cpu=60s`, `wall=5m`, `procs=500`, `gpu-mem=10GiB`.
pub fn parse_limit(text: &str) -> Result<Limit, String> {
    let (key, value) = text.split_once('=').ok_or_else(|| {
        format!(
            "`{text}` is not a limit: use KEY=VALUE, e.g. rss=2GiB, cpu=60s, wall=5m, procs=500, \
             gpu-mem=10GiB"
        )
    })?;
    let limit = match key.trim() {
        "rss" => Limit::Rss(units::parse_bytes(value)?),
        "cpu" => Limit::Cpu(units::parse_duration(value)?),
        "wall" => Limit::Wall(units::parse_duration(value)?),
        "procs" => Limit::Procs(
            value
                .trim()
                .parse()
                .map_err(|_| format!("procs={value}: use a whole number of processes"))?,
        ),
        "gpu-mem" => Limit::GpuMem(units::parse_bytes(value)?),
        other => {
            return Err(format!(
                "unknown limit `{other}`: use rss, cpu, wall, procs or gpu-mem"
            ))
        }
    };
    if limit.threshold() <= 0.0 {
        return Err(format!("`{text}`: a limit must be greater than zero"));
    }
    Ok(limit)
}

/// The tree's usage at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Usage {
    /// Sum of RSS over the live processes at the last sample; None before the first sample.
    pub tree_rss_bytes: Option<u64>,
    pub tree_cpu_ns: u64,
    pub processes_started: u64,
    pub elapsed: Duration,
    /// GPU memory of the tree's processes at the last GPU sample; None before it, or without
    /// GPU monitoring.
    pub tree_gpu_memory_bytes: Option<u64>,
}

/// The limit that needs GPU monitoring (gpu-mem), if any.
pub fn gpu_limit(limits: &[Limit]) -> Option<&Limit> {
    limits.iter().find(|l| matches!(l, Limit::GpuMem(_)))
}

/// Why `limits` cannot be enforced without GPU monitoring (`reason`: why there is none), as the
/// error to print; None when no limit needs a GPU.
pub fn needs_gpu(limits: &[Limit], reason: &str) -> Option<String> {
    let limit = gpu_limit(limits)?;
    Some(format!(
        "--limit gpu-mem={}: montrace cannot watch GPU memory here ({reason}); run where NVML \
         sees an NVIDIA GPU, or drop the limit",
        units::format_bytes(limit.threshold() as u64)
    ))
}

/// The first limit `usage` exceeds, with the value seen.
pub fn first_breach(limits: &[Limit], usage: &Usage) -> Option<(Limit, f64)> {
    limits.iter().find_map(|limit| {
        let value = match *limit {
            Limit::Rss(max) => usage.tree_rss_bytes.filter(|&rss| rss > max)? as f64,
            Limit::Cpu(max) => (usage.tree_cpu_ns > max.as_nanos() as u64)
                .then_some(usage.tree_cpu_ns as f64 / 1e9)?,
            Limit::Wall(max) => (usage.elapsed > max).then_some(usage.elapsed.as_secs_f64())?,
            Limit::Procs(max) => {
                (usage.processes_started > max).then_some(usage.processes_started as f64)?
            }
            Limit::GpuMem(max) => usage.tree_gpu_memory_bytes.filter(|&used| used > max)? as f64,
        };
        Some((*limit, value))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_each_kind() {
        assert_eq!(parse_limit("rss=100MiB").unwrap(), Limit::Rss(100 << 20));
        assert_eq!(
            parse_limit("cpu=60s").unwrap(),
            Limit::Cpu(Duration::from_secs(60))
        );
        assert_eq!(
            parse_limit("wall=5m").unwrap(),
            Limit::Wall(Duration::from_secs(300))
        );
        assert_eq!(parse_limit("procs=500").unwrap(), Limit::Procs(500));
        assert!(parse_limit("rss").unwrap_err().contains("KEY=VALUE"));
        assert!(parse_limit("heat=9").unwrap_err().contains("unknown limit"));
        assert!(parse_limit("procs=many")
            .unwrap_err()
            .contains("whole number"));
        assert!(parse_limit("cpu=0s")
            .unwrap_err()
            .contains("greater than zero"));
        assert_eq!(parse_limit("gpu-mem=1GiB").unwrap(), Limit::GpuMem(1 << 30));
        assert_eq!(parse_limit("gpu-mem=1GiB").unwrap().name(), "gpu-mem");
        assert!(parse_limit("gpu-mem=lots").is_err());
    }

    #[test]
    fn only_gpu_mem_needs_a_gpu() {
        assert_eq!(
            needs_gpu(&[Limit::Rss(1), Limit::Procs(2)], "no driver"),
            None
        );
        let error = needs_gpu(&[Limit::Rss(1), Limit::GpuMem(10 << 30)], "no driver").unwrap();
        assert!(error.contains("gpu-mem=10.0 GiB"), "{error}");
        assert!(error.contains("(no driver)"), "{error}");
        assert!(error.contains("drop the limit"), "{error}");
    }

    #[test]
    fn finds_the_first_limit_crossed() {
        let limits = [
            Limit::Rss(100),
            Limit::Cpu(Duration::from_secs(1)),
            Limit::Procs(3),
        ];
        let mut usage = Usage {
            tree_rss_bytes: Some(100),
            tree_cpu_ns: 1_000_000_000,
            processes_started: 3,
            elapsed: Duration::from_secs(9),
            tree_gpu_memory_bytes: None,
        };
        // At the limit is not over it.
        assert_eq!(first_breach(&limits, &usage), None);
        usage.processes_started = 4;
        assert_eq!(first_breach(&limits, &usage), Some((Limit::Procs(3), 4.0)));
        usage.tree_rss_bytes = Some(150);
        assert_eq!(
            first_breach(&limits, &usage),
            Some((Limit::Rss(100), 150.0))
        );
        usage.tree_rss_bytes = None;
        usage.tree_cpu_ns = 1_500_000_000;
        assert_eq!(
            first_breach(&limits, &usage),
            Some((Limit::Cpu(Duration::from_secs(1)), 1.5))
        );
        assert_eq!(
            first_breach(&[Limit::Wall(Duration::from_secs(5))], &usage),
            Some((Limit::Wall(Duration::from_secs(5)), 9.0))
        );
        // GPU memory: unknown (before the first GPU sample) is not over; at the limit is not.
        let gpu = [Limit::GpuMem(1 << 30)];
        assert_eq!(first_breach(&gpu, &usage), None);
        usage.tree_gpu_memory_bytes = Some(1 << 30);
        assert_eq!(first_breach(&gpu, &usage), None);
        usage.tree_gpu_memory_bytes = Some(3 << 29);
        assert_eq!(
            first_breach(&gpu, &usage),
            Some((Limit::GpuMem(1 << 30), (3u64 << 29) as f64))
        );
    }
}
