//! The report's figures, derived from a loaded run: groups of processes, the per-group table,
//! the top processes, and the time series the plots draw. Pure functions over [`RunData`].
//!
//! Conventions (docs/report.md says the same for readers):
//! - A **sweep** is one pass of the sampler: all `procfs` rows with the same `time`. An
//!   *aggregate* figure of a group is the sum over its processes at one sweep; its *peak* is the
//!   largest such sum. Exit rows (`source = 'exit'`) have times of their own and no USS/PSS, so
//!   they are left out of the sums (they do count for the cumulative CPU time).
//! - GPU memory (gpu_processes.parquet) adds to the same per-sweep sums: its `sample` rows carry
//!   their sweep's time. Its `accounting` rows are whole-life figures stamped at an exit, not a
//!   moment of a sweep, and are left out.
//! - CPU seconds are the kernel's exact exit figures from processes.parquet; a process without
//!   them (still running at the end, or its exit event lost) counts with its last sample.

use std::collections::HashMap;

use super::load::{Process, RunData, SocketBytes};

/// How processes are put into groups (`--group-by`).
#[derive(Clone, Debug)]
pub enum GroupBy {
    /// The executable's file name (`/usr/bin/gcc` -> `gcc`); `comm` when it is unknown.
    Exe,
    /// The kernel's short command name.
    Comm,
    /// A regular expression over the command line (argv joined by spaces): its first capture
    /// group, or the whole match when it has none or the group did not take part, names the
    /// group. Processes it does not match are grouped by executable.
    Regex(regex_lite::Regex),
}

impl GroupBy {
    /// `exe`, `comm`, or else a regular expression.
    pub fn parse(spec: &str) -> Result<GroupBy, String> {
        match spec {
            "exe" => Ok(GroupBy::Exe),
            "comm" => Ok(GroupBy::Comm),
            pattern => regex_lite::Regex::new(pattern)
                .map(GroupBy::Regex)
                .map_err(|err| {
                    format!(
                        "--group-by {pattern:?} is neither `exe`, `comm` nor a valid regular \
                         expression: {err}"
                    )
                }),
        }
    }

    /// The name of the group `p` belongs to.
    pub fn group_of(&self, p: &Process) -> String {
        match self {
            GroupBy::Exe => exe_name(p),
            GroupBy::Comm => p.comm.clone(),
            GroupBy::Regex(re) => {
                let line = p.command_line();
                match re.captures(&line) {
                    Some(caps) => caps
                        .get(1)
                        .or_else(|| caps.get(0))
                        .map(|m| m.as_str().to_string())
                        .filter(|name| !name.is_empty())
                        .unwrap_or_else(|| exe_name(p)),
                    None => exe_name(p),
                }
            }
        }
    }

    /// For the report's header.
    pub fn describe(&self) -> String {
        match self {
            GroupBy::Exe => "executable".into(),
            GroupBy::Comm => "comm (the kernel's command name)".into(),
            GroupBy::Regex(re) => format!("pattern `{}` (others by executable)", re.as_str()),
        }
    }
}

/// The executable's file name, or `comm` when no exec was seen.
pub fn exe_name(p: &Process) -> String {
    match p.filename.as_deref() {
        Some(path) if !path.is_empty() => path.rsplit('/').next().unwrap_or(path).to_string(),
        _ if !p.comm.is_empty() => p.comm.clone(),
        _ => format!("pid {}", p.pid),
    }
}

/// The sums of one group's processes at one sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SweepSum {
    pub uss: Option<u64>,
    pub rss: Option<u64>,
    pub pss: Option<u64>,
    pub cpu_percent: f64,
    /// GPU memory its processes held, over all GPUs (gpu_processes.parquet `sample` rows).
    pub gpu_memory: Option<u64>,
    /// Processes of the group in the sweep (procfs rows).
    pub live: u32,
    /// Storage bytes read and written per second since each process's previous sample (or its
    /// start), summed.
    pub read_per_s: Option<f64>,
    pub write_per_s: Option<f64>,
}

fn add(sum: &mut Option<u64>, value: Option<u64>) {
    if let Some(v) = value {
        *sum = Some(sum.unwrap_or(0) + v);
    }
}

fn add_f64(sum: &mut Option<f64>, value: Option<f64>) {
    if let Some(v) = value {
        *sum = Some(sum.unwrap_or(0.0) + v);
    }
}

/// For each sample, the storage bytes per second its process read and wrote since its previous
/// sweep row (since its start, with 0 bytes, for its first): (read, write). None for exit rows,
/// rows without the counters and rows at the same moment as the previous one. A counter that went
/// back (procfs counts reaped children; the task iterator does not) counts as no I/O. A process
/// `montrace attach` found running had done I/O before its first sample: its first rate is its
/// average since it started (docs/report.md says so).
fn io_rates(data: &RunData) -> Vec<(Option<f64>, Option<f64>)> {
    let mut rates = vec![(None, None); data.samples.len()];
    let mut order: Vec<usize> = (0..data.samples.len())
        .filter(|&i| !data.samples[i].exit)
        .collect();
    order.sort_by_key(|&i| (data.samples[i].process, data.samples[i].time_ns));
    let mut previous: Option<usize> = None;
    for &i in &order {
        let s = &data.samples[i];
        let prev = previous.filter(|&j| data.samples[j].process == s.process);
        let (t0, read0, write0) = match prev {
            Some(j) => {
                let p = &data.samples[j];
                (p.time_ns, p.read_bytes, p.write_bytes)
            }
            None => (data.processes[s.process].start_ns, Some(0), Some(0)),
        };
        let dt = (s.time_ns - t0) as f64 / 1e9;
        if dt > 0.0 {
            let rate = |now: Option<u64>, before: Option<u64>| {
                Some(now?.saturating_sub(before?) as f64 / dt)
            };
            rates[i] = (rate(s.read_bytes, read0), rate(s.write_bytes, write0));
        }
        previous = Some(i);
    }
    rates
}

/// One row of the per-group table.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GroupStats {
    pub name: String,
    pub instances: usize,
    /// Sweep rows (`procfs`) of its processes.
    pub samples: usize,
    /// The largest USS of one process of the group.
    pub peak_uss_instance: Option<u64>,
    /// The largest peak RSS of one process of the group: its exact exit figure (the kernel's
    /// VmHWM, processes.parquet `peak_rss_bytes`), so processes too short to be sampled count;
    /// the largest sample for a process without one.
    pub peak_rss_instance: Option<u64>,
    /// Processes with a peak RSS from their samples only (no exit figure): a lower bound.
    pub peak_rss_from_samples: usize,
    /// Largest per-sweep sums over the group.
    pub agg_peak_uss: Option<u64>,
    pub agg_peak_rss: Option<u64>,
    pub agg_peak_pss: Option<u64>,
    /// Largest per-sweep sum of CPU% (100 = one core).
    pub peak_cpu_percent: Option<f64>,
    /// Largest per-sweep sum of GPU memory over all GPUs: 0 for a group that held none, None
    /// for every group when the run has no GPU samples.
    pub agg_peak_gpu_memory: Option<u64>,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    /// Processes whose CPU time came from their last sample, not from their exit.
    pub cpu_from_samples: usize,
    /// Mean USS over the group's sweep rows (one process's typical private memory).
    pub avg_uss: Option<f64>,
    /// CPU time over `duration` (100 = one core busy on average while the group ran).
    pub avg_cpu_percent: Option<f64>,
    pub first_start_ns: i64,
    pub last_end_ns: i64,
}

impl GroupStats {
    pub fn cpu_ns(&self) -> u64 {
        self.cpu_user_ns + self.cpu_system_ns
    }

    /// From the first start of one of its processes to the last end.
    pub fn duration_ns(&self) -> i64 {
        (self.last_end_ns - self.first_start_ns).max(0)
    }
}

/// Per-process figures derived from the samples.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ProcStats {
    /// Exit figures, or the last sample's counters.
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cpu_from_samples: bool,
    /// The larger of the exit figure (VmHWM) and the largest sampled RSS.
    pub peak_rss: Option<u64>,
    /// `peak_rss` came from the samples alone: the process has no exit figure.
    pub peak_rss_from_samples: bool,
    pub peak_uss: Option<u64>,
    pub last_seen_ns: Option<i64>,
}

/// Everything derived from a run that the report shows.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// The time axis: plots start at `t0_ns` (the earliest moment in the data).
    pub t0_ns: i64,
    pub t1_ns: i64,
    /// Groups, largest first: by CPU time, then by aggregate peak USS, then by name. A group's
    /// index here is its colour.
    pub groups: Vec<GroupStats>,
    /// The group (index into `groups`) of each process.
    pub group_of: Vec<usize>,
    pub procs: Vec<ProcStats>,
    /// Sweep times, increasing.
    pub sweeps: Vec<i64>,
    /// For each group, its sums at the sweeps where it had processes, by sweep index.
    pub group_sweeps: Vec<Vec<(usize, SweepSum)>>,
    /// For each process, whether it is a step of run.json's critical path (all false without
    /// it).
    pub on_critical_path: Vec<bool>,
}

impl Model {
    /// The tree's largest RSS at one sweep (sum over its processes) and when: (time, bytes).
    pub fn tree_rss_peak(&self) -> Option<(i64, u64)> {
        let mut per_sweep: Vec<Option<u64>> = vec![None; self.sweeps.len()];
        for group in &self.group_sweeps {
            for (i, sum) in group {
                if let (Some(slot), Some(rss)) = (per_sweep.get_mut(*i), sum.rss) {
                    *slot = Some(slot.unwrap_or(0) + rss);
                }
            }
        }
        per_sweep
            .iter()
            .enumerate()
            .filter_map(|(i, v)| v.map(|v| (self.sweeps[i], v)))
            // The first sweep with the largest sum.
            .fold(None, |best: Option<(i64, u64)>, (t, v)| match best {
                Some((_, b)) if b >= v => best,
                _ => Some((t, v)),
            })
    }

    /// Seconds since `t0_ns`.
    pub fn secs(&self, t_ns: i64) -> f64 {
        (t_ns - self.t0_ns) as f64 / 1e9
    }

    /// When a process ended, or the end of the data when it did not.
    pub fn end_of(&self, p: &Process) -> i64 {
        p.end_ns.unwrap_or(self.t1_ns).max(p.start_ns)
    }
}

/// Derives the [`Model`] of a run.
pub fn build(data: &RunData, by: &GroupBy) -> Model {
    let (t0_ns, t1_ns) = data.time_range();
    let mut model = Model {
        t0_ns,
        t1_ns,
        ..Default::default()
    };

    // Groups, first in the order they are met.
    let mut names: Vec<String> = Vec::new();
    let mut by_name: HashMap<String, usize> = HashMap::new();
    let first_group: Vec<usize> = data
        .processes
        .iter()
        .map(|p| {
            let name = by.group_of(p);
            *by_name.entry(name.clone()).or_insert_with(|| {
                names.push(name);
                names.len() - 1
            })
        })
        .collect();

    let procs = process_stats(data);

    // Sweeps, and the sums of each group at each sweep.
    let mut sweeps: Vec<i64> = data
        .samples
        .iter()
        .filter(|s| !s.exit)
        .map(|s| s.time_ns)
        .collect();
    sweeps.sort_unstable();
    sweeps.dedup();
    let sweep_of: HashMap<i64, usize> = sweeps.iter().enumerate().map(|(i, &t)| (t, i)).collect();
    let mut sums: HashMap<(usize, usize), SweepSum> = HashMap::new();
    let mut stats: Vec<GroupStats> = names
        .iter()
        .map(|name| GroupStats {
            name: name.clone(),
            first_start_ns: i64::MAX,
            last_end_ns: i64::MIN,
            ..Default::default()
        })
        .collect();
    let mut uss_total = vec![(0.0f64, 0usize); names.len()];
    let rates = io_rates(data);
    for (s, (read_per_s, write_per_s)) in data.samples.iter().zip(rates).filter(|(s, _)| !s.exit) {
        let g = first_group[s.process];
        let sum = sums.entry((g, sweep_of[&s.time_ns])).or_default();
        add_f64(&mut sum.read_per_s, read_per_s);
        add_f64(&mut sum.write_per_s, write_per_s);
        add(&mut sum.uss, s.uss_bytes);
        add(&mut sum.rss, s.rss_bytes);
        add(&mut sum.pss, s.pss_bytes);
        sum.cpu_percent += s.cpu_percent.unwrap_or(0.0);
        sum.live += 1;
        let st = &mut stats[g];
        st.samples += 1;
        if let Some(uss) = s.uss_bytes {
            st.peak_uss_instance = Some(st.peak_uss_instance.map_or(uss, |p| p.max(uss)));
            uss_total[g].0 += uss as f64;
            uss_total[g].1 += 1;
        }
    }
    // The recorder stamps a sweep's GPU rows with the time of its procfs rows (one clock read
    // per sweep). A GPU row at a time with no procfs row has no sweep to join: it is left out
    // rather than made a sweep at which every group's memory and CPU would draw as 0.
    let gpu_samples: Vec<_> = data
        .gpu_processes
        .iter()
        .filter(|r| !r.accounting)
        .collect();
    for r in &gpu_samples {
        if let Some(&sweep) = sweep_of.get(&r.time_ns) {
            let sum = sums.entry((first_group[r.process], sweep)).or_default();
            add(&mut sum.gpu_memory, r.gpu_memory_bytes);
        }
    }
    let mut group_sweeps: Vec<Vec<(usize, SweepSum)>> = vec![Vec::new(); names.len()];
    for ((g, sweep), sum) in sums {
        group_sweeps[g].push((sweep, sum));
    }
    add_peaks(
        &mut group_sweeps,
        &mut stats,
        &uss_total,
        !gpu_samples.is_empty(),
    );

    add_lifetimes(data, &procs, &first_group, &mut stats, t1_ns);

    let rank = rank_groups(&stats);
    let mut taken_stats: Vec<Option<GroupStats>> = stats.into_iter().map(Some).collect();
    let mut taken_sweeps: Vec<Option<Vec<(usize, SweepSum)>>> =
        group_sweeps.into_iter().map(Some).collect();
    let mut order: Vec<usize> = (0..rank.len()).collect();
    order.sort_by_key(|&g| rank[g]);
    for &g in &order {
        model
            .groups
            .push(taken_stats[g].take().expect("each group once"));
        model
            .group_sweeps
            .push(taken_sweeps[g].take().expect("each group once"));
    }
    model.group_of = first_group.iter().map(|&g| rank[g]).collect();
    model.procs = procs;
    model.sweeps = sweeps;
    model.on_critical_path = critical_path_processes(data);
    model
}

/// How far a step's start may lie from its process's: the steps' starts are seconds as f64,
/// exact to well below this over any run's length, and no pid is reused that fast.
const STEP_START_TOLERANCE_NS: i64 = 1_000;

/// Which processes are steps of run.json's critical path (`time.critical_path`, which keeps the
/// longest steps): a step is the process with its pid that started `start_s` after the origin
/// the analysis counted from ([`crate::analysis::critical::analyse`]), the command's exec (or
/// the attach). A process alive then, the root first, was clipped to it: a step at 0 s is the
/// earliest process with its pid.
pub fn critical_path_processes(data: &RunData) -> Vec<bool> {
    let mut on = vec![false; data.processes.len()];
    let Some(time) = data.info.as_ref().and_then(|info| info.time.as_ref()) else {
        return on;
    };
    let mut by_pid: HashMap<u32, Vec<usize>> = HashMap::new();
    for (i, p) in data.processes.iter().enumerate() {
        by_pid.entry(p.pid).or_default().push(i);
    }
    let rows = |pid: u32| by_pid.get(&pid).map_or(&[][..], Vec::as_slice);
    let offset = |s: f64| (s * 1e9).round() as i64;
    let origin = step_origin(
        time.critical_path
            .iter()
            .filter(|s| s.start_s > 0.0)
            .flat_map(|step| {
                rows(step.pid)
                    .iter()
                    .map(move |&i| data.processes[i].start_ns - offset(step.start_s))
            }),
    );
    for step in &time.critical_path {
        let found = if step.start_s > 0.0 {
            origin.and_then(|origin| {
                let start_ns = origin + offset(step.start_s);
                rows(step.pid).iter().copied().find(|&i| {
                    (data.processes[i].start_ns - start_ns).abs() <= STEP_START_TOLERANCE_NS
                })
            })
        } else {
            rows(step.pid)
                .iter()
                .copied()
                .min_by_key(|&i| data.processes[i].start_ns)
        };
        if let Some(i) = found {
            on[i] = true;
        }
    }
    on
}

/// The origin most steps agree on, from each step's candidates (a start of a process with its
/// pid, less the step's `start_s`): the value with the most candidates within the tolerance, the
/// latest of equals. A step of a reused pid adds a wrong candidate too, which the others outvote.
fn step_origin(candidates: impl Iterator<Item = i64>) -> Option<i64> {
    let mut c: Vec<i64> = candidates.collect();
    c.sort_unstable();
    let mut best: Option<(usize, i64)> = None;
    let mut lo = 0;
    for hi in 0..c.len() {
        while c[hi] - c[lo] > STEP_START_TOLERANCE_NS {
            lo += 1;
        }
        if best.is_none_or(|(n, _)| hi - lo + 1 >= n) {
            best = Some((hi - lo + 1, c[hi]));
        }
    }
    best.map(|(_, origin)| origin)
}

/// Each group's peaks over its sweeps (sorted here by sweep), and its average USS.
fn add_peaks(
    group_sweeps: &mut [Vec<(usize, SweepSum)>],
    stats: &mut [GroupStats],
    uss_total: &[(f64, usize)],
    any_gpu: bool,
) {
    for (g, list) in group_sweeps.iter_mut().enumerate() {
        list.sort_unstable_by_key(|(sweep, _)| *sweep);
        let st = &mut stats[g];
        let max_opt = |best: Option<u64>, v: Option<u64>| match (best, v) {
            (Some(b), Some(v)) => Some(b.max(v)),
            (b, v) => b.or(v),
        };
        for (_, sum) in list.iter() {
            st.agg_peak_uss = max_opt(st.agg_peak_uss, sum.uss);
            st.agg_peak_rss = max_opt(st.agg_peak_rss, sum.rss);
            st.agg_peak_pss = max_opt(st.agg_peak_pss, sum.pss);
            st.agg_peak_gpu_memory = max_opt(st.agg_peak_gpu_memory, sum.gpu_memory);
            // A sum made only of GPU rows has no CPU% to count.
            if sum.live > 0 {
                st.peak_cpu_percent = Some(
                    st.peak_cpu_percent
                        .map_or(sum.cpu_percent, |p| p.max(sum.cpu_percent)),
                );
            }
        }
        if any_gpu {
            st.agg_peak_gpu_memory.get_or_insert(0);
        }
        if uss_total[g].1 > 0 {
            st.avg_uss = Some(uss_total[g].0 / uss_total[g].1 as f64);
        }
    }
}

/// Per-process figures: peaks from the samples, CPU from the exit figures (or, for a process
/// without them, its last sample).
fn process_stats(data: &RunData) -> Vec<ProcStats> {
    let mut procs = vec![ProcStats::default(); data.processes.len()];
    let mut last_counters: Vec<Option<(i64, u64, u64)>> = vec![None; data.processes.len()];
    for s in &data.samples {
        let ps = &mut procs[s.process];
        if let Some(rss) = s.rss_bytes {
            ps.peak_rss = Some(ps.peak_rss.map_or(rss, |p| p.max(rss)));
        }
        if let Some(uss) = s.uss_bytes {
            ps.peak_uss = Some(ps.peak_uss.map_or(uss, |p| p.max(uss)));
        }
        ps.last_seen_ns = Some(ps.last_seen_ns.map_or(s.time_ns, |t| t.max(s.time_ns)));
        let last = &mut last_counters[s.process];
        if last.is_none_or(|(t, _, _)| s.time_ns >= t) {
            *last = Some((s.time_ns, s.cpu_user_ns, s.cpu_system_ns));
        }
    }
    for (i, p) in data.processes.iter().enumerate() {
        let ps = &mut procs[i];
        match (p.cpu_user_ns, p.cpu_system_ns) {
            (Some(u), Some(s)) => {
                ps.cpu_user_ns = u;
                ps.cpu_system_ns = s;
            }
            _ => {
                if let Some((_, u, s)) = last_counters[i] {
                    ps.cpu_user_ns = u;
                    ps.cpu_system_ns = s;
                }
                ps.cpu_from_samples = true;
            }
        }
        match p.peak_rss_bytes {
            Some(peak) => ps.peak_rss = Some(ps.peak_rss.map_or(peak, |x| x.max(peak))),
            None => ps.peak_rss_from_samples = ps.peak_rss.is_some(),
        }
    }
    procs
}

/// Each group's instances, CPU and peak RSS from its processes' figures, lifetime and average
/// CPU share.
fn add_lifetimes(
    data: &RunData,
    procs: &[ProcStats],
    first_group: &[usize],
    stats: &mut [GroupStats],
    t1_ns: i64,
) {
    for (i, p) in data.processes.iter().enumerate() {
        let st = &mut stats[first_group[i]];
        st.instances += 1;
        st.cpu_user_ns += procs[i].cpu_user_ns;
        st.cpu_system_ns += procs[i].cpu_system_ns;
        st.cpu_from_samples += usize::from(procs[i].cpu_from_samples);
        if let Some(peak) = procs[i].peak_rss {
            st.peak_rss_instance = Some(st.peak_rss_instance.map_or(peak, |x| x.max(peak)));
        }
        st.peak_rss_from_samples += usize::from(procs[i].peak_rss_from_samples);
        st.first_start_ns = st.first_start_ns.min(p.start_ns);
        st.last_end_ns = st
            .last_end_ns
            .max(p.end_ns.unwrap_or(t1_ns).max(p.start_ns));
    }
    for st in stats.iter_mut() {
        let duration = st.duration_ns();
        if duration > 0 {
            st.avg_cpu_percent = Some(st.cpu_ns() as f64 / duration as f64 * 100.0);
        }
    }
}

/// Each group's rank, largest first (CPU, then peak USS, then peak RSS, then name): the order
/// is the colour.
fn rank_groups(stats: &[GroupStats]) -> Vec<usize> {
    let mut order: Vec<usize> = (0..stats.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&stats[a], &stats[b]);
        b.cpu_ns()
            .cmp(&a.cpu_ns())
            .then(b.agg_peak_uss.cmp(&a.agg_peak_uss))
            .then(b.agg_peak_rss.cmp(&a.agg_peak_rss))
            .then(a.name.cmp(&b.name))
    });
    let mut rank = vec![0; order.len()];
    for (r, &g) in order.iter().enumerate() {
        rank[g] = r;
    }
    rank
}

/// Socket bytes each group's processes sent and received (processes.parquet `net_*`, exit
/// figures), by group; None for a group none of whose processes has them.
pub fn socket_bytes_per_group(data: &RunData, model: &Model) -> Vec<Option<SocketBytes>> {
    let mut sums: Vec<Option<SocketBytes>> = vec![None; model.groups.len()];
    for (i, p) in data.processes.iter().enumerate() {
        if let Some(bytes) = &p.socket_bytes {
            sums[model.group_of[i]]
                .get_or_insert_with(SocketBytes::default)
                .add(bytes);
        }
    }
    sums
}

/// One process in a top list.
#[derive(Clone, Debug, PartialEq)]
pub struct TopProcess {
    pub process: usize,
    pub cpu_ns: u64,
    pub peak_rss: Option<u64>,
    pub peak_uss: Option<u64>,
}

/// The `n` processes that used the most CPU time, most first (ties: earlier start first).
pub fn top_by_cpu(data: &RunData, model: &Model, n: usize) -> Vec<TopProcess> {
    top_by(data, model, n, |ps| {
        (ps.cpu_user_ns + ps.cpu_system_ns > 0).then_some(ps.cpu_user_ns + ps.cpu_system_ns)
    })
}

/// The `n` processes with the largest peak RSS (exit VmHWM or the largest sample), most first.
pub fn top_by_memory(data: &RunData, model: &Model, n: usize) -> Vec<TopProcess> {
    top_by(data, model, n, |ps| ps.peak_rss)
}

fn top_by(
    data: &RunData,
    model: &Model,
    n: usize,
    key: impl Fn(&ProcStats) -> Option<u64>,
) -> Vec<TopProcess> {
    let mut ranked: Vec<(u64, usize)> = model
        .procs
        .iter()
        .enumerate()
        .filter_map(|(i, ps)| key(ps).map(|k| (k, i)))
        .collect();
    ranked.sort_by(|a, b| {
        b.0.cmp(&a.0).then(
            data.processes[a.1]
                .start_ns
                .cmp(&data.processes[b.1].start_ns),
        )
    });
    ranked
        .into_iter()
        .take(n)
        .map(|(_, i)| {
            let ps = &model.procs[i];
            TopProcess {
                process: i,
                cpu_ns: ps.cpu_user_ns + ps.cpu_system_ns,
                peak_rss: ps.peak_rss,
                peak_uss: ps.peak_uss,
            }
        })
        .collect()
}

/// How a process ended, for people.
pub fn exit_text(p: &Process) -> String {
    match (p.exit_code, p.exit_signal) {
        (Some(code), _) => format!("exit {code}"),
        (None, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("{name} ({sig})"),
            None => format!("signal {sig}"),
        },
        _ if p.alive_at_end => "running at end".into(),
        _ => "unknown".into(),
    }
}

/// The name of the common signals.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    Some(match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        6 => "SIGABRT",
        7 => "SIGBUS",
        8 => "SIGFPE",
        9 => "SIGKILL",
        10 => "SIGUSR1",
        11 => "SIGSEGV",
        12 => "SIGUSR2",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        24 => "SIGXCPU",
        25 => "SIGXFSZ",
        _ => return None,
    })
}

/// A named series of (seconds since t0, value) points, with the group it draws (None for
/// "other" and for series that are not a group's).
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    pub name: String,
    pub group: Option<usize>,
    pub points: Vec<(f64, f64)>,
}

/// Groups beyond this many in one plot are summed into "other".
pub const TOP_GROUPS: usize = 8;

/// The `TOP_GROUPS` groups with the largest `score`, in group order, and the rest.
fn pick_top(scores: &[f64]) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..scores.len()).filter(|&g| scores[g] > 0.0).collect();
    order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
    let mut top: Vec<usize> = order.iter().copied().take(TOP_GROUPS).collect();
    top.sort_unstable();
    let rest = (0..scores.len()).filter(|g| !top.contains(g)).collect();
    (top, rest)
}

/// One value per sweep and group: `value` of its sums, 0 where it had no process.
fn dense(model: &Model, g: usize, value: impl Fn(&SweepSum) -> Option<f64>) -> Vec<f64> {
    let mut out = vec![0.0; model.sweeps.len()];
    for (sweep, sum) in &model.group_sweeps[g] {
        out[*sweep] = value(sum).unwrap_or(0.0);
    }
    out
}

/// Per-sweep series of the top groups by peak (and "other", the sum of the rest, when it is
/// not all zero). `value` picks the figure of a group's sums.
pub fn sweep_series(model: &Model, value: impl Fn(&SweepSum) -> Option<f64>) -> Vec<Series> {
    // Peaks from the sparse sums: dense arrays are made only for the plotted groups, so a run
    // with thousands of groups and sweeps stays small in memory.
    let peaks: Vec<f64> = model
        .group_sweeps
        .iter()
        .map(|list| {
            list.iter()
                .filter_map(|(_, sum)| value(sum))
                .fold(0.0, f64::max)
        })
        .collect();
    let (top, rest) = pick_top(&peaks);
    let xs: Vec<f64> = model.sweeps.iter().map(|&t| model.secs(t)).collect();
    let mut series: Vec<Series> = top
        .iter()
        .map(|&g| Series {
            name: model.groups[g].name.clone(),
            group: Some(g),
            points: xs.iter().copied().zip(dense(model, g, &value)).collect(),
        })
        .collect();
    let mut other = vec![0.0; xs.len()];
    for &g in &rest {
        for (sweep, sum) in &model.group_sweeps[g] {
            other[*sweep] += value(sum).unwrap_or(0.0);
        }
    }
    if other.iter().any(|&v| v > 0.0) {
        series.push(Series {
            name: format!("other ({} groups)", rest.len()),
            group: None,
            points: xs.into_iter().zip(other).collect(),
        });
    }
    series
}

/// CPU seconds used so far by each top group (by total CPU time) and "other", at every sweep,
/// every exit and the end. A process that exited keeps its final CPU time; one that is running
/// counts up to its latest sample.
pub fn cumulative_cpu(data: &RunData, model: &Model) -> Vec<Series> {
    // (time, process, cumulative ns): samples, then the exact exit figures at the end.
    let mut updates: Vec<(i64, usize, u64)> = data
        .samples
        .iter()
        .map(|s| (s.time_ns, s.process, s.cpu_user_ns + s.cpu_system_ns))
        .collect();
    for (i, p) in data.processes.iter().enumerate() {
        if let (Some(u), Some(s), Some(end)) = (p.cpu_user_ns, p.cpu_system_ns, p.end_ns) {
            updates.push((end, i, u + s));
        }
    }
    updates.sort_by_key(|u| u.0);
    let scores: Vec<f64> = model.groups.iter().map(|g| g.cpu_ns() as f64).collect();
    let (top, _) = pick_top(&scores);
    let slot: HashMap<usize, usize> = top.iter().enumerate().map(|(k, &g)| (g, k)).collect();
    let mut last = vec![0u64; data.processes.len()];
    let mut totals = vec![0.0f64; top.len() + 1];
    let mut points: Vec<Vec<(f64, f64)>> = vec![vec![(0.0, 0.0)]; top.len() + 1];
    let mut i = 0;
    while i < updates.len() {
        let t = updates[i].0;
        while i < updates.len() && updates[i].0 == t {
            let (_, p, value) = updates[i];
            // Counters only grow; a /proc read with clock-tick resolution can lag the exact
            // figure of an earlier row, so never go back.
            if value > last[p] {
                let k = slot.get(&model.group_of[p]).copied().unwrap_or(top.len());
                totals[k] += (value - last[p]) as f64 / 1e9;
                last[p] = value;
            }
            i += 1;
        }
        for (k, pts) in points.iter_mut().enumerate() {
            pts.push((model.secs(t), totals[k]));
        }
    }
    let end = model.secs(model.t1_ns);
    for (k, pts) in points.iter_mut().enumerate() {
        if pts.last().is_some_and(|p| p.0 < end) {
            pts.push((end, totals[k]));
        }
    }
    let rest = model.groups.len() - top.len();
    let mut series: Vec<Series> = top
        .iter()
        .enumerate()
        .map(|(k, &g)| Series {
            name: model.groups[g].name.clone(),
            group: Some(g),
            points: std::mem::take(&mut points[k]),
        })
        .collect();
    if totals[top.len()] > 0.0 {
        series.push(Series {
            name: format!("other ({rest} groups)"),
            group: None,
            points: std::mem::take(&mut points[top.len()]),
        });
    }
    series
}

/// Step series (as [`active_instances`] makes them: a jump is two points at one x) stacked: layer
/// k's value is the sum of layers 0..=k, with a jump wherever any layer jumps. Drawn as areas,
/// every layer stays readable where the separate lines would lie on top of each other.
pub fn stack_steps(series: &[Series]) -> Vec<Series> {
    let mut xs: Vec<f64> = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let mut stacked: Vec<Series> = series
        .iter()
        .map(|s| Series {
            name: s.name.clone(),
            group: s.group,
            points: Vec::with_capacity(2 * xs.len()),
        })
        .collect();
    // cursor[k]: how many points of series k lie before the current x (points are sorted).
    let mut cursors = vec![0usize; series.len()];
    for &x in &xs {
        let (mut below_before, mut below_after) = (0.0, 0.0);
        for (k, s) in series.iter().enumerate() {
            let pts = &s.points;
            while cursors[k] < pts.len() && pts[cursors[k]].0 < x {
                cursors[k] += 1;
            }
            let first = pts.first().map_or(0.0, |p| p.1);
            let before = cursors[k].checked_sub(1).map_or(first, |j| pts[j].1);
            let mut m = cursors[k];
            while m < pts.len() && pts[m].0 <= x {
                m += 1;
            }
            let after = if m > cursors[k] { pts[m - 1].1 } else { before };
            below_before += before;
            below_after += after;
            let out = &mut stacked[k].points;
            out.push((x, below_before));
            if below_after != below_before {
                out.push((x, below_after));
            }
        }
    }
    stacked
}

/// Every start (+1) and end (-1) of a process, with its group, in time order.
fn lifetime_changes(data: &RunData, model: &Model) -> Vec<(i64, i32, usize)> {
    let mut changes: Vec<(i64, i32, usize)> = Vec::with_capacity(2 * data.processes.len());
    for (i, p) in data.processes.iter().enumerate() {
        let g = model.group_of[i];
        changes.push((p.start_ns, 1, g));
        changes.push((model.end_of(p), -1, g));
    }
    // At one moment, ends before starts: a process replaced by another is not an overlap.
    changes.sort_by_key(|c| (c.0, c.1));
    changes
}

/// How many processes of the tree were alive, as exact steps at every start and end (a jump
/// is two points at one x), from 0 at the start to the end of the data: the parallelism the
/// tree had, processes shorter than the sampling interval included.
pub fn running_processes(data: &RunData, model: &Model) -> Series {
    let changes = lifetime_changes(data, model);
    let mut points = vec![(0.0, 0.0)];
    let mut live = 0i64;
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        let before = live;
        while i < changes.len() && changes[i].0 == t {
            live += i64::from(changes[i].1);
            i += 1;
        }
        if live != before {
            let x = model.secs(t);
            points.push((x, before as f64));
            points.push((x, live as f64));
        }
    }
    let end = model.secs(model.t1_ns);
    if points.last().is_some_and(|p| p.0 < end) {
        points.push((end, live as f64));
    }
    Series {
        name: "processes alive".into(),
        group: None,
        points,
    }
}

/// The tree's threads on a CPU, and on a CPU or runnable, between sweeps, from every row of
/// samples.parquet, exit rows included: each row covers the time since its process's previous
/// row (or its start) with its `cpu_percent` and `run_queue_percent`, spread over the sweep
/// intervals it covers, as montrace spreads them for run.json `time.serial_share`
/// ([`crate::analysis::critical::Load`]). Empty without samples.
pub fn load(data: &RunData, model: &Model) -> Vec<crate::analysis::critical::Interval> {
    let mut load = crate::analysis::critical::Load::new(model.t0_ns);
    for &sweep in &model.sweeps {
        load.sweep(sweep);
    }
    let mut order: Vec<usize> = (0..data.samples.len()).collect();
    order.sort_by_key(|&i| {
        let s = &data.samples[i];
        (s.process, s.time_ns, s.exit)
    });
    let mut last: Option<(usize, i64)> = None;
    for i in order {
        let s = &data.samples[i];
        let from = match last {
            Some((process, time_ns)) if process == s.process => time_ns,
            _ => data.processes[s.process].start_ns,
        };
        last = Some((s.process, s.time_ns));
        if let Some(cpu) = s.cpu_percent {
            let waiting = s.run_queue_percent.unwrap_or(0.0);
            load.add(from, s.time_ns, cpu / 100.0, waiting / 100.0);
        }
    }
    if data.samples.is_empty() {
        return Vec::new();
    }
    load.intervals(model.t1_ns)
}

/// A value per interval as steps: flat over each interval, a jump between them.
pub fn interval_steps(
    model: &Model,
    intervals: &[crate::analysis::critical::Interval],
    name: &str,
    value: impl Fn(&crate::analysis::critical::Interval) -> f64,
) -> Series {
    Series {
        name: name.into(),
        group: None,
        points: intervals
            .iter()
            .flat_map(|i| {
                let v = value(i);
                [(model.secs(i.start_ns), v), (model.secs(i.end_ns), v)]
            })
            .collect(),
    }
}

/// How many processes of each top group (by peak) were alive, as exact steps at every start
/// and end, so processes shorter than the sampling interval count too.
pub fn active_instances(data: &RunData, model: &Model) -> Vec<Series> {
    let groups = model.groups.len();
    let changes = lifetime_changes(data, model);
    let mut live = vec![0i64; groups];
    let mut peak = vec![0.0f64; groups];
    for &(_, d, g) in &changes {
        live[g] += i64::from(d);
        peak[g] = peak[g].max(live[g] as f64);
    }
    let (top, _) = pick_top(&peak);
    let slot: HashMap<usize, usize> = top.iter().enumerate().map(|(k, &g)| (g, k)).collect();
    let mut counts = vec![0i64; top.len() + 1];
    let mut points: Vec<Vec<(f64, f64)>> = vec![vec![(0.0, 0.0)]; top.len() + 1];
    let mut i = 0;
    while i < changes.len() {
        let t = changes[i].0;
        let before = counts.clone();
        while i < changes.len() && changes[i].0 == t {
            let (_, d, g) = changes[i];
            counts[slot.get(&g).copied().unwrap_or(top.len())] += i64::from(d);
            i += 1;
        }
        let x = model.secs(t);
        for k in 0..counts.len() {
            if counts[k] != before[k] {
                points[k].push((x, before[k] as f64));
                points[k].push((x, counts[k] as f64));
            }
        }
    }
    let end = model.secs(model.t1_ns);
    let rest = groups - top.len();
    let mut series: Vec<Series> = Vec::new();
    for (k, mut pts) in points.into_iter().enumerate() {
        if pts.len() == 1 {
            continue;
        }
        if pts.last().is_some_and(|p| p.0 < end) {
            let y = pts.last().map_or(0.0, |p| p.1);
            pts.push((end, y));
        }
        let (name, group) = match top.get(k) {
            Some(&g) => (model.groups[g].name.clone(), Some(g)),
            None => (format!("other ({rest} groups)"), None),
        };
        series.push(Series {
            name,
            group,
            points: pts,
        });
    }
    series
}

#[cfg(test)]
mod tests;
