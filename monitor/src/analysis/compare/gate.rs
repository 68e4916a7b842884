//! The gate: each metric's limit (defaults, aliases, `--max`), the decision for one metric
//! ([`decide`]), and the report of every metric of two sides ([`build_report`]). Pure.
use super::*;
/// Version of the `--format json` layout.
/// 2: `noise`, `min_effect`, and the verdict `not_gated`.
/// 3: `outcome` (`pass`, `regressed`, `inconclusive`), the verdict `inconclusive`, the method
/// `paired` with its interval (`change_low`, `change_high`), `detectable` and `pairs_needed`,
/// `series` (bench: the pairs, their interference, the budget), the sides' `commit` and `dirty`.
/// 4: unpaired (`welch`) rows carry `change`, `change_low`, `change_high` and `detectable` of
/// the means, may be `inconclusive`, and say `runs_needed` (a side) then; the same runs on
/// both sides are decided by the method `same_runs` (change and bounds exactly 0).
/// 5: `series.looks`, and a paired row's `alpha` is a look's: the level shared among the gated
/// metrics and the looks (its interval and `pairs_needed` at that level).
pub const COMPARE_JSON_VERSION: u32 = 5;

/// Not gated: reported with its change, never failing the comparison (`--max METRIC=off`, and
/// the default of every metric that is not counted exactly).
pub const NOT_GATED: f64 = f64::INFINITY;

/// Largest increase of each metric's median that is not a regression (0.05 = +5%), unless
/// `--max` says otherwise. By default montrace gates only on what the kernel counts exactly for
/// the tree — CPU seconds (not their user/system split), the largest process's peak memory,
/// processes started, bytes written —
/// and reports the rest (wall time, sampled tree peaks, concurrency, reads behind the page cache,
/// GPU samples) without failing on them unless asked (`--max wall=+10%`): they move with the
/// machine's load, not only with the code. These limits are the smallest changes worth failing
/// a CI job for; the measured noise of each metric raises them (see [`decide`]).
pub const DEFAULT_MAX_INCREASE: &[(&str, f64)] = &[
    // Wall time moves with machine load, scheduling and I/O waits: reported, not gated.
    ("wall_s", NOT_GATED),
    // CPU time is what the command computed, the steadiest timing there is.
    ("cpu_s", 0.05),
    // Its split between user and system is not counted but estimated: the kernel divides the
    // exact total (sum_exec_runtime) by the share of timer ticks that found the task in each
    // mode (cputime_adjust, kernel/sched/cputime.c), so a side of a few ticks moves by 100 %
    // between identical runs, and 24 ms of system time by ±70 % in a series of 12 pairs beside a
    // neighbour. Reported; gate them with `--max cpu_user=+5%` where they are large enough.
    ("cpu_user_s", NOT_GATED),
    ("cpu_system_s", NOT_GATED),
    // The largest process's peak RSS is the kernel's exact high-water mark; it still moves a
    // few percent between identical runs (allocator arenas, ASLR, page granularity).
    ("peak_rss_bytes", 0.10),
    // The tree peaks are sampled: a short peak between samples can be missed.
    ("peak_tree_rss_bytes", NOT_GATED),
    ("peak_tree_uss_bytes", NOT_GATED),
    ("peak_tree_pss_bytes", NOT_GATED),
    // Process counts are exact and mostly deterministic, but builds legitimately vary by a helper
    // or two (a cache hit skips a compiler, a jobserver retries). +5% ignores that in a large
    // tree yet flags a tool newly run once per file, and any extra process in a tree of < 20.
    ("processes", 0.05),
    // How many processes overlap depends on timing and on the sampler catching the overlap.
    ("max_concurrent", NOT_GATED),
    // Storage reads depend on the page cache: a warm cache reads nothing from storage.
    ("read_bytes", NOT_GATED),
    ("write_bytes", 0.10),
    // The critical path is made of wall times: as noisy as the wall time; gate it with
    // `--max critical_path=+10%` where it matters. Parallelism is better when higher: never
    // gated (see HIGHER_IS_BETTER).
    ("critical_path_s", NOT_GATED),
    ("avg_parallelism", NOT_GATED),
    // Estimated from the samples, and as noisy as the timings it is made of: reported; gate it
    // with `--max serial=+10%` to keep a build from becoming more serial.
    ("serial_share", NOT_GATED),
    // Sampled by NVML.
    ("gpu_peak_memory_bytes", NOT_GATED),
    ("gpu_energy_joules", NOT_GATED),
];

/// Metrics that are better when higher: reported beside the others, never gated (the gate fails
/// on increases).
pub const HIGHER_IS_BETTER: &[&str] = &["avg_parallelism"];

/// Short names `--max` accepts besides the full metric names (`-` may stand for `_`).
pub const METRIC_ALIASES: &[(&str, &str)] = &[
    ("wall", "wall_s"),
    ("cpu", "cpu_s"),
    ("cpu_user", "cpu_user_s"),
    ("cpu_system", "cpu_system_s"),
    ("peak_rss", "peak_rss_bytes"),
    // As `montrace run --limit rss`: the whole tree.
    ("rss", "peak_tree_rss_bytes"),
    ("uss", "peak_tree_uss_bytes"),
    ("pss", "peak_tree_pss_bytes"),
    ("procs", "processes"),
    ("concurrent", "max_concurrent"),
    ("read", "read_bytes"),
    ("write", "write_bytes"),
    ("critical_path", "critical_path_s"),
    ("parallelism", "avg_parallelism"),
    ("serial", "serial_share"),
    ("gpu_mem", "gpu_peak_memory_bytes"),
    ("energy", "gpu_energy_joules"),
    ("gpu_energy", "gpu_energy_joules"),
];

/// A change within this (relative) of the limit counts as at the limit, so that `+5%` allows
/// exactly 1.05x despite floating-point rounding.
pub(super) const LIMIT_TOLERANCE: f64 = 1e-9;

pub fn default_max_increase(metric: &str) -> Option<f64> {
    DEFAULT_MAX_INCREASE
        .iter()
        .find(|(name, _)| *name == metric)
        .map(|&(_, max)| max)
}

// ---------------------------------------------------------------------------------------------
// The decision
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No significant increase beyond the limit.
    Pass,
    /// Reported only: the metric has no limit (`--max METRIC=off`, or its default).
    NotGated,
    /// The candidate used more: beyond the limit and (with samples) beyond the noise.
    Regressed,
    /// The candidate used less, beyond the limit and the noise. Informational: never fails.
    Improved,
    /// A side has no value for this metric (e.g. no GPU): nothing to decide.
    NoData,
    /// The data cannot tell yet whether the change is under the limit or a regression: more
    /// pairs (bench, see [`more_pairs_needed`]) or runs a side (compare, see
    /// [`more_runs_needed`]) would. Never reported as a pass.
    Inconclusive,
}

impl Verdict {
    /// Name in `--format json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::NotGated => "not_gated",
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::NoData => "no_data",
            Verdict::Inconclusive => "inconclusive",
        }
    }

    /// Word in the text and Markdown tables.
    pub(super) fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "ok",
            Verdict::NotGated => "not gated",
            Verdict::Regressed => "REGRESSED",
            Verdict::Improved => "improved",
            Verdict::NoData => "no data",
            Verdict::Inconclusive => "INCONCLUSIVE",
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Method {
    /// Welch's t-test on the means. `p` is one-sided, in the direction of the change (the sign
    /// of `t`); `t` is infinite when both sides have no variance and different means.
    Welch { t: f64, df: f64, p: f64 },
    /// Fewer than 2 samples on a side: the limit alone decides.
    Threshold,
    /// Bench: the paired test over the A B / B A pairs (see [`decide_paired`]).
    Paired(Paired),
    /// The same runs on both sides: the difference is exactly 0, nothing to test (see
    /// [`same_runs_decision`]).
    SameRuns,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    /// None when a side has no samples.
    pub method: Option<Method>,
    /// Candidate median / baseline median; 1 when both are 0; None when the baseline median is
    /// 0 and the candidate's is not (an increase from nothing, beyond every relative limit).
    pub ratio: Option<f64>,
    /// The metric's measured noise: the baseline's relative standard deviation (stddev / mean)
    /// over its repetitions; None with fewer than 2 or a mean of 0.
    pub noise: Option<f64>,
    /// The smallest relative change that counts: the larger of the limit and the noise.
    pub min_effect: f64,
    /// The significance level the t-test used: 1 - confidence, shared among the gated metrics
    /// of the comparison (see [`build_report`]).
    pub alpha: f64,
}

/// The baseline's relative standard deviation, None without 2 samples or with a mean of 0.
pub fn relative_noise(base: &Stats) -> Option<f64> {
    (base.n >= 2 && base.mean > 0.0).then(|| base.stddev / base.mean)
}

/// The gate's decision for one metric (lower is better), from the samples of each side.
///
/// - Effect size: the relative change of the medians. Medians, not means, so that one outlier
///   run cannot push a metric past its limit alone; it is also the ratio the report shows. An
///   increase from a median of 0 exceeds every limit.
/// - The effect must exceed the larger of the limit and the metric's noise — its relative
///   standard deviation over the baseline's repetitions (the history): a change smaller than
///   the spread between identical runs is not worth failing a job for, however significant.
/// - With at least 2 samples on each side, Welch's interval of the change of the means at level
///   1 - `confidence` decides among pass, regressed, improved and inconclusive (see
///   [`Unpaired::verdict_at`]): a regression needs the interval's lower bound above half the
///   limit, the noise and the floor besides the effect size above, a pass its upper bound under
///   the limit (or the difference within ±floor); a verdict the data cannot support is
///   inconclusive, never a pass.
/// - With fewer samples, the limit alone decides: regressed iff median ratio - 1 > `max_increase`.
/// - The same runs on both sides are not two samples: [`build_report`] passes them without a
///   test (see [`same_runs_decision`]); this function sees values only.
/// - An infinite `max_increase` ([`NOT_GATED`]) is reported as not gated, whatever the change.
/// - Improved is the mirror image (a decrease larger than the limit).
pub fn decide(baseline: &[f64], candidate: &[f64], max_increase: f64, confidence: f64) -> Decision {
    decide_above(baseline, candidate, max_increase, confidence, 0.0)
}

/// The smallest change of a metric in its unit that can count at all: below it a relative
/// change of a near-zero figure (4 ms of system time become 0; a 1.5 MiB process grows by 150
/// KiB of page-granular noise) means nothing: 10 ms for times, 1 MiB for bytes, none for counts.
pub fn absolute_floor(unit: &str) -> f64 {
    match unit {
        "s" => 0.010,
        "B" => 1024.0 * 1024.0,
        _ => 0.0,
    }
}

/// As [`decide`], where a change of the medians must also exceed `floor` (in the metric's unit).
pub fn decide_above(
    baseline: &[f64],
    candidate: &[f64],
    max_increase: f64,
    confidence: f64,
    floor: f64,
) -> Decision {
    let (Some(base), Some(cand)) = (Stats::of(baseline), Stats::of(candidate)) else {
        return Decision {
            verdict: Verdict::NoData,
            method: None,
            ratio: None,
            noise: None,
            min_effect: max_increase,
            alpha: 1.0 - confidence,
        };
    };
    let ratio = if base.median > 0.0 {
        Some(cand.median / base.median)
    } else if cand.median <= base.median {
        Some(1.0)
    } else {
        None
    };
    let noise = relative_noise(&base);
    let min_effect = max_increase.max(noise.unwrap_or(0.0));
    let limit = min_effect + LIMIT_TOLERANCE;
    let big_enough = (cand.median - base.median).abs() > floor;
    let (above, below) = match ratio {
        // A median of 0 cannot decrease further.
        Some(r) if base.median > 0.0 => (r - 1.0 > limit, 1.0 - r > limit),
        Some(_) => (false, false),
        None => (true, false),
    };
    let (above, below) = (above && big_enough, below && big_enough);
    let (method, verdict) = match Unpaired::of(&base, &cand) {
        Some(s) => {
            let (t, df) = welch_t(&base, &cand);
            let p = student_t_sf(t.abs(), df);
            let verdict = if max_increase.is_finite() {
                s.verdict(max_increase, 1.0 - confidence, floor)
            } else {
                Verdict::NotGated
            };
            (Method::Welch { t, df, p }, verdict)
        }
        // A single run on a side has no spread: the limit alone decides.
        None => (
            Method::Threshold,
            if !max_increase.is_finite() {
                Verdict::NotGated
            } else if above {
                Verdict::Regressed
            } else if below {
                Verdict::Improved
            } else {
                Verdict::Pass
            },
        ),
    };
    Decision {
        verdict,
        method: Some(method),
        ratio,
        noise,
        min_effect,
        alpha: 1.0 - confidence,
    }
}

// ---------------------------------------------------------------------------------------------
// --max
// ---------------------------------------------------------------------------------------------

/// The limit of every metric: the defaults, overridden by `--max METRIC=+N%` (the last wins).
pub fn parse_max(specs: &[String]) -> Result<BTreeMap<&'static str, f64>, String> {
    let mut limits: BTreeMap<&'static str, f64> = DEFAULT_MAX_INCREASE.iter().copied().collect();
    for spec in specs {
        let (metric, max) = parse_one_max(spec)?;
        limits.insert(metric, max);
    }
    Ok(limits)
}

pub(super) fn parse_one_max(spec: &str) -> Result<(&'static str, f64), String> {
    let Some((name, value)) = spec.split_once('=') else {
        return Err(format!(
            "--max `{spec}`: use METRIC=+N% or METRIC=off, e.g. --max cpu=+5% --max read=off"
        ));
    };
    let metric = resolve_metric(name).ok_or_else(|| {
        format!(
            "--max `{spec}`: unknown metric `{}`; metrics (aliases): {}",
            name.trim(),
            metric_names()
        )
    })?;
    // Reported, never gating: a metric too noisy to gate on here (storage I/O behind a cold
    // page cache), or one whose baseline is 0 where any use at all would fail the job.
    if value.trim().eq_ignore_ascii_case("off") {
        return Ok((metric, NOT_GATED));
    }
    if HIGHER_IS_BETTER.contains(&metric) {
        return Err(format!(
            "--max `{spec}`: {metric} is better when higher, and the gate fails on increases: \
             it is reported, not gated; watch the run's critical_path_s instead"
        ));
    }
    let percent = value
        .trim()
        .strip_suffix('%')
        .map(|v| v.strip_prefix('+').unwrap_or(v).trim())
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| v.is_finite())
        .ok_or_else(|| {
            format!("--max `{spec}`: `{value}` is not a percentage: use e.g. {name}=+5% or {name}=+0.5%, or {name}=off to report it without gating")
        })?;
    if percent < 0.0 {
        return Err(format!(
            "--max `{spec}`: the limit is the largest increase allowed, at least +0%, e.g. {name}=+5%"
        ));
    }
    Ok((metric, percent / 100.0))
}

/// A metric's full name from a full name or an alias, any case, `-` for `_`.
pub(super) fn resolve_metric(name: &str) -> Option<&'static str> {
    let name = name.trim().to_ascii_lowercase().replace('-', "_");
    METRICS
        .iter()
        .map(|m| m.name)
        .find(|&full| full == name)
        .or_else(|| {
            METRIC_ALIASES
                .iter()
                .find(|(alias, _)| *alias == name)
                .map(|&(_, full)| full)
        })
}

/// `wall_s (wall), cpu_s (cpu), ...` for error messages.
pub(super) fn metric_names() -> String {
    METRICS
        .iter()
        .map(|m| {
            let aliases: Vec<&str> = METRIC_ALIASES
                .iter()
                .filter(|(_, full)| *full == m.name)
                .map(|&(alias, _)| alias)
                .collect();
            if aliases.is_empty() {
                m.name.to_string()
            } else {
                format!("{} ({})", m.name, aliases.join(", "))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

// ---------------------------------------------------------------------------------------------
// The report
// ---------------------------------------------------------------------------------------------

/// What a side was, for the report's header.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SideInfo {
    /// The path as given.
    pub source: String,
    /// The command of its first run.
    pub command: String,
    /// summary.json files read.
    pub runs: usize,
    /// Repetitions over all its runs.
    pub samples: usize,
    /// Bench: the directory the side ran in (`--baseline-dir`, `--candidate-dir`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// The git commit of the directory its first run ran in, and whether tracked files had
    /// changes (run.json's `context.git`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dirty: Option<bool>,
    /// A baseline taken from a published dataset: which runs it used, each with its commit.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub dataset_runs: Vec<DatasetRun>,
}

/// One run of a dataset that a baseline used.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct DatasetRun {
    pub run_id: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
}

impl SideInfo {
    /// The distinct commits of a dataset baseline's runs, in the runs' order.
    pub fn dataset_commits(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for commit in self.dataset_runs.iter().filter_map(|r| r.commit.as_deref()) {
            if !out.contains(&commit) {
                out.push(commit);
            }
        }
        out
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Row {
    pub metric: &'static str,
    pub unit: &'static str,
    pub baseline: Option<Stats>,
    pub candidate: Option<Stats>,
    pub max_increase: f64,
    pub decision: Decision,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Report {
    pub baseline: SideInfo,
    pub candidate: SideInfo,
    pub confidence: f64,
    /// One per metric present on at least one side, in `METRICS` order.
    pub rows: Vec<Row>,
    /// What makes the comparison less trustworthy (failed runs, lost events, other commands).
    pub warnings: Vec<String>,
    /// Bench: the benchmark's name (`--name`, or the sides' common command), for Bencher.
    pub name: Option<String>,
    /// Bench: the pairs, what disturbed them, and the budget; the rows are then paired.
    pub series: Option<Series>,
}

impl Report {
    pub fn regressions(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.decision.verdict == Verdict::Regressed)
    }

    pub fn regressed(&self) -> bool {
        self.regressions().next().is_some()
    }

    /// Gated metrics the data could not decide yet.
    pub fn inconclusive(&self) -> impl Iterator<Item = &Row> {
        self.rows
            .iter()
            .filter(|r| r.decision.verdict == Verdict::Inconclusive)
    }

    /// `pass`, `regressed` or `inconclusive`: a regression decides, whatever the rest; else
    /// one undecided metric leaves the whole comparison undecided.
    pub fn outcome(&self) -> &'static str {
        if self.regressed() {
            "regressed"
        } else if self.inconclusive().next().is_some() {
            "inconclusive"
        } else {
            "pass"
        }
    }

    /// Pairs in all that would likely decide every undecided metric (the largest count), when
    /// the series is paired and undecided.
    pub fn pairs_needed(&self) -> Option<usize> {
        self.inconclusive()
            .filter_map(|row| match row.decision.method {
                Some(Method::Paired(s)) => more_pairs_needed(
                    &s,
                    row.max_increase,
                    row.decision.alpha,
                    absolute_floor(row.unit),
                ),
                _ => None,
            })
            .max()
    }

    /// Runs a side that would likely decide every undecided metric (the largest count), when
    /// the comparison is unpaired and undecided.
    pub fn runs_needed(&self) -> Option<usize> {
        self.inconclusive().filter_map(row_runs_needed).max()
    }

    pub fn exit_code(&self) -> i32 {
        match self.outcome() {
            "regressed" => EXIT_REGRESSED,
            "inconclusive" => EXIT_INCONCLUSIVE,
            _ => 0,
        }
    }
}

/// An unpaired row's Welch statistics, from its sides' figures (None with fewer than 2 samples
/// a side, or when it is paired).
pub fn row_unpaired(row: &Row) -> Option<Unpaired> {
    match row.decision.method {
        Some(Method::Welch { .. }) => Unpaired::of(row.baseline.as_ref()?, row.candidate.as_ref()?),
        _ => None,
    }
}

/// Runs a side that would likely decide an inconclusive unpaired row (see [`more_runs_needed`]).
pub fn row_runs_needed(row: &Row) -> Option<usize> {
    if row.decision.verdict != Verdict::Inconclusive {
        return None;
    }
    more_runs_needed(
        &row_unpaired(row)?,
        row.max_increase,
        row.decision.alpha,
        absolute_floor(row.unit),
    )
}

/// Decides every metric. `limits` holds each metric's largest allowed increase (see
/// [`parse_max`]); a metric missing from it gets its default.
pub fn build_report(
    baseline: &Side,
    candidate: &Side,
    limits: &BTreeMap<&'static str, f64>,
    confidence: f64,
) -> Report {
    let limit_of = |name: &str| {
        limits
            .get(name)
            .copied()
            .or_else(|| default_max_increase(name))
            .unwrap_or(0.0)
    };
    // Several metrics are tested at once: at a 5% level each, six gated metrics would fail
    // identical code far more often than 5% of the time. Bonferroni: the level is shared among
    // the gated metrics that get a t-test, so the chance that any of them fails identical code
    // stays within 1 - confidence.
    let tested = METRICS
        .iter()
        .filter(|def| limit_of(def.name).is_finite())
        .filter(|def| baseline.values(def.name).len() >= 2 && candidate.values(def.name).len() >= 2)
        .count()
        .max(1);
    let per_metric_confidence = 1.0 - (1.0 - confidence) / tested as f64;
    let overlap = overlap(baseline, candidate);
    let rows = METRICS
        .iter()
        .filter_map(|def| {
            let (base, cand) = (baseline.values(def.name), candidate.values(def.name));
            if base.is_empty() && cand.is_empty() {
                return None;
            }
            let max_increase = limit_of(def.name);
            let decision = decide_above(
                &base,
                &cand,
                max_increase,
                per_metric_confidence,
                absolute_floor(def.unit),
            );
            Some(Row {
                metric: def.name,
                unit: def.unit,
                baseline: Stats::of(&base),
                candidate: Stats::of(&cand),
                max_increase,
                decision: match overlap {
                    Overlap::Same => same_runs_decision(decision, max_increase),
                    _ => decision,
                },
            })
        })
        .collect();
    let warnings = warnings(baseline, candidate, overlap);
    let (baseline, candidate) = (side_info(baseline), side_info(candidate));
    Report {
        baseline,
        candidate,
        confidence,
        rows,
        warnings,
        name: None,
        series: None,
    }
}

/// What makes a comparison less trustworthy: runs on both sides among others, failed or
/// stopped runs, lost events, what the runs recorded themselves, different commands.
fn warnings(baseline: &Side, candidate: &Side, overlap: Overlap) -> Vec<String> {
    let mut warnings = Vec::new();
    if let Overlap::Shared(shared) = overlap {
        warnings.push(format!(
            "{shared} of the baseline's {} {} also the candidate's (the same runs): Welch's \
             interval takes the sides as independent samples, so it is wider than the data \
             warrant (more often inconclusive, not more often wrong); compare runs that are \
             not shared",
            plural(baseline.samples(), "sample"),
            if shared == 1 { "is" } else { "are" }
        ));
    }
    for (side_name, side) in [("baseline", baseline), ("candidate", candidate)] {
        for (path, summary) in &side.runs {
            let failed = summary
                .repetitions
                .iter()
                .filter(|r| r.exit_status != 0)
                .count();
            if failed > 0 {
                warnings.push(format!(
                    "{side_name} {}: {failed} of {} exited with a non-zero status; a failed run \
                     may use less than a successful one",
                    path.display(),
                    plural(summary.repetitions.len(), "repetition")
                ));
            }
            if let Some(breach) = &summary.limit_breach {
                warnings.push(format!(
                    "{side_name} {}: the {} limit stopped the run",
                    path.display(),
                    breach.limit
                ));
            }
            if summary.lost_events > 0 {
                warnings.push(format!(
                    "{side_name} {}: {} lost; the process tree may be incomplete",
                    path.display(),
                    plural(summary.lost_events as usize, "kernel event")
                ));
            }
        }
    }
    let mut commands: Vec<&str> = Vec::new();
    for (_, summary) in baseline.runs.iter().chain(&candidate.runs) {
        if !commands.contains(&summary.command.as_str()) {
            commands.push(&summary.command);
        }
    }
    // Side warnings the runs recorded themselves (a no-op after the warm-up, a busy machine).
    for (side_name, side) in [("baseline", baseline), ("candidate", candidate)] {
        for (path, summary) in &side.runs {
            for warning in &summary.warnings {
                warnings.push(format!("{side_name} {}: {warning}", path.display()));
            }
        }
    }
    if commands.len() > 1 && !baseline.different_commands_expected {
        let commands: Vec<String> = commands.iter().map(|c| format!("`{c}`")).collect();
        warnings.insert(
            0,
            format!(
                "comparing runs of different commands: {}",
                commands.join(", ")
            ),
        );
    }
    warnings
}

/// What the report says of a side: where it came from, its command, runs and samples, the
/// commit its first run was of, and a dataset's runs one by one.
fn side_info(side: &Side) -> SideInfo {
    let git = side
        .runs
        .first()
        .and_then(|(_, s)| s.context.as_ref())
        .and_then(|c| c.git.as_ref());
    SideInfo {
        source: side.source.display().to_string(),
        command: side
            .runs
            .first()
            .map(|(_, s)| s.command.clone())
            .unwrap_or_default(),
        runs: side.runs.len(),
        samples: side.samples(),
        directory: None,
        commit: git.and_then(|g| g.commit.clone()),
        dirty: git.and_then(|g| g.dirty),
        dataset_runs: if side.from_dataset {
            side.runs
                .iter()
                .flat_map(|(_, s)| {
                    let git = s.context.as_ref().and_then(|c| c.git.as_ref());
                    s.repetitions.iter().map(move |r| DatasetRun {
                        run_id: r.run_id.clone(),
                        commit: git.and_then(|g| g.commit.clone()),
                        branch: git.and_then(|g| g.branch.clone()),
                    })
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// The value of `metric` in each run of a side (its first repetition: a bench run has one), in
/// run order; None where the run lacks it.
fn per_run(side: &Side, metric: &str) -> Vec<Option<f64>> {
    side.runs
        .iter()
        .map(|(_, s)| {
            (s.repetitions.first())
                .and_then(|r| r.metrics.get(metric).copied())
                .filter(|v| v.is_finite())
        })
        .collect()
}

/// The report of a bench series: the k-th run of each side make pair k (their runs in order,
/// one repetition each), the pairs `series` leaves out excepted (see [`kept_pairs`]); each
/// metric decided by [`decide_paired`] at a level shared among the gated metrics and the series'
/// looks (Bonferroni), with the warnings of [`build_report`].
pub fn build_paired_report(
    baseline: &Side,
    candidate: &Side,
    limits: &BTreeMap<&'static str, f64>,
    confidence: f64,
    series: Series,
) -> Report {
    let mut report = build_report(baseline, candidate, limits, confidence);
    let kept = kept_pairs(&series.pairs);
    let pairs_of = |metric: &str| -> Vec<(f64, f64)> {
        per_run(baseline, metric)
            .into_iter()
            .zip(per_run(candidate, metric))
            .zip(kept.iter().chain(std::iter::repeat(&true)))
            .filter_map(|((b, c), &keep)| Some((b?, c?)).filter(|_| keep))
            .collect()
    };
    let tested = report
        .rows
        .iter()
        .filter(|row| row.max_increase.is_finite() && pairs_of(row.metric).len() >= 2)
        .count()
        .max(1);
    // And among the looks of a series that adds pairs (see `paired`'s documentation).
    let per_look_confidence = looks_level(1.0 - (1.0 - confidence) / tested as f64, series.looks);
    for row in &mut report.rows {
        let pairs = pairs_of(row.metric);
        let (base, cand): (Vec<f64>, Vec<f64>) = pairs.iter().copied().unzip();
        row.baseline = Stats::of(&base);
        row.candidate = Stats::of(&cand);
        row.decision = decide_paired(
            &pairs,
            row.max_increase,
            per_look_confidence,
            absolute_floor(row.unit),
        );
    }
    if kept.iter().all(|&k| k) && series.pairs.iter().any(|p| p.left_out.is_some()) {
        report.warnings.push(format!(
            "{} of {} pairs ran under different interference on their two sides, too many to \
             leave out: all are used",
            series.pairs.iter().filter(|p| p.left_out.is_some()).count(),
            series.pairs.len()
        ));
    }
    report.series = Some(Series {
        kept: kept.iter().filter(|&&k| k).count(),
        ..series
    });
    report
}
