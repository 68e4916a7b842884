//! Section 9: the CI gate's error rates, measured. `montrace bench` (interleaved A B B A, 5
//! repetitions a side after a warm-up) compares identical workloads (A/A: how often identical
//! code fails the gate) and workloads that differ by a known amount (A/B: how often a real
//! change is caught), with a CPU hog pinned to CPU 0 during every other comparison.
use super::{report::Figure, report::Section, tools, Ctx};
use anyhow::{Context, Result};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};

/// One experiment: what both sides run, and what a correct gate says.
struct Experiment {
    key: &'static str,
    label: &'static str,
    baseline: String,
    candidate: String,
    prepare: Option<String>,
    /// A/A: the gate should pass; A/B: it should fail, on `metric`.
    expect_regression: Option<&'static str>,
}

/// A CPU hog on CPU 0 (a noisy neighbour), killed on drop.
struct Neighbour(Child);

impl Neighbour {
    fn start(ctx: &Ctx) -> Result<Neighbour> {
        let mut cmd = Command::new(ctx.tools.helper("burn"));
        cmd.arg("100000000").stdin(Stdio::null());
        // SAFETY: sched_setaffinity on the child itself, between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                let mut set: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(0, &mut set);
                libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set);
                Ok(())
            });
        }
        Ok(Neighbour(cmd.spawn().context("starting the CPU hog")?))
    }
}

impl Drop for Neighbour {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The outcome of one `montrace bench`: its exit status and the metrics it called regressed.
fn compare_once(ctx: &Ctx, e: &Experiment, i: usize) -> Result<(i32, Vec<String>)> {
    let out = ctx.tools.fresh(&format!("gate-{}-{i}", e.key));
    let mut cmd = Command::new(&ctx.tools.montrace);
    cmd.args([
        "bench",
        "--repeat",
        "5",
        "--max-runs",
        "20",
        "--warmup",
        "1",
        "--format",
        "json",
        "--out",
    ])
    .arg(&out)
    .args(["-a", &e.baseline, "-b", &e.candidate])
    .stdin(Stdio::null())
    .stderr(Stdio::null());
    if let Some(prepare) = &e.prepare {
        cmd.args(["--prepare", prepare]);
    }
    let output = cmd.output().context("running montrace bench")?;
    let code = output.status.code().unwrap_or(-1);
    // Pass, regressed, or inconclusive (the budget ended first).
    anyhow::ensure!(
        matches!(code, 0 | 1 | 3),
        "montrace bench for {} failed with {code}",
        e.label
    );
    let json: serde_json::Value = serde_json::from_slice(&output.stdout)
        .with_context(|| format!("montrace bench for {} printed no JSON", e.label))?;
    let regressed = json["metrics"]
        .as_array()
        .map(|m| {
            m.iter()
                .filter(|m| m["verdict"] == "regressed")
                .filter_map(|m| m["metric"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    Ok((code, regressed))
}

/// The gate's experiments: A/A on a build and on CPU burners, A/B with 10% more CPU and with
/// 20% more peak memory.
fn experiments(ctx: &Ctx) -> [Experiment; 4] {
    let burn = ctx.tools.helper("burn");
    let mem = ctx.tools.helper("mem");
    let build = ctx.tools.make_build().join(" ");
    let clean = format!("{} >/dev/null", ctx.tools.make_clean().join(" "));
    // Two burners side by side: the candidate's second one burns 10% of the first's CPU, on the
    // other core, so CPU grows by 10% and wall time stays.
    let pair = |extra: u32| format!("{burn} {extra} & {burn} 200; wait");
    let hold = |mib: u32| format!("{mem} {mib} 0 200 0 /dev/null");
    [
        Experiment {
            key: "aa_build",
            label: "A/A: a small C build (`make clean` before each run)",
            baseline: build.clone(),
            candidate: build.clone(),
            prepare: Some(clean),
            expect_regression: None,
        },
        Experiment {
            key: "aa_burn",
            label: "A/A: a CPU burner (200 ms)",
            baseline: pair(0),
            candidate: pair(0),
            prepare: None,
            expect_regression: None,
        },
        Experiment {
            key: "ab_cpu",
            label: "A/B: +10% CPU, same wall time",
            baseline: pair(0),
            candidate: pair(20),
            prepare: None,
            expect_regression: Some("cpu_s"),
        },
        Experiment {
            key: "ab_mem",
            label: "A/B: +20% peak memory (50 → 60 MiB)",
            baseline: hold(50),
            candidate: hold(60),
            prepare: None,
            expect_regression: Some("peak_rss_bytes"),
        },
    ]
}

pub fn measure(ctx: &Ctx) -> Result<Vec<Section>> {
    let n = if ctx.plan.quick { 10 } else { 20 };
    let experiments = experiments(ctx);
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    let mut aa_fails = 0;
    let mut aa_total = 0;
    for e in &experiments {
        // The A/A comparisons are split between the two workloads.
        let count = if e.expect_regression.is_none() {
            n / 2
        } else {
            n
        };
        let mut hits = 0;
        let mut inconclusive = 0;
        let mut seen = Vec::new();
        for i in 0..count {
            ctx.progress(&format!("9. gate: {} ({}/{count})", e.label, i + 1));
            let _neighbour = if i % 2 == 1 {
                Some(Neighbour::start(ctx)?)
            } else {
                None
            };
            let (code, regressed) = compare_once(ctx, e, i)?;
            let hit = match e.expect_regression {
                None => code == 1,
                Some(metric) => regressed.iter().any(|m| m == metric),
            };
            hits += usize::from(hit);
            inconclusive += usize::from(code == 3);
            if code == 1 {
                seen.extend(regressed);
            }
        }
        seen.sort();
        seen.dedup();
        rows.push(vec![
            e.label.to_string(),
            match e.expect_regression {
                None => format!("{hits} of {count} failed, {inconclusive} inconclusive"),
                Some(metric) => {
                    format!("{hits} of {count} caught (`{metric}`), {inconclusive} inconclusive")
                }
            },
            if seen.is_empty() {
                "-".into()
            } else {
                seen.join(", ")
            },
        ]);
        match e.expect_regression {
            None => {
                aa_fails += hits;
                aa_total += count;
            }
            Some(metric) => {
                let want = if e.key == "ab_mem" {
                    count
                } else {
                    count - count / 20
                };
                figures.push(
                    Figure::new(
                        &format!("gate.{}_caught", e.key),
                        e.label,
                        "",
                        Some(hits as f64 / count as f64),
                        format!("{hits} of {count} (`{metric}`)"),
                    )
                    .target(&format!("≥ {want} of {count}"), hits >= want),
                );
            }
        }
    }
    let allowed = aa_total / 20;
    figures.insert(
        0,
        Figure::new(
            "gate.aa_false_alarms",
            "A/A: identical code failing the gate",
            "",
            Some(aa_fails as f64 / aa_total as f64),
            format!("{aa_fails} of {aa_total}"),
        )
        .target(&format!("≤ {allowed} of {aa_total}"), aa_fails <= allowed),
    );
    // 9b is a group of its own (`--only shared-runner`): a whole run measures it once.
    Ok(vec![Section {
        id: "gate".into(),
        title: "9. CI gate error rates".into(),
        method: format!(
            "`montrace bench --repeat 5 --max-runs 20 --warmup 1` (pairs A B, B A ..., added until \
             decided, default limits and confidence) \
             {n} times per A/B experiment and {n} times A/A (half a small C build of {} files \
             with `--prepare 'make clean'`, half a pair of CPU burners), with a CPU hog pinned \
             to CPU 0 during every other comparison. A/A counts comparisons that exited 1; A/B \
             counts those that flagged the metric that changed.",
            tools::MAKE_FILES
        ),
        columns: vec![
            "experiment".into(),
            "outcome".into(),
            "metrics flagged".into(),
        ],
        rows,
        figures,
        notes: vec![
            "CPU time on this 2-vCPU VM moves by several percent between identical runs (no \
             hardware counters; SMT siblings and frequency belong to the host), so the burners \
             spin until they have used a given CPU time: the A/B CPU experiment tests the gate, \
             not the VM's clock."
                .into(),
        ],
        ..Section::default()
    }])
}

/// One shared-runner experiment: the candidate's project has `candidate_extra` unused inline
/// functions in the header every file includes, the baseline's none
/// ([`tools::make_project_with_extra`]): more compiler CPU, and nothing else that the gate
/// measures changes (processes, bytes written).
struct SharedExperiment {
    key: &'static str,
    label: &'static str,
    candidate_extra: usize,
    /// The least number caught (A/B) or the most failed (A/A) out of 20, from the issue.
    target_of_20: usize,
}

/// The projects' size in the shared-runner section. Adding files instead (66 and 63 for +10 %
/// and +5 %) changed the process count too, which the gate caught exactly after the first five
/// pairs and stopped on (20 of 20 regressed, `cpu_s` flagged in 13 and 1): that measured the
/// process count, not the CPU.
const SHARED_BASE_FILES: usize = 60;
/// Unused inline functions for about +10 % and +5 % of the build's CPU (the table shows the
/// change the gate measured).
const SHARED_EXTRA_10: usize = 55;
const SHARED_EXTRA_5: usize = 28;

/// What one gate of the shared-runner section gave.
struct Gate {
    code: i32,
    regressed: Vec<String>,
    pairs: usize,
    wall_s: f64,
    cpu_change: Option<f64>,
}

fn gate_beside_hog(ctx: &Ctx, key: &str, i: usize, base: &Path, cand: &Path) -> Result<Gate> {
    let out = ctx.tools.fresh(&format!("shared-{key}-{i}"));
    let started = std::time::Instant::now();
    let output = Command::new(&ctx.tools.montrace)
        .args([
            "bench",
            "--repeat",
            "5",
            "--max-runs",
            "20",
            "--max-time",
            "5m",
            "--warmup",
            "1",
            "--format",
            "json",
            "--prepare",
            "make -s clean",
            "-a",
            "make -s -j2",
            "-b",
            "make -s -j2",
            "--out",
        ])
        .arg(&out)
        .arg("--baseline-dir")
        .arg(base)
        .arg("--candidate-dir")
        .arg(cand)
        .stdin(Stdio::null())
        .stderr(Stdio::null())
        .output()
        .context("running montrace bench")?;
    let wall_s = started.elapsed().as_secs_f64();
    let code = output.status.code().unwrap_or(-1);
    anyhow::ensure!(
        matches!(code, 0 | 1 | 3),
        "montrace bench ({key}) failed with {code}"
    );
    let json: serde_json::Value =
        serde_json::from_slice(&output.stdout).context("montrace bench printed no JSON")?;
    let metrics = json["metrics"].as_array().cloned().unwrap_or_default();
    Ok(Gate {
        code,
        regressed: metrics
            .iter()
            .filter(|m| m["verdict"] == "regressed")
            .filter_map(|m| m["metric"].as_str().map(String::from))
            .collect(),
        pairs: json["series"]["pairs"].as_array().map_or(0, Vec::len),
        wall_s,
        cpu_change: metrics
            .iter()
            .find(|m| m["metric"] == "cpu_s")
            .and_then(|m| m["change"].as_f64()),
    })
}

/// Section 9b: the gate on a shared runner. Every comparison runs beside a one-core CPU hog, on
/// a real C build (`make -j2` of a generated project, `make clean` before each run, each side
/// in its own checkout): identical code (A/A), +10 % and +5 % compiler work (A/B). The issue's
/// targets: 0 false REGRESSED in 20, +10 % caught ≥ 19 of 20 and never passed, +5 % caught ≥ 15
/// of 20.
pub fn shared_runner(ctx: &Ctx) -> Result<Section> {
    let n = if ctx.plan.quick { 6 } else { 20 };
    let root = ctx.tools.work.join("shared-runner");
    // Projects of an earlier run would keep files this one does not write (the Makefile
    // builds every `*.c`).
    let _ = std::fs::remove_dir_all(&root);
    let base = root.join("baseline");
    tools::make_project_with_extra(&base, SHARED_BASE_FILES, 0)?;
    let experiments = [
        SharedExperiment {
            key: "aa",
            label: "A/A: identical builds",
            candidate_extra: 0,
            target_of_20: 0,
        },
        SharedExperiment {
            key: "cpu10",
            label: "A/B: +10% compiler work",
            candidate_extra: SHARED_EXTRA_10,
            target_of_20: 19,
        },
        SharedExperiment {
            key: "cpu5",
            label: "A/B: +5% compiler work",
            candidate_extra: SHARED_EXTRA_5,
            target_of_20: 15,
        },
    ];
    let mut rows = Vec::new();
    let mut figures = Vec::new();
    for e in &experiments {
        let cand = root.join(e.key);
        tools::make_project_with_extra(&cand, SHARED_BASE_FILES, e.candidate_extra)?;
        let _neighbour = Neighbour::start(ctx)?;
        let mut gates = Vec::new();
        for i in 0..n {
            ctx.progress(&format!("9b. shared runner: {} ({}/{n})", e.label, i + 1));
            gates.push(gate_beside_hog(ctx, e.key, i, &base, &cand)?);
        }
        let count = |f: &dyn Fn(&Gate) -> bool| gates.iter().filter(|g| f(g)).count();
        let regressed = count(&|g| g.code == 1);
        let caught = count(&|g| g.regressed.iter().any(|m| m == "cpu_s"));
        let inconclusive = count(&|g| g.code == 3);
        let passed = count(&|g| g.code == 0);
        let pairs: Vec<f64> = gates.iter().map(|g| g.pairs as f64).collect();
        let walls: Vec<f64> = gates.iter().map(|g| g.wall_s).collect();
        let changes: Vec<f64> = gates.iter().filter_map(|g| g.cpu_change).collect();
        let median = |v: &[f64]| super::stats::median(v).unwrap_or(f64::NAN);
        let max_pairs = pairs.iter().copied().fold(0.0, f64::max);
        rows.push(vec![
            e.label.to_string(),
            format!("{regressed} regressed ({caught} on `cpu_s`), {inconclusive} inconclusive, {passed} passed"),
            format!("{:.0} (max {max_pairs:.0})", median(&pairs)),
            format!("{:.0} s", median(&walls)),
            format!("{:+.1}%", 100.0 * median(&changes)),
        ]);
        // Scaled to this run's count (the targets are out of 20).
        let (hits, met, target) = if e.key == "aa" {
            (regressed, regressed == 0, format!("0 of {n}"))
        } else {
            let want = (e.target_of_20 * n).div_ceil(20);
            let never_pass = e.key != "cpu10" || passed == 0;
            (
                caught,
                caught >= want && never_pass,
                if e.key == "cpu10" {
                    format!("≥ {want} of {n}, none passed")
                } else {
                    format!("≥ {want} of {n}")
                },
            )
        };
        figures.push(
            Figure::new(
                &format!("gate.shared_{}", e.key),
                e.label,
                "",
                Some(hits as f64 / n as f64),
                format!("{hits} of {n}"),
            )
            .target(&target, met),
        );
    }
    Ok(Section {
        id: "gate_shared".into(),
        title: "9b. CI gate on a shared runner".into(),
        method: format!(
            "Every comparison beside a CPU hog pinned to CPU 0 (one of the two cores): `montrace \
             bench --repeat 5 --max-runs 20 --max-time 5m --warmup 1 --prepare 'make -s clean' \
             -a 'make -s -j2' -b 'make -s -j2' --baseline-dir B --candidate-dir C`, {n} times per \
             experiment, on a generated C project of {SHARED_BASE_FILES} files, each including \
             a header: empty in the baseline, with {SHARED_EXTRA_10} (+10 %) or {SHARED_EXTRA_5} \
             (+5 %) unused inline functions in the candidate (more compiler CPU; the same \
             objects, processes and bytes written); A/A compares two copies of the baseline. \
             Pairs: A B, B A ..., added until every gated metric is decided or the budget ends. \
             The change column is the gate's own paired estimate of `cpu_s`."
        ),
        columns: vec![
            "experiment".into(),
            "outcome".into(),
            "pairs used (median)".into(),
            "wall per gate (median)".into(),
            "cpu_s change (median)".into(),
        ],
        rows,
        figures,
        ..Section::default()
    })
}
