//! The pure parts of repeated measurements: the interleaved order of an A/B series, the share of
//! the machine other work took during a repetition, and the warnings that say a series measured
//! something other than the work (a no-op after a warm-up, a few milliseconds, a busy machine).

/// One side of an interleaved A/B series.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arm {
    Baseline,
    Candidate,
}

impl Arm {
    pub fn name(self) -> &'static str {
        match self {
            Arm::Baseline => "baseline",
            Arm::Candidate => "candidate",
        }
    }
}

/// The order of `n` repetitions of each side: A B B A A B B A ..., blocks of "A B" and "B A"
/// alternating, so that a drift of the machine that is linear in time (a warming CPU, a
/// neighbour winding down) falls equally on both sides and cannot pose as a difference.
pub fn interleaved(n: usize) -> Vec<Arm> {
    (0..n)
        .flat_map(|i| {
            if i % 2 == 0 {
                [Arm::Baseline, Arm::Candidate]
            } else {
                [Arm::Candidate, Arm::Baseline]
            }
        })
        .collect()
}

/// The pair counts at which a series that adds pairs (from `min` to `max`) looks at its data:
/// `min`, then half as many again each time (at least one more), and `max`. Each look is a
/// chance for noise to clear a bound, and the level is divided among them (Bonferroni), so a
/// series that looked after every pair would pay for 26 looks from 5 to 30 pairs; this schedule
/// pays for 6 (5, 8, 12, 18, 27, 30), and a series that is decided runs at most half as many
/// pairs again as it needed. A series of `min` pairs (no budget) looks once.
pub fn look_schedule(min: usize, max: usize) -> Vec<usize> {
    let min = min.max(1);
    let mut looks = vec![min];
    let mut n = min;
    while n < max {
        n = (n + n.div_ceil(2)).max(n + 1).min(max);
        looks.push(n);
    }
    looks
}

/// Most runs one series may have, warm-ups and repetitions together: each is a whole run of the
/// command and a directory. A larger count is a slip of the keyboard, and summing two `u32`s
/// near the top once wrapped (`--warmup 4294967295 --repeat 2` ran the command once... or never,
/// and exited 0).
pub const MAX_RUNS: u32 = 10_000;

/// The number of runs of a series of `warmup` warm-ups and `repeat` measured repetitions, or why
/// it is refused (for the user, naming the flags).
pub fn series_length(warmup: u32, repeat: u32) -> Result<u32, String> {
    match warmup.checked_add(repeat) {
        Some(total) if total <= MAX_RUNS => Ok(total),
        _ => Err(format!(
            "--warmup {warmup} with --repeat {repeat}: at most {MAX_RUNS} runs in one series, \
             warm-ups included"
        )),
    }
}

/// The order of pair `k` (from 0) of an interleaved series: A B, then B A, alternately, as
/// [`interleaved`] lays them out; a series of pairs may end at any count.
pub fn pair_order(k: usize) -> [Arm; 2] {
    if k.is_multiple_of(2) {
        [Arm::Baseline, Arm::Candidate]
    } else {
        [Arm::Candidate, Arm::Baseline]
    }
}

/// The share of the machine's CPU (0..1 of all online CPUs) that neither the tree nor montrace
/// used during a window: `busy_s` is the machine's busy CPU time over it (from /proc/stat),
/// `tree_s` the tree's and `own_s` montrace's own. None for an empty window.
pub fn other_cpu_share(
    busy_s: f64,
    tree_s: f64,
    own_s: f64,
    wall_s: f64,
    cpus: usize,
) -> Option<f64> {
    let capacity = wall_s * cpus as f64;
    (capacity > 0.0).then(|| ((busy_s - tree_s - own_s) / capacity).clamp(0.0, 1.0))
}

/// A repetition shorter than this measures mostly start-up noise (hyperfine warns at 5 ms too).
pub const TOO_SHORT_S: f64 = 0.005;
/// Repetitions whose median wall time is under this fraction of the first warm-up's, and that did
/// less work (fewer processes, or CPU time under [`LESS_CPU_THAN_WARMUP`] of the warm-up's),
/// probably measure a no-op: the warm-up did the work (a build then up to date). Wall time alone
/// is not enough: a warm-up is slower by design when caches are cold (a fresh clone's first
/// compile takes twice as long and runs the same processes).
pub const FASTER_THAN_WARMUP: f64 = 0.5;
/// CPU time under this fraction of the warm-up's, with the same processes, is less work (cold
/// caches cost waiting, not several times the CPU).
pub const LESS_CPU_THAN_WARMUP: f64 = 0.25;
/// Other work taking more than this share of the machine during a repetition is worth a warning.
pub const BUSY_MACHINE_SHARE: f64 = 0.25;

/// One measured run (a warm-up or a repetition), as the warnings need it.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub name: String,
    /// The command's own wall time.
    pub wall_s: f64,
    /// The tree's CPU time.
    pub cpu_s: Option<f64>,
    /// Processes the tree started.
    pub processes: Option<f64>,
    pub other_cpu_share: Option<f64>,
}

impl Measured {
    /// The figures of a summary.json repetition (the one source of its metrics' names).
    pub fn of(name: &str, rep: &crate::store::summary_json::Repetition) -> Self {
        let metric = |m: &str| rep.metrics.get(m).copied();
        Measured {
            name: name.to_string(),
            wall_s: metric("wall_s").unwrap_or(0.0),
            cpu_s: metric("cpu_s"),
            processes: metric("processes"),
            other_cpu_share: rep.other_cpu_share,
        }
    }
}

/// The lower median: of an even count, the smaller middle value. A neighbour only adds time to
/// a repetition, so with two repetitions one slowed down must not hide that both were no-ops.
fn median(values: impl Iterator<Item = f64>) -> Option<f64> {
    let mut v: Vec<f64> = values.collect();
    v.sort_by(f64::total_cmp);
    v.get(v.len().checked_sub(1)? / 2).copied()
}

/// The warning that a series measured a no-op, if it did: its repetitions much faster than the
/// first warm-up and with less work (see [`FASTER_THAN_WARMUP`]). `bench` refuses the verdict of
/// such a series unless allowed.
pub fn no_op(warmups: &[Measured], reps: &[Measured]) -> Option<String> {
    let wall = median(reps.iter().map(|r| r.wall_s))?;
    let warmup = warmups.first()?;
    let processes = median(reps.iter().filter_map(|r| r.processes));
    let cpu = median(reps.iter().filter_map(|r| r.cpu_s));
    let fewer_processes = matches!((processes, warmup.processes), (Some(r), Some(w)) if r < w);
    let less_cpu =
        matches!((cpu, warmup.cpu_s), (Some(r), Some(w)) if r < w * LESS_CPU_THAN_WARMUP);
    if !(wall < warmup.wall_s * FASTER_THAN_WARMUP && (fewer_processes || less_cpu)) {
        return None;
    }
    let what = match (processes, warmup.processes) {
        (Some(r), Some(w)) if fewer_processes => {
            format!(" and started {r:.0} processes (median) against its {w:.0}")
        }
        _ => format!(
            " and used {:.3}s of CPU (median) against its {:.3}s",
            cpu.unwrap_or(0.0),
            warmup.cpu_s.unwrap_or(0.0)
        ),
    };
    Some(format!(
        "the repetitions took {wall:.3}s (median), the warm-up {:.3}s{what}: the warm-up \
         probably did the work and the repetitions measured what was left (a build that \
         is up to date); reset the state before each one with --prepare CMD, e.g. \
         --prepare 'make clean'",
        warmup.wall_s
    ))
}

/// The progress bar a terminal gets after each run: ` [######----] 6/10 runs, about 0:42
/// left` from the runs done, the runs planned (warm-ups and `--repeat` pairs: an adaptive
/// series may add pairs, which then show as `6/4+`) and the time so far.
pub fn progress_bar(done: usize, planned: usize, elapsed: std::time::Duration) -> String {
    const WIDTH: usize = 10;
    let filled = (done * WIDTH)
        .checked_div(planned)
        .unwrap_or(WIDTH)
        .min(WIDTH);
    let bar = format!("{}{}", "#".repeat(filled), "-".repeat(WIDTH - filled));
    if done >= planned || done == 0 {
        return format!(
            " [{bar}] {done}/{planned}{} runs",
            if done > planned { "+" } else { "" }
        );
    }
    let left = elapsed.as_secs_f64() / done as f64 * (planned - done) as f64;
    let left = left.round() as u64;
    format!(
        " [{bar}] {done}/{planned} runs, about {}:{:02} left",
        left / 60,
        left % 60
    )
}

/// What makes a series' figures doubtful, each with what to do.
pub fn warnings(warmups: &[Measured], reps: &[Measured]) -> Vec<String> {
    let mut out: Vec<String> = no_op(warmups, reps).into_iter().collect();
    let short = reps.iter().filter(|r| r.wall_s < TOO_SHORT_S).count();
    if short > 0 {
        out.push(format!(
            "{short} of {} repetitions took under {} ms: start-up and scheduling noise dominate \
             such short commands; measure more work per repetition",
            reps.len(),
            TOO_SHORT_S * 1000.0
        ));
    }
    let busy: Vec<String> = reps
        .iter()
        .filter_map(|r| {
            let share = r.other_cpu_share?;
            (share > BUSY_MACHINE_SHARE).then(|| format!("{} ({:.0}%)", r.name, share * 100.0))
        })
        .collect();
    if !busy.is_empty() {
        out.push(format!(
            "other work took more than {:.0}% of the machine's CPU during {}: their figures may \
             be disturbed; measure on a quiet machine, or interleave the sides (`montrace bench`) \
             so that the disturbance falls on both",
            BUSY_MACHINE_SHARE * 100.0,
            busy.join(", ")
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_series_looks_at_growing_steps_up_to_its_budget() {
        assert_eq!(look_schedule(5, 30), [5, 8, 12, 18, 27, 30]);
        assert_eq!(look_schedule(3, 8), [3, 5, 8]);
        assert_eq!(look_schedule(3, 12), [3, 5, 8, 12]);
        assert_eq!(look_schedule(10, 12), [10, 12]);
        assert_eq!(look_schedule(1, 3), [1, 2, 3]);
        // No budget past --repeat: one look.
        assert_eq!(look_schedule(5, 5), [5]);
        assert_eq!(look_schedule(5, 2), [5]);
        // 1,000 runs by time alone: 14 looks.
        assert_eq!(look_schedule(5, 1000).len(), 14);
    }

    #[test]
    fn a_series_that_would_overflow_is_refused() {
        assert_eq!(series_length(0, 1), Ok(1));
        assert_eq!(series_length(3, 5), Ok(8));
        assert_eq!(series_length(0, MAX_RUNS), Ok(MAX_RUNS));
        assert!(series_length(1, MAX_RUNS).is_err());
        let err = series_length(u32::MAX, 2).unwrap_err();
        assert!(err.contains("--warmup 4294967295"), "{err}");
        assert!(series_length(u32::MAX, u32::MAX).is_err());
    }

    fn rep(name: &str, wall_s: f64, other: Option<f64>) -> Measured {
        Measured {
            name: name.into(),
            wall_s,
            cpu_s: Some(wall_s),
            processes: Some(1.0),
            other_cpu_share: other,
        }
    }

    fn run(wall_s: f64, cpu_s: f64, processes: f64) -> Measured {
        Measured {
            name: "x".into(),
            wall_s,
            cpu_s: Some(cpu_s),
            processes: Some(processes),
            other_cpu_share: None,
        }
    }

    #[test]
    fn interleaving_is_abba() {
        use Arm::{Baseline as A, Candidate as B};
        assert_eq!(interleaved(4), [A, B, B, A, A, B, B, A]);
        assert_eq!(interleaved(1), [A, B]);
        assert!(interleaved(0).is_empty());
        let pairs: Vec<Arm> = (0..4).flat_map(pair_order).collect();
        assert_eq!(pairs, interleaved(4));
        // Under a linear drift, each side's mean position in time is the same for even n.
        let order = interleaved(6);
        let mean = |arm| {
            let p: Vec<usize> = (0..order.len()).filter(|&i| order[i] == arm).collect();
            p.iter().sum::<usize>() as f64 / p.len() as f64
        };
        assert_eq!(mean(A), mean(B));
    }

    #[test]
    fn other_share_leaves_out_the_tree_and_montrace() {
        // 2 CPUs for 1 s: 1.5 s busy, of which the tree 1.0 and montrace 0.1.
        let share = other_cpu_share(1.5, 1.0, 0.1, 1.0, 2).unwrap();
        assert!((share - 0.2).abs() < 1e-12, "{share}");
        assert_eq!(other_cpu_share(0.5, 1.0, 0.0, 1.0, 2), Some(0.0));
        assert_eq!(other_cpu_share(1.0, 0.0, 0.0, 0.0, 2), None);
    }

    #[test]
    fn a_no_op_after_the_warm_up_is_called_out() {
        // A build up to date: make alone, against make and its compilers.
        let warmup = [run(2.5, 4.0, 31.0)];
        let reps = [run(0.02, 0.01, 1.0), run(0.03, 0.01, 1.0)];
        let w = warnings(&warmup, &reps);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("--prepare"), "{w:?}");
        assert!(
            w[0].contains("started 1 processes (median) against its 31"),
            "{w:?}"
        );
        // A cache inside one process: the same processes, a fraction of the CPU.
        let w = warnings(&[run(2.5, 2.4, 1.0)], &[run(0.2, 0.1, 1.0)]);
        assert!(
            w[0].contains("used 0.100s of CPU (median) against its 2.400s"),
            "{w:?}"
        );
        // As long as the warm-up: nothing to say.
        assert!(warnings(&warmup, &[run(2.4, 4.0, 31.0)]).is_empty());
        // No warm-up: no comparison.
        assert!(warnings(&[], &reps).is_empty());
        // Two no-ops, one slowed down by a neighbour (CI's failure): still a no-op.
        let slowed = [run(0.057, 0.005, 2.0), run(0.012, 0.005, 2.0)];
        assert_eq!(warnings(&[run(0.081, 0.077, 2.0)], &slowed).len(), 1);
    }

    #[test]
    fn the_progress_bar_counts_runs_and_estimates_what_is_left() {
        let s = std::time::Duration::from_secs;
        assert_eq!(
            progress_bar(3, 12, s(30)),
            " [##--------] 3/12 runs, about 1:30 left"
        );
        assert_eq!(progress_bar(12, 12, s(120)), " [##########] 12/12 runs");
        // An adaptive series past its first plan.
        assert_eq!(progress_bar(14, 12, s(140)), " [##########] 14/12+ runs");
    }

    #[test]
    fn a_cold_warm_up_is_not_called_a_no_op() {
        // A fresh clone's first compile (CI): 2.3 times the wall, the same processes, CPU a
        // little higher (page faults of a cold page cache).
        let warmup = [run(0.139, 0.09, 10.0)];
        let reps = [
            run(0.060, 0.05, 10.0),
            run(0.058, 0.05, 10.0),
            run(0.061, 0.05, 10.0),
        ];
        assert!(warnings(&warmup, &reps).is_empty());
    }

    #[test]
    fn short_repetitions_and_a_busy_machine_are_called_out() {
        let reps = [
            rep("rep-001", 0.003, Some(0.1)),
            rep("rep-002", 0.5, Some(0.6)),
            rep("rep-003", 0.5, Some(0.3)),
        ];
        let w = warnings(&[], &reps);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(
            w[0].starts_with("1 of 3 repetitions took under 5 ms"),
            "{w:?}"
        );
        assert!(w[1].contains("rep-002 (60%), rep-003 (30%)"), "{w:?}");
    }
}
