//! The paired decision of `montrace bench`: each pair is one run of each side, measured back to
//! back (A B, then B A, ...), so whatever disturbed the machine during the pair — a neighbour, a
//! warm cache, a hot CPU — fell on both of its runs. The per-pair differences carry the change;
//! the machine's drift between pairs, which moves both runs of a pair together, cancels. Two
//! unrelated samples would count that drift as noise on both sides (and never shrink it).
//!
//! Three outcomes, from a one-sided interval of the mean change at the metric's level:
//!
//! ```text
//!   0        L/2         L            (relative change of the candidate)
//!   |---------|-----------|------->
//!   [==pass==]                         upper bound below the limit L: no regression of L
//!               [=regressed=]          lower bound above half the limit: a real increase
//!        [=====inconclusive=====]      neither yet: more pairs narrow the interval
//! ```
//!
//! The limit is the change the gate must catch; half of it is the smallest change it may call a
//! regression, so that identical code needs the interval's lower bound to clear L/2 (not 0) to
//! fail.
//!
//! A series that adds pairs until it is decided looks at its data again and again, and each
//! look is another chance for noise to clear a bound: at a 1.25 % level a look, six looks
//! failed identical code 2.5 % of the time in simulation where the pairs scatter by ±20 % (a
//! 0.13 s build beside the stress neighbours; `montrace bench --max-runs 8` looked after every
//! pair), and 2 of 20 A/A comparisons in a stress run. So a series looks at growing steps
//! (`bench::plan::look_schedule`) and decides at its level divided among its looks
//! ([`looks_level`]; Bonferroni, as among the gated metrics): the chance that any look fails
//! identical code — or passes a change of the limit — stays within the level, however long the
//! series runs (0.5 % in the same simulation). Pure; [`t_quantile`] inverts the Student tail of
//! [`student_t_sf`].
use super::*;

/// Power of the detectable change: the smallest increase that the series' spread and count would
/// reveal 4 times in 5 (the usual 80 %).
pub const DETECTION_POWER: f64 = 0.8;
/// Pairs [`more_pairs_needed`] looks ahead at most; beyond it the answer is "many".
pub const MAX_PAIRS_AHEAD: usize = 1_000_000;

/// The t value with P(T > t) = `p` for `df` degrees of freedom (0 < p < 1), by bisection on
/// [`student_t_sf`], which is monotonic: ~60 steps to full precision.
pub fn t_quantile(p: f64, df: f64) -> f64 {
    if !(p > 0.0 && p < 1.0) || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if p == 0.5 {
        return 0.0;
    }
    if p > 0.5 {
        return -t_quantile(1.0 - p, df);
    }
    let mut hi = 1.0;
    while student_t_sf(hi, df) > p {
        hi *= 2.0;
        if hi > 1e12 {
            return f64::INFINITY;
        }
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if student_t_sf(mid, df) > p {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= 1e-12 * hi {
            break;
        }
    }
    0.5 * (lo + hi)
}

/// The paired statistics of one metric over the kept pairs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Paired {
    /// Pairs used.
    pub n: usize,
    /// The mean change, relative: the geometric mean of the pairs' ratios, minus 1 (see
    /// [`paired_stats`]).
    pub change: f64,
    /// The per-pair changes' standard deviation, relative (one pair's typical deviation).
    pub spread: f64,
    /// One-sided bounds of the change at the metric's level: the change is above `low` (and,
    /// separately, below `high`) with confidence 1 - alpha.
    pub low: f64,
    pub high: f64,
    /// Paired t statistic of "the candidate used more", its degrees of freedom and one-sided p.
    pub t: f64,
    pub df: f64,
    pub p: f64,
    /// The smallest increase this series would reveal with [`DETECTION_POWER`] (relative):
    /// (t_alpha + t_power) · spread / √n. Shrinks as √n.
    pub detectable: f64,
    /// The baseline's mean, in the metric's unit (to express changes against the floor).
    pub base_mean: f64,
    /// The scale the relative figures were computed on: logs of the pairs' ratios (true), or
    /// differences over the baseline's mean; and the mean and standard deviation there. What
    /// [`Paired::verdict_at`] needs to ask the same question of more pairs.
    pub log_scale: bool,
    pub scale_mean: f64,
    pub scale_sd: f64,
}

impl Paired {
    /// The one-sided bounds of the relative change, (low, high), that `n` pairs of the same mean
    /// and spread would give at level `alpha`: [`paired_stats`]' `low` and `high` at `n = self.n`.
    pub fn bounds_at(&self, n: usize, alpha: f64) -> (f64, f64) {
        let half = t_quantile(alpha, (n - 1) as f64) * self.scale_sd / (n as f64).sqrt();
        let relative = |x: f64| if self.log_scale { x.exp() - 1.0 } else { x };
        (
            relative(self.scale_mean - half),
            relative(self.scale_mean + half),
        )
    }

    /// The verdict of a gated metric (limit `max_increase`, floor `floor` in its unit) that `n`
    /// pairs of this mean and spread would get at level `alpha`: the rule of [`decide_paired`],
    /// which calls it with `n = self.n`, and [`more_pairs_needed`] with more.
    pub fn verdict_at(&self, n: usize, max_increase: f64, alpha: f64, floor: f64) -> Verdict {
        let (low, high) = self.bounds_at(n, alpha);
        let half = max_increase / 2.0;
        let beyond_floor = self.change.abs() * self.base_mean > floor;
        // The change within the floor either way, with the same confidence: nothing that counts
        // happened, however far past the limit the ratio of a near-zero figure (5 ms of CPU
        // time) may swing. One or two pairs that happened to land close prove nothing: the
        // interval of so few is wide. On the scale of the bounds (a relative change times the
        // baseline's mean), as `beyond_floor` is: every mean and spread is decided by enough
        // pairs. (A floor on the differences' arithmetic mean could disagree with the ratios'
        // geometric mean, and a change past the limit whose ratio was within the floor and
        // whose differences were not could never be decided.)
        let within_floor = low * self.base_mean >= -floor && high * self.base_mean <= floor;
        if low > half && beyond_floor {
            Verdict::Regressed
        } else if high < -half && beyond_floor {
            Verdict::Improved
        } else if high <= max_increase + LIMIT_TOLERANCE || within_floor {
            Verdict::Pass
        } else {
            Verdict::Inconclusive
        }
    }
}

/// The mean and sample standard deviation of `x` (at least 2 values).
fn mean_sd(x: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let sd = (x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt();
    (mean, sd)
}

/// The paired statistics of `pairs` (baseline, candidate), None with fewer than 2 pairs or a
/// baseline mean of 0 (a relative change of nothing is undefined: see [`decide_paired`]).
///
/// Per pair, the log of its ratio cand / base when every figure is above 0: a neighbour that
/// makes both runs of a pair 30 % slower leaves their ratio alone, where their difference would
/// grow by 30 %. With a 0 anywhere (no bytes written in one run), the difference relative to the
/// baseline's mean instead. Either way the change, its bounds and the detectable change are
/// given as relative changes (+0.05 = +5 %).
pub fn paired_stats(pairs: &[(f64, f64)], alpha: f64) -> Option<Paired> {
    let n = pairs.len();
    if n < 2 {
        return None;
    }
    let base_mean = pairs.iter().map(|p| p.0).sum::<f64>() / n as f64;
    if base_mean <= 0.0 {
        return None;
    }
    let logs = pairs.iter().all(|&(b, c)| b > 0.0 && c > 0.0);
    let d: Vec<f64> = if logs {
        pairs.iter().map(|(b, c)| (c / b).ln()).collect()
    } else {
        pairs.iter().map(|(b, c)| (c - b) / base_mean).collect()
    };
    // Back from the scale of `d` to a relative change.
    let relative = |x: f64| if logs { x.exp() - 1.0 } else { x };
    let (mean, sd) = mean_sd(&d);
    let se = sd / (n as f64).sqrt();
    let df = (n - 1) as f64;
    let t_alpha = t_quantile(alpha, df);
    let t = if se > 0.0 {
        mean / se
    } else if mean == 0.0 {
        0.0
    } else {
        mean.signum() * f64::INFINITY
    };
    Some(Paired {
        n,
        change: relative(mean),
        spread: relative(sd),
        low: relative(mean - t_alpha * se),
        high: relative(mean + t_alpha * se),
        t,
        df,
        p: student_t_sf(t, df),
        detectable: relative((t_alpha + t_quantile(1.0 - DETECTION_POWER, df)) * se),
        base_mean,
        log_scale: logs,
        scale_mean: mean,
        scale_sd: sd,
    })
}

/// The paired verdict of one metric (lower is better), `max_increase` its limit L: regressed
/// when the change is above L/2 with confidence and larger than `floor` (the metric's unit, see
/// [`absolute_floor`]); pass when it is below L with confidence, or when the change times the
/// baseline's mean is within ±floor with confidence (one or two pairs that happened to land
/// close are not evidence); improved is the mirror of regressed; inconclusive otherwise (see
/// [`Paired::verdict_at`]). `confidence` is a look's: a series that may look several times
/// passes [`looks_level`]'s. A baseline of 0 everywhere: pass when the candidate is 0 too, or
/// within the floor with confidence; an increase from nothing past the floor is beyond every
/// relative limit (regressed).
pub fn decide_paired(
    pairs: &[(f64, f64)],
    max_increase: f64,
    confidence: f64,
    floor: f64,
) -> Decision {
    let alpha = 1.0 - confidence;
    let mut decision = Decision {
        verdict: Verdict::NoData,
        method: None,
        ratio: None,
        noise: None,
        min_effect: max_increase,
        alpha,
    };
    if pairs.is_empty() {
        return decision;
    }
    let gated = max_increase.is_finite();
    let Some(s) = paired_stats(pairs, alpha) else {
        let n = pairs.len();
        let base = pairs.iter().map(|p| p.0).sum::<f64>();
        let cand_mean = pairs.iter().map(|p| p.1).sum::<f64>() / n as f64;
        decision.method = Some(Method::Threshold);
        decision.verdict = if n < 2 {
            Verdict::Inconclusive
        } else if cand_mean <= 0.0 {
            decision.ratio = Some(1.0);
            Verdict::Pass
        } else if cand_mean > floor {
            Verdict::Regressed
        } else {
            // From nothing to a little: within the floor only with confidence.
            let diffs: Vec<f64> = pairs.iter().map(|(b, c)| c - b).collect();
            let (mean, sd) = mean_sd(&diffs);
            let half = t_quantile(alpha, (n - 1) as f64) * sd / (n as f64).sqrt();
            if mean - half >= -floor && mean + half <= floor {
                Verdict::Pass
            } else {
                Verdict::Inconclusive
            }
        };
        if base > 0.0 {
            // One pair: a ratio, no interval.
            decision.ratio = Some(1.0 + (cand_mean * n as f64 - base) / base);
        }
        if !gated {
            decision.verdict = Verdict::NotGated;
        }
        return decision;
    };
    decision.verdict = if gated {
        s.verdict_at(s.n, max_increase, alpha, floor)
    } else {
        Verdict::NotGated
    };
    decision.ratio = Some(1.0 + s.change);
    decision.noise = Some(s.spread);
    decision.method = Some(Method::Paired(s));
    decision
}

/// The confidence of one look of a series that may look `looks` times at level 1 - `confidence`
/// (Bonferroni): 1 - (1 - confidence) / looks.
pub fn looks_level(confidence: f64, looks: usize) -> f64 {
    1.0 - (1.0 - confidence) / looks.max(1) as f64
}

/// How many pairs in all would likely decide an inconclusive metric: the smallest count at
/// which [`Paired::verdict_at`] — the rule itself, floor included, at the mean and spread
/// measured so far — is no longer inconclusive. None when it is decided already, or not before
/// [`MAX_PAIRS_AHEAD`] (a change at the very edge of a bound).
pub fn more_pairs_needed(s: &Paired, max_increase: f64, alpha: f64, floor: f64) -> Option<usize> {
    if !max_increase.is_finite() {
        return None;
    }
    let decided = |n: usize| s.verdict_at(n, max_increase, alpha, floor) != Verdict::Inconclusive;
    if decided(s.n) {
        return None;
    }
    // Both intervals narrow monotonically with n, so once decided, a larger count stays decided.
    smallest_deciding(s.n, s.n.max(2) * 2, decided)
}

/// The smallest count above `undecided` at which `decided` (monotone: once true, true for every
/// larger count) holds: doubling from `first_try`, then bisection. None when not before
/// [`MAX_PAIRS_AHEAD`]. Both sides' rules (pairs, and runs a side) ask it.
pub fn smallest_deciding(
    undecided: usize,
    first_try: usize,
    decided: impl Fn(usize) -> bool,
) -> Option<usize> {
    let mut hi = first_try.max(undecided + 1);
    while !decided(hi) {
        if hi >= MAX_PAIRS_AHEAD {
            return None;
        }
        hi = (hi * 2).min(MAX_PAIRS_AHEAD);
    }
    let mut lo = undecided;
    while hi - lo > 1 {
        let mid = (lo + hi) / 2;
        if decided(mid) {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    Some(hi)
}

/// What disturbed one run while it was measured, from montrace's own figures of it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct Interference {
    /// Share of the machine's CPU (0..1) that other work took during the run (summary.json's
    /// `other_cpu_share`).
    pub other_cpu_share: Option<f64>,
    /// Share of the tree's busy time (on a CPU or runnable) spent waiting for a CPU, from
    /// run.json's `time`: (avg_parallelism - avg_cores_used) / avg_parallelism.
    pub run_queue_share: Option<f64>,
}

impl Interference {
    /// From run.json's average parallelism (running or runnable) and cores used (running).
    pub fn run_queue_share_of(avg_parallelism: f64, avg_cores_used: f64) -> Option<f64> {
        (avg_parallelism > 0.0 && avg_cores_used.is_finite())
            .then(|| ((avg_parallelism - avg_cores_used) / avg_parallelism).clamp(0.0, 1.0))
    }
}

/// Two runs of a pair whose disturbance differs by more than this (in share of the machine's CPU
/// taken by other work, or share of the tree's time spent waiting for a CPU) measured different
/// conditions: the pair is left out. Within it, both runs saw much the same machine, and the
/// pairing cancels the disturbance.
pub const DISTURBANCE_GAP: f64 = 0.20;

/// Why a pair is left out of the statistics, if it is: its two runs ran under different
/// interference (see [`DISTURBANCE_GAP`]).
pub fn pair_disturbed(base: &Interference, cand: &Interference) -> Option<String> {
    let gap = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if (a - b).abs() > DISTURBANCE_GAP => Some((a, b)),
        _ => None,
    };
    if let Some((a, b)) = gap(base.other_cpu_share, cand.other_cpu_share) {
        return Some(format!(
            "other work took {:.0}% of the machine during the baseline's run, {:.0}% during the \
             candidate's",
            a * 100.0,
            b * 100.0
        ));
    }
    if let Some((a, b)) = gap(base.run_queue_share, cand.run_queue_share) {
        return Some(format!(
            "the tree waited for a CPU {:.0}% of its time in the baseline's run, {:.0}% in the \
             candidate's",
            a * 100.0,
            b * 100.0
        ));
    }
    None
}

/// One pair of a bench series, as the report shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PairInfo {
    /// 1, 2, ...
    pub index: usize,
    /// `AB` or `BA`: which side ran first.
    pub order: &'static str,
    pub baseline: Interference,
    pub candidate: Interference,
    /// Why it is left out of the statistics; None when it is used.
    pub left_out: Option<String>,
}

/// Which pairs the statistics use: those not disturbed, unless fewer than 2 would remain (then
/// all, and the report says so).
pub fn kept_pairs(pairs: &[PairInfo]) -> Vec<bool> {
    let kept: Vec<bool> = pairs.iter().map(|p| p.left_out.is_none()).collect();
    if kept.iter().filter(|&&k| k).count() >= 2 {
        kept
    } else {
        vec![true; pairs.len()]
    }
}

/// A bench series: how many pairs ran, why it stopped, and its budget.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Series {
    pub pairs: Vec<PairInfo>,
    /// Pairs the statistics used (see [`kept_pairs`]).
    pub kept: usize,
    /// How many times the series may look at its data (`bench::plan::look_schedule`; 1
    /// without a budget): it decides at its level divided among them (see [`looks_level`]).
    pub looks: usize,
    /// `decided`, `max_runs`, `max_time`, or `fixed` (no adaptive budget: `--repeat` pairs).
    pub stopped_by: &'static str,
    pub max_runs: usize,
    pub max_time_s: Option<f64>,
    /// From the first warm-up to the last measured run.
    pub elapsed_s: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn close(actual: f64, expected: f64, tolerance: f64) {
        assert!(
            (actual - expected).abs() <= tolerance,
            "{actual} is not within {tolerance} of {expected}"
        );
    }

    #[test]
    fn t_quantiles_match_tables() {
        // Student's t table, one-sided.
        close(t_quantile(0.05, 4.0), 2.131_846_786, 1e-8);
        close(t_quantile(0.025, 10.0), 2.228_138_852, 1e-8);
        close(t_quantile(0.01, 1.0), 31.820_515_95, 1e-6);
        close(t_quantile(0.2, 9.0), 0.883_403_9, 1e-6);
        close(t_quantile(0.95, 4.0), -2.131_846_786, 1e-8);
        assert_eq!(t_quantile(0.5, 3.0), 0.0);
        assert!(t_quantile(0.0, 3.0).is_nan());
    }

    /// Pairs whose candidate is `change` above a baseline that drifts a lot between pairs
    /// (a neighbour coming and going), with a little noise within each pair.
    fn drifting(n: usize, change: f64) -> Vec<(f64, f64)> {
        (0..n)
            .map(|i| {
                let machine = 5.5 + 1.7 * ((i * 7 % 5) as f64 / 4.0);
                let jitter = 0.01 * ((i * 3 % 4) as f64 - 1.5);
                (machine, machine * (1.0 + change) + jitter)
            })
            .collect()
    }

    #[test]
    fn the_pairing_cancels_a_drift_that_unpaired_samples_count_as_noise() {
        // +10 % under a neighbour that moves CPU time by up to 30 % between pairs.
        let pairs = drifting(6, 0.10);
        let d = decide_paired(&pairs, 0.05, 0.95, 0.010);
        assert_eq!(d.verdict, Verdict::Regressed, "{d:?}");
        let (base, cand): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        // Welch's test on the same figures, as unrelated samples, cannot tell.
        assert_ne!(
            decide_above(&base, &cand, 0.05, 0.95, 0.010).verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn identical_code_passes_and_a_small_change_is_not_a_regression() {
        let d = decide_paired(&drifting(6, 0.0), 0.05, 0.95, 0.010);
        assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
        // +2 %: a real change, under the limit: pass, never "regressed".
        let d = decide_paired(&drifting(8, 0.02), 0.05, 0.95, 0.010);
        assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!("{d:?}")
        };
        close(s.change, 0.02, 0.002);
    }

    #[test]
    fn too_few_noisy_pairs_are_inconclusive_and_more_of_them_decide() {
        // +4 % with ±4 % noise per pair: 3 pairs cannot tell pass from regressed.
        let noise = [0.04, -0.03, 0.05, -0.05, 0.03, -0.04, 0.02, -0.02];
        let pairs = |n: usize| -> Vec<(f64, f64)> {
            (0..n)
                .map(|i| (10.0, 10.0 * (1.04 + noise[i % noise.len()])))
                .collect()
        };
        let d = decide_paired(&pairs(3), 0.05, 0.95, 0.010);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
        let Some(Method::Paired(s3)) = d.method else {
            panic!()
        };
        let needed = more_pairs_needed(&s3, 0.05, 0.05, 0.010).expect("a count that decides");
        assert!(needed > 3, "{needed}");
        // The detectable change shrinks with more pairs.
        let s16 = paired_stats(&pairs(16), 0.05).unwrap();
        assert!(s16.detectable < s3.detectable / 2.0, "{s16:?} {s3:?}");
        let d = decide_paired(&pairs(40), 0.05, 0.95, 0.010);
        assert_eq!(d.verdict, Verdict::Regressed, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!()
        };
        assert_eq!(more_pairs_needed(&s, 0.05, 0.05, 0.010), None);
    }

    /// Pairs of a near-zero figure (5 ms of CPU time) whose two runs differ by a millisecond or
    /// so either way: the ratios swing by ±20 %, the differences stay far within the 10 ms floor.
    fn near_zero(n: usize) -> Vec<(f64, f64)> {
        let jitter = [
            0.0010, -0.0008, 0.0012, -0.0011, 0.0007, -0.0009, 0.0011, -0.0010,
        ];
        (0..n)
            .map(|i| (0.005, 0.005 + jitter[i % jitter.len()]))
            .collect()
    }

    #[test]
    fn few_pairs_within_the_floor_are_inconclusive_and_enough_of_them_pass() {
        // Two pairs within the floor: their interval (t = 31.8 at 1 % with one degree of
        // freedom), times the baseline's mean, reaches past +10 ms: that they landed close is
        // luck.
        let two = [(0.005, 0.0062), (0.006, 0.0048)];
        let d = decide_paired(&two, 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!("{d:?}")
        };
        let (low, high) = s.bounds_at(2, 0.01);
        assert!(low < 0.0 && high * s.base_mean > 0.010, "{low} {high}");
        // And how many would decide: the floor rule counts.
        let needed = more_pairs_needed(&s, 0.05, 0.01, 0.010).expect("a count that decides");
        assert!((3..=8).contains(&needed), "{needed}");
        // Enough pairs within the floor: the interval times 5 ms is within ±10 ms, and the
        // metric passes, however far past the limit its ratios' interval reaches.
        let d = decide_paired(&near_zero(6), 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!("{d:?}")
        };
        assert!(s.high > 0.05, "the ratio alone would not pass: {s:?}");
        assert_eq!(more_pairs_needed(&s, 0.05, 0.01, 0.010), None);
        // The count more_pairs_needed named decides, at the measured mean and spread.
        assert_ne!(s.verdict_at(s.n, 0.05, 0.01, 0.010), Verdict::Inconclusive);
    }

    #[test]
    fn a_real_change_beyond_the_floor_regresses_and_never_passes_as_within_it() {
        // 5 ms of CPU becoming 25 ms (+20 ms, beyond the floor) in every pair, ±1 ms.
        let pairs: Vec<(f64, f64)> = near_zero(4).iter().map(|&(b, c)| (b, c + 0.020)).collect();
        let d = decide_paired(&pairs, 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Regressed, "{d:?}");
        // +8 ms: within the floor at the point estimate but not with confidence over 3 pairs
        // of ±1 ms: never regressed (under the floor), and not a pass by the floor either
        // until the interval of the difference is inside it.
        let pairs: Vec<(f64, f64)> = near_zero(3).iter().map(|&(b, c)| (b, c + 0.008)).collect();
        let d = decide_paired(&pairs, 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
    }

    #[test]
    fn the_pairs_needed_decide_on_the_scale_the_interval_is_computed() {
        // A large change on the log scale: +172 % over 3 pairs whose log ratios are 0.7, 1.0
        // and 1.3 (random sleeps; CI once). The half-width of the relative spread (e^0.3 - 1)
        // undershoots the log interval's there, so the count was "decided already" (None, and
        // no `pairs_needed` in verdict.json) while the verdict was inconclusive.
        let pairs = [
            (0.2, 0.2 * 0.7f64.exp()),
            (0.2, 0.2 * 1f64.exp()),
            (0.2, 0.2 * 1.3f64.exp()),
        ];
        let d = decide_paired(&pairs, 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!("{d:?}")
        };
        let needed = more_pairs_needed(&s, 0.05, 0.01, 0.010).expect("a count");
        assert!(needed > 3, "{needed}");
        assert_ne!(
            s.verdict_at(needed, 0.05, 0.01, 0.010),
            Verdict::Inconclusive
        );
        assert_eq!(
            s.verdict_at(needed - 1, 0.05, 0.01, 0.010),
            Verdict::Inconclusive
        );
    }

    #[test]
    fn exact_counts_and_zeros_decide_without_spread() {
        // The same 31 processes every time: pass, with no interval to speak of.
        let same = vec![(31.0, 31.0); 3];
        assert_eq!(decide_paired(&same, 0.05, 0.95, 0.0).verdict, Verdict::Pass);
        // One more process every time in a tree of 20 (+5 %): regressed.
        let more = vec![(20.0, 21.0); 3];
        assert_eq!(
            decide_paired(&more, 0.05, 0.95, 0.0).verdict,
            Verdict::Regressed
        );
        // Nothing written on either side; then writes from nothing.
        let none = vec![(0.0, 0.0); 3];
        assert_eq!(decide_paired(&none, 0.1, 0.95, 1e6).verdict, Verdict::Pass);
        let from_zero = vec![(0.0, 4e6); 3];
        let d = decide_paired(&from_zero, 0.1, 0.95, 1e6);
        assert_eq!((d.verdict, d.ratio), (Verdict::Regressed, None));
        // Under the floor (4 ms of system time): pass, whatever the ratio.
        let tiny = vec![(0.004, 0.008), (0.005, 0.009), (0.004, 0.009)];
        assert_eq!(
            decide_paired(&tiny, 0.1, 0.95, 0.010).verdict,
            Verdict::Pass
        );
        // A metric without a limit is reported only.
        assert_eq!(
            decide_paired(&more, NOT_GATED, 0.95, 0.0).verdict,
            Verdict::NotGated
        );
        assert_eq!(decide_paired(&[], 0.05, 0.95, 0.0).verdict, Verdict::NoData);
    }

    #[test]
    fn a_pair_measured_under_different_interference_is_left_out() {
        let quiet = Interference {
            other_cpu_share: Some(0.02),
            run_queue_share: Some(0.01),
        };
        let busy = Interference {
            other_cpu_share: Some(0.48),
            run_queue_share: Some(0.05),
        };
        let why = pair_disturbed(&quiet, &busy).unwrap();
        assert!(
            why.contains("2% of the machine during the baseline's run, 48%"),
            "{why}"
        );
        // Both busy: the pairing cancels it.
        assert_eq!(pair_disturbed(&busy, &busy), None);
        let waiting = Interference {
            other_cpu_share: Some(0.1),
            run_queue_share: Some(0.4),
        };
        assert!(pair_disturbed(&quiet, &waiting)
            .unwrap()
            .contains("waited for a CPU 1% of its time in the baseline's run, 40%"));
        assert_eq!(pair_disturbed(&Interference::default(), &busy), None);
        close(
            Interference::run_queue_share_of(2.0, 1.5).unwrap(),
            0.25,
            1e-12,
        );
        let info = |left_out: Option<&str>| PairInfo {
            index: 1,
            order: "AB",
            baseline: quiet,
            candidate: quiet,
            left_out: left_out.map(String::from),
        };
        assert_eq!(
            kept_pairs(&[info(None), info(Some("x")), info(None)]),
            [true, false, true]
        );
        // Fewer than 2 left: all are used.
        assert_eq!(kept_pairs(&[info(None), info(Some("x"))]), [true, true]);
    }

    #[test]
    fn a_series_that_may_look_many_times_decides_at_its_level_divided_among_them() {
        assert!((looks_level(0.9875, 1) - 0.9875).abs() < 1e-12);
        assert!((looks_level(0.9875, 26) - (1.0 - 0.0125 / 26.0)).abs() < 1e-12);
        assert!((looks_level(0.95, 0) - 0.95).abs() < 1e-12);
        // +8 %, ±2 % per pair, 4 pairs: regressed when the series looks once.
        let pairs: Vec<(f64, f64)> = [0.10, 0.06, 0.09, 0.07]
            .iter()
            .map(|d| (1.0, 1.0 + d))
            .collect();
        let once = decide_paired(&pairs, 0.05, 0.99, 0.010);
        assert_eq!(once.verdict, Verdict::Regressed, "{once:?}");
        // A series that may look 26 times (`--repeat 5 --max-runs 30`): the same figures could
        // be one of its chances to cry wolf, and do not fail it yet.
        let many = decide_paired(&pairs, 0.05, looks_level(0.99, 26), 0.010);
        assert_eq!(many.verdict, Verdict::Inconclusive, "{many:?}");
        let Some(Method::Paired(s)) = many.method else {
            panic!("{many:?}")
        };
        assert!(s.low < 0.025, "{s:?}");
        // More pairs of the same spread clear it: the count says how many.
        let needed = more_pairs_needed(&s, 0.05, many.alpha, 0.010).expect("a count that decides");
        assert_eq!(
            s.verdict_at(needed, 0.05, many.alpha, 0.010),
            Verdict::Regressed
        );
        // Identical code, ±1 % a pair, passes after a few pairs however many looks there may be.
        let same: Vec<(f64, f64)> = [0.01, -0.01, 0.005, -0.005, 0.0, 0.002]
            .iter()
            .map(|d| (1.0, 1.0 + d))
            .collect();
        let d = decide_paired(&same, 0.05, looks_level(0.99, 26), 0.010);
        assert_eq!(d.verdict, Verdict::Pass, "{d:?}");
    }

    #[test]
    fn a_change_past_the_limit_whose_ratio_is_within_the_floor_is_decided_by_enough_pairs() {
        // A 0.13 s build's CPU (floor 10 ms), one pair an outlier: the ratios' geometric mean is
        // +5.3 % (past the 5 % limit) and 8.5 ms of the baseline (within the floor), while the
        // differences' arithmetic mean is +17.8 ms (past it). Judged on two scales, neither
        // rule could ever be met: a stress run's verdict.json had no `pairs_needed`.
        let pairs = [(0.13, 0.128), (0.13, 0.126), (0.13, 0.127), (0.25, 0.33)];
        let d = decide_paired(&pairs, 0.05, 0.99, 0.010);
        assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
        let Some(Method::Paired(s)) = d.method else {
            panic!("{d:?}")
        };
        close(s.change, 0.0533, 0.0005);
        close(s.change * s.base_mean, 0.0085, 0.0001);
        let needed = more_pairs_needed(&s, 0.05, 0.01, 0.010).expect("a count that decides");
        assert_eq!(s.verdict_at(needed, 0.05, 0.01, 0.010), Verdict::Pass);
    }
}
