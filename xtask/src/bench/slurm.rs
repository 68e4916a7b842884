//! Section 14: Slurm, the cost per job (issue 34), on the real daemons of the Slurm tests. The
//! cluster is tests/src/slurm.rs's `Cluster` (munged, slurmctld and slurmd on 127.0.0.1, the
//! SPANK plugin, a node agent, the epilog publishing into a dataset), driven by the measurement
//! test `cost_per_job` of tests/tests/slurm.rs, which asserts that every job was recorded and
//! every run published, and writes its raw measurements as JSON (`$MONTRACE_BENCH_OUT`); this
//! module runs it and renders the section from that JSON. Running the test rather than a copy of
//! the fixture keeps one set-up of the cluster, and xtask free of the tests' dependencies.
use super::report::{Figure, Section};
use super::stats::{median, min_max, sig};
use super::tools::read_json;
use super::Ctx;
use crate::util;
use anyhow::{Context as _, Result};
use serde_json::Value;

pub fn measure(ctx: &Ctx) -> Result<Vec<Section>> {
    let jobs = ctx.plan.reps * 4;
    ctx.progress(&format!(
        "14. slurm: a one-node cluster, {jobs} jobs with montrace and {jobs} without, interleaved"
    ));
    let out = ctx.tools.work.join("slurm-cost.json");
    let _ = std::fs::remove_file(&out);
    util::check_quietly(
        util::cargo()
            .args(["test", "-p", "tests", "--test", "slurm", "--"])
            .args(["--ignored", "--exact", "cost_per_job", "--test-threads=1"])
            .env("MONTRACE_BIN", &ctx.tools.montrace)
            .env("MONTRACE_BENCH_OUT", &out)
            .env("MONTRACE_BENCH_JOBS", jobs.to_string()),
        ctx.verbose,
    )
    .context("the measurement test `cost_per_job` of tests/tests/slurm.rs failed")?;
    let raw = read_json(&out)?;
    Ok(vec![section(&raw)?])
}

/// Each field `key` of the objects of `list`, as numbers (absent ones left out).
fn column(list: &Value, key: &str) -> Vec<f64> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m[key].as_f64())
        .collect()
}

/// `with` less `without`, pair by pair (the jobs alternate: the i-th of each ran side by side).
fn paired(with: &[f64], without: &[f64]) -> Vec<f64> {
    with.iter().zip(without).map(|(w, o)| w - o).collect()
}

/// How section 14 was measured.
fn method(jobs: f64, tasks: f64) -> String {
    format!(
        "A one-node Slurm cluster on 127.0.0.1 (Debian's munged, slurmctld and slurmd, \
         tests/src/slurm.rs), montrace's SPANK plugin, a node agent (`montrace agent`) and the \
         epilog publishing each ended job's runs into a dataset, as docs/cluster.md sets a \
         site up. {jobs:.0} jobs recorded by montrace and {jobs:.0} with `--montrace=off`, \
         alternating, each `sbatch --wait -c1 --mem=50M` of a batch script that runs 20 \
         `/bin/true` and one step, `srun -n1 /bin/true`: {tasks:.0} tasks (runs) a job. \
         `cargo xtask bench --only slurm` runs the measurement test `cost_per_job` of \
         tests/tests/slurm.rs, which asserts that every recorded job gave its two exact runs \
         and that every run was published. Job wall: from the test's `sbatch` to the start of \
         the job's epilog on the node (the job's end; `sbatch --wait` returns only at its next \
         poll, seconds later; Slurm's own start and end times have a 1-second resolution, and \
         `sacct` needs a slurmdbd this cluster lacks): Slurm's scheduling included, the same \
         both ways; step wall: `date \
         +%s%N` around the `srun` inside the job. Added: with less without, pair by pair. \
         Agent CPU: utime + stime of the agent (/proc/PID/stat) before the first job and \
         after the last run was published, over the recorded jobs (the opted-out ones ran \
         beside them). Epilog: its shell's wall and its children's CPU (`times`). Bytes: the \
         files' lengths (as `du -sb`)."
    )
}

/// Key, label, unit (`s` or `B`), every value: the figures that have one a job.
type Series = (&'static str, &'static str, &'static str, Vec<f64>);

/// The per-job figures of the raw measurements.
fn series(raw: &Value, tasks: f64) -> Vec<Series> {
    let (s_, b_) = ("s", "B");
    let (on, off) = (&raw["on"], &raw["off"]);
    let epilog = |recorded: bool, cpu: bool| -> Vec<f64> {
        raw["epilogs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["recorded"].as_bool() == Some(recorded))
            .filter_map(|e| match cpu {
                true => Some(e["user_s"].as_f64()? + e["system_s"].as_f64()?),
                false => e["wall_s"].as_f64(),
            })
            .collect()
    };
    vec![
        (
            "job_added_wall_s",
            "wall added to a job (submission to end)",
            s_,
            paired(
                &column(on, "submit_to_end_s"),
                &column(off, "submit_to_end_s"),
            ),
        ),
        (
            "step_added_wall_s",
            "wall added to a step (`srun -n1 /bin/true`)",
            s_,
            paired(&column(on, "step_s"), &column(off, "step_s")),
        ),
        (
            "job_wall_s",
            "job wall with montrace",
            s_,
            column(on, "submit_to_end_s"),
        ),
        (
            "job_wall_off_s",
            "job wall without",
            s_,
            column(off, "submit_to_end_s"),
        ),
        (
            "epilog_wall_s",
            "epilog wall, a recorded job",
            s_,
            epilog(true, false),
        ),
        (
            "epilog_cpu_s",
            "epilog CPU, a recorded job",
            s_,
            epilog(true, true),
        ),
        (
            "epilog_off_wall_s",
            "epilog wall, an opted-out job",
            s_,
            epilog(false, false),
        ),
        (
            "run_dir_bytes",
            "run directory, bytes a run",
            b_,
            column(on, "run_dir_bytes")
                .iter()
                .map(|b| b / tasks)
                .collect(),
        ),
    ]
}

/// The section from the raw measurements of `cost_per_job`.
fn section(raw: &Value) -> Result<Section> {
    let num = |key: &str| {
        raw[key]
            .as_f64()
            .with_context(|| format!("cost_per_job wrote no `{key}`"))
    };
    let jobs = num("jobs_per_way")?;
    let tasks = num("tasks_per_job")?;
    let runs = num("runs_published")?;
    let agent_cpu = num("agent_cpu_s")?;
    let dataset = num("dataset_bytes")?;
    let (s_, b_) = ("s", "B");
    let mut s = Section {
        id: "slurm".into(),
        title: "14. Slurm: the cost per job".into(),
        method: method(jobs, tasks),
        columns: vec![
            "figure".into(),
            "median".into(),
            "min – max (or the total)".into(),
        ],
        ..Section::default()
    };
    for (key, label, unit, values) in series(raw, tasks) {
        let value = median(&values);
        let range = min_max(&values).map_or("n/a".into(), |(lo, hi)| {
            format!("{} – {}", show(lo, unit), show(hi, unit))
        });
        let display = value.map_or("n/a".into(), |v| show(v, unit));
        s.rows.push(vec![label.into(), display.clone(), range]);
        s.figures
            .push(Figure::new(&format!("slurm.{key}"), label, unit, value, display).runs(values));
    }
    for (key, label, unit, total, per, what) in [
        (
            "agent_cpu_per_job_s",
            "agent CPU a recorded job",
            s_,
            agent_cpu,
            jobs,
            "jobs",
        ),
        (
            "dataset_bytes_per_run",
            "dataset, bytes a run",
            b_,
            dataset,
            runs,
            "runs",
        ),
    ] {
        let display = show(total / per, unit);
        s.rows.push(vec![
            label.into(),
            display.clone(),
            format!("{} for {per:.0} {what}", show(total, unit)),
        ]);
        s.figures.push(
            Figure::new(
                &format!("slurm.{key}"),
                label,
                unit,
                Some(total / per),
                display,
            )
            .runs(vec![total / per]),
        );
    }
    let tables: Vec<String> = raw["dataset_tables"]
        .as_object()
        .into_iter()
        .flatten()
        .filter_map(|(name, bytes)| Some(format!("{name} {}", show(bytes.as_f64()? / runs, b_))))
        .collect();
    s.notes.push(format!(
        "The dataset's bytes a run, by table: {}. What montrace adds to a job is its own start \
         and end in each of its tasks (its run directory, Parquet files, and the `scontrol` \
         question for the job's labels), and the epilog's publishing after the job's end.",
        tables.join(", ")
    ));
    Ok(s)
}

/// Seconds as ms, bytes as KB.
fn show(value: f64, unit: &str) -> String {
    match unit {
        "s" => format!("{} ms", sig(value * 1e3, 3)),
        _ => format!("{} KB", sig(value / 1e3, 3)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_section_pairs_the_jobs_and_divides_by_runs() {
        let raw = json!({
            "jobs_per_way": 2, "tasks_per_job": 2, "processes_per_job": 24, "runs_published": 4,
            "agent_cpu_s": 0.1,
            "on": [
                {"job": 1, "submit_to_end_s": 1.2, "step_s": 0.2, "run_dir_bytes": 100000},
                {"job": 3, "submit_to_end_s": 1.4, "step_s": 0.3, "run_dir_bytes": 120000},
            ],
            "off": [
                {"job": 2, "submit_to_end_s": 1.0, "step_s": 0.1, "run_dir_bytes": null},
                {"job": 4, "submit_to_end_s": 1.0, "step_s": 0.1, "run_dir_bytes": null},
            ],
            "epilogs": [
                {"job": 1, "recorded": true, "wall_s": 0.05, "user_s": 0.01, "system_s": 0.01},
                {"job": 2, "recorded": false, "wall_s": 0.01, "user_s": 0.0, "system_s": 0.0},
            ],
            "dataset_bytes": 400000,
            "dataset_tables": {"runs": 200000, "processes": 200000},
        });
        let s = section(&raw).unwrap();
        let row =
            |label: &str| -> Vec<String> { s.rows.iter().find(|r| r[0] == label).unwrap().clone() };
        assert_eq!(row("wall added to a job (submission to end)")[1], "300 ms");
        assert_eq!(
            row("wall added to a job (submission to end)")[2],
            "200 ms – 400 ms"
        );
        assert_eq!(
            row("wall added to a step (`srun -n1 /bin/true`)")[1],
            "150 ms"
        );
        assert_eq!(row("epilog CPU, a recorded job")[1], "20.0 ms");
        assert_eq!(row("run directory, bytes a run")[1], "55.0 KB");
        assert_eq!(row("agent CPU a recorded job")[1], "50.0 ms");
        assert_eq!(row("dataset, bytes a run")[1], "100 KB");
        assert!(
            s.notes[0].contains("processes 50.0 KB, runs 50.0 KB"),
            "{}",
            s.notes[0]
        );
        assert!(section(&json!({})).is_err());
    }
}
