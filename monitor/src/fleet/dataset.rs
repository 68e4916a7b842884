//! Reading a published dataset's `runs` table back, to take a comparison's baseline from the
//! fleet (`montrace compare DEST CANDIDATE --where branch=main --last 20`). Selecting runs is a
//! pure function ([`select`]); reading the Parquet files is the thin edge ([`read_runs`]).
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use arrow_array::cast::AsArray as _;
use arrow_array::types::{Float64Type, Int32Type, UInt32Type, UInt64Type};
use arrow_array::{Array, RecordBatch};

use crate::store::schema::RUNS_TABLE;
use crate::store::summary_json::{Repetition, Summary};

/// One row of the `runs` table, with its partition values.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PublishedRun {
    pub run_id: String,
    pub host: String,
    pub start_time_ns: i64,
    pub argv: Vec<String>,
    pub command: String,
    pub labels: BTreeMap<String, String>,
    pub exit_status: i32,
    pub cpu_model: Option<String>,
    pub cpus: Option<u32>,
    pub git_branch: Option<String>,
    pub git_commit: Option<String>,
    pub ci_system: Option<String>,
    /// The summary.json metrics the row holds.
    pub metrics: BTreeMap<String, f64>,
}

/// Whether `path` is a published dataset (it has a `runs` folder).
pub fn is_dataset(path: &Path) -> bool {
    path.join(RUNS_TABLE).is_dir()
}

/// Which runs of a dataset make a baseline.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Filter {
    /// The candidate's command: only runs of the same argv (None: any command).
    pub argv: Option<Vec<String>>,
    /// `KEY=VALUE`s every run must match: a label, or one of `host`, `branch` (the label, else
    /// the checkout's branch), `commit`, `cpu_model`, `ci`.
    pub conditions: Vec<(String, String)>,
    /// The candidate's host class (CPU model and count): only runs of the same (None: any).
    pub host_class: Option<(Option<String>, Option<u32>)>,
    /// The newest this many.
    pub last: usize,
}

impl PublishedRun {
    fn field(&self, key: &str) -> Option<&str> {
        if let Some(v) = self.labels.get(key) {
            return Some(v);
        }
        match key {
            "host" => Some(&self.host),
            "branch" => self.git_branch.as_deref(),
            "commit" => self.git_commit.as_deref(),
            "cpu_model" => self.cpu_model.as_deref(),
            "ci" => self.ci_system.as_deref(),
            _ => None,
        }
    }
}

/// The runs that make the baseline, newest first: successful, of the same command and host
/// class when asked, matching every condition, at most `last`.
pub fn select<'a>(runs: &'a [PublishedRun], filter: &Filter) -> Vec<&'a PublishedRun> {
    let mut chosen: Vec<&PublishedRun> = runs
        .iter()
        .filter(|r| r.exit_status == 0)
        .filter(|r| filter.argv.as_ref().is_none_or(|argv| &r.argv == argv))
        .filter(|r| {
            filter
                .host_class
                .as_ref()
                .is_none_or(|(model, cpus)| &r.cpu_model == model && &r.cpus == cpus)
        })
        .filter(|r| {
            filter
                .conditions
                .iter()
                .all(|(k, v)| r.field(k) == Some(v.as_str()))
        })
        .collect();
    chosen.sort_by(|a, b| {
        b.start_time_ns
            .cmp(&a.start_time_ns)
            .then_with(|| b.run_id.cmp(&a.run_id))
    });
    chosen.truncate(filter.last);
    chosen
}

/// A run of the dataset as the summary.json compare reads: one repetition with the metrics its
/// row holds.
pub fn as_summary(run: &PublishedRun) -> Summary {
    let mut summary = Summary::new(
        run.command.clone(),
        run.argv.clone(),
        run.host.clone(),
        0,
        vec![Repetition {
            run_dir: format!("run_id={}", run.run_id),
            run_id: run.run_id.clone(),
            exit_status: run.exit_status,
            lost_events: 0,
            metrics: run.metrics.clone(),
            other_cpu_share: None,
        }],
        None,
    );
    summary.labels = run.labels.clone();
    // What the row says of where it ran, so that a verdict can name the baseline's commits.
    summary.context = Some(crate::fleet::context::Context {
        host: run.host.clone(),
        cpu_model: run.cpu_model.clone(),
        cpus: run.cpus.unwrap_or(0) as usize,
        git: (run.git_commit.is_some() || run.git_branch.is_some()).then(|| {
            crate::fleet::context::Git {
                commit: run.git_commit.clone(),
                branch: run.git_branch.clone(),
                dirty: None,
            }
        }),
        ..Default::default()
    });
    summary
}

/// Every row of the dataset's `runs` table.
pub fn read_runs(dest: &Path) -> anyhow::Result<Vec<PublishedRun>> {
    let mut files = Vec::new();
    collect_parquet(&dest.join(RUNS_TABLE), &mut files)?;
    let mut runs = Vec::new();
    for file in files {
        let partition = |key: &str| {
            file.components()
                .filter_map(|c| c.as_os_str().to_str())
                .find_map(|c| c.strip_prefix(&format!("{key}=")).map(str::to_owned))
                .unwrap_or_default()
        };
        let (run_id, host) = (partition("run_id"), partition("host"));
        let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&file)?,
        )?
        .build()?;
        for batch in reader {
            let batch = batch?;
            for i in 0..batch.num_rows() {
                runs.push(row_of(&batch, i, &run_id, &host)?);
            }
        }
    }
    Ok(runs)
}

fn collect_parquet(dir: &Path, files: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if name.starts_with('.') {
            continue;
        }
        if path.is_dir() {
            collect_parquet(&path, files)?;
        } else if name.ends_with(".parquet") {
            files.push(path);
        }
    }
    Ok(())
}

/// The headline metrics a `runs` row holds as columns too (its `metrics` map has them all).
const METRIC_COLUMNS: [(&str, &str); 8] = [
    ("wall_s", "wall_s"),
    ("cpu_s", "cpu_s"),
    ("peak_rss_bytes", "peak_rss_bytes"),
    ("processes", "processes"),
    ("max_concurrent", "max_concurrent"),
    ("read_bytes", "read_bytes"),
    ("write_bytes", "write_bytes"),
    ("critical_path_s", "critical_path_s"),
];

fn row_of(batch: &RecordBatch, i: usize, run_id: &str, host: &str) -> anyhow::Result<PublishedRun> {
    let column = |name: &str| {
        batch
            .column_by_name(name)
            .ok_or_else(|| anyhow::anyhow!("the runs table has no column {name}"))
    };
    let string = |name: &str| -> anyhow::Result<Option<String>> {
        let c = column(name)?.as_string::<i32>();
        Ok((!c.is_null(i)).then(|| c.value(i).to_string()))
    };
    let number = |name: &str| -> anyhow::Result<Option<f64>> {
        let c = column(name)?;
        if c.is_null(i) {
            return Ok(None);
        }
        Ok(Some(match c.data_type() {
            arrow_schema::DataType::Float64 => c.as_primitive::<Float64Type>().value(i),
            arrow_schema::DataType::UInt64 => c.as_primitive::<UInt64Type>().value(i) as f64,
            arrow_schema::DataType::UInt32 => c.as_primitive::<UInt32Type>().value(i) as f64,
            other => anyhow::bail!("runs column {name} is {other}, not a number"),
        }))
    };
    let argv_list = column("argv")?.as_list::<i32>().value(i);
    let argv = argv_list
        .as_string::<i32>()
        .iter()
        .map(|s| s.unwrap_or_default().to_string())
        .collect();
    let map = column("labels")?.as_map();
    let entries = map.value(i);
    let keys = entries.column(0).as_string::<i32>();
    let values = entries.column(1).as_string::<i32>();
    let labels = (0..entries.len())
        .map(|j| (keys.value(j).to_string(), values.value(j).to_string()))
        .collect();
    let mut metrics = BTreeMap::new();
    if let Some(all) = batch.column_by_name("metrics") {
        let entries = all.as_map().value(i);
        let keys = entries.column(0).as_string::<i32>();
        let values = entries.column(1).as_primitive::<Float64Type>();
        for j in 0..entries.len() {
            metrics.insert(keys.value(j).to_string(), values.value(j));
        }
    }
    for (metric, name) in METRIC_COLUMNS {
        if metrics.contains_key(metric) {
            continue;
        }
        if let Some(v) = number(name)? {
            metrics.insert(metric.to_string(), v);
        }
    }
    Ok(PublishedRun {
        run_id: run_id.to_string(),
        host: host.to_string(),
        // The exact twin in datasets of schema version 3, the timestamp itself before.
        start_time_ns: crate::store::read::Cols {
            batch: &batch.slice(i, 1),
            path: std::path::Path::new("runs"),
        }
        .req_times_ns("start_time")?[0],
        argv,
        command: string("command")?.unwrap_or_default(),
        labels,
        exit_status: column("exit_status")?.as_primitive::<Int32Type>().value(i),
        cpu_model: string("cpu_model")?,
        cpus: number("cpus")?.map(|c| c as u32),
        git_branch: string("git_branch")?,
        git_commit: string("git_commit")?,
        ci_system: string("ci_system")?,
        metrics,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        id: &str,
        start: i64,
        branch: &str,
        argv: &[&str],
        cpus: u32,
        status: i32,
    ) -> PublishedRun {
        PublishedRun {
            run_id: id.into(),
            host: "ci-1".into(),
            start_time_ns: start,
            argv: argv.iter().map(|s| s.to_string()).collect(),
            labels: [("branch".to_string(), branch.to_string())].into(),
            exit_status: status,
            cpu_model: Some("EPYC".into()),
            cpus: Some(cpus),
            ..PublishedRun::default()
        }
    }

    #[test]
    fn the_baseline_is_the_newest_matching_runs() {
        let make = ["make", "-j2"];
        let runs = vec![
            run("a", 1, "main", &make, 2, 0),
            run("b", 5, "main", &make, 2, 0),
            run("c", 3, "dev", &make, 2, 0),
            run("d", 4, "main", &["make", "-j8"], 2, 0),
            run("e", 6, "main", &make, 8, 0),
            run("f", 7, "main", &make, 2, 1),
            run("g", 2, "main", &make, 2, 0),
        ];
        let filter = Filter {
            argv: Some(make.iter().map(|s| s.to_string()).collect()),
            conditions: vec![("branch".into(), "main".into())],
            host_class: Some((Some("EPYC".into()), Some(2))),
            last: 2,
        };
        let ids: Vec<&str> = select(&runs, &filter)
            .iter()
            .map(|r| r.run_id.as_str())
            .collect();
        // Not dev (c), not another command (d), not another host class (e), not failed (f);
        // the newest two of a, b, g.
        assert_eq!(ids, ["b", "g"]);
        let any = Filter {
            last: 10,
            ..Filter::default()
        };
        assert_eq!(select(&runs, &any).len(), 6, "all that succeeded");
        // `branch` falls back to the checkout's branch without a label of that name.
        let mut unlabelled = run("h", 9, "x", &make, 2, 0);
        unlabelled.labels.clear();
        unlabelled.git_branch = Some("main".into());
        let only_branch = Filter {
            conditions: vec![("branch".into(), "main".into())],
            last: 1,
            ..Filter::default()
        };
        assert_eq!(select(&[unlabelled], &only_branch).len(), 1);
    }
}
