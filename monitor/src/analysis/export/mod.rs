//! `montrace export`: a run directory in the formats other tools read.
//!
//! - **Perfetto** (`--format perfetto`): a Chrome trace-event JSON file that ui.perfetto.dev and
//!   chrome://tracing open. One process track per process (pid reused in the run: the later
//!   ones get a stand-in id above the kernel's pid range), ordered depth-first through the tree
//!   so children follow their parent; its lifetime is one complete ("X") slice with its figures
//!   as arguments; its memory (RSS, USS, MiB) and CPU% are counter ("C") tracks. A "machine"
//!   process holds the machine's and the whole tree's counters, the GPU counters and the marks.
//! - **CSV** (`--format csv`): one file per table (`processes.csv`, `samples.csv`, ...), with a
//!   header row; times in RFC 3339 with nanoseconds, lists (argv) as JSON arrays, null as an
//!   empty field, quoting as RFC 4180.
//! - **BMF** (`--format bmf`): the run's summary.json in Bencher Metric Format, for
//!   `bencher run --adapter json` (the same layout as `compare --format bmf`).

use std::collections::HashMap;
use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;
use serde_json::{json, Value};

use crate::analysis::report::load::{self, RunData, GPU_COLUMNS};
use crate::analysis::report::model::exit_text;
use crate::cli::{ExportArgs, ExportFormat};

/// Exit status for a missing or invalid run directory.
use crate::cli::EXIT_USAGE;

/// `montrace export RUN_DIR --format perfetto|csv [--out PATH]`.
pub fn export_main(args: ExportArgs) -> anyhow::Result<i32> {
    if args.format == ExportFormat::Bmf {
        // From summary.json alone: a run of repetitions too.
        return export_bmf(&args.run_dir, args.out.as_deref());
    }
    if let Err(err) = load::check_run_dir(&args.run_dir) {
        crate::say!("montrace: error: {err}");
        return Ok(EXIT_USAGE);
    }
    match args.format {
        ExportFormat::Perfetto => {
            let out = args.out.unwrap_or_else(|| args.run_dir.join("trace.json"));
            write_perfetto(&args.run_dir, &out)?;
            crate::say_out!("{}", out.display());
            crate::say!("montrace: open it in https://ui.perfetto.dev (Open trace file)");
        }
        ExportFormat::Csv => {
            let out = args.out.unwrap_or_else(|| args.run_dir.join("csv"));
            let written = write_csv(&args.run_dir, &out)?;
            for file in &written {
                crate::say_out!("{}", file.path.display());
                for warning in &file.skipped_columns {
                    crate::say!("montrace: warning: {}: {warning}", file.path.display());
                }
            }
        }
        ExportFormat::Bmf => unreachable!("handled above"),
    }
    Ok(0)
}

/// `--format bmf`: the run's summary.json in Bencher Metric Format, on stdout or to `out`.
fn export_bmf(run_dir: &Path, out: Option<&Path>) -> anyhow::Result<i32> {
    let path = run_dir.join(crate::store::summary_json::SUMMARY_FILE);
    let summary = match crate::store::summary_json::read(&path) {
        Ok(summary) => summary,
        Err(err) => {
            crate::say!(
                "montrace: error: {}: {err}; BMF is made from a finished run's summary.json",
                path.display()
            );
            return Ok(EXIT_USAGE);
        }
    };
    let text = crate::analysis::compare::render_bmf_of(&summary);
    match out {
        Some(out) => {
            crate::store::userfs::write_atomic(out, text.as_bytes())
                .with_context(|| format!("cannot write {}", out.display()))?;
            crate::say_out!("{}", out.display());
        }
        None => crate::say_out!("{}", text.trim_end()),
    }
    Ok(0)
}

/// Writes the Perfetto/Chrome trace of `run_dir` to `out`.
pub fn write_perfetto(run_dir: &Path, out: &Path) -> anyhow::Result<()> {
    let data = load::load(run_dir)?;
    let trace = perfetto_trace(&data);
    let temp = out.with_file_name(format!(
        ".{}.tmp",
        out.file_name().unwrap_or_default().to_string_lossy()
    ));
    let written = (|| {
        let file = crate::store::userfs::create_replacing(&temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
        let mut writer = BufWriter::new(file);
        serde_json::to_writer(&mut writer, &trace)
            .map_err(anyhow::Error::from)
            .and_then(|()| writer.flush().map_err(anyhow::Error::from))
            .with_context(|| format!("cannot write {}", temp.display()))?;
        drop(writer);
        crate::store::userfs::rename(&temp, out)
            .with_context(|| format!("cannot rename {} to {}", temp.display(), out.display()))
    })();
    if written.is_err() {
        // No half-written leftover.
        let _ = crate::store::userfs::remove_file(&temp);
    }
    written
}

/// Above the kernel's largest pid (`PID_MAX_LIMIT`, 2^22): stand-in ids for reused pids.
const STAND_IN_PIDS: u64 = 1 << 22;
/// The track of the machine-wide counters and the marks (no process has pid 0).
const MACHINE_PID: u64 = 0;

/// The processes in depth-first order through the tree (children by start time).
fn tree_order(data: &RunData) -> Vec<(usize, usize)> {
    let (children, roots) = data.children_and_roots();
    let mut order = Vec::with_capacity(data.processes.len());
    let mut stack: Vec<(usize, usize)> = roots.into_iter().rev().map(|r| (r, 0)).collect();
    while let Some((i, depth)) = stack.pop() {
        order.push((i, depth));
        stack.extend(children[i].iter().rev().map(|&c| (c, depth + 1)));
    }
    order
}

fn mib(bytes: u64) -> f64 {
    (bytes as f64 / 1048576.0 * 1000.0).round() / 1000.0
}

/// The trace as JSON (pure).
pub fn perfetto_trace(data: &RunData) -> Value {
    let (t0, t1) = data.time_range();
    // Microseconds since t0, with nanosecond digits.
    let us = |t: i64| (t - t0) as f64 / 1e3;
    let mut events: Vec<Value> = Vec::new();

    let track = track_ids(data);

    events.push(
        json!({"ph": "M", "pid": MACHINE_PID, "name": "process_name",
        "args": {"name": "machine (montrace)"}}),
    );
    events.push(
        json!({"ph": "M", "pid": MACHINE_PID, "name": "process_sort_index",
        "args": {"sort_index": -1}}),
    );
    let exe = |i: usize| crate::analysis::report::model::exe_name(&data.processes[i]);
    let index = data.process_index();
    for (rank, &(i, depth)) in tree_order(data).iter().enumerate() {
        let p = &data.processes[i];
        let id = track[i];
        let name = format!("{} {}", exe(i), p.pid);
        events.push(json!({"ph": "M", "pid": id, "name": "process_name",
            "args": {"name": name}}));
        events.push(json!({"ph": "M", "pid": id, "name": "process_sort_index",
            "args": {"sort_index": rank}}));
        let parent = p.parent.and_then(|key| {
            index
                .get(&key)
                .map(|&q| format!("parent {} {}", exe(q), key.0))
        });
        let mut labels = vec![format!("depth {depth}")];
        labels.extend(parent);
        events.push(json!({"ph": "M", "pid": id, "name": "process_labels",
            "args": {"labels": labels.join(", ")}}));
        events.push(
            json!({"ph": "M", "pid": id, "tid": id, "name": "thread_name",
            "args": {"name": p.comm}}),
        );
        let end = p.end_ns.unwrap_or(t1).max(p.start_ns);
        let cpu = match (p.cpu_user_ns, p.cpu_system_ns) {
            (Some(u), Some(s)) => json!((u + s) as f64 / 1e9),
            _ => Value::Null,
        };
        events.push(json!({
            "ph": "X", "pid": id, "tid": id, "cat": "process",
            "name": exe(i),
            "ts": us(p.start_ns), "dur": us(end) - us(p.start_ns),
            "args": {
                "pid": p.pid,
                "parent_pid": p.parent.map(|x| x.0),
                "command": p.command_line(),
                "exit": exit_text(p),
                "cpu_s": cpu,
                "peak_rss_bytes": p.peak_rss_bytes,
            },
        }));
    }

    counter_events(data, &track, &us, &mut events);
    let info = data.info.as_ref();
    json!({
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "producer": format!("montrace {}", env!("CARGO_PKG_VERSION")),
            "command": info.map_or(Value::Null, |i| Value::from(i.command.clone())),
            "time_zero": crate::units::rfc3339(t0),
        },
    })
}

/// Each process's track id: its pid, unless an earlier process of the run had it (then a
/// stand-in above the kernel's largest pid).
fn track_ids(data: &RunData) -> Vec<u64> {
    let mut seen: HashMap<u32, usize> = HashMap::new();
    let mut track = vec![0u64; data.processes.len()];
    let mut stand_ins = 0;
    let mut by_start: Vec<usize> = (0..data.processes.len()).collect();
    by_start.sort_by_key(|&i| (data.processes[i].start_ns, data.processes[i].pid));
    for &i in &by_start {
        let pid = data.processes[i].pid;
        let uses = seen.entry(pid).or_insert(0);
        track[i] = if *uses == 0 {
            u64::from(pid)
        } else {
            stand_ins += 1;
            STAND_IN_PIDS + stand_ins
        };
        *uses += 1;
    }
    track
}

/// Counters: per process (memory, CPU%), the tree's memory per sweep, the machine's memory and
/// CPU, the GPUs; and the marks as instant events.
fn counter_events(data: &RunData, track: &[u64], us: &dyn Fn(i64) -> f64, events: &mut Vec<Value>) {
    let mut tree: std::collections::BTreeMap<i64, (u64, u64)> = Default::default();
    for s in &data.samples {
        let id = track[s.process];
        if s.exit {
            // The process is gone: its counters drop to zero.
            events.push(
                json!({"ph": "C", "pid": id, "name": "memory", "ts": us(s.time_ns),
                "args": {"rss_MiB": 0, "uss_MiB": 0}}),
            );
            continue;
        }
        let mut mem = serde_json::Map::new();
        if let Some(rss) = s.rss_bytes {
            mem.insert("rss_MiB".into(), json!(mib(rss)));
        }
        if let Some(uss) = s.uss_bytes {
            mem.insert("uss_MiB".into(), json!(mib(uss)));
        }
        if !mem.is_empty() {
            events.push(
                json!({"ph": "C", "pid": id, "name": "memory", "ts": us(s.time_ns),
                "args": mem}),
            );
        }
        if let Some(cpu) = s.cpu_percent {
            events.push(
                json!({"ph": "C", "pid": id, "name": "cpu", "ts": us(s.time_ns),
                "args": {"percent": (cpu * 100.0).round() / 100.0}}),
            );
        }
        let sum = tree.entry(s.time_ns).or_default();
        sum.0 += s.rss_bytes.unwrap_or(0);
        sum.1 += s.uss_bytes.unwrap_or(0);
    }
    for (t, (rss, uss)) in tree {
        events.push(
            json!({"ph": "C", "pid": MACHINE_PID, "name": "tree memory", "ts": us(t),
            "args": {"rss_MiB": mib(rss), "uss_MiB": mib(uss)}}),
        );
    }
    for s in &data.system {
        if let Some(used) = s.mem_used_bytes {
            events.push(
                json!({"ph": "C", "pid": MACHINE_PID, "name": "machine memory",
                "ts": us(s.time_ns), "args": {"used_MiB": mib(used)}}),
            );
        }
        if let Some(busy) = s.cpu_busy_percent {
            events.push(json!({"ph": "C", "pid": MACHINE_PID, "name": "machine cpu",
                "ts": us(s.time_ns), "args": {"busy_percent": (busy * 100.0).round() / 100.0}}));
        }
    }
    if let Some(gpu) = &data.gpu {
        for row in &gpu.rows {
            let mut args = serde_json::Map::new();
            for (slot, &column) in gpu.columns.iter().enumerate() {
                if let Some(v) = row.values[slot] {
                    args.insert(GPU_COLUMNS[column].0.into(), json!(v));
                }
            }
            if !args.is_empty() {
                events.push(json!({"ph": "C", "pid": MACHINE_PID,
                    "name": format!("gpu{}", row.gpu_index), "ts": us(row.time_ns), "args": args}));
            }
        }
    }
    for mark in &data.marks {
        events.push(
            json!({"ph": "i", "s": "g", "pid": MACHINE_PID, "tid": MACHINE_PID,
            "name": crate::analysis::report::mark_text(mark), "ts": us(mark.time_ns),
            "args": {"label": mark.label, "kind": mark.kind}}),
        );
    }
}

/// One CSV file written.
#[derive(Clone, Debug, PartialEq)]
pub struct CsvFile {
    pub table: String,
    pub path: PathBuf,
    pub rows: u64,
    /// Columns of a type the writer does not know, left empty (with why).
    pub skipped_columns: Vec<String>,
}

/// Writes one CSV per table of `run_dir` into `out_dir` (created if needed).
pub fn write_csv(run_dir: &Path, out_dir: &Path) -> anyhow::Result<Vec<CsvFile>> {
    crate::store::userfs::create_dir_all(out_dir)
        .with_context(|| format!("cannot create {}", out_dir.display()))?;
    let mut written = Vec::new();
    for table in load::table_names(run_dir) {
        let files = load::table_files(run_dir, &table);
        if files.is_empty() {
            continue;
        }
        let path = out_dir.join(format!("{table}.csv"));
        let temp = out_dir.join(format!(".{table}.csv.tmp"));
        let extra = if table == "processes" {
            unflushed_processes(run_dir)?
        } else {
            None
        };
        let result = write_csv_table(&files, extra.as_ref(), &temp, &path);
        if result.is_err() {
            // No half-written leftover.
            let _ = crate::store::userfs::remove_file(&temp);
        }
        let (rows, skipped) = result?;
        written.push(CsvFile {
            table,
            path,
            rows,
            skipped_columns: skipped,
        });
    }
    Ok(written)
}

/// A killed run's processes that have no processes row yet (they were still running), as rows
/// of that table made from their events: pid, start, parent, program, arguments and name, alive
/// at the end. None when there is none.
fn unflushed_processes(run_dir: &Path) -> anyhow::Result<Option<RecordBatch>> {
    let data = load::load(run_dir)?;
    let rows: Vec<crate::store::records::ProcessRecord> = data
        .processes
        .iter()
        .filter(|p| p.unflushed)
        .map(|p| crate::store::records::ProcessRecord {
            pid: p.pid,
            start_time_ns: p.start_ns,
            parent_pid: p.parent.map(|(pid, _)| pid),
            parent_start_time_ns: p.parent.map(|(_, start)| start),
            filename: p.filename.clone(),
            argv: p.argv.clone(),
            comm: p.comm.clone(),
            alive_at_end: true,
            ..Default::default()
        })
        .collect();
    if rows.is_empty() {
        return Ok(None);
    }
    Ok(Some(crate::store::schema::processes_batch(&rows)?))
}

/// One table's files (and `extra` rows) as CSV into `temp`, renamed to `path` once complete;
/// returns the rows written and the columns left empty.
fn write_csv_table(
    files: &[PathBuf],
    extra: Option<&RecordBatch>,
    temp: &Path,
    path: &Path,
) -> anyhow::Result<(u64, Vec<String>)> {
    {
        let file = crate::store::userfs::create_replacing(temp)
            .with_context(|| format!("cannot create {}", temp.display()))?;
        let mut w = BufWriter::new(file);
        let mut header_done = false;
        let mut rows = 0;
        let mut skipped = Vec::new();
        // The header comes from the schema, so an empty table still has one.
        for source in files {
            let f = crate::store::userfs::open(source)
                .with_context(|| format!("cannot open {}", source.display()))?;
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("cannot read {}", source.display()))?;
            if !header_done {
                let names: Vec<String> = builder
                    .schema()
                    .fields()
                    .iter()
                    .map(|f| csv_field(f.name()))
                    .collect();
                writeln!(w, "{}", names.join(","))?;
                header_done = true;
            }
            let reader = builder
                .build()
                .with_context(|| format!("cannot read {}", source.display()))?;
            for batch in reader {
                let batch = batch.with_context(|| format!("cannot read {}", source.display()))?;
                rows += write_batch(&mut w, &batch, &mut skipped)?;
            }
        }
        if let Some(batch) = extra {
            rows += write_batch(&mut w, batch, &mut skipped)?;
        }
        w.flush()
            .with_context(|| format!("cannot write {}", temp.display()))?;
        drop(w);
        crate::store::userfs::rename(temp, path)
            .with_context(|| format!("cannot rename {} to {}", temp.display(), path.display()))?;
        Ok((rows, skipped))
    }
}

/// One CSV field: quoted when it holds a comma, a quote, a line break, or edge spaces.
pub fn csv_field(text: &str) -> String {
    let needs =
        text.contains([',', '"', '\n', '\r']) || text.starts_with(' ') || text.ends_with(' ');
    if needs {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_string()
    }
}

/// A nanosecond timestamp in RFC 3339, UTC: `2024-05-01T12:00:00.123456789Z`.
pub fn rfc3339_ns(ns: i64) -> String {
    let micro = crate::units::rfc3339(ns);
    // `units::rfc3339` writes microseconds: put the nanoseconds in their place.
    match micro.rfind('.') {
        Some(dot) => format!("{}.{:09}Z", &micro[..dot], ns.rem_euclid(1_000_000_000)),
        None => micro,
    }
}

fn write_batch(
    w: &mut impl std::io::Write,
    batch: &RecordBatch,
    skipped: &mut Vec<String>,
) -> anyhow::Result<u64> {
    let schema = batch.schema();
    let columns: Vec<Vec<String>> = batch
        .columns()
        .iter()
        .zip(schema.fields())
        .map(|(array, field)| match column_text(array.as_ref()) {
            Some(values) => values,
            None => {
                let why = format!(
                    "column `{}` ({}) left empty: no CSV form for its type",
                    field.name(),
                    array.data_type()
                );
                if !skipped.contains(&why) {
                    skipped.push(why);
                }
                vec![String::new(); array.len()]
            }
        })
        .collect();
    let mut line = String::new();
    for row in 0..batch.num_rows() {
        line.clear();
        for (k, column) in columns.iter().enumerate() {
            if k > 0 {
                line.push(',');
            }
            line.push_str(&column[row]);
        }
        line.push('\n');
        w.write_all(line.as_bytes())?;
    }
    Ok(batch.num_rows() as u64)
}

fn prim_text<T: ArrowPrimitiveType>(array: &dyn Array) -> Vec<String>
where
    T::Native: std::fmt::Display,
{
    array
        .as_primitive::<T>()
        .iter()
        .map(|v| v.map_or(String::new(), |v| v.to_string()))
        .collect()
}

/// Every value of a column as CSV text (escaped), None for types without a CSV form.
fn column_text(array: &dyn Array) -> Option<Vec<String>> {
    Some(match array.data_type() {
        DataType::Boolean => array
            .as_boolean()
            .iter()
            .map(|v| v.map_or(String::new(), |v| v.to_string()))
            .collect(),
        DataType::Int8 => prim_text::<Int8Type>(array),
        DataType::Int16 => prim_text::<Int16Type>(array),
        DataType::Int32 => prim_text::<Int32Type>(array),
        DataType::Int64 => prim_text::<Int64Type>(array),
        DataType::UInt8 => prim_text::<UInt8Type>(array),
        DataType::UInt16 => prim_text::<UInt16Type>(array),
        DataType::UInt32 => prim_text::<UInt32Type>(array),
        DataType::UInt64 => prim_text::<UInt64Type>(array),
        DataType::Float32 => prim_text::<Float32Type>(array),
        DataType::Float64 => prim_text::<Float64Type>(array),
        DataType::Utf8 => array
            .as_string::<i32>()
            .iter()
            .map(|v| v.map_or(String::new(), csv_field))
            .collect(),
        DataType::LargeUtf8 => array
            .as_string::<i64>()
            .iter()
            .map(|v| v.map_or(String::new(), csv_field))
            .collect(),
        DataType::Timestamp(_, _) => load::times_ns(array)?
            .into_iter()
            .map(|v| v.map_or(String::new(), rfc3339_ns))
            .collect(),
        DataType::List(item) if item.data_type() == &DataType::Utf8 => {
            let list = array.as_list::<i32>();
            (0..list.len())
                .map(|i| {
                    if list.is_null(i) {
                        return String::new();
                    }
                    let values = list.value(i);
                    let items: Vec<Option<&str>> = values.as_string::<i32>().iter().collect();
                    csv_field(&serde_json::to_string(&items).unwrap_or_default())
                })
                .collect()
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fixture() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/run-small")
    }

    /// Records in a CSV text, line breaks inside quotes included (RFC 4180).
    fn csv_records(text: &str) -> Vec<Vec<String>> {
        let mut records = Vec::new();
        let mut record = Vec::new();
        let mut field = String::new();
        let mut quoted = false;
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (quoted, c) {
                (true, '"') if chars.peek() == Some(&'"') => {
                    field.push('"');
                    chars.next();
                }
                (true, '"') => quoted = false,
                (true, c) => field.push(c),
                (false, '"') => quoted = true,
                (false, ',') => record.push(std::mem::take(&mut field)),
                (false, '\n') => {
                    record.push(std::mem::take(&mut field));
                    records.push(std::mem::take(&mut record));
                }
                (false, c) => field.push(c),
            }
        }
        records
    }

    fn parquet_rows(path: &Path) -> u64 {
        let f = std::fs::File::open(path).unwrap();
        let b = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f).unwrap();
        b.metadata().file_metadata().num_rows() as u64
    }

    #[test]
    fn csv_fields_and_times() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a,b"), "\"a,b\"");
        assert_eq!(csv_field("say \"hi\"\n"), "\"say \"\"hi\"\"\n\"");
        assert_eq!(csv_field(" x"), "\" x\"");
        assert_eq!(
            rfc3339_ns(1_714_564_800_123_456_789),
            "2024-05-01T12:00:00.123456789Z"
        );
    }

    #[test]
    fn csv_export_round_trips_the_row_counts() {
        let out = tempfile::tempdir().unwrap();
        let written = write_csv(&fixture(), out.path()).unwrap();
        let tables: Vec<&str> = written.iter().map(|f| f.table.as_str()).collect();
        assert_eq!(tables, ["events", "processes", "samples", "system"]);
        for file in &written {
            assert!(
                file.skipped_columns.is_empty(),
                "{:?}",
                file.skipped_columns
            );
            let text = std::fs::read_to_string(&file.path).unwrap();
            let records = csv_records(&text);
            let source = fixture().join(format!("{}.parquet", file.table));
            let expected = parquet_rows(&source);
            assert_eq!(records.len() as u64 - 1, expected, "{}", file.table);
            assert_eq!(file.rows, expected);
            // Every record has as many fields as the header.
            let width = records[0].len();
            assert!(records.iter().all(|r| r.len() == width), "{}", file.table);
        }
        let processes = std::fs::read_to_string(out.path().join("processes.csv")).unwrap();
        let records = csv_records(&processes);
        assert_eq!(records[0][..3], ["pid", "start_time", "parent_pid"]);
        let argv_col = records[0].iter().position(|h| h == "argv").unwrap();
        // argv is a JSON array, with the quoting intact.
        let argv: Vec<String> = serde_json::from_str(&records[1][argv_col]).unwrap();
        assert!(!argv.is_empty());
        let start_col = records[0].iter().position(|h| h == "start_time").unwrap();
        assert!(records[1][start_col].ends_with('Z'));
        assert_eq!(
            records[1][start_col].len(),
            "2024-05-01T12:00:00.123456789Z".len()
        );
    }

    #[test]
    fn csv_export_of_parts_and_an_empty_table() {
        // A killed run: the samples are parts, marks has a header and no rows.
        let run = tempfile::tempdir().unwrap();
        let mut samples = crate::store::writer::PartedTable::samples(run.path()).unwrap();
        samples.push(Default::default()).unwrap();
        samples.flush().unwrap();
        samples.push(Default::default()).unwrap();
        samples.flush().unwrap();
        drop(samples);
        crate::store::writer::PartedTable::marks(run.path())
            .unwrap()
            .finish()
            .unwrap();
        let out = tempfile::tempdir().unwrap();
        let written = write_csv(run.path(), out.path()).unwrap();
        let rows: Vec<(&str, u64)> = written.iter().map(|f| (f.table.as_str(), f.rows)).collect();
        assert_eq!(rows, [("marks", 0), ("samples", 2)]);
        let marks = std::fs::read_to_string(out.path().join("marks.csv")).unwrap();
        assert_eq!(marks, "time,pid,start_time,label,kind\n");
    }

    #[test]
    fn perfetto_trace_has_a_track_per_process_and_counters() {
        let out = tempfile::tempdir().unwrap();
        let path = out.path().join("trace.json");
        write_perfetto(&fixture(), &path).unwrap();
        let trace: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let events = trace["traceEvents"].as_array().unwrap();
        let data = load::load(&fixture()).unwrap();
        let named = |name: &str| -> Vec<&Value> {
            events
                .iter()
                .filter(|e| e["ph"] == "M" && e["name"] == name)
                .collect()
        };
        let tracks: std::collections::HashSet<u64> = named("process_name")
            .iter()
            .map(|e| e["pid"].as_u64().unwrap())
            .filter(|&p| p != MACHINE_PID)
            .collect();
        assert_eq!(tracks.len(), data.processes.len());
        let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        assert_eq!(slices.len(), data.processes.len());
        for slice in &slices {
            assert!(tracks.contains(&slice["pid"].as_u64().unwrap()));
            assert!(slice["dur"].as_f64().unwrap() >= 0.0);
        }
        let counters = |name: &str| {
            events
                .iter()
                .filter(|e| e["ph"] == "C" && e["name"] == name)
                .count()
        };
        assert!(counters("memory") > 0);
        assert!(counters("cpu") > 0);
        assert!(counters("tree memory") > 0);
        assert_eq!(counters("machine memory"), data.system.len());
        // The tree's root comes first, its children after it.
        let sorted = named("process_sort_index");
        let first = sorted
            .iter()
            .find(|e| e["args"]["sort_index"] == 0)
            .unwrap();
        let root = data.processes.iter().min_by_key(|p| p.start_ns).unwrap();
        assert_eq!(first["pid"].as_u64(), Some(u64::from(root.pid)));
    }

    #[test]
    fn reused_pids_get_their_own_tracks() {
        let mut data = load::load(&fixture()).unwrap();
        let mut again = data.processes[0].clone();
        again.start_ns += 1;
        data.processes.push(again);
        let trace = perfetto_trace(&data);
        let ids: std::collections::HashSet<u64> = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "X")
            .map(|e| e["pid"].as_u64().unwrap())
            .collect();
        assert_eq!(ids.len(), data.processes.len());
        assert!(ids.iter().any(|&id| id > STAND_IN_PIDS));
    }

    #[test]
    fn synthetic_run_exports() {
        let run = tempfile::tempdir().unwrap();
        crate::analysis::report::synthetic_run(
            run.path(),
            40,
            Duration::from_secs(5),
            Duration::from_millis(200),
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        let written = write_csv(run.path(), &out.path().join("csv")).unwrap();
        let tables: Vec<&str> = written.iter().map(|f| f.table.as_str()).collect();
        assert_eq!(
            tables,
            ["events", "marks", "processes", "samples", "system"]
        );
        let trace = perfetto_trace(&load::load(run.path()).unwrap());
        let marks = trace["traceEvents"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["ph"] == "i")
            .count();
        assert_eq!(marks, 3);
    }
}
