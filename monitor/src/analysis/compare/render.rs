//! Rendering a [`Report`]: text, Markdown, JSON and Bencher Metric Format. Pure functions of the
//! report, snapshot-tested.
use super::*;
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
        _ => None,
    }
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
pub(super) fn rule(report: &Report) -> [String; 2] {
    [
        "lower is better; REGRESSED when the median grows past both its limit and its noise \
         (the baseline's relative sd)"
            .into(),
        format!(
            "and, with 2+ samples a side, Welch's t-test finds the increase significant at {}% \
             confidence over all gated metrics together (Bonferroni); a metric without a limit \
             is reported, not gated",
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
        "{}: {} from {}",
        side.source,
        plural(side.samples, "sample"),
        plural(side.runs, "run")
    )
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

pub(super) fn table_cells(report: &Report) -> Vec<[String; 9]> {
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
                format_noise(row),
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
    let right = [false, true, true, true, true, true, true, true, false];
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
    let _ = writeln!(out, "|:---|---:|---:|---:|---:|---:|---:|---:|:---|");
    for (row, cells) in report.rows.iter().zip(table_cells(report)) {
        let [metric, baseline, candidate, ratio, change, noise, limit, p, verdict] = cells;
        let verdict = match row.decision.verdict {
            Verdict::Regressed => format!("❌ **{verdict}**"),
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
    regressed: bool,
    confidence: f64,
    baseline: &'a SideInfo,
    candidate: &'a SideInfo,
    metrics: Vec<JsonRow<'a>>,
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
                noise: row.decision.noise,
                min_effect: finite(row.decision.min_effect),
                alpha: row.decision.alpha,
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
pub(super) struct BmfMetric {
    value: f64,
    lower_value: f64,
    upper_value: f64,
}

/// Bencher Metric Format (<https://bencher.dev/docs/reference/bencher-metric-format/>): the
/// candidate's figures as `{ command: { metric: { value: median, lower_value: min, upper_value:
/// max } } }`, for `bencher run --adapter json`; Bencher keeps the history and its own
/// thresholds, so the baseline is not part of it.
pub fn render_bmf(report: &Report) -> String {
    bmf(
        &report.candidate.command,
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
    let measures: BTreeMap<&str, BmfMetric> = stats
        .map(|(metric, s)| {
            (
                metric,
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
