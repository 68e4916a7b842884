//! `montrace compare` on real repeated runs: a candidate burning twice the CPU fails the gate
//! and names CPU; the same workload against itself passes.
use std::process::Command;

use tests::{compile_c, montrace_bin, run_montrace_env, run_with_timeout};

/// Burns `BURN_MS` milliseconds of its own CPU time: the same command line on both sides, so
/// compare accepts them as runs of one command.
const BURN: &str = r#"
#include <stdlib.h>
#include <time.h>
static double cpu_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main(void) {
    double target = atof(getenv("BURN_MS")) / 1000.0;
    volatile unsigned long x = 0;
    double start = cpu_s();
    while (cpu_s() - start < target) x++;
    return 0;
}
"#;

fn compare(baseline: &std::path::Path, candidate: &std::path::Path) -> (i32, String) {
    compare_with(baseline, candidate, &[])
}

fn compare_with(
    baseline: &std::path::Path,
    candidate: &std::path::Path,
    args: &[&str],
) -> (i32, String) {
    let finished = run_with_timeout(
        Command::new(montrace_bin())
            .arg("compare")
            .arg(baseline)
            .arg(candidate)
            .args(args),
        std::time::Duration::from_secs(30),
    );
    (finished.code(), finished.stdout.clone())
}

#[test]
fn compare_fails_on_twice_the_cpu_and_passes_the_same_workload() {
    let burn = compile_c("burn", BURN);
    let repeat = ["--repeat", "5", "--no-report", "-q"];
    let base = run_montrace_env(&repeat, &[burn.as_str()], &[("BURN_MS", "150")]);
    let same = run_montrace_env(&repeat, &[burn.as_str()], &[("BURN_MS", "150")]);
    let double = run_montrace_env(&repeat, &[burn.as_str()], &[("BURN_MS", "300")]);
    for run in [&base, &same, &double] {
        run.assert_code(0);
        let reps = run.summary_json()["repetitions"].as_array().unwrap().len();
        assert_eq!(reps, 5, "{run:?}");
    }

    let (code, report) = compare(&base.dir, &double.dir);
    assert_eq!(code, 1, "twice the CPU must fail the gate:\n{report}");
    let cpu_line = report
        .lines()
        .find(|l| l.starts_with("cpu_s "))
        .unwrap_or_else(|| panic!("no cpu_s row:\n{report}"));
    assert!(cpu_line.contains("REGRESSED"), "{cpu_line}\n{report}");
    assert!(report.contains("regressed"), "{report}");

    // Switched off, CPU is still reported (the same doubling) but no longer gates.
    let (_, report) = compare_with(&base.dir, &double.dir, &["--max", "cpu=off"]);
    let cpu_line = report
        .lines()
        .find(|l| l.starts_with("cpu_s "))
        .unwrap_or_else(|| panic!("no cpu_s row:\n{report}"));
    assert!(
        cpu_line.contains("off") && !cpu_line.contains("REGRESSED"),
        "{cpu_line}\n{report}"
    );
    assert!(
        !report.contains("  cpu_s ("),
        "cpu_s listed as regressed:\n{report}"
    );

    // Identical workloads: at the default 95% confidence each noisy metric (a dozen here, system
    // time of 150 ms of clock_gettime calls among them) can still pass its limit by chance about
    // one time in twenty when the machine is busy, which the gate accepts by design; at 99% the
    // test fails on noise rarely enough to mean something. (The doubling above has p < 1e-5.)
    // The user/system split is not a measurement the gate can hold to a limit here: the kernel
    // splits the exact CPU time (sum_exec_runtime) by the ratio of the timer ticks that found the
    // task in user or kernel mode (cputime_adjust), and this burner's user time is 1 or 2 ticks
    // of 10 ms, so its cpu_user_s moves by 100 % between identical runs (seen: 0.012 s vs
    // 0.024 s, p = 0.008). Their sum, cpu_s, is exact and stays gated.
    let (code, report) = compare_with(
        &base.dir,
        &same.dir,
        &[
            "--confidence",
            "0.99",
            "--max",
            "cpu_user=off",
            "--max",
            "cpu_system=off",
        ],
    );
    // Two unpaired series of 5 decide by Welch's interval: on a busy machine its upper bound can
    // reach past a limit, and the gate says it cannot tell (3) — never regressed (1).
    match code {
        0 => assert!(report.contains("no regression"), "{report}"),
        3 => assert!(
            report.contains("inconclusive") && report.contains("a side would decide it")
                || report.contains("more runs would not decide it"),
            "{report}"
        ),
        _ => panic!("the same workload must pass or be inconclusive (exit {code}):\n{report}"),
    }
    assert!(
        !report.lines().any(|l| l.trim_end().ends_with("REGRESSED")),
        "a metric regressed:\n{report}"
    );

    // The same runs on both sides are one sample: exactly no change, a pass without a test.
    let (code, report) = compare(&base.dir, &base.dir);
    assert_eq!(code, 0, "a run against itself:\n{report}");
    assert!(
        report.contains("no regression") && report.contains("the same runs on both sides"),
        "{report}"
    );
}

#[test]
fn compare_of_a_missing_run_is_a_usage_error() {
    let tmp = tempfile::tempdir().unwrap();
    let (code, _) = compare(&tmp.path().join("nope"), &tmp.path().join("nope2"));
    assert_eq!(code, 2);
}
