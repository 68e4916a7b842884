//! summary.json: the figures of one run (or of each repetition of a command) that CI gates
//! compare. One table of metric definitions is the source of truth for their names, units and
//! direction; pure functions build and aggregate them.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// Version of summary.json's layout.
pub const SUMMARY_VERSION: u32 = 1;
pub const SUMMARY_FILE: &str = "summary.json";

/// A metric CI gates can compare. Every resource metric is "lower is better". `unit`: "s", "B",
/// "J", "share" (0 to 1), or "" (a count).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MetricDef {
    pub name: &'static str,
    pub unit: &'static str,
    pub description: &'static str,
}

/// Every metric summary.json may hold, in display order.
pub const METRICS: &[MetricDef] = &[
    MetricDef {
        name: "wall_s",
        unit: "s",
        description: "wall time from start to the end of the tree",
    },
    MetricDef {
        name: "cpu_s",
        unit: "s",
        description: "CPU time of the whole tree, user + system: the exit figures of the processes that ended (run.json `totals` keeps the sampled CPU of the others apart)",
    },
    MetricDef {
        name: "cpu_user_s",
        unit: "s",
        description: "user CPU time of the whole tree",
    },
    MetricDef {
        name: "cpu_system_s",
        unit: "s",
        description: "system CPU time of the whole tree",
    },
    MetricDef {
        name: "peak_rss_bytes",
        unit: "B",
        description: "largest RSS of a single process (exact, from exit events)",
    },
    MetricDef {
        name: "peak_tree_rss_bytes",
        unit: "B",
        description: "largest resident memory of the whole tree at one sweep, each memory image once (run.json `tree_memory_peaks.rss_bytes`; its `source` says how it is counted)",
    },
    MetricDef {
        name: "peak_tree_uss_bytes",
        unit: "B",
        description: "largest sum of USS (private memory) over the tree's address spaces (samples)",
    },
    MetricDef {
        name: "peak_tree_pss_bytes",
        unit: "B",
        description: "largest sum of PSS over the tree's address spaces (samples)",
    },
    MetricDef {
        name: "processes",
        unit: "",
        description: "processes started",
    },
    MetricDef {
        name: "max_concurrent",
        unit: "",
        description: "most processes alive at once",
    },
    MetricDef {
        name: "read_bytes",
        unit: "B",
        description: "bytes read from storage by the tree",
    },
    MetricDef {
        name: "write_bytes",
        unit: "B",
        description: "bytes written to storage by the tree",
    },
    MetricDef {
        name: "critical_path_s",
        unit: "s",
        description: "the chain of processes that bounded the wall time, summed (run.json time)",
    },
    MetricDef {
        name: "avg_parallelism",
        unit: "",
        description: "processes running or waiting to run, on average over the wall time (higher is better; never gated)",
    },
    MetricDef {
        name: "serial_share",
        unit: "share",
        description: "share of the wall time (0 to 1) with at most one process of the tree on a CPU or runnable (run.json time; reported, not gated unless asked: `--max serial=+10%`)",
    },
    MetricDef {
        name: "gpu_peak_memory_bytes",
        unit: "B",
        description: "largest GPU memory held by the tree",
    },
    MetricDef {
        name: "gpu_energy_joules",
        unit: "J",
        description: "GPU energy used during the run",
    },
];

pub fn metric_def(name: &str) -> Option<&'static MetricDef> {
    METRICS.iter().find(|m| m.name == name)
}

/// One run's (or repetition's) figures. Metrics that do not apply (no GPU) are absent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Repetition {
    /// Sub-directory of the repetition (`rep-001`), or "." for a single run.
    pub run_dir: String,
    /// Its run.json `run_id`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub run_id: String,
    pub exit_status: i32,
    pub lost_events: u64,
    pub metrics: BTreeMap<String, f64>,
    /// Share of the machine's CPU (0..1 of all online CPUs) that other work — neither the tree
    /// nor montrace — used during the repetition; absent for a single run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub other_cpu_share: Option<f64>,
}

/// Spread of one metric over repetitions.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Stats {
    pub n: usize,
    pub mean: f64,
    pub median: f64,
    /// Sample standard deviation (n - 1); 0 for a single value.
    pub stddev: f64,
    pub min: f64,
    pub max: f64,
}

impl Stats {
    pub fn of(values: &[f64]) -> Option<Stats> {
        if values.is_empty() {
            return None;
        }
        let n = values.len();
        let mut sorted = values.to_vec();
        sorted.sort_by(f64::total_cmp);
        let mean = values.iter().sum::<f64>() / n as f64;
        let median = if n % 2 == 1 {
            sorted[n / 2]
        } else {
            (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
        };
        let stddev = if n > 1 {
            (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1) as f64).sqrt()
        } else {
            0.0
        };
        Some(Stats {
            n,
            mean,
            median,
            stddev,
            min: sorted[0],
            max: sorted[n - 1],
        })
    }
}

/// A limit that stopped the run (see `montrace run --limit`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LimitBreach {
    /// The limit as given: `rss`, `cpu`, `wall`, `procs`, `gpu-mem`.
    pub limit: String,
    /// The limit's value and the value seen, in the metric's unit (bytes, seconds, processes).
    pub threshold: f64,
    pub value: f64,
    /// When it was seen (RFC 3339, UTC), and seconds after the start.
    pub time: String,
    pub elapsed_s: f64,
}

/// summary.json.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    pub schema_version: u32,
    pub command: String,
    pub argv: Vec<String>,
    pub host: String,
    /// Exit status of the (last) repetition: what montrace exits with.
    pub exit_status: i32,
    pub lost_events: u64,
    pub limit_breach: Option<LimitBreach>,
    pub warmup: usize,
    pub repetitions: Vec<Repetition>,
    /// Per metric over the repetitions (warm-up runs excluded).
    pub stats: BTreeMap<String, Stats>,
    /// What makes the figures doubtful (repetitions much faster than the warm-up, under 5 ms,
    /// on a busy machine), each saying what to do; `compare` repeats them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
    /// The runs' `--label`s and context (run.json's, the same for every repetition).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::store::model::Context>,
}

impl Summary {
    pub fn new(
        command: String,
        argv: Vec<String>,
        host: String,
        warmup: usize,
        repetitions: Vec<Repetition>,
        limit_breach: Option<LimitBreach>,
    ) -> Summary {
        let mut stats = BTreeMap::new();
        for def in METRICS {
            let values: Vec<f64> = repetitions
                .iter()
                .filter_map(|r| r.metrics.get(def.name).copied())
                .collect();
            if let Some(s) = Stats::of(&values) {
                stats.insert(def.name.to_string(), s);
            }
        }
        Summary {
            schema_version: SUMMARY_VERSION,
            command,
            argv,
            host,
            exit_status: repetitions.last().map_or(0, |r| r.exit_status),
            lost_events: repetitions.iter().map(|r| r.lost_events).sum(),
            limit_breach,
            warmup,
            repetitions,
            stats,
            labels: BTreeMap::new(),
            context: None,
            warnings: Vec::new(),
        }
    }

    /// The values of one metric over the repetitions: what compare tests.
    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.repetitions
            .iter()
            .filter_map(|r| r.metrics.get(metric).copied())
            .collect()
    }
}

pub use crate::store::versioned::ReadError;

/// Reads a summary.json, typed (with the user's identity, see `userfs`): written by
/// [`Summary::new`] and `run`, read back by `compare`.
pub fn read(path: &std::path::Path) -> Result<Summary, ReadError> {
    let bytes = crate::store::userfs::as_user(|| std::fs::read(path));
    crate::store::versioned::parse(bytes, SUMMARY_FILE, SUMMARY_VERSION)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The metrics table of docs/schema.md, made from [`METRICS`].
    fn metrics_table() -> String {
        METRICS
            .iter()
            .map(|m| {
                let unit = match m.unit {
                    "" => "count",
                    "B" => "bytes",
                    "s" => "seconds",
                    "J" => "joules",
                    "share" => "share (0 to 1)",
                    other => other,
                };
                format!("| `{}` | {unit} | {} |\n", m.name, m.description)
            })
            .collect()
    }

    #[test]
    fn docs_list_every_metric_and_name_every_summary_field() {
        let doc = crate::store::doc_check::schema_doc();
        assert!(
            doc.contains(&metrics_table()),
            "docs/schema.md's metrics table differs from METRICS: make it\n{}",
            metrics_table()
        );
        let rep = Repetition {
            run_dir: "rep-001".into(),
            run_id: "20261124T095300Z-0000000000000001".into(),
            exit_status: 0,
            lost_events: 0,
            metrics: METRICS.iter().map(|m| (m.name.to_string(), 1.0)).collect(),
            other_cpu_share: Some(0.1),
        };
        let mut s = Summary::new(
            "x".into(),
            vec!["x".into()],
            "h".into(),
            1,
            vec![rep.clone(), rep],
            Some(LimitBreach {
                limit: "rss".into(),
                threshold: 1.0,
                value: 2.0,
                time: "t".into(),
                elapsed_s: 1.0,
            }),
        );
        s.warnings.push("w".into());
        s.context = Some(crate::fleet::context::full_example());
        s.labels.insert("branch".into(), "main".into());
        // Label keys are the user's and metric names the metrics table's, not fields.
        crate::store::doc_check::assert_documented(
            "summary.json",
            &serde_json::to_value(&s).unwrap(),
            &["labels", "stats", "repetitions[].metrics"],
        );
    }

    #[test]
    fn stats_of_values() {
        let s = Stats::of(&[3.0, 1.0, 2.0, 10.0]).unwrap();
        assert_eq!((s.n, s.median, s.min, s.max), (4, 2.5, 1.0, 10.0));
        assert_eq!(s.mean, 4.0);
        assert!((s.stddev - 4.0824829).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).unwrap().stddev, 0.0);
        assert!(Stats::of(&[]).is_none());
    }

    #[test]
    fn summary_aggregates_repetitions_and_round_trips() {
        let rep = |wall: f64, status: i32| Repetition {
            run_dir: "rep".into(),
            run_id: String::new(),
            exit_status: status,
            lost_events: 1,
            metrics: BTreeMap::from([("wall_s".to_string(), wall)]),
            other_cpu_share: None,
        };
        let s = Summary::new(
            "x".into(),
            vec!["x".into()],
            "h".into(),
            1,
            vec![rep(1.0, 0), rep(3.0, 2)],
            None,
        );
        assert_eq!((s.exit_status, s.lost_events), (2, 2));
        assert_eq!(s.stats["wall_s"].median, 2.0);
        assert!(!s.stats.contains_key("cpu_s"));
        assert_eq!(s.values("wall_s"), [1.0, 3.0]);
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(serde_json::from_str::<Summary>(&json).unwrap(), s);
    }

    #[test]
    fn metric_names_are_unique() {
        for (i, m) in METRICS.iter().enumerate() {
            assert!(
                METRICS[i + 1..].iter().all(|o| o.name != m.name),
                "{} twice",
                m.name
            );
            assert_eq!(metric_def(m.name), Some(m));
        }
    }
}
