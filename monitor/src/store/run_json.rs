//! run.json: its types ([`RunInfo`]), the pure functions that fill them from the run's records,
//! and the one [`read`] and [`write`] every reader and writer of the file goes through (the
//! version check of `summary_json::read`). The terminal summary made of it is
//! `follow::summary`'s.
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::store::model::{LostEvents, TrackingMode};
use crate::store::records::ProcessRecord;
use crate::units::rfc3339;

/// Version of run.json's layout (shared with the Parquet schema version).
pub const RUN_JSON_VERSION: u32 = crate::store::schema::SCHEMA_VERSION;

/// run.json's name in a run directory.
pub const RUN_JSON_FILE: &str = "run.json";

/// The run.json of the run directory `dir`.
pub fn path_in(dir: &Path) -> PathBuf {
    dir.join(RUN_JSON_FILE)
}

/// Whether `dir` holds a run.json (a finished run directory).
pub fn exists_in(dir: &Path) -> bool {
    path_in(dir).is_file()
}

pub use crate::store::versioned::ReadError;

/// Reads the run.json of the run directory `dir`, typed (with the user's identity and never
/// through a symlink, see `userfs::read`); fields an older montrace did not write read as their
/// defaults, a newer layout is refused.
pub fn read(dir: &Path) -> Result<RunInfo, ReadError> {
    let bytes = crate::store::userfs::read(&path_in(dir));
    crate::store::versioned::parse(bytes, RUN_JSON_FILE, RUN_JSON_VERSION)
}

/// Writes `info` as the run.json of `dir`, whole (`userfs::write_atomic`: a reader sees the old
/// file or the new one), synced. Returns the file's path.
pub fn write(dir: &Path, info: &RunInfo) -> std::io::Result<PathBuf> {
    write_with(dir, info, crate::store::Durability::Synced)
}

/// [`write`], synced or not: a run's own run.json (see [`crate::store::Durability`]).
pub fn write_with(
    dir: &Path,
    info: &RunInfo,
    durability: crate::store::Durability,
) -> std::io::Result<PathBuf> {
    let path = path_in(dir);
    let json = serde_json::to_string_pretty(info).map_err(std::io::Error::other)?;
    crate::store::userfs::write_atomic_with(&path, (json + "\n").as_bytes(), durability)?;
    Ok(path)
}

/// Totals over the whole tree, from the kernel's exit figures.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TreeTotals {
    /// CPU of the processes that ended, from their exit figures (exact).
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    /// Processes without exit figures (still running at the end, or whose exit was lost), and
    /// the CPU their samples show them using while they were recorded (their last sample; less
    /// their first for a process already running when the recording began, as with `attach`).
    /// Counted apart from `cpu_*_ns`: sampled, not exact.
    pub unfinished_processes: usize,
    pub unfinished_cpu_user_ns: u64,
    pub unfinished_cpu_system_ns: u64,
    /// The process with the largest peak RSS of its own.
    pub peak_rss_bytes: Option<u64>,
    pub peak_rss_pid: Option<u32>,
    pub peak_rss_comm: Option<String>,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub alive_at_end: usize,
}

impl TreeTotals {
    /// Adds one process (records are added as processes end, so the totals never need them all
    /// in memory at once).
    pub fn add(&mut self, p: &ProcessRecord) {
        self.cpu_user_ns += p.cpu_user_ns.unwrap_or(0);
        self.cpu_system_ns += p.cpu_system_ns.unwrap_or(0);
        self.read_bytes += p.read_bytes.unwrap_or(0);
        self.write_bytes += p.write_bytes.unwrap_or(0);
        self.alive_at_end += usize::from(p.alive_at_end);
        if let Some(peak) = p.peak_rss_bytes {
            if self.peak_rss_bytes.is_none_or(|best| peak > best) {
                self.peak_rss_bytes = Some(peak);
                self.peak_rss_pid = Some(p.pid);
                self.peak_rss_comm = Some(p.comm.clone());
            }
        }
    }

    /// A process without exit figures, which used `user` and `system` ns of CPU while recorded.
    pub fn add_unfinished(&mut self, user: u64, system: u64) {
        self.unfinished_processes += 1;
        self.unfinished_cpu_user_ns += user;
        self.unfinished_cpu_system_ns += system;
    }
}

pub fn tree_totals(processes: &[ProcessRecord]) -> TreeTotals {
    let mut t = TreeTotals::default();
    for p in processes {
        t.add(p);
    }
    t
}

/// Peaks of the whole tree's memory over time: the largest figure of one sweep, each memory
/// image counted once (`sampling::sampler::tree_memory`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TreeMemoryPeaks {
    /// The tree's resident memory as `source` counts it (what `--limit rss` checks).
    pub rss_bytes: Option<u64>,
    /// USS and PSS summed over the tree's address spaces.
    pub uss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    /// Where `rss_bytes` comes from: the run cgroup's accounting, PSS, or RSS summed over the
    /// tree's address spaces. None in runs of earlier versions (a plain sum of RSS over the
    /// processes, which counted a vfork child before its exec as a second copy of its parent).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<crate::store::model::TreeMemorySource>,
}

impl TreeMemoryPeaks {
    /// Folds in one sweep: the tree's figure by `source` and the sums over address spaces.
    pub fn add_sweep(
        &mut self,
        source: crate::store::model::TreeMemorySource,
        figure: Option<u64>,
        sums: &crate::store::model::SweepMemory,
    ) {
        fn fold(best: &mut Option<u64>, value: Option<u64>) {
            if let Some(v) = value {
                *best = Some(best.map_or(v, |b: u64| b.max(v)));
            }
        }
        fold(&mut self.rss_bytes, figure);
        fold(&mut self.uss_bytes, sums.uss);
        fold(&mut self.pss_bytes, sums.pss);
        if figure.is_some() {
            self.source = Some(source);
        }
    }
}

/// The run's own cgroup: the kernel's totals for the whole tree, and how much of them the
/// per-process figures account for.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CgroupReport {
    /// "v1" or "v2"; None when no cgroup could be made.
    pub version: Option<crate::store::model::CgroupVersion>,
    pub path: Option<String>,
    pub totals: Option<crate::store::model::CgroupTotals>,
    /// Per-process CPU (exit figures) summed over the tree / the cgroup's CPU usage.
    pub cpu_coverage: Option<f64>,
    /// Why there is no cgroup, or what went wrong reading or removing it.
    pub error: Option<String>,
    pub removed: bool,
    /// How the command came into it; None where it is not in one (no cgroup, or the move
    /// failed), and in runs of earlier versions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entered: Option<CgroupEntry>,
}

/// How the command came into the run cgroup, before its exec either way.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupEntry {
    /// Made there (`clone3` with `CLONE_INTO_CGROUP`, cgroup v2).
    AtClone,
    /// Forked where montrace is, then moved (its pid written to `cgroup.procs`): cgroup v1, or
    /// where the kernel refused clone3.
    Moved,
}

/// Everything run.json says about a run.
/// Written by `run` and `attach`, read back by `report` and `export` (fields an older montrace
/// did not write read as their defaults).
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct RunInfo {
    pub schema_version: u32,
    pub montrace_version: String,
    /// This run's id, unique across machines: its start (UTC) and 64 random bits
    /// (`20261124T095300Z-1f2e3d4c5b6a7988`). Empty in runs of earlier versions.
    #[serde(default)]
    pub run_id: String,
    /// `--label KEY=VALUE`s.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Where the run came from: host, kernel, CPU, memory, git checkout, CI job, Slurm job, pod.
    /// None in runs of earlier versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<crate::store::model::Context>,
    /// The command as one shell-like string, for people.
    pub command: String,
    pub argv: Vec<String>,
    /// The program that was executed (after PATH search).
    pub executable: String,
    pub start_time: String,
    pub end_time: String,
    /// montrace's whole run, set-up included.
    pub duration_s: f64,
    /// The command's own wall time: from its exec to the end of the tree (what `wall_s` in
    /// summary.json compares). None if it never exec'd.
    pub command_wall_s: Option<f64>,
    pub host: String,
    pub kernel: String,
    pub tracking_mode: TrackingMode,
    /// What this kernel gave the run, feature by feature (tree, exit figures, waits, socket
    /// bytes, task iterator, PSI, run cgroup), and why not where not (`kernel::features`).
    /// Empty in runs of earlier versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub features: Vec<crate::store::model::Feature>,
    /// Where the sweeps read each process's CPU, memory, faults and I/O: `"task_iter"`
    /// (montrace's task iterator, in binary) or `"procfs"` (/proc's text files). None in runs
    /// of earlier versions (/proc).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub samples_from: Option<String>,
    /// The command's status: exit code, or None when a signal killed it.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// What montrace itself exits with (exit code, or 128 + signal).
    pub exit_status: i32,
    pub lost_events: LostEvents,
    /// Processes whose exit event never arrived (found gone from /proc).
    pub vanished_processes: u64,
    pub processes_started: usize,
    pub max_concurrent: usize,
    pub totals: TreeTotals,
    /// Largest sums of the tree's memory over its samples.
    #[serde(default)]
    pub tree_memory_peaks: TreeMemoryPeaks,
    /// Samples of live processes taken, and the interval, ms.
    #[serde(default)]
    pub samples: u64,
    #[serde(default)]
    pub sample_interval_ms: f64,
    #[serde(default)]
    pub cgroup: CgroupReport,
    /// GPUs: monitored (devices, the tree's peak GPU memory, utilization, energy), or why not.
    #[serde(default = "crate::store::model::GpuSummary::not_recorded")]
    pub gpu: crate::store::model::GpuSummary,
    /// Time from montrace's start to the command's exec, ms.
    pub startup_ms: Option<f64>,
    /// Time to load and attach the eBPF programs, ms; None when polling.
    pub ebpf_load_ms: Option<f64>,
    pub uid: u32,
    pub gid: u32,
    /// Set when --linger ended the wait with descendants still running.
    #[serde(default)]
    pub linger_expired: bool,
    /// Signals montrace forwarded to the tree.
    #[serde(default)]
    pub signals_forwarded: Vec<i32>,
    /// The `--limit` that stopped the run, if one did.
    pub limit_breach: Option<crate::store::summary_json::LimitBreach>,
    pub out_dir: String,
    /// Marks the command sent over the budget (a rate and a total per run; docs/marks.md),
    /// counted and not recorded.
    #[serde(default)]
    pub marks_dropped: u64,
    /// Why recording stopped before the run ended (a full disk, a write error, an internal
    /// error): the tables hold what was written until then. None when the record is whole.
    pub recording_error: Option<String>,
    /// What 100 % of CPU and memory means for this run: a limited container's cgroup limits (or
    /// a narrower CPU affinity), else the host's CPUs and memory. None in runs before it.
    #[serde(default)]
    pub capacity: Option<crate::store::model::Capacity>,
    /// Where the command's wall time went: the critical path and the average parallelism.
    /// None in runs before it.
    #[serde(default)]
    pub time: Option<crate::store::model::TimeAnalysis>,
}

impl RunInfo {
    /// The figures summary.json keeps for this run (see `summary_json::METRICS`).
    pub fn repetition(&self, run_dir: &str) -> crate::store::summary_json::Repetition {
        let t = &self.totals;
        let mut metrics = std::collections::BTreeMap::new();
        let mut put = |name: &str, value: Option<f64>| {
            if let Some(value) = value {
                metrics.insert(name.to_string(), value);
            }
        };
        put(
            "wall_s",
            Some(self.command_wall_s.unwrap_or(self.duration_s)),
        );
        put(
            "cpu_s",
            Some((t.cpu_user_ns + t.cpu_system_ns) as f64 / 1e9),
        );
        put("cpu_user_s", Some(t.cpu_user_ns as f64 / 1e9));
        put("cpu_system_s", Some(t.cpu_system_ns as f64 / 1e9));
        put("peak_rss_bytes", t.peak_rss_bytes.map(|b| b as f64));
        put(
            "peak_tree_rss_bytes",
            self.tree_memory_peaks.rss_bytes.map(|b| b as f64),
        );
        put(
            "peak_tree_uss_bytes",
            self.tree_memory_peaks.uss_bytes.map(|b| b as f64),
        );
        put(
            "peak_tree_pss_bytes",
            self.tree_memory_peaks.pss_bytes.map(|b| b as f64),
        );
        put("processes", Some(self.processes_started as f64));
        put("max_concurrent", Some(self.max_concurrent as f64));
        put("read_bytes", Some(t.read_bytes as f64));
        put("write_bytes", Some(t.write_bytes as f64));
        if let Some(time) = &self.time {
            put("critical_path_s", Some(time.critical_path_s));
            put("avg_parallelism", Some(time.avg_parallelism));
            put("serial_share", time.serial_share);
        }
        for (name, value) in self.gpu.metrics() {
            put(name, value);
        }
        crate::store::summary_json::Repetition {
            run_dir: run_dir.to_string(),
            run_id: self.run_id.clone(),
            exit_status: self.exit_status,
            lost_events: self.lost_events.total(),
            metrics,
            other_cpu_share: None,
        }
    }

    pub fn new_times(start_ns: i64, end_ns: i64) -> (String, String, f64) {
        (
            rfc3339(start_ns),
            rfc3339(end_ns),
            (end_ns - start_ns) as f64 / 1e9,
        )
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn proc(pid: u32, user: u64, sys: u64, peak: Option<u64>, alive: bool) -> ProcessRecord {
        ProcessRecord {
            pid,
            comm: format!("p{pid}"),
            cpu_user_ns: (!alive).then_some(user),
            cpu_system_ns: (!alive).then_some(sys),
            peak_rss_bytes: peak,
            read_bytes: Some(10),
            alive_at_end: alive,
            ..ProcessRecord::default()
        }
    }

    #[test]
    fn totals_sum_the_tree_and_find_the_largest_process() {
        let t = tree_totals(&[
            proc(1, 100, 50, Some(1000), false),
            proc(2, 200, 25, Some(5000), false),
            proc(3, 7, 7, None, true),
        ]);
        assert_eq!((t.cpu_user_ns, t.cpu_system_ns), (300, 75));
        assert_eq!((t.peak_rss_bytes, t.peak_rss_pid), (Some(5000), Some(2)));
        assert_eq!(t.peak_rss_comm.as_deref(), Some("p2"));
        assert_eq!((t.read_bytes, t.alive_at_end), (30, 1));
    }

    #[test]
    fn tree_memory_peak_is_the_largest_sweep_figure_and_names_its_source() {
        use crate::sampling::sampler::tree_memory::{SweepMemory, TreeMemorySource};
        let sums = |uss: Option<u64>| SweepMemory {
            uss,
            ..Default::default()
        };
        let mut peaks = TreeMemoryPeaks::default();
        peaks.add_sweep(TreeMemorySource::Cgroup, Some(30), &sums(Some(5)));
        peaks.add_sweep(TreeMemorySource::Cgroup, Some(25), &sums(Some(1)));
        peaks.add_sweep(TreeMemorySource::Cgroup, None, &sums(None));
        assert_eq!(peaks.rss_bytes, Some(30));
        assert_eq!(peaks.uss_bytes, Some(5));
        assert_eq!(peaks.pss_bytes, None);
        assert_eq!(peaks.source, Some(TreeMemorySource::Cgroup));
        let json = serde_json::to_value(peaks).unwrap();
        assert_eq!(json["source"], "cgroup");
        // A run of an earlier version has no source.
        let old: TreeMemoryPeaks = serde_json::from_str(r#"{"rss_bytes": 7}"#).unwrap();
        assert_eq!((old.rss_bytes, old.source), (Some(7), None));
    }

    #[test]
    fn docs_name_every_run_json_field() {
        let mut info = sample_info();
        // Every optional part present, so that its fields are serialized.
        info.cgroup = CgroupReport {
            version: Some(crate::store::model::CgroupVersion::V2),
            path: Some("/sys/fs/cgroup/montrace/run-1".into()),
            totals: Some(Default::default()),
            cpu_coverage: Some(1.0),
            error: Some("x".into()),
            removed: true,
            entered: Some(CgroupEntry::AtClone),
        };
        info.gpu
            .devices
            .push(crate::store::model::GpuDeviceSummary {
                index: 0,
                uuid: Some("GPU-1".into()),
                name: Some("H100".into()),
                memory_total_bytes: Some(1),
                mig_mode: Some(false),
                lost_time: Some("x".into()),
                accounting_mode: false,
                samples: 1,
                utilization_gpu_mean_percent: Some(1.0),
                utilization_gpu_max_percent: Some(1.0),
                memory_used_max_bytes: Some(1),
                power_max_watts: Some(1.0),
                energy_joules: Some(1.0),
            });
        info.gpu.attribution_unavailable = Some("x".into());
        info.context = Some(crate::fleet::context::full_example());
        info.capacity = Some(crate::store::model::Capacity {
            cpu_cores: 2.0,
            cpu_basis: "host".into(),
            memory_bytes: 1 << 30,
            memory_basis: "host".into(),
        });
        info.time = Some(crate::store::model::TimeAnalysis {
            critical_path: vec![crate::store::model::Step {
                pid: 1,
                command: "make".into(),
                start_s: 0.0,
                duration_s: 1.0,
                cpu_s: 1.0,
                run_queue_s: Some(0.1),
                blocked_s: Some(0.1),
            }],
            critical_path_s: 1.0,
            ..Default::default()
        });
        assert!(info.samples_from.is_some() && info.limit_breach.is_some());
        let json = serde_json::to_value(&info).unwrap();
        // Label keys are the user's, not fields.
        crate::store::doc_check::assert_documented("run.json", &json, &["labels"]);
    }

    #[test]
    fn docs_name_every_value_of_run_json_enums() {
        use crate::store::model::CgroupVersion;
        use crate::store::model::GpuState;
        // The matches fail to compile when a variant is added, so that it is added here too.
        let modes = [
            TrackingMode::TpBtf,
            TrackingMode::Tracepoint,
            TrackingMode::Polling,
        ];
        for m in modes {
            match m {
                TrackingMode::TpBtf | TrackingMode::Tracepoint | TrackingMode::Polling => {}
            }
        }
        let versions = [CgroupVersion::V1, CgroupVersion::V2];
        for v in versions {
            match v {
                CgroupVersion::V1 | CgroupVersion::V2 => {}
            }
        }
        let states = [GpuState::Monitored, GpuState::Unavailable, GpuState::Off];
        for s in states {
            match s {
                GpuState::Monitored | GpuState::Unavailable | GpuState::Off => {}
            }
        }
        fn values<T: Serialize>(all: &[T]) -> Vec<serde_json::Value> {
            all.iter()
                .map(|v| serde_json::to_value(v).unwrap())
                .collect()
        }
        let check = crate::store::doc_check::assert_values_documented;
        check("run.json", "tracking_mode", &values(&modes));
        check("run.json", "cgroup.version", &values(&versions));
        check("run.json", "gpu.status", &values(&states));
        // The two values the recorder writes (follow/recorder.rs).
        check(
            "run.json",
            "samples_from",
            &["task_iter".into(), "procfs".into()],
        );
        use crate::store::model::TreeMemorySource;
        let sources = [
            TreeMemorySource::Cgroup,
            TreeMemorySource::Pss,
            TreeMemorySource::RssByAddressSpace,
        ];
        for s in sources {
            match s {
                TreeMemorySource::Cgroup
                | TreeMemorySource::Pss
                | TreeMemorySource::RssByAddressSpace => {}
            }
        }
        check("run.json", "tree_memory_peaks.source", &values(&sources));
    }

    #[test]
    fn write_then_read_gives_the_same_run_and_a_newer_layout_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        assert!(!exists_in(dir));
        assert!(
            matches!(read(dir), Err(ReadError::Io(e)) if e.kind() == std::io::ErrorKind::NotFound)
        );
        let info = sample_info();
        assert_eq!(write(dir, &info).unwrap(), dir.join("run.json"));
        assert!(exists_in(dir));
        let back = read(dir).unwrap();
        assert_eq!(
            serde_json::to_value(&back).unwrap(),
            serde_json::to_value(&info).unwrap()
        );
        // One version ahead: refused, with both versions said.
        let mut newer = serde_json::to_value(&info).unwrap();
        newer["schema_version"] = (RUN_JSON_VERSION + 1).into();
        std::fs::write(path_in(dir), newer.to_string()).unwrap();
        let err = read(dir).unwrap_err();
        assert!(
            matches!(err, ReadError::Newer { found, .. } if found == u64::from(RUN_JSON_VERSION) + 1)
        );
        assert!(
            err.to_string().contains(&format!("({RUN_JSON_VERSION})")),
            "{err}"
        );
        // This version and older ones are read; fields they lack read as defaults.
        let mut older = serde_json::to_value(&info).unwrap();
        older["schema_version"] = 1.into();
        older.as_object_mut().unwrap().remove("run_id");
        std::fs::write(path_in(dir), older.to_string()).unwrap();
        assert_eq!(read(dir).unwrap().run_id, "");
        std::fs::write(path_in(dir), "{").unwrap();
        assert!(matches!(read(dir), Err(ReadError::NotJson(_))));
        std::fs::write(path_in(dir), "{\"schema_version\": 1}").unwrap();
        assert!(matches!(read(dir), Err(ReadError::Invalid { .. })));
    }

    /// A run.json of every kind of figure, for the tests that render one.
    pub(crate) fn sample_info() -> RunInfo {
        RunInfo {
            schema_version: 1,
            montrace_version: "0.1.0".into(),
            run_id: "20261124T095300Z-0000000000000001".into(),
            labels: [("branch".to_string(), "main".to_string())].into(),
            context: None,
            command: "make -j8".into(),
            argv: vec!["make".into(), "-j8".into()],
            executable: "/usr/bin/make".into(),
            start_time: rfc3339(0),
            end_time: rfc3339(2_500_000_000),
            duration_s: 2.6,
            command_wall_s: Some(2.5),
            host: "h".into(),
            kernel: "6.18".into(),
            tracking_mode: TrackingMode::TpBtf,
            features: Vec::new(),
            samples_from: Some("task_iter".into()),
            exit_code: None,
            exit_signal: Some(9),
            exit_status: 137,
            lost_events: LostEvents {
                ringbuf_full: 3,
                track_map_full: 0,
                read_errors: 0,
                exits_without_final_cpu: 0,
            },
            vanished_processes: 0,
            processes_started: 12,
            max_concurrent: 4,
            totals: tree_totals(&[proc(1, 1_500_000_000, 250_000_000, Some(200 << 20), false)]),
            tree_memory_peaks: TreeMemoryPeaks {
                rss_bytes: Some(300 << 20),
                uss_bytes: None,
                pss_bytes: None,
                source: Some(crate::store::model::TreeMemorySource::Cgroup),
            },
            samples: 10,
            sample_interval_ms: 200.0,
            cgroup: CgroupReport {
                cpu_coverage: Some(0.995),
                ..CgroupReport::default()
            },
            gpu: crate::sampling::gpu::GpuStatus::Off.summary(),
            startup_ms: Some(120.0),
            ebpf_load_ms: Some(100.0),
            uid: 1000,
            gid: 1000,
            linger_expired: false,
            signals_forwarded: vec![],
            limit_breach: Some(crate::store::summary_json::LimitBreach {
                limit: "rss".into(),
                threshold: (100u64 << 20) as f64,
                value: (150u64 << 20) as f64,
                time: rfc3339(0),
                elapsed_s: 1.25,
            }),
            out_dir: "runs/x".into(),
            recording_error: None,
            capacity: None,
            time: None,
            marks_dropped: 0,
        }
    }
}
