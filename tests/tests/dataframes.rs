//! docs/schema.md's Python lines work as written: pandas (one line, with a glob) and polars read
//! a run while it is running (tables in parts) and once it has finished, and the timestamp
//! columns are plain UTC datetimes both take as they are (schema version 2).
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
print("pandas", len(samples), samples.time.dtype, wall_s)
print("polars", samples_pl.height, samples_pl.schema["time"])
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
    // Ahead of the machine: the span check below relies on montrace's sweeps keeping their
    // 50 ms timer within 0.3 s, which a CPU-weight of nice -20 gives it against other work.
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
        assert_eq!(pandas[2], "datetime64[ns]", "UTC without a zone: {out:?}");
        assert_eq!(
            polars[2..4],
            ["Datetime(time_unit='ns',", "time_zone=None)"],
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
    // Samples every 50 ms over the whole time the command ran (command_wall_s in run.json).
    let wall_s = run.run_json()["command_wall_s"]
        .as_f64()
        .unwrap_or_else(|| panic!("no command_wall_s in run.json: {}", run.run_json()));
    let span: f64 = figures(&finished, "pandas")[3].parse().unwrap();
    assert!(
        span > 1.4 && (span - wall_s).abs() < 0.3,
        "samples span {span} s, the command ran {wall_s} s: {finished:?}"
    );
}
