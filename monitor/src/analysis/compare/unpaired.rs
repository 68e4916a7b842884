//! The unpaired decision of `montrace compare`: two sets of runs that are not A B / B A pairs
//! (two directories of runs, a published dataset against today's runs), so the machine's drift
//! between them cannot cancel. Welch's interval of the change of the means decides, with the
//! same three outcomes as the paired gate (see [`super::paired`]):
//!
//! ```text
//!   0        L/2         L            (relative change of the candidate's mean)
//!   |---------|-----------|------->
//!   [==pass==]                         upper bound below the limit L: no regression of L
//!               [=regressed=]          lower bound above half the limit, the floor and the noise
//!        [=====inconclusive=====]      neither yet: more runs a side narrow the interval
//! ```
//!
//! Two series measured at different times may differ by the machine's drift alone, which no
//! number of runs averages away: a regression must also clear the measured noise (the
//! baseline's relative standard deviation), and the medians must have moved past both the
//! limit and the noise (the effect size rule the gate always had).
//!
//! Welch's interval is about two *independent* samples. The same runs on both sides (a run
//! compared with itself) are not two samples but one: the difference of every metric is exactly
//! 0, with no sampling uncertainty about it, so each gated metric passes without a test
//! ([`same_runs_decision`]) and the report says why; an interval computed as if they were
//! independent would be as wide as the runs' spread, and a run compared with itself would be
//! inconclusive. Runs that are on both sides among others ([`Overlap::Shared`]) make the two
//! means positively correlated, so Welch's interval is wider than the data warrant: not more
//! often wrong, more often inconclusive; the report warns. Pure.
use super::*;
use crate::store::summary_json::Repetition;

/// What one measurement is: its run id, or — in a summary.json written before run ids were
/// kept — the file it was read from (as given) and the repetition's directory.
fn measurement_id(summary_path: &Path, rep: &Repetition) -> String {
    if rep.run_id.is_empty() {
        format!("{}\0{}", summary_path.display(), rep.run_dir)
    } else {
        rep.run_id.clone()
    }
}

/// A side's measurements, each its identity and its figures, in identity order.
fn measurements(side: &Side) -> Vec<(String, &BTreeMap<String, f64>)> {
    let mut out: Vec<_> = side
        .runs
        .iter()
        .flat_map(|(path, summary)| {
            summary
                .repetitions
                .iter()
                .map(move |rep| (measurement_id(path, rep), &rep.metrics))
        })
        .collect();
    out.sort_by(|a, b| a.0.cmp(&b.0));
    out
}

/// How the measurements of two sides overlap. A measurement is on both sides when the same
/// run (its run id) with the same figures is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Overlap {
    /// No measurement is on both sides: two independent samples, as Welch's test assumes.
    None,
    /// Both sides are the same measurements: every difference is exactly 0.
    Same,
    /// This many of the baseline's measurements are also the candidate's, among others.
    Shared(usize),
}

/// How the measurements of `baseline` and `candidate` overlap (see [`Overlap`]).
pub fn overlap(baseline: &Side, candidate: &Side) -> Overlap {
    let (base, cand) = (measurements(baseline), measurements(candidate));
    if !base.is_empty() && base == cand {
        return Overlap::Same;
    }
    match base.iter().filter(|m| cand.contains(m)).count() {
        0 => Overlap::None,
        shared => Overlap::Shared(shared),
    }
}

/// The decision of a metric whose two sides are the same measurements (see [`Overlap::Same`]):
/// its difference is exactly 0, so a gated metric passes and an ungated one stays not gated;
/// the figures of `decision` (the ratio of 1, the noise, the level) are kept.
pub fn same_runs_decision(decision: Decision, max_increase: f64) -> Decision {
    let verdict = match decision.verdict {
        Verdict::NoData => Verdict::NoData,
        _ if max_increase.is_finite() => Verdict::Pass,
        _ => Verdict::NotGated,
    };
    Decision {
        verdict,
        method: decision.method.map(|_| Method::SameRuns),
        ..decision
    }
}

/// Welch's statistics of one metric over two unpaired samples (2+ values each), enough to ask
/// the gate's question of the same means and spreads with more runs ([`Unpaired::verdict_at`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Unpaired {
    pub n_base: usize,
    pub n_cand: usize,
    pub base_mean: f64,
    pub base_sd: f64,
    pub base_median: f64,
    pub cand_mean: f64,
    pub cand_sd: f64,
    pub cand_median: f64,
}

impl Unpaired {
    /// None unless both sides have 2 or more samples.
    pub fn of(base: &Stats, cand: &Stats) -> Option<Unpaired> {
        (base.n >= 2 && cand.n >= 2).then_some(Unpaired {
            n_base: base.n,
            n_cand: cand.n,
            base_mean: base.mean,
            base_sd: base.stddev,
            base_median: base.median,
            cand_mean: cand.mean,
            cand_sd: cand.stddev,
            cand_median: cand.median,
        })
    }

    /// The measured noise: the baseline's relative standard deviation (0 with a mean of 0).
    pub fn noise(&self) -> f64 {
        if self.base_mean > 0.0 {
            self.base_sd / self.base_mean
        } else {
            0.0
        }
    }

    /// A difference in the metric's unit as a change relative to the baseline's mean; from a
    /// mean of 0, any increase is infinite.
    pub fn relative(&self, x: f64) -> f64 {
        if self.base_mean > 0.0 {
            x / self.base_mean
        } else if x > 0.0 {
            f64::INFINITY
        } else if x < 0.0 {
            f64::NEG_INFINITY
        } else {
            0.0
        }
    }

    /// The standard error of the difference of the means and its Welch–Satterthwaite degrees
    /// of freedom, with `n_base` and `n_cand` samples of these spreads.
    fn se_df(&self, n_base: usize, n_cand: usize) -> (f64, f64) {
        let vb = self.base_sd.powi(2) / n_base as f64;
        let vc = self.cand_sd.powi(2) / n_cand as f64;
        let se2 = vb + vc;
        let df = if se2 > 0.0 {
            se2.powi(2) / (vb.powi(2) / (n_base - 1) as f64 + vc.powi(2) / (n_cand - 1) as f64)
        } else {
            (n_base + n_cand - 2) as f64
        };
        (se2.sqrt(), df)
    }

    /// One-sided bounds of the difference of the means (candidate - baseline, the metric's
    /// unit) at level `alpha` with `n_base` and `n_cand` samples of these means and spreads.
    pub fn difference_bounds_at(&self, n_base: usize, n_cand: usize, alpha: f64) -> (f64, f64) {
        let diff = self.cand_mean - self.base_mean;
        let (se, df) = self.se_df(n_base, n_cand);
        if se == 0.0 {
            return (diff, diff);
        }
        let half = t_quantile(alpha, df) * se;
        (diff - half, diff + half)
    }

    /// The same bounds relative to the baseline's mean (+0.05 = +5 %).
    pub fn bounds_at(&self, n_base: usize, n_cand: usize, alpha: f64) -> (f64, f64) {
        let (low, high) = self.difference_bounds_at(n_base, n_cand, alpha);
        (self.relative(low), self.relative(high))
    }

    /// The smallest increase (relative) these counts would reveal with [`DETECTION_POWER`]:
    /// (t_alpha + t_power) · se / baseline mean. Shrinks as √n, down to 0.
    pub fn detectable_at(&self, n_base: usize, n_cand: usize, alpha: f64) -> f64 {
        let (se, df) = self.se_df(n_base, n_cand);
        if se == 0.0 {
            return 0.0;
        }
        self.relative((t_quantile(alpha, df) + t_quantile(1.0 - DETECTION_POWER, df)) * se)
    }

    /// The verdict of a gated metric (limit `max_increase`, floor `floor` in its unit) that
    /// `n_base` and `n_cand` samples of these means and spreads would get at level `alpha`:
    ///
    /// - regressed: the lower bound of the change above half the limit and above the noise,
    ///   the lower bound of the difference above the floor, and the medians' change past both
    ///   the limit and the noise and the floor (the effect size rule of [`decide`]);
    /// - improved: the mirror image;
    /// - pass: the upper bound of the change under the limit, or the interval of the difference
    ///   within ±floor;
    /// - inconclusive otherwise.
    pub fn verdict_at(
        &self,
        n_base: usize,
        n_cand: usize,
        max_increase: f64,
        alpha: f64,
        floor: f64,
    ) -> Verdict {
        let (diff_low, diff_high) = self.difference_bounds_at(n_base, n_cand, alpha);
        let (low, high) = (self.relative(diff_low), self.relative(diff_high));
        let noise = self.noise();
        let half = max_increase / 2.0;
        // The effect size of the medians, as the gate always had it.
        let limit = max_increase.max(noise) + LIMIT_TOLERANCE;
        let (bm, cm) = (self.base_median, self.cand_median);
        let big_enough = (cm - bm).abs() > floor;
        let (medians_above, medians_below) = if bm > 0.0 {
            (cm / bm - 1.0 > limit, 1.0 - cm / bm > limit)
        } else {
            (cm > bm, false)
        };
        if medians_above && big_enough && low > half && low > noise && diff_low > floor {
            Verdict::Regressed
        } else if medians_below && big_enough && high < -half && -high > noise && diff_high < -floor
        {
            Verdict::Improved
        } else if high <= max_increase + LIMIT_TOLERANCE
            || (diff_low >= -floor && diff_high <= floor)
        {
            Verdict::Pass
        } else {
            Verdict::Inconclusive
        }
    }

    /// The verdict at the counts measured.
    pub fn verdict(&self, max_increase: f64, alpha: f64, floor: f64) -> Verdict {
        self.verdict_at(self.n_base, self.n_cand, max_increase, alpha, floor)
    }
}

/// How many runs a side would likely decide an inconclusive metric: the smallest count `n`,
/// the same on both sides and at least the larger side's, at which [`Unpaired::verdict_at`] —
/// the rule itself at the means and spreads measured so far — is no longer inconclusive. None
/// when it is decided already, or not before [`MAX_PAIRS_AHEAD`] (a change within the measured
/// noise, which more runs never clear, or at the very edge of a bound).
pub fn more_runs_needed(s: &Unpaired, max_increase: f64, alpha: f64, floor: f64) -> Option<usize> {
    if !max_increase.is_finite() || s.verdict(max_increase, alpha, floor) != Verdict::Inconclusive {
        return None;
    }
    let decided =
        |n: usize| s.verdict_at(n, n, max_increase, alpha, floor) != Verdict::Inconclusive;
    let start = s.n_base.max(s.n_cand);
    if decided(start) {
        return Some(start);
    }
    // The interval narrows monotonically with n and the rest of the rule does not depend on it,
    // so once decided, a larger count stays decided.
    super::paired::smallest_deciding(start, start * 2, decided)
}
