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
use std::collections::HashMap;

use serde::{Deserialize, Serialize};

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

/// One step of the critical path.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    pub pid: u32,
    pub command: String,
    /// Seconds after the command started.
    pub start_s: f64,
    pub duration_s: f64,
    pub cpu_s: f64,
    /// Waiting for a CPU and blocked (D state), when known (BTF tracepoints).
    pub run_queue_s: Option<f64>,
    pub blocked_s: Option<f64>,
}

/// run.json `time`: where the command's wall time went.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct TimeAnalysis {
    /// The steps that bounded the wall time, in order.
    pub critical_path: Vec<Step>,
    /// Their durations summed: the wall time no amount of parallelism would have saved.
    pub critical_path_s: f64,
    /// The steps on the path, kept or not (`critical_path` keeps the [`KEPT_STEPS`] longest).
    #[serde(default)]
    pub critical_path_steps: usize,
    /// Processes running or waiting to run, on average over the wall time: the tree's CPU time
    /// plus its run-queue delay (when known), over the wall time.
    pub avg_parallelism: f64,
    /// CPUs' worth of time used, on average: the tree's CPU time over the wall time.
    pub avg_cores_used: f64,
}

/// Analyses the spans of a run over the command's wall time `wall_ns`. The command is the
/// earliest process without a parent in the tree.
pub fn analyse(spans: &[Span], wall_ns: u64) -> TimeAnalysis {
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
        return TimeAnalysis::default();
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
    }
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
        let t = analyse(&spans, 905 * MS as u64);
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
        let t = analyse(&spans, 1000 * MS as u64);
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
        let t = analyse(&spans, 1000 * MS as u64);
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
        let t = analyse(&spans, 1000 * MS as u64);
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
        let t = analyse(&spans, 500 * MS as u64);
        assert_eq!(t.critical_path.len(), 1);
        assert_eq!(t.critical_path[0].pid, 2);
        assert!((t.critical_path[0].duration_s - 0.499).abs() < 1e-9);
        assert_eq!(analyse(&[], 1), TimeAnalysis::default());
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
        let t = analyse(&spans, (at * MS) as u64);
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
}
