//! Section 3: what montrace costs the command it watches. Wall time with ÷ without montrace
//! (A/B alternating), and the kernel-side time of the eBPF programs from the kernel's own
//! run-time statistics of BPF programs.

use super::report::{met_word, Figure, Section};
use super::stats::{median, min_max, pair_ratios, percent, ratio as ratio_of, sig, times};
use super::tools::{self, lost_events, read_json};
use super::Ctx;
use anyhow::{Context, Result};
use serde_json::Value;
use std::collections::BTreeMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

struct Timed {
    key: &'static str,
    label: String,
    cmd: Vec<String>,
    before: Option<Vec<String>>,
    target: f64,
    /// For the whole `montrace run` (start-up and finish included), where one is set.
    end_to_end_target: Option<f64>,
}

/// Wall times of one A/B pair: the command's own (measured by `nscount`) and end to end
/// (the whole `montrace run`, start-up and finish included, measured here).
#[derive(Default)]
struct Pairs {
    bare: Vec<f64>,
    traced: Vec<f64>,
    bare_e2e: Vec<f64>,
    traced_e2e: Vec<f64>,
    /// CPU: the tree's without montrace; the tree's plus montrace's own with it.
    bare_cpu: Vec<f64>,
    traced_cpu: Vec<f64>,
    /// The two parts of `traced_cpu`.
    traced_tree_cpu: Vec<f64>,
    agent_cpu: Vec<f64>,
    lost: f64,
}

pub fn measure(ctx: &Ctx) -> Result<Vec<Section>> {
    let p = &ctx.plan;
    let workloads = [
        Timed {
            key: "fork_storm",
            label: format!(
                "fork storm: {} × `/bin/true` from a shell loop",
                p.overhead_loop_n
            ),
            cmd: vec![
                "sh".into(),
                "-c".into(),
                format!("for i in $(seq {}); do /bin/true; done", p.overhead_loop_n),
            ],
            before: None,
            target: 1.05,
            end_to_end_target: None,
        },
        Timed {
            key: "build",
            label: format!(
                "build: `make -j2` of {} C files, {} functions each, `-O2`",
                tools::BUILD_FILES + 1,
                tools::BUILD_FUNCTIONS
            ),
            cmd: ctx.tools.big_build(),
            before: Some(ctx.tools.big_clean()),
            target: 1.01,
            end_to_end_target: Some(1.03),
        },
    ];
    let mut results = Vec::new();
    for w in &workloads {
        results.push(ab(ctx, w)?);
    }
    let mut s = Section {
        id: "overhead".into(),
        title: "3. Overhead: wall time with ÷ without montrace".into(),
        method: format!(
            "Each workload runs {} times without and {} times with montrace (default settings: \
             200 ms sampling, full memory detail, `--no-report`), alternating A B, B A, ... after \
             one unmeasured warm-up of each; a `make` build starts from `make clean` every time. \
             The sizes make the performance issue's 1 s fork storm and 2 s build on the 2-core \
             machine they were chosen on (the without column shows what they took in this run); \
             the build is a larger generated project than the {} small files that sections 1, \
             2, 9 and 10 build. The workload's wall time is taken by `nscount` around the \
             command itself (the same helper in both arms); the ratio is the median of the {} \
             pairs' ratios. The end-to-end column also counts montrace's start-up (loading the \
             eBPF programs) and finish (closing the Parquet files), a fixed cost per run (section 6). The CPU ratio \
             does not depend on what else runs on the machine: the tree's CPU (kernel figures, \
             `getrusage`) plus montrace's own (`selfcost -n`, which only waits), over the tree's \
             CPU without montrace, median of the pairs. Best of each: the fastest run with \
             montrace over the fastest without, the runs least disturbed by other work.",
            p.overhead_reps,
            p.overhead_reps,
            tools::MAKE_FILES + 1,
            p.overhead_reps
        ),
        columns: vec![
            "workload".into(),
            "without (median)".into(),
            "with (median)".into(),
            "ratio (median of pairs)".into(),
            "pair ratios, min–max".into(),
            "best of each".into(),
            "end to end".into(),
            "CPU ratio".into(),
            "target".into(),
            "".into(),
        ],
        ..Section::default()
    };
    let mut cpu_notes = Vec::new();
    for (w, r) in workloads.iter().zip(&results) {
        cpu_notes.push(workload_rows(&mut s, w, r));
    }
    if s.figures
        .iter()
        .any(|f| f.target.as_ref().is_some_and(|t| !t.met))
    {
        s.notes.push(format!(
            "{OVERHEAD_NOTE} Here (medians of the pairs): {}.",
            cpu_notes.join("; ")
        ));
    }
    let ebpf = ebpf_cost(ctx)?;
    Ok(vec![s, ebpf])
}

/// A workload's row and figures; its note on where the CPU went, for when a target is missed.
fn workload_rows(s: &mut Section, w: &Timed, r: &Pairs) -> String {
    let ratios = pair_ratios(&r.traced, &r.bare);
    let ratio = median(&ratios);
    let best = match (min_max(&r.traced), min_max(&r.bare)) {
        (Some((with, _)), Some((without, _))) => ratio_of(with, without),
        _ => None,
    };
    let e2e = median(&pair_ratios(&r.traced_e2e, &r.bare_e2e));
    let cpu_ratios = pair_ratios(&r.traced_cpu, &r.bare_cpu);
    let cpu = median(&cpu_ratios);
    let met = ratio.is_some_and(|v| v <= w.target);
    let spread = min_max(&ratios).map_or("n/a".into(), |(lo, hi)| {
        format!("{}–{}", times(lo), times(hi))
    });
    s.rows.push(vec![
        w.label.clone(),
        median(&r.bare).map_or("n/a".into(), |v| format!("{} s", sig(v, 3))),
        median(&r.traced).map_or("n/a".into(), |v| format!("{} s", sig(v, 3))),
        ratio.map_or("n/a".into(), times),
        spread,
        best.map_or("n/a".into(), times),
        e2e.map_or("n/a".into(), times),
        cpu.map_or("n/a".into(), times),
        format!("≤ {}×", w.target),
        met_word(met).into(),
    ]);
    // Pairs that disagree by more than 10 % say more about the machine than about montrace.
    let noisy = min_max(&ratios).is_some_and(|(lo, hi)| hi - lo > 0.10);
    let display = match (ratio, min_max(&ratios)) {
        (Some(v), Some((lo, hi))) if noisy => {
            format!("{} (noisy: pairs {}–{})", times(v), times(lo), times(hi))
        }
        (Some(v), _) => times(v),
        _ => "n/a".into(),
    };
    s.figures.push(
        Figure::new(
            &format!("overhead.{}", w.key),
            &format!("overhead, {}", w.label),
            "ratio",
            ratio,
            display,
        )
        .runs(ratios)
        .target(&format!("≤ {}×", w.target), met),
    );
    let end_to_end = Figure::new(
        &format!("overhead.{}.end_to_end", w.key),
        &format!("overhead end to end, {}", w.label),
        "ratio",
        e2e,
        e2e.map_or("n/a".into(), times),
    )
    .runs(pair_ratios(&r.traced_e2e, &r.bare_e2e));
    // The performance issue's target for the whole `montrace run` of a build: start-up and
    // finish included.
    s.figures.push(match w.end_to_end_target {
        Some(target) => {
            end_to_end.target(&format!("≤ {target}×"), e2e.is_some_and(|v| v <= target))
        }
        None => end_to_end,
    });
    s.figures.push(
        Figure::new(
            &format!("overhead.{}.cpu", w.key),
            &format!("CPU with ÷ without montrace, {}", w.label),
            "ratio",
            cpu,
            cpu.map_or("n/a".into(), times),
        )
        .runs(cpu_ratios),
    );
    s.figures.push(Figure::new(
        &format!("overhead.{}.best_of_each", w.key),
        &format!("fastest run with ÷ fastest without, {}", w.label),
        "ratio",
        best,
        best.map_or("n/a".into(), times),
    ));
    let tree_growth = median(&pair_ratios(&r.traced_tree_cpu, &r.bare_cpu));
    let agent_share = median(&pair_ratios(&r.agent_cpu, &r.bare_cpu));
    s.figures.push(Figure::new(
        &format!("overhead.{}.tree_cpu", w.key),
        &format!("the tree's own CPU with ÷ without montrace, {}", w.label),
        "ratio",
        tree_growth,
        tree_growth.map_or("n/a".into(), times),
    ));
    s.figures.push(Figure::new(
        &format!("overhead.{}.agent_cpu_share", w.key),
        &format!("montrace's CPU ÷ the tree's CPU without it, {}", w.label),
        "share",
        agent_share,
        agent_share.map_or("n/a".into(), percent),
    ));
    if r.lost > 0.0 {
        s.notes
            .push(format!("{}: {} events were lost.", w.label, r.lost));
    }
    format!(
        "{}: montrace's own CPU came to {} of the workload's, and the workload's own CPU \
         was {} of what it was without montrace",
        w.label,
        agent_share.map_or("n/a".into(), percent),
        tree_growth.map_or("n/a".into(), times),
    )
}

const OVERHEAD_NOTE: &str = "**Where the overhead comes from.** montrace needs CPU of its own \
(section 4: per lifecycle event, per process-sample, and a fixed start-up and finish), and the \
workload's own CPU grows a little under it (the eBPF programs run in the workload's context, \
next table; `smaps_rollup` reads walk the workload's page tables). On an idle 2-core machine \
montrace's part runs on the core the workload leaves free; on this machine, shared with other \
work (see the load), every CPU-second montrace uses is taken from the workload, so the wall ratio \
follows the CPU ratio, and the pair ratios spread widely.";

fn ab(ctx: &Ctx, w: &Timed) -> Result<Pairs> {
    let t = &ctx.tools;
    let mut pairs = Pairs::default();
    let bare = |record: bool, pairs: &mut Pairs| -> Result<()> {
        if let Some(before) = &w.before {
            tools::prepare(before)?;
        }
        let ns = t
            .fresh(&format!("bare-{}", w.key))
            .with_extension("nscount.json");
        let ran = tools::run(&t.nscount_argv(&ns, &w.cmd))?;
        let kernel = tools::read_nscount(&ns)?;
        if record {
            pairs.bare.push(kernel.wall_s);
            pairs.bare_e2e.push(ran.wall_s);
            pairs.bare_cpu.push(kernel.cpu_ns / 1e9);
        }
        Ok(())
    };
    let traced = |record: bool, pairs: &mut Pairs| -> Result<()> {
        if let Some(before) = &w.before {
            tools::prepare(before)?;
        }
        let out = t.fresh(&format!("mt-{}", w.key));
        let ns = out.with_extension("nscount.json");
        let cost = out.with_extension("selfcost.json");
        let montrace = t.montrace_argv(&out, &[], &t.nscount_argv(&ns, &w.cmd));
        let ran = tools::run(&t.selfcost_argv(&cost, false, None, &montrace))?;
        let kernel = tools::read_nscount(&ns)?;
        if record {
            pairs.traced.push(kernel.wall_s);
            pairs.traced_e2e.push(ran.wall_s);
            let agent = tools::read_selfcost(&cost)?.cpu_s;
            pairs.traced_cpu.push(kernel.cpu_ns / 1e9 + agent);
            pairs.traced_tree_cpu.push(kernel.cpu_ns / 1e9);
            pairs.agent_cpu.push(agent);
            pairs.lost += lost_events(&read_json(&out.join("run.json"))?);
        }
        Ok(())
    };
    ctx.progress(&format!("overhead: {} (warm-up)", w.key));
    bare(false, &mut pairs)?;
    traced(false, &mut pairs)?;
    for i in 0..ctx.plan.overhead_reps {
        ctx.progress(&format!("overhead: {} (pair {})", w.key, i + 1));
        if i % 2 == 0 {
            bare(true, &mut pairs)?;
            traced(true, &mut pairs)?;
        } else {
            traced(true, &mut pairs)?;
            bare(true, &mut pairs)?;
        }
    }
    Ok(pairs)
}

/// Names of montrace's programs (BTF tracepoints, or the classic ones).
const PROGRAMS: &[&str] = &[
    "fork_btf",
    "exec_btf",
    "exit_btf",
    "switch_btf",
    // Waiting times and socket bytes (BTF tracepoints only).
    "wakeup_btf",
    "wakeup_new_btf",
    "send_length_btf",
    "recv_length_btf",
    "fork_tp",
    "exec_tp",
    "exit_tp",
    "switch_tp",
];

/// `kernel.bpf_stats_enabled` set to 1, and put back as it was when dropped.
struct BpfStats {
    before: String,
}

impl BpfStats {
    fn enable() -> Result<BpfStats> {
        let path = "/proc/sys/kernel/bpf_stats_enabled";
        let before = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {path}"))?
            .trim()
            .to_string();
        std::fs::write(path, "1").with_context(|| format!("cannot write {path}"))?;
        Ok(BpfStats { before })
    }
}

impl Drop for BpfStats {
    fn drop(&mut self) {
        let _ = std::fs::write("/proc/sys/kernel/bpf_stats_enabled", &self.before);
    }
}

/// One program's statistics: (name, run count, run time in ns).
type ProgStats = BTreeMap<u64, (String, f64, f64)>;

fn bpftool_programs() -> Option<Vec<Value>> {
    let out = Command::new("bpftool")
        .args(["prog", "show", "--json"])
        .output()
        .ok()?;
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()?
        .as_array()
        .cloned()
}

fn ensure_bpftool(ctx: &Ctx) -> Result<()> {
    if Command::new("bpftool")
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        return Ok(());
    }
    ctx.progress("installing bpftool (apt)");
    crate::util::check_quietly(
        Command::new("apt-get")
            .args(["install", "-y", "-q", "bpftool"])
            .env("DEBIAN_FRONTEND", "noninteractive"),
        ctx.verbose,
    )
    .context("apt-get install bpftool failed")
}

/// A thread that reads the statistics of montrace's programs loaded after `newest_before` into
/// `seen` every 100 ms, until `stop`.
fn watch_new_programs(
    newest_before: u64,
    seen: Arc<Mutex<ProgStats>>,
    stop: Arc<AtomicBool>,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            for prog in bpftool_programs().unwrap_or_default() {
                let (Some(id), Some(name)) = (prog["id"].as_u64(), prog["name"].as_str()) else {
                    continue;
                };
                if id <= newest_before || !PROGRAMS.contains(&name) {
                    continue;
                }
                let cnt = prog["run_cnt"].as_f64().unwrap_or(0.0);
                let ns = prog["run_time_ns"].as_f64().unwrap_or(0.0);
                seen.lock().unwrap().insert(id, (name.to_string(), cnt, ns));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    })
}

/// The (runs, ns) of the first program of each name in `seen` (by id, the first loaded).
fn first_of_each_name(seen: &ProgStats) -> BTreeMap<String, (f64, f64)> {
    let mut by_name: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (name, cnt, ns) in seen.values() {
        by_name.entry(name.clone()).or_insert((*cnt, *ns));
    }
    by_name
}

/// Time per run of a program that ran `cnt` times for `ns` in all.
fn per_run(cnt: f64, ns: f64) -> Option<f64> {
    (cnt > 0.0).then(|| ns / cnt)
}

fn show_ns(v: Option<f64>) -> String {
    v.map_or("n/a".to_string(), |v| format!("{} ns", sig(v, 3)))
}

/// A row and a figure per program; the (runs, ns) of all of them and of the lifecycle ones
/// (fork, exec, exit).
fn program_rows(
    s: &mut Section,
    by_name: &BTreeMap<String, (f64, f64)>,
) -> ((f64, f64), (f64, f64)) {
    let (mut all_cnt, mut all_ns) = (0.0, 0.0);
    let (mut lifecycle_cnt, mut lifecycle_ns) = (0.0, 0.0);
    for (name, &(cnt, ns)) in by_name {
        all_cnt += cnt;
        all_ns += ns;
        if ["fork", "exec", "exit"].iter().any(|l| name.starts_with(l)) {
            lifecycle_cnt += cnt;
            lifecycle_ns += ns;
        }
        s.rows.push(vec![
            format!("`{name}`"),
            format!("{cnt:.0}"),
            format!("{} ms", sig(ns / 1e6, 3)),
            show_ns(per_run(cnt, ns)),
        ]);
        s.figures.push(Figure::new(
            &format!("ebpf.{name}.ns_per_run"),
            &format!("eBPF {name}: time per run"),
            "ns",
            per_run(cnt, ns),
            show_ns(per_run(cnt, ns)),
        ));
    }
    ((all_cnt, all_ns), (lifecycle_cnt, lifecycle_ns))
}

fn ebpf_cost(ctx: &Ctx) -> Result<Section> {
    let t = &ctx.tools;
    let p = &ctx.plan;
    ensure_bpftool(ctx)?;
    ctx.progress("overhead: eBPF programs' run time");
    let newest_before = bpftool_programs()
        .context("bpftool prog show failed")?
        .iter()
        .filter_map(|prog| prog["id"].as_u64())
        .max()
        .unwrap_or(0);
    let _stats = BpfStats::enable()?;
    // A background thread reads the statistics of montrace's new programs every 100 ms while the
    // run goes; the last reading before montrace unloads them holds (nearly) all of the storm.
    let seen: Arc<Mutex<ProgStats>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let poller = watch_new_programs(newest_before, Arc::clone(&seen), Arc::clone(&stop));
    let out = t.fresh("mt-ebpf");
    let storm = format!(
        "{} {} 2 0 exec {}; sleep 0.5",
        t.helper("storm"),
        p.storm_n,
        t.helper("noop")
    );
    let ran = tools::run(&t.montrace_argv(&out, &[], &["sh".into(), "-c".into(), storm]));
    stop.store(true, Ordering::Relaxed);
    let _ = poller.join();
    let ran = ran?;
    let run = read_json(&out.join("run.json"))?;
    let started = tools::num(&run, "/processes_started")?;

    // The first programs of each name loaded after the start are this run's (another montrace
    // started at the same moment could add more; they would come later).
    let by_name = first_of_each_name(&seen.lock().unwrap());
    let mut s = Section {
        id: "ebpf".into(),
        title: "3. Overhead: the eBPF programs in the kernel".into(),
        method: format!(
            "With `kernel.bpf_stats_enabled=1` the kernel times every run of a BPF program. One \
             montrace run of a C fork storm ({} processes, fork + exec of a static no-op + exit, \
             2 workers), then a 0.5 s sleep; `bpftool prog show` is read every 100 ms during the \
             run and the last reading before montrace unloads its programs is kept. The programs \
             run for every process on the machine (they filter in the kernel), so the counts \
             include other processes' events; the `switch` and `wakeup` programs run at every \
             context switch and wake-up of the machine (they keep the tree's waiting times), the \
             `*_length` ones at every socket send and receive (the tree's socket bytes). The \
             statistics are switched back off afterwards.",
            p.storm_n
        ),
        columns: vec![
            "program".into(),
            "runs".into(),
            "time in the program".into(),
            "per run".into(),
        ],
        ..Section::default()
    };
    let ((all_cnt, all_ns), (lifecycle_cnt, lifecycle_ns)) = program_rows(&mut s, &by_name);
    s.rows.push(vec![
        "all".into(),
        format!("{all_cnt:.0}"),
        format!("{} ms", sig(all_ns / 1e6, 3)),
        "".into(),
    ]);
    let per_event = per_run(lifecycle_cnt, lifecycle_ns);
    s.figures.push(Figure::new(
        "ebpf.ns_per_event",
        "eBPF fork/exec/exit programs: kernel time per event",
        "ns",
        per_event,
        show_ns(per_event),
    ));
    let per_process = (started > 0.0).then(|| all_ns / started);
    s.figures.push(Figure::new(
        "ebpf.us_per_process",
        "eBPF programs, all: kernel time per tracked process",
        "µs",
        per_process.map(|v| v / 1e3),
        per_process.map_or("n/a".into(), |v| format!("{} µs", sig(v / 1e3, 3))),
    ));
    if let Some(pp) = per_process {
        s.notes.push(format!(
            "{started:.0} processes were tracked. All the programs together (context switches \
             included) ran {} ms, {} µs per tracked process, in a run of {} ms; the fork, exec \
             and exit programs took {} per event.",
            sig(all_ns / 1e6, 3),
            sig(pp / 1e3, 3),
            sig(ran.wall_s * 1e3, 4),
            show_ns(per_event),
        ));
    }
    if by_name.is_empty() {
        s.notes
            .push("bpftool showed none of montrace's programs during the run.".into());
    }
    Ok(s)
}
