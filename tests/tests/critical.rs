//! Where the time went, for a build: a generated Makefile with a designed chain (A -> B -> C,
//! 0.3 s of CPU each) beside 20 short independent jobs, under `make -j4`. run.json's critical
//! path names exactly A, B, C in that order and its length is their lifetimes'; the average
//! parallelism is within 10 % of the value the processes' own start and end times (less the
//! time the kernel blocked them) give; summary.json carries both as metrics; the
//! report opens with "Where the time went". The serial share (at most one process busy) of
//! that chain is near 1, and of burners running together near 0.
use tests::compile_c;

/// `burn MS NAME`: keeps a CPU busy for MS milliseconds of wall time.
const BURN: &str = r#"
#include <stdlib.h>
#include <time.h>
static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}
int main(int argc, char **argv) {
    double end = now() + atoi(argv[1]) / 1000.0;
    volatile unsigned long spin = 0;
    while (now() < end) spin++;
    return argc > 2 ? 0 : 1;
}
"#;

fn makefile(burn: &str) -> String {
    let shorts: Vec<String> = (1..=20).map(|i| format!("s{i}")).collect();
    let mut text = format!(
        "all: C {}\nA:\n\t{burn} 300 A\nB: A\n\t{burn} 300 B\nC: B\n\t{burn} 300 C\n",
        shorts.join(" ")
    );
    for s in &shorts {
        text += &format!("{s}:\n\t{burn} 10 {s}\n");
    }
    text += &format!(".PHONY: all A B C {}\n", shorts.join(" "));
    text
}

#[test]
fn the_critical_path_of_a_make_is_its_designed_chain() {
    tests::require_root();
    let burn = compile_c("burn", BURN);
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("Makefile"), makefile(burn.as_str())).unwrap();
    // Ahead of the machine (nice -20 in an autogroup of its own; CFS shares by weight): make
    // and its jobs are not held back by other builds or --stress's hog, so the 20 short jobs
    // end early in the build, as the serial share below needs.
    let run = tests::launch_montrace(
        &["--interval", "25ms"],
        &["make", "-s", "-j4", "-C", tmp.path().to_str().unwrap()],
    )
    .ahead_of_the_machine()
    .run();
    run.assert_code(0);
    let out = run.dir.clone();
    let info = run.run_json();
    let time = &info["time"];
    let steps: Vec<String> = time["critical_path"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["command"].as_str().unwrap().to_owned())
        .collect();
    let expected: Vec<String> = ["A", "B", "C"]
        .iter()
        .map(|n| format!("{} 300 {n}", burn.as_str()))
        .collect();
    assert_eq!(steps, expected, "{time}");
    let rows = tests::read_processes(&out);
    // The path's length is the lifetimes of its steps, exactly (processes.parquet keeps
    // microseconds): each burner lives at least its 300 ms (it burns until CLOCK_MONOTONIC says
    // so), and how much more (its exec, a late last check of the clock on a busy machine) is
    // the machine's, which the path must show as it was.
    let critical = time["critical_path_s"].as_f64().unwrap();
    let chain: f64 = ["A", "B", "C"]
        .iter()
        .map(|n| {
            let argv = [burn.as_str(), "300", n].map(String::from);
            let p = rows
                .iter()
                .find(|p| p.argv.as_deref() == Some(&argv[..]))
                .unwrap_or_else(|| panic!("no row of step {n}: {rows:?}"));
            (p.end_time.unwrap() - p.start_time) as f64 / 1e9
        })
        .sum();
    assert!(
        critical >= 0.9 && (critical - chain).abs() < 1e-5,
        "critical path {critical} s, its steps lived {chain} s: {time}"
    );

    // The parallelism from the processes' own lifetimes: every burner ran (or waited for a CPU)
    // from its start to its end, but for the time the kernel blocked it (its exec paging its
    // program in from a busy disk), which is not wanting a CPU.
    let burners: f64 = rows
        .iter()
        .filter(|p| p.filename.as_deref() == Some(burn.as_str()))
        .map(|p| {
            let off = p.blocked_ns.unwrap_or(0) + p.sleep_ns.unwrap_or(0);
            (p.end_time.unwrap() - p.start_time - off as i64) as f64 / 1e9
        })
        .sum();
    assert_eq!(
        rows.iter()
            .filter(|p| p.filename.as_deref() == Some(burn.as_str()))
            .count(),
        23
    );
    let wall = info["command_wall_s"].as_f64().unwrap();
    let expected = burners / wall;
    let measured = time["avg_parallelism"].as_f64().unwrap();
    assert!(
        (measured - expected).abs() <= 0.1 * expected,
        "avg_parallelism {measured}, from the burners' lifetimes {expected}: {time}"
    );
    let summary = tests::read_json(&out.join("summary.json")).unwrap();
    let metrics = &summary["repetitions"][0]["metrics"];
    assert_eq!(metrics["critical_path_s"], time["critical_path_s"]);
    assert_eq!(metrics["avg_parallelism"], time["avg_parallelism"]);
    // After the 20 short jobs (10 ms of wall each, 3 at a time beside A: seven rounds of a fork,
    // an exec and 10 ms, over well within A's 300 ms ahead of the machine), one burner at a time
    // is busy and make sleeps: serial for all but the start. A burner is busy (on a CPU or
    // waiting for one) all its life, so the exact share is that of the wall time with at most
    // one burner alive; montrace's, from the samples, is within 0.1 of it (sweeps every 25 ms:
    // each change of the busy count blurs one sweep interval of the ~1 s build; at 100 ms the
    // estimate came out up to 0.083 low here).
    let serial = time["serial_share"].as_f64().unwrap();
    let exact = serial_share_of_burners(&rows, burn.as_str(), wall);
    eprintln!("make: serial_share {serial:.3}, from the burners' lifetimes {exact:.3}");
    assert!(
        (serial - exact).abs() <= 0.1 && serial >= 0.6,
        "serial_share {serial}, from the burners' lifetimes {exact}: {time}"
    );
    assert_eq!(metrics["serial_share"], time["serial_share"]);

    // The report leads with it: its first section, with the three steps.
    let report = std::fs::read_to_string(out.join("report.md")).unwrap();
    let first = report.lines().find(|l| l.starts_with("## ")).unwrap();
    assert_eq!(first, "## Where the time went", "{report}");
    let section = report.split("## ").nth(1).unwrap();
    for step in &expected_steps_for_report(burn.as_str()) {
        assert!(section.contains(step), "no {step} in:\n{section}");
    }
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    assert!(html.contains("<h2>Where the time went</h2>"));
    // Its plot draws the cores used and wanted (the BTF tracepoints measure the wait) beside
    // the processes alive, and the summary gives the serial share.
    let plot = std::fs::read_to_string(out.join("report-parallelism.svg")).unwrap();
    for line in ["cores used", "cores wanted", "processes alive"] {
        assert!(
            plot.contains(&format!(">\n{line}\n</text>")),
            "no {line} in the parallelism plot's legend"
        );
    }
    assert!(
        section.contains("at most one process was running or waiting to run"),
        "{section}"
    );
}

/// Twice as many burners as cores, 1 s together: always more than one busy (on a CPU or
/// waiting for one), so the serial share is near 0; the tree wanted twice the cores it used.
#[test]
fn burners_together_are_not_serial() {
    tests::require_root();
    let burn = compile_c("burn", BURN);
    let cores = std::thread::available_parallelism().unwrap().get();
    let script = format!(
        "for i in $(seq {}); do {} 1000 x & done; wait",
        2 * cores,
        burn.as_str()
    );
    // The serial share relies on the shell starting all the burners within 0.1 s of the 1 s
    // they burn: ahead of the machine (nice -20, CFS shares by weight), no neighbour holds the
    // shell back; its own burners can, but forking is a few ms of CPU. avg_parallelism counts
    // runnable processes (on a CPU or waiting for one), which no load lowers.
    let run = tests::launch_montrace(&["--interval", "100ms"], &["sh", "-c", &script])
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    let info = run.run_json();
    let time = &info["time"];
    let serial = time["serial_share"].as_f64().unwrap();
    let wall = info["command_wall_s"].as_f64().unwrap();
    let exact = serial_share_of_burners(&run.processes(), burn.as_str(), wall);
    eprintln!("burners: serial_share {serial:.3}, from the burners' lifetimes {exact:.3}");
    assert!(
        serial <= 0.1 && (serial - exact).abs() <= 0.1,
        "serial_share {serial}, from the burners' lifetimes {exact}: {time}"
    );
    let wanted = time["avg_parallelism"].as_f64().unwrap();
    assert!(wanted >= 1.5 * cores as f64, "{time}");
}

/// A command of one process is its own path, from its exec to its end: the wait of the held
/// child while montrace loaded its programs (before the exec) is not the command's time, so the
/// path is not longer than `command_wall_s` (it was by the whole load, e.g. 0.11 s for a
/// no-op `make` of 5 ms), and it is at least the sleep.
#[test]
fn the_path_of_one_process_starts_at_its_exec() {
    tests::require_root();
    let run = tests::launch_montrace(&[], &["sleep", "0.3"]).run();
    run.assert_code(0);
    let info = run.run_json();
    let time = &info["time"];
    let wall = info["command_wall_s"].as_f64().unwrap();
    let path = time["critical_path_s"].as_f64().unwrap();
    assert_eq!(time["critical_path_steps"], 1, "{time}");
    assert_eq!(time["critical_path"][0]["start_s"], 0.0, "{time}");
    assert!(
        path >= 0.3 && path <= wall,
        "path {path} s, command wall {wall} s: {time}"
    );
    let startup_ms = info["startup_ms"].as_f64().unwrap();
    assert!(startup_ms > 0.0, "{info}");
}

fn expected_steps_for_report(burn: &str) -> Vec<String> {
    ["A", "B", "C"]
        .iter()
        .map(|n| format!("{} 300 {n}", burn.replace('_', "\\_")))
        .collect()
}

/// The share of the command's wall time (`wall_s`, ending when the root process ended) with at
/// most one burner alive, from their exact start and end times.
fn serial_share_of_burners(rows: &[tests::Proc], burn: &str, wall_s: f64) -> f64 {
    let root = rows.iter().min_by_key(|p| p.start_time).unwrap();
    let end = root.end_time.unwrap();
    let start = end - (wall_s * 1e9) as i64;
    let mut changes: Vec<(i64, i32)> = rows
        .iter()
        .filter(|p| p.filename.as_deref() == Some(burn))
        .flat_map(|p| [(p.start_time, 1), (p.end_time.unwrap(), -1)])
        .collect();
    changes.sort();
    let (mut alive, mut last, mut parallel) = (0, start, 0i64);
    for (t, change) in changes {
        let t = t.clamp(start, end);
        if alive >= 2 {
            parallel += t - last;
        }
        (alive, last) = (alive + change, t);
    }
    1.0 - parallel as f64 / (end - start) as f64
}
