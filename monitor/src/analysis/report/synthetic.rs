//! A synthetic run directory of any size, for the report's benchmark (`cargo xtask bench`) and
//! its tests: a build-like tree written through the real writer, so it reads back exactly like
//! a recorded run.
//!
//! Shape: a `make` process lives for the whole run and keeps 8 job slots busy; each job is
//! `sh` -> `cc1` then `as`, back to back in its slot. Every live process is sampled at every
//! sweep (`interval`), with exit rows, exit figures, fork/exec/exit events, system rows, a few
//! marks and a run.json.

use std::path::Path;
use std::time::Duration;

use anyhow::Context as _;

use crate::store::records::{
    EventKind, EventRecord, MarkKind, MarkRecord, ProcessRecord, SampleRecord, SampleSource,
    SystemRecord,
};
use crate::store::writer::PartedTable;

const MIB: u64 = 1 << 20;
/// Jobs running at once.
const SLOTS: usize = 8;
/// 2024-05-01T12:00:00Z.
const T0: i64 = 1_714_564_800_000_000_000;

/// One synthetic process: what it runs and when, and how it uses the machine.
struct Spec {
    pid: u32,
    parent: Option<usize>,
    exe: &'static str,
    start: i64,
    end: i64,
    /// Share of one CPU while it runs (1.0 = one core).
    cpu: f64,
    /// Resident memory at its start and its peak (reached at its end, linearly).
    rss: (u64, u64),
    /// Private share of its resident memory.
    private: f64,
}

impl Spec {
    fn rss_at(&self, t: i64) -> u64 {
        let f = ((t - self.start) as f64 / (self.end - self.start).max(1) as f64).clamp(0.0, 1.0);
        self.rss.0 + ((self.rss.1 - self.rss.0) as f64 * f) as u64
    }

    fn cpu_ns_at(&self, t: i64) -> u64 {
        ((t.min(self.end) - self.start).max(0) as f64 * self.cpu) as u64
    }
}

/// A tiny deterministic generator (xorshift), so every synthetic run is the same.
fn noise(seed: u64) -> f64 {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    (x % 10_000) as f64 / 10_000.0
}

fn specs(processes: usize, duration_ns: i64) -> Vec<Spec> {
    let mut specs = vec![Spec {
        pid: 1000,
        parent: None,
        exe: "make",
        start: T0,
        end: T0 + duration_ns,
        cpu: 0.02,
        rss: (12 * MIB, 30 * MIB),
        private: 0.6,
    }];
    let jobs = processes.saturating_sub(1) / 3;
    let leftover = processes.saturating_sub(1) % 3;
    let per_slot = jobs.div_ceil(SLOTS).max(1);
    let job_ns = duration_ns / per_slot as i64;
    let mut pid = 1001;
    for job in 0..jobs {
        let slot = job % SLOTS;
        let turn = job / SLOTS;
        // Slots start a little apart, like a real -j8.
        let start = T0 + turn as i64 * job_ns + slot as i64 * job_ns / (SLOTS as i64 * 4);
        let end = (start + job_ns - job_ns / 50).min(T0 + duration_ns);
        let span = end - start;
        let size = 40.0 + 160.0 * noise(job as u64);
        let sh = specs.len();
        specs.push(Spec {
            pid,
            parent: Some(0),
            exe: "sh",
            start,
            end,
            cpu: 0.01,
            rss: (2 * MIB, 3 * MIB),
            private: 0.3,
        });
        specs.push(Spec {
            pid: pid + 1,
            parent: Some(sh),
            exe: "cc1",
            start: start + span / 20,
            end: start + span * 7 / 10,
            cpu: 0.97,
            rss: (8 * MIB, (size * MIB as f64) as u64),
            private: 0.85,
        });
        specs.push(Spec {
            pid: pid + 2,
            parent: Some(sh),
            exe: "as",
            start: start + span * 72 / 100,
            end: start + span * 95 / 100,
            cpu: 0.8,
            rss: (4 * MIB, 18 * MIB),
            private: 0.7,
        });
        pid += 3;
    }
    for k in 0..leftover {
        let start = T0 + duration_ns * (k as i64 + 1) / (leftover as i64 + 2);
        specs.push(Spec {
            pid,
            parent: Some(0),
            exe: "true",
            start,
            end: start + 1_000_000,
            cpu: 0.5,
            rss: (MIB, MIB),
            private: 0.2,
        });
        pid += 1;
    }
    specs
}

/// Writes a synthetic run of `processes` processes (at least 1) lasting `duration`, sampled
/// every `interval`, into `dir` (created if needed; it must not hold a run yet).
pub fn synthetic_run(
    dir: &Path,
    processes: usize,
    duration: Duration,
    interval: Duration,
) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let duration_ns = duration.as_nanos().max(1) as i64;
    let interval_ns = interval.as_nanos().max(1_000_000) as i64;
    let specs = specs(processes.max(1), duration_ns);
    write_processes(dir, &specs)?;
    write_sweeps(dir, &specs, duration, interval)?;
    write_marks(dir, duration_ns)?;
    write_run_info(dir, &specs, duration_ns, interval_ns)
}

/// processes.parquet and events.parquet: each process with its fork, exec and exit.
fn write_processes(dir: &Path, specs: &[Spec]) -> anyhow::Result<()> {
    let path = |s: &Spec| format!("/usr/bin/{}", s.exe);

    let mut table = PartedTable::processes(dir)?;
    let mut events = PartedTable::events(dir)?;
    for s in specs {
        let parent = s.parent.map(|p| &specs[p]);
        let cpu = s.cpu_ns_at(s.end);
        table.push(ProcessRecord {
            pid: s.pid,
            start_time_ns: s.start,
            parent_pid: parent.map(|p| p.pid),
            parent_start_time_ns: parent.map(|p| p.start),
            end_time_ns: Some(s.end),
            filename: Some(path(s)),
            argv: Some(vec![s.exe.to_string(), format!("job-{}.c", s.pid)]),
            comm: s.exe.to_string(),
            exec_count: 1,
            exit_code: Some(0),
            cpu_user_ns: Some(cpu * 9 / 10),
            cpu_system_ns: Some(cpu - cpu * 9 / 10),
            peak_rss_bytes: Some(s.rss.1),
            minor_faults: Some(s.rss.1 / 4096),
            major_faults: Some(0),
            voluntary_ctxt_switches: Some(10),
            involuntary_ctxt_switches: Some(2),
            read_bytes: Some(0),
            write_bytes: Some(4096),
            read_chars: Some(65536),
            write_chars: Some(4096),
            ..Default::default()
        })?;
        let event = |kind, time_ns| EventRecord {
            time_ns,
            kind,
            pid: s.pid,
            start_time_ns: s.start,
            parent_pid: None,
            parent_start_time_ns: None,
            filename: None,
            argv: None,
            tid: None,
            exit_code: None,
            exit_signal: None,
            cpu_user_ns: None,
            cpu_system_ns: None,
            peak_rss_bytes: None,
        };
        if let Some(p) = parent {
            events.push(EventRecord {
                parent_pid: Some(p.pid),
                parent_start_time_ns: Some(p.start),
                ..event(EventKind::Fork, s.start)
            })?;
        }
        events.push(EventRecord {
            filename: Some(path(s)),
            argv: Some(vec![s.exe.to_string()]),
            ..event(EventKind::Exec, s.start + 100_000)
        })?;
        events.push(EventRecord {
            tid: Some(s.pid),
            exit_code: Some(0),
            cpu_user_ns: Some(cpu * 9 / 10),
            cpu_system_ns: Some(cpu - cpu * 9 / 10),
            peak_rss_bytes: Some(s.rss.1),
            ..event(EventKind::Exit, s.end)
        })?;
    }
    table.finish()?;
    events.finish()?;
    Ok(())
}

/// samples.parquet and system.parquet: every live process at every sweep, then its exit row.
fn write_sweeps(
    dir: &Path,
    specs: &[Spec],
    duration: Duration,
    interval: Duration,
) -> anyhow::Result<()> {
    let mut samples = PartedTable::samples(dir)?;
    let mut system = PartedTable::system(dir)?;
    let mut by_start: Vec<usize> = (0..specs.len()).collect();
    by_start.sort_by_key(|&i| specs[i].start);
    let mut by_end: Vec<usize> = (0..specs.len()).collect();
    by_end.sort_by_key(|&i| specs[i].end);
    let mut live: Vec<usize> = Vec::new();
    let mut last: Vec<Option<(i64, u64)>> = vec![None; specs.len()];
    let (mut next_start, mut next_end) = (0, 0);
    let end = T0 + duration.as_nanos().max(1) as i64;
    for t in sweep_times(duration, interval) {
        // Exits up to this sweep, in time order, with their exit rows.
        while next_end < by_end.len() && specs[by_end[next_end]].end <= t {
            let i = by_end[next_end];
            if specs[i].start <= t {
                samples.push(sample_row(
                    &specs[i],
                    specs[i].end,
                    last[i],
                    SampleSource::Exit,
                ))?;
            }
            live.retain(|&j| j != i);
            next_end += 1;
        }
        while next_start < by_start.len() && specs[by_start[next_start]].start <= t {
            let i = by_start[next_start];
            if specs[i].end > t {
                live.push(i);
            }
            next_start += 1;
        }
        let mut used = 0;
        for &i in &live {
            let row = sample_row(&specs[i], t, last[i], SampleSource::Procfs);
            last[i] = Some((t, row.cpu_user_ns + row.cpu_system_ns));
            used += row.rss_bytes.unwrap_or(0);
            samples.push(row)?;
        }
        let busy = 100.0 * live.iter().map(|&i| specs[i].cpu).sum::<f64>() / 16.0;
        let total = 16 << 30;
        let used = (3 << 30) + used;
        system.push(SystemRecord {
            time_ns: t,
            cpu_user_percent: (t > T0).then_some(busy * 0.9),
            cpu_nice_percent: (t > T0).then_some(0.0),
            cpu_system_percent: (t > T0).then_some(busy * 0.1),
            cpu_idle_percent: (t > T0).then_some(100.0 - busy),
            cpu_iowait_percent: (t > T0).then_some(0.0),
            cpu_irq_percent: (t > T0).then_some(0.0),
            cpu_steal_percent: (t > T0).then_some(0.0),
            mem_total_bytes: total,
            mem_available_bytes: total - used,
            mem_used_bytes: used,
            mem_cached_bytes: 2 << 30,
            swap_total_bytes: 0,
            swap_used_bytes: 0,
            load_1: live.len() as f64,
            load_5: live.len() as f64,
            load_15: live.len() as f64,
            ..Default::default()
        })?;
    }
    // Processes that end after the last sweep (between it and the end of the run).
    for &i in &by_end[next_end..] {
        if specs[i].start <= end {
            samples.push(sample_row(
                &specs[i],
                specs[i].end,
                last[i],
                SampleSource::Exit,
            ))?;
        }
    }
    samples.finish()?;
    system.finish()?;
    Ok(())
}

/// The sample row of `s` at `t`, its CPU rate since the previous row (`prev`: time, CPU).
fn sample_row(s: &Spec, t: i64, prev: Option<(i64, u64)>, source: SampleSource) -> SampleRecord {
    let cpu = s.cpu_ns_at(t);
    let (t_prev, cpu_prev) = prev.unwrap_or((s.start, 0));
    let rss = s.rss_at(t);
    let uss = (rss as f64 * s.private) as u64;
    let procfs = source == SampleSource::Procfs;
    SampleRecord {
        time_ns: t,
        pid: s.pid,
        start_time_ns: s.start,
        source,
        cpu_user_ns: cpu * 9 / 10,
        cpu_system_ns: cpu - cpu * 9 / 10,
        cpu_percent: (t > t_prev)
            .then(|| (cpu - cpu_prev.min(cpu)) as f64 / (t - t_prev) as f64 * 100.0),
        rss_bytes: Some(rss),
        uss_bytes: procfs.then_some(uss),
        pss_bytes: procfs.then_some(uss + (rss - uss) / 3),
        swap_bytes: procfs.then_some(0),
        vms_bytes: procfs.then_some(rss * 4),
        threads: procfs.then_some(1),
        fds: procfs.then_some(4),
        minor_faults: Some(rss / 4096),
        major_faults: Some(0),
        state: Some(if procfs { "R" } else { "X" }.to_string()),
        ..Default::default()
    }
}

/// marks.parquet: a compile begin and end and a link point.
fn write_marks(dir: &Path, duration_ns: i64) -> anyhow::Result<()> {
    let mut marks = PartedTable::marks(dir)?;
    for (k, (label, kind)) in [
        ("compile", MarkKind::Begin),
        ("compile", MarkKind::End),
        ("link", MarkKind::Point),
    ]
    .into_iter()
    .enumerate()
    {
        marks.push(MarkRecord {
            time_ns: T0 + duration_ns * [1, 8, 9][k] / 10,
            pid: 1000,
            start_time_ns: Some(T0),
            label: label.into(),
            kind,
        })?;
    }
    marks.finish()?;
    Ok(())
}

/// run.json, written through the same type `montrace run` writes and `report` reads.
fn write_run_info(
    dir: &Path,
    specs: &[Spec],
    duration_ns: i64,
    interval_ns: i64,
) -> anyhow::Result<()> {
    let end = T0 + duration_ns;
    let cpu: u64 = specs.iter().map(|s| s.cpu_ns_at(s.end)).sum();
    let totals = crate::store::run_json::TreeTotals {
        cpu_user_ns: cpu * 9 / 10,
        cpu_system_ns: cpu - cpu * 9 / 10,
        ..Default::default()
    };
    let info = crate::store::run_json::RunInfo {
        schema_version: crate::store::run_json::RUN_JSON_VERSION,
        montrace_version: env!("CARGO_PKG_VERSION").into(),
        command: "make -j8".into(),
        argv: vec!["make".into(), "-j8".into()],
        executable: "/usr/bin/make".into(),
        start_time: crate::units::rfc3339(T0),
        end_time: crate::units::rfc3339(end),
        duration_s: duration_ns as f64 / 1e9,
        command_wall_s: Some(duration_ns as f64 / 1e9),
        host: "synthetic".into(),
        kernel: "6.1.0".into(),
        tracking_mode: crate::kernel::ebpf::TrackingMode::TpBtf,
        features: Vec::new(),
        samples_from: None,
        run_id: String::new(),
        labels: Default::default(),
        context: None,
        exit_code: Some(0),
        exit_signal: None,
        exit_status: 0,
        lost_events: Default::default(),
        vanished_processes: 0,
        processes_started: specs.len(),
        max_concurrent: 1 + 2 * SLOTS,
        totals,
        tree_memory_peaks: Default::default(),
        samples: 0,
        sample_interval_ms: interval_ns as f64 / 1e6,
        cgroup: crate::store::run_json::CgroupReport {
            cpu_coverage: Some(1.0),
            ..Default::default()
        },
        gpu: crate::sampling::gpu::GpuSummary::not_recorded(),
        startup_ms: None,
        ebpf_load_ms: None,
        uid: 0,
        gid: 0,
        linger_expired: false,
        signals_forwarded: Vec::new(),
        limit_breach: None,
        out_dir: dir.display().to_string(),
        marks_dropped: 0,
        recording_error: None,
        capacity: None,
        time: None,
    };
    crate::store::run_json::write(dir, &info).with_context(|| {
        format!(
            "cannot write {}",
            crate::store::run_json::path_in(dir).display()
        )
    })?;
    Ok(())
}

/// The sweep times of a synthetic run: every `interval` from its start to `duration` after it.
fn sweep_times(duration: Duration, interval: Duration) -> impl Iterator<Item = i64> {
    let duration_ns = duration.as_nanos().max(1) as i64;
    let interval_ns = interval.as_nanos().max(1_000_000) as i64;
    (0..)
        .map(move |k| T0 + k * interval_ns)
        .take_while(move |&t| t <= T0 + duration_ns)
}

/// Adds a gpu.parquet of `gpus` busy GPUs (80 GiB each) to a synthetic run, sampled every
/// `interval` for `duration` from the run's start.
pub fn add_synthetic_gpu(
    dir: &Path,
    duration: Duration,
    interval: Duration,
    gpus: u32,
) -> anyhow::Result<()> {
    let duration_ns = duration.as_nanos().max(1) as i64;
    let mut table = PartedTable::gpu(dir)?;
    for t in sweep_times(duration, interval) {
        let f = (t - T0) as f64 / duration_ns as f64;
        for gpu in 0..gpus {
            let busy = 100.0 * (0.5 + 0.45 * (f * 12.0 + f64::from(gpu)).sin());
            table.push(crate::store::records::GpuRecord {
                time_ns: t,
                gpu_index: gpu,
                name: Some("Synthetic GPU".into()),
                utilization_gpu_percent: Some(busy),
                utilization_memory_percent: Some(busy / 2.0),
                memory_used_bytes: Some(((10.0 + 50.0 * f) * (1u64 << 30) as f64) as u64),
                memory_total_bytes: Some(80 << 30),
                power_watts: Some(80.0 + 3.0 * busy),
                ..Default::default()
            })?;
        }
    }
    table.finish()?;
    Ok(())
}

/// GPU memory `make` holds on GPU 0 for the whole run in [`add_synthetic_gpu_processes`].
pub const GPU_MEMORY_MAKE: u64 = 1 << 30;
/// GPU memory each `cc1` holds while it runs, on GPU `pid % 2`.
pub const GPU_MEMORY_CC1: u64 = 512 * MIB;

/// Adds a gpu_processes.parquet to a synthetic run made by [`synthetic_run`] with the same
/// `processes`, `duration` and `interval`: at every sweep a `sample` row for `make` and for each
/// live `cc1` (the other processes use no GPU), and an `accounting` row for each `cc1` after it
/// exits, as the recorder writes them.
pub fn add_synthetic_gpu_processes(
    dir: &Path,
    processes: usize,
    duration: Duration,
    interval: Duration,
) -> anyhow::Result<()> {
    use crate::store::records::{GpuProcessRecord, GpuProcessSource};
    let specs = specs(processes.max(1), duration.as_nanos().max(1) as i64);
    let holders: Vec<(&Spec, u64)> = specs
        .iter()
        .filter_map(|s| match s.exe {
            "make" => Some((s, GPU_MEMORY_MAKE)),
            "cc1" => Some((s, GPU_MEMORY_CC1)),
            _ => None,
        })
        .collect();
    let mut by_end: Vec<&Spec> = specs.iter().filter(|s| s.exe == "cc1").collect();
    by_end.sort_by_key(|s| s.end);
    let mut exited = by_end.into_iter().peekable();
    let row = |s: &Spec, time_ns, source| GpuProcessRecord {
        time_ns,
        gpu_index: s.pid % 2,
        pid: s.pid,
        start_time_ns: s.start,
        source,
        ..Default::default()
    };
    let accounting = |s: &Spec| GpuProcessRecord {
        max_gpu_memory_bytes: Some(GPU_MEMORY_CC1),
        lifetime_gpu_utilization_percent: Some(100.0 * s.cpu),
        lifetime_memory_utilization_percent: Some(50.0 * s.cpu),
        context_time_ns: Some((s.end - s.start) as u64 / 1_000_000 * 1_000_000),
        ..row(s, s.end, GpuProcessSource::Accounting)
    };
    let mut table = PartedTable::gpu_processes(dir)?;
    for t in sweep_times(duration, interval) {
        // Live as in `synthetic_run`'s sweeps: from its start to before its end.
        for &(s, bytes) in holders.iter().filter(|(s, _)| s.start <= t && t < s.end) {
            table.push(GpuProcessRecord {
                gpu_memory_bytes: Some(bytes),
                sm_utilization_percent: Some(100.0 * s.cpu),
                memory_utilization_percent: Some(50.0 * s.cpu),
                ..row(s, t, GpuProcessSource::Sample)
            })?;
        }
        while let Some(s) = exited.next_if(|s| s.end <= t) {
            table.push(accounting(s))?;
        }
    }
    // Processes that end after the last sweep: read when the run ends.
    for s in exited {
        table.push(accounting(s))?;
    }
    table.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::report::load;

    #[test]
    fn a_small_synthetic_run_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        synthetic_run(
            dir.path(),
            50,
            Duration::from_secs(10),
            Duration::from_millis(200),
        )
        .unwrap();
        let data = load::load(dir.path()).unwrap();
        assert_eq!(data.processes.len(), 50);
        assert!(data.notes.is_empty(), "{:?}", data.notes);
        assert_eq!(data.system.len(), 51);
        assert_eq!(data.marks.len(), 3);
        // One exit row per process, and sweeps of the live ones.
        assert_eq!(data.samples.iter().filter(|s| s.exit).count(), 50);
        assert!(data.samples.len() > 51 * 2);
        let make = data.processes.iter().find(|p| p.comm == "make").unwrap();
        assert_eq!(make.parent, None);
        let children = data
            .processes
            .iter()
            .filter(|p| p.parent == Some((make.pid, make.start_ns)))
            .count();
        assert_eq!(children, 16 + 1);
    }
}
