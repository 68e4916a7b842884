//! `--stream`: the run as it goes, one JSON object per line, readable while the run goes, with
//! one sweep line per row of system.parquet, a start and an exit line per process, the marks,
//! and a final line; a stream path that exists already fails before the command starts.
use std::process::Command;

use tests::{launch_montrace, montrace_bin, require_root, run_with_timeout, TIMEOUT};

fn lines(text: &str) -> Vec<serde_json::Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

fn of_type<'a>(lines: &'a [serde_json::Value], kind: &str) -> Vec<&'a serde_json::Value> {
    lines.iter().filter(|l| l["type"] == kind).collect()
}

#[test]
fn the_stream_has_every_sweep_process_and_mark_and_a_final_line() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("stream.jsonl");
    let montrace = montrace_bin();
    // The command ends only once the test has read the stream while it ran (it creates `done`).
    let done = tmp.path().join("done");
    let script = format!(
        "for i in 1 2 3 4 5; do /bin/true; done; {} mark half; \
         while [ ! -e '{}' ]; do sleep 0.05; done",
        montrace.display(),
        done.display()
    );
    let launch = launch_montrace(
        &["--interval", "100ms", "--stream", path.to_str().unwrap()],
        &["sh", "-c", &script],
    );
    let mut while_running = String::new();
    let run = launch.during(|_| {
        // Wait for two sweeps and the mark, then read what is there while the command runs.
        let deadline = std::time::Instant::now() + TIMEOUT;
        loop {
            while_running = std::fs::read_to_string(&path).unwrap_or_default();
            let sweeps = while_running.matches(r#""type":"sweep""#).count();
            if sweeps >= 2 && while_running.contains(r#""type":"mark""#) {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{while_running}");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::fs::write(&done, "").unwrap();
    });
    run.assert_code(0);
    // While the run went: whole lines already, each valid JSON, and no final line yet.
    assert!(while_running.ends_with('\n'), "{while_running}");
    let early = lines(&while_running);
    assert!(of_type(&early, "sweep").len() >= 2, "{while_running}");
    assert!(of_type(&early, "end").is_empty());

    let all = lines(&std::fs::read_to_string(&path).unwrap());
    assert!(all.iter().all(|l| l["v"] == 1));
    let processes = run.processes();
    let starts = of_type(&all, "start");
    let exits = of_type(&all, "exit");
    assert_eq!(starts.len(), processes.len(), "one start line per process");
    assert_eq!(exits.len(), processes.len(), "one exit line per process");
    for p in &processes {
        assert!(
            starts.iter().any(|s| s["pid"] == p.pid),
            "no start line for {p:?}"
        );
    }
    // One sweep line per row of system.parquet, at its time (the line's is cut to microseconds),
    // in order: a sweep that found no process of the tree still writes both.
    let system: Vec<i64> = run.system_times().iter().map(|t| t / 1000 * 1000).collect();
    let sweeps: Vec<i64> = of_type(&all, "sweep")
        .iter()
        .map(|l| tests::rfc3339_ns(l["time"].as_str().unwrap()))
        .collect();
    // No race: the command ended only after the test had seen two sweep lines.
    assert!(system.len() >= 2, "{system:?}");
    assert_eq!(sweeps, system, "one sweep line per row of system.parquet");
    let marks = of_type(&all, "mark");
    assert_eq!(marks.len(), 1);
    assert_eq!(marks[0]["label"], "half");
    let last = all.last().unwrap();
    assert_eq!(
        (&last["type"], &last["final"]),
        (&"end".into(), &true.into())
    );
    assert_eq!(last["processes_started"], processes.len());
    assert_eq!(last["exit_status"], 0);
}

#[test]
fn a_stream_path_that_exists_fails_before_the_command_starts() {
    require_root();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("taken.jsonl");
    std::fs::write(&path, "someone's file\n").unwrap();
    let out = tmp.path().join("run");
    let marker = tmp.path().join("ran");
    let run = run_with_timeout(
        Command::new(montrace_bin())
            .args(["run", "--no-report", "--stream"])
            .arg(&path)
            .arg("--out")
            .arg(&out)
            .args(["--", "touch"])
            .arg(&marker),
        TIMEOUT,
    );
    assert_eq!(run.code(), 125, "{run:?}");
    assert!(run.stderr.contains("--stream writes a new file"), "{run:?}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "someone's file\n");
    assert!(!marker.exists(), "the command did not run");
    assert!(!out.exists(), "no run directory");
}
