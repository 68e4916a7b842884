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
//!   Written as it is read, in memory that does not grow with the run's rows ([`perfetto`]).
//! - **BMF** (`--format bmf`): the run's summary.json in Bencher Metric Format, for
//!   `bencher run --adapter json` (the same layout as `compare --format bmf`).

use std::io::{BufWriter, Write as _};
use std::path::{Path, PathBuf};

use crate::analysis::report::load;
use crate::store::schema::exact_time_column;
use anyhow::Context as _;
use arrow_array::cast::AsArray;
use arrow_array::types::*;
use arrow_array::{Array, RecordBatch};
use arrow_schema::DataType;

mod perfetto;
pub use perfetto::{write_perfetto, write_trace, Tree};

/// A temporary name beside `path`, of this process alone: two exports to one place at once
/// (two users, two terminals) never write the same temporary file; the last rename wins whole.
pub fn temp_beside(path: &Path) -> PathBuf {
    path.with_file_name(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ))
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
        let temp = temp_beside(&path);
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
    let tree = Tree::read(run_dir)?;
    let rows: Vec<crate::store::records::ProcessRecord> = tree
        .stand_ins
        .iter()
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
        let mut header = Vec::new();
        let mut rows = 0;
        let mut skipped = Vec::new();
        // The header comes from the schema, so an empty table still has one.
        for source in files {
            let f = crate::store::userfs::open(source)
                .with_context(|| format!("cannot open {}", source.display()))?;
            let builder = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
                .with_context(|| format!("cannot read {}", source.display()))?;
            if !header_done {
                header = csv_columns(builder.schema());
                let names: Vec<String> = header.iter().map(|name| csv_field(name)).collect();
                writeln!(w, "{}", names.join(","))?;
                header_done = true;
            }
            let reader = builder
                .build()
                .with_context(|| format!("cannot read {}", source.display()))?;
            for batch in reader {
                let batch = batch.with_context(|| format!("cannot read {}", source.display()))?;
                rows += write_batch(&mut w, &header, &batch, &mut skipped)?;
            }
        }
        if let Some(batch) = extra {
            rows += write_batch(&mut w, &header, batch, &mut skipped)?;
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

/// The CSV columns of a table: its columns in order, less the exact twins of its timestamp
/// columns (schema version 3's `<name>_ns`), whose nanoseconds the timestamp's own CSV column
/// shows (`2024-05-01T12:00:00.123456789Z`), as for runs of earlier versions.
fn csv_columns(schema: &arrow_schema::Schema) -> Vec<String> {
    let is_time = |name: &str| {
        schema
            .field_with_name(name)
            .is_ok_and(|f| matches!(f.data_type(), DataType::Timestamp(_, _)))
    };
    schema
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .filter(|name| {
            !name
                .strip_suffix("_ns")
                .is_some_and(|time| is_time(time) && *name == exact_time_column(time))
        })
        .collect()
}

/// The rows of `batch` under `header` (by name, so that the rows of another schema version
/// line up; a column the batch lacks is left empty). A timestamp column is written from its
/// exact twin where the batch has one.
fn write_batch(
    w: &mut impl std::io::Write,
    header: &[String],
    batch: &RecordBatch,
    skipped: &mut Vec<String>,
) -> anyhow::Result<u64> {
    let c = load::Cols {
        batch,
        path: Path::new(""),
    };
    let columns: Vec<Vec<String>> = header
        .iter()
        .map(|name| {
            let Some(array) = batch.column_by_name(name) else {
                return vec![String::new(); batch.num_rows()];
            };
            if matches!(array.data_type(), DataType::Timestamp(_, _)) {
                if let Some(times) = c.times_ns(name) {
                    return times
                        .into_iter()
                        .map(|v| v.map_or(String::new(), rfc3339_ns))
                        .collect();
                }
            }
            match column_text(array.as_ref()) {
                Some(values) => values,
                None => {
                    let why = format!(
                        "column `{name}` ({}) left empty: no CSV form for its type",
                        array.data_type()
                    );
                    if !skipped.contains(&why) {
                        skipped.push(why);
                    }
                    vec![String::new(); array.len()]
                }
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
        samples
            .push(crate::store::records::SampleRecord {
                time_ns: 1_700_000_000_123_456_789,
                start_time_ns: 1_700_000_000_000_000_001,
                ..Default::default()
            })
            .unwrap();
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
        // The timestamps' exact twins are not columns of their own: the times show their
        // nanoseconds.
        assert_eq!(marks, "time,pid,start_time,label,kind\n");
        let samples = std::fs::read_to_string(out.path().join("samples.csv")).unwrap();
        let mut lines = samples.lines();
        let header = lines.next().unwrap();
        assert!(
            header.starts_with("time,pid,start_time,source,"),
            "{header}"
        );
        assert!(
            !header
                .split(',')
                .any(|h| h == "time_ns" || h == "start_time_ns"),
            "{header}"
        );
        assert!(
            lines
                .next()
                .unwrap()
                .starts_with("2023-11-14T22:13:20.123456789Z,0,2023-11-14T22:13:20.000000001Z,"),
            "{samples}"
        );
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
    }
}
