//! One CPU total: run.json, summary.json and the report give the same tree CPU for a run, and
//! name what it includes. The exit figures of the processes that ended are exact and the same
//! everywhere; a process still running at the end (a survivor after `--linger`) has none, and
//! its sampled CPU is given apart, equal to its last sample.
use tests::launch_montrace;

/// A shell that spins briefly and leaves a child spinning for about two seconds more.
const SURVIVOR: &str = "(i=0; while [ $i -lt 1500000 ]; do i=$((i+1)); done) & \
                        i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done";

#[test]
fn a_survivor_s_cpu_is_counted_apart_and_every_file_agrees() {
    // Ahead of the machine (nice -20 in an autogroup of its own; CFS shares by weight): the
    // survivor gets a CPU while recorded, as the check of its sampled CPU below needs.
    let run = launch_montrace(
        &["--linger", "500ms", "--interval", "50ms"],
        &["sh", "-c", SURVIVOR],
    )
    .ahead_of_the_machine()
    .run();
    run.assert_code(0);
    let json = run.run_json();
    let totals = &json["totals"];
    let processes = run.processes();
    let exit_ns: u64 = processes
        .iter()
        .map(|p| p.cpu_user_ns.unwrap_or(0) + p.cpu_system_ns.unwrap_or(0))
        .sum();
    let run_json_ns =
        totals["cpu_user_ns"].as_u64().unwrap() + totals["cpu_system_ns"].as_u64().unwrap();
    assert_eq!(run_json_ns, exit_ns, "run.json: the exit figures: {totals}");
    let summary = run.summary_json();
    let cpu_s = summary["repetitions"][0]["metrics"]["cpu_s"]
        .as_f64()
        .unwrap();
    assert!(
        (cpu_s * 1e9 - exit_ns as f64).abs() < 1e3,
        "summary.json cpu_s {cpu_s} against {exit_ns} ns"
    );

    // The survivor: no exit figures; its CPU while recorded is its last sample (it started
    // during the recording, so from zero).
    let alive: Vec<_> = processes.iter().filter(|p| p.alive_at_end).collect();
    assert_eq!(alive.len(), 1, "{processes:#?}");
    assert_eq!(alive[0].cpu_user_ns, None);
    assert_eq!(totals["unfinished_processes"], 1, "{totals}");
    let last = run
        .samples()
        .into_iter()
        .filter(|s| s.is_of(alive[0]))
        .max_by_key(|s| s.time)
        .expect("the survivor was sampled");
    let unfinished = totals["unfinished_cpu_user_ns"].as_u64().unwrap()
        + totals["unfinished_cpu_system_ns"].as_u64().unwrap();
    assert_eq!(unfinished, last.cpu_ns(), "{totals}");
    // It spun while recorded: the parent's loop and the 500 ms linger, with two runnable
    // processes on a machine's CPUs ahead of other work, give it most of ~0.8 s of CPU; 100 ms
    // needs an eighth of that. (Its loop's CPU time is the machine's, so only a floor.)
    assert!(unfinished > 100_000_000, "it spun while recorded: {totals}");

    // The report's header gives both parts, labelled.
    let report = std::fs::read_to_string(run.dir.join("report.md")).unwrap();
    let line = report
        .lines()
        .find(|l| l.starts_with("- **CPU:**"))
        .unwrap_or_else(|| panic!("no CPU line in report.md:\n{report}"));
    let secs = |ns: u64| format!("{:.3} s", ns as f64 / 1e9);
    assert!(
        line.contains(&format!("{} (user", secs(exit_ns)))
            && line.contains("for the processes that ended (exit figures)")
            && line.contains(&format!(
                "+ {} sampled (while recorded) for 1 ",
                secs(unfinished)
            )),
        "{line}"
    );
}
