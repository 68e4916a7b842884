//! `montrace publish RUN... DEST`: run directories into one Hive-partitioned dataset that DuckDB,
//! Spark and Trino read as it is:
//!
//! ```text
//! DEST/<table>/date=YYYY-MM-DD/host=HOST/run_id=ID/part-N.parquet   (processes, events, ...)
//! DEST/runs/date=YYYY-MM-DD/host=HOST/run_id=ID/part-0.parquet        (one row: the run)
//! ```
//!
//! Each file is written under a hidden temporary name and renamed into place, so a reader never
//! sees half a file; the `runs` row of a run is written last, so a run whose publishing was
//! interrupted has tables but no `runs` row, and readers that join on `runs` (docs/fleet.md) do
//! not see it. Publishing a run whose `runs` row exists does nothing: publishing twice never
//! duplicates. Re-publishing an interrupted run replaces its files.
//!
//! The layout decisions (partition values, the run's row) are pure functions ([`layout_of`],
//! [`run_record`]); copying is the thin edge.
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _};

use crate::store::records::RunRecord;
use crate::store::run_json::{self, RunInfo};
use crate::store::schema;

/// The tables of a run directory a dataset holds, by file name.
const TABLES: [&str; 7] = [
    schema::PROCESSES_FILE,
    schema::EVENTS_FILE,
    schema::SAMPLES_FILE,
    schema::SYSTEM_FILE,
    schema::MARKS_FILE,
    schema::GPU_FILE,
    schema::GPU_PROCESSES_FILE,
];

/// Where one run goes in a dataset: its partition values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    pub date: String,
    pub host: String,
    pub run_id: String,
}

impl Layout {
    /// `table/date=.../host=.../run_id=...` under `dest`.
    pub fn dir(&self, dest: &Path, table: &str) -> PathBuf {
        dest.join(self.key(table, ""))
    }

    /// `table/date=.../host=.../run_id=.../file`: the path of a file inside the dataset.
    pub fn key(&self, table: &str, file: &str) -> String {
        let dir = format!(
            "{table}/date={}/host={}/run_id={}",
            self.date, self.host, self.run_id
        );
        if file.is_empty() {
            dir
        } else {
            format!("{dir}/{file}")
        }
    }
}

/// Where a dataset lives: a directory, or a bucket (and prefix) of an object store.
pub enum Sink {
    Dir(PathBuf),
    Store {
        store: Box<dyn object_store::ObjectStore>,
        prefix: object_store::path::Path,
        runtime: tokio::runtime::Runtime,
    },
}

/// The object stores `DEST` may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// `s3://`: AWS S3 and S3-compatible servers.
    S3,
    /// `gs://`: Google Cloud Storage.
    Gcs,
    /// `az://`: Azure Blob Storage (the bucket is the container).
    Azure,
}

/// An object store destination: `SCHEME://BUCKET/PREFIX`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreUrl {
    pub kind: StoreKind,
    pub bucket: String,
    pub prefix: String,
}

/// `dest` as an object store destination; `None` for a directory; an error for a URL with no
/// bucket.
pub fn store_url(dest: &str) -> anyhow::Result<Option<StoreUrl>> {
    let schemes = [
        ("s3://", StoreKind::S3),
        ("gs://", StoreKind::Gcs),
        ("az://", StoreKind::Azure),
    ];
    let Some((scheme, kind, rest)) = schemes
        .into_iter()
        .find_map(|(scheme, kind)| Some((scheme, kind, dest.strip_prefix(scheme)?)))
    else {
        return Ok(None);
    };
    let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
    if bucket.is_empty() {
        bail!("{dest}: no bucket ({scheme}BUCKET/PREFIX)");
    }
    Ok(Some(StoreUrl {
        kind,
        bucket: bucket.to_string(),
        prefix: prefix.trim_matches('/').to_string(),
    }))
}

/// The client of `url`'s store, its credentials and settings from the environment as each
/// store's own tools read them (docs/fleet.md).
fn store_client(url: &StoreUrl, dest: &str) -> anyhow::Result<Box<dyn object_store::ObjectStore>> {
    Ok(match url.kind {
        StoreKind::S3 => Box::new(
            object_store::aws::AmazonS3Builder::from_env()
                .with_bucket_name(&url.bucket)
                .build()
                .with_context(|| {
                    format!(
                        "{dest}: cannot set up the S3 client (credentials come from \
                         AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or the machine's role, the \
                         region from AWS_REGION, another endpoint from AWS_ENDPOINT)"
                    )
                })?,
        ),
        StoreKind::Gcs => Box::new(
            object_store::gcp::GoogleCloudStorageBuilder::from_env()
                .with_bucket_name(&url.bucket)
                .build()
                .with_context(|| {
                    format!(
                        "{dest}: cannot set up the Google Cloud Storage client (credentials \
                         come from GOOGLE_SERVICE_ACCOUNT, a service account's JSON file, \
                         GOOGLE_SERVICE_ACCOUNT_KEY, its text, GOOGLE_APPLICATION_CREDENTIALS, \
                         or the machine's metadata server)"
                    )
                })?,
        ),
        StoreKind::Azure => Box::new(
            object_store::azure::MicrosoftAzureBuilder::from_env()
                .with_container_name(&url.bucket)
                .build()
                .with_context(|| {
                    format!(
                        "{dest}: cannot set up the Azure Blob Storage client (the account \
                         comes from AZURE_STORAGE_ACCOUNT_NAME, credentials from \
                         AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, a service \
                         principal's AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID, \
                         or the machine's managed identity; AZURE_STORAGE_USE_EMULATOR=true \
                         for Azurite)"
                    )
                })?,
        ),
    })
}

impl Sink {
    /// `dest`: a directory, or `s3://`, `gs://` or `az://` `BUCKET/PREFIX` ([`store_client`]
    /// says where each store's credentials come from).
    pub fn open(dest: &str) -> anyhow::Result<Sink> {
        if let Some(url) = store_url(dest)? {
            let store = store_client(&url, dest)?;
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .context("starting the I/O runtime")?;
            return Ok(Sink::Store {
                store,
                prefix: object_store::path::Path::from(url.prefix.as_str()),
                runtime,
            });
        }
        let dir = PathBuf::from(dest);
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("cannot create {}", dir.display()))?;
        Ok(Sink::Dir(dir))
    }

    fn object(prefix: &object_store::path::Path, key: &str) -> object_store::path::Path {
        key.split('/')
            .fold(prefix.clone(), |path, part| path.child(part))
    }

    /// Whether the dataset holds `key`.
    pub fn exists(&self, key: &str) -> anyhow::Result<bool> {
        match self {
            Sink::Dir(dir) => Ok(dir.join(key).exists()),
            Sink::Store {
                store,
                prefix,
                runtime,
            } => match runtime.block_on(store.head(&Self::object(prefix, key))) {
                Ok(_) => Ok(true),
                Err(object_store::Error::NotFound { .. }) => Ok(false),
                Err(e) => Err(anyhow::anyhow!(e)).context(format!("cannot look up {key}")),
            },
        }
    }

    /// Puts the local file `source` at `key`, whole or not at all: in a directory under a
    /// hidden temporary name renamed into place, in a bucket with one PUT.
    pub fn put_file(&self, key: &str, source: &Path) -> anyhow::Result<()> {
        match self {
            Sink::Dir(dir) => {
                let target = dir.join(key);
                let parent = target.parent().context("a key has a directory")?;
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot create {}", parent.display()))?;
                let name = target
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("part");
                // A name of its own (created exclusively, random): two publishers of the same
                // runs at once each rename a whole copy into place, and both succeed. Removed
                // if the copy fails.
                let mut temp = tempfile::Builder::new()
                    .prefix(&format!(".{name}."))
                    .suffix(".tmp")
                    .tempfile_in(parent)
                    .with_context(|| {
                        format!("cannot create a temporary file in {}", parent.display())
                    })?;
                // A run directory is its user's: read as them (under sudo or for Slurm's
                // epilog), never through a planted link, never a FIFO.
                let mut from = crate::store::userfs::open_regular(source)
                    .with_context(|| format!("cannot read {}", source.display()))?;
                std::io::copy(&mut from, temp.as_file_mut())
                    .and_then(|_| temp.as_file().sync_data())
                    .with_context(|| {
                        format!(
                            "cannot copy {} to {}",
                            source.display(),
                            temp.path().display()
                        )
                    })?;
                temp.persist(&target)
                    .map(drop)
                    .map_err(|e| e.error)
                    .with_context(|| format!("cannot rename into {}", target.display()))
            }
            Sink::Store {
                store,
                prefix,
                runtime,
            } => {
                let bytes = crate::store::userfs::read(source)
                    .with_context(|| format!("cannot read {}", source.display()))?;
                runtime
                    .block_on(store.put(&Self::object(prefix, key), bytes.into()))
                    .map(drop)
                    .with_context(|| format!("cannot upload {key}"))
            }
        }
    }
}

/// A partition value: letters, digits, `.`, `_`, `-` kept, anything else `_` (a host name is
/// the machine's to choose, and `/` or `=` would break the layout).
fn partition_value(text: &str) -> String {
    let value: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if value.is_empty() || value.starts_with('.') {
        format!("_{value}")
    } else {
        value
    }
}

/// The date partition of a run: run.json's `start_time` must begin with a calendar date,
/// `YYYY-MM-DD`. run.json is the monitored command's to rewrite (it is in the user's run
/// directory): a `start_time` of `"/../../../x"` would otherwise name a directory outside the
/// dataset.
pub fn date_partition(start_time: &str) -> Result<String, String> {
    let date = start_time.get(..10).unwrap_or("");
    let b = date.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.len() == 10 && b[r].iter().all(u8::is_ascii_digit);
    let ok = digits(0..4)
        && b[4] == b'-'
        && digits(5..7)
        && b[7] == b'-'
        && digits(8..10)
        && (1..=12).contains(&date[5..7].parse::<u32>().unwrap_or(0))
        && (1..=31).contains(&date[8..10].parse::<u32>().unwrap_or(0));
    if ok {
        Ok(date.to_string())
    } else {
        Err(format!(
            "run.json's start_time {start_time:?} does not begin with a date (YYYY-MM-DD): not \
             a run.json montrace wrote, or one edited since; nothing of this run was published"
        ))
    }
}

/// The run's partition values: its start date (UTC), host and id. A run written before run ids
/// gets one from its start time and a hash of its start, host and command, the same at every
/// publish. Fails when the start time has no date ([`date_partition`]).
pub fn layout_of(info: &RunInfo) -> Result<Layout, String> {
    let run_id = if info.run_id.is_empty() {
        use std::hash::{Hash as _, Hasher as _};
        // FNV-1a over the identifying text: stable across montrace versions, unlike std's
        // hasher.
        let mut h = Fnv(0xcbf2_9ce4_8422_2325);
        (&info.start_time, &info.host, &info.command).hash(&mut h);
        let compact: String = info
            .start_time
            .chars()
            .take(19)
            .filter(|c| *c != '-' && *c != ':')
            .collect();
        format!("{compact}Z-{:016x}", h.finish())
    } else {
        info.run_id.clone()
    };
    Ok(Layout {
        date: date_partition(&info.start_time)?,
        host: partition_value(&info.host),
        run_id: partition_value(&run_id),
    })
}

struct Fnv(u64);

impl std::hash::Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

/// The run's row of the `runs` table.
pub fn run_record(info: &RunInfo) -> RunRecord {
    let rep = info.repetition(".");
    let metric = |name: &str| rep.metrics.get(name).copied();
    let context = info.context.clone().unwrap_or_default();
    let git = context.git.unwrap_or_default();
    let ci = context.ci.unwrap_or_default();
    let slurm = context.slurm.unwrap_or_default();
    let k8s = context.kubernetes.unwrap_or_default();
    let time = |text: &str| crate::units::parse_rfc3339(text).unwrap_or(0);
    RunRecord {
        start_time_ns: time(&info.start_time),
        end_time_ns: time(&info.end_time),
        command: info.command.clone(),
        argv: info.argv.clone(),
        labels: info.labels.clone(),
        exit_status: info.exit_status,
        tracking_mode: serde_json::to_value(info.tracking_mode)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
        montrace_version: info.montrace_version.clone(),
        kernel: info.kernel.clone(),
        cpu_model: context.cpu_model,
        cpus: (context.cpus > 0).then_some(context.cpus as u32),
        memory_bytes: context.memory_bytes,
        git_commit: git.commit,
        git_branch: git.branch,
        git_dirty: git.dirty,
        ci_system: (!ci.system.is_empty()).then_some(ci.system),
        ci_repository: ci.repository,
        ci_pipeline: ci.pipeline,
        ci_job: ci.job,
        slurm_job_id: slurm.job_id.clone(),
        slurm_array_task_id: slurm.array_task_id.clone(),
        slurm,
        k8s_namespace: k8s.namespace,
        k8s_pod: k8s.pod,
        k8s_pod_uid: k8s.pod_uid,
        k8s_container_id: k8s.container_id,
        wall_s: metric("wall_s").unwrap_or(info.duration_s),
        cpu_s: metric("cpu_s").unwrap_or(0.0),
        peak_rss_bytes: info.totals.peak_rss_bytes,
        processes: info.processes_started as u64,
        max_concurrent: info.max_concurrent as u64,
        read_bytes: info.totals.read_bytes,
        write_bytes: info.totals.write_bytes,
        critical_path_s: info.time.as_ref().map(|t| t.critical_path_s),
        lost_events: info.lost_events.total(),
        metrics: rep.metrics.clone(),
    }
}

/// What happened to one run.
#[derive(Debug, PartialEq, Eq)]
pub enum Published {
    /// Its files and its `runs` row were written (files copied).
    New { files: usize },
    /// Its `runs` row was there: nothing was written.
    Already,
}

/// The run directories a path names: itself (it has run.json), or the repetitions of a
/// `--repeat` series (`rep-*`, `warmup-*` skipped: they are not measurements).
pub fn run_dirs(path: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if run_json::exists_in(path) {
        return Ok(vec![path.to_path_buf()]);
    }
    let mut reps: Vec<PathBuf> = std::fs::read_dir(path)
        .with_context(|| format!("cannot read {}", path.display()))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rep-"))
                && run_json::exists_in(p)
        })
        .collect();
    if reps.is_empty() {
        bail!(
            "{} has no run.json: publish a finished run directory (a run whose montrace was \
             killed has none; its tables are in its *.parts directories)",
            path.display()
        );
    }
    reps.sort();
    Ok(reps)
}

/// Publishes one run directory into the dataset at `sink`.
pub fn publish_run(run: &Path, sink: &Sink) -> anyhow::Result<(Layout, Published)> {
    let path = run_json::path_in(run);
    let info = run_json::read(run).map_err(|e| match e {
        run_json::ReadError::Io(e) => anyhow::anyhow!("cannot read {}: {e}", path.display()),
        e => anyhow::anyhow!("{} is not a montrace run.json: {e}", path.display()),
    })?;
    let layout = layout_of(&info).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))?;
    let row_key = layout.key(schema::RUNS_TABLE, "part-0.parquet");
    if sink.exists(&row_key)? {
        return Ok((layout, Published::Already));
    }
    let mut files = 0;
    for table_file in TABLES {
        let table = table_file.trim_end_matches(".parquet");
        let whole = run.join(table_file);
        // A table whose merge did not happen (a failed finish) is its parts.
        let sources: Vec<PathBuf> = if whole.is_file() {
            vec![whole]
        } else {
            parts_of(&run.join(format!("{table}.parts")))
        };
        for (i, source) in sources.iter().enumerate() {
            sink.put_file(&layout.key(table, &format!("part-{i}.parquet")), source)?;
            files += 1;
        }
    }
    // Last: the row that makes the run visible to readers that join on `runs`.
    // Made with the run's owner's identity, as the row is written and read back (`userfs`).
    let staging = crate::store::userfs::as_user(tempfile::tempdir)
        .context("cannot make a temporary directory")?;
    let row_file = staging.path().join("part-0.parquet");
    let batch = schema::runs_batch(&[run_record(&info)])?;
    crate::store::writer::write_table(&row_file, schema::runs_schema(), &batch)
        .context("cannot write the run's row")?;
    sink.put_file(&row_key, &row_file)?;
    Ok((layout, Published::New { files }))
}

fn parts_of(dir: &Path) -> Vec<PathBuf> {
    let Ok(names) = crate::store::userfs::list_dir(dir) else {
        return Vec::new();
    };
    let mut parts: Vec<PathBuf> = names
        .into_iter()
        .map(|name| dir.join(name))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| !n.starts_with('.'))
        })
        .collect();
    parts.sort();
    parts
}

/// Why `dest` cannot be published to, if it cannot.
pub fn unsupported(dest: &str) -> Option<String> {
    let scheme = ["abfs://", "abfss://", "azure://", "http://", "https://"]
        .into_iter()
        .find(|s| dest.starts_with(*s))?;
    Some(format!(
        "{dest}: {scheme} destinations are not supported by this montrace (s3://, gs:// and \
         az://BUCKET/PREFIX are); publish to one of those, or to a directory (a local disk, NFS, \
         a mounted bucket) and sync it"
    ))
}

/// Publishes every run under `runs` into `dest`, saying what happened to each; returns how
/// many failed (`montrace publish`, `montrace run --publish`).
pub fn publish_paths(runs: &[PathBuf], dest: &str) -> anyhow::Result<usize> {
    if let Some(message) = unsupported(dest) {
        bail!(message);
    }
    let sink = Sink::open(dest)?;
    let mut failed = 0;
    for run in runs {
        let dirs = match run_dirs(run) {
            Ok(dirs) => dirs,
            Err(err) => {
                crate::say!("montrace: error: {err:#}");
                failed += 1;
                continue;
            }
        };
        for dir in dirs {
            match publish_run(&dir, &sink) {
                Ok((layout, Published::New { files })) => crate::say!(
                    "montrace: published {} as run_id={} (host={}, date={}, {files} files)",
                    dir.display(),
                    layout.run_id,
                    layout.host,
                    layout.date
                ),
                Ok((layout, Published::Already)) => crate::say!(
                    "montrace: {} is already published (run_id={}): nothing written",
                    dir.display(),
                    layout.run_id
                ),
                Err(err) => {
                    crate::say!(
                        "montrace: error: publishing {}: {err:#}. Readers that join on `runs` do \
                         not see it; publish it again once fixed",
                        dir.display()
                    );
                    failed += 1;
                }
            }
        }
    }
    Ok(failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info() -> RunInfo {
        let text = r#"{"schema_version":2,"montrace_version":"0.1.0","command":"make -j2",
            "argv":["make","-j2"],"executable":"/usr/bin/make",
            "start_time":"2026-11-24T09:53:00.123456Z","end_time":"2026-11-24T09:53:02.000000Z",
            "duration_s":2.0,"command_wall_s":1.8,"host":"ci/7 box","kernel":"6.18",
            "tracking_mode":"tp_btf","exit_code":0,"exit_signal":null,"exit_status":0,
            "lost_events":{},"vanished_processes":0,"processes_started":12,"max_concurrent":3,
            "totals":{"cpu_user_ns":1000000000,"cpu_system_ns":500000000,"peak_rss_bytes":1024,
                      "read_bytes":1,"write_bytes":2},
            "startup_ms":50.0,"ebpf_load_ms":20.0,"uid":0,"gid":0,"limit_breach":null,
            "out_dir":"/tmp/r","recording_error":null,
            "run_id":"20261124T095300Z-00000000000000aa","labels":{"branch":"main"},
            "context":{"host":"ci/7 box","kernel":"6.18","cpus":2,
                       "git":{"commit":"abc","branch":"main","dirty":false},
                       "ci":{"system":"github","pipeline":"42"}}}"#;
        serde_json::from_str(text).expect("a run.json")
    }

    #[test]
    fn a_run_is_filed_under_its_date_host_and_id() {
        let layout = layout_of(&info()).unwrap();
        assert_eq!(
            layout,
            Layout {
                date: "2026-11-24".into(),
                host: "ci_7_box".into(),
                run_id: "20261124T095300Z-00000000000000aa".into(),
            }
        );
        assert_eq!(
            layout.dir(Path::new("/d"), "processes"),
            Path::new("/d/processes/date=2026-11-24/host=ci_7_box/run_id=20261124T095300Z-00000000000000aa")
        );
        // An older run without an id gets the same one at every publish.
        let mut old = info();
        old.run_id.clear();
        let (a, b) = (layout_of(&old).unwrap(), layout_of(&old).unwrap());
        assert_eq!(a, b);
        assert!(a.run_id.starts_with("20261124T095300Z-"), "{a:?}");
        old.command = "make -j4".into();
        assert_ne!(layout_of(&old).unwrap().run_id, a.run_id);
        assert_eq!(partition_value("../x"), "_.._x");
        assert_eq!(partition_value(""), "_");
    }

    #[test]
    fn a_start_time_without_a_date_is_refused() {
        assert_eq!(
            date_partition("2026-11-24T09:53:00Z").unwrap(),
            "2026-11-24"
        );
        for bad in [
            "/../../../",
            "../../../../etc/x",
            "2026-11-2",
            "",
            "2026-13-01T00:00:00Z",
            "2026-00-01T00:00:00Z",
            "2026-11-32T00:00:00Z",
            "2026/11/24T00:00:00Z",
            "２０２６-11-24",
            "2026-1a-24T00:00:00Z",
        ] {
            assert!(date_partition(bad).is_err(), "{bad:?}");
        }
        let mut hostile = info();
        hostile.start_time = "/../../../".into();
        assert!(layout_of(&hostile).unwrap_err().contains("YYYY-MM-DD"));
    }

    #[test]
    fn object_store_destinations_name_a_store_a_bucket_and_a_prefix() {
        let url = |dest: &str| store_url(dest).unwrap();
        assert_eq!(
            url("s3://fleet/montrace/"),
            Some(StoreUrl {
                kind: StoreKind::S3,
                bucket: "fleet".into(),
                prefix: "montrace".into()
            })
        );
        assert_eq!(
            url("gs://fleet"),
            Some(StoreUrl {
                kind: StoreKind::Gcs,
                bucket: "fleet".into(),
                prefix: String::new()
            })
        );
        assert_eq!(
            url("az://runs/a/b"),
            Some(StoreUrl {
                kind: StoreKind::Azure,
                bucket: "runs".into(),
                prefix: "a/b".into()
            })
        );
        assert_eq!(url("/data/montrace"), None);
        assert_eq!(url("gs:/x"), None);
        let err = store_url("az:///x").unwrap_err().to_string();
        assert!(err.contains("no bucket (az://BUCKET/PREFIX)"), "{err}");
        assert!(unsupported("abfs://c@a.dfs.core.windows.net/x").is_some());
        assert!(unsupported("gs://fleet").is_none());
    }

    #[test]
    fn the_runs_row_holds_labels_context_and_headline_figures() {
        let r = run_record(&info());
        assert_eq!(r.labels.get("branch").map(String::as_str), Some("main"));
        assert_eq!(r.git_commit.as_deref(), Some("abc"));
        assert_eq!(r.git_dirty, Some(false));
        assert_eq!(r.ci_system.as_deref(), Some("github"));
        assert_eq!(r.cpus, Some(2));
        assert_eq!((r.wall_s, r.cpu_s), (1.8, 1.5));
        assert_eq!((r.processes, r.max_concurrent), (12, 3));
        assert_eq!(r.tracking_mode, "tp_btf");
        assert_eq!(r.metrics.get("cpu_user_s"), Some(&1.0));
        assert_eq!(
            r.end_time_ns - r.start_time_ns,
            2_000_000_000 - 123_456_000,
            "times parsed"
        );
        let batch = schema::runs_batch(&[r]).unwrap();
        assert_eq!(batch.num_rows(), 1);
        assert_eq!(batch.schema(), schema::runs_schema());
    }
}
