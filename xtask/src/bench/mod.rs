//! `cargo xtask bench [--quick]`: the benchmark suite of issue 8. It measures, on this machine
//! and side by side in one run, what montrace records against what the kernel counted
//! (completeness, CPU, peaks), what it costs the command (overhead) and itself (CPU, memory),
//! how fast it goes (events and rows per second, start-up), next to psrecord; then writes
//! `BENCHMARKS.md` and `bench/results.json`.
//!
//! `--only GROUP,...` measures some groups; with `--update` their sections replace those of
//! bench/results.json (the others kept as they were, each with the date and revision it was
//! measured at: `Results::merge`), and BENCHMARKS.md is written again from the merged results.
//!
//! Layout: `tools` (the helpers in bench/workloads/, ways to run and read runs), one module per
//! group of sections (`tree`: 1, 2, 7; `overhead`: 3; `agent`: 4, 5, 6; `gate`: 9 and 9b;
//! `fleet`: 10; `resident`: 13, the resident agent of issue 33; `slurm`: 14, the cost per job of
//! issue 34, measured by a test of tests/tests/slurm.rs on its real cluster), `stats` (medians,
//! ratios) and `report` (the results model, JSON and Markdown, and the merge of `--update`).

mod agent;
mod fleet;
mod gate;
mod overhead;
mod report;
mod resident;
mod slurm;
mod stats;
mod tools;
mod tree;

use crate::util;
use anyhow::{Context, Result};
use report::{Figure, Load, Machine, Results, Section, Update};
use std::path::PathBuf;
use std::process::Command;
use std::time::Instant;

#[derive(clap::Args, Debug)]
pub struct BenchArgs {
    /// Smaller sizes and fewer runs (under 8 minutes; the full suite takes about 20, 26 at most)
    #[arg(long)]
    pub quick: bool,
    /// Only these groups of sections; their results go to target/bench/ and stdout, and
    /// BENCHMARKS.md and bench/results.json are left alone (but see --update)
    #[arg(long, value_enum, value_delimiter = ',', value_name = "GROUP,...")]
    pub only: Vec<Group>,
    /// With --only: replace those groups' sections in bench/results.json (adding them where
    /// absent) and rewrite BENCHMARKS.md from it, keeping every other section as it was
    #[arg(long, requires = "only", conflicts_with = "quick")]
    pub update: bool,
    /// Measure this montrace binary instead of building target/release/montrace
    #[arg(long, value_name = "PATH")]
    pub montrace: Option<PathBuf>,
}

/// Groups of sections that are measured together.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    /// 1. completeness, 2. accuracy, 7. psrecord side by side
    Tree,
    /// 3. overhead (wall time, eBPF programs)
    Overhead,
    /// 4. agent cost, 5. throughput, 6. start-up
    Agent,
    /// 8. `montrace report` on a large synthetic run
    Report,
    /// 9. the CI gate's false-alarm and detection rates (`montrace bench`, A/A and A/B)
    Gate,
    /// 9b. the CI gate on a shared runner: a real C build beside a one-core hog
    SharedRunner,
    /// 10. a fleet's dataset: 1,000 published runs, DuckDB's CPU per host per day
    Fleet,
    /// 13. the resident agent beside the standalone mode: start-up and added wall
    Resident,
    /// 14. Slurm: the cost per job (agent CPU, added wall, bytes a run), real daemons
    Slurm,
}

impl Group {
    /// Every group, in the order a whole run measures them and BENCHMARKS.md shows them.
    pub const ALL: [Group; 9] = [
        Group::Tree,
        Group::Overhead,
        Group::Agent,
        Group::Report,
        Group::Gate,
        Group::SharedRunner,
        Group::Fleet,
        Group::Resident,
        Group::Slurm,
    ];

    /// The name `--only` takes, also each section's `group` in bench/results.json.
    pub fn name(self) -> &'static str {
        match self {
            Group::Tree => "tree",
            Group::Overhead => "overhead",
            Group::Agent => "agent",
            Group::Report => "report",
            Group::Gate => "gate",
            Group::SharedRunner => "shared-runner",
            Group::Fleet => "fleet",
            Group::Resident => "resident",
            Group::Slurm => "slurm",
        }
    }
}

/// Sizes and repetitions.
#[derive(Debug, Clone)]
pub struct Plan {
    pub quick: bool,
    /// Runs of each timed figure (A/B pairs, medians): at least 5.
    pub reps: usize,
    /// A/B pairs of the wall-time overhead, the noisiest figure.
    pub overhead_reps: usize,
    /// Runs of each completeness workload.
    pub tree_reps: usize,
    /// `/bin/true`s of the shell loop (completeness).
    pub loop_n: usize,
    pub xargs_n: usize,
    pub daemon_s: f64,
    /// CPU of each of the 4 burners, ms.
    pub burn_ms: u64,
    pub rss_mib: Vec<u64>,
    pub spike_mib: u64,
    /// `/bin/true`s of the shell loop whose overhead is timed.
    pub overhead_loop_n: usize,
    /// Processes of a C storm.
    pub storm_n: usize,
    pub sampler_procs: usize,
    /// How long the sampled processes live, s (at least 4: see `window`).
    pub sampler_s: f64,
    /// Process counts of the grid of section 4 (each at 1 Hz and 10 Hz, and under psrecord).
    pub grid_procs: Vec<usize>,
    /// Runs of each cell of the grid but the headline one (`sampler_procs` at 10 Hz: `reps`).
    pub grid_reps: usize,
}

impl Plan {
    pub fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                quick,
                reps: 5,
                overhead_reps: 5,
                tree_reps: 1,
                loop_n: 1000,
                xargs_n: 1000,
                daemon_s: 0.5,
                burn_ms: 250,
                rss_mib: vec![10, 100, 300],
                spike_mib: 300,
                overhead_loop_n: 1500,
                storm_n: 3000,
                sampler_procs: 200,
                sampler_s: 4.0,
                grid_procs: vec![50, 200, 1000],
                grid_reps: 1,
            }
        } else {
            Plan {
                quick,
                reps: 5,
                overhead_reps: 7,
                tree_reps: 3,
                loop_n: 5000,
                xargs_n: 3000,
                daemon_s: 1.0,
                burn_ms: 1000,
                rss_mib: vec![10, 100, 300],
                spike_mib: 300,
                overhead_loop_n: 1500,
                storm_n: 20000,
                sampler_procs: 200,
                sampler_s: 10.0,
                grid_procs: vec![50, 200, 1000],
                grid_reps: 3,
            }
        }
    }

    /// The steady-state window of a sampling run (`selfcost -w`): from 2 s after montrace's
    /// start (start-up done, and the shell loop has started even 1,000 `sleep`s, which takes
    /// about 1 s) to 1 s before the `sleep`s end (finish not begun). A whole number of seconds
    /// long, so that it holds the same number of 1 Hz sweeps wherever it falls.
    pub fn window(&self) -> tools::Window {
        tools::Window {
            start_ms: 2000,
            end_ms: (self.sampler_s.floor() as u64).saturating_sub(1).max(3) * 1000,
        }
    }
}

/// What every section measures with.
pub struct Ctx {
    pub tools: tools::Tools,
    pub plan: Plan,
    pub verbose: bool,
    start: Instant,
}

impl Ctx {
    /// One line of progress on stderr.
    pub fn progress(&self, what: &str) {
        eprintln!(
            "xtask: bench [{:>4.0} s] {what}",
            self.start.elapsed().as_secs_f64()
        );
    }
}

pub fn bench(verbose: bool, args: BenchArgs) -> Result<()> {
    let start = Instant::now();
    let date_utc = stdout_line(Command::new("date").args(["-u", "+%Y-%m-%d %H:%M UTC"]));
    let revision = revision();
    let tools = tools::Tools::prepare(verbose, args.montrace.clone())?;
    let nice = raise_priority();
    let ctx = Ctx {
        tools,
        plan: Plan::new(args.quick),
        verbose,
        start,
    };
    let root = util::workspace_root();
    // The results an update merges into, read first: a file it cannot read stops it before the
    // measurements, not after.
    let base = if args.update {
        Some(read_results(&root.join("bench/results.json"))?)
    } else {
        None
    };
    let groups: Vec<Group> = if args.only.is_empty() {
        Group::ALL.to_vec()
    } else {
        args.only.clone()
    };
    let mut sections = Vec::new();
    for group in &groups {
        sections.extend(measure(&ctx, *group)?);
    }
    measure_busy_overhead_again(&ctx, &groups, &mut sections)?;
    for s in &mut sections {
        s.date_utc = date_utc.clone();
        s.revision = revision.clone();
    }

    let mut command = "cargo xtask bench".to_string();
    if args.quick {
        command.push_str(" --quick");
    }
    if !args.only.is_empty() {
        let names: Vec<&str> = groups.iter().map(|g| g.name()).collect();
        command.push_str(&format!(" --only {}", names.join(",")));
    }
    if args.update {
        command.push_str(" --update");
    }
    let mut results = Results {
        command: command.clone(),
        quick: args.quick,
        date_utc: date_utc.clone(),
        revision: revision.clone(),
        machine: machine(),
        nice,
        duration_s: start.elapsed().as_secs_f64(),
        sections,
        updates: Vec::new(),
    };
    if let Some(base) = base {
        results.updates.push(Update {
            command,
            date_utc,
            revision,
            groups: groups.iter().map(|g| g.name().to_string()).collect(),
        });
        let order: Vec<&str> = Group::ALL.iter().map(|g| g.name()).collect();
        results = base.merge(results, &order);
    }
    let markdown = results.to_markdown() + &hand_kept_sections(root)?;
    let json = serde_json::to_string_pretty(&results.to_json())? + "\n";
    if args.only.is_empty() || args.update {
        std::fs::create_dir_all(root.join("bench"))?;
        std::fs::write(root.join("BENCHMARKS.md"), &markdown).context("writing BENCHMARKS.md")?;
        std::fs::write(root.join("bench/results.json"), &json)
            .context("writing bench/results.json")?;
        ctx.progress("wrote BENCHMARKS.md and bench/results.json");
    } else {
        let dir = ctx.tools.work.clone();
        std::fs::write(dir.join("BENCHMARKS.md"), &markdown)?;
        std::fs::write(dir.join("results.json"), &json)?;
        println!("{markdown}");
        ctx.progress(&format!(
            "wrote {0}/BENCHMARKS.md and {0}/results.json",
            dir.display()
        ));
    }
    for f in results.targets() {
        let t = f.target.as_ref().expect("targets have one");
        eprintln!(
            "  {:<8} {} = {} (target {})",
            if t.met { "met" } else { "MISSED" },
            f.label,
            f.display,
            t.text
        );
    }
    Ok(())
}

/// Timing figures taken while other work ran are noisy: measures the overhead group once more at
/// the end (full runs only, when it still ends within 26 minutes even if the second pass takes
/// twice as long as the first, as it does on a busy machine) and keeps the quieter of the two.
fn measure_busy_overhead_again(
    ctx: &Ctx,
    groups: &[Group],
    sections: &mut Vec<Section>,
) -> Result<()> {
    let start = ctx.start;
    let overhead_s = sections
        .iter()
        .find(|s| s.id == "overhead")
        .map_or(0.0, |s| s.elapsed_s);
    if !ctx.plan.quick
        && groups.contains(&Group::Overhead)
        && start.elapsed().as_secs_f64() + 2.0 * overhead_s < 26.0 * 60.0
    {
        let busy = |s: &[Section]| -> f64 {
            s.iter()
                .filter(|s| s.id == "overhead")
                .filter_map(|s| s.load)
                .map(|l| l.before[0].max(l.after[0]))
                .fold(0.0, f64::max)
        };
        let first = busy(sections);
        if first >= 1.0 {
            ctx.progress(&format!(
                "the machine was busy during the overhead runs (load {first:.2}): measuring them again"
            ));
            let again = measure(ctx, Group::Overhead)?;
            if busy(&again) < first {
                sections.retain(|s| s.group != Group::Overhead.name());
                let at = sections
                    .iter()
                    .position(|s| s.id == "agent")
                    .unwrap_or(sections.len());
                for (i, s) in again.into_iter().enumerate() {
                    sections.insert(at + i, s);
                }
            }
        }
    }
    Ok(())
}

/// The results of a whole run that `--update` merges into.
fn read_results(path: &std::path::Path) -> Result<Results> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading {} (--update merges into it)", path.display()))?;
    let json: serde_json::Value =
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
    let base = Results::from_json(&json).with_context(|| format!("reading {}", path.display()))?;
    anyhow::ensure!(
        !base.quick,
        "{} holds a --quick run: rerun the whole suite before updating groups of it",
        path.display()
    );
    Ok(base)
}

/// Measures one group, recording the load average around each of its sections.
fn measure(ctx: &Ctx, group: Group) -> Result<Vec<Section>> {
    let before = tools::loadavg();
    let start = Instant::now();
    let mut sections = match group {
        Group::Tree => tree::measure(ctx)?,
        Group::Overhead => overhead::measure(ctx)?,
        Group::Agent => agent::measure(ctx)?,
        Group::Report => vec![report_section(ctx)?],
        Group::Gate => gate::measure(ctx)?,
        Group::SharedRunner => vec![gate::shared_runner(ctx)?],
        Group::Fleet => fleet::measure(ctx)?,
        Group::Resident => resident::measure(ctx)?,
        Group::Slurm => slurm::measure(ctx)?,
    };
    let load = Load {
        before,
        after: tools::loadavg(),
    };
    let elapsed = start.elapsed().as_secs_f64();
    for s in &mut sections {
        s.group = group.name().to_string();
        s.load = Some(load);
        s.elapsed_s = elapsed;
    }
    Ok(sections)
}

/// Section 8: `montrace report` on a large synthetic run: 5,000 short processes and 10 minutes
/// of samples at 200 ms, written through montrace's own Parquet writer by
/// `monitor/examples/synthetic_run.rs`. Target (issue 5): under 5 s, into an HTML file under
/// 10 MB.
fn report_section(ctx: &Ctx) -> Result<Section> {
    ctx.progress("8. report: building the synthetic-run writer");
    util::check_quietly(
        util::cargo().args([
            "build",
            "--release",
            "-p",
            "monitor",
            "--features",
            "synthetic",
            "--example",
            "synthetic_run",
        ]),
        ctx.verbose,
    )
    .context("building monitor/examples/synthetic_run.rs failed")?;
    let writer = util::target_dir().join("release/examples/synthetic_run");
    let dir = ctx.tools.work.join("synthetic-5000-10min");
    let _ = std::fs::remove_dir_all(&dir);
    ctx.progress("8. report: writing a synthetic run of 5,000 processes over 10 minutes");
    let status = Command::new(&writer)
        .arg(&dir)
        .args(["5000", "600", "200"])
        .status()?;
    anyhow::ensure!(status.success(), "{} failed", writer.display());
    let mut times = Vec::new();
    for _ in 0..ctx.plan.reps {
        let start = Instant::now();
        let status = Command::new(&ctx.tools.montrace)
            .arg("report")
            .arg(&dir)
            .args(["--format", "html"])
            .stdout(std::process::Stdio::null())
            .status()?;
        anyhow::ensure!(status.success(), "montrace report failed");
        times.push(start.elapsed().as_secs_f64());
    }
    let seconds = stats::median(&times).unwrap_or(f64::NAN);
    let size = std::fs::metadata(dir.join("report.html"))?.len() as f64;
    let mib = size / (1 << 20) as f64;
    let met = seconds < 5.0 && size < (10 << 20) as f64;
    Ok(Section {
        id: "report".into(),
        title: "8. `montrace report` on a large run".into(),
        method: format!(
            "`montrace report RUN --format html` on a synthetic run of 5,000 short processes and 10 \
             minutes of samples at 200 ms, written through montrace's own Parquet writer by \
             `cargo run --release -p monitor --features synthetic --example synthetic_run -- \
             DIR 5000 600 200`; median of {} runs, loading the Parquet files included.",
            times.len()
        ),
        columns: vec!["figure".into(), "value".into(), "target".into(), "".into()],
        rows: vec![
            vec![
                "render time (median)".into(),
                format!("{seconds:.3} s"),
                "< 5 s".into(),
                if seconds < 5.0 { "met".into() } else { "**missed**".into() },
            ],
            vec![
                "report.html size".into(),
                format!("{mib:.2} MiB"),
                "< 10 MB".into(),
                if size < (10 << 20) as f64 { "met".into() } else { "**missed**".into() },
            ],
        ],
        figures: vec![Figure::new(
            "report.synthetic_5000_10min_s",
            "`montrace report`, 5,000 processes / 10 min at 200 ms",
            "s",
            Some(seconds),
            format!("{seconds:.3} s, {mib:.2} MiB"),
        )
        .runs(times)
        .target("< 5 s and < 10 MB", met)],
        ..Section::default()
    })
}

/// Nice value for the benchmark (and so for montrace and every workload, which inherit it):
/// the CPU share other work on the machine takes from the measurements shrinks to about a
/// tenth. `None` when it could not be set.
const NICE: i32 = -10;

fn raise_priority() -> Option<i32> {
    let pid = std::process::id().to_string();
    let ok = Command::new("renice")
        .args(["-n", &NICE.to_string(), "-p", &pid])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    ok.then_some(NICE)
}

fn stdout_line(cmd: &mut Command) -> String {
    util::stdout_of(cmd)
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|| "unknown".into())
}

/// `abc1234`, with `-dirty` when the working tree has uncommitted changes.
fn revision() -> String {
    let root = util::workspace_root();
    let head =
        stdout_line(
            Command::new("git")
                .arg("-C")
                .arg(root)
                .args(["rev-parse", "--short", "HEAD"]),
        );
    let dirty = util::stdout_of(
        Command::new("git")
            .arg("-C")
            .arg(root)
            .args(["status", "--porcelain"]),
    )
    .is_some_and(|s| !s.trim().is_empty());
    if dirty {
        format!("{head}-dirty")
    } else {
        head
    }
}

fn machine() -> Machine {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let cpu_model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_else(|| "unknown CPU".into());
    let os = std::fs::read_to_string("/etc/os-release")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into());
    let mem_kib: f64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Machine {
        cpu_model,
        cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_default(),
        os,
        mem_gib: mem_kib / (1024.0 * 1024.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_take_at_least_five_runs_of_each_timing() {
        for quick in [true, false] {
            let p = Plan::new(quick);
            assert!(p.reps >= 5);
            assert!(p.overhead_reps >= 5);
            assert_eq!(p.sampler_procs, 200);
        }
        assert!(Plan::new(true).loop_n < Plan::new(false).loop_n);
        assert_eq!(Plan::new(false).loop_n, 5000);
    }

    #[test]
    fn the_grid_holds_the_headline_and_its_window_fits_the_run() {
        for quick in [true, false] {
            let p = Plan::new(quick);
            assert!(p.grid_procs.contains(&p.sampler_procs));
            assert!(p.grid_reps >= 1 && p.grid_reps <= p.reps);
            let w = p.window();
            assert_eq!(w.start_ms, 2000);
            assert!(w.end_ms > w.start_ms);
            assert!(w.end_ms as f64 <= (p.sampler_s - 1.0) * 1000.0);
            assert_eq!((w.end_ms - w.start_ms) % 1000, 0);
        }
        assert_eq!(Plan::new(false).window().end_ms, 9000);
    }
}

/// BENCHMARKS.md's sections that the suite cannot measure on this machine and must not drop, in
/// their order after the measured ones, each kept by hand in a file of its own: the kernels (the
/// kernel tier's VM) and the GPU (`cargo xtask gpu-check` on a machine with a GPU fills it).
pub const HAND_KEPT: [&str; 2] = [KERNELS_SECTION, GPU_SECTION];

/// Where BENCHMARKS.md's kernels section lives, from the workspace root.
pub const KERNELS_SECTION: &str = "bench/kernels.md";
/// Where BENCHMARKS.md's GPU section lives, from the workspace root.
pub const GPU_SECTION: &str = "bench/gpu-check.md";

/// The text of the [`HAND_KEPT`] sections, each after a blank line, as BENCHMARKS.md ends.
pub fn hand_kept_sections(root: &std::path::Path) -> Result<String> {
    let mut out = String::new();
    for file in HAND_KEPT {
        let path = root.join(file);
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        out += &format!("\n{}\n", text.trim_end());
    }
    Ok(out)
}

#[cfg(test)]
mod hand_kept_tests {
    /// BENCHMARKS.md ends with the hand-kept sections (kernels, then GPU), as the suite writes
    /// them: a bench run keeps both.
    #[test]
    fn benchmarks_md_carries_the_kernels_and_gpu_sections() {
        let root = crate::util::workspace_root();
        let benchmarks = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
        let sections = super::hand_kept_sections(root).unwrap();
        let kernels = sections
            .find("\n## 11. Kernels")
            .expect("the kernels section");
        let gpu = sections
            .find("cargo xtask gpu-check")
            .expect("the GPU section");
        assert!(kernels < gpu, "the kernels section comes before the GPU's");
        assert!(
            benchmarks.ends_with(&sections),
            "BENCHMARKS.md does not end with {} (each after a blank line)",
            super::HAND_KEPT.join(" and ")
        );
    }

    /// BENCHMARKS.md is what bench/results.json renders to: one source for both, and an
    /// `--update` can rewrite BENCHMARKS.md from the JSON without losing a kept section's text.
    /// On a difference, the rendering is left in target/bench/ to compare.
    #[test]
    fn benchmarks_md_is_bench_results_json_rendered() {
        let root = crate::util::workspace_root();
        let results = super::read_results(&root.join("bench/results.json")).unwrap();
        let rendered = results.to_markdown() + &super::hand_kept_sections(root).unwrap();
        let benchmarks = std::fs::read_to_string(root.join("BENCHMARKS.md")).unwrap();
        if rendered != benchmarks {
            let dir = crate::util::target_dir().join("bench");
            std::fs::create_dir_all(&dir).unwrap();
            let path = dir.join("BENCHMARKS.rendered.md");
            std::fs::write(&path, &rendered).unwrap();
            panic!(
                "BENCHMARKS.md is not bench/results.json rendered: compare it with {}",
                path.display()
            );
        }
    }
}
