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
/// Repetitions whose median is under this fraction of the first warm-up's wall time probably
/// measure a no-op: the warm-up did the work (a build then up to date).
pub const FASTER_THAN_WARMUP: f64 = 0.5;
/// Other work taking more than this share of the machine during a repetition is worth a warning.
pub const BUSY_MACHINE_SHARE: f64 = 0.25;

/// One measured repetition, as the warnings need it.
#[derive(Clone, Debug, PartialEq)]
pub struct Measured {
    pub name: String,
    /// The command's own wall time.
    pub wall_s: f64,
    pub other_cpu_share: Option<f64>,
}

/// What makes a series' figures doubtful, each with what to do.
pub fn warnings(warmup_walls: &[f64], reps: &[Measured]) -> Vec<String> {
    let mut out = Vec::new();
    let mut walls: Vec<f64> = reps.iter().map(|r| r.wall_s).collect();
    walls.sort_by(f64::total_cmp);
    let Some(&median) = walls.get(walls.len() / 2) else {
        return out;
    };
    if let Some(&warmup) = warmup_walls.first() {
        if median < warmup * FASTER_THAN_WARMUP {
            out.push(format!(
                "the repetitions took {median:.3}s (median), the warm-up {warmup:.3}s: the \
                 warm-up probably did the work and the repetitions measured what was left (a \
                 build that is up to date); reset the state before each one with --prepare \
                 CMD, e.g. --prepare 'make clean'"
            ));
        }
    }
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

    fn rep(name: &str, wall_s: f64, other: Option<f64>) -> Measured {
        Measured {
            name: name.into(),
            wall_s,
            other_cpu_share: other,
        }
    }

    #[test]
    fn interleaving_is_abba() {
        use Arm::{Baseline as A, Candidate as B};
        assert_eq!(interleaved(4), [A, B, B, A, A, B, B, A]);
        assert_eq!(interleaved(1), [A, B]);
        assert!(interleaved(0).is_empty());
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
        let reps = [rep("rep-001", 0.02, Some(0.0)), rep("rep-002", 0.03, None)];
        let w = warnings(&[2.5], &reps);
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(w[0].contains("--prepare"), "{w:?}");
        // As long as the warm-up: nothing to say.
        assert!(warnings(&[2.5], &[rep("rep-001", 2.4, None)]).is_empty());
        // No warm-up: no comparison.
        assert!(warnings(&[], &reps).is_empty());
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
