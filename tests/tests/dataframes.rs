//! docs/schema.md's Python lines work as written: pandas (one line, with a glob) and polars read
//! a run while it is running (tables in parts) and once it has finished, and the timestamp
//! columns are UTC datetimes both take as they are (schema version 3); Spark, with its default
//! settings, reads them as `TimestampType`.
use std::process::Command;

use tests::{launch_montrace, run_with_timeout, Finished, TIMEOUT};

/// Runs the docs' pandas and polars reads of `run`, printing rows, the type of `time`, and the
/// span of the samples in seconds.
fn read_with_pandas_and_polars(run: &std::path::Path) -> Finished {
    let script = format!(
        r#"
import glob, pandas as pd, polars as pl
run = "{run}"
samples = pd.read_parquet(glob.glob(f"{{run}}/**/samples*.parquet", recursive=True))
samples_pl = pl.read_parquet(f"{{run}}/**/samples*.parquet")
wall_s = (samples.time.max() - samples.time.min()).total_seconds()
print("pandas", len(samples), str(samples.time.dtype).replace(" ", ""), wall_s)
print("polars", samples_pl.height, str(samples_pl.schema["time"]).replace(" ", ""))
"#,
        run = run.display()
    );
    run_with_timeout(Command::new("python3").args(["-c", &script]), TIMEOUT)
}

fn figures(out: &Finished, tool: &str) -> Vec<String> {
    out.stdout
        .lines()
        .find(|l| l.starts_with(tool))
        .unwrap_or_else(|| panic!("no {tool} line: {out:?}"))
        .split_whitespace()
        .map(String::from)
        .collect()
}

#[test]
fn pandas_and_polars_read_a_running_and_a_finished_run() {
    // The command runs at least 1.5 s, then until the test has read the running run (it creates
    // `done`), so the reads never race the run's end, however slow Python starts.
    let flag_dir = tempfile::tempdir().unwrap();
    let done = flag_dir.path().join("done");
    let script = format!(
        "sleep 1.5; while [ ! -e '{}' ]; do sleep 0.05; done",
        done.display()
    );
    // Ahead of the machine (nice -20 in an autogroup of its own): the reads while running find
    // their parts soon.
    let launch = launch_montrace(
        &["--interval", "50ms", "--flush-interval", "200ms"],
        &["sh", "-c", &script],
    )
    .ahead_of_the_machine();
    let dir = launch.dir();
    let mut while_running = None;
    let run = launch.during(|_| {
        // Parts of samples are closed every 200 ms: read them while the command runs, once two
        // are there.
        let parts = dir.join("samples.parts");
        let deadline = std::time::Instant::now() + TIMEOUT;
        while std::fs::read_dir(&parts).map_or(0, |d| d.count()) < 2 {
            assert!(
                std::time::Instant::now() < deadline,
                "no parts in {parts:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        while_running = Some(read_with_pandas_and_polars(&dir));
        std::fs::write(&done, "").unwrap();
    });
    run.assert_code(0);
    let running = while_running.unwrap();
    assert_eq!(running.code(), 0, "the reads while running: {running:?}");
    let finished = read_with_pandas_and_polars(&dir);
    assert_eq!(
        finished.code(),
        0,
        "the reads of the finished run: {finished:?}"
    );
    for (out, still_running) in [(&running, true), (&finished, false)] {
        let pandas = figures(out, "pandas");
        let polars = figures(out, "polars");
        assert_eq!(
            pandas[2], "datetime64[us,UTC]",
            "UTC, with the zone: {out:?}"
        );
        assert_eq!(
            polars[2], "Datetime(time_unit='us',time_zone='UTC')",
            "{out:?}"
        );
        let (pandas_rows, polars_rows): (u64, u64) =
            (pandas[1].parse().unwrap(), polars[1].parse().unwrap());
        assert!(pandas_rows > 0, "{out:?}");
        if still_running {
            // polars reads after pandas, and a part may have been closed in between.
            assert!(pandas_rows <= polars_rows, "rows only grow: {out:?}");
        } else {
            assert_eq!(pandas_rows, polars_rows, "the same rows: {out:?}");
        }
    }
    let rows = |out: &Finished| figures(out, "pandas")[1].parse::<u64>().unwrap();
    assert!(rows(&running) < rows(&finished), "{running:?} {finished:?}");
    assert_eq!(rows(&finished), run.samples().len() as u64);
    // pandas takes the times as they are: the span it computes is the samples' own, to the
    // microsecond the column keeps. They lie within the command's life and end with the root's
    // exit row, at its end; the command lived at least its 1.5 s sleep (nanosleep never returns
    // early). Not "within 0.3 s of the command's wall time": how soon after the command's start
    // the first sweep comes is the machine's.
    let span: f64 = figures(&finished, "pandas")[3].parse().unwrap();
    let samples = run.samples();
    let times: Vec<i64> = samples.iter().map(|s| s.time).collect();
    let (first, last) = (*times.iter().min().unwrap(), *times.iter().max().unwrap());
    let exact = (last - first) as f64 / 1e9;
    let rows = run.processes();
    let root = run.root(&rows);
    let end = root.end_time.unwrap();
    let exit_row = samples
        .iter()
        .any(|s| s.is_of(root) && s.source == "exit" && s.time == end);
    assert!(
        (span - exact).abs() < 2e-6
            && first >= root.start_time
            && last == end
            && exit_row
            && end - root.start_time >= 1_500_000_000,
        "pandas: samples span {span} s; they span {exact} s from {first} to {last}, the root \
         lived from {} to {end}: {finished:?}",
        root.start_time
    );
}

/// Reads processes.parquet and samples.parquet of a run (argv 1) with Spark in local mode and
/// its default settings (no `spark.sql.legacy.parquet.nanosAsLong`), as JSON: the types of the
/// time columns and their twins, the samples that join their process on (pid, start_time), and
/// the earliest start in microseconds since the epoch.
const SPARK_READ: &str = r#"
import json, sys
from pyspark.sql import SparkSession, functions as F
spark = (SparkSession.builder.master("local[1]").appName("montrace-timestamps-test")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .getOrCreate())
spark.sparkContext.setLogLevel("ERROR")
processes = spark.read.parquet(sys.argv[1] + "/processes.parquet")
samples = spark.read.parquet(sys.argv[1] + "/samples.parquet")
types = {f"{table}.{f.name}": f.dataType.simpleString()
         for table, df in (("processes", processes), ("samples", samples))
         for f in df.schema.fields if "time" in f.name and "cpu" not in f.name}
joined = samples.join(processes, ["pid", "start_time"]).count()
first = processes.agg(F.min(F.unix_micros("start_time")).alias("us")).collect()[0]["us"]
print("RESULT " + json.dumps({"types": types, "samples": samples.count(), "joined": joined,
                              "first_start_us": first}))
spark.stop()
"#;

/// Spark 3/4 with its default settings reads montrace's time columns as `timestamp` (UTC) and
/// their exact twins as `bigint`; samples join their process on the timestamp identity, and
/// the earliest start is the exact one cut to the microsecond.
#[test]
fn spark_reads_the_times_as_timestamps_with_default_settings() {
    let run = launch_montrace(
        &["--interval", "50ms"],
        &["sh", "-c", "/bin/true; sleep 0.3; /bin/true"],
    )
    .run();
    run.assert_code(0);
    // Spark's JVM alone takes 20 s to start on a busy 2-core machine: a bound for a hung Spark,
    // three times the harness's, not a timing assertion.
    let spark = run_with_timeout(
        Command::new("python3")
            .args(["-c", SPARK_READ, run.dir.to_str().unwrap()])
            .env("PYSPARK_PYTHON", "python3"),
        3 * tests::run_timeout(),
    );
    assert_eq!(spark.code(), 0, "Spark in local mode: {spark:?}");
    let out = spark.stdout;
    let line = out
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .unwrap_or_else(|| panic!("no result from Spark: {out}"));
    let spark: serde_json::Value = serde_json::from_str(line).unwrap();
    let expected = serde_json::json!({
        "processes.start_time": "timestamp",
        "processes.parent_start_time": "timestamp",
        "processes.end_time": "timestamp",
        "processes.start_time_ns": "bigint",
        "processes.parent_start_time_ns": "bigint",
        "processes.end_time_ns": "bigint",
        "samples.time": "timestamp",
        "samples.start_time": "timestamp",
        "samples.time_ns": "bigint",
        "samples.start_time_ns": "bigint",
    });
    assert_eq!(spark["types"], expected, "{spark}");
    let samples = run.samples();
    // Timing: the tree lives at least the 300 ms of its `sleep` (nanosleep never returns early);
    // sweeps come at once and 50 ms after each other, about 7; a busy machine delays them, never
    // skips one. 4 needs montrace on a CPU 4 times in 300 ms.
    assert!(samples.len() >= 4, "{samples:?}");
    assert_eq!(spark["samples"].as_u64(), Some(samples.len() as u64));
    assert_eq!(
        spark["joined"].as_u64(),
        Some(samples.len() as u64),
        "{spark}"
    );
    let first = run.processes().iter().map(|p| p.start_time).min().unwrap();
    assert_eq!(
        spark["first_start_us"].as_i64(),
        Some(first.div_euclid(1_000)),
        "{spark}"
    );
}
