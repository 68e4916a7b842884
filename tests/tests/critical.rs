//! Where the time went, for a build: a generated Makefile with a designed chain (A -> B -> C,
//! 0.3 s of CPU each) beside 20 short independent jobs, under `make -j4`. run.json's critical
//! path names exactly A, B, C in that order; the average parallelism is within 10 % of the value
//! the processes' own start and end times give; summary.json carries both as metrics; the
//! report opens with "Where the time went".
use std::process::Command;

use tests::{compile_c, run_with_timeout, Finished, TIMEOUT};

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
    let out = tmp.path().join("run");
    let run: Finished = run_with_timeout(
        Command::new(tests::montrace_bin())
            .args(["run", "--interval", "100ms", "--out"])
            .arg(&out)
            .args(["--", "make", "-s", "-j4", "-C"])
            .arg(tmp.path()),
        TIMEOUT,
    );
    assert_eq!(run.code(), 0, "{run:?}");
    let info = tests::read_json(&out.join("run.json")).unwrap();
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
    let critical = time["critical_path_s"].as_f64().unwrap();
    assert!((0.9..1.3).contains(&critical), "{time}");

    // The parallelism from the processes' own lifetimes: every burner ran (or waited for a CPU)
    // from its start to its end.
    let rows = tests::read_processes(&out);
    let burners: f64 = rows
        .iter()
        .filter(|p| p.filename.as_deref() == Some(burn.as_str()))
        .map(|p| (p.end_time.unwrap() - p.start_time) as f64 / 1e9)
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
}

fn expected_steps_for_report(burn: &str) -> Vec<String> {
    ["A", "B", "C"]
        .iter()
        .map(|n| format!("{} 300 {n}", burn.replace('_', "\\_")))
        .collect()
}
