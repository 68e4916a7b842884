//! `montrace compare`: decides whether a candidate run used more than a baseline.
//!
//! Pure core, thin edge: [`decide`] is the gate's decision for one metric (Welch's t-test plus a
//! minimum effect size, or the effect size alone with fewer than 2 samples a side),
//! [`build_report`] applies it to every metric of two loaded sides, and the `render_*`
//! functions turn a [`Report`] into text, Markdown, JSON or Bencher Metric Format. Only
//! [`compare_main`] and the loaders touch the file system.
//!
//! Every metric is "lower is better": a regression is an increase.
use std::{
    collections::BTreeMap,
    fmt::Write as _,
    fs,
    io::{self, Write as _},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

use crate::units::{format_bytes_signif as format_bytes, md_code};
use serde::Serialize;

use crate::{
    cli::{CompareArgs, CompareFormat},
    metrics::{Stats, Summary, METRICS, SUMMARY_FILE, SUMMARY_VERSION},
};

use crate::cli::{EXIT_REGRESSED, EXIT_USAGE};

/// Version of the `--format json` layout.
pub const COMPARE_JSON_VERSION: u32 = 1;

/// Largest increase of each metric's median that is not a regression (0.05 = +5%), unless
/// `--max` says otherwise. Measured noise is handled by the t-test; these are the smallest
/// changes worth failing a CI job for, chosen from how much each metric moves between identical
/// runs on a shared CI machine.
pub const DEFAULT_MAX_INCREASE: &[(&str, f64)] = &[
    // Wall time moves with machine load, scheduling and I/O waits: more slack than CPU time.
    ("wall_s", 0.10),
    // CPU time is what the command computed, the steadiest timing there is.
    ("cpu_s", 0.05),
    ("cpu_user_s", 0.05),
    // System time follows page-cache and file-system state that the command does not control.
    ("cpu_system_s", 0.10),
    // Memory peaks move a few percent between identical runs (allocator arenas, ASLR, page
    // granularity); the tree peaks are sampled, so a short peak between samples can be missed.
    ("peak_rss_bytes", 0.10),
    ("peak_tree_rss_bytes", 0.10),
    ("peak_tree_uss_bytes", 0.10),
    ("peak_tree_pss_bytes", 0.10),
    // Process counts are exact and mostly deterministic, but builds legitimately vary by a helper
    // or two (a cache hit skips a compiler, a jobserver retries). +5% ignores that in a large
    // tree yet flags a tool newly run once per file, and any extra process in a tree of < 20.
    ("processes", 0.05),
    // How many processes overlap depends on timing and on the sampler catching the overlap.
    ("max_concurrent", 0.25),
    // Storage I/O depends on the page cache: a warm cache reads nothing from storage.
    ("read_bytes", 0.10),
    ("write_bytes", 0.10),
    ("gpu_peak_memory_bytes", 0.10),
    ("gpu_energy_joules", 0.10),
];

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
    ("gpu_mem", "gpu_peak_memory_bytes"),
    ("energy", "gpu_energy_joules"),
    ("gpu_energy", "gpu_energy_joules"),
];

/// A change within this (relative) of the limit counts as at the limit, so that `+5%` allows
/// exactly 1.05x despite floating-point rounding.
const LIMIT_TOLERANCE: f64 = 1e-9;

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
    /// The candidate used more: beyond the limit and (with samples) beyond the noise.
    Regressed,
    /// The candidate used less, beyond the limit and the noise. Informational: never fails.
    Improved,
    /// A side has no value for this metric (e.g. no GPU): nothing to decide.
    NoData,
}

impl Verdict {
    /// Name in `--format json`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pass => "pass",
            Verdict::Regressed => "regressed",
            Verdict::Improved => "improved",
            Verdict::NoData => "no_data",
        }
    }

    /// Word in the text and Markdown tables.
    fn label(self) -> &'static str {
        match self {
            Verdict::Pass => "ok",
            Verdict::Regressed => "REGRESSED",
            Verdict::Improved => "improved",
            Verdict::NoData => "no data",
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
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Decision {
    pub verdict: Verdict,
    /// None when a side has no samples.
    pub method: Option<Method>,
    /// Candidate median / baseline median; 1 when both are 0; None when the baseline median is
    /// 0 and the candidate's is not (an increase from nothing, beyond every relative limit).
    pub ratio: Option<f64>,
}

/// The gate's decision for one metric (lower is better), from the samples of each side.
///
/// - Effect size: the relative change of the medians. Medians, not means, so that one outlier
///   run cannot push a metric past its limit alone; it is also the ratio the report shows. An
///   increase from a median of 0 exceeds every limit.
/// - With at least 2 samples on each side, a regression must also be significant: Welch's
///   one-sided t-test of "candidate mean > baseline mean" with p < 1 - `confidence`. Noise larger
///   than the limit therefore passes, and so does a significant change smaller than the limit.
/// - With fewer samples, the limit alone decides: regressed iff median ratio - 1 > `max_increase`.
/// - An infinite `max_increase` (`--max METRIC=off`) never regresses, not even from 0.
/// - Improved is the mirror image (significant, and a decrease larger than the limit).
pub fn decide(baseline: &[f64], candidate: &[f64], max_increase: f64, confidence: f64) -> Decision {
    let (Some(base), Some(cand)) = (Stats::of(baseline), Stats::of(candidate)) else {
        return Decision {
            verdict: Verdict::NoData,
            method: None,
            ratio: None,
        };
    };
    let ratio = if base.median > 0.0 {
        Some(cand.median / base.median)
    } else if cand.median <= base.median {
        Some(1.0)
    } else {
        None
    };
    let limit = max_increase + LIMIT_TOLERANCE;
    let (above, below) = match ratio {
        // A median of 0 cannot decrease further.
        Some(r) if base.median > 0.0 => (r - 1.0 > limit, 1.0 - r > limit),
        Some(_) => (false, false),
        None => (max_increase.is_finite(), false),
    };
    let (method, increased, decreased) = if base.n >= 2 && cand.n >= 2 {
        let (t, df) = welch_t(&base, &cand);
        let p = student_t_sf(t.abs(), df);
        let significant = p < 1.0 - confidence;
        (
            Method::Welch { t, df, p },
            significant && t > 0.0,
            significant && t < 0.0,
        )
    } else {
        (Method::Threshold, true, true)
    };
    let verdict = if above && increased {
        Verdict::Regressed
    } else if below && decreased {
        Verdict::Improved
    } else {
        Verdict::Pass
    };
    Decision {
        verdict,
        method: Some(method),
        ratio,
    }
}

/// Welch's t statistic of candidate - baseline and its Welch–Satterthwaite degrees of freedom.
/// Both sides need n >= 2.
fn welch_t(base: &Stats, cand: &Stats) -> (f64, f64) {
    let v1 = base.stddev.powi(2) / base.n as f64;
    let v2 = cand.stddev.powi(2) / cand.n as f64;
    let diff = cand.mean - base.mean;
    let se2 = v1 + v2;
    if se2 == 0.0 {
        // No variance on either side: equal means are no evidence of anything, different means
        // are certain. The degrees of freedom are undefined; the pooled ones stand in.
        let t = if diff == 0.0 {
            0.0
        } else {
            diff.signum() * f64::INFINITY
        };
        return (t, (base.n + cand.n - 2) as f64);
    }
    let df = se2.powi(2) / (v1.powi(2) / (base.n - 1) as f64 + v2.powi(2) / (cand.n - 1) as f64);
    (diff / se2.sqrt(), df)
}

/// P(T > t) for Student's t distribution with `df` degrees of freedom (df > 0, need not be an
/// integer): `I_x(df/2, 1/2) / 2` with `x = df / (df + t²)` for t >= 0.
pub fn student_t_sf(t: f64, df: f64) -> f64 {
    if t.is_nan() || df.is_nan() || df <= 0.0 {
        return f64::NAN;
    }
    if t.is_infinite() {
        return if t > 0.0 { 0.0 } else { 1.0 };
    }
    let tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t));
    if t >= 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// The regularized incomplete beta function I_x(a, b) for a, b > 0 and 0 <= x <= 1, from its
/// continued fraction (Numerical Recipes, 3rd ed., §6.4), which converges fast for
/// x < (a + 1) / (a + b + 2); the symmetry I_x(a, b) = 1 - I_{1-x}(b, a) covers the rest.
pub fn regularized_incomplete_beta(a: f64, b: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 0.0;
    }
    if x >= 1.0 {
        return 1.0;
    }
    let ln_front = ln_gamma(a + b) - ln_gamma(a) - ln_gamma(b) + a * x.ln() + b * (1.0 - x).ln();
    let front = ln_front.exp();
    if x < (a + 1.0) / (a + b + 2.0) {
        front * beta_continued_fraction(a, b, x) / a
    } else {
        1.0 - front * beta_continued_fraction(b, a, 1.0 - x) / b
    }
}

/// The continued fraction of I_x(a, b), evaluated by the modified Lentz method.
fn beta_continued_fraction(a: f64, b: f64, x: f64) -> f64 {
    const MAX_ITERATIONS: usize = 300;
    const EPSILON: f64 = 1e-15;
    // Stands in for a zero denominator (Lentz).
    const TINY: f64 = 1e-300;
    let not_zero = |v: f64| if v.abs() < TINY { TINY } else { v };
    let (qab, qap, qam) = (a + b, a + 1.0, a - 1.0);
    let mut c = 1.0;
    let mut d = 1.0 / not_zero(1.0 - qab * x / qap);
    let mut h = d;
    for m in 1..=MAX_ITERATIONS {
        let m = m as f64;
        let m2 = 2.0 * m;
        // Even step.
        let aa = m * (b - m) * x / ((qam + m2) * (a + m2));
        d = 1.0 / not_zero(1.0 + aa * d);
        c = not_zero(1.0 + aa / c);
        h *= d * c;
        // Odd step.
        let aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2));
        d = 1.0 / not_zero(1.0 + aa * d);
        c = not_zero(1.0 + aa / c);
        let delta = d * c;
        h *= delta;
        if (delta - 1.0).abs() < EPSILON {
            break;
        }
    }
    h
}

/// ln Γ(x) for x > 0 by the Lanczos approximation (g = 7, 9 terms; ~15 significant digits).
/// `f64::ln_gamma` is not stable yet.
fn ln_gamma(x: f64) -> f64 {
    const G: f64 = 7.0;
    const COEFFICIENTS: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        // Reflection: Γ(x) Γ(1 - x) = π / sin(πx).
        let pi = std::f64::consts::PI;
        return (pi / (pi * x).sin()).ln() - ln_gamma(1.0 - x);
    }
    let x = x - 1.0;
    let mut sum = COEFFICIENTS[0];
    for (i, c) in COEFFICIENTS.iter().enumerate().skip(1) {
        sum += c / (x + i as f64);
    }
    let t = x + G + 0.5;
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + sum.ln()
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

fn parse_one_max(spec: &str) -> Result<(&'static str, f64), String> {
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
        return Ok((metric, f64::INFINITY));
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
fn resolve_metric(name: &str) -> Option<&'static str> {
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
fn metric_names() -> String {
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
// Loading
// ---------------------------------------------------------------------------------------------

/// One side of a comparison: every summary.json found under the path given.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// The path as given on the command line.
    pub source: PathBuf,
    /// Each summary.json's path and contents, in path order.
    pub runs: Vec<(PathBuf, Summary)>,
}

impl Side {
    /// The samples of one metric: every repetition of every run.
    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.runs
            .iter()
            .flat_map(|(_, s)| s.values(metric))
            .filter(|v| v.is_finite())
            .collect()
    }

    fn samples(&self) -> usize {
        self.runs.iter().map(|(_, s)| s.repetitions.len()).sum()
    }
}

const WHAT_TO_PASS: &str = "pass a run directory written by `montrace run`, its summary.json, \
                            or a directory holding several run directories";

/// Loads one side: a summary.json file; a run directory (its summary.json: all its repetitions
/// are samples); or a directory without summary.json whose sub-directories (one level down) are
/// runs, each contributing its repetitions. Errors are messages for a usage error.
pub fn load_side(path: &Path) -> Result<Side, String> {
    let meta = fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => format!("{} does not exist: {WHAT_TO_PASS}", path.display()),
        _ => format!("cannot read {}: {e}", path.display()),
    })?;
    let files = if meta.is_file() {
        vec![path.to_path_buf()]
    } else if path.join(SUMMARY_FILE).is_file() {
        vec![path.join(SUMMARY_FILE)]
    } else {
        let entries =
            fs::read_dir(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| format!("cannot read {}: {e}", path.display()))?;
            let file = entry.path().join(SUMMARY_FILE);
            if file.is_file() {
                files.push(file);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(format!(
                "no {SUMMARY_FILE} in {} nor in its sub-directories: {WHAT_TO_PASS}",
                path.display()
            ));
        }
        files
    };
    let runs = files
        .into_iter()
        .map(|file| read_summary(&file).map(|summary| (file, summary)))
        .collect::<Result<Vec<_>, _>>()?;
    let side = Side {
        source: path.to_path_buf(),
        runs,
    };
    if side.samples() == 0 {
        return Err(format!(
            "{} holds no measurements (no repetitions): compare runs that completed",
            path.display()
        ));
    }
    Ok(side)
}

fn read_summary(path: &Path) -> Result<Summary, String> {
    let text =
        fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let value: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| format!("{} is not valid JSON ({e}): {WHAT_TO_PASS}", path.display()))?;
    if let Some(version) = value.get("schema_version").and_then(|v| v.as_u64()) {
        if version > u64::from(SUMMARY_VERSION) {
            return Err(format!(
                "{} has schema version {version}, newer than this montrace reads \
                 ({SUMMARY_VERSION}): compare it with the montrace that wrote it",
                path.display()
            ));
        }
    }
    serde_json::from_value(value).map_err(|e| {
        format!(
            "{} is not a montrace summary.json ({e}): {WHAT_TO_PASS}",
            path.display()
        )
    })
}

/// Every run on both sides must be of one command, unless different commands are allowed.
pub fn check_commands(
    baseline: &Side,
    candidate: &Side,
    allow_different: bool,
) -> Result<(), String> {
    if allow_different {
        return Ok(());
    }
    let mut runs = baseline.runs.iter().chain(&candidate.runs);
    let Some((first_path, first)) = runs.next() else {
        return Ok(());
    };
    for (path, summary) in runs {
        if summary.command != first.command {
            return Err(format!(
                "different commands: `{}` ({}) and `{}` ({}): compare runs of the same command, \
                 or pass --allow-different-commands",
                first.command,
                first_path.display(),
                summary.command,
                path.display()
            ));
        }
    }
    Ok(())
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

    pub fn exit_code(&self) -> i32 {
        if self.regressed() {
            EXIT_REGRESSED
        } else {
            0
        }
    }
}

/// Decides every metric. `limits` holds each metric's largest allowed increase (see
/// [`parse_max`]); a metric missing from it gets its default.
pub fn build_report(
    baseline: &Side,
    candidate: &Side,
    limits: &BTreeMap<&'static str, f64>,
    confidence: f64,
) -> Report {
    let rows = METRICS
        .iter()
        .filter_map(|def| {
            let (base, cand) = (baseline.values(def.name), candidate.values(def.name));
            if base.is_empty() && cand.is_empty() {
                return None;
            }
            let max_increase = limits
                .get(def.name)
                .copied()
                .or_else(|| default_max_increase(def.name))
                .unwrap_or(0.0);
            Some(Row {
                metric: def.name,
                unit: def.unit,
                baseline: Stats::of(&base),
                candidate: Stats::of(&cand),
                max_increase,
                decision: decide(&base, &cand, max_increase, confidence),
            })
        })
        .collect();
    let mut warnings = Vec::new();
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
    let info = |side: &Side| SideInfo {
        source: side.source.display().to_string(),
        command: side
            .runs
            .first()
            .map(|(_, s)| s.command.clone())
            .unwrap_or_default(),
        runs: side.runs.len(),
        samples: side.samples(),
    };
    let mut commands: Vec<&str> = Vec::new();
    for (_, summary) in baseline.runs.iter().chain(&candidate.runs) {
        if !commands.contains(&summary.command.as_str()) {
            commands.push(&summary.command);
        }
    }
    if commands.len() > 1 {
        let commands: Vec<String> = commands.iter().map(|c| format!("`{c}`")).collect();
        warnings.insert(
            0,
            format!(
                "comparing runs of different commands: {}",
                commands.join(", ")
            ),
        );
    }
    let (baseline, candidate) = (info(baseline), info(candidate));
    Report {
        baseline,
        candidate,
        confidence,
        rows,
        warnings,
    }
}

// ---------------------------------------------------------------------------------------------
// The edge
// ---------------------------------------------------------------------------------------------

/// `montrace compare`: prints the report on stdout; returns 0 when nothing regressed, 1 when a
/// metric did, 2 for usage errors (printed on stderr).
pub fn compare_main(args: CompareArgs) -> anyhow::Result<i32> {
    let report = match prepare(&args) {
        Ok(report) => report,
        Err(message) => {
            crate::say!("montrace: error: {message}");
            return Ok(EXIT_USAGE);
        }
    };
    let out = render(&report, args.format);
    let mut stdout = io::stdout().lock();
    stdout
        .write_all(out.as_bytes())
        .and_then(|()| stdout.flush())
        .context("cannot write the comparison to stdout")?;
    Ok(report.exit_code())
}

/// Everything up to the report: `--max`, both sides, their commands, the decisions.
pub fn prepare(args: &CompareArgs) -> Result<Report, String> {
    let limits = parse_max(&args.max)?;
    let baseline = load_side(&args.baseline).map_err(|e| format!("baseline: {e}"))?;
    let candidate = load_side(&args.candidate).map_err(|e| format!("candidate: {e}"))?;
    check_commands(&baseline, &candidate, args.allow_different_commands)?;
    Ok(build_report(
        &baseline,
        &candidate,
        &limits,
        args.confidence,
    ))
}

// ---------------------------------------------------------------------------------------------
// Rendering: pure functions of the report
// ---------------------------------------------------------------------------------------------

pub fn render(report: &Report, format: CompareFormat) -> String {
    match format {
        CompareFormat::Text => render_text(report),
        CompareFormat::Md => render_md(report),
        CompareFormat::Json => render_json(report),
        CompareFormat::Bmf => render_bmf(report),
    }
}

/// `x` with at most `decimals` decimals and no trailing zeros: `0.05`, `5`, `2.5`.
fn trim_float(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A value in its metric's unit: `12.345s`, `512.0 MiB`, `3.5 J`, `42`.
fn format_value(unit: &str, value: f64) -> String {
    match unit {
        "s" => format!("{value:.3}s"),
        "B" => format_bytes(value),
        "J" => format!("{value:.1} J"),
        _ if value.fract() == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.1}"),
    }
}

/// `1.000s ± 0.010s (5)`; `1.000s (1)` for a single sample; `-` for none.
fn format_stats(unit: &str, stats: Option<&Stats>) -> String {
    match stats {
        None => "-".into(),
        Some(s) if s.n < 2 => format!("{} ({})", format_value(unit, s.median), s.n),
        Some(s) => format!(
            "{} ± {} ({})",
            format_value(unit, s.median),
            format_value(unit, s.stddev),
            s.n
        ),
    }
}

fn format_ratio(row: &Row) -> String {
    match (row.decision.verdict, row.decision.ratio) {
        (Verdict::NoData, _) | (_, None) => "-".into(),
        (_, Some(r)) => format!("{r:.2}x"),
    }
}

/// `+101.0%`, `-20.0%`, `from 0` (an increase from a median of 0), `-` (no data).
fn format_change(row: &Row) -> String {
    match (row.decision.verdict, row.decision.ratio) {
        (Verdict::NoData, _) => "-".into(),
        (_, None) => "from 0".into(),
        (_, Some(r)) => format!("{:+.1}%", (r - 1.0) * 100.0),
    }
}

fn format_limit(max_increase: f64) -> String {
    if max_increase.is_finite() {
        format!("+{}%", trim_float(max_increase * 100.0, 2))
    } else {
        "off".into()
    }
}

fn format_p(p: f64) -> String {
    if p < 0.0001 {
        "<0.0001".into()
    } else {
        format!("{p:.4}")
    }
}

fn p_value(row: &Row) -> Option<f64> {
    match row.decision.method {
        Some(Method::Welch { p, .. }) => Some(p),
        _ => None,
    }
}

fn alpha(confidence: f64) -> String {
    trim_float(1.0 - confidence, 4)
}

/// `cpu_s (+101.0% > +5%, p=0.0001 < 0.05)`, `cpu_s (+6.0% > +5%, fewer than 2 samples a side)`,
/// `read_bytes (from 0 to 4.00 KiB, p=0.0210 < 0.05)`.
fn explain(row: &Row, confidence: f64) -> String {
    let limit = trim_float(row.max_increase * 100.0, 2);
    let change = match row.decision.ratio {
        None => format!(
            "from 0 to {}",
            format_value(row.unit, row.candidate.map_or(0.0, |s| s.median))
        ),
        Some(_) if row.decision.verdict == Verdict::Improved => {
            format!("{} beyond -{limit}%", format_change(row))
        }
        Some(_) => format!("{} > +{limit}%", format_change(row)),
    };
    let evidence = match p_value(row) {
        Some(p) if p < 0.0001 => format!("p<0.0001 < {}", alpha(confidence)),
        Some(p) => format!("p={} < {}", format_p(p), alpha(confidence)),
        None => "fewer than 2 samples a side".into(),
    };
    format!("{} ({change}, {evidence})", row.metric)
}

/// The closing lines: improvements (if any), then regressions or "no regression"; each a
/// headline and the metrics it lists.
fn conclusion(report: &Report) -> Vec<(String, Vec<String>)> {
    let list = |verdict: Verdict| -> Vec<String> {
        report
            .rows
            .iter()
            .filter(|r| r.decision.verdict == verdict)
            .map(|r| explain(r, report.confidence))
            .collect()
    };
    let mut lines = Vec::new();
    let improved = list(Verdict::Improved);
    if !improved.is_empty() {
        lines.push((
            format!("{} improved", plural(improved.len(), "metric")),
            improved,
        ));
    }
    let regressed = list(Verdict::Regressed);
    if regressed.is_empty() {
        lines.push(("no regression".into(), regressed));
    } else {
        lines.push((
            format!("{} regressed", plural(regressed.len(), "metric")),
            regressed,
        ));
    }
    lines
}

/// How the verdicts were reached, in two lines.
fn rule(report: &Report) -> [String; 2] {
    [
        "lower is better for every metric; REGRESSED when the median grows past its limit".into(),
        format!(
            "and, with 2+ samples a side, Welch's t-test finds the increase significant at {}% \
             confidence",
            trim_float(report.confidence * 100.0, 2)
        ),
    ]
}

/// `1 run`, `5 samples`.
fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

fn side_line(side: &SideInfo) -> String {
    format!(
        "{}: {} from {}",
        side.source,
        plural(side.samples, "sample"),
        plural(side.runs, "run")
    )
}

const HEADERS: [&str; 8] = [
    "metric",
    "baseline",
    "candidate",
    "ratio",
    "change",
    "limit",
    "p",
    "verdict",
];

fn table_cells(report: &Report) -> Vec<[String; 8]> {
    report
        .rows
        .iter()
        .map(|row| {
            [
                row.metric.to_string(),
                format_stats(row.unit, row.baseline.as_ref()),
                format_stats(row.unit, row.candidate.as_ref()),
                format_ratio(row),
                format_change(row),
                format_limit(row.max_increase),
                p_value(row).map_or_else(|| "-".into(), format_p),
                row.decision.verdict.label().to_string(),
            ]
        })
        .collect()
}

/// A table for people, readable in a CI log.
pub fn render_text(report: &Report) -> String {
    let mut out = String::from("montrace compare\n");
    let (base, cand) = (&report.baseline, &report.candidate);
    if base.command == cand.command {
        let _ = writeln!(out, "  command    {}", base.command);
        let _ = writeln!(out, "  baseline   {}", side_line(base));
        let _ = writeln!(out, "  candidate  {}", side_line(cand));
    } else {
        let _ = writeln!(out, "  baseline   {} ({})", side_line(base), base.command);
        let _ = writeln!(out, "  candidate  {} ({})", side_line(cand), cand.command);
    }
    let [rule1, rule2] = rule(report);
    let _ = writeln!(out, "  rule       {rule1}\n             {rule2}");
    out.push('\n');
    let cells = table_cells(report);
    let mut widths = HEADERS.map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    // Figures are right-aligned so that their digits line up; names and words left-aligned.
    let right = [false, true, true, true, true, true, true, false];
    let headers = HEADERS.map(String::from);
    for row in std::iter::once(&headers).chain(&cells) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            let pad = " ".repeat(widths[i] - cell.chars().count());
            if right[i] {
                line.push_str(&pad);
                line.push_str(cell);
            } else {
                line.push_str(cell);
                line.push_str(&pad);
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out.push('\n');
    for warning in &report.warnings {
        let _ = writeln!(out, "warning: {warning}");
    }
    for (headline, items) in conclusion(report) {
        match items.as_slice() {
            [] => out.push_str(&headline),
            [item] => {
                let _ = write!(out, "{headline}: {item}");
            }
            _ => {
                out.push_str(&headline);
                out.push(':');
                for item in &items {
                    let _ = write!(out, "\n  {item}");
                }
            }
        }
        out.push('\n');
    }
    out
}

/// Markdown, for a pull-request comment.
pub fn render_md(report: &Report) -> String {
    let mut out = String::new();
    let regressed = report.regressions().count();
    let headline = if regressed == 0 {
        "✅ no regression".to_string()
    } else {
        format!("❌ {} regressed", plural(regressed, "metric"))
    };
    let _ = writeln!(out, "### montrace compare: {headline}\n");
    let (base, cand) = (&report.baseline, &report.candidate);
    let side = |side: &SideInfo| {
        format!(
            "{}: {} from {}",
            md_code(&side.source),
            plural(side.samples, "sample"),
            plural(side.runs, "run")
        )
    };
    if base.command == cand.command {
        let _ = writeln!(out, "- command: {}", md_code(&base.command));
        let _ = writeln!(out, "- baseline: {}", side(base));
        let _ = writeln!(out, "- candidate: {}", side(cand));
    } else {
        let _ = writeln!(
            out,
            "- baseline: {} ({})",
            side(base),
            md_code(&base.command)
        );
        let _ = writeln!(
            out,
            "- candidate: {} ({})",
            side(cand),
            md_code(&cand.command)
        );
    }
    let _ = writeln!(out, "- rule: {}\n", rule(report).join(" "));
    let _ = writeln!(out, "| {} |", HEADERS.join(" | "));
    let _ = writeln!(out, "|:---|---:|---:|---:|---:|---:|---:|:---|");
    for (row, cells) in report.rows.iter().zip(table_cells(report)) {
        let [metric, baseline, candidate, ratio, change, limit, p, verdict] = cells;
        let verdict = match row.decision.verdict {
            Verdict::Regressed => format!("❌ **{verdict}**"),
            _ => verdict,
        };
        let _ = writeln!(
            out,
            "| `{metric}` | {baseline} | {candidate} | {ratio} | {change} | {limit} | {p} | {verdict} |"
        );
    }
    out.push('\n');
    for warning in &report.warnings {
        let _ = writeln!(out, "- ⚠️ {}", warning.replace('\n', " "));
    }
    if !report.warnings.is_empty() {
        out.push('\n');
    }
    for (headline, items) in conclusion(report) {
        match items.as_slice() {
            [] => {
                let _ = writeln!(out, "**{headline}**");
            }
            [item] => {
                let _ = writeln!(out, "**{headline}**: {item}");
            }
            _ => {
                let _ = writeln!(out, "**{headline}**:\n");
                for item in &items {
                    let _ = writeln!(out, "- {item}");
                }
            }
        }
        out.push('\n');
    }
    // One trailing newline, not a blank line.
    while out.ends_with("\n\n") {
        out.pop();
    }
    out
}

#[derive(Serialize)]
struct JsonReport<'a> {
    schema_version: u32,
    regressed: bool,
    confidence: f64,
    baseline: &'a SideInfo,
    candidate: &'a SideInfo,
    metrics: Vec<JsonRow<'a>>,
    warnings: &'a [String],
}

#[derive(Serialize)]
struct JsonRow<'a> {
    metric: &'a str,
    unit: &'a str,
    lower_is_better: bool,
    baseline: Option<&'a Stats>,
    candidate: Option<&'a Stats>,
    /// Candidate median / baseline median.
    ratio: Option<f64>,
    /// Largest increase allowed (0.1 = +10%); null for `--max METRIC=off`.
    max_increase: Option<f64>,
    verdict: &'static str,
    /// `welch`, `threshold`, or null (no data).
    method: Option<&'static str>,
    /// Welch's test; null otherwise (and t when infinite).
    t: Option<f64>,
    df: Option<f64>,
    p_value: Option<f64>,
}

/// JSON, for machines: stable field names, versioned by `schema_version`.
pub fn render_json(report: &Report) -> String {
    let finite = |v: f64| Some(v).filter(|v| v.is_finite());
    let metrics = report
        .rows
        .iter()
        .map(|row| {
            let (method, t, df, p_value) = match row.decision.method {
                Some(Method::Welch { t, df, p }) => {
                    (Some("welch"), finite(t), finite(df), finite(p))
                }
                Some(Method::Threshold) => (Some("threshold"), None, None, None),
                None => (None, None, None, None),
            };
            JsonRow {
                metric: row.metric,
                unit: row.unit,
                lower_is_better: true,
                baseline: row.baseline.as_ref(),
                candidate: row.candidate.as_ref(),
                ratio: row.decision.ratio.and_then(finite),
                max_increase: finite(row.max_increase),
                verdict: row.decision.verdict.as_str(),
                method,
                t,
                df,
                p_value,
            }
        })
        .collect();
    let json = JsonReport {
        schema_version: COMPARE_JSON_VERSION,
        regressed: report.regressed(),
        confidence: report.confidence,
        baseline: &report.baseline,
        candidate: &report.candidate,
        metrics,
        warnings: &report.warnings,
    };
    let mut out = serde_json::to_string_pretty(&json).expect("the report serializes");
    out.push('\n');
    out
}

#[derive(Serialize)]
struct BmfMetric {
    value: f64,
    lower_value: f64,
    upper_value: f64,
}

/// Bencher Metric Format (<https://bencher.dev/docs/reference/bencher-metric-format/>): the
/// candidate's figures as `{ command: { metric: { value: median, lower_value: min, upper_value:
/// max } } }`, for `bencher run --adapter json`; Bencher keeps the history and its own
/// thresholds, so the baseline is not part of it.
pub fn render_bmf(report: &Report) -> String {
    let measures: BTreeMap<&str, BmfMetric> = report
        .rows
        .iter()
        .filter_map(|row| {
            row.candidate.as_ref().map(|s| {
                (
                    row.metric,
                    BmfMetric {
                        value: s.median,
                        lower_value: s.min,
                        upper_value: s.max,
                    },
                )
            })
        })
        .collect();
    let bmf = BTreeMap::from([(report.candidate.command.as_str(), measures)]);
    let mut out = serde_json::to_string_pretty(&bmf).expect("the report serializes");
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::Repetition;

    fn close(actual: f64, expected: f64, tolerance: f64) {
        assert!(
            (actual - expected).abs() <= tolerance,
            "{actual} is not within {tolerance} of {expected}"
        );
    }

    // Reference values: mpmath (30 digits), `0.5 * betainc(df/2, 1/2, 0, df/(df+t²), regularized=True)`.
    #[test]
    fn student_t_tail_matches_known_values() {
        for (t, df, expected) in [
            (2.0, 10.0, 0.036_694_017_385_370_2),
            (1.0, 5.0, 0.181_608_733_824_561),
            (3.5, 2.5, 0.026_172_773_480_160_2),
            (0.5, 7.3, 0.315_896_763_402_221),
            (10.0, 3.0, 0.001_064_199_529_207_08),
            (0.1, 1.0, 0.468_274_482_569_446),
            (25.0, 4.0, 7.598_762_881_657_87e-6),
        ] {
            close(student_t_sf(t, df), expected, expected * 1e-9);
            close(student_t_sf(-t, df), 1.0 - expected, 1e-12);
        }
        // Large df: the normal distribution (P(Z > 1.96) = 0.0249979).
        close(student_t_sf(1.96, 1e6), 0.024_998_033_791_414_7, 1e-9);
        assert_eq!(student_t_sf(0.0, 4.0), 0.5);
        assert_eq!(student_t_sf(f64::INFINITY, 4.0), 0.0);
        assert_eq!(student_t_sf(f64::NEG_INFINITY, 4.0), 1.0);
    }

    #[test]
    fn incomplete_beta_and_gamma_match_known_values() {
        for (a, b, x, expected) in [
            (2.0, 3.0, 0.4, 0.5248),
            (0.5, 0.5, 0.3, 0.369_010_119_565_545),
            (5.0, 0.5, 0.9, 0.316_642_915_020_012),
            (10.0, 20.0, 0.35, 0.592_386_663_663_905),
            (1.0, 1.0, 0.7, 0.7),
        ] {
            close(regularized_incomplete_beta(a, b, x), expected, 1e-12);
        }
        assert_eq!(regularized_incomplete_beta(2.0, 3.0, 0.0), 0.0);
        assert_eq!(regularized_incomplete_beta(2.0, 3.0, 1.0), 1.0);
        close(ln_gamma(0.5), std::f64::consts::PI.sqrt().ln(), 1e-13);
        close(ln_gamma(10.0), 362_880f64.ln(), 1e-12);
        close(ln_gamma(1.0), 0.0, 1e-13);
        close(ln_gamma(0.25), 3.625_609_908_221_908_f64.ln(), 1e-13);
    }

    fn welch_p(decision: &Decision) -> f64 {
        match decision.method {
            Some(Method::Welch { p, .. }) => p,
            other => panic!("expected Welch's test, got {other:?}"),
        }
    }

    #[test]
    fn identical_distributions_pass() {
        let runs = [1.00, 1.02, 0.98, 1.01, 0.99];
        let d = decide(&runs, &runs, 0.05, 0.95);
        assert_eq!(d.verdict, Verdict::Pass);
        assert_eq!(d.ratio, Some(1.0));
        close(welch_p(&d), 0.5, 1e-12);
    }

    #[test]
    fn twice_the_cpu_fails() {
        let baseline = [1.00, 1.02, 0.98, 1.01, 0.99];
        let candidate = [2.01, 1.98, 2.03, 2.00, 2.02];
        let d = decide(&baseline, &candidate, 0.05, 0.95);
        assert_eq!(d.verdict, Verdict::Regressed);
        close(d.ratio.unwrap(), 2.01, 1e-12);
        let Some(Method::Welch { t, df, p }) = d.method else {
            panic!("{d:?}")
        };
        assert!(t > 50.0 && df > 7.0 && df < 8.0 && p < 1e-9, "{d:?}");
        // The same change the other way round is an improvement, which never fails.
        assert_eq!(
            decide(&candidate, &baseline, 0.05, 0.95).verdict,
            Verdict::Improved
        );
    }

    #[test]
    fn noise_larger_than_the_limit_does_not_fail() {
        let baseline = [1.0, 1.3, 0.8, 1.2, 0.9];
        let candidate = [1.1, 0.85, 1.35, 0.95, 1.15];
        let d = decide(&baseline, &candidate, 0.05, 0.95);
        // The medians differ by 10%, twice the limit, but the spread is larger still.
        close(d.ratio.unwrap(), 1.1, 1e-12);
        assert!(welch_p(&d) > 0.3, "{d:?}");
        assert_eq!(d.verdict, Verdict::Pass);
        // The same medians as single samples: the limit alone decides, and fails it.
        assert_eq!(
            decide(&[1.0], &[1.1], 0.05, 0.95).verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn significant_change_below_the_limit_passes() {
        let baseline = [1.000, 1.001, 0.999, 1.000, 1.000];
        let candidate = [1.010, 1.011, 1.009, 1.010, 1.010];
        let d = decide(&baseline, &candidate, 0.05, 0.95);
        assert!(welch_p(&d) < 1e-6, "{d:?}");
        assert_eq!(d.verdict, Verdict::Pass);
        // With a +0.5% limit it is a regression.
        assert_eq!(
            decide(&baseline, &candidate, 0.005, 0.95).verdict,
            Verdict::Regressed
        );
    }

    #[test]
    fn single_samples_use_the_limit() {
        let d = decide(&[1.0], &[1.04], 0.05, 0.95);
        assert_eq!(
            (d.verdict, d.method),
            (Verdict::Pass, Some(Method::Threshold))
        );
        assert_eq!(
            decide(&[1.0], &[1.06], 0.05, 0.95).verdict,
            Verdict::Regressed
        );
        // Exactly at the limit passes, whatever the rounding of 1.05 / 1.0 - 1.
        assert_eq!(decide(&[1.0], &[1.05], 0.05, 0.95).verdict, Verdict::Pass);
        assert_eq!(
            decide(&[1.0], &[0.90], 0.05, 0.95).verdict,
            Verdict::Improved
        );
        // One side with several samples, the other with one: still the limit alone.
        let d = decide(&[1.0, 1.01, 0.99], &[1.06], 0.05, 0.95);
        assert_eq!(
            (d.verdict, d.method),
            (Verdict::Regressed, Some(Method::Threshold))
        );
    }

    #[test]
    fn zero_baselines() {
        let d = decide(&[0.0], &[4096.0], 0.10, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Regressed, None));
        let d = decide(&[0.0], &[0.0], 0.10, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Pass, Some(1.0)));
        let d = decide(&[0.0, 0.0, 0.0], &[4096.0, 8192.0, 4096.0], 0.10, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Regressed, None));
        // From nothing, but not beyond the noise.
        let d = decide(&[0.0, 0.0, 9000.0], &[0.0, 4096.0, 0.0], 0.10, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Pass, Some(1.0)));
        let d = decide(&[0.0, 9000.0, 0.0], &[4096.0, 0.0, 4096.0], 0.10, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Pass, None));
    }

    #[test]
    fn no_variance() {
        // Exact counts: equal is no evidence, a different count is certain.
        let d = decide(&[10.0, 10.0], &[10.0, 10.0, 10.0], 0.05, 0.95);
        assert_eq!(d.verdict, Verdict::Pass);
        assert_eq!(
            d.method,
            Some(Method::Welch {
                t: 0.0,
                df: 3.0,
                p: 0.5
            })
        );
        let d = decide(&[10.0, 10.0], &[12.0, 12.0], 0.05, 0.95);
        assert_eq!(d.verdict, Verdict::Regressed);
        assert_eq!(
            d.method,
            Some(Method::Welch {
                t: f64::INFINITY,
                df: 2.0,
                p: 0.0
            })
        );
        // No variance on one side only: Welch's test copes.
        let d = decide(&[10.0, 10.0, 10.0], &[12.0, 13.0, 12.0], 0.05, 0.95);
        assert_eq!(d.verdict, Verdict::Regressed);
        let Some(Method::Welch { df, .. }) = d.method else {
            panic!("{d:?}")
        };
        close(df, 2.0, 1e-12);
    }

    #[test]
    fn missing_samples_are_no_data() {
        let d = decide(&[], &[1.0], 0.05, 0.95);
        assert_eq!(
            d,
            Decision {
                verdict: Verdict::NoData,
                method: None,
                ratio: None
            }
        );
        assert_eq!(decide(&[1.0], &[], 0.05, 0.95).verdict, Verdict::NoData);
    }

    #[test]
    fn higher_confidence_needs_more_evidence() {
        let baseline = [1.0, 1.1, 0.9, 1.05, 0.95];
        let candidate = [1.15, 1.25, 1.05, 1.2, 1.1];
        let p = welch_p(&decide(&baseline, &candidate, 0.05, 0.95));
        assert!(p > 0.001 && p < 0.05, "{p}");
        assert_eq!(
            decide(&baseline, &candidate, 0.05, 0.95).verdict,
            Verdict::Regressed
        );
        assert_eq!(
            decide(&baseline, &candidate, 0.05, 0.999).verdict,
            Verdict::Pass
        );
    }

    #[test]
    fn every_metric_has_a_default_limit() {
        for m in METRICS {
            assert!(
                default_max_increase(m.name).is_some(),
                "{} has no default",
                m.name
            );
        }
        assert_eq!(DEFAULT_MAX_INCREASE.len(), METRICS.len());
        for (alias, full) in METRIC_ALIASES {
            assert!(METRICS.iter().any(|m| m.name == *full), "{alias} -> {full}");
        }
    }

    #[test]
    fn max_takes_aliases_and_full_names() {
        let specs: Vec<String> = [
            "cpu=+5%",
            "peak_rss=+10%",
            "wall=+12.5%",
            "gpu-mem=20%",
            "Processes=+0%",
            "wall=+15%",
        ]
        .map(String::from)
        .to_vec();
        let limits = parse_max(&specs).unwrap();
        assert_eq!(limits["cpu_s"], 0.05);
        assert_eq!(limits["peak_rss_bytes"], 0.10);
        assert_eq!(limits["wall_s"], 0.15);
        assert_eq!(limits["gpu_peak_memory_bytes"], 0.20);
        assert_eq!(limits["processes"], 0.0);
        assert_eq!(limits["max_concurrent"], 0.25);
        assert_eq!(limits.len(), METRICS.len());
        assert_eq!(
            parse_max(&["rss=+1%".into()]).unwrap()["peak_tree_rss_bytes"],
            0.01
        );
        let off = parse_max(&["read=off".into(), "Write = OFF".into()]).unwrap();
        assert_eq!(off["read_bytes"], f64::INFINITY);
        assert_eq!(off["write_bytes"], f64::INFINITY);
        assert_eq!(off["cpu_s"], 0.05);
        assert_eq!(format_limit(off["read_bytes"]), "off");
        assert_eq!(format_limit(off["cpu_s"]), "+5%");
    }

    #[test]
    fn an_off_metric_never_regresses() {
        let off = f64::INFINITY;
        // From 0, which any finite limit fails.
        let d = decide(&[0.0], &[4096.0], off, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Pass, None));
        let d = decide(&[0.0, 0.0, 0.0], &[4096.0, 8192.0, 4096.0], off, 0.95);
        assert_eq!(d.verdict, Verdict::Pass);
        // Ten times more, certain.
        let d = decide(&[10.0, 10.0], &[100.0, 100.0], off, 0.95);
        assert_eq!((d.verdict, d.ratio), (Verdict::Pass, Some(10.0)));
        // Nor is it ever improved: no limit, nothing to be beyond.
        let d = decide(&[100.0, 100.0], &[1.0, 1.0], off, 0.95);
        assert_eq!(d.verdict, Verdict::Pass);
    }

    #[test]
    fn bad_max_says_what_to_write() {
        let error = |spec: &str| parse_max(&[spec.to_string()]).unwrap_err();
        let unknown = error("cpus=+5%");
        assert!(unknown.contains("unknown metric `cpus`"), "{unknown}");
        assert!(unknown.contains("cpu_s (cpu)"), "{unknown}");
        assert!(unknown.contains("peak_tree_rss_bytes (rss)"), "{unknown}");
        assert!(
            unknown.contains("gpu_energy_joules (energy, gpu_energy)"),
            "{unknown}"
        );
        assert!(error("cpu").contains("use METRIC=+N%"));
        for spec in ["cpu=+5", "cpu=5ms", "cpu=+%", "cpu=+inf%", "cpu=0.05"] {
            assert!(
                error(spec).contains("is not a percentage"),
                "{spec}: {}",
                error(spec)
            );
        }
        assert!(error("cpu=-5%").contains("at least +0%"));
    }

    fn stats(n: usize, mean: f64, median: f64, stddev: f64, min: f64, max: f64) -> Option<Stats> {
        Some(Stats {
            n,
            mean,
            median,
            stddev,
            min,
            max,
        })
    }

    /// A fixed report with one row of each kind, for the snapshots.
    fn sample_report() -> Report {
        let side = |source: &str| SideInfo {
            source: source.into(),
            command: "cargo build --release".into(),
            runs: 1,
            samples: 5,
        };
        let row = |metric: &'static str, baseline, candidate, max_increase, decision| Row {
            metric,
            unit: crate::metrics::metric_def(metric).unwrap().unit,
            baseline,
            candidate,
            max_increase,
            decision,
        };
        let welch = |verdict, ratio, t, df, p| Decision {
            verdict,
            method: Some(Method::Welch { t, df, p }),
            ratio: Some(ratio),
        };
        Report {
            baseline: side("runs/main"),
            candidate: side("runs/pr-42"),
            confidence: 0.95,
            rows: vec![
                row(
                    "wall_s",
                    stats(5, 12.4, 12.345, 0.12, 12.2, 12.6),
                    stats(5, 13.0, 13.1, 0.9, 12.1, 14.2),
                    0.10,
                    welch(Verdict::Pass, 1.061_158_363, 1.47, 4.3, 0.1062),
                ),
                row(
                    "cpu_s",
                    stats(5, 40.1, 40.0, 0.4, 39.6, 40.7),
                    stats(5, 80.5, 80.4, 0.6, 79.8, 81.3),
                    0.05,
                    welch(Verdict::Regressed, 2.01, 125.1, 7.0, 0.000_001_2),
                ),
                row(
                    "peak_rss_bytes",
                    stats(5, 536_870_912.0, 536_870_912.0, 1_048_576.0, 535_822_336.0, 537_919_488.0),
                    stats(5, 429_496_729.6, 429_496_729.6, 524_288.0, 428_867_584.0, 430_000_000.0),
                    0.10,
                    welch(Verdict::Improved, 0.8, -40.2, 6.1, 0.0004),
                ),
                row(
                    "processes",
                    stats(1, 210.0, 210.0, 0.0, 210.0, 210.0),
                    stats(5, 212.0, 212.0, 1.0, 211.0, 213.0),
                    0.05,
                    Decision {
                        verdict: Verdict::Pass,
                        method: Some(Method::Threshold),
                        ratio: Some(212.0 / 210.0),
                    },
                ),
                row(
                    "read_bytes",
                    stats(1, 0.0, 0.0, 0.0, 0.0, 0.0),
                    stats(1, 4096.0, 4096.0, 0.0, 4096.0, 4096.0),
                    0.10,
                    Decision {
                        verdict: Verdict::Regressed,
                        method: Some(Method::Threshold),
                        ratio: None,
                    },
                ),
                row(
                    "write_bytes",
                    stats(5, 0.0, 0.0, 0.0, 0.0, 0.0),
                    stats(5, 0.0, 0.0, 0.0, 0.0, 0.0),
                    0.10,
                    welch(Verdict::Pass, 1.0, 0.0, 8.0, 0.5),
                ),
                row(
                    "gpu_energy_joules",
                    stats(5, 1520.0, 1510.5, 30.2, 1490.0, 1570.0),
                    None,
                    0.10,
                    Decision { verdict: Verdict::NoData, method: None, ratio: None },
                ),
            ],
            warnings: vec![
                "candidate runs/pr-42/summary.json: 1 kernel event lost; the process tree may be incomplete"
                    .into(),
                "candidate runs/pr-42/summary.json: the rss limit stopped the run".into(),
            ],
        }
    }

    #[test]
    fn an_off_limit_shows_as_off() {
        let mut report = sample_report();
        let read = report
            .rows
            .iter_mut()
            .find(|r| r.metric == "read_bytes")
            .unwrap();
        read.max_increase = f64::INFINITY;
        read.decision = decide(&[0.0], &[4096.0], f64::INFINITY, 0.95);
        let text = render_text(&report);
        let line = text.lines().find(|l| l.contains("read_bytes")).unwrap();
        assert!(line.contains("off") && line.contains("ok"), "{line}");
        assert!(!text.contains("read_bytes (from 0"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
        let row = json["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["metric"] == "read_bytes")
            .unwrap();
        assert_eq!(row["max_increase"], serde_json::Value::Null, "{row}");
        assert_eq!(row["verdict"], "pass", "{row}");
    }

    #[test]
    fn text_snapshot() {
        let expected = r#"montrace compare
  command    cargo build --release
  baseline   runs/main: 5 samples from 1 run
  candidate  runs/pr-42: 5 samples from 1 run
  rule       lower is better for every metric; REGRESSED when the median grows past its limit
             and, with 2+ samples a side, Welch's t-test finds the increase significant at 95% confidence

metric                             baseline                  candidate  ratio   change  limit        p  verdict
wall_s                 12.345s ± 0.120s (5)       13.100s ± 0.900s (5)  1.06x    +6.1%   +10%   0.1062  ok
cpu_s                  40.000s ± 0.400s (5)       80.400s ± 0.600s (5)  2.01x  +101.0%    +5%  <0.0001  REGRESSED
peak_rss_bytes     512.0 MiB ± 1.00 MiB (5)  409.6 MiB ± 512.0 KiB (5)  0.80x   -20.0%   +10%   0.0004  improved
processes                           210 (1)                212 ± 1 (5)  1.01x    +1.0%    +5%        -  ok
read_bytes                          0 B (1)               4.00 KiB (1)      -   from 0   +10%        -  REGRESSED
write_bytes                   0 B ± 0 B (5)              0 B ± 0 B (5)  1.00x    +0.0%   +10%   0.5000  ok
gpu_energy_joules     1510.5 J ± 30.2 J (5)                          -      -        -   +10%        -  no data

warning: candidate runs/pr-42/summary.json: 1 kernel event lost; the process tree may be incomplete
warning: candidate runs/pr-42/summary.json: the rss limit stopped the run
1 metric improved: peak_rss_bytes (-20.0% beyond -10%, p=0.0004 < 0.05)
2 metrics regressed:
  cpu_s (+101.0% > +5%, p<0.0001 < 0.05)
  read_bytes (from 0 to 4.00 KiB, fewer than 2 samples a side)
"#;
        assert_eq!(render_text(&sample_report()), expected);
    }

    #[test]
    fn markdown_snapshot() {
        let expected = r#"### montrace compare: ❌ 2 metrics regressed

- command: `cargo build --release`
- baseline: `runs/main`: 5 samples from 1 run
- candidate: `runs/pr-42`: 5 samples from 1 run
- rule: lower is better for every metric; REGRESSED when the median grows past its limit and, with 2+ samples a side, Welch's t-test finds the increase significant at 95% confidence

| metric | baseline | candidate | ratio | change | limit | p | verdict |
|:---|---:|---:|---:|---:|---:|---:|:---|
| `wall_s` | 12.345s ± 0.120s (5) | 13.100s ± 0.900s (5) | 1.06x | +6.1% | +10% | 0.1062 | ok |
| `cpu_s` | 40.000s ± 0.400s (5) | 80.400s ± 0.600s (5) | 2.01x | +101.0% | +5% | <0.0001 | ❌ **REGRESSED** |
| `peak_rss_bytes` | 512.0 MiB ± 1.00 MiB (5) | 409.6 MiB ± 512.0 KiB (5) | 0.80x | -20.0% | +10% | 0.0004 | improved |
| `processes` | 210 (1) | 212 ± 1 (5) | 1.01x | +1.0% | +5% | - | ok |
| `read_bytes` | 0 B (1) | 4.00 KiB (1) | - | from 0 | +10% | - | ❌ **REGRESSED** |
| `write_bytes` | 0 B ± 0 B (5) | 0 B ± 0 B (5) | 1.00x | +0.0% | +10% | 0.5000 | ok |
| `gpu_energy_joules` | 1510.5 J ± 30.2 J (5) | - | - | - | +10% | - | no data |

- ⚠️ candidate runs/pr-42/summary.json: 1 kernel event lost; the process tree may be incomplete
- ⚠️ candidate runs/pr-42/summary.json: the rss limit stopped the run

**1 metric improved**: peak_rss_bytes (-20.0% beyond -10%, p=0.0004 < 0.05)

**2 metrics regressed**:

- cpu_s (+101.0% > +5%, p<0.0001 < 0.05)
- read_bytes (from 0 to 4.00 KiB, fewer than 2 samples a side)
"#;
        assert_eq!(render_md(&sample_report()), expected);
    }

    #[test]
    fn json_snapshot() {
        let expected = r#"{
  "schema_version": 1,
  "regressed": true,
  "confidence": 0.95,
  "baseline": {
    "source": "runs/main",
    "command": "cargo build --release",
    "runs": 1,
    "samples": 5
  },
  "candidate": {
    "source": "runs/pr-42",
    "command": "cargo build --release",
    "runs": 1,
    "samples": 5
  },
  "metrics": [
    {
      "metric": "wall_s",
      "unit": "s",
      "lower_is_better": true,
      "baseline": {
        "n": 5,
        "mean": 12.4,
        "median": 12.345,
        "stddev": 0.12,
        "min": 12.2,
        "max": 12.6
      },
      "candidate": {
        "n": 5,
        "mean": 13.0,
        "median": 13.1,
        "stddev": 0.9,
        "min": 12.1,
        "max": 14.2
      },
      "ratio": 1.061158363,
      "max_increase": 0.1,
      "verdict": "pass",
      "method": "welch",
      "t": 1.47,
      "df": 4.3,
      "p_value": 0.1062
    },
    {
      "metric": "cpu_s",
      "unit": "s",
      "lower_is_better": true,
      "baseline": {
        "n": 5,
        "mean": 40.1,
        "median": 40.0,
        "stddev": 0.4,
        "min": 39.6,
        "max": 40.7
      },
      "candidate": {
        "n": 5,
        "mean": 80.5,
        "median": 80.4,
        "stddev": 0.6,
        "min": 79.8,
        "max": 81.3
      },
      "ratio": 2.01,
      "max_increase": 0.05,
      "verdict": "regressed",
      "method": "welch",
      "t": 125.1,
      "df": 7.0,
      "p_value": 1.2e-6
    },
    {
      "metric": "peak_rss_bytes",
      "unit": "B",
      "lower_is_better": true,
      "baseline": {
        "n": 5,
        "mean": 536870912.0,
        "median": 536870912.0,
        "stddev": 1048576.0,
        "min": 535822336.0,
        "max": 537919488.0
      },
      "candidate": {
        "n": 5,
        "mean": 429496729.6,
        "median": 429496729.6,
        "stddev": 524288.0,
        "min": 428867584.0,
        "max": 430000000.0
      },
      "ratio": 0.8,
      "max_increase": 0.1,
      "verdict": "improved",
      "method": "welch",
      "t": -40.2,
      "df": 6.1,
      "p_value": 0.0004
    },
    {
      "metric": "processes",
      "unit": "",
      "lower_is_better": true,
      "baseline": {
        "n": 1,
        "mean": 210.0,
        "median": 210.0,
        "stddev": 0.0,
        "min": 210.0,
        "max": 210.0
      },
      "candidate": {
        "n": 5,
        "mean": 212.0,
        "median": 212.0,
        "stddev": 1.0,
        "min": 211.0,
        "max": 213.0
      },
      "ratio": 1.0095238095238095,
      "max_increase": 0.05,
      "verdict": "pass",
      "method": "threshold",
      "t": null,
      "df": null,
      "p_value": null
    },
    {
      "metric": "read_bytes",
      "unit": "B",
      "lower_is_better": true,
      "baseline": {
        "n": 1,
        "mean": 0.0,
        "median": 0.0,
        "stddev": 0.0,
        "min": 0.0,
        "max": 0.0
      },
      "candidate": {
        "n": 1,
        "mean": 4096.0,
        "median": 4096.0,
        "stddev": 0.0,
        "min": 4096.0,
        "max": 4096.0
      },
      "ratio": null,
      "max_increase": 0.1,
      "verdict": "regressed",
      "method": "threshold",
      "t": null,
      "df": null,
      "p_value": null
    },
    {
      "metric": "write_bytes",
      "unit": "B",
      "lower_is_better": true,
      "baseline": {
        "n": 5,
        "mean": 0.0,
        "median": 0.0,
        "stddev": 0.0,
        "min": 0.0,
        "max": 0.0
      },
      "candidate": {
        "n": 5,
        "mean": 0.0,
        "median": 0.0,
        "stddev": 0.0,
        "min": 0.0,
        "max": 0.0
      },
      "ratio": 1.0,
      "max_increase": 0.1,
      "verdict": "pass",
      "method": "welch",
      "t": 0.0,
      "df": 8.0,
      "p_value": 0.5
    },
    {
      "metric": "gpu_energy_joules",
      "unit": "J",
      "lower_is_better": true,
      "baseline": {
        "n": 5,
        "mean": 1520.0,
        "median": 1510.5,
        "stddev": 30.2,
        "min": 1490.0,
        "max": 1570.0
      },
      "candidate": null,
      "ratio": null,
      "max_increase": 0.1,
      "verdict": "no_data",
      "method": null,
      "t": null,
      "df": null,
      "p_value": null
    }
  ],
  "warnings": [
    "candidate runs/pr-42/summary.json: 1 kernel event lost; the process tree may be incomplete",
    "candidate runs/pr-42/summary.json: the rss limit stopped the run"
  ]
}
"#;
        assert_eq!(render_json(&sample_report()), expected);
    }

    #[test]
    fn bmf_snapshot() {
        let expected = r#"{
  "cargo build --release": {
    "cpu_s": {
      "value": 80.4,
      "lower_value": 79.8,
      "upper_value": 81.3
    },
    "peak_rss_bytes": {
      "value": 429496729.6,
      "lower_value": 428867584.0,
      "upper_value": 430000000.0
    },
    "processes": {
      "value": 212.0,
      "lower_value": 211.0,
      "upper_value": 213.0
    },
    "read_bytes": {
      "value": 4096.0,
      "lower_value": 4096.0,
      "upper_value": 4096.0
    },
    "wall_s": {
      "value": 13.1,
      "lower_value": 12.1,
      "upper_value": 14.2
    },
    "write_bytes": {
      "value": 0.0,
      "lower_value": 0.0,
      "upper_value": 0.0
    }
  }
}
"#;
        assert_eq!(render_bmf(&sample_report()), expected);
    }

    fn repetition(wall: f64, cpu: f64) -> Repetition {
        Repetition {
            run_dir: ".".into(),
            exit_status: 0,
            lost_events: 0,
            metrics: BTreeMap::from([("wall_s".to_string(), wall), ("cpu_s".to_string(), cpu)]),
        }
    }

    /// Writes `dir/summary.json` for `command` with one repetition per (wall, cpu).
    fn write_run(dir: &Path, command: &str, samples: &[(f64, f64)]) -> PathBuf {
        let reps = samples
            .iter()
            .map(|&(wall, cpu)| repetition(wall, cpu))
            .collect();
        let summary = Summary::new(
            command.into(),
            vec![command.into()],
            "host".into(),
            0,
            reps,
            None,
        );
        fs::create_dir_all(dir).unwrap();
        fs::write(
            dir.join(SUMMARY_FILE),
            serde_json::to_string_pretty(&summary).unwrap(),
        )
        .unwrap();
        dir.to_path_buf()
    }

    fn args(baseline: &Path, candidate: &Path) -> CompareArgs {
        CompareArgs {
            baseline: baseline.into(),
            candidate: candidate.into(),
            max: Vec::new(),
            confidence: 0.95,
            format: CompareFormat::Text,
            allow_different_commands: false,
        }
    }

    const STEADY: [(f64, f64); 3] = [(2.0, 1.00), (2.1, 1.02), (1.9, 0.98)];
    const TWICE_THE_CPU: [(f64, f64); 3] = [(2.0, 2.00), (2.1, 2.04), (1.9, 1.96)];

    #[test]
    fn loads_a_run_directory_a_summary_file_and_a_directory_of_runs() {
        let tmp = tempfile::tempdir().unwrap();
        let run = write_run(&tmp.path().join("base"), "make", &STEADY);
        let side = load_side(&run).unwrap();
        assert_eq!(
            (side.runs.len(), side.values("cpu_s")),
            (1, vec![1.00, 1.02, 0.98])
        );

        let file = write_run(&tmp.path().join("cand"), "make", &STEADY).join(SUMMARY_FILE);
        assert_eq!(load_side(&file).unwrap().runs[0].0, file);

        let many = tmp.path().join("many");
        write_run(&many.join("b"), "make", &STEADY[..2]);
        write_run(&many.join("a"), "make", &STEADY[1..]);
        // Neither a directory without summary.json nor a stray file is a run; nor is a run two
        // levels down.
        fs::create_dir_all(many.join("notes")).unwrap();
        fs::write(many.join("README"), "runs of make").unwrap();
        write_run(&many.join("notes/deeper"), "make", &TWICE_THE_CPU);
        let side = load_side(&many).unwrap();
        let paths: Vec<_> = side.runs.iter().map(|(p, _)| p.clone()).collect();
        assert_eq!(
            paths,
            [many.join("a/summary.json"), many.join("b/summary.json")]
        );
        assert_eq!(side.values("cpu_s"), [1.02, 0.98, 1.00, 1.02]);

        let report = prepare(&args(&run, &many)).unwrap();
        assert_eq!((report.candidate.runs, report.candidate.samples), (2, 4));
        let metrics: Vec<_> = report.rows.iter().map(|r| r.metric).collect();
        assert_eq!(metrics, ["wall_s", "cpu_s"]);
        assert!(
            !report.regressed() && report.warnings.is_empty(),
            "{report:?}"
        );
    }

    #[test]
    fn exit_status_says_whether_something_regressed() {
        let tmp = tempfile::tempdir().unwrap();
        let base = write_run(&tmp.path().join("base"), "make", &STEADY);
        let same = write_run(&tmp.path().join("same"), "make", &STEADY);
        let slow = write_run(&tmp.path().join("slow"), "make", &TWICE_THE_CPU);
        assert_eq!(compare_main(args(&base, &same)).unwrap(), 0);
        assert_eq!(compare_main(args(&base, &slow)).unwrap(), EXIT_REGRESSED);
        let report = prepare(&args(&base, &slow)).unwrap();
        let regressed: Vec<_> = report.regressions().map(|r| r.metric).collect();
        assert_eq!(regressed, ["cpu_s"]);
        // A limit raised past the change lets it through.
        let mut lenient = args(&base, &slow);
        lenient.max = vec!["cpu=+150%".into()];
        assert_eq!(prepare(&lenient).unwrap().exit_code(), 0);
    }

    fn usage_error(args: CompareArgs) -> String {
        let message = prepare(&args).unwrap_err();
        assert_eq!(compare_main(args).unwrap(), EXIT_USAGE, "{message}");
        message
    }

    #[test]
    fn unusable_inputs_are_usage_errors() {
        let tmp = tempfile::tempdir().unwrap();
        let base = write_run(&tmp.path().join("base"), "make", &STEADY);

        let missing = usage_error(args(&base, &tmp.path().join("nope")));
        assert!(
            missing.starts_with("candidate: ") && missing.contains("does not exist"),
            "{missing}"
        );
        assert!(missing.contains("pass a run directory"), "{missing}");

        fs::create_dir_all(tmp.path().join("empty")).unwrap();
        let empty = usage_error(args(&tmp.path().join("empty"), &base));
        assert!(
            empty.starts_with("baseline: no summary.json in "),
            "{empty}"
        );

        let write = |name: &str, text: &str| {
            let path = tmp.path().join(name);
            fs::write(&path, text).unwrap();
            path
        };
        let garbage = usage_error(args(&base, &write("garbage.json", "{ not json")));
        assert!(garbage.contains("is not valid JSON"), "{garbage}");
        let other = usage_error(args(
            &base,
            &write("other.json", r#"{"schema_version": 1}"#),
        ));
        assert!(other.contains("is not a montrace summary.json"), "{other}");
        let newer = usage_error(args(
            &base,
            &write("newer.json", r#"{"schema_version": 99}"#),
        ));
        assert!(newer.contains("schema version 99, newer"), "{newer}");

        let nothing = write_run(&tmp.path().join("nothing"), "make", &[]);
        let nothing = usage_error(args(&base, &nothing));
        assert!(nothing.contains("holds no measurements"), "{nothing}");

        let mut bad_max = args(&base, &base);
        bad_max.max = vec!["cpu=5".into()];
        assert!(usage_error(bad_max).contains("is not a percentage"));
    }

    #[test]
    fn different_commands_need_a_flag() {
        let tmp = tempfile::tempdir().unwrap();
        let base = write_run(&tmp.path().join("base"), "make", &STEADY);
        let ninja = write_run(&tmp.path().join("ninja"), "ninja", &STEADY);
        let message = usage_error(args(&base, &ninja));
        assert!(message.contains("different commands: `make`"), "{message}");
        assert!(message.contains("--allow-different-commands"), "{message}");

        // Within one side too.
        let mixed = tmp.path().join("mixed");
        write_run(&mixed.join("1"), "make", &STEADY);
        write_run(&mixed.join("2"), "ninja", &STEADY);
        assert!(usage_error(args(&mixed, &mixed)).contains("different commands"));

        let mut allowed = args(&base, &ninja);
        allowed.allow_different_commands = true;
        let report = prepare(&allowed).unwrap();
        assert_eq!(report.exit_code(), 0);
        assert_eq!(
            report.warnings,
            ["comparing runs of different commands: `make`, `ninja`"]
        );
        let text = render_text(&report);
        assert!(text.contains("  baseline   "), "{text}");
        assert!(text.contains("(ninja)\n"), "{text}");
    }

    #[test]
    fn failed_and_stopped_runs_are_flagged() {
        let tmp = tempfile::tempdir().unwrap();
        let base = write_run(&tmp.path().join("base"), "make", &STEADY);
        let mut reps: Vec<_> = STEADY.iter().map(|&(w, c)| repetition(w, c)).collect();
        reps[1].exit_status = 2;
        reps[2].lost_events = 3;
        let breach = crate::metrics::LimitBreach {
            limit: "rss".into(),
            threshold: 1e9,
            value: 2e9,
            time: "2026-01-01T00:00:00.000000Z".into(),
            elapsed_s: 1.5,
        };
        let summary = Summary::new(
            "make".into(),
            vec!["make".into()],
            "h".into(),
            0,
            reps,
            Some(breach),
        );
        let cand = tmp.path().join("cand.json");
        fs::write(&cand, serde_json::to_string(&summary).unwrap()).unwrap();
        let report = prepare(&args(&base, &cand)).unwrap();
        let path = cand.display();
        assert_eq!(
            report.warnings,
            [
                format!(
                    "candidate {path}: 1 of 3 repetitions exited with a non-zero status; a failed \
                     run may use less than a successful one"
                ),
                format!("candidate {path}: the rss limit stopped the run"),
                format!(
                    "candidate {path}: 3 kernel events lost; the process tree may be incomplete"
                ),
            ]
        );
    }

    #[test]
    fn passing_report_in_markdown() {
        let mut report = sample_report();
        report
            .rows
            .retain(|r| r.decision.verdict != Verdict::Regressed);
        report.warnings.clear();
        report.candidate.command = "cargo build --release --features `x`".into();
        let md = render_md(&report);
        assert!(
            md.starts_with("### montrace compare: ✅ no regression\n"),
            "{md}"
        );
        assert!(md.contains("- candidate: `runs/pr-42`: 5 samples from 1 run (`` cargo build --release --features `x` ``)\n"), "{md}");
        assert!(md.ends_with("**no regression**\n"), "{md}");
    }
}
