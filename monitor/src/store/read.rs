//! Reading a run directory back: the tables the report and the exports need, column by column
//! and by name, so a table with fewer columns (an older writer, a killed run, the GPU tables of
//! a machine without GPUs) still loads. A table is `T.parquet` after a clean end, or the part
//! files under `T.parts/` while a run goes or after it was killed (see docs/schema.md).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use arrow_array::cast::AsArray;
use arrow_array::types::{
    ArrowPrimitiveType, Float32Type, Float64Type, Int16Type, Int32Type, Int64Type, Int8Type,
    TimestampMicrosecondType, TimestampMillisecondType, TimestampNanosecondType,
    TimestampSecondType, UInt16Type, UInt32Type, UInt64Type, UInt8Type,
};
use arrow_array::{Array, PrimitiveArray, RecordBatch};
use arrow_schema::{DataType, TimeUnit};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::store::schema::exact_time_column;

/// Why a directory cannot be reported on: the caller turns this into exit status 2.
#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("{} does not exist: give the directory that `montrace run` wrote", .0.display())]
    Missing(PathBuf),
    #[error(
        "{} holds repetitions, not one run: give one of them, e.g. {}",
        .dir.display(),
        .example.display()
    )]
    Repetitions { dir: PathBuf, example: PathBuf },
    #[error(
        "{} is not a montrace run directory (no processes.parquet nor processes.parts/): give \
         the directory that `montrace run` wrote",
        .0.display()
    )]
    NotARun(PathBuf),
}

/// Checks that `dir` looks like a run directory before anything is read.
pub fn check_run_dir(dir: &Path) -> Result<(), RunDirError> {
    if !dir.is_dir() {
        return Err(RunDirError::Missing(dir.to_path_buf()));
    }
    if !table_files(dir, "processes").is_empty() || dir.join("processes.parts").is_dir() {
        return Ok(());
    }
    let mut reps: Vec<PathBuf> = crate::store::userfs::list_dir(dir)
        .into_iter()
        .flatten()
        .map(|name| dir.join(name))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("rep-"))
                && p.join("processes.parquet").is_file()
        })
        .collect();
    reps.sort();
    match reps.into_iter().next() {
        Some(example) => Err(RunDirError::Repetitions {
            dir: dir.to_path_buf(),
            example,
        }),
        None => Err(RunDirError::NotARun(dir.to_path_buf())),
    }
}

/// The files holding table `name` (`"samples"`): `name.parquet` after a clean end, else the
/// parts in write order; none when the table is absent.
pub fn table_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let whole = dir.join(format!("{name}.parquet"));
    if whole.is_file() {
        return vec![whole];
    }
    let parts_dir = dir.join(format!("{name}.parts"));
    let mut parts: Vec<PathBuf> = crate::store::userfs::list_dir(&parts_dir)
        .into_iter()
        .flatten()
        .map(|name| parts_dir.join(name))
        .filter(|p| p.extension().is_some_and(|e| e == "parquet"))
        .collect();
    parts.sort();
    parts
}

/// The names of the tables in a run directory (`processes`, `samples`, ...), sorted.
pub fn table_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = crate::store::userfs::list_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|name| {
            let name = name.to_str()?.to_string();
            let stem = name
                .strip_suffix(".parquet")
                .or_else(|| name.strip_suffix(".parts"))?;
            (!stem.starts_with('.')).then(|| stem.to_string())
        })
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Every batch of one file.
pub fn read_file(path: &Path) -> anyhow::Result<Vec<RecordBatch>> {
    let file = crate::store::userfs::open(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let reader = ParquetRecordBatchReaderBuilder::try_new(file)
        .and_then(|b| b.with_batch_size(65_536).build())
        .with_context(|| format!("cannot read {}", path.display()))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("cannot read {}", path.display()))
}

/// Rows per batch when a table is streamed ([`for_each_batch`]): memory stays that of one batch,
/// whatever the table's size.
pub const STREAM_BATCH_ROWS: usize = 8_192;

/// Calls `f` with each batch of table `name` in turn, reading one batch at a time: for the
/// exports, whose memory must not grow with the run.
pub fn for_each_batch(
    dir: &Path,
    name: &str,
    mut f: impl FnMut(&Cols<'_>) -> anyhow::Result<()>,
) -> anyhow::Result<()> {
    for path in table_files(dir, name) {
        let file = crate::store::userfs::open(&path)
            .with_context(|| format!("cannot open {}", path.display()))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .and_then(|b| b.with_batch_size(STREAM_BATCH_ROWS).build())
            .with_context(|| format!("cannot read {}", path.display()))?;
        for batch in reader {
            let batch = batch.with_context(|| format!("cannot read {}", path.display()))?;
            f(&Cols {
                batch: &batch,
                path: &path,
            })?;
        }
    }
    Ok(())
}

/// Every batch of table `name`, each with the file it came from (for error messages).
pub fn read_table(dir: &Path, name: &str) -> anyhow::Result<Vec<(PathBuf, RecordBatch)>> {
    let mut out = Vec::new();
    for path in table_files(dir, name) {
        for batch in read_file(&path)? {
            out.push((path.clone(), batch));
        }
    }
    Ok(out)
}

/// Typed access to the columns of a batch, by name.
pub struct Cols<'a> {
    pub batch: &'a RecordBatch,
    pub path: &'a Path,
}

impl<'a> Cols<'a> {
    /// A primitive column of type `T`, if the batch has it with that type.
    pub fn prim<T: ArrowPrimitiveType>(&self, name: &str) -> Option<&'a PrimitiveArray<T>> {
        self.batch.column_by_name(name)?.as_primitive_opt::<T>()
    }

    /// As [`Cols::prim`], for a column the table cannot do without.
    pub fn req<T: ArrowPrimitiveType>(&self, name: &str) -> anyhow::Result<&'a PrimitiveArray<T>> {
        self.prim::<T>(name).with_context(|| {
            format!(
                "{}: no column `{name}` of type {}: is it a montrace run directory of schema \
                 version 1?",
                self.path.display(),
                T::DATA_TYPE
            )
        })
    }

    pub fn str(&self, name: &str) -> Option<&'a arrow_array::StringArray> {
        self.batch.column_by_name(name)?.as_string_opt::<i32>()
    }

    pub fn bool(&self, name: &str) -> Option<&'a arrow_array::BooleanArray> {
        self.batch.column_by_name(name)?.as_boolean_opt()
    }

    pub fn list(&self, name: &str) -> Option<&'a arrow_array::ListArray> {
        self.batch.column_by_name(name)?.as_list_opt::<i32>()
    }

    /// Any numeric column as f64 (the GPU tables are read this way, whatever their types).
    pub fn numbers(&self, name: &str) -> Option<Vec<Option<f64>>> {
        numbers(self.batch.column_by_name(name)?.as_ref())
    }

    /// Time column `name` as nanoseconds since the epoch, whatever the run's schema version:
    /// its exact twin (`<name>_ns`, Int64, version 3) where the batch has it, else the
    /// timestamp itself in its own unit (versions 1 and 2: nanoseconds; a table rewritten by
    /// another tool without the twins: microseconds).
    pub fn times_ns(&self, name: &str) -> Option<Vec<Option<i64>>> {
        if let Some(exact) = self.prim::<Int64Type>(&exact_time_column(name)) {
            return Some(exact.iter().collect());
        }
        times_ns(self.batch.column_by_name(name)?.as_ref())
    }

    /// As [`Cols::times_ns`], for a column the table cannot do without (a null reads as 0,
    /// as the column's type forbids it).
    pub fn req_times_ns(&self, name: &str) -> anyhow::Result<Vec<i64>> {
        let values = self.times_ns(name).with_context(|| {
            format!(
                "{}: no timestamp column `{name}`: is it a montrace run directory?",
                self.path.display()
            )
        })?;
        Ok(values.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// The time at `i` of a [`Cols::times_ns`] column, None when null or when the column is absent.
pub fn time_at(times: Option<&Vec<Option<i64>>>, i: usize) -> Option<i64> {
    times.and_then(|t| t.get(i).copied().flatten())
}

/// The value at `i`, None when null or when the column is absent.
pub fn opt<T: ArrowPrimitiveType>(
    array: Option<&PrimitiveArray<T>>,
    i: usize,
) -> Option<T::Native> {
    array.filter(|a| a.is_valid(i)).map(|a| a.value(i))
}

fn prim_f64<T: ArrowPrimitiveType>(array: &dyn Array, f: fn(T::Native) -> f64) -> Vec<Option<f64>> {
    array.as_primitive::<T>().iter().map(|v| v.map(f)).collect()
}

/// A numeric column as f64, None for non-numeric types.
pub fn numbers(array: &dyn Array) -> Option<Vec<Option<f64>>> {
    Some(match array.data_type() {
        DataType::Float64 => prim_f64::<Float64Type>(array, |v| v),
        DataType::Float32 => prim_f64::<Float32Type>(array, f64::from),
        DataType::UInt8 => prim_f64::<UInt8Type>(array, f64::from),
        DataType::UInt16 => prim_f64::<UInt16Type>(array, f64::from),
        DataType::UInt32 => prim_f64::<UInt32Type>(array, f64::from),
        DataType::UInt64 => prim_f64::<UInt64Type>(array, |v| v as f64),
        DataType::Int8 => prim_f64::<Int8Type>(array, f64::from),
        DataType::Int16 => prim_f64::<Int16Type>(array, f64::from),
        DataType::Int32 => prim_f64::<Int32Type>(array, f64::from),
        DataType::Int64 => prim_f64::<Int64Type>(array, |v| v as f64),
        _ => return None,
    })
}

/// A timestamp column in any unit as nanoseconds.
pub fn times_ns(array: &dyn Array) -> Option<Vec<Option<i64>>> {
    fn scaled<T: ArrowPrimitiveType<Native = i64>>(array: &dyn Array, k: i64) -> Vec<Option<i64>> {
        array
            .as_primitive::<T>()
            .iter()
            .map(|v| v.map(|v| v.saturating_mul(k)))
            .collect()
    }
    Some(match array.data_type() {
        DataType::Timestamp(TimeUnit::Nanosecond, _) => scaled::<TimestampNanosecondType>(array, 1),
        DataType::Timestamp(TimeUnit::Microsecond, _) => {
            scaled::<TimestampMicrosecondType>(array, 1_000)
        }
        DataType::Timestamp(TimeUnit::Millisecond, _) => {
            scaled::<TimestampMillisecondType>(array, 1_000_000)
        }
        DataType::Timestamp(TimeUnit::Second, _) => {
            scaled::<TimestampSecondType>(array, 1_000_000_000)
        }
        _ => return None,
    })
}

/// One process of the tree (a row of processes.parquet, or a stand-in made from its samples
/// when the run was killed before its row was written).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Process {
    pub pid: u32,
    pub start_ns: i64,
    pub parent: Option<(u32, i64)>,
    pub end_ns: Option<i64>,
    pub filename: Option<String>,
    pub argv: Option<Vec<String>>,
    pub comm: String,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    /// Socket bytes its threads sent and received (the `net_*` exit figures), None where the
    /// run has none for it.
    pub socket_bytes: Option<SocketBytes>,
    pub alive_at_end: bool,
    /// No processes row: a run killed while it ran. What is known comes from its events and
    /// samples.
    pub unflushed: bool,
}

/// processes.parquet `net_inet_sent_bytes`, `net_inet_received_bytes`, `net_unix_sent_bytes`,
/// `net_unix_received_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SocketBytes {
    pub inet_sent: u64,
    pub inet_received: u64,
    pub unix_sent: u64,
    pub unix_received: u64,
}

impl SocketBytes {
    pub fn add(&mut self, other: &SocketBytes) {
        self.inet_sent += other.inet_sent;
        self.inet_received += other.inet_received;
        self.unix_sent += other.unix_sent;
        self.unix_received += other.unix_received;
    }

    pub fn total(&self) -> u64 {
        self.inet_sent + self.inet_received + self.unix_sent + self.unix_received
    }
}

impl Process {
    /// Its command line for people: argv joined, else the file name, else comm.
    pub fn command_line(&self) -> String {
        match (&self.argv, &self.filename) {
            (Some(argv), _) if !argv.is_empty() => argv.join(" "),
            (_, Some(filename)) => filename.clone(),
            _ => self.comm.clone(),
        }
    }
}

/// One row of samples.parquet, with the process it belongs to as an index into
/// [`RunData::processes`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    pub time_ns: i64,
    pub process: usize,
    /// The row from the exit event (`source = 'exit'`), not a sweep.
    pub exit: bool,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub cpu_percent: Option<f64>,
    /// Its threads' run-queue delay since its previous row, as a share of the time (None
    /// without the BTF tracepoints, and in runs of earlier versions).
    pub run_queue_percent: Option<f64>,
    pub rss_bytes: Option<u64>,
    pub uss_bytes: Option<u64>,
    pub pss_bytes: Option<u64>,
    /// Bytes it caused to be fetched from and sent to storage so far (cumulative).
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
}

/// One row of system.parquet (the columns the report uses).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SystemRow {
    pub time_ns: i64,
    pub mem_total_bytes: Option<u64>,
    pub mem_used_bytes: Option<u64>,
    /// All CPUs: 100 − idle − iowait (100 = every CPU busy).
    pub cpu_busy_percent: Option<f64>,
    /// The tree's memory at this sweep, each memory image once (`tree_rss_bytes`,
    /// `tree_uss_bytes`, `tree_pss_bytes`); None in runs of earlier versions.
    pub tree_rss_bytes: Option<u64>,
    pub tree_uss_bytes: Option<u64>,
    pub tree_pss_bytes: Option<u64>,
}

/// One row of marks.parquet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mark {
    pub time_ns: i64,
    pub label: String,
    /// `point`, `begin` or `end`.
    pub kind: String,
}

/// One row of gpu.parquet: the figures present, by column name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuRow {
    pub time_ns: i64,
    pub gpu_index: u32,
    pub values: Vec<Option<f64>>,
}

/// The GPU columns the report plots, when gpu.parquet has them: (column, title, unit).
pub const GPU_COLUMNS: &[(&str, &str, &str)] = &[
    ("utilization_gpu_percent", "GPU utilization", "%"),
    ("memory_used_bytes", "GPU memory used", "bytes"),
    ("power_watts", "GPU power", "W"),
];

/// gpu.parquet: which of [`GPU_COLUMNS`] it has, and its rows.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Gpu {
    /// Indices into [`GPU_COLUMNS`] of the columns present, in that order; `GpuRow::values`
    /// follows it.
    pub columns: Vec<usize>,
    pub rows: Vec<GpuRow>,
    /// The largest `memory_total_bytes`, for the memory plot's reference line.
    pub memory_total_bytes: Option<f64>,
}

/// One row of gpu_processes.parquet (the columns the report uses), with the process it belongs
/// to as an index into [`RunData::processes`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuProcessRow {
    pub time_ns: i64,
    pub gpu_index: u32,
    pub process: usize,
    /// An `accounting` row: the driver's figures for the process's whole life, stamped at its
    /// exit. Not a moment of any sweep.
    pub accounting: bool,
    pub gpu_memory_bytes: Option<u64>,
}

/// Everything the report reads from a run directory.
#[derive(Clone, Debug, Default)]
pub struct RunData {
    /// run.json, when the run ended cleanly.
    /// run.json, read typed (None when it is missing or unreadable: a note says which).
    pub info: Option<crate::store::run_json::RunInfo>,
    pub processes: Vec<Process>,
    pub samples: Vec<Sample>,
    pub system: Vec<SystemRow>,
    pub marks: Vec<Mark>,
    pub gpu: Option<Gpu>,
    /// gpu_processes.parquet: the tree's own GPU use; empty when the run has none.
    pub gpu_processes: Vec<GpuProcessRow>,
    /// What is incomplete about the directory, for the reader of the report.
    pub notes: Vec<String>,
}

impl RunData {
    /// Each process's row by its identity, (pid, start time): the one index of the tree that
    /// samples, the report's timeline and the exports join on.
    /// The tree: each process's children and the roots, in start order. A parent must have
    /// started before its child: the links then cannot form a cycle, and every process is
    /// reached from a root.
    pub fn children_and_roots(&self) -> (Vec<Vec<usize>>, Vec<usize>) {
        let index = self.process_index();
        let key = |i: usize| (self.processes[i].start_ns, self.processes[i].pid);
        let mut children: Vec<Vec<usize>> = vec![Vec::new(); self.processes.len()];
        let mut roots = Vec::new();
        for (i, p) in self.processes.iter().enumerate() {
            match p.parent.and_then(|k| index.get(&k).copied()) {
                Some(parent) if key(parent) < key(i) => children[parent].push(i),
                _ => roots.push(i),
            }
        }
        for list in &mut children {
            list.sort_by_key(|&i| key(i));
        }
        roots.sort_by_key(|&i| key(i));
        (children, roots)
    }

    pub fn process_index(&self) -> HashMap<(u32, i64), usize> {
        self.processes
            .iter()
            .enumerate()
            .map(|(i, p)| ((p.pid, p.start_ns), i))
            .collect()
    }

    /// The earliest and latest moments in the data (ns): the report's time axis.
    pub fn time_range(&self) -> (i64, i64) {
        let mut lo = i64::MAX;
        let mut hi = i64::MIN;
        let mut see = |t: i64| {
            lo = lo.min(t);
            hi = hi.max(t);
        };
        for p in &self.processes {
            see(p.start_ns);
            if let Some(end) = p.end_ns {
                see(end);
            }
        }
        for s in &self.samples {
            see(s.time_ns);
        }
        for s in &self.system {
            see(s.time_ns);
        }
        for m in &self.marks {
            see(m.time_ns);
        }
        if let Some(gpu) = &self.gpu {
            for r in &gpu.rows {
                see(r.time_ns);
            }
        }
        if lo > hi {
            (0, 0)
        } else {
            (lo, hi)
        }
    }
}

/// Reads a run directory (call [`check_run_dir`] first for a friendly error).
pub fn load(dir: &Path) -> anyhow::Result<RunData> {
    let mut data = RunData::default();
    match crate::store::run_json::read(dir) {
        Ok(info) => data.info = Some(info),
        Err(crate::store::run_json::ReadError::Io(_)) => data.notes.push(
            "run.json is missing: the run did not end cleanly (killed, or still running); the \
             report shows what was flushed"
                .into(),
        ),
        Err(err) => data.notes.push(format!(
            "run.json cannot be read ({err}): the header is incomplete"
        )),
    }
    for table in ["processes", "samples", "system"] {
        if !dir.join(format!("{table}.parquet")).is_file()
            && dir.join(format!("{table}.parts")).is_dir()
        {
            data.notes.push(format!(
                "{table} read from {table}.parts/ (the run did not end cleanly)"
            ));
        }
    }
    data.processes = read_processes(dir)?;
    let mut index = data.process_index();
    name_unflushed_processes(dir, &mut data.processes, &mut index)?;
    data.samples = read_samples(dir, &mut data.processes, &mut index)?;
    data.system = read_system(dir)?;
    data.marks = read_marks(dir)?;
    data.gpu = read_gpu(dir)?;
    data.gpu_processes = read_gpu_processes(dir, &mut data.processes, &mut index)?;
    let dropped = drop_absurd_readings(&mut data);
    if dropped > 0 {
        data.notes.push(format!(
            "{dropped} readings (CPU %, run-queue %, the machine's CPU %, GPU figures) were not \
             numbers or beyond any machine (inf, NaN, 1e308: not written by montrace): shown as \
             missing"
        ));
    }
    Ok(data)
}

/// The largest percentage a reading can hold: 100 per CPU, for a million CPUs.
pub const MAX_PERCENT: f64 = 1e8;
/// The largest GPU figure (bytes, watts, percent) a reading can hold.
pub const MAX_GPU_FIGURE: f64 = 1e18;

/// `value` if it is a number a machine could report (finite, at most `max` either way), else
/// None, counted in `dropped`. A samples.parquet is the monitored command's to rewrite: an
/// infinite or 1e308 CPU % once made the report's axis computation loop forever.
pub fn sane(value: Option<f64>, max: f64, dropped: &mut u64) -> Option<f64> {
    match value {
        Some(v) if !v.is_finite() || v.abs() > max => {
            *dropped += 1;
            None
        }
        other => other,
    }
}

/// A sample's figures made [`sane`]; returns how many were dropped.
pub fn sane_sample(s: &mut Sample) -> u64 {
    let mut dropped = 0;
    s.cpu_percent = sane(s.cpu_percent, MAX_PERCENT, &mut dropped);
    s.run_queue_percent = sane(s.run_queue_percent, MAX_PERCENT, &mut dropped);
    dropped
}

/// Every figure of `data` a plot's axis is computed from made [`sane`]; returns how many were
/// dropped.
fn drop_absurd_readings(data: &mut RunData) -> u64 {
    let mut dropped = 0;
    for s in &mut data.samples {
        dropped += sane_sample(s);
    }
    for s in &mut data.system {
        s.cpu_busy_percent = sane(s.cpu_busy_percent, MAX_PERCENT, &mut dropped);
    }
    if let Some(gpu) = &mut data.gpu {
        for row in &mut gpu.rows {
            for v in &mut row.values {
                *v = sane(*v, MAX_GPU_FIGURE, &mut dropped);
            }
        }
        gpu.memory_total_bytes = sane(gpu.memory_total_bytes, MAX_GPU_FIGURE, &mut dropped);
    }
    dropped
}

fn read_processes(dir: &Path) -> anyhow::Result<Vec<Process>> {
    let mut rows = Vec::new();
    for (path, batch) in read_table(dir, "processes")? {
        rows.extend(process_rows(&Cols {
            batch: &batch,
            path: &path,
        })?);
    }
    Ok(rows)
}

/// The processes of one batch of processes.parquet.
pub fn process_rows(c: &Cols<'_>) -> anyhow::Result<Vec<Process>> {
    let batch = c.batch;
    let mut rows = Vec::with_capacity(batch.num_rows());
    let pid = c.req::<UInt32Type>("pid")?;
    let start = c.req_times_ns("start_time")?;
    let parent_pid = c.prim::<UInt32Type>("parent_pid");
    let parent_start = c.times_ns("parent_start_time");
    let end = c.times_ns("end_time");
    let filename = c.str("filename");
    let argv = c.list("argv");
    let comm = c.str("comm");
    let exit_code = c.prim::<Int32Type>("exit_code");
    let exit_signal = c.prim::<Int32Type>("exit_signal");
    let user = c.prim::<UInt64Type>("cpu_user_ns");
    let system = c.prim::<UInt64Type>("cpu_system_ns");
    let peak = c.prim::<UInt64Type>("peak_rss_bytes");
    let net = [
        "net_inet_sent_bytes",
        "net_inet_received_bytes",
        "net_unix_sent_bytes",
        "net_unix_received_bytes",
    ]
    .map(|name| c.prim::<UInt64Type>(name));
    let alive = c.bool("alive_at_end");
    for (i, &start_ns) in start.iter().enumerate() {
        let parent = match (opt(parent_pid, i), time_at(parent_start.as_ref(), i)) {
            (Some(p), Some(s)) => Some((p, s)),
            _ => None,
        };
        rows.push(Process {
            pid: pid.value(i),
            start_ns,
            parent,
            end_ns: time_at(end.as_ref(), i),
            filename: filename
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string()),
            argv: strings_at(argv, i),
            comm: comm
                .filter(|a| a.is_valid(i))
                .map(|a| a.value(i).to_string())
                .unwrap_or_default(),
            exit_code: opt(exit_code, i),
            exit_signal: opt(exit_signal, i),
            cpu_user_ns: opt(user, i),
            cpu_system_ns: opt(system, i),
            peak_rss_bytes: opt(peak, i),
            socket_bytes: {
                let [inet_sent, inet_received, unix_sent, unix_received] =
                    net.map(|column| opt(column, i));
                // The four are null together (schema.md); a lone one still counts.
                [inet_sent, inet_received, unix_sent, unix_received]
                    .iter()
                    .any(Option::is_some)
                    .then(|| SocketBytes {
                        inet_sent: inet_sent.unwrap_or(0),
                        inet_received: inet_received.unwrap_or(0),
                        unix_sent: unix_sent.unwrap_or(0),
                        unix_received: unix_received.unwrap_or(0),
                    })
            },
            alive_at_end: alive.is_some_and(|a| a.is_valid(i) && a.value(i)),
            unflushed: false,
        });
    }
    Ok(rows)
}

/// Row `i` of a list-of-strings column, None when null.
fn strings_at(list: Option<&arrow_array::ListArray>, i: usize) -> Option<Vec<String>> {
    list.filter(|a| a.is_valid(i)).map(|a| {
        a.value(i)
            .as_string::<i32>()
            .iter()
            .map(|s| s.unwrap_or_default().to_string())
            .collect()
    })
}

/// A run killed before its end has no processes rows for the processes still running then; their
/// fork and exec events (flushed to `events.parts/`) give them their parent, program, arguments
/// and name (the kernel's: the program's base name, at most 15 bytes; a process that never
/// exec'd has its parent's program, arguments and name).
fn name_unflushed_processes(
    dir: &Path,
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
) -> anyhow::Result<()> {
    name_unflushed_processes_except(dir, processes, index, &|_| false)
}

/// [`name_unflushed_processes`] where `processes` need not hold every row of processes.parquet:
/// a process `recorded` says has a row, and that is not in `index`, gets no stand-in (the
/// streaming exports keep only the rows a stand-in's fork copies from).
pub fn name_unflushed_processes_except(
    dir: &Path,
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
    recorded: &dyn Fn((u32, i64)) -> bool,
) -> anyhow::Result<()> {
    let mut stand_ins = std::collections::HashSet::new();
    for_each_batch(dir, "events", |c| {
        let (Some(kind), pid, start) = (
            c.str("kind"),
            c.req::<UInt32Type>("pid")?,
            c.req_times_ns("start_time")?,
        ) else {
            return Ok(());
        };
        let parent_pid = c.prim::<UInt32Type>("parent_pid");
        let parent_start = c.times_ns("parent_start_time");
        let filename = c.str("filename");
        let argv = c.list("argv");
        for (i, &start) in start.iter().enumerate() {
            let key = (pid.value(i), start);
            if !index.contains_key(&key) {
                if recorded(key) {
                    continue;
                }
                stand_ins.insert(process_index(key, processes, index));
            }
            let at = index[&key];
            if !stand_ins.contains(&at) {
                continue;
            }
            match kind.value(i) {
                "fork" => {
                    let parent = opt(parent_pid, i).zip(time_at(parent_start.as_ref(), i));
                    processes[at].parent = parent;
                    // Until it execs, a child runs its parent's program.
                    if let Some(&p) = parent.as_ref().and_then(|p| index.get(p)) {
                        processes[at].comm = processes[p].comm.clone();
                        processes[at].filename = processes[p].filename.clone();
                        processes[at].argv = processes[p].argv.clone();
                    }
                }
                "exec" => {
                    let file = filename.filter(|f| f.is_valid(i)).map(|f| f.value(i));
                    if let Some(file) = file {
                        let base = file.rsplit('/').next().unwrap_or(file);
                        let mut end = base.len().min(15);
                        while !base.is_char_boundary(end) {
                            end -= 1;
                        }
                        processes[at].comm = base[..end].to_string();
                        processes[at].filename = Some(file.to_string());
                    }
                    processes[at].argv = strings_at(argv, i);
                }
                _ => {}
            }
        }
        Ok(())
    })
}

fn read_samples(
    dir: &Path,
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
) -> anyhow::Result<Vec<Sample>> {
    read_process_rows(dir, "samples", processes, index, sample_rows)
}

/// The samples of one batch of samples.parquet, given each row's (time, process index).
pub fn sample_rows(c: &Cols<'_>, keys: &[(i64, usize)]) -> Vec<Sample> {
    let source = c.str("source");
    let user = c.prim::<UInt64Type>("cpu_user_ns");
    let system = c.prim::<UInt64Type>("cpu_system_ns");
    let percent = c.prim::<Float64Type>("cpu_percent");
    let run_queue = c.prim::<Float64Type>("run_queue_percent");
    let rss = c.prim::<UInt64Type>("rss_bytes");
    let uss = c.prim::<UInt64Type>("uss_bytes");
    let pss = c.prim::<UInt64Type>("pss_bytes");
    let read = c.prim::<UInt64Type>("read_bytes");
    let write = c.prim::<UInt64Type>("write_bytes");
    keys.iter()
        .enumerate()
        .map(|(i, &(time_ns, process))| Sample {
            time_ns,
            process,
            exit: source.is_some_and(|s| s.is_valid(i) && s.value(i) == "exit"),
            cpu_user_ns: opt(user, i).unwrap_or(0),
            cpu_system_ns: opt(system, i).unwrap_or(0),
            cpu_percent: opt(percent, i),
            run_queue_percent: opt(run_queue, i),
            rss_bytes: opt(rss, i),
            uss_bytes: opt(uss, i),
            pss_bytes: opt(pss, i),
            read_bytes: opt(read, i),
            write_bytes: opt(write, i),
        })
        .collect()
}

/// The rows of `table`, a table whose rows belong to a process of the tree (`time`, `pid`,
/// `start_time`): `rows_of` makes them from each batch's columns and its rows' (time, index
/// into `processes`).
fn read_process_rows<T>(
    dir: &Path,
    table: &str,
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
    mut rows_of: impl FnMut(&Cols<'_>, &[(i64, usize)]) -> Vec<T>,
) -> anyhow::Result<Vec<T>> {
    let mut rows = Vec::new();
    for (path, batch) in read_table(dir, table)? {
        let c = Cols {
            batch: &batch,
            path: &path,
        };
        let time = c.req_times_ns("time")?;
        let pid = c.req::<UInt32Type>("pid")?;
        let start = c.req_times_ns("start_time")?;
        let keys: Vec<(i64, usize)> = (0..batch.num_rows())
            .map(|i| {
                let key = (pid.value(i), start[i]);
                (time[i], process_index(key, processes, index))
            })
            .collect();
        rows.extend(rows_of(&c, &keys));
    }
    Ok(rows)
}

/// The index of process `key` (pid, start time) in `processes`. A killed run has no processes
/// row yet for the processes that were still running: a stand-in keeps their rows.
pub fn process_index(
    key: (u32, i64),
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
) -> usize {
    *index.entry(key).or_insert_with(|| {
        processes.push(Process {
            pid: key.0,
            start_ns: key.1,
            comm: format!("pid {}", key.0),
            alive_at_end: true,
            unflushed: true,
            ..Default::default()
        });
        processes.len() - 1
    })
}

pub fn read_system(dir: &Path) -> anyhow::Result<Vec<SystemRow>> {
    let mut rows = Vec::new();
    for (path, batch) in read_table(dir, "system")? {
        let c = Cols {
            batch: &batch,
            path: &path,
        };
        let time = c.req_times_ns("time")?;
        let total = c.prim::<UInt64Type>("mem_total_bytes");
        let used = c.prim::<UInt64Type>("mem_used_bytes");
        let idle = c.prim::<Float64Type>("cpu_idle_percent");
        let iowait = c.prim::<Float64Type>("cpu_iowait_percent");
        let [tree_rss, tree_uss, tree_pss] = ["tree_rss_bytes", "tree_uss_bytes", "tree_pss_bytes"]
            .map(|name| c.prim::<UInt64Type>(name));
        for (i, &time_ns) in time.iter().enumerate() {
            rows.push(SystemRow {
                time_ns,
                mem_total_bytes: opt(total, i),
                mem_used_bytes: opt(used, i),
                cpu_busy_percent: opt(idle, i)
                    .map(|idle| (100.0 - idle - opt(iowait, i).unwrap_or(0.0)).max(0.0)),
                tree_rss_bytes: opt(tree_rss, i),
                tree_uss_bytes: opt(tree_uss, i),
                tree_pss_bytes: opt(tree_pss, i),
            });
        }
    }
    Ok(rows)
}

pub fn read_marks(dir: &Path) -> anyhow::Result<Vec<Mark>> {
    let mut rows = Vec::new();
    for (path, batch) in read_table(dir, "marks")? {
        let c = Cols {
            batch: &batch,
            path: &path,
        };
        let Some(time) = c.times_ns("time") else {
            continue;
        };
        let label = c.str("label");
        let kind = c.str("kind");
        for (i, t) in time.into_iter().enumerate() {
            let Some(time_ns) = t else { continue };
            let text = |a: Option<&arrow_array::StringArray>| {
                a.filter(|a| a.is_valid(i))
                    .map(|a| a.value(i).to_string())
                    .unwrap_or_default()
            };
            rows.push(Mark {
                time_ns,
                label: text(label),
                kind: text(kind),
            });
        }
    }
    rows.sort_by_key(|m| m.time_ns);
    Ok(rows)
}

pub fn read_gpu(dir: &Path) -> anyhow::Result<Option<Gpu>> {
    let batches = read_table(dir, "gpu")?;
    if batches.is_empty() {
        return Ok(None);
    }
    let mut gpu = Gpu::default();
    if let Some((path, batch)) = batches.first() {
        let c = Cols { batch, path };
        gpu.columns = (0..GPU_COLUMNS.len())
            .filter(|&k| c.numbers(GPU_COLUMNS[k].0).is_some())
            .collect();
    }
    for (path, batch) in &batches {
        let c = Cols { batch, path };
        let Some(time) = c.times_ns("time") else {
            continue;
        };
        let index = c.numbers("gpu_index");
        if let Some(total) = c.numbers("memory_total_bytes") {
            for v in total.into_iter().flatten() {
                gpu.memory_total_bytes = Some(gpu.memory_total_bytes.map_or(v, |m: f64| m.max(v)));
            }
        }
        let columns: Vec<Option<Vec<Option<f64>>>> = gpu
            .columns
            .iter()
            .map(|&k| c.numbers(GPU_COLUMNS[k].0))
            .collect();
        for (i, t) in time.into_iter().enumerate() {
            let Some(time_ns) = t else { continue };
            gpu.rows.push(GpuRow {
                time_ns,
                gpu_index: index
                    .as_ref()
                    .and_then(|v| v[i])
                    .map_or(0, |v| v.max(0.0) as u32),
                values: columns
                    .iter()
                    .map(|col| col.as_ref().and_then(|v| v[i]))
                    .collect(),
            });
        }
    }
    Ok(Some(gpu))
}

fn read_gpu_processes(
    dir: &Path,
    processes: &mut Vec<Process>,
    index: &mut HashMap<(u32, i64), usize>,
) -> anyhow::Result<Vec<GpuProcessRow>> {
    let accounting = crate::store::records::GpuProcessSource::Accounting.as_str();
    read_process_rows(dir, "gpu_processes", processes, index, |c, keys| {
        let gpu_index = c.prim::<UInt32Type>("gpu_index");
        let source = c.str("source");
        let memory = c.prim::<UInt64Type>("gpu_memory_bytes");
        keys.iter()
            .enumerate()
            .map(|(i, &(time_ns, process))| GpuProcessRow {
                time_ns,
                gpu_index: opt(gpu_index, i).unwrap_or(0),
                process,
                accounting: source.is_some_and(|s| s.is_valid(i) && s.value(i) == accounting),
                gpu_memory_bytes: opt(memory, i),
            })
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow_array::{ArrayRef, RecordBatch, TimestampNanosecondArray, UInt32Array};
    use arrow_schema::{DataType, Field, Schema, TimeUnit};
    use std::sync::Arc;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run-small")
    }

    /// The fixture was written by an earlier montrace (before GPU monitoring, recording errors
    /// and the marks budget): its run.json reads typed, the fields it lacks as their defaults.
    #[test]
    fn a_run_of_the_previous_version_reads_typed() {
        let data = load(&fixture()).unwrap();
        assert!(data.notes.is_empty(), "{:?}", data.notes);
        let info = data.info.expect("run.json read");
        assert_eq!(info.processes_started, 22);
        assert_eq!(info.gpu, crate::sampling::gpu::GpuSummary::not_recorded());
        assert_eq!((info.marks_dropped, info.recording_error), (0, None));
        assert_eq!(data.processes.len(), 22);
    }

    /// The socket byte columns read back per process; a process without them (null) has none,
    /// and so does every process of a run written before the columns existed (the fixture).
    #[test]
    fn socket_bytes_read_back_and_null_is_none() {
        use crate::store::records::ProcessRecord;
        let tmp = tempfile::tempdir().unwrap();
        let mut table = crate::store::writer::PartedTable::processes(tmp.path()).unwrap();
        table
            .push(ProcessRecord {
                pid: 7,
                start_time_ns: 1,
                comm: "curl".into(),
                net_inet_sent_bytes: Some(300),
                net_inet_received_bytes: Some(40_000),
                net_unix_sent_bytes: Some(0),
                net_unix_received_bytes: Some(12),
                ..Default::default()
            })
            .unwrap();
        table
            .push(ProcessRecord {
                pid: 8,
                start_time_ns: 2,
                comm: "sh".into(),
                ..Default::default()
            })
            .unwrap();
        table.finish().unwrap();
        let processes = read_processes(tmp.path()).unwrap();
        assert_eq!(
            processes[0].socket_bytes,
            Some(SocketBytes {
                inet_sent: 300,
                inet_received: 40_000,
                unix_sent: 0,
                unix_received: 12,
            })
        );
        assert_eq!(processes[1].socket_bytes, None);
        let fixture = load(&fixture()).unwrap();
        assert!(fixture.processes.iter().all(|p| p.socket_bytes.is_none()));
    }

    /// A run killed mid-way: no run.json, tables only as parts. Everything flushed reads back.
    #[test]
    fn a_killed_run_reads_from_its_parts() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path();
        for entry in std::fs::read_dir(fixture()).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().to_string_lossy().into_owned();
            let Some(table) = name.strip_suffix(".parquet") else {
                continue; // run.json and summary.json are written at a clean end only
            };
            let parts = dir.join(format!("{table}.parts"));
            std::fs::create_dir(&parts).unwrap();
            std::fs::copy(entry.path(), parts.join(format!("{table}-000000.parquet"))).unwrap();
        }
        check_run_dir(dir).unwrap();
        let data = load(dir).unwrap();
        assert!(data.info.is_none());
        assert!(
            data.notes.iter().any(|n| n.contains("run.json is missing")),
            "{:?}",
            data.notes
        );
        assert!(data.notes.iter().any(|n| n.contains("processes.parts/")));
        assert_eq!(data.processes.len(), 22, "every flushed process");
        assert_eq!(data.samples.len(), load(&fixture()).unwrap().samples.len());
    }

    /// Killed before any process row was flushed: every process still has its name, program,
    /// arguments and parent, from its fork and exec events.
    #[test]
    fn a_killed_runs_unflushed_processes_are_named_from_their_events() {
        let tmp = tempfile::tempdir().unwrap();
        for table in ["events", "samples"] {
            let parts = tmp.path().join(format!("{table}.parts"));
            std::fs::create_dir(&parts).unwrap();
            std::fs::copy(
                fixture().join(format!("{table}.parquet")),
                parts.join(format!("{table}-000000.parquet")),
            )
            .unwrap();
        }
        let whole = load(&fixture()).unwrap();
        let data = load(tmp.path()).unwrap();
        assert_eq!(data.processes.len(), whole.processes.len());
        for p in &whole.processes {
            let q = data
                .processes
                .iter()
                .find(|q| (q.pid, q.start_ns) == (p.pid, p.start_ns))
                .unwrap();
            assert_eq!(
                (&q.filename, &q.argv, &q.parent),
                (&p.filename, &p.argv, &p.parent)
            );
            assert_eq!(q.comm, p.comm, "pid {}", p.pid);
            assert!(q.alive_at_end && q.unflushed);
        }
    }

    /// A processes table with only the columns every version had: the optional ones read as
    /// missing, not as an error.
    #[test]
    fn a_table_without_optional_columns_reads() {
        let tmp = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("pid", DataType::UInt32, false),
            Field::new(
                "start_time",
                DataType::Timestamp(TimeUnit::Nanosecond, Some("UTC".into())),
                false,
            ),
        ]));
        let columns: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from(vec![10, 11])),
            Arc::new(
                TimestampNanosecondArray::from(vec![1_000_000_000, 2_000_000_000])
                    .with_timezone("UTC"),
            ),
        ];
        let batch = RecordBatch::try_new(schema.clone(), columns).unwrap();
        crate::store::writer::write_table(&tmp.path().join("processes.parquet"), schema, &batch)
            .unwrap();
        let data = load(tmp.path()).unwrap();
        assert_eq!(data.processes.len(), 2);
        assert_eq!(data.processes[0].pid, 10);
        assert!(data.processes.iter().all(|p| p.end_ns.is_none()));
    }

    /// The times of a run read as the same nanoseconds whatever schema version wrote it: 1
    /// (`Timestamp(ns, "UTC")`), 2 (`Timestamp(ns)`), 3 (microseconds with exact `_ns` twins,
    /// from the writer itself); a table another tool rewrote without the twins reads to the
    /// microsecond. Samples find their process by the exact start time in every version.
    #[test]
    fn times_read_the_same_in_every_schema_version() {
        use crate::store::records::{ProcessRecord, SampleRecord};
        use crate::store::schema::{processes_batch, samples_batch};
        use arrow_array::TimestampMicrosecondArray;
        // Two processes with one pid, 1 µs apart less 1 ns: only the exact times tell them apart.
        let (a, b) = (1_764_000_000_000_000_001, 1_764_000_000_000_001_000);
        let end = 1_764_000_001_999_999_999;
        let processes = [
            ProcessRecord {
                pid: 7,
                start_time_ns: a,
                end_time_ns: Some(end),
                ..Default::default()
            },
            ProcessRecord {
                pid: 7,
                start_time_ns: b,
                parent_pid: Some(7),
                parent_start_time_ns: Some(a),
                ..Default::default()
            },
        ];
        let samples = [(a + 5, a), (b + 5, b)].map(|(time, start)| SampleRecord {
            time_ns: time,
            pid: 7,
            start_time_ns: start,
            rss_bytes: Some(u64::try_from(start % 1_000_000).unwrap()),
            ..Default::default()
        });
        let current = [
            ("processes", processes_batch(&processes).unwrap()),
            ("samples", samples_batch(&samples).unwrap()),
        ];
        // An earlier version's (or a rewritten) table: the current columns, less the exact
        // twins, with each time column cast to `time_type`.
        let older = |time_type: &DataType| -> Vec<(&str, RecordBatch)> {
            current
                .iter()
                .map(|(name, batch)| {
                    let mut fields = Vec::new();
                    let mut columns = Vec::new();
                    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
                        if field.name().ends_with("_time_ns") || field.name() == "time_ns" {
                            continue;
                        }
                        let exact = batch.column_by_name(&exact_time_column(field.name()));
                        let (field, column): (Field, ArrayRef) = match exact {
                            Some(ns) if matches!(field.data_type(), DataType::Timestamp(..)) => {
                                let ns = ns.as_primitive::<Int64Type>();
                                let column: ArrayRef = match time_type {
                                    DataType::Timestamp(TimeUnit::Nanosecond, tz) => Arc::new(
                                        TimestampNanosecondArray::from(
                                            ns.iter().collect::<Vec<_>>(),
                                        )
                                        .with_timezone_opt(tz.clone()),
                                    ),
                                    _ => Arc::new(
                                        TimestampMicrosecondArray::from(
                                            ns.iter()
                                                .map(|v| v.map(|v| v.div_euclid(1_000)))
                                                .collect::<Vec<_>>(),
                                        )
                                        .with_timezone("UTC"),
                                    ),
                                };
                                let f = field.as_ref().clone().with_data_type(time_type.clone());
                                (f, column)
                            }
                            _ => (field.as_ref().clone(), Arc::clone(column)),
                        };
                        fields.push(field);
                        columns.push(column);
                    }
                    let schema = Arc::new(Schema::new(fields));
                    (*name, RecordBatch::try_new(schema, columns).unwrap())
                })
                .collect()
        };
        let versions = [
            (
                "1",
                older(&DataType::Timestamp(
                    TimeUnit::Nanosecond,
                    Some("UTC".into()),
                )),
                1,
            ),
            (
                "2",
                older(&DataType::Timestamp(TimeUnit::Nanosecond, None)),
                1,
            ),
            ("3", current.to_vec(), 1),
            (
                "rewritten",
                older(&DataType::Timestamp(
                    TimeUnit::Microsecond,
                    Some("UTC".into()),
                )),
                1_000,
            ),
        ];
        for (version, tables, precision) in versions {
            let tmp = tempfile::tempdir().unwrap();
            for (name, batch) in &tables {
                let path = tmp.path().join(format!("{name}.parquet"));
                crate::store::writer::write_table(&path, batch.schema(), batch).unwrap();
            }
            let data = load(tmp.path()).unwrap();
            let floor = |ns: i64| ns.div_euclid(precision) * precision;
            let starts: Vec<i64> = data.processes.iter().map(|p| p.start_ns).collect();
            assert_eq!(starts, [floor(a), floor(b)], "version {version}");
            assert_eq!(
                data.processes[0].end_ns,
                Some(floor(end)),
                "version {version}"
            );
            assert_eq!(
                data.processes[1].parent,
                Some((7, floor(a))),
                "version {version}"
            );
            let seen: Vec<(i64, usize)> = data
                .samples
                .iter()
                .map(|s| (s.time_ns, s.process))
                .collect();
            assert_eq!(
                seen,
                [(floor(a + 5), 0), (floor(b + 5), 1)],
                "version {version}"
            );
        }
    }
}
