//! Loading one side of a comparison: a summary.json, a run directory, or a directory of runs.
use super::*;
use crate::store::summary_json;
// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Why there is nothing to compare.
#[derive(Debug, thiserror::Error)]
pub enum CompareError {
    /// What was passed cannot be compared (missing, not a summary, no repetitions, different
    /// commands, a bad `--max`): a usage error, exit 2.
    #[error("{0}")]
    Usage(String),
    /// A read failed for another reason (permissions, I/O): montrace's failure, exit 125.
    #[error("cannot read {}: {source}", .path.display())]
    Io { path: PathBuf, source: io::Error },
}

impl CompareError {
    pub(super) fn io(path: &Path, source: io::Error) -> CompareError {
        CompareError::Io {
            path: path.to_path_buf(),
            source,
        }
    }

    /// The same error, said of one side (`baseline: ...`).
    pub(super) fn of_side(self, side: &str) -> CompareError {
        match self {
            CompareError::Usage(message) => CompareError::Usage(format!("{side}: {message}")),
            io => io,
        }
    }
}

/// One side of a comparison: every summary.json found under the path given.
#[derive(Clone, Debug, PartialEq)]
pub struct Side {
    /// The path as given on the command line.
    pub source: PathBuf,
    /// Each summary.json's path and contents, in path order.
    pub runs: Vec<(PathBuf, Summary)>,
    /// Set by `bench`, whose two sides run two commands by design: no warning about it.
    pub different_commands_expected: bool,
    /// Taken from a published dataset (`load_dataset_side`): the verdict names its runs.
    pub from_dataset: bool,
}

impl Side {
    /// The samples of one metric: every repetition of every run.
    pub fn values(&self, metric: &str) -> Vec<f64> {
        self.runs
            .iter()
            .flat_map(|(_, s)| s.values(metric))
            .filter(|v| v.is_finite())
            .collect()
    }

    pub(super) fn samples(&self) -> usize {
        self.runs.iter().map(|(_, s)| s.repetitions.len()).sum()
    }
}

pub(super) const WHAT_TO_PASS: &str =
    "pass a run directory written by `montrace run`, its summary.json, \
                            or a directory holding several run directories";

/// Loads one side: a summary.json file; a run directory (its summary.json: all its repetitions
/// are samples); or a directory without summary.json whose sub-directories (one level down) are
/// runs, each contributing its repetitions. What the user passed wrong is a usage error; a read
/// that fails otherwise is an I/O error.
pub fn load_side(path: &Path) -> Result<Side, CompareError> {
    let meta = fs::metadata(path).map_err(|e| match e.kind() {
        io::ErrorKind::NotFound => {
            CompareError::Usage(format!("{} does not exist: {WHAT_TO_PASS}", path.display()))
        }
        _ => CompareError::io(path, e),
    })?;
    let files = if meta.is_file() {
        vec![path.to_path_buf()]
    } else if path.join(SUMMARY_FILE).is_file() {
        vec![path.join(SUMMARY_FILE)]
    } else {
        let entries = fs::read_dir(path).map_err(|e| CompareError::io(path, e))?;
        let mut files = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| CompareError::io(path, e))?;
            let file = entry.path().join(SUMMARY_FILE);
            if file.is_file() {
                files.push(file);
            }
        }
        files.sort();
        if files.is_empty() {
            return Err(CompareError::Usage(format!(
                "no {SUMMARY_FILE} in {} nor in its sub-directories: {WHAT_TO_PASS}",
                path.display()
            )));
        }
        files
    };
    let runs = files
        .into_iter()
        .map(|file| read_summary(&file).map(|summary| (file, summary)))
        .collect::<Result<Vec<_>, _>>()?;
    let side = Side {
        source: path.to_path_buf(),
        runs,
        different_commands_expected: false,
        from_dataset: false,
    };
    if side.samples() == 0 {
        return Err(CompareError::Usage(format!(
            "{} holds no measurements (no repetitions): compare runs that completed",
            path.display()
        )));
    }
    Ok(side)
}

/// The baseline from a published dataset: its newest runs of the candidate's command (unless
/// different commands are allowed) on the candidate's kind of host (unless `--any-host`),
/// matching every `--where`, at most `--last`, each a sample.
pub fn load_dataset_side(
    args: &CompareOptions,
    dataset_dir: &Path,
    candidate: &Side,
) -> Result<Side, CompareError> {
    use crate::fleet::dataset;
    let first = candidate.runs.first().map(|(_, s)| s);
    let context = first.and_then(|s| s.context.as_ref());
    let filter = dataset::Filter {
        argv: first
            .filter(|_| !args.allow_different_commands)
            .map(|s| s.argv.clone()),
        conditions: args.conditions.clone(),
        host_class: (!args.any_host).then(|| {
            (
                context.and_then(|c| c.cpu_model.clone()),
                context.map(|c| c.cpus as u32).filter(|&c| c > 0),
            )
        }),
        last: args.last as usize,
    };
    let runs = dataset::read_runs(dataset_dir).map_err(|e| {
        CompareError::Usage(format!(
            "cannot read the runs table of {}: {e:#}",
            dataset_dir.display()
        ))
    })?;
    let chosen = dataset::select(&runs, &filter);
    if chosen.is_empty() {
        return Err(CompareError::Usage(format!(
            "none of the {} runs in {} is a successful run of `{}`{}{}: loosen the selection \
             (--where, --any-host, --allow-different-commands) or publish baseline runs first",
            runs.len(),
            dataset_dir.display(),
            first.map_or("?", |s| s.command.as_str()),
            if filter.host_class.is_some() {
                " on a host with the candidate's CPU model and count"
            } else {
                ""
            },
            if args.conditions.is_empty() {
                String::new()
            } else {
                let list: Vec<String> = args
                    .conditions
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect();
                format!(" with {}", list.join(", "))
            }
        )));
    }
    Ok(Side {
        source: dataset_dir.to_path_buf(),
        runs: chosen
            .into_iter()
            .map(|r| {
                let path = dataset_dir
                    .join(crate::store::schema::RUNS_TABLE)
                    .join(format!("run_id={}", r.run_id));
                (path, dataset::as_summary(r))
            })
            .collect(),
        different_commands_expected: false,
        from_dataset: true,
    })
}

pub(super) fn read_summary(path: &Path) -> Result<Summary, CompareError> {
    summary_json::read(path).map_err(|err| match err {
        summary_json::ReadError::Io(source) => CompareError::io(path, source),
        summary_json::ReadError::NotJson(e) => CompareError::Usage(format!(
            "{} is not valid JSON ({e}): {WHAT_TO_PASS}",
            path.display()
        )),
        summary_json::ReadError::Newer { found: version, .. } => CompareError::Usage(format!(
            "{} has schema version {version}, newer than this montrace reads \
             ({SUMMARY_VERSION}): compare it with the montrace that wrote it",
            path.display()
        )),
        summary_json::ReadError::Invalid { error: e, .. } => CompareError::Usage(format!(
            "{} is not a montrace summary.json ({e}): {WHAT_TO_PASS}",
            path.display()
        )),
    })
}

/// Every run on both sides must be of one command, unless different commands are allowed.
pub fn check_commands(
    baseline: &Side,
    candidate: &Side,
    allow_different: bool,
) -> Result<(), CompareError> {
    if allow_different {
        return Ok(());
    }
    let mut runs = baseline.runs.iter().chain(&candidate.runs);
    let Some((first_path, first)) = runs.next() else {
        return Ok(());
    };
    for (path, summary) in runs {
        if summary.command != first.command {
            return Err(CompareError::Usage(format!(
                "different commands: `{}` ({}) and `{}` ({}): compare runs of the same command, \
                 or pass --allow-different-commands",
                first.command,
                first_path.display(),
                summary.command,
                path.display()
            )));
        }
    }
    Ok(())
}
