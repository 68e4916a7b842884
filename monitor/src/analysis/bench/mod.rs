//! `montrace bench`: two commands measured alternately, A B B A ..., each repetition a full
//! `montrace run` of its own, then decided as `compare` decides. Interleaving makes whatever
//! drifts on the machine over the series (a neighbour, thermal state, caches) fall equally on
//! both sides, which back-to-back series do not.
//!
//! Pure: [`plan`]. The edge here runs the repetitions (this very binary, `run`), reads their
//! summaries and writes the verdict.
use std::{
    path::{Path, PathBuf},
    process::Command,
};

use anyhow::Context as _;

use crate::{
    analysis::compare::{build_report, load_side, parse_max, render, CompareError},
    cli::{BenchArgs, CompareFormat, EXIT_MONTRACE_FAILED, EXIT_USAGE},
    store::{summary_json, userfs},
};

pub mod plan;

use plan::Arm;

/// `montrace bench`.
pub fn bench_main(args: BenchArgs) -> anyhow::Result<i32> {
    let limits = match parse_max(&args.gate.max) {
        Ok(limits) => limits,
        Err(message) => {
            crate::say!("montrace: error: {message}");
            return Ok(EXIT_USAGE);
        }
    };
    let out = args.out.clone().unwrap_or_else(|| {
        let now = crate::sampling::host::realtime_ns();
        PathBuf::from("montrace-bench").join(crate::units::compact_utc(now))
    });
    if let Err(err) = userfs::create_dir_all(&out) {
        crate::say!("montrace: error: cannot create {}: {err}", out.display());
        return Ok(EXIT_USAGE);
    }
    if userfs::list_dir(&out).map_or(true, |names| !names.is_empty()) {
        crate::say!(
            "montrace: error: {} is not empty: give --out a new or empty directory",
            out.display()
        );
        return Ok(EXIT_USAGE);
    }
    let warmup_dir = out.join("warmup");
    for dir in [&warmup_dir, &out.join("baseline"), &out.join("candidate")] {
        userfs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let mut warmups = [Vec::new(), Vec::new()];
    for k in 0..args.warmup as usize {
        for arm in plan::interleaved(k + 1).split_off(2 * k) {
            let dir = warmup_dir.join(format!("{}-{:02}", arm.name(), k + 1));
            match one_run(&args, arm, &dir)? {
                Ok(summary) => warmups[arm as usize].extend(
                    (summary.repetitions.first())
                        .map(|r| plan::Measured::of(&format!("{} warm-up", arm.name()), r)),
                ),
                Err(code) => return Ok(code),
            }
        }
    }
    let mut measured = [Vec::new(), Vec::new()];
    let mut count = [0usize, 0usize];
    for arm in plan::interleaved(args.repeat as usize) {
        count[arm as usize] += 1;
        let name = format!("rep-{:03}", count[arm as usize]);
        let dir = out.join(arm.name()).join(&name);
        match one_run(&args, arm, &dir)? {
            Ok(summary) => measured[arm as usize].extend(
                (summary.repetitions.first())
                    .map(|r| plan::Measured::of(&format!("{} {name}", arm.name()), r)),
            ),
            Err(code) => return Ok(code),
        }
    }
    decide(&args, &out, &limits, &warmups, &measured)
}

/// Loads both sides, decides, writes OUT/verdict.md and OUT/verdict.json, prints the chosen
/// format; the exit status is compare's.
fn decide(
    args: &BenchArgs,
    out: &Path,
    limits: &std::collections::BTreeMap<&'static str, f64>,
    warmups: &[Vec<plan::Measured>; 2],
    measured: &[Vec<plan::Measured>; 2],
) -> anyhow::Result<i32> {
    let mut result = None;
    userfs::as_user(|| {
        result = Some((|| -> anyhow::Result<i32> {
            let load = |arm: Arm| {
                load_side(&out.join(arm.name())).map(|mut side| {
                    side.different_commands_expected = true;
                    side
                })
            };
            let (baseline, candidate) = match (load(Arm::Baseline), load(Arm::Candidate)) {
                (Ok(b), Ok(c)) => (b, c),
                (Err(CompareError::Usage(m)), _) | (_, Err(CompareError::Usage(m))) => {
                    crate::say!("montrace: error: {m}");
                    return Ok(EXIT_USAGE);
                }
                (Err(e), _) | (_, Err(e)) => return Err(e.into()),
            };
            let mut report = build_report(&baseline, &candidate, limits, args.gate.confidence);
            for arm in [Arm::Baseline, Arm::Candidate] {
                for w in plan::warnings(&warmups[arm as usize], &measured[arm as usize]) {
                    report.warnings.push(format!("{}: {w}", arm.name()));
                }
            }
            for (name, format) in [
                ("verdict.md", CompareFormat::Md),
                ("verdict.json", CompareFormat::Json),
            ] {
                let path = out.join(name);
                userfs::write_atomic(&path, render(&report, format).as_bytes())
                    .with_context(|| format!("cannot write {}", path.display()))?;
            }
            crate::say_out!("{}", render(&report, args.gate.format).trim_end());
            Ok(report.exit_code())
        })());
        Ok(())
    })?;
    result.expect("as_user ran the decision")
}

/// One recorded run of `arm` into `dir`: this binary's `run`, hooks included. Its summary, or
/// the status that ends the series (said on stderr).
fn one_run(
    args: &BenchArgs,
    arm: Arm,
    dir: &Path,
) -> anyhow::Result<Result<summary_json::Summary, i32>> {
    let exe = std::env::current_exe().context("finding montrace's own binary")?;
    let command = match arm {
        Arm::Baseline => &args.baseline,
        Arm::Candidate => &args.candidate,
    };
    let mut cmd = Command::new(exe);
    cmd.arg("run")
        .arg("--out")
        .arg(dir)
        .args(["--no-report", "-q"])
        .env("MONTRACE_BENCH_SIDE", arm.name());
    if let Some(prepare) = &args.prepare {
        cmd.arg("--prepare").arg(prepare);
    }
    if let Some(cleanup) = &args.cleanup {
        cmd.arg("--cleanup").arg(cleanup);
    }
    cmd.args(["--", "/bin/sh", "-c", command]);
    let status = cmd.status().context("starting montrace run")?;
    let code = status.code().unwrap_or(EXIT_MONTRACE_FAILED);
    let where_ = dir
        .strip_prefix(dir.ancestors().nth(2).unwrap_or(dir))
        .unwrap_or(dir);
    let summary = userfs::as_user(|| {
        Ok(summary_json::read(&dir.join(summary_json::SUMMARY_FILE)).map_err(|e| e.to_string()))
    })
    .unwrap_or_else(|e| Err(e.to_string()));
    let summary = match (code, summary) {
        (0, Ok(summary)) => summary,
        (0, Err(err)) => {
            crate::say!("montrace bench: {}: no summary: {err}", where_.display());
            return Ok(Err(EXIT_MONTRACE_FAILED));
        }
        (code, _) => {
            crate::say!(
                "montrace bench: {} failed (exit {code}): no further repetitions, no verdict",
                where_.display()
            );
            return Ok(Err(code));
        }
    };
    let metric = |name: &str| summary.values(name).first().copied();
    crate::say!(
        "montrace bench: {}: wall {:.3}s, CPU {:.3}s, peak RSS {}",
        where_.display(),
        metric("wall_s").unwrap_or(f64::NAN),
        metric("cpu_s").unwrap_or(f64::NAN),
        metric("peak_rss_bytes").map_or("n/a".into(), |b| crate::units::format_bytes(b as u64)),
    );
    Ok(Ok(summary))
}
