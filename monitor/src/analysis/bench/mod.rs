//! `montrace bench`: two commands measured in pairs, A B then B A ..., each run a full
//! `montrace run` of its own, until a paired test decides ([`build_paired_report`]) or the budget
//! ends. Interleaving makes whatever drifts on the machine over the series (a neighbour, thermal
//! state, caches) fall equally on both sides; pairing lets the test cancel it instead of counting
//! it as noise.
//!
//! Pure: [`plan`], [`common_name`], and the decision in `compare`. The edge here runs the
//! repetitions (this very binary, `run`), their output into OUT/bench.log, reads their
//! summaries and writes the verdict: stdout carries only the verdict.
use std::{
    io::Write as _,
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::Instant,
};

use anyhow::Context as _;

use crate::{
    analysis::compare::{
        build_paired_report, render, CompareFormat, Interference, PairInfo, Report, Series, Side,
    },
    exit_code::{
        EXIT_BENCH_COMMAND_FAILED, EXIT_BENCH_HOOK_FAILED, EXIT_BENCH_NO_OP, EXIT_MONTRACE_FAILED,
    },
    store::{run_json, summary_json, userfs},
};

pub mod plan;

use plan::Arm;

/// The log of the commands' and hooks' output, beside the runs.
pub const LOG_FILE: &str = "bench.log";
/// Lines of the log shown on stderr when a run fails.
const LOG_TAIL_LINES: usize = 40;
/// Runs a side at most when only `--max-time` bounds the series.
const MAX_RUNS_BY_TIME: usize = 1000;

/// What `montrace bench` runs and how, as the analysis takes it (`commands::bench` makes it
/// from the command line).
#[derive(Clone, Debug)]
pub struct BenchOptions {
    /// The two commands (`/bin/sh -c`).
    pub baseline: String,
    pub candidate: String,
    /// Pairs measured at least, and warm-up pairs before them.
    pub repeat: u32,
    pub warmup: u32,
    /// Hooks before and after each run.
    pub prepare: Option<String>,
    pub cleanup: Option<String>,
    /// Further copies of the verdict.
    pub export_json: Option<PathBuf>,
    pub export_markdown: Option<PathBuf>,
    pub confidence: f64,
    /// The verdict's format on stdout.
    pub format: CompareFormat,
    /// The adaptive budget: pairs in all, and time.
    pub max_runs: Option<u32>,
    pub max_time: Option<std::time::Duration>,
    pub name: Option<String>,
    pub show_output: bool,
    pub allow_no_op: bool,
}

/// The benchmark's name when none is given: the two commands, where they are the same; else the
/// baseline's words with those that differ replaced by `*` (`make -C ../baseline` and `make -C
/// ../candidate` give `make -C *`), so that a name does not depend on where the checkouts are.
pub fn common_name(baseline: &str, candidate: &str) -> String {
    if baseline == candidate {
        return baseline.to_string();
    }
    let (a, b): (Vec<&str>, Vec<&str>) = (
        baseline.split_whitespace().collect(),
        candidate.split_whitespace().collect(),
    );
    if a.len() != b.len() {
        return format!("{baseline} vs {candidate}");
    }
    a.iter()
        .zip(&b)
        .map(|(x, y)| if x == y { *x } else { "*" })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Where a series is, as the edge runs it.
struct Bench<'a> {
    args: &'a BenchOptions,
    out: PathBuf,
    dirs: [Option<PathBuf>; 2],
    log: std::fs::File,
    /// Runs done, and when the first started: the progress line's ETA on a terminal.
    runs_done: usize,
    started: Instant,
}

/// One measured run: its summary (one repetition) and what disturbed it.
struct Run {
    summary: summary_json::Summary,
    interference: Interference,
}

/// Runs the series of `montrace bench` into `out` (a new or empty directory; its arguments
/// checked by `commands::bench`), the sides in `dirs` where given: the verdict's exit status.
pub fn run(
    args: &BenchOptions,
    out: &Path,
    dirs: [Option<PathBuf>; 2],
    limits: &std::collections::BTreeMap<&'static str, f64>,
) -> anyhow::Result<i32> {
    // The sides may run elsewhere (--baseline-dir): their `--out` must not depend on the cwd.
    let out = std::path::absolute(out).context("resolving --out")?;
    let warmup_dir = out.join("warmup");
    for dir in [&warmup_dir, &out.join("baseline"), &out.join("candidate")] {
        userfs::create_dir(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    }
    let log_path = out.join(LOG_FILE);
    let log = userfs::create_new(&log_path)
        .with_context(|| format!("cannot create {}", log_path.display()))?;
    let bench = Bench {
        args,
        out,
        dirs,
        log,
        runs_done: 0,
        started: Instant::now(),
    };
    bench.series(limits)
}

/// The progress line of an adaptive series still undecided after `pairs` pairs.
fn say_undecided(pairs: usize, r: &Report) {
    crate::say!(
        "montrace bench: {pairs} pairs: undecided ({}){}",
        r.inconclusive()
            .map(|row| row.metric)
            .collect::<Vec<_>>()
            .join(", "),
        // The count is of pairs used: those left out as disturbed come on top.
        r.pairs_needed().map_or(String::new(), |n| {
            let kept = r.series.as_ref().map_or(pairs, |s| s.kept);
            let more = n.saturating_sub(kept).max(1);
            format!(
                ", about {more} more pair{} would decide",
                if more == 1 { "" } else { "s" }
            )
        })
    );
}

impl Bench<'_> {
    fn series(
        mut self,
        limits: &std::collections::BTreeMap<&'static str, f64>,
    ) -> anyhow::Result<i32> {
        let args = self.args;
        let started = Instant::now();
        let warmups = match self.warm_up()? {
            Ok(warmups) => warmups,
            Err(code) => return Ok(code),
        };
        let min_pairs = args.repeat as usize;
        let max_pairs = match (args.max_runs, args.max_time) {
            (Some(n), _) => n as usize,
            (None, Some(_)) => MAX_RUNS_BY_TIME,
            (None, None) => min_pairs,
        }
        .max(min_pairs);
        let adaptive = max_pairs > min_pairs;
        // Where the series looks at its data; with a time budget, the look where time ran out
        // may fall between them: one more.
        let schedule = plan::look_schedule(min_pairs, max_pairs);
        let looks = schedule.len() + usize::from(adaptive && args.max_time.is_some());
        let mut runs: [Vec<(PathBuf, summary_json::Summary)>; 2] = [Vec::new(), Vec::new()];
        let mut measured = [Vec::new(), Vec::new()];
        let mut pairs = Vec::new();
        let mut report = None;
        for k in 0..max_pairs {
            let pair_started = Instant::now();
            let mut interference = [Interference::default(); 2];
            let order = plan::pair_order(k);
            for arm in order {
                let name = format!("rep-{:03}", k + 1);
                let dir = self.out.join(arm.name()).join(&name);
                let run = match self.one_run(arm, &dir)? {
                    Ok(run) => run,
                    Err(code) => return Ok(code),
                };
                if let Some(r) = run.summary.repetitions.first() {
                    measured[arm as usize]
                        .push(plan::Measured::of(&format!("{} {name}", arm.name()), r));
                }
                interference[arm as usize] = run.interference;
                runs[arm as usize].push((dir.join(summary_json::SUMMARY_FILE), run.summary));
            }
            let [base, cand] = interference;
            pairs.push(PairInfo {
                index: k + 1,
                order: if order[0] == Arm::Baseline {
                    "AB"
                } else {
                    "BA"
                },
                baseline: base,
                candidate: cand,
                left_out: crate::analysis::compare::pair_disturbed(&base, &cand),
            });
            if k + 1 < min_pairs {
                continue;
            }
            if k + 1 == min_pairs && !args.allow_no_op {
                for arm in [Arm::Baseline, Arm::Candidate] {
                    if let Some(why) = plan::no_op(&warmups[arm as usize], &measured[arm as usize])
                    {
                        crate::say!(
                            "montrace bench: error: {}: {why}; or pass --allow-no-op to \
                             compare what was measured",
                            arm.name()
                        );
                        return Ok(EXIT_BENCH_NO_OP);
                    }
                }
            }
            let elapsed = started.elapsed().as_secs_f64();
            let out_of_time = args.max_time.is_some_and(|max| {
                elapsed + pair_started.elapsed().as_secs_f64() > max.as_secs_f64()
            });
            if !schedule.contains(&(k + 1)) && !out_of_time {
                continue;
            }
            let series = Series {
                pairs: pairs.clone(),
                kept: 0,
                looks,
                stopped_by: "decided",
                max_runs: max_pairs,
                max_time_s: args.max_time.map(|t| t.as_secs_f64()),
                elapsed_s: elapsed,
            };
            let mut r = self.report(&runs, limits, series);
            let decided = r.outcome() != "inconclusive";
            if adaptive && !decided && k + 1 < max_pairs && !out_of_time {
                say_undecided(k + 1, &r);
                continue;
            }
            if let Some(series) = &mut r.series {
                series.stopped_by = if decided {
                    "decided"
                } else if out_of_time {
                    "max_time"
                } else if adaptive {
                    "max_runs"
                } else {
                    "fixed"
                };
            }
            report = Some(r);
            break;
        }
        let mut report = report.expect("the series ends with a report");
        for arm in [Arm::Baseline, Arm::Candidate] {
            for w in plan::warnings(&warmups[arm as usize], &measured[arm as usize]) {
                report.warnings.push(format!("{}: {w}", arm.name()));
            }
        }
        self.finish(&report)
    }

    /// The `--warmup` pairs, in the series' order: each side's figures, or the exit status of
    /// the run that failed (which ends the series).
    fn warm_up(&mut self) -> anyhow::Result<Result<[Vec<plan::Measured>; 2], i32>> {
        let mut warmups = [Vec::new(), Vec::new()];
        for k in 0..self.args.warmup as usize {
            for arm in plan::pair_order(k) {
                let dir = self
                    .out
                    .join("warmup")
                    .join(format!("{}-{:02}", arm.name(), k + 1));
                match self.one_run(arm, &dir)? {
                    Ok(run) => warmups[arm as usize].extend(
                        (run.summary.repetitions.first())
                            .map(|r| plan::Measured::of(&format!("{} warm-up", arm.name()), r)),
                    ),
                    Err(code) => return Ok(Err(code)),
                }
            }
        }
        Ok(Ok(warmups))
    }

    /// The paired report of the runs so far.
    fn report(
        &self,
        runs: &[Vec<(PathBuf, summary_json::Summary)>; 2],
        limits: &std::collections::BTreeMap<&'static str, f64>,
        series: Series,
    ) -> Report {
        let side = |arm: Arm| Side {
            source: self.out.join(arm.name()),
            runs: runs[arm as usize].clone(),
            different_commands_expected: true,
            from_dataset: false,
        };
        let mut report = build_paired_report(
            &side(Arm::Baseline),
            &side(Arm::Candidate),
            limits,
            self.args.confidence,
            series,
        );
        report.name = Some(
            self.args
                .name
                .clone()
                .unwrap_or_else(|| common_name(&self.args.baseline, &self.args.candidate)),
        );
        for (info, dir) in [&mut report.baseline, &mut report.candidate]
            .into_iter()
            .zip(&self.dirs)
        {
            info.directory = dir.as_ref().map(|d| d.display().to_string());
        }
        report
    }

    /// Writes OUT/verdict.md, verdict.json and bmf.json, prints the chosen format on stdout.
    fn finish(&mut self, report: &Report) -> anyhow::Result<i32> {
        userfs::as_user(|| {
            for (name, format) in [
                ("verdict.md", CompareFormat::Md),
                ("verdict.json", CompareFormat::Json),
                ("bmf.json", CompareFormat::Bmf),
            ] {
                userfs::write_atomic(&self.out.join(name), render(report, format).as_bytes())?;
            }
            for (path, format) in [
                (&self.args.export_json, CompareFormat::Json),
                (&self.args.export_markdown, CompareFormat::Md),
            ] {
                if let Some(path) = path {
                    userfs::write_atomic(path, render(report, format).as_bytes())?;
                }
            }
            Ok(())
        })
        .with_context(|| format!("cannot write the verdict into {}", self.out.display()))?;
        let text = render(report, self.args.format);
        let mut stdout = std::io::stdout().lock();
        stdout
            .write_all(text.as_bytes())
            .and_then(|()| stdout.flush())
            .context("cannot write the verdict to stdout")?;
        Ok(report.exit_code())
    }

    /// One recorded run of `arm` into `dir`: this binary's `run`, hooks included, in the side's
    /// directory, its output into the log. Its summary, or the status that ends the series
    /// (said on stderr, with the log's last lines).
    fn one_run(&mut self, arm: Arm, dir: &Path) -> anyhow::Result<Result<Run, i32>> {
        let args = self.args;
        let exe = std::env::current_exe().context("finding montrace's own binary")?;
        let command = match arm {
            Arm::Baseline => &args.baseline,
            Arm::Candidate => &args.candidate,
        };
        let where_ = dir.strip_prefix(&self.out).unwrap_or(dir).to_path_buf();
        let _ = writeln!(
            self.log,
            "==> {} ({}): {command}",
            where_.display(),
            self.dirs[arm as usize]
                .as_ref()
                .map_or_else(|| ".".to_string(), |d| d.display().to_string())
        );
        let mut cmd = Command::new(exe);
        cmd.arg("run")
            .arg("--out")
            .arg(dir)
            .args(["--no-report", "-q"])
            .env("MONTRACE_BENCH_SIDE", arm.name())
            .stdin(Stdio::null());
        if let Some(dir) = &self.dirs[arm as usize] {
            cmd.current_dir(dir);
        }
        if args.show_output {
            // stdout is the verdict's: the commands' output goes to stderr.
            let stderr = std::io::stderr();
            let fd = std::os::fd::AsFd::as_fd(&stderr)
                .try_clone_to_owned()
                .context("duplicating stderr")?;
            cmd.stdout(fd);
        } else {
            cmd.stdout(self.log.try_clone().context("duplicating the log")?)
                .stderr(self.log.try_clone().context("duplicating the log")?);
        }
        if let Some(prepare) = &args.prepare {
            cmd.arg("--prepare").arg(prepare);
        }
        if let Some(cleanup) = &args.cleanup {
            cmd.arg("--cleanup").arg(cleanup);
        }
        cmd.args(["--", "/bin/sh", "-c", command]);
        let status = cmd.status().context("starting montrace run")?;
        let code = status.code().unwrap_or(EXIT_MONTRACE_FAILED);
        let summary =
            userfs::as_user(|| {
                Ok(summary_json::read(&dir.join(summary_json::SUMMARY_FILE))
                    .map_err(|e| e.to_string()))
            })
            .unwrap_or_else(|e| Err(e.to_string()));
        let failure = failure_of(arm, code, &summary);
        if let Some((exit, why)) = failure {
            crate::say!(
                "montrace bench: {}: {why}: no further runs, no verdict",
                where_.display()
            );
            if !args.show_output {
                self.show_log_tail();
            }
            return Ok(Err(exit));
        }
        let summary = summary.expect("checked above");
        let run_queue_share = run_json::read(dir)
            .ok()
            .and_then(|info| info.time)
            .and_then(|t| Interference::run_queue_share_of(t.avg_parallelism, t.avg_cores_used));
        let interference = Interference {
            other_cpu_share: summary.repetitions.first().and_then(|r| r.other_cpu_share),
            run_queue_share,
        };
        let metric = |name: &str| summary.values(name).first().copied();
        let share = |v: Option<f64>| v.map_or("-".into(), |v| format!("{:.0}%", v * 100.0));
        self.runs_done += 1;
        let progress = if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
            let planned = 2 * (args.warmup + args.repeat) as usize;
            plan::progress_bar(self.runs_done, planned, self.started.elapsed())
        } else {
            String::new()
        };
        crate::say!(
            "montrace bench: {}: wall {:.3}s, CPU {:.3}s, peak RSS {}; other work {}, run-queue \
             wait {}{progress}",
            where_.display(),
            metric("wall_s").unwrap_or(f64::NAN),
            metric("cpu_s").unwrap_or(f64::NAN),
            metric("peak_rss_bytes").map_or("n/a".into(), |b| crate::units::format_bytes(b as u64)),
            share(interference.other_cpu_share),
            share(interference.run_queue_share),
        );
        Ok(Ok(Run {
            summary,
            interference,
        }))
    }

    /// The log's last lines on stderr: what the failing command or hook said.
    fn show_log_tail(&self) {
        let path = self.out.join(LOG_FILE);
        let Ok(bytes) = userfs::as_user(|| userfs::read(&path)) else {
            return;
        };
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
        crate::say!(
            "montrace bench: the last {} lines of {}:\n{}",
            tail.len(),
            path.display(),
            tail.join("\n")
        );
    }
}

/// Why a run ends the series, with the exit status it ends with: from montrace run's exit `code`
/// and the summary it left (its first repetition's exit status; none when the hook before it
/// failed). None when the run counts.
fn failure_of(
    arm: Arm,
    code: i32,
    summary: &Result<summary_json::Summary, String>,
) -> Option<(i32, String)> {
    let rep_status = summary
        .as_ref()
        .ok()
        .map(|s| s.repetitions.first().map(|r| r.exit_status));
    match (code, rep_status) {
        (0, Some(Some(0))) => None,
        // No repetition: the --prepare hook failed before the command.
        (_, Some(None)) => Some((
            EXIT_BENCH_HOOK_FAILED,
            format!("its --prepare hook failed (exit {code})"),
        )),
        (_, Some(Some(status))) if status != 0 => Some((
            EXIT_BENCH_COMMAND_FAILED,
            format!("the {} command failed (exit {status})", arm.name()),
        )),
        // The command succeeded, montrace run did not: the --cleanup hook failed.
        (_, Some(Some(_))) => Some((
            EXIT_BENCH_HOOK_FAILED,
            format!("its --cleanup hook failed (exit {code})"),
        )),
        (_, None) => Some((
            EXIT_MONTRACE_FAILED,
            format!(
                "montrace run failed (exit {code}), no summary: {}",
                summary.as_ref().err().map_or("", String::as_str)
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmark_name_leaves_out_what_differs_between_the_sides() {
        assert_eq!(common_name("make -j2", "make -j2"), "make -j2");
        assert_eq!(
            common_name("make -C ../baseline -j2", "make -C ../candidate -j2"),
            "make -C * -j2"
        );
        assert_eq!(
            common_name("make -C /tmp/x/a", "make -C /tmp/y/b"),
            "make -C *"
        );
        assert_eq!(common_name("a b", "a b c"), "a b vs a b c");
    }
}
