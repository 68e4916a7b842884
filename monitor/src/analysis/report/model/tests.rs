use super::*;
use crate::analysis::report::load::{GpuProcessRow, Sample};

const S: i64 = 1_000_000_000;

fn proc(pid: u32, filename: Option<&str>, comm: &str, argv: &[&str]) -> Process {
    Process {
        pid,
        start_ns: i64::from(pid) * S,
        filename: filename.map(str::to_string),
        argv: (!argv.is_empty()).then(|| argv.iter().map(|s| s.to_string()).collect()),
        comm: comm.into(),
        ..Default::default()
    }
}

#[test]
fn groups_by_executable_falling_back_to_comm() {
    let by = GroupBy::parse("exe").unwrap();
    let gcc = proc(1, Some("/usr/bin/gcc-12"), "gcc", &["gcc", "-c", "a.c"]);
    assert_eq!(by.group_of(&gcc), "gcc-12");
    assert_eq!(by.group_of(&proc(2, None, "kworker", &[])), "kworker");
    assert_eq!(by.group_of(&proc(3, Some("./run"), "run", &[])), "run");
    assert_eq!(by.group_of(&proc(4, None, "", &[])), "pid 4");
}

#[test]
fn groups_by_comm() {
    let by = GroupBy::parse("comm").unwrap();
    assert_eq!(
        by.group_of(&proc(1, Some("/usr/bin/python3.11"), "worker-3", &[])),
        "worker-3"
    );
}

#[test]
fn groups_by_pattern_with_and_without_a_capture_group() {
    let python = proc(
        1,
        Some("/usr/bin/python3"),
        "python3",
        &["python3", "train.py", "--stage", "eval"],
    );
    let sh = proc(2, Some("/bin/sh"), "sh", &["sh", "-c", "true"]);
    // The capture group names the group; no match falls back to the executable.
    let by = GroupBy::parse(r"--stage (\w+)").unwrap();
    assert_eq!(by.group_of(&python), "eval");
    assert_eq!(by.group_of(&sh), "sh");
    // Without a group, the whole match.
    let by = GroupBy::parse(r"\w+\.py").unwrap();
    assert_eq!(by.group_of(&python), "train.py");
    // An optional group that did not take part: the whole match.
    let by = GroupBy::parse(r"python3( --x)?").unwrap();
    assert_eq!(by.group_of(&python), "python3");
    // No argv: the pattern sees the file name.
    let by = GroupBy::parse(r"[^/]+$").unwrap();
    assert_eq!(
        by.group_of(&proc(3, Some("/opt/bin/tool"), "t", &[])),
        "tool"
    );
    let err = GroupBy::parse("(unclosed").unwrap_err();
    assert!(err.contains("--group-by \"(unclosed\""), "{err}");
}

fn sample(time_s: f64, process: usize, uss: u64, rss: u64, cpu: f64) -> Sample {
    Sample {
        time_ns: (time_s * 1e9) as i64,
        process,
        uss_bytes: Some(uss),
        rss_bytes: Some(rss),
        pss_bytes: Some((uss + rss) / 2),
        cpu_percent: Some(cpu),
        ..Default::default()
    }
}

/// Two `work` processes that peak at different sweeps, and one `sh`.
fn two_workers() -> RunData {
    let mut a = proc(10, Some("/bin/work"), "work", &["work", "a"]);
    let mut b = proc(11, Some("/bin/work"), "work", &["work", "b"]);
    let mut sh = proc(12, Some("/bin/sh"), "sh", &["sh"]);
    a.end_ns = Some(14 * S);
    b.end_ns = Some(15 * S);
    sh.end_ns = Some(13 * S);
    (a.cpu_user_ns, a.cpu_system_ns) = (Some(3 * S as u64), Some(S as u64));
    (b.cpu_user_ns, b.cpu_system_ns) = (Some(S as u64), Some(0));
    // sh is still running at the end: its CPU comes from its last sample.
    sh.alive_at_end = true;
    let samples = vec![
        sample(12.0, 0, 100, 300, 50.0),
        sample(12.0, 1, 10, 200, 10.0),
        sample(12.0, 2, 5, 50, 1.0),
        sample(13.0, 0, 20, 200, 90.0),
        sample(13.0, 1, 60, 250, 30.0),
        Sample {
            time_ns: 13 * S,
            process: 2,
            cpu_user_ns: 7,
            cpu_system_ns: 3,
            rss_bytes: Some(50),
            ..Default::default()
        },
        Sample {
            time_ns: 14 * S,
            process: 0,
            exit: true,
            rss_bytes: Some(0),
            ..Default::default()
        },
    ];
    RunData {
        processes: vec![a, b, sh],
        samples,
        ..Default::default()
    }
}

#[test]
fn aggregate_peak_is_the_largest_per_sweep_sum() {
    let data = two_workers();
    let model = build(&data, &GroupBy::Exe);
    assert_eq!(model.sweeps, [12 * S, 13 * S]);
    let work = &model.groups[0];
    assert_eq!(work.name, "work");
    assert_eq!(work.instances, 2);
    assert_eq!(work.samples, 4);
    // Per sweep: 100 + 10 = 110, then 20 + 60 = 80; the single largest is 100.
    assert_eq!(work.agg_peak_uss, Some(110));
    assert_eq!(work.peak_uss_instance, Some(100));
    assert_eq!(work.agg_peak_rss, Some(500));
    assert_eq!(work.agg_peak_pss, Some((100 + 300) / 2 + (10 + 200) / 2));
    assert_eq!(work.peak_cpu_percent, Some(120.0));
    assert_eq!(work.avg_uss, Some(190.0 / 4.0));
    assert_eq!(
        (work.cpu_user_ns, work.cpu_system_ns),
        (4 * S as u64, S as u64)
    );
    // 5 CPU seconds from t=10 s to t=15 s.
    assert_eq!(work.duration_ns(), 5 * S);
    assert_eq!(work.avg_cpu_percent, Some(100.0));
    let sh = &model.groups[1];
    assert_eq!(sh.name, "sh");
    // The sweep at 13 s has no USS for sh: the peak is the one sweep that had it.
    assert_eq!(sh.agg_peak_uss, Some(5));
    assert_eq!(
        (sh.cpu_user_ns, sh.cpu_system_ns, sh.cpu_from_samples),
        (7, 3, 1)
    );
    assert_eq!(model.group_of, [0, 0, 1]);
    // The exit row (rss 0) is not a sweep, and does not lower the peak RSS.
    assert_eq!(model.procs[0].peak_rss, Some(300));
}

fn gpu_row(time_s: f64, process: usize, gpu_index: u32, bytes: u64) -> GpuProcessRow {
    GpuProcessRow {
        time_ns: (time_s * 1e9) as i64,
        gpu_index,
        process,
        accounting: false,
        gpu_memory_bytes: Some(bytes),
    }
}

#[test]
fn gpu_memory_sums_the_sample_rows_of_each_group() {
    let mut data = two_workers();
    data.gpu_processes = vec![
        // work: both processes, one of them on two GPUs.
        gpu_row(12.0, 0, 0, 100),
        gpu_row(12.0, 0, 1, 50),
        gpu_row(12.0, 1, 0, 30),
        gpu_row(12.0, 2, 1, 7),
        gpu_row(13.0, 1, 0, 40),
        // Whole-life figures at an exit, even one with a memory figure at a sweep's time,
        // are not a moment of the sweep.
        GpuProcessRow {
            accounting: true,
            ..gpu_row(13.0, 0, 0, 1_000)
        },
        // No sweep at 12.5 s to join.
        gpu_row(12.5, 1, 0, 999),
    ];
    let model = build(&data, &GroupBy::Exe);
    assert_eq!(model.sweeps, [12 * S, 13 * S]);
    let gpu = |g: usize| -> Vec<(usize, Option<u64>)> {
        model.group_sweeps[g]
            .iter()
            .map(|(sweep, sum)| (*sweep, sum.gpu_memory))
            .collect()
    };
    // work: 100 + 50 + 30, then 40; sh's 7 is not work's.
    assert_eq!(gpu(0), [(0, Some(180)), (1, Some(40))]);
    assert_eq!(gpu(1), [(0, Some(7)), (1, None)]);
    assert_eq!(model.groups[0].agg_peak_gpu_memory, Some(180));
    assert_eq!(model.groups[1].agg_peak_gpu_memory, Some(7));
    let series = sweep_series(&model, |s| s.gpu_memory.map(|v| v as f64));
    let points: Vec<(&str, &[(f64, f64)])> = series
        .iter()
        .map(|s| (s.name.as_str(), s.points.as_slice()))
        .collect();
    assert_eq!(
        points,
        [
            ("work", &[(2.0, 180.0), (3.0, 40.0)][..]),
            ("sh", &[(2.0, 7.0), (3.0, 0.0)][..])
        ]
    );
    // The procfs figures are those of the run without GPU rows.
    let without = build(&two_workers(), &GroupBy::Exe);
    for (with, without) in model.groups.iter().zip(&without.groups) {
        assert_eq!(
            GroupStats {
                agg_peak_gpu_memory: None,
                ..with.clone()
            },
            *without
        );
    }
    assert!(without
        .groups
        .iter()
        .all(|g| g.agg_peak_gpu_memory.is_none()));
}

#[test]
fn a_group_without_gpu_rows_peaks_at_zero_when_the_run_has_them() {
    let mut data = two_workers();
    data.gpu_processes = vec![gpu_row(13.0, 2, 0, 7)];
    let model = build(&data, &GroupBy::Exe);
    assert_eq!(model.groups[0].agg_peak_gpu_memory, Some(0));
    assert_eq!(model.groups[1].agg_peak_gpu_memory, Some(7));
    // Accounting rows alone are no GPU samples.
    data.gpu_processes[0].accounting = true;
    let model = build(&data, &GroupBy::Exe);
    assert!(model.groups.iter().all(|g| g.agg_peak_gpu_memory.is_none()));
}

#[test]
fn top_processes() {
    let data = two_workers();
    let model = build(&data, &GroupBy::Exe);
    let cpu: Vec<usize> = top_by_cpu(&data, &model, 2)
        .iter()
        .map(|t| t.process)
        .collect();
    assert_eq!(cpu, [0, 1]);
    let mem: Vec<usize> = top_by_memory(&data, &model, 5)
        .iter()
        .map(|t| t.process)
        .collect();
    assert_eq!(mem, [0, 1, 2]);
}

#[test]
fn series_sum_groups_beyond_the_top_into_other() {
    let mut processes = Vec::new();
    let mut samples = Vec::new();
    for i in 0..TOP_GROUPS + 3 {
        processes.push(proc(100 + i as u32, Some(&format!("/bin/p{i}")), "p", &[]));
        samples.push(sample(200.0, i, (i as u64 + 1) * 10, 0, 0.0));
    }
    let data = RunData {
        processes,
        samples,
        ..Default::default()
    };
    let model = build(&data, &GroupBy::Exe);
    let series = sweep_series(&model, |s| s.uss.map(|v| v as f64));
    assert_eq!(series.len(), TOP_GROUPS + 1);
    let other = series.last().unwrap();
    assert_eq!(other.name, "other (3 groups)");
    assert_eq!(other.group, None);
    // The three smallest: 10 + 20 + 30.
    assert_eq!(other.points[0].1, 60.0);
    let top: f64 = series[..TOP_GROUPS].iter().map(|s| s.points[0].1).sum();
    assert_eq!(top + 60.0, (1..=11).map(|i| i as f64 * 10.0).sum::<f64>());
}

#[test]
fn cumulative_cpu_keeps_the_final_time_of_exited_processes() {
    let data = two_workers();
    let model = build(&data, &GroupBy::Exe);
    let series = cumulative_cpu(&data, &model);
    let work = series.iter().find(|s| s.name == "work").unwrap();
    // Exits at 14 s (4 s of CPU) and 15 s (1 s): 5 s at the end, never decreasing.
    assert_eq!(work.points.last().unwrap(), &(5.0, 5.0));
    assert!(work.points.windows(2).all(|w| w[0].1 <= w[1].1));
    let at = |x: f64| work.points.iter().rev().find(|p| p.0 <= x).unwrap().1;
    assert_eq!(at(4.0), 4.0);
}

#[test]
fn active_instances_are_exact_steps() {
    let data = two_workers();
    let model = build(&data, &GroupBy::Exe);
    let series = active_instances(&data, &model);
    let work = series.iter().find(|s| s.name == "work").unwrap();
    // work: starts at 10 s and 11 s (t0), ends at 14 s and 15 s.
    assert_eq!(
        work.points,
        [
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 1.0),
            (1.0, 1.0),
            (1.0, 2.0),
            (4.0, 2.0),
            (4.0, 1.0),
            (5.0, 1.0),
            (5.0, 0.0)
        ]
    );
}

#[test]
fn running_processes_are_exact_whole_steps() {
    let mut data = two_workers();
    // Starts as `b` ends: one process replaced by another is no change.
    data.processes.push(Process {
        end_ns: Some(16 * S),
        ..proc(15, Some("/bin/work"), "work", &["work", "c"])
    });
    let model = build(&data, &GroupBy::Exe);
    let running = running_processes(&data, &model);
    assert_eq!(running.group, None);
    // t0 = 10 s: a 10-14 s, b 11-15 s, sh 12-13 s, c 15-16 s.
    assert_eq!(
        running.points,
        [
            (0.0, 0.0),
            (0.0, 0.0),
            (0.0, 1.0),
            (1.0, 1.0),
            (1.0, 2.0),
            (2.0, 2.0),
            (2.0, 3.0),
            (3.0, 3.0),
            (3.0, 2.0),
            (4.0, 2.0),
            (4.0, 1.0),
            (6.0, 1.0),
            (6.0, 0.0)
        ]
    );
    assert!(running.points.iter().all(|p| p.1.fract() == 0.0));
}

#[test]
fn exit_texts() {
    let mut p = proc(1, None, "x", &[]);
    assert_eq!(exit_text(&p), "unknown");
    p.alive_at_end = true;
    assert_eq!(exit_text(&p), "running at end");
    p.exit_signal = Some(9);
    assert_eq!(exit_text(&p), "SIGKILL (9)");
    p.exit_signal = Some(40);
    assert_eq!(exit_text(&p), "signal 40");
    p.exit_code = Some(3);
    assert_eq!(exit_text(&p), "exit 3");
}

#[test]
fn stacked_steps_sum_the_layers_below() {
    let series = |name: &str, points: Vec<(f64, f64)>| Series {
        name: name.into(),
        group: None,
        points,
    };
    // a: 0 → 2 at t=1 → 0 at t=3; b: 0 → 1 at t=2.
    let a = series(
        "a",
        vec![(0.0, 0.0), (1.0, 0.0), (1.0, 2.0), (3.0, 2.0), (3.0, 0.0)],
    );
    let b = series("b", vec![(0.0, 0.0), (2.0, 0.0), (2.0, 1.0)]);
    let s = stack_steps(&[a, b]);
    assert_eq!(
        s[0].points,
        [
            (0.0, 0.0),
            (1.0, 0.0),
            (1.0, 2.0),
            (2.0, 2.0),
            (3.0, 2.0),
            (3.0, 0.0)
        ]
    );
    assert_eq!(
        s[1].points,
        [
            (0.0, 0.0),
            (1.0, 0.0),
            (1.0, 2.0),
            (2.0, 2.0),
            (2.0, 3.0),
            (3.0, 3.0),
            (3.0, 1.0)
        ]
    );
}

#[test]
fn the_tree_rss_peak_is_the_largest_sweep_sum() {
    let sum = |rss: u64| SweepSum {
        rss: Some(rss),
        ..Default::default()
    };
    let model = Model {
        sweeps: vec![10, 20, 30],
        group_sweeps: vec![
            vec![(0, sum(5)), (1, sum(7))],
            vec![(1, sum(3)), (2, sum(9))],
        ],
        ..Default::default()
    };
    assert_eq!(model.tree_rss_peak(), Some((20, 10)));
    assert_eq!(Model::default().tree_rss_peak(), None);
}

#[test]
fn peak_rss_per_instance_takes_exit_figures_of_processes_never_sampled() {
    let mut data = two_workers();
    // Two `true`s that ended between sweeps: no sample, but the kernel's exact peak at exit.
    for (pid, peak) in [(20, 1_200), (21, 1_500)] {
        data.processes.push(Process {
            end_ns: Some(i64::from(pid) * S + 1_000),
            peak_rss_bytes: Some(peak),
            ..proc(pid, Some("/bin/true"), "true", &["true"])
        });
    }
    // One worker's exit peak is above everything sampled; the other has none (still running).
    data.processes[0].peak_rss_bytes = Some(900);
    let model = build(&data, &GroupBy::Exe);
    let group = |name: &str| model.groups.iter().find(|g| g.name == name).unwrap();
    let t = group("true");
    assert_eq!((t.samples, t.agg_peak_rss), (0, None));
    assert_eq!(t.peak_rss_instance, Some(1_500));
    assert_eq!(t.peak_rss_from_samples, 0);
    let work = group("work");
    assert_eq!(work.peak_rss_instance, Some(900));
    assert_eq!(work.peak_rss_from_samples, 1, "process b: sampled RSS only");
    let sh = group("sh");
    assert_eq!(
        (sh.peak_rss_instance, sh.peak_rss_from_samples),
        (Some(50), 1)
    );
}

#[test]
fn storage_rates_are_per_second_since_the_previous_sample_summed_per_sweep() {
    let mut data = two_workers();
    // a (started at 10 s): 2000 bytes read by 12 s, 5000 by 13 s; b (11 s): 100 by 12 s, then
    // a counter that went back (no I/O); sh started at its first sweep (no time to divide by)
    // and has no counters after.
    for (i, read, write) in [
        (0, 2_000, Some(0)),
        (3, 5_000, Some(1 << 20)),
        (1, 100, None),
        (4, 50, None),
        (2, 7, Some(7)),
    ] {
        data.samples[i].read_bytes = Some(read);
        data.samples[i].write_bytes = write;
    }
    // The exit row's counters are not a sweep.
    data.samples[6].read_bytes = Some(1 << 30);
    let model = build(&data, &GroupBy::Exe);
    let io = |g: usize| -> Vec<(Option<f64>, Option<f64>)> {
        model.group_sweeps[g]
            .iter()
            .map(|(_, sum)| (sum.read_per_s, sum.write_per_s))
            .collect()
    };
    assert_eq!(model.groups[0].name, "work");
    assert_eq!(
        io(0),
        [
            (Some(1_000.0 + 100.0), Some(0.0)),
            (Some(3_000.0 + 0.0), Some((1 << 20) as f64))
        ]
    );
    assert_eq!(io(1), [(None, None), (None, None)]);
    let series = sweep_series(&model, |s| s.read_per_s);
    assert_eq!(series.len(), 1, "sh read nothing: no line");
    assert_eq!(series[0].points, [(2.0, 1_100.0), (3.0, 3_000.0)]);
}

/// The load between sweeps comes from every row, exit rows too, each over the time since its
/// process's previous row: a burner waiting half the time and a short process seen only at its
/// exit.
#[test]
fn load_spreads_each_row_over_the_time_since_the_previous_one() {
    let mut burner = proc(10, Some("/bin/burn"), "burn", &["burn"]);
    let mut short = proc(11, Some("/bin/true"), "true", &["true"]);
    burner.end_ns = Some(13 * S);
    short.start_ns = 12 * S + S / 2;
    short.end_ns = Some(13 * S);
    let row = |time_ns: i64, process: usize, exit: bool, cpu: f64, waiting: Option<f64>| Sample {
        time_ns,
        process,
        exit,
        cpu_percent: Some(cpu),
        run_queue_percent: waiting,
        ..Default::default()
    };
    let data = RunData {
        processes: vec![burner, short],
        samples: vec![
            // The burner, from its start at 10 s: sweeps at 11 and 12 s, its exit at 13 s.
            row(11 * S, 0, false, 50.0, Some(50.0)),
            row(12 * S, 0, false, 50.0, Some(50.0)),
            row(13 * S, 0, true, 100.0, Some(0.0)),
            // The short one, 12.5 to 13 s, on a CPU all along, seen at its exit only.
            row(13 * S, 1, true, 100.0, None),
        ],
        ..Default::default()
    };
    let model = build(&data, &GroupBy::parse("exe").unwrap());
    let intervals = load(&data, &model);
    let got: Vec<(i64, i64, f64, f64)> = intervals
        .iter()
        .map(|i| (i.start_ns / S, i.end_ns / S, i.cores_used, i.cores_wanted))
        .collect();
    assert_eq!(
        got,
        [(10, 11, 0.5, 1.0), (11, 12, 0.5, 1.0), (12, 13, 1.5, 1.5)]
    );
    let steps = interval_steps(&model, &intervals, "used", |i| i.cores_used);
    assert_eq!(
        steps.points,
        [
            (0.0, 0.5),
            (1.0, 0.5),
            (1.0, 0.5),
            (2.0, 0.5),
            (2.0, 1.5),
            (3.0, 1.5)
        ]
    );
}

/// The analysis counts from the command's exec (the root, forked earlier and held while the
/// programs loaded, is clipped to it: its step is at 0 s), and a pid reused in the run names two
/// processes: each step is the process that started at its time.
#[test]
fn critical_path_steps_count_from_the_exec_and_tell_reused_pids_apart() {
    use crate::analysis::critical::{Step, TimeAnalysis};
    const MS: i64 = 1_000_000;
    let at = |pid: u32, parent: Option<u32>, start_ms: i64| Process {
        start_ns: 1_000 * MS + start_ms * MS + 7,
        parent: parent.map(|pp| (pp, 0)),
        ..proc(pid, None, "x", &[])
    };
    // Root 10 forked at 0 ms and exec'd at 30 ms; pid 11 ran at 40 ms and again at 90 ms.
    let mut data = RunData {
        processes: vec![
            at(10, None, 0),
            at(11, Some(10), 40),
            at(12, Some(10), 60),
            at(11, Some(10), 90),
        ],
        ..Default::default()
    };
    let exec_ns = 1_000 * MS + 30 * MS + 7;
    let step = |pid: u32, start_ns: i64| Step::at(pid, (start_ns - exec_ns) as f64 / 1e9, 0.01);
    let mut info = crate::analysis::report::load::load(&crate::analysis::report::tests::fixture())
        .unwrap()
        .info
        .unwrap();
    let p = |i: usize| data.processes[i].start_ns;
    info.time = Some(TimeAnalysis {
        critical_path: vec![step(10, exec_ns), step(12, p(2)), step(11, p(3))],
        critical_path_steps: 3,
        ..Default::default()
    });
    data.info = Some(info);
    assert_eq!(critical_path_processes(&data), [true, false, true, true]);
}
