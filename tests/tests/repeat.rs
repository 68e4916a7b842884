//! `--repeat N --warmup K`: K warm-up runs, then N measured ones, each a run directory of its
//! own; summary.json holds the measured ones and their statistics.
use tests::{read_json, run_montrace};

#[test]
fn repeat_writes_stats_for_each_repetition() {
    let run = run_montrace(&["--repeat", "3", "--warmup", "1"], &["sh", "-c", "exit 0"]);
    run.assert_code(0);
    let summary = run.summary_json();
    assert_eq!(summary["warmup"], 1, "{summary}");
    assert_eq!(summary["exit_status"], 0, "{summary}");
    assert_eq!(summary["lost_events"], 0, "{summary}");
    assert_eq!(
        summary["argv"],
        serde_json::json!(["sh", "-c", "exit 0"]),
        "{summary}"
    );
    let repetitions = summary["repetitions"].as_array().expect("repetitions");
    let dirs: Vec<&str> = repetitions
        .iter()
        .map(|r| r["run_dir"].as_str().unwrap())
        .collect();
    assert_eq!(
        dirs,
        ["rep-001", "rep-002", "rep-003"],
        "the warm-up is not a repetition: {summary}"
    );

    // Each repetition is a complete run directory, and summary.json has its figures.
    let mut cpu = Vec::new();
    for repetition in repetitions {
        let dir = run.dir.join(repetition["run_dir"].as_str().unwrap());
        for file in [
            "processes.parquet",
            "events.parquet",
            "samples.parquet",
            "system.parquet",
        ] {
            assert!(dir.join(file).is_file(), "{} lacks {file}", dir.display());
        }
        let json = read_json(&dir.join("run.json")).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(json["exit_status"], 0, "{json}");
        assert_eq!(repetition["exit_status"], 0, "{repetition}");
        let metrics = &repetition["metrics"];
        assert_eq!(metrics["processes"], 1.0, "one `sh`: {repetition}");
        let cpu_ns = json["totals"]["cpu_user_ns"].as_u64().unwrap()
            + json["totals"]["cpu_system_ns"].as_u64().unwrap();
        assert_eq!(
            metrics["cpu_s"].as_f64(),
            Some(cpu_ns as f64 / 1e9),
            "summary.json's cpu_s is the repetition's run.json totals: {repetition}\n{json}"
        );
        cpu.push(cpu_ns as f64 / 1e9);
    }
    let warmup = run.dir.join("warmup-01");
    assert!(
        warmup.join("processes.parquet").is_file() && warmup.join("run.json").is_file(),
        "the warm-up run is recorded in warmup-01"
    );
    assert!(
        !run.dir.join("rep-004").exists() && !run.dir.join("warmup-02").exists(),
        "one warm-up and three repetitions, no more"
    );

    let stats = &summary["stats"];
    assert_eq!(stats["cpu_s"]["n"], 3, "{summary}");
    let mean = cpu.iter().sum::<f64>() / 3.0;
    let mut sorted = cpu.clone();
    sorted.sort_by(f64::total_cmp);
    eprintln!("CPU of the three repetitions: {cpu:?} s, mean {mean}");
    assert!((stats["cpu_s"]["mean"].as_f64().unwrap() - mean).abs() < 1e-12);
    assert_eq!(stats["cpu_s"]["median"].as_f64(), Some(sorted[1]));
    assert_eq!(stats["cpu_s"]["min"].as_f64(), Some(sorted[0]));
    assert_eq!(stats["cpu_s"]["max"].as_f64(), Some(sorted[2]));
    assert_eq!(stats["processes"]["n"], 3, "{summary}");
    assert_eq!(stats["processes"]["mean"], 1.0, "{summary}");
    assert_eq!(stats["processes"]["stddev"], 0.0, "{summary}");
    assert_eq!(stats["wall_s"]["n"], 3, "{summary}");
}
