use super::*;
use crate::cli::CompareArgs;
use crate::commands::compare::{compare, options};
use crate::store::summary_json::Repetition;

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
    // The medians differ by 10%, twice the limit, but the spread is larger still: no failure,
    // and no pass either (the interval reaches far past the limit): inconclusive.
    close(d.ratio.unwrap(), 1.1, 1e-12);
    assert!(welch_p(&d) > 0.3, "{d:?}");
    assert_eq!(d.verdict, Verdict::Inconclusive);
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
    // From nothing, but not beyond the noise: no regression, and with 3 runs of this spread
    // no pass either.
    let d = decide(&[0.0, 0.0, 9000.0], &[0.0, 4096.0, 0.0], 0.10, 0.95);
    assert_eq!((d.verdict, d.ratio), (Verdict::Inconclusive, Some(1.0)));
    let d = decide(&[0.0, 9000.0, 0.0], &[4096.0, 0.0, 4096.0], 0.10, 0.95);
    assert_eq!((d.verdict, d.ratio), (Verdict::Inconclusive, None));
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
            ratio: None,
            noise: None,
            min_effect: 0.05,
            alpha: 1.0 - 0.95,
        }
    );
    assert_eq!(decide(&[1.0], &[], 0.05, 0.95).verdict, Verdict::NoData);
}

#[test]
fn higher_confidence_needs_more_evidence() {
    // +20% on a metric of ±7.9% noise: the interval's lower bound clears the noise at 95%
    // confidence, and reaches below 0 at 99.9% — undecided then, never a pass.
    let baseline = [1.0, 1.1, 0.9, 1.05, 0.95];
    let candidate = [1.2, 1.3, 1.1, 1.25, 1.15];
    let p = welch_p(&decide(&baseline, &candidate, 0.05, 0.95));
    assert!(p > 0.001 && p < 0.05, "{p}");
    assert_eq!(
        decide(&baseline, &candidate, 0.05, 0.95).verdict,
        Verdict::Regressed
    );
    assert_eq!(
        decide(&baseline, &candidate, 0.05, 0.999).verdict,
        Verdict::Inconclusive
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
    assert_eq!(limits["max_concurrent"], NOT_GATED, "not gated by default");
    assert_eq!(limits.len(), METRICS.len());
    assert_eq!(
        parse_max(&["rss=+1%".into()]).unwrap()["peak_tree_rss_bytes"],
        0.01
    );
    let wrong_way = parse_max(&["parallelism=+5%".into()]).unwrap_err();
    assert!(wrong_way.contains("better when higher"), "{wrong_way}");
    assert_eq!(
        parse_max(&["critical-path=+10%".into()]).unwrap()["critical_path_s"],
        0.10
    );
    assert_eq!(
        parse_max(&["serial=+10%".into()]).unwrap()["serial_share"],
        0.10
    );
    assert_eq!(limits["serial_share"], NOT_GATED, "not gated by default");
    let off = parse_max(&["read=off".into(), "Write = OFF".into()]).unwrap();
    assert_eq!(off["read_bytes"], f64::INFINITY);
    assert_eq!(off["write_bytes"], f64::INFINITY);
    assert_eq!(off["cpu_s"], 0.05);
    assert_eq!(format_limit(off["read_bytes"]), "off");
    assert_eq!(format_limit(off["cpu_s"]), "+5%");
}

#[test]
fn an_off_metric_is_not_gated() {
    let off = NOT_GATED;
    // From 0, which any finite limit fails.
    let d = decide(&[0.0], &[4096.0], off, 0.95);
    assert_eq!((d.verdict, d.ratio), (Verdict::NotGated, None));
    let d = decide(&[0.0, 0.0, 0.0], &[4096.0, 8192.0, 4096.0], off, 0.95);
    assert_eq!(d.verdict, Verdict::NotGated);
    // Ten times more, certain.
    let d = decide(&[10.0, 10.0], &[100.0, 100.0], off, 0.95);
    assert_eq!((d.verdict, d.ratio), (Verdict::NotGated, Some(10.0)));
    // Nor is it ever improved: no limit, nothing to be beyond.
    let d = decide(&[100.0, 100.0], &[1.0, 1.0], off, 0.95);
    assert_eq!(d.verdict, Verdict::NotGated);
    assert_eq!(Verdict::NotGated.label(), "not gated");
    // The defaults gate only what the kernel counts exactly.
    let gated: Vec<&str> = DEFAULT_MAX_INCREASE
        .iter()
        .filter(|(_, max)| max.is_finite())
        .map(|(m, _)| *m)
        .collect();
    assert_eq!(
        gated,
        ["cpu_s", "peak_rss_bytes", "processes", "write_bytes"]
    );
}

#[test]
fn a_change_within_the_measured_noise_is_not_a_regression() {
    // +8% on a metric whose identical runs spread by ~10%: significant with many samples,
    // above the +5% limit, but within the noise: two series measured apart may drift that far.
    // Not a regression, and not a pass either (the interval reaches past the limit).
    let base: Vec<f64> = (0..40)
        .map(|i| if i % 2 == 0 { 0.9 } else { 1.1 })
        .collect();
    let cand: Vec<f64> = base.iter().map(|v| v * 1.08).collect();
    let d = decide(&base, &cand, 0.05, 0.95);
    assert!(
        matches!(d.method, Some(Method::Welch { p, .. }) if p < 0.05),
        "{d:?}"
    );
    let noise = d.noise.unwrap();
    assert!((noise - 0.1013).abs() < 0.001, "{noise}");
    assert_eq!(d.min_effect, noise);
    assert_eq!(d.verdict, Verdict::Inconclusive);
    // +15% is beyond it.
    let cand: Vec<f64> = base.iter().map(|v| v * 1.15).collect();
    assert_eq!(decide(&base, &cand, 0.05, 0.95).verdict, Verdict::Regressed);
    // A steady metric: the limit decides.
    let d = decide(&[100.0, 100.0, 100.0], &[106.0, 106.0, 106.0], 0.05, 0.95);
    assert_eq!(
        (d.noise, d.min_effect, d.verdict),
        (Some(0.0), 0.05, Verdict::Regressed)
    );
}

/// Welch's figures of `decide_above(base, cand, ...)`.
fn unpaired(base: &[f64], cand: &[f64]) -> Unpaired {
    Unpaired::of(&Stats::of(base).unwrap(), &Stats::of(cand).unwrap()).unwrap()
}

#[test]
fn unpaired_outcomes_over_data() {
    // ±2.6% noise (5 runs a side), the +5% default limit.
    let base = [5.00, 5.15, 4.85, 5.10, 4.90];
    let scaled = |k: f64| -> Vec<f64> { base.iter().map(|v| v * k).collect() };
    let verdict = |cand: &[f64]| decide(&base, cand, 0.05, 0.95).verdict;
    // The same figures: the upper bound of the change is under the limit.
    let s = unpaired(&base, &base);
    let (low, high) = s.bounds_at(5, 5, 0.05);
    assert!(low < 0.0 && high > 0.0 && high < 0.05, "[{low}, {high}]");
    assert_eq!(verdict(&base), Verdict::Pass);
    // +1%: still under the limit with confidence.
    assert_eq!(verdict(&scaled(1.01)), Verdict::Pass);
    // +20%: the lower bound is over half the limit and over the noise.
    let s = unpaired(&base, &scaled(1.2));
    let (low, _) = s.bounds_at(5, 5, 0.05);
    assert!(low > 0.025 && low > s.noise(), "{low} {}", s.noise());
    assert_eq!(verdict(&scaled(1.2)), Verdict::Regressed);
    // -20%: the mirror image, which never fails.
    assert_eq!(verdict(&scaled(0.8)), Verdict::Improved);
    // +4%: under the limit, but 5 runs a side cannot tell it from +5.5%: inconclusive, and the
    // pure estimate of how many runs would decide it says when the rule itself would.
    let cand = scaled(1.04);
    let d = decide(&base, &cand, 0.05, 0.95);
    assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
    let s = unpaired(&base, &cand);
    let n = more_runs_needed(&s, 0.05, 0.05, 0.0).unwrap();
    assert!(n > 5 && n < 1000, "{n}");
    assert_eq!(s.verdict_at(n, n, 0.05, 0.05, 0.0), Verdict::Pass);
    assert_eq!(
        s.verdict_at(n - 1, n - 1, 0.05, 0.05, 0.0),
        Verdict::Inconclusive
    );
    // The detectable change shrinks with the runs.
    assert!(s.detectable_at(n, n, 0.05) < s.detectable_at(5, 5, 0.05));
    // Decided already: nothing more needed.
    assert_eq!(
        more_runs_needed(&unpaired(&base, &base), 0.05, 0.05, 0.0),
        None
    );
}

#[test]
fn an_unpaired_regression_must_clear_the_floor_with_its_interval() {
    // +100% of 4 ms: the whole interval of the difference is within the 10 ms floor: a pass,
    // however wide the relative interval.
    let base = [0.004, 0.0041, 0.0039];
    let cand = [0.008, 0.0081, 0.0079];
    let floor = absolute_floor("s");
    assert_eq!(
        decide_above(&base, &cand, 0.05, 0.95, floor).verdict,
        Verdict::Pass
    );
    // Medians 12 ms apart, but the interval of the difference reaches below the floor: not a
    // regression yet.
    let cand = [0.004, 0.016, 0.030];
    let d = decide_above(&base, &cand, 0.05, 0.95, floor);
    assert_eq!(d.verdict, Verdict::Inconclusive, "{d:?}");
}

#[test]
fn a_drift_within_the_noise_is_never_decided_by_more_runs() {
    // +8% within ±10% noise (see a_change_within_the_measured_noise_is_not_a_regression): more
    // runs narrow the interval, but its lower bound never clears the noise and its upper bound
    // never falls under the limit.
    let base: Vec<f64> = (0..40)
        .map(|i| if i % 2 == 0 { 0.9 } else { 1.1 })
        .collect();
    let cand: Vec<f64> = base.iter().map(|v| v * 1.08).collect();
    let s = unpaired(&base, &cand);
    assert_eq!(s.verdict(0.05, 0.05, 0.0), Verdict::Inconclusive);
    assert_eq!(more_runs_needed(&s, 0.05, 0.05, 0.0), None);
    assert_eq!(
        s.verdict_at(100_000, 100_000, 0.05, 0.05, 0.0),
        Verdict::Inconclusive
    );
}

/// A report of one unpaired row decided over data, and of one gated metric with a single run.
fn unpaired_report(cand_scale: f64) -> Report {
    let base = [5.00, 5.15, 4.85, 5.10, 4.90];
    let cand: Vec<f64> = base.iter().map(|v| v * cand_scale).collect();
    let mut report = sample_report();
    report.warnings.clear();
    report.rows = vec![
        Row {
            metric: "cpu_s",
            unit: "s",
            baseline: Stats::of(&base),
            candidate: Stats::of(&cand),
            max_increase: 0.05,
            decision: decide_above(&base, &cand, 0.05, 0.95, absolute_floor("s")),
        },
        Row {
            metric: "processes",
            unit: "",
            baseline: Stats::of(&[210.0]),
            candidate: Stats::of(&[211.0]),
            max_increase: 0.05,
            decision: decide(&[210.0], &[211.0], 0.05, 0.95),
        },
    ];
    report
}

#[test]
fn an_inconclusive_compare_says_what_would_decide_it() {
    let report = unpaired_report(1.04);
    assert_eq!(report.outcome(), "inconclusive");
    assert_eq!(report.exit_code(), EXIT_INCONCLUSIVE);
    let n = report.runs_needed().unwrap();
    assert!(n > 5, "{n}");
    let text = render_text(&report);
    assert!(
        text.contains("inconclusive: 1 metric not decided"),
        "{text}"
    );
    assert!(
        text.contains("detectable ±") && text.contains("with 5 + 5 runs"),
        "{text}"
    );
    assert!(
        text.contains(&format!("about {n} runs a side would decide it")),
        "{text}"
    );
    assert!(!text.contains("no regression"), "{text}");
    // The single-sample metric keeps the limit, and the output says so.
    assert!(text.contains("decided by the limit alone"), "{text}");
    assert!(text.contains(": processes"), "{text}");
    let md = render_md(&report);
    assert!(md.contains("⚠️ **INCONCLUSIVE**"), "{md}");
    let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
    assert_eq!(json["outcome"], "inconclusive", "{json}");
    assert_eq!(json["runs_needed"], n, "{json}");
    let cpu = &json["metrics"][0];
    assert_eq!(
        (&cpu["verdict"], &cpu["method"]),
        (&"inconclusive".into(), &"welch".into())
    );
    let (low, high) = (
        cpu["change_low"].as_f64().unwrap(),
        cpu["change_high"].as_f64().unwrap(),
    );
    assert!(low < 0.04 && high > 0.05, "{cpu}");
    assert_eq!(cpu["runs_needed"], n, "{cpu}");
    // A clear regression and a clear pass are decided, with their exit codes.
    assert_eq!(unpaired_report(1.2).exit_code(), EXIT_REGRESSED);
    let pass = unpaired_report(1.0);
    assert_eq!((pass.outcome(), pass.exit_code()), ("pass", 0));
    assert_eq!(pass.runs_needed(), None);
    assert!(render_text(&pass).contains("no regression"));
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
        directory: None,
        commit: None,
        dirty: None,
        dataset_runs: Vec::new(),
    };
    let row = |metric: &'static str, baseline, candidate, max_increase, decision| Row {
        metric,
        unit: crate::store::summary_json::metric_def(metric).unwrap().unit,
        baseline,
        candidate,
        max_increase,
        decision,
    };
    let welch = |verdict, ratio, t, df, p, noise: f64| Decision {
        verdict,
        method: Some(Method::Welch { t, df, p }),
        ratio: Some(ratio),
        noise: Some(noise),
        min_effect: noise.max(0.05),
        alpha: 0.05,
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
                    NOT_GATED,
                    welch(Verdict::NotGated, 1.061_158_363, 1.47, 4.3, 0.1062, 0.0097),
                ),
                row(
                    "cpu_s",
                    stats(5, 40.1, 40.0, 0.4, 39.6, 40.7),
                    stats(5, 80.5, 80.4, 0.6, 79.8, 81.3),
                    0.05,
                    welch(Verdict::Regressed, 2.01, 125.1, 7.0, 0.000_001_2, 0.01),
                ),
                row(
                    "peak_rss_bytes",
                    stats(5, 536_870_912.0, 536_870_912.0, 1_048_576.0, 535_822_336.0, 537_919_488.0),
                    stats(5, 429_496_729.6, 429_496_729.6, 524_288.0, 428_867_584.0, 430_000_000.0),
                    0.10,
                    welch(Verdict::Improved, 0.8, -40.2, 6.1, 0.0004, 0.002),
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
                        noise: None,
                        min_effect: 0.05, alpha: 0.05,
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
                        noise: None,
                        min_effect: 0.10, alpha: 0.05,
                    },
                ),
                row(
                    "write_bytes",
                    stats(5, 0.0, 0.0, 0.0, 0.0, 0.0),
                    stats(5, 0.0, 0.0, 0.0, 0.0, 0.0),
                    0.10,
                    welch(Verdict::Pass, 1.0, 0.0, 8.0, 0.5, 0.0),
                ),
                row(
                    "gpu_energy_joules",
                    stats(5, 1520.0, 1510.5, 30.2, 1490.0, 1570.0),
                    None,
                    0.10,
                    Decision { verdict: Verdict::NoData, method: None, ratio: None, noise: None, min_effect: 0.10, alpha: 0.05 },
                ),
            ],
            warnings: vec![
                "candidate runs/pr-42/summary.json: 1 kernel event lost; the process tree may be incomplete"
                    .into(),
                "candidate runs/pr-42/summary.json: the rss limit stopped the run".into(),
            ],
            name: None,
            series: None,
        }
}

#[test]
fn an_off_limit_shows_as_not_gated() {
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
    assert!(
        line.contains("off") && line.ends_with("not gated"),
        "{line}"
    );
    assert!(!text.contains("read_bytes (from 0"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
    let row = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "read_bytes")
        .unwrap();
    assert_eq!(row["max_increase"], serde_json::Value::Null, "{row}");
    assert_eq!(row["verdict"], "not_gated", "{row}");
}

/// Compares `actual` with the snapshot file `snapshots/NAME`; with MONTRACE_BLESS=1 in the
/// environment, writes `actual` there instead (then review the diff).
fn assert_snapshot(name: &str, expected: &str, actual: &str) {
    if std::env::var_os("MONTRACE_BLESS").is_some() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("src/analysis/compare/snapshots")
            .join(name);
        std::fs::write(&path, actual).unwrap();
        return;
    }
    assert_eq!(
        actual, expected,
        "snapshots/{name} differs (MONTRACE_BLESS=1 rewrites it)"
    );
}

#[test]
fn text_snapshot() {
    let expected = include_str!("snapshots/sample.txt");
    assert_snapshot("sample.txt", expected, &render_text(&sample_report()));
}

#[test]
fn markdown_snapshot() {
    let expected = include_str!("snapshots/sample.md");
    assert_snapshot("sample.md", expected, &render_md(&sample_report()));
}

#[test]
fn json_snapshot() {
    let expected = include_str!("snapshots/sample.json");
    assert_snapshot("sample.json", expected, &render_json(&sample_report()));
}

#[test]
fn bmf_snapshot() {
    let expected = include_str!("snapshots/sample.bmf.json");
    assert_snapshot("sample.bmf.json", expected, &render_bmf(&sample_report()));
}

fn repetition(wall: f64, cpu: f64) -> Repetition {
    Repetition {
        run_dir: ".".into(),
        run_id: String::new(),
        exit_status: 0,
        lost_events: 0,
        metrics: BTreeMap::from([("wall_s".to_string(), wall), ("cpu_s".to_string(), cpu)]),
        other_cpu_share: None,
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
        sides: vec![baseline.into(), candidate.into()],
        baseline: None,
        gate: crate::cli::GateOptions {
            max: Vec::new(),
            confidence: 0.95,
            format: CompareFormat::Text,
        },
        allow_different_commands: false,
        conditions: Vec::new(),
        last: 20,
        any_host: false,
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

    let report = prepare(&opts(&args(&run, &many))).unwrap();
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
    assert_eq!(compare(args(&base, &same)).unwrap(), 0);
    assert_eq!(compare(args(&base, &slow)).unwrap(), EXIT_REGRESSED);
    let report = prepare(&opts(&args(&base, &slow))).unwrap();
    let regressed: Vec<_> = report.regressions().map(|r| r.metric).collect();
    assert_eq!(regressed, ["cpu_s"]);
    // A limit raised past the change lets it through.
    let mut lenient = args(&base, &slow);
    lenient.gate.max = vec!["cpu=+150%".into()];
    assert_eq!(prepare(&opts(&lenient)).unwrap().exit_code(), 0);
}

/// The options of `args` (`--max` and the sides good).
fn opts(args: &CompareArgs) -> CompareOptions {
    options(args).unwrap()
}

/// The usage error of `compare(args)`, found by the command line's conversion (`--max`, the
/// sides) or by [`prepare`] (the runs).
fn usage_error(args: CompareArgs) -> String {
    let from_prepare = options(&args).ok().map(|options| {
        let err = prepare(&options).unwrap_err();
        let CompareError::Usage(message) = err else {
            panic!("a usage error, not {err:?}");
        };
        message
    });
    let err = compare(args).unwrap_err();
    assert_eq!(err.exit_code(), crate::exit_code::EXIT_USAGE, "{err:?}");
    let line = err.line();
    let message = line
        .strip_prefix("montrace: error: ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_string();
    if let Some(from_prepare) = from_prepare {
        assert_eq!(from_prepare, message);
    }
    message
}

/// A read that fails for another reason than a wrong input is montrace's failure (exit 125
/// through main), not a usage error.
#[test]
fn an_unreadable_summary_is_an_io_error_not_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    // A path through a plain file: stat fails with ENOTDIR, not "does not exist".
    let file = tmp.path().join("file");
    fs::write(&file, "x").unwrap();
    let through = file.join(SUMMARY_FILE);
    let err = load_side(&through).unwrap_err();
    assert!(matches!(err, CompareError::Io { .. }), "{err:?}");
    let err = compare(args(&through, &through)).unwrap_err();
    assert_eq!(err.exit_code(), crate::exit_code::EXIT_MONTRACE_FAILED);
    assert!(err.line().contains("cannot read"), "{}", err.line());
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
    bad_max.gate.max = vec!["cpu=5".into()];
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
    let report = prepare(&opts(&allowed)).unwrap();
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
    let breach = crate::store::summary_json::LimitBreach {
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
    let report = prepare(&opts(&args(&base, &cand))).unwrap();
    let path = cand.display();
    assert_eq!(
        report.warnings,
        [
            format!(
                "candidate {path}: 1 of 3 repetitions exited with a non-zero status; a failed \
                     run may use less than a successful one"
            ),
            format!("candidate {path}: the rss limit stopped the run"),
            format!("candidate {path}: 3 kernel events lost; the process tree may be incomplete"),
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
    assert!(md.contains("\n**no regression**\n"), "{md}");
    // The single-sample metric was decided by its limit alone, and the comment says so.
    assert!(
        md.ends_with("**decided by the limit alone (a single sample on a side has no spread to test): processes**\n"),
        "{md}"
    );
}

#[test]
fn a_change_below_the_absolute_floor_is_no_verdict() {
    // 4 ms of system time becoming 0: -100 %, significant, but nothing anyone can act on.
    let d = decide_above(
        &[0.004, 0.004, 0.005],
        &[0.0, 0.0, 0.0],
        0.10,
        0.95,
        absolute_floor("s"),
    );
    assert_eq!(d.verdict, Verdict::Pass);
    let d = decide_above(
        &[0.004, 0.004, 0.005],
        &[0.030, 0.031, 0.029],
        0.10,
        0.95,
        absolute_floor("s"),
    );
    assert_eq!(d.verdict, Verdict::Regressed);
    assert_eq!(absolute_floor("B"), 1048576.0);
    assert_eq!(absolute_floor(""), 0.0);
}

#[test]
fn the_significance_level_is_shared_among_the_gated_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let base = write_run(&dir.path().join("a"), "x", &STEADY);
    let cand = write_run(&dir.path().join("b"), "x", &STEADY);
    let report = prepare(&opts(&args(&base, &cand))).unwrap();
    // cpu_s has 2+ samples a side and a limit; wall_s is not gated: one test, the whole 5%.
    let cpu = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert!(
        (cpu.decision.alpha - 0.05).abs() < 1e-12,
        "{:?}",
        cpu.decision
    );
    let mut gated = args(&base, &cand);
    gated.gate.max = vec!["wall=+10%".into()];
    let report = prepare(&opts(&gated)).unwrap();
    for row in &report.rows {
        assert!((row.decision.alpha - 0.025).abs() < 1e-12, "{row:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Paired (bench)
// ---------------------------------------------------------------------------------------------

/// A side of a bench series: one run per pair, one repetition each, `cpu_s` and `processes` as
/// given, in `dir/rep-NNN`, with the side's checkout in its context.
fn bench_side(dir: &str, cpu: &[f64], processes: f64, commit: &str) -> Side {
    let runs = cpu
        .iter()
        .enumerate()
        .map(|(i, &cpu)| {
            let mut rep = repetition(cpu * 1.2, cpu);
            rep.metrics.insert("processes".into(), processes);
            let mut summary = Summary::new(
                "/bin/sh -c 'make -j2'".into(),
                vec!["/bin/sh".into(), "-c".into(), "make -j2".into()],
                "host".into(),
                0,
                vec![rep],
                None,
            );
            summary.context = Some(crate::fleet::context::Context {
                git: Some(crate::fleet::context::Git {
                    commit: Some(commit.into()),
                    branch: None,
                    dirty: Some(commit.starts_with('f')),
                }),
                ..Default::default()
            });
            (
                PathBuf::from(format!("{dir}/rep-{:03}/summary.json", i + 1)),
                summary,
            )
        })
        .collect();
    Side {
        source: dir.into(),
        runs,
        different_commands_expected: true,
        from_dataset: false,
    }
}

fn series(n: usize, disturbed: &[usize]) -> Series {
    Series {
        pairs: (0..n)
            .map(|i| PairInfo {
                index: i + 1,
                order: if i % 2 == 0 { "AB" } else { "BA" },
                baseline: Interference {
                    other_cpu_share: Some(0.05),
                    run_queue_share: Some(0.02),
                },
                candidate: Interference {
                    other_cpu_share: Some(if disturbed.contains(&i) { 0.5 } else { 0.06 }),
                    run_queue_share: Some(0.03),
                },
                left_out: disturbed
                    .contains(&i)
                    .then(|| "other work took 5% ..., 50% ...".to_string()),
            })
            .collect(),
        kept: 0,
        looks: 1,
        stopped_by: "max_runs",
        max_runs: n,
        max_time_s: None,
        elapsed_s: 61.0,
    }
}

/// A neighbour that moves CPU time by up to 30 % between pairs, both runs of a pair alike.
const MACHINE: [f64; 6] = [5.5, 7.2, 6.1, 5.8, 7.0, 6.4];

fn paired_report(change: f64, noise: &[f64], disturbed: &[usize]) -> Report {
    let base: Vec<f64> = MACHINE.to_vec();
    let cand: Vec<f64> = MACHINE
        .iter()
        .zip(noise.iter().cycle())
        .map(|(m, e)| m * (1.0 + change + e))
        .collect();
    build_paired_report(
        &bench_side("runs/baseline", &base, 31.0, "1a2b3c4d5e6f7a8b9c0d"),
        &bench_side("runs/candidate", &cand, 31.0, "f0e1d2c3b4a5"),
        &parse_max(&[]).unwrap(),
        0.95,
        series(MACHINE.len(), disturbed),
    )
}

#[test]
fn a_bench_series_is_decided_on_its_pairs() {
    // +10 % CPU under a drifting neighbour: regressed, exit 1.
    let report = paired_report(0.10, &[0.004, -0.003], &[]);
    let cpu = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert_eq!(cpu.decision.verdict, Verdict::Regressed, "{cpu:?}");
    assert!(matches!(cpu.decision.method, Some(Method::Paired(s)) if s.n == 6));
    assert_eq!((report.outcome(), report.exit_code()), ("regressed", 1));
    // The same code: pass, exit 0; the exact process count passes too.
    let report = paired_report(0.0, &[0.004, -0.003], &[]);
    assert_eq!(
        (report.outcome(), report.exit_code()),
        ("pass", 0),
        "{}",
        render_text(&report)
    );
    // Too noisy for 6 pairs: inconclusive, exit 3, and never "no regression".
    let report = paired_report(0.03, &[0.06, -0.05, 0.02], &[]);
    assert_eq!((report.outcome(), report.exit_code()), ("inconclusive", 3));
    let text = render_text(&report);
    assert!(!text.contains("no regression"), "{text}");
    assert!(
        text.contains("inconclusive after 6 pairs (--max-runs ended it)"),
        "{text}"
    );
    assert!(text.contains("more would decide it"), "{text}");
    let md = render_md(&report);
    assert!(
        md.starts_with("### montrace bench: ⚠️ inconclusive"),
        "{md}"
    );
    let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
    assert_eq!(json["outcome"], "inconclusive");
    assert!(json["pairs_needed"].as_u64().unwrap() > 6, "{json}");
    let cpu = json["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["metric"] == "cpu_s")
        .unwrap();
    assert_eq!(
        (cpu["method"].as_str(), cpu["pairs"].as_u64()),
        (Some("paired"), Some(6))
    );
    assert!(cpu["change_low"].as_f64().unwrap() < 0.025, "{cpu}");
    assert!(cpu["change_high"].as_f64().unwrap() > 0.05, "{cpu}");
}

#[test]
fn a_disturbed_pair_is_left_out_and_shown() {
    // Pair 3's candidate ran beside a neighbour its baseline did not see: +40 % there alone.
    let mut noise = vec![0.0; 6];
    noise[2] = 0.40;
    let report = paired_report(0.0, &noise, &[2]);
    assert_eq!(report.outcome(), "pass", "{}", render_text(&report));
    assert_eq!(report.series.as_ref().unwrap().kept, 5);
    let cpu = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert_eq!(cpu.baseline.unwrap().n, 5);
    let text = render_text(&report);
    assert!(text.contains("pair 3 AB: other work 5% / 50%"), "{text}");
    assert!(text.contains("left out"), "{text}");
    // Used, the same pair makes the series undecided.
    let report = paired_report(0.0, &noise, &[]);
    assert_ne!(report.outcome(), "pass");
}

#[test]
fn paired_snapshots() {
    let mut report = paired_report(0.10, &[0.004, -0.003], &[]);
    report.name = Some("make -j2".into());
    report.baseline.directory = Some("/ci/baseline".into());
    report.candidate.directory = Some("/ci/candidate".into());
    assert_snapshot(
        "paired.txt",
        include_str!("snapshots/paired.txt"),
        &render_text(&report),
    );
    assert_snapshot(
        "paired.md",
        include_str!("snapshots/paired.md"),
        &render_md(&report),
    );
    let json = render_json(&report);
    assert_snapshot("paired.json", include_str!("snapshots/paired.json"), &json);
    let json: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["candidate"]["commit"], "f0e1d2c3b4a5");
    assert_eq!(json["candidate"]["dirty"], true);
    // Bencher: the benchmark's name, measures by slug.
    let bmf: serde_json::Value = serde_json::from_str(&render_bmf(&report)).unwrap();
    assert!(
        bmf["make -j2"]["cpu-s"]["value"].as_f64().unwrap() > 6.0,
        "{bmf}"
    );
    assert!(bmf["make -j2"].get("cpu_s").is_none(), "{bmf}");
}

/// One shell loop's (wall, cpu) over 3 repetitions on a fresh CI machine: CPU time ±20 %.
const NOISY: [(f64, f64); 3] = [(0.30, 0.25), (0.42, 0.37), (0.35, 0.30)];

/// A side of one run whose repetitions have these run ids and (wall, cpu) figures.
fn side_of(summary_path: &str, reps: &[(&str, f64, f64)]) -> Side {
    let reps = reps
        .iter()
        .enumerate()
        .map(|(i, &(id, wall, cpu))| Repetition {
            run_dir: format!("rep-{:03}", i + 1),
            run_id: id.into(),
            ..repetition(wall, cpu)
        })
        .collect();
    let summary = Summary::new(
        "make".into(),
        vec!["make".into()],
        "host".into(),
        0,
        reps,
        None,
    );
    Side {
        source: summary_path.into(),
        runs: vec![(summary_path.into(), summary)],
        different_commands_expected: false,
        from_dataset: false,
    }
}

#[test]
fn identical_samples_that_are_the_same_runs_pass_without_a_test() {
    // As two independent samples, Welch's interval of ±20 % noise over 3 runs reaches far past
    // the +5 % limit: the same figures alone cannot be called.
    let cpu: Vec<f64> = NOISY.iter().map(|&(_, cpu)| cpu).collect();
    let welch = decide_above(&cpu, &cpu, 0.05, 0.95, absolute_floor("s"));
    assert_eq!(welch.verdict, Verdict::Inconclusive, "{welch:?}");
    // The same runs are one sample, not two: the difference is exactly 0.
    let reps = [("r1", 0.30, 0.25), ("r2", 0.42, 0.37), ("r3", 0.35, 0.30)];
    let side = side_of("base/summary.json", &reps);
    assert_eq!(overlap(&side, &side), Overlap::Same);
    let report = build_report(&side, &side, &parse_max(&[]).unwrap(), 0.95);
    assert_eq!((report.outcome(), report.exit_code()), ("pass", 0));
    let cpu_row = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert_eq!(
        (cpu_row.decision.verdict, cpu_row.decision.method),
        (Verdict::Pass, Some(Method::SameRuns))
    );
    // Not gated stays not gated; the figures shown are the runs' own.
    let wall_row = report.rows.iter().find(|r| r.metric == "wall_s").unwrap();
    assert_eq!(wall_row.decision.verdict, Verdict::NotGated);
    assert_eq!(cpu_row.decision.ratio, Some(1.0));
    assert_eq!(cpu_row.baseline.unwrap().n, 3);
    // A copy of the run elsewhere is the same runs too: the run ids and figures say so.
    let copy = side_of("elsewhere/summary.json", &reps);
    assert_eq!(overlap(&side, &copy), Overlap::Same);
}

#[test]
fn the_same_run_ids_with_other_figures_are_not_the_same_runs() {
    let reps = [("r1", 0.30, 0.25), ("r2", 0.42, 0.37), ("r3", 0.35, 0.30)];
    let side = side_of("base/summary.json", &reps);
    // An edited copy (twice the CPU): Welch decides, as for any two sides.
    let edited: Vec<_> = reps.iter().map(|&(id, w, c)| (id, w, c * 2.0)).collect();
    let edited = side_of("slow/summary.json", &edited);
    assert_eq!(overlap(&side, &edited), Overlap::None);
    let report = build_report(&side, &edited, &parse_max(&[]).unwrap(), 0.95);
    let cpu_row = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert!(
        matches!(cpu_row.decision.method, Some(Method::Welch { .. })),
        "{cpu_row:?}"
    );
    assert!(!render_text(&report).contains(SAME_RUNS_LINE));
    // Without run ids (an old summary.json), the same figures from another file are another
    // measurement: Welch decides them too.
    let no_ids: Vec<_> = reps.iter().map(|&(_, w, c)| ("", w, c)).collect();
    let (a, b) = (
        side_of("a/summary.json", &no_ids),
        side_of("b/summary.json", &no_ids),
    );
    assert_eq!(overlap(&a, &b), Overlap::None);
    assert_eq!(overlap(&a, &a), Overlap::Same);
}

#[test]
fn runs_on_both_sides_among_others_are_named_in_a_warning() {
    let base = side_of(
        "base/summary.json",
        &[("r1", 2.0, 1.00), ("r2", 2.1, 1.02), ("r3", 1.9, 0.98)],
    );
    let cand = side_of(
        "cand/summary.json",
        &[("r3", 1.9, 0.98), ("r4", 2.0, 1.01), ("r5", 2.0, 0.99)],
    );
    assert_eq!(overlap(&base, &cand), Overlap::Shared(1));
    let report = build_report(&base, &cand, &parse_max(&[]).unwrap(), 0.95);
    // Welch still decides (conservatively); the report says why its interval is wide.
    assert_eq!(report.outcome(), "pass", "{report:?}");
    let cpu_row = report.rows.iter().find(|r| r.metric == "cpu_s").unwrap();
    assert!(matches!(
        cpu_row.decision.method,
        Some(Method::Welch { .. })
    ));
    assert_eq!(
        report.warnings,
        [
            "1 of the baseline's 3 samples is also the candidate's (the same runs): Welch's \
          interval takes the sides as independent samples, so it is wider than the data warrant \
          (more often inconclusive, not more often wrong); compare runs that are not shared"
        ]
    );
}

#[test]
fn a_run_compared_with_itself_passes_through_the_compare_command() {
    let tmp = tempfile::tempdir().unwrap();
    let run = write_run(&tmp.path().join("base"), "make", &NOISY);
    // Another run of the same figures is a second sample: too noisy to call.
    let other = write_run(&tmp.path().join("other"), "make", &NOISY);
    assert_eq!(compare(args(&run, &other)).unwrap(), EXIT_INCONCLUSIVE);
    // The run itself on both sides: exactly no change.
    assert_eq!(compare(args(&run, &run)).unwrap(), 0);
    let report = prepare(&opts(&args(&run, &run))).unwrap();
    assert_eq!(report.outcome(), "pass");
    assert!(report.warnings.is_empty(), "{:?}", report.warnings);
    let text = render_text(&report);
    assert!(text.contains("no regression"), "{text}");
    assert!(text.contains(SAME_RUNS_LINE), "{text}");
    assert!(!text.contains("decided by the limit alone"), "{text}");
    let md = render_md(&report);
    assert!(md.contains(SAME_RUNS_LINE), "{md}");
    let json: serde_json::Value = serde_json::from_str(&render_json(&report)).unwrap();
    assert_eq!(json["outcome"], "pass", "{json}");
    let cpu = &json["metrics"][1];
    assert_eq!(cpu["metric"], "cpu_s", "{json}");
    assert_eq!(
        (&cpu["verdict"], &cpu["method"]),
        (&"pass".into(), &"same_runs".into())
    );
    assert_eq!(
        (&cpu["change"], &cpu["change_low"], &cpu["change_high"]),
        (&0.0.into(), &0.0.into(), &0.0.into())
    );
    assert!(cpu.get("detectable").is_none(), "{cpu}");
    // A directory of runs against one of them: shared, not the same.
    let many = tmp.path().join("many");
    let one = write_run(&many.join("a"), "make", &NOISY);
    write_run(&many.join("b"), "make", &STEADY);
    let report = prepare(&opts(&args(&many, &one))).unwrap();
    assert_eq!(report.warnings.len(), 1, "{:?}", report.warnings);
    assert!(report.warnings[0].starts_with("3 of the baseline's 6 samples are also"));
}
