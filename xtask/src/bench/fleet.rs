//! Section 10: a fleet's dataset. One real recorded build is copied into 1,000 runs from 50
//! hosts over 10 days (each copy's run.json given its own `run_id`, host and start), published
//! with `montrace publish` into one directory, and DuckDB answers "CPU per host per day" over
//! it, joined on `runs`: the figure the fleet issue targets (under 2 s on this machine).
use std::process::Command;
use std::time::Instant;

use anyhow::{Context as _, Result};

use super::report::{Figure, Section};
use super::{stats, tools, Ctx};

const RUNS: usize = 1000;
const HOSTS: usize = 50;
const DAYS: usize = 10;
/// The groups "CPU per host per day" answers: every host runs on every day.
const HOST_DAYS: usize = HOSTS * DAYS;

/// Where copy `i` ran: host `i % HOSTS` on day `(i / HOSTS) % DAYS` (0-based), so that each of
/// the 50 hosts runs on each of the 10 days (twice, with 1,000 runs), and the per-day groups
/// are not the per-host ones.
fn placement(i: usize) -> (usize, usize) {
    (i % HOSTS, (i / HOSTS) % DAYS)
}

/// "CPU per host per day": the query timed.
fn query(dataset: &str) -> String {
    format!(
        "SELECT r.host, r.date::VARCHAR AS day, sum(p.cpu_user_ns + p.cpu_system_ns) / 1e9 AS cpu_s, \
         count(*) AS processes \
         FROM read_parquet('{dataset}/processes/**/*.parquet', hive_partitioning = true) p \
         JOIN read_parquet('{dataset}/runs/**/*.parquet', hive_partitioning = true) r \
         USING (run_id) GROUP BY ALL ORDER BY ALL"
    )
}

pub fn measure(ctx: &Ctx) -> Result<Vec<Section>> {
    let t = &ctx.tools;
    ctx.progress("10. fleet: recording one build");
    let base = t.fresh("fleet-build");
    tools::run(&t.montrace_argv(&base, &[], &t.make_build()))?;
    let info: serde_json::Value = tools::read_json(&base.join("run.json"))?;
    let start = info["start_time"]
        .as_str()
        .context("run.json start_time")?
        .to_string();
    ctx.progress(&format!(
        "10. fleet: {RUNS} copies from {HOSTS} hosts over {DAYS} days"
    ));
    let copies = t.fresh("fleet-copies");
    std::fs::create_dir_all(&copies)?;
    let mut dirs = Vec::new();
    for i in 0..RUNS {
        let dir = copies.join(format!("run-{i:04}"));
        std::fs::create_dir_all(&dir)?;
        for entry in std::fs::read_dir(&base)? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "parquet") {
                std::fs::copy(&path, dir.join(path.file_name().context("a file name")?))?;
            }
        }
        let (host, day) = placement(i);
        let mut copy = info.clone();
        copy["run_id"] = format!("20261101T000000Z-{i:016x}").into();
        copy["host"] = format!("ci-{host:02}").into();
        copy["start_time"] = format!("2026-11-{:02}{}", 1 + day, &start[10..]).into();
        std::fs::write(dir.join("run.json"), serde_json::to_string(&copy)?)?;
        dirs.push(dir);
    }
    let dataset = t.fresh("fleet-dataset");
    let publish = Instant::now();
    let status = Command::new(&t.montrace)
        .arg("publish")
        .args(&dirs)
        .arg(&dataset)
        .stderr(std::process::Stdio::null())
        .status()?;
    anyhow::ensure!(status.success(), "montrace publish failed");
    let publish_s = publish.elapsed().as_secs_f64();
    let bytes = dir_bytes(&dataset)?;
    ctx.progress("10. fleet: DuckDB, CPU per host per day");
    let sql = query(&dataset.display().to_string());
    let mut times = Vec::new();
    let mut groups = 0;
    for _ in 0..ctx.plan.reps.min(5) {
        let started = Instant::now();
        let answer = tools::duckdb_batch(std::slice::from_ref(&sql))?;
        times.push(started.elapsed().as_secs_f64());
        groups = answer[0].len();
    }
    anyhow::ensure!(
        groups == HOST_DAYS,
        "{groups} (host, day) groups, expected {HOST_DAYS}"
    );
    let seconds = stats::median(&times);
    let met = seconds.is_some_and(|s| s < 2.0);
    let secs = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.3} s"));
    let mut s = Section {
        id: "fleet".into(),
        title: "10. A fleet's dataset".into(),
        method: format!(
            "One `make -s -j2` build of the generated project recorded by montrace, its run \
             directory copied {RUNS} times (each run.json given its own `run_id`, one of {HOSTS} \
             hosts, one of {DAYS} days: each host runs on every day, {HOST_DAYS} host-days), published with one `montrace publish` into a \
             directory; then DuckDB (Python, a fresh process each time, its start included) \
             runs `{}`, median of {} runs.",
            query("DATASET"),
            times.len()
        ),
        columns: vec!["figure".into(), "value".into(), "target".into(), "".into()],
        ..Section::default()
    };
    s.rows.push(vec![
        "DuckDB: CPU per host per day over 1,000 runs".into(),
        secs(seconds),
        "< 2 s".into(),
        if met {
            "met".into()
        } else {
            "**missed**".into()
        },
    ]);
    s.rows.push(vec![
        format!("`montrace publish` of the {RUNS} runs"),
        format!("{publish_s:.1} s"),
        String::new(),
        String::new(),
    ]);
    s.rows.push(vec![
        "dataset size".into(),
        format!(
            "{:.1} MiB ({:.0} KB a run)",
            bytes / 1048576.0,
            bytes / RUNS as f64 / 1e3
        ),
        String::new(),
        String::new(),
    ]);
    s.figures.push(
        Figure::new(
            "fleet.cpu_per_host_per_day_s",
            "DuckDB, CPU per host per day over 1,000 published runs",
            "s",
            seconds,
            secs(seconds),
        )
        .runs(times)
        .target("< 2 s", met),
    );
    Ok(vec![s])
}

fn dir_bytes(dir: &std::path::Path) -> Result<f64> {
    let mut total = 0u64;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d)? {
            let entry = entry?;
            let meta = entry.metadata()?;
            if meta.is_dir() {
                stack.push(entry.path());
            } else {
                total += meta.len();
            }
        }
    }
    Ok(total as f64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn every_host_runs_on_every_day() {
        let mut per_group: BTreeMap<(usize, usize), usize> = BTreeMap::new();
        for i in 0..RUNS {
            *per_group.entry(placement(i)).or_default() += 1;
        }
        assert_eq!(per_group.len(), HOST_DAYS);
        assert_eq!(HOST_DAYS, 500);
        // Two runs in each group: the copies are spread evenly.
        assert!(per_group.values().all(|&n| n == RUNS / HOST_DAYS));
        for host in 0..HOSTS {
            let days: BTreeSet<usize> = (0..RUNS)
                .map(placement)
                .filter(|&(h, _)| h == host)
                .map(|(_, d)| d)
                .collect();
            assert_eq!(days.len(), DAYS, "host {host}");
        }
    }
}
