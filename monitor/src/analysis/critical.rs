//! Why it took that long, from the exact tree: the critical path (the chain of processes that
//! bounded the command's wall time) and the average parallelism. Pure: plain functions over the
//! processes' spans, which the recorder keeps as they end.
//!
//! The critical path is found backwards, as the last arrival: a process's end was held up by
//! the child that ended last before it; that child could start only after the child of the
//! same parent that ended last before its start; and so on back to the parent's own start (for
//! `make`, the steps of a dependency chain, in order). A step whose own children's chain covers
//! most of its time is replaced by that chain (`sh -c 'cc ...'` becomes its `cc`), so the steps
//! are the processes that did the work.
//!
//! How many processes were busy over time (on a CPU or runnable) comes from the samples instead
//! ([`Load`]): the exact tree says when a process was alive, not whether it was doing anything
//! (a `make` waiting for its children is alive and asleep).
use std::collections::HashMap;

pub use crate::store::model::{Step, TimeAnalysis};

/// One process as the analysis needs it.
#[derive(Clone, Debug, PartialEq)]
pub struct Span {
    pub pid: u32,
    pub start_ns: i64,
    pub parent: Option<(u32, i64)>,
    /// None: still running at the end (the run's end stands for it).
    pub end_ns: Option<i64>,
    pub cpu_ns: u64,
    pub run_queue_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    /// Its command line (or program, or comm), cut for display.
    pub command: String,
}

/// Longest command kept per step.
pub const COMMAND_CHARS: usize = 120;

/// Steps kept in run.json at most: the longest ones, in order (a shell loop of 20,000 short
/// commands has a path of 20,000 steps; `critical_path_steps` counts them all).
pub const KEPT_STEPS: usize = 1000;

/// Analyses the spans of a run over the command's wall time `wall_ns`. The command is the
/// earliest process without a parent in the tree. `serial_share` comes from the samples
/// ([`Load::serial_share`]).
pub fn analyse(spans: &[Span], wall_ns: u64, serial_share: Option<f64>) -> TimeAnalysis {
    let wall = wall_ns.max(1) as f64;
    let cpu: u64 = spans.iter().map(|s| s.cpu_ns).sum();
    let busy: u64 = spans
        .iter()
        .map(|s| s.cpu_ns + s.run_queue_ns.unwrap_or(0))
        .sum();
    let Some(root) = spans
        .iter()
        .enumerate()
        .filter(|(_, s)| s.parent.is_none())
        .min_by_key(|(_, s)| s.start_ns)
        .map(|(i, _)| i)
    else {
        return TimeAnalysis {
            serial_share,
            ..TimeAnalysis::default()
        };
    };
    let run_end = spans.iter().filter_map(|s| s.end_ns).max().unwrap_or(0);
    let end_of = |s: &Span| s.end_ns.unwrap_or(run_end);
    let mut children: HashMap<(u32, i64), Vec<usize>> = HashMap::new();
    for (i, s) in spans.iter().enumerate() {
        if let Some(parent) = s.parent {
            children.entry(parent).or_default().push(i);
        }
    }
    let mut steps = Vec::new();
    expand(spans, &children, root, &end_of, &mut steps, 0);
    let origin = spans[root].start_ns;
    let critical_path: Vec<Step> = steps
        .iter()
        .map(|&i| {
            let s = &spans[i];
            Step {
                pid: s.pid,
                command: s.command.clone(),
                start_s: (s.start_ns - origin) as f64 / 1e9,
                duration_s: (end_of(s) - s.start_ns).max(0) as f64 / 1e9,
                cpu_s: s.cpu_ns as f64 / 1e9,
                run_queue_s: s.run_queue_ns.map(|v| v as f64 / 1e9),
                blocked_s: s.blocked_ns.map(|v| v as f64 / 1e9),
            }
        })
        .collect();
    TimeAnalysis {
        critical_path_s: critical_path.iter().map(|s| s.duration_s).sum(),
        critical_path_steps: critical_path.len(),
        critical_path: longest(&critical_path, KEPT_STEPS)
            .into_iter()
            .cloned()
            .collect(),
        avg_parallelism: busy as f64 / wall,
        avg_cores_used: cpu as f64 / wall,
        serial_share,
    }
}

/// The tree's processes on a CPU and runnable over time, sweep interval by sweep interval, from
/// the samples: each row of a process covers the time since its previous row (or its start)
/// with its `cpu_percent` and `run_queue_percent`, which are spread evenly over that time and
/// added, by overlap, to the intervals between sweeps it covers. The recorder adds rows as it
/// writes them and the report as it reads them back: one computation for run.json's
/// `serial_share` and the report's parallelism plot.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Load {
    /// Interval `i` starts at `bounds[i]` and ends at `bounds[i + 1]` (the last one at the end
    /// of the run); `bounds[0]` is the command's start. Increasing.
    bounds: Vec<i64>,
    /// Per interval, in CPU-ns: time on a CPU, time on a CPU or runnable, and busy time with
    /// each process counted once (a process busy on four threads is one busy process).
    used: Vec<f64>,
    wanted: Vec<f64>,
    busy: Vec<f64>,
    /// The intervals before `bounds[0]` that [`Load::fold_older`] folded away: their serial
    /// time and their length, ns (the command's start was `bounds[0]` before any fold).
    folded_serial_ns: f64,
    folded_ns: f64,
}

/// One interval between sweeps, with the average number of the tree's threads on a CPU
/// (`cores_used`), on a CPU or runnable (`cores_wanted`), and of its processes busy either way
/// (`busy_processes`, each process at most 1).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Interval {
    pub start_ns: i64,
    pub end_ns: i64,
    pub cores_used: f64,
    pub cores_wanted: f64,
    pub busy_processes: f64,
}

impl Load {
    /// A load from the command's start: whatever happened before it does not count.
    pub fn new(origin_ns: i64) -> Load {
        Load {
            bounds: vec![origin_ns],
            used: vec![0.0],
            wanted: vec![0.0],
            busy: vec![0.0],
            folded_serial_ns: 0.0,
            folded_ns: 0.0,
        }
    }

    /// Keeps at most about `2 * keep` intervals, folding the older ones into the serial share, so
    /// that a long run's load stays small: a row that reaches back before the kept intervals
    /// (a process left unread for `keep` sweeps) loses the part that does.
    pub fn fold_older(&mut self, keep: usize) {
        let keep = keep.max(1);
        if self.bounds.len() <= 2 * keep {
            return;
        }
        let fold = self.bounds.len() - keep;
        for i in 0..fold {
            let length = (self.bounds[i + 1] - self.bounds[i]) as f64;
            self.folded_serial_ns += serial_ns(length, self.busy[i] / length);
            self.folded_ns += length;
        }
        self.bounds.drain(..fold);
        self.used.drain(..fold);
        self.wanted.drain(..fold);
        self.busy.drain(..fold);
    }

    /// A sweep at `at_ns`: the interval before it ends there. A sweep not after the last bound
    /// starts nothing.
    pub fn sweep(&mut self, at_ns: i64) {
        if self.bounds.last().is_some_and(|&last| at_ns > last) {
            self.bounds.push(at_ns);
            self.used.push(0.0);
            self.wanted.push(0.0);
            self.busy.push(0.0);
        }
    }

    /// One row of a process: over `from_ns..to_ns` it used `cpus` CPUs on average
    /// (`cpu_percent / 100`) and had `waiting` threads runnable (`run_queue_percent / 100`).
    pub fn add(&mut self, from_ns: i64, to_ns: i64, cpus: f64, waiting: f64) {
        let (cpus, waiting) = (cpus.max(0.0), waiting.max(0.0));
        if to_ns <= from_ns || !cpus.is_finite() || !waiting.is_finite() {
            return;
        }
        let busy = (cpus + waiting).min(1.0);
        // The interval holding `to_ns`, then back to the one holding `from_ns`.
        let Some(mut i) = self.bounds.partition_point(|&b| b < to_ns).checked_sub(1) else {
            return;
        };
        loop {
            let start = self.bounds[i];
            let end = self.bounds.get(i + 1).copied().unwrap_or(i64::MAX);
            let overlap = (to_ns.min(end) - from_ns.max(start)).max(0) as f64;
            self.used[i] += cpus * overlap;
            self.wanted[i] += (cpus + waiting) * overlap;
            self.busy[i] += busy * overlap;
            if start <= from_ns || i == 0 {
                break;
            }
            i -= 1;
        }
    }

    /// The intervals up to `end_ns`, the end of the run (the last sweep's interval ends there),
    /// but those folded away.
    pub fn intervals(&self, end_ns: i64) -> Vec<Interval> {
        (0..self.bounds.len())
            .filter_map(|i| {
                let start_ns = self.bounds[i];
                let end_ns = self
                    .bounds
                    .get(i + 1)
                    .copied()
                    .unwrap_or(end_ns)
                    .min(end_ns);
                let length = (end_ns - start_ns) as f64;
                (length > 0.0).then(|| Interval {
                    start_ns,
                    end_ns,
                    cores_used: self.used[i] / length,
                    cores_wanted: self.wanted[i] / length,
                    busy_processes: self.busy[i] / length,
                })
            })
            .collect()
    }

    /// The share of the time from the start to `end_ns` during which at most one process was
    /// busy (on a CPU or runnable). Only the average count of busy processes `b` of each
    /// interval is known, so an interval counts for `clamp(2 - b, 0, 1)` of its length: all
    /// of it when `b <= 1`, none when `b >= 2`, and between, the time with two busy taken as
    /// `(b - 1)` of it. Exact when, all through each interval, the count of busy processes
    /// stays either within 0..=1, or within 1..=2, or at 2 and more; a process counts by its
    /// average over each of its rows (a process busy half of its row's time is half a busy
    /// process all along). None when no time passed.
    pub fn serial_share(&self, end_ns: i64) -> Option<f64> {
        let (mut serial, mut total) = (self.folded_serial_ns, self.folded_ns);
        for i in self.intervals(end_ns) {
            let length = (i.end_ns - i.start_ns) as f64;
            serial += serial_ns(length, i.busy_processes);
            total += length;
        }
        (total > 0.0).then(|| serial / total)
    }
}

/// The serial part of an interval of `length` ns with `busy` processes busy on average.
fn serial_ns(length: f64, busy: f64) -> f64 {
    length * (2.0 - busy).clamp(0.0, 1.0)
}

/// The `n` longest of `steps` (the earlier of equal ones), in their order.
pub fn longest(steps: &[Step], n: usize) -> Vec<&Step> {
    if steps.len() <= n {
        return steps.iter().collect();
    }
    let mut by_length: Vec<usize> = (0..steps.len()).collect();
    by_length.sort_by(|&a, &b| {
        steps[b]
            .duration_s
            .total_cmp(&steps[a].duration_s)
            .then(a.cmp(&b))
    });
    by_length.truncate(n);
    by_length.sort_unstable();
    by_length.into_iter().map(|i| &steps[i]).collect()
}

/// The chain of `parent`'s children that held up its end, latest first back to its start.
fn chain(
    spans: &[Span],
    children: &HashMap<(u32, i64), Vec<usize>>,
    parent: usize,
    end_of: &impl Fn(&Span) -> i64,
) -> Vec<usize> {
    let p = &spans[parent];
    let Some(kids) = children.get(&(p.pid, p.start_ns)) else {
        return Vec::new();
    };
    // The last arrival before `until`, again and again: one pass over the children latest end
    // first (ties: the earlier start), as `until` only moves back (a shell loop of 20,000
    // commands is one sort, not a search per step).
    let mut order: Vec<usize> = kids
        .iter()
        .copied()
        .filter(|&k| spans[k].start_ns >= p.start_ns)
        .collect();
    order.sort_by_key(|&k| (std::cmp::Reverse(end_of(&spans[k])), spans[k].start_ns));
    let mut until = end_of(p);
    let mut found = Vec::new();
    for k in order {
        if end_of(&spans[k]) <= until {
            found.push(k);
            until = spans[k].start_ns;
        }
    }
    found.reverse();
    found
}

/// Appends the steps of `span`: its chain's steps when they cover most of its time, else itself.
fn expand(
    spans: &[Span],
    children: &HashMap<(u32, i64), Vec<usize>>,
    span: usize,
    end_of: &impl Fn(&Span) -> i64,
    steps: &mut Vec<usize>,
    depth: usize,
) {
    let sub = chain(spans, children, span, end_of);
    let own = (end_of(&spans[span]) - spans[span].start_ns).max(0);
    let covered: i64 = sub
        .iter()
        .map(|&k| (end_of(&spans[k]) - spans[k].start_ns).max(0))
        .sum();
    // A deep tree cannot overflow the stack: past this depth a process stands for its subtree.
    if depth < 256 && !sub.is_empty() && covered * 2 >= own {
        for k in sub {
            expand(spans, children, k, end_of, steps, depth + 1);
        }
    } else {
        steps.push(span);
    }
}

/// A command line for a step, cut at [`COMMAND_CHARS`].
pub fn command_of(argv: Option<&[String]>, filename: Option<&str>, comm: &str) -> String {
    let text = match (argv, filename) {
        (Some(argv), _) if !argv.is_empty() => argv.join(" "),
        (_, Some(filename)) => filename.to_owned(),
        _ => comm.to_owned(),
    };
    match text.char_indices().nth(COMMAND_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: i64 = 1_000_000;

    /// A process of pid `pid`; its parent (if any) started at 0.
    fn span(pid: u32, parent: Option<u32>, start_ms: i64, end_ms: i64, cpu_ms: i64) -> Span {
        Span {
            pid,
            start_ns: start_ms * MS,
            parent: parent.map(|p| (p, 0)),
            end_ns: Some(end_ms * MS),
            cpu_ns: (cpu_ms * MS) as u64,
            run_queue_ns: Some(0),
            blocked_ns: Some(0),
            command: format!("p{pid}"),
        }
    }

    /// make (1) runs A (2), B (3), C (4) one after the other, 300 ms each, beside 20 short
    /// jobs (10..30) of 20 ms.
    fn make_tree() -> Vec<Span> {
        let mut spans = vec![span(1, None, 0, 905, 5)];
        for (i, pid) in [2u32, 3, 4].iter().enumerate() {
            let start = i as i64 * 300 + 1;
            spans.push(span(*pid, Some(1), start, start + 300, 290));
        }
        for j in 0..20 {
            let start = 2 + (j / 3) * 21;
            spans.push(span(10 + j as u32, Some(1), start, start + 20, 18));
        }
        spans
    }

    #[test]
    fn the_chain_of_a_make_is_its_dependency_chain_in_order() {
        let spans = make_tree();
        let t = analyse(&spans, 905 * MS as u64, None);
        let pids: Vec<u32> = t.critical_path.iter().map(|s| s.pid).collect();
        assert_eq!(pids, [2, 3, 4]);
        assert!((t.critical_path_s - 0.9).abs() < 1e-9, "{t:?}");
        assert_eq!(t.critical_path[1].start_s, 0.301);
        let cpu_s = (5 + 3 * 290 + 20 * 18) as f64 / 1e3;
        assert!((t.avg_cores_used - cpu_s / 0.905).abs() < 1e-9);
        assert!(
            (t.avg_parallelism - t.avg_cores_used).abs() < 1e-9,
            "no run-queue delay"
        );
    }

    #[test]
    fn a_wrapper_shell_gives_way_to_the_process_it_waited_for() {
        // sh (1) -> sh -c (2) -> cc (3), which did the work.
        let spans = vec![
            span(1, None, 0, 1000, 1),
            Span {
                parent: Some((1, 0)),
                ..span(2, None, 1, 999, 1)
            },
            Span {
                parent: Some((2, MS)),
                ..span(3, None, 2, 998, 990)
            },
        ];
        let t = analyse(&spans, 1000 * MS as u64, None);
        assert_eq!(t.critical_path.len(), 1);
        assert_eq!(t.critical_path[0].pid, 3);
        // A process busy on its own, with one short child, stays a step itself.
        let spans = vec![
            span(1, None, 0, 1000, 900),
            Span {
                parent: Some((1, 0)),
                ..span(2, None, 10, 20, 5)
            },
        ];
        let t = analyse(&spans, 1000 * MS as u64, None);
        let pids: Vec<u32> = t.critical_path.iter().map(|s| s.pid).collect();
        assert_eq!(pids, [1]);
    }

    #[test]
    fn parallelism_counts_the_wait_for_a_cpu() {
        // Four burners of 1 s on two cores: 0.5 s on a CPU, 0.5 s waiting each.
        let mut spans = vec![span(1, None, 0, 1000, 0)];
        for pid in 2..6 {
            spans.push(Span {
                parent: Some((1, 0)),
                run_queue_ns: Some(500 * MS as u64),
                ..span(pid, None, 0, 1000, 500)
            });
        }
        let t = analyse(&spans, 1000 * MS as u64, None);
        assert!((t.avg_cores_used - 2.0).abs() < 1e-9);
        assert!((t.avg_parallelism - 4.0).abs() < 1e-9);
    }

    #[test]
    fn still_running_processes_end_with_the_run_and_no_process_gives_nothing() {
        let mut spans = vec![span(1, None, 0, 500, 1)];
        spans.push(Span {
            parent: Some((1, 0)),
            end_ns: None,
            ..span(2, None, 1, 0, 1)
        });
        let t = analyse(&spans, 500 * MS as u64, None);
        assert_eq!(t.critical_path.len(), 1);
        assert_eq!(t.critical_path[0].pid, 2);
        assert!((t.critical_path[0].duration_s - 0.499).abs() < 1e-9);
        assert_eq!(analyse(&[], 1, None), TimeAnalysis::default());
    }

    #[test]
    fn a_shell_loop_of_20000_commands_is_a_path_of_20000_steps_kept_longest_first() {
        // sh (1) runs 20,000 commands one after another, 1 ms each, the 7th of every 1,000
        // 2 ms: one pass per parent, not a search per step.
        let mut spans = vec![span(1, None, 0, 0, 1)];
        let mut at = 0;
        for i in 0..20_000u32 {
            let length = if i % 1000 == 7 { 2 } else { 1 };
            spans.push(span(i + 2, Some(1), at, at + length, length));
            at += length;
        }
        spans[0].end_ns = Some(at * MS);
        let t = analyse(&spans, (at * MS) as u64, None);
        assert_eq!(t.critical_path_steps, 20_000);
        assert!(
            (t.critical_path_s - 20.02).abs() < 1e-6,
            "{}",
            t.critical_path_s
        );
        assert_eq!(t.critical_path.len(), KEPT_STEPS);
        // The 20 long ones first, then the earliest short ones, all in time order.
        let pids: Vec<u32> = t.critical_path.iter().map(|s| s.pid).collect();
        assert!(pids.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(
            t.critical_path
                .iter()
                .filter(|s| s.duration_s > 0.0015)
                .count(),
            20
        );
        // Commands 0..=980 but the long 7th, pids 2..=982 but 9, are the short ones kept.
        let short: Vec<u32> = t
            .critical_path
            .iter()
            .filter(|s| s.duration_s < 0.0015)
            .map(|s| s.pid)
            .collect();
        assert_eq!(short, (2..=982).filter(|&p| p != 9).collect::<Vec<_>>());
        assert_eq!(pids[KEPT_STEPS - 1], 19_009);
    }

    #[test]
    fn commands_are_cut_for_display() {
        let long = vec!["x".repeat(200)];
        let text = command_of(Some(&long), None, "c");
        assert_eq!(text.chars().count(), COMMAND_CHARS + 1);
        assert_eq!(command_of(None, Some("/bin/true"), "true"), "/bin/true");
        assert_eq!(command_of(Some(&[]), None, "kworker"), "kworker");
    }

    /// A load from 0 with sweeps every 200 ms up to `sweeps` × 200 ms.
    fn load(sweeps: i64) -> Load {
        let mut load = Load::new(0);
        for k in 1..=sweeps {
            load.sweep(k * 200 * MS);
        }
        load
    }

    #[test]
    fn a_serial_chain_is_serial_and_burners_together_are_not() {
        // make (asleep, a little CPU) runs three steps of 300 ms one after another, each on a
        // CPU all along; rows every 200 ms and at each exit.
        let mut serial = load(4);
        serial.add(0, 900 * MS, 0.01, 0.0);
        for (from, to) in [
            (0, 200),
            (200, 300),
            (300, 400),
            (400, 600),
            (600, 800),
            (800, 900),
        ] {
            serial.add(from * MS, to * MS, 1.0, 0.0);
        }
        let share = serial.serial_share(900 * MS).unwrap();
        assert!((share - 0.99).abs() < 1e-9, "{share}");
        // Four burners of 1 s on two cores: each on a CPU half the time, waiting the rest.
        let mut burners = load(5);
        for _ in 0..4 {
            burners.add(0, 1000 * MS, 0.5, 0.5);
        }
        assert_eq!(burners.serial_share(1000 * MS), Some(0.0));
        let i = burners.intervals(1000 * MS);
        assert_eq!(i.len(), 5);
        assert!(i.iter().all(|i| (i.cores_used - 2.0).abs() < 1e-9
            && (i.cores_wanted - 4.0).abs() < 1e-9
            && (i.busy_processes - 4.0).abs() < 1e-9));
        // A sleeping tree is serial: nothing ran beside anything.
        let mut idle = load(1);
        idle.add(0, 300 * MS, 0.0, 0.0);
        assert_eq!(idle.serial_share(300 * MS), Some(1.0));
    }

    #[test]
    fn one_busy_process_counts_once_however_many_threads() {
        // A process with four threads on four CPUs, alone: serial, using four cores.
        let mut load = load(1);
        load.add(0, 400 * MS, 4.0, 0.0);
        assert_eq!(load.serial_share(400 * MS), Some(1.0));
        let i = load.intervals(400 * MS);
        assert_eq!(
            i.iter().map(|i| i.cores_used).collect::<Vec<_>>(),
            [4.0, 4.0]
        );
        assert_eq!(
            i.iter().map(|i| i.busy_processes).collect::<Vec<_>>(),
            [1.0, 1.0]
        );
    }

    #[test]
    fn rows_are_spread_over_the_intervals_they_cover_and_clipped_to_the_start() {
        // Sweeps at 200 and 400 ms; a row from -100 ms (before the command started: not
        // counted) to 300 ms at one CPU; a row from 300 to 500 ms waiting all along; a second
        // process busy from 100 to 200 ms.
        let mut load = load(2);
        load.add(-100 * MS, 300 * MS, 1.0, 0.0);
        load.add(300 * MS, 500 * MS, 0.0, 1.0);
        load.add(100 * MS, 200 * MS, 1.0, 0.0);
        let i = load.intervals(600 * MS);
        let ends: Vec<(i64, i64)> = i.iter().map(|i| (i.start_ns / MS, i.end_ns / MS)).collect();
        assert_eq!(ends, [(0, 200), (200, 400), (400, 600)]);
        let used: Vec<f64> = i.iter().map(|i| i.cores_used).collect();
        assert_eq!(used, [1.5, 0.5, 0.0]);
        let wanted: Vec<f64> = i.iter().map(|i| i.cores_wanted).collect();
        assert_eq!(wanted, [1.5, 1.0, 0.5]);
        // 1.5 busy on average in the first 200 ms: half of it counts as serial, the rest all.
        let share = load.serial_share(600 * MS).unwrap();
        assert!((share - 500.0 / 600.0).abs() < 1e-9, "{share}");
        // Nothing before the start, no time, no share; a sweep not after the last is no bound.
        let mut empty = Load::new(0);
        empty.add(-200 * MS, -100 * MS, 1.0, 0.0);
        empty.sweep(0);
        assert_eq!(empty.intervals(0), []);
        assert_eq!(empty.serial_share(0), None);
        assert_eq!(empty.serial_share(100 * MS), Some(1.0));
    }

    #[test]
    fn folding_the_older_intervals_keeps_the_serial_share() {
        // 1,000 sweeps 200 ms apart: a serial second, then a parallel one, in turn; rows every
        // sweep, and one reaching back over 3 intervals.
        let mut whole = load(0);
        let mut folded = load(0);
        // As the recorder does: folding at every sweep, rows added after it.
        for (l, fold) in [(&mut whole, false), (&mut folded, true)] {
            for k in 1..=1000i64 {
                l.sweep(k * 200 * MS);
                if fold {
                    l.fold_older(16);
                }
                let processes = if (k / 5) % 2 == 0 { 1 } else { 2 };
                for _ in 0..processes {
                    l.add((k - 1) * 200 * MS, k * 200 * MS, 1.0, 0.0);
                }
                if k % 100 == 0 {
                    l.add((k - 3) * 200 * MS, k * 200 * MS, 0.5, 0.0);
                }
            }
        }
        let end = 1000 * 200 * MS + 100 * MS;
        let (a, b) = (
            whole.serial_share(end).unwrap(),
            folded.serial_share(end).unwrap(),
        );
        assert!((a - b).abs() < 1e-9, "{a} {b}");
        assert!(folded.intervals(end).len() <= 32);
        // Half the time one process was busy, half two.
        assert!(a > 0.45 && a < 0.55, "{a}");
    }

    #[test]
    fn the_analysis_carries_the_serial_share() {
        let spans = make_tree();
        // Two processes busy all along.
        let mut load = Load::new(0);
        load.add(0, 905 * MS, 1.0, 0.0);
        load.add(0, 905 * MS, 0.5, 0.5);
        let share = load.serial_share(905 * MS);
        assert_eq!(share, Some(0.0));
        let t = analyse(&spans, 905 * MS as u64, share);
        assert_eq!(t.serial_share, Some(0.0));
        assert_eq!(analyse(&[], 1, share).serial_share, Some(0.0));
    }
}
