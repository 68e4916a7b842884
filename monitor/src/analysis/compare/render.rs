//! Rendering a [`Report`]: text, Markdown, JSON and Bencher Metric Format. Pure functions of the
//! report, snapshot-tested.
use super::*;
// ---------------------------------------------------------------------------------------------
// Rendering: pure functions of the report
// ---------------------------------------------------------------------------------------------

/// `montrace compare` and `bench` output formats (`--format`; cli.rs re-exports it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum CompareFormat {
    /// A table for people.
    Text,
    /// Markdown, for a pull-request comment.
    Md,
    /// JSON, for machines.
    Json,
    /// Bencher Metric Format (JSON).
    Bmf,
}

pub fn render(report: &Report, format: CompareFormat) -> String {
    match format {
        CompareFormat::Text => render_text(report),
        CompareFormat::Md => render_md(report),
        CompareFormat::Json => render_json(report),
        CompareFormat::Bmf => render_bmf(report),
    }
}

/// `x` with at most `decimals` decimals and no trailing zeros: `0.05`, `5`, `2.5`.
pub(super) fn trim_float(x: f64, decimals: usize) -> String {
    let text = format!("{x:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        text
    }
}

/// A value in its metric's unit: `12.345s`, `512.0 MiB`, `3.5 J`, `42`.
pub(super) fn format_value(unit: &str, value: f64) -> String {
    match unit {
        "s" => format!("{value:.3}s"),
        "B" => format_bytes(value),
        "J" => format!("{value:.1} J"),
        "share" => format!("{:.1}%", value * 100.0),
        _ if value.fract() == 0.0 => format!("{value:.0}"),
        _ => format!("{value:.1}"),
    }
}

/// `1.000s ± 0.010s (5)`; `1.000s (1)` for a single sample; `-` for none.
pub(super) fn format_stats(unit: &str, stats: Option<&Stats>) -> String {
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

pub(super) fn format_ratio(row: &Row) -> String {
    match (row.decision.verdict, row.decision.ratio) {
        (Verdict::NoData, _) | (_, None) => "-".into(),
        (_, Some(r)) => format!("{r:.2}x"),
    }
}

/// `+101.0%`, `-20.0%`, `from 0` (an increase from a median of 0), `-` (no data).
pub(super) fn format_change(row: &Row) -> String {
    match (row.decision.verdict, row.decision.ratio) {
        (Verdict::NoData, _) => "-".into(),
        (_, None) => "from 0".into(),
        (_, Some(r)) => format!("{:+.1}%", (r - 1.0) * 100.0),
    }
}

pub(super) fn format_limit(max_increase: f64) -> String {
    if max_increase.is_finite() {
        format!("+{}%", trim_float(max_increase * 100.0, 2))
    } else {
        "off".into()
    }
}

pub(super) fn format_p(p: f64) -> String {
    if p < 0.0001 {
        "<0.0001".into()
    } else {
        format!("{p:.4}")
    }
}

pub(super) fn p_value(row: &Row) -> Option<f64> {
    match row.decision.method {
        Some(Method::Welch { p, .. }) => Some(p),
        Some(Method::Paired(s)) => Some(s.p),
        _ => None,
    }
}

/// `+1.2%`: a relative change with its sign.
pub(super) fn percent(x: f64) -> String {
    format!("{:+.1}%", x * 100.0)
}

/// The paired interval `[-0.4%, +2.1%]`, `-` when the row is not paired.
pub(super) fn format_interval(row: &Row) -> String {
    match row.decision.method {
        Some(Method::Paired(s)) => format!("[{}, {}]", percent(s.low), percent(s.high)),
        _ => "-".into(),
    }
}

/// The paired detectable change `±3.4%`, `-` when the row is not paired.
pub(super) fn format_detectable(row: &Row) -> String {
    match row.decision.method {
        Some(Method::Paired(s)) if s.detectable.is_finite() => {
            format!("±{:.1}%", s.detectable * 100.0)
        }
        _ => "-".into(),
    }
}

/// `cpu_s +3.1% (interval [-0.5%, +6.8%] at 99%; limit +5%: pass under +5%, regressed over
/// +2.5%; detectable ±7.2% with 5 pairs; about 14 pairs would decide it)`.
pub(super) fn explain_paired(row: &Row, s: &Paired) -> String {
    let mut text = format!(
        "{} {} ({} → {}; interval [{}, {}] at {}%; limit {}: pass under it, regressed over +{}%; \
         detectable ±{:.1}% with {})",
        row.metric,
        percent(s.change),
        format_value(row.unit, row.baseline.map_or(0.0, |b| b.median)),
        format_value(row.unit, row.candidate.map_or(0.0, |c| c.median)),
        percent(s.low),
        percent(s.high),
        trim_float((1.0 - row.decision.alpha) * 100.0, 4),
        format_limit(row.max_increase),
        trim_float(row.max_increase * 50.0, 2),
        s.detectable * 100.0,
        plural(s.n, "pair"),
    );
    if row.decision.verdict == Verdict::Inconclusive {
        text.pop();
        match more_pairs_needed(
            s,
            row.max_increase,
            row.decision.alpha,
            absolute_floor(row.unit),
        ) {
            Some(n) => {
                let _ = write!(
                    text,
                    "; about {} more would decide it ({n} in all))",
                    plural(n.saturating_sub(s.n), "pair")
                );
            }
            None => text.push_str("; many more pairs, or a quieter machine, would decide it)"),
        }
    }
    text
}

/// Why an unpaired metric is undecided: `means +3.1%, interval [-0.5%, +6.8%] at 99%: pass
/// under +5%, regressed over +2.5%; detectable ±7.2% with 4 + 5 runs; about 14 runs a side
/// would decide it`. The change before it (and in the table) is the medians'; the interval is
/// of the means' change, which is printed with it so that the two are not read as one.
pub(super) fn explain_unpaired(row: &Row, s: &Unpaired) -> String {
    let alpha = row.decision.alpha;
    let (low, high) = s.bounds_at(s.n_base, s.n_cand, alpha);
    let mut text = format!(
        "means {}, interval [{}, {}] at {}%: pass under {}, regressed over +{}%; \
         detectable ±{:.1}% with {} + {} runs",
        percent(s.relative(s.cand_mean - s.base_mean)),
        percent(low),
        percent(high),
        trim_float((1.0 - alpha) * 100.0, 2),
        format_limit(row.max_increase),
        trim_float(row.max_increase * 50.0, 2),
        s.detectable_at(s.n_base, s.n_cand, alpha) * 100.0,
        s.n_base,
        s.n_cand,
    );
    match row_runs_needed(row) {
        Some(n) => {
            let _ = write!(text, "; about {} a side would decide it", plural(n, "run"));
        }
        None => text.push_str(
            "; more runs would not decide it: a change within the measured noise (two series \
             measured at different times drift apart) needs paired runs (`montrace bench`)",
        ),
    }
    text
}

pub(super) fn alpha(confidence: f64) -> String {
    trim_float(1.0 - confidence, 4)
}

/// `±1.2%`: a metric's noise (the baseline's relative standard deviation), `-` without one.
pub(super) fn format_noise(row: &Row) -> String {
    match row.decision.noise {
        Some(noise) => format!("±{:.1}%", noise * 100.0),
        None => "-".into(),
    }
}

/// What changed, by how much, and why it counts:
/// `cpu_s +101.0% (1.000s → 2.010s; limit +5%, noise ±1.2%; p=0.0001 < 0.05)`,
/// `cpu_s +6.0% (...; limit +5%; fewer than 2 samples a side)`,
/// `read_bytes from 0 to 4.00 KiB (p=0.0210 < 0.05)`.
pub(super) fn explain(row: &Row) -> String {
    if let Some(Method::Paired(s)) = &row.decision.method {
        return explain_paired(row, s);
    }
    let median = |s: Option<Stats>| format_value(row.unit, s.map_or(0.0, |s| s.median));
    let change = match row.decision.ratio {
        None => format!("from 0 to {}", median(row.candidate)),
        Some(_) => format!(
            "{} ({} → {}",
            format_change(row),
            median(row.baseline),
            median(row.candidate)
        ),
    };
    let mut bounds = format!("limit {}", format_limit(row.max_increase));
    if let Some(noise) = row.decision.noise {
        let _ = write!(bounds, ", noise ±{:.1}%", noise * 100.0);
    }
    if let (Verdict::Inconclusive, Some(s)) = (row.decision.verdict, row_unpaired(row)) {
        return format!(
            "{} {change}; {bounds}; {})",
            row.metric,
            explain_unpaired(row, &s)
        );
    }
    let evidence = match p_value(row) {
        Some(p) if p < 0.0001 => format!("p<0.0001 < {}", alpha(1.0 - row.decision.alpha)),
        Some(p) => format!("p={} < {}", format_p(p), alpha(1.0 - row.decision.alpha)),
        None => "fewer than 2 samples a side".into(),
    };
    match row.decision.ratio {
        None => format!("{} {change} ({bounds}; {evidence})", row.metric),
        Some(_) => format!("{} {change}; {bounds}; {evidence})", row.metric),
    }
}

/// The closing lines: improvements (if any), then regressions or "no regression"; each a
/// headline and the metrics it lists.
pub(super) fn conclusion(report: &Report) -> Vec<(String, Vec<String>)> {
    let list = |verdict: Verdict| -> Vec<String> {
        report
            .rows
            .iter()
            .filter(|r| r.decision.verdict == verdict)
            .map(explain)
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
    let inconclusive = list(Verdict::Inconclusive);
    if regressed.is_empty() && !inconclusive.is_empty() {
        let budget = match &report.series {
            Some(series) if series.stopped_by != "decided" => format!(
                " after {} ({} ended it)",
                plural(series.pairs.len(), "pair"),
                match series.stopped_by {
                    "max_time" => "--max-time",
                    "max_runs" => "--max-runs",
                    _ => "--repeat",
                }
            ),
            _ => String::new(),
        };
        lines.push((
            format!(
                "inconclusive{budget}: {} not decided",
                plural(inconclusive.len(), "metric")
            ),
            inconclusive,
        ));
    } else if regressed.is_empty() {
        lines.push(("no regression".into(), regressed));
        // A run compared with itself: say why nothing was tested.
        if (report.rows.iter()).any(|r| r.decision.method == Some(Method::SameRuns)) {
            lines.push((SAME_RUNS_LINE.into(), Vec::new()));
        }
    } else {
        lines.push((
            format!("{} regressed", plural(regressed.len(), "metric")),
            regressed,
        ));
    }
    // Single runs have no spread: say which gated metrics the limit alone decided.
    let by_limit: Vec<&str> = report
        .rows
        .iter()
        .filter(|r| r.max_increase.is_finite() && r.decision.method == Some(Method::Threshold))
        .map(|r| r.metric)
        .collect();
    if report.series.is_none() && !by_limit.is_empty() {
        lines.push((
            format!(
                "decided by the limit alone (a single sample on a side has no spread to test): {}",
                by_limit.join(", ")
            ),
            Vec::new(),
        ));
    }
    lines
}

/// The closing line of a comparison of the same runs on both sides.
pub const SAME_RUNS_LINE: &str = "the same runs on both sides: every difference is exactly 0, \
                                  so each gated metric passes without a test";

/// How the verdicts were reached, in two lines.
pub(super) fn rule(report: &Report) -> [String; 2] {
    if let Some(series) = &report.series {
        let looks = if series.looks > 1 {
            format!(" and the {} times the series may look", series.looks)
        } else {
            String::new()
        };
        return [
            "paired: each pair is one run of each side back to back (A B, B A, ...); per pair \
             the ratio candidate / baseline;"
                .into(),
            format!(
                "pass when the change is under its limit, REGRESSED when over half of it, each \
                 with {}% confidence over all gated metrics together{looks} (Bonferroni); \
                 INCONCLUSIVE until one holds",
                trim_float(report.confidence * 100.0, 2)
            ),
        ];
    }
    [
        "lower is better; with 2+ samples a side, Welch's interval of the change of the means; \
         REGRESSED when its lower bound is over half the limit, the noise (the baseline's \
         relative sd) and the floor, and the median grew past both limit and noise;"
            .into(),
        format!(
            "pass when its upper bound is under the limit; INCONCLUSIVE otherwise; {}% \
             confidence over all gated metrics together (Bonferroni); with 1 sample on a side \
             the limit alone decides; a metric without a limit is reported, not gated",
            trim_float(report.confidence * 100.0, 2)
        ),
    ]
}

/// `1 run`, `5 samples`.
pub(super) fn plural(n: usize, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

pub(super) fn side_line(side: &SideInfo) -> String {
    format!(
        "{}: {} from {}{}",
        side.source,
        plural(side.samples, "sample"),
        plural(side.runs, "run"),
        checkout(side)
    )
}

/// `, in ../baseline at 1a2b3c4d5e6f (dirty)`: where a side ran and its commit, when known.
pub(super) fn checkout(side: &SideInfo) -> String {
    let mut out = String::new();
    if let Some(dir) = &side.directory {
        let _ = write!(out, ", in {dir}");
    }
    let commits = side.dataset_commits();
    if !side.dataset_runs.is_empty() {
        // A dataset baseline: its runs' commits (the runs themselves are in the JSON).
        let shown: Vec<String> = commits
            .iter()
            .take(5)
            .map(|c| c.chars().take(12).collect())
            .collect();
        match commits.len() {
            0 => out.push_str(", commits not recorded"),
            1 => {
                let _ = write!(out, " at {}", shown[0]);
            }
            n => {
                let _ = write!(out, ", {n} commits: {}", shown.join(", "));
                if n > shown.len() {
                    let _ = write!(out, " and {} more", n - shown.len());
                }
            }
        }
        return out;
    }
    if let Some(commit) = &side.commit {
        let short: String = commit.chars().take(12).collect();
        let _ = write!(out, " at {short}");
        if side.dirty == Some(true) {
            out.push_str(" (dirty)");
        }
    }
    out
}

/// The series in a few lines: pairs, those left out and why, the budget.
pub(super) fn series_lines(series: &Series) -> Vec<String> {
    let mut lines = vec![format!(
        "{} ({} used), {:.0}s; stopped: {}{}",
        plural(series.pairs.len(), "pair"),
        series.kept,
        series.elapsed_s,
        match series.stopped_by {
            "decided" => "decided",
            "max_runs" => "--max-runs reached",
            "max_time" => "--max-time reached",
            _ => "--repeat pairs done",
        },
        match (series.max_runs, series.max_time_s) {
            (runs, Some(t)) => format!(" (budget {runs} runs a side, {t:.0}s)"),
            (runs, None) => format!(" (budget {runs} runs a side)"),
        }
    )];
    let share = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
    for p in &series.pairs {
        lines.push(format!(
            "pair {} {}: other work {} / {}, run-queue wait {} / {}{}",
            p.index,
            p.order,
            share(p.baseline.other_cpu_share),
            share(p.candidate.other_cpu_share),
            share(p.baseline.run_queue_share),
            share(p.candidate.run_queue_share),
            p.left_out
                .as_ref()
                .map_or(String::new(), |why| format!(": left out ({why})"))
        ));
    }
    lines
}

pub(super) const HEADERS: [&str; 9] = [
    "metric",
    "baseline (median ± sd, n)",
    "candidate (median ± sd, n)",
    "ratio",
    "change",
    "noise",
    "limit",
    "p",
    "verdict",
];

/// A paired report's columns: the interval and the detectable change instead of noise and p.
pub(super) const PAIRED_HEADERS: [&str; 9] = [
    "metric",
    "baseline (median ± sd, n)",
    "candidate (median ± sd, n)",
    "ratio",
    "change",
    "interval",
    "detectable",
    "limit",
    "verdict",
];

pub(super) fn headers(report: &Report) -> [&'static str; 9] {
    if report.series.is_some() {
        PAIRED_HEADERS
    } else {
        HEADERS
    }
}

pub(super) fn table_cells(report: &Report) -> Vec<[String; 9]> {
    report
        .rows
        .iter()
        .map(|row| {
            let [sixth, seventh, eighth] = if report.series.is_some() {
                [
                    format_interval(row),
                    format_detectable(row),
                    format_limit(row.max_increase),
                ]
            } else {
                [
                    format_noise(row),
                    format_limit(row.max_increase),
                    p_value(row).map_or_else(|| "-".into(), format_p),
                ]
            };
            [
                row.metric.to_string(),
                format_stats(row.unit, row.baseline.as_ref()),
                format_stats(row.unit, row.candidate.as_ref()),
                format_ratio(row),
                format_change(row),
                sixth,
                seventh,
                eighth,
                row.decision.verdict.label().to_string(),
            ]
        })
        .collect()
}

/// A table for people, readable in a CI log.
pub fn render_text(report: &Report) -> String {
    let mut out = match &report.series {
        Some(_) => String::from("montrace bench\n"),
        None => String::from("montrace compare\n"),
    };
    if let Some(name) = &report.name {
        let _ = writeln!(out, "  benchmark  {name}");
    }
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
    if let Some(series) = &report.series {
        for (i, line) in series_lines(series).iter().enumerate() {
            let label = if i == 0 {
                "  series     "
            } else {
                "             "
            };
            let _ = writeln!(out, "{label}{line}");
        }
    }
    out.push('\n');
    let cells = table_cells(report);
    let mut widths = headers(report).map(|h| h.chars().count());
    for row in &cells {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    // Figures are right-aligned so that their digits line up; names and words left-aligned.
    let right = [false, true, true, true, true, true, true, true, false];
    let headers = headers(report).map(String::from);
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
    let inconclusive = report.inconclusive().count();
    let headline = if regressed > 0 {
        format!("❌ {} regressed", plural(regressed, "metric"))
    } else if inconclusive > 0 {
        format!(
            "⚠️ inconclusive ({} not decided)",
            plural(inconclusive, "metric")
        )
    } else {
        "✅ no regression".to_string()
    };
    let tool = if report.series.is_some() {
        "bench"
    } else {
        "compare"
    };
    let _ = writeln!(out, "### montrace {tool}: {headline}\n");
    if let Some(name) = &report.name {
        let _ = writeln!(out, "- benchmark: {}", md_code(name));
    }
    let (base, cand) = (&report.baseline, &report.candidate);
    let side = |side: &SideInfo| {
        format!(
            "{}: {} from {}{}",
            md_code(&side.source),
            plural(side.samples, "sample"),
            plural(side.runs, "run"),
            checkout(side)
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
    let _ = writeln!(out, "- rule: {}", rule(report).join(" "));
    if let Some(series) = &report.series {
        let lines = series_lines(series);
        let _ = writeln!(out, "- series: {}", lines[0]);
        let _ = writeln!(out, "\n<details><summary>pairs</summary>\n");
        for line in &lines[1..] {
            let _ = writeln!(out, "- {line}");
        }
        let _ = writeln!(out, "\n</details>");
    }
    out.push('\n');
    let _ = writeln!(out, "| {} |", headers(report).join(" | "));
    let _ = writeln!(out, "|:---|---:|---:|---:|---:|---:|---:|---:|:---|");
    for (row, cells) in report.rows.iter().zip(table_cells(report)) {
        let [metric, baseline, candidate, ratio, change, noise, limit, p, verdict] = cells;
        let verdict = match row.decision.verdict {
            Verdict::Regressed => format!("❌ **{verdict}**"),
            Verdict::Inconclusive => format!("⚠️ **{verdict}**"),
            _ => verdict,
        };
        let _ = writeln!(
            out,
            "| `{metric}` | {baseline} | {candidate} | {ratio} | {change} | {noise} | {limit} | {p} | {verdict} |"
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
pub(super) struct JsonReport<'a> {
    schema_version: u32,
    /// `pass`, `regressed` or `inconclusive` (what the exit status says).
    outcome: &'static str,
    regressed: bool,
    confidence: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<&'a str>,
    baseline: &'a SideInfo,
    candidate: &'a SideInfo,
    metrics: Vec<JsonRow<'a>>,
    /// Bench: the pairs, their interference and the budget.
    #[serde(skip_serializing_if = "Option::is_none")]
    series: Option<&'a Series>,
    /// Inconclusive: pairs in all that would likely decide every undecided metric.
    #[serde(skip_serializing_if = "Option::is_none")]
    pairs_needed: Option<usize>,
    /// Inconclusive (unpaired): runs a side that would likely decide every undecided metric.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_needed: Option<usize>,
    warnings: &'a [String],
}

#[derive(Serialize)]
pub(super) struct JsonRow<'a> {
    metric: &'a str,
    unit: &'a str,
    lower_is_better: bool,
    baseline: Option<&'a Stats>,
    candidate: Option<&'a Stats>,
    /// Candidate median / baseline median.
    ratio: Option<f64>,
    /// Largest increase allowed (0.1 = +10%); null when the metric is not gated.
    max_increase: Option<f64>,
    /// The baseline's relative standard deviation; null with fewer than 2 samples.
    noise: Option<f64>,
    /// The smallest relative change that counts: max(limit, noise); null when not gated.
    min_effect: Option<f64>,
    /// The significance level of this metric's test (1 - confidence, shared among the gated
    /// metrics).
    alpha: f64,
    verdict: &'static str,
    /// `welch`, `paired`, `threshold`, `same_runs` (the same runs on both sides), or null (no
    /// data).
    method: Option<&'static str>,
    /// Welch's or the paired t-test; null otherwise (and t when infinite).
    t: Option<f64>,
    df: Option<f64>,
    p_value: Option<f64>,
    /// Paired and Welch: the mean change and its one-sided bounds at the metric's level
    /// (relative), the smallest change the series would reveal (80 % power); paired: the pairs
    /// it used. The same runs on both sides: a change and bounds of exactly 0.
    #[serde(skip_serializing_if = "Option::is_none")]
    change: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    change_low: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    change_high: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    detectable: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pairs: Option<usize>,
    /// Inconclusive: pairs in all that would likely decide it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pairs_needed: Option<usize>,
    /// Inconclusive (unpaired): runs a side that would likely decide it.
    #[serde(skip_serializing_if = "Option::is_none")]
    runs_needed: Option<usize>,
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
                Some(Method::Paired(s)) => (Some("paired"), finite(s.t), finite(s.df), finite(s.p)),
                Some(Method::Threshold) => (Some("threshold"), None, None, None),
                Some(Method::SameRuns) => (Some("same_runs"), None, None, None),
                None => (None, None, None, None),
            };
            let paired = match row.decision.method {
                Some(Method::Paired(s)) => Some(s),
                _ => None,
            };
            // Welch: the same figures of the means, relative to the baseline's. The same runs
            // on both sides: a change of exactly 0, with nothing to detect.
            let unpaired = row_unpaired(row).map(|s| {
                let (low, high) = s.bounds_at(s.n_base, s.n_cand, row.decision.alpha);
                let change = s.relative(s.cand_mean - s.base_mean);
                let detectable = s.detectable_at(s.n_base, s.n_cand, row.decision.alpha);
                (change, low, high, detectable)
            });
            let unpaired = match row.decision.method {
                Some(Method::SameRuns) => Some((0.0, 0.0, 0.0, f64::NAN)),
                _ => unpaired,
            };
            JsonRow {
                metric: row.metric,
                unit: row.unit,
                lower_is_better: true,
                baseline: row.baseline.as_ref(),
                candidate: row.candidate.as_ref(),
                ratio: row.decision.ratio.and_then(finite),
                max_increase: finite(row.max_increase),
                noise: row.decision.noise,
                min_effect: finite(row.decision.min_effect),
                alpha: row.decision.alpha,
                verdict: row.decision.verdict.as_str(),
                method,
                t,
                df,
                p_value,
                change: (paired.map(|s| s.change).or(unpaired.map(|u| u.0))).and_then(finite),
                change_low: (paired.map(|s| s.low).or(unpaired.map(|u| u.1))).and_then(finite),
                change_high: (paired.map(|s| s.high).or(unpaired.map(|u| u.2))).and_then(finite),
                detectable: (paired.map(|s| s.detectable).or(unpaired.map(|u| u.3)))
                    .and_then(finite),
                pairs: paired.map(|s| s.n),
                pairs_needed: paired
                    .filter(|_| row.decision.verdict == Verdict::Inconclusive)
                    .and_then(|s| {
                        more_pairs_needed(
                            &s,
                            row.max_increase,
                            row.decision.alpha,
                            absolute_floor(row.unit),
                        )
                    }),
                runs_needed: row_runs_needed(row),
            }
        })
        .collect();
    let json = JsonReport {
        schema_version: COMPARE_JSON_VERSION,
        outcome: report.outcome(),
        regressed: report.regressed(),
        confidence: report.confidence,
        name: report.name.as_deref(),
        baseline: &report.baseline,
        candidate: &report.candidate,
        metrics,
        series: report.series.as_ref(),
        pairs_needed: report.pairs_needed(),
        runs_needed: report.runs_needed(),
        warnings: &report.warnings,
    };
    let mut out = serde_json::to_string_pretty(&json).expect("the report serializes");
    out.push('\n');
    out
}

#[derive(Serialize)]
pub(super) struct BmfMetric {
    value: f64,
    lower_value: f64,
    upper_value: f64,
}

/// Bencher Metric Format (<https://bencher.dev/docs/reference/bencher-metric-format/>): the
/// candidate's figures as `{ benchmark: { measure: { value: median, lower_value: min,
/// upper_value: max } } }`, for `bencher run --adapter json`; Bencher keeps the history and its
/// own thresholds, so the baseline is not part of it. The benchmark is the report's name (bench)
/// or the candidate's command; each measure is named by its slug ([`bmf_slug`]).
pub fn render_bmf(report: &Report) -> String {
    bmf(
        report.name.as_deref().unwrap_or(&report.candidate.command),
        report
            .rows
            .iter()
            .filter_map(|row| row.candidate.as_ref().map(|s| (row.metric, s))),
    )
}

/// The same Bencher Metric Format from one run's summary.json (`montrace export --format bmf`).
pub fn render_bmf_of(summary: &Summary) -> String {
    bmf(
        &summary.command,
        METRICS
            .iter()
            .filter_map(|m| summary.stats.get(m.name).map(|s| (m.name, s))),
    )
}

fn bmf<'a>(command: &str, stats: impl Iterator<Item = (&'a str, &'a Stats)>) -> String {
    let measures: BTreeMap<String, BmfMetric> = stats
        .map(|(metric, s)| {
            (
                bmf_slug(metric),
                BmfMetric {
                    value: s.median,
                    lower_value: s.min,
                    upper_value: s.max,
                },
            )
        })
        .collect();
    let bmf = BTreeMap::from([(command, measures)]);
    let mut out = serde_json::to_string_pretty(&bmf).expect("the report serializes");
    out.push('\n');
    out
}

/// A metric's Bencher measure slug: Bencher identifies a measure by its slug (kebab-case, at most
/// 64 characters) before its name, so `cpu_s` is sent as `cpu-s` and creates, or finds, the same
/// measure every time.
pub fn bmf_slug(metric: &str) -> String {
    metric.replace('_', "-")
}
