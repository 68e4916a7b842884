//! The flight recorder (`montrace agent --history DIR`, issue 33): every process that exits on
//! the machine, one row each, in rolling Parquet files under DIR; and the answers to
//! `montrace history`, filtered by who asks.
//!
//! A row is processes.parquet's row of that process (the same columns, from
//! [`schema::processes_batch`]: one source of truth) followed by [`EXTRA_COLUMNS`]: the real uid
//! the process exited with and its cgroup (the id, and the path under the cgroup2 mount when it
//! was known). The rows buffered in memory are written as one complete file at each period
//! (`--history-period`) or every [`MAX_BUFFERED_ROWS`] rows, under a temporary name renamed
//! when complete and synced: a file is there whole or not at all, and an agent killed loses at
//! most the rows of one period. Files are named by the first and last exit time they hold
//! ([`file_name`]), so a query reads only those that can hold its interval, and retention
//! (`--history-max-age`, `--history-max-bytes`) removes the oldest first ([`to_remove`]).
//!
//! DIR is root's alone (0700): a user reads their own processes through the agent's socket,
//! which checks who asks by `SO_PEERCRED`; root may read the files directly (DuckDB:
//! `SELECT * FROM 'DIR/*.parquet'`).
pub mod filter;
pub mod query;
pub mod recorder;

use std::sync::Arc;

use arrow_array::{ArrayRef, RecordBatch, StringArray, UInt32Array, UInt64Array};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef};
use serde::{Deserialize, Serialize};

use crate::store::{records::ProcessRecord, schema};

/// The columns a history file has after processes.parquet's.
pub const EXTRA_COLUMNS: [&str; 3] = ["uid", "cgroup_id", "cgroup"];

/// Rows held in memory before a file is written, whatever the period.
pub const MAX_BUFFERED_ROWS: usize = 50_000;

/// A process that exited, as the recorder keeps it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exited {
    pub process: ProcessRecord,
    /// Its real uid at exit; None where its exit event did not say (its exit record was lost).
    pub uid: Option<u32>,
    pub cgroup_id: Option<u64>,
    /// Its cgroup's path under the cgroup2 mount (`/user.slice/...`), when it was found.
    pub cgroup: Option<String>,
}

/// Schema of a history file: processes.parquet's, then [`EXTRA_COLUMNS`].
pub fn history_schema() -> SchemaRef {
    let processes = schema::processes_schema();
    let mut fields: Vec<Field> = processes
        .fields()
        .iter()
        .map(|f| f.as_ref().clone())
        .collect();
    fields.push(Field::new(EXTRA_COLUMNS[0], DataType::UInt32, true));
    fields.push(Field::new(EXTRA_COLUMNS[1], DataType::UInt64, true));
    fields.push(Field::new(EXTRA_COLUMNS[2], DataType::Utf8, true));
    Arc::new(Schema::new(fields).with_metadata(processes.metadata().clone()))
}

/// The rows of a history file, in the given order.
pub fn history_batch(rows: &[Exited]) -> Result<RecordBatch, ArrowError> {
    let processes: Vec<ProcessRecord> = rows.iter().map(|r| r.process.clone()).collect();
    let base = schema::processes_batch(&processes)?;
    let mut columns: Vec<ArrayRef> = base.columns().to_vec();
    columns.push(Arc::new(UInt32Array::from_iter(rows.iter().map(|r| r.uid))));
    columns.push(Arc::new(UInt64Array::from_iter(
        rows.iter().map(|r| r.cgroup_id),
    )));
    columns.push(Arc::new(StringArray::from_iter(
        rows.iter().map(|r| r.cgroup.as_deref()),
    )));
    RecordBatch::try_new(history_schema(), columns)
}

/// One process in a history answer (`montrace history`'s row; a JSON line on the socket).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct HistoryRow {
    pub pid: u32,
    pub parent_pid: Option<u32>,
    pub uid: Option<u32>,
    pub cgroup_id: Option<u64>,
    pub cgroup: Option<String>,
    pub comm: String,
    pub filename: Option<String>,
    pub argv: Option<Vec<String>>,
    /// Wall-clock ns since the Unix epoch.
    pub start_ns: i64,
    pub end_ns: Option<i64>,
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    pub cpu_user_ns: Option<u64>,
    pub cpu_system_ns: Option<u64>,
    pub peak_rss_bytes: Option<u64>,
    pub read_bytes: Option<u64>,
    pub write_bytes: Option<u64>,
}

impl HistoryRow {
    /// Whether `uid` (a client's, from SO_PEERCRED) may see this row: root every row, a user
    /// only those of processes that exited as that user.
    pub fn visible_to(&self, uid: u32) -> bool {
        uid == 0 || self.uid == Some(uid)
    }

    /// Whether the process lived at some moment of [`since_ns`, `until_ns`].
    pub fn lived_within(&self, since_ns: i64, until_ns: i64) -> bool {
        self.start_ns <= until_ns && self.end_ns.unwrap_or(i64::MAX) >= since_ns
    }
}

/// The prefix and suffix of a history file's name.
const PREFIX: &str = "exits-";
const SUFFIX: &str = ".parquet";

/// `exits-FIRST-LAST.parquet`: the first and last exit time (ns since the Unix epoch) of its
/// rows, zero-padded so that names sort by time.
pub fn file_name(first_end_ns: i64, last_end_ns: i64) -> String {
    format!(
        "{PREFIX}{:019}-{:019}{SUFFIX}",
        first_end_ns.max(0),
        last_end_ns.max(0)
    )
}

/// The exit times a name of [`file_name`] says; None for any other file.
pub fn parse_file_name(name: &str) -> Option<(i64, i64)> {
    let middle = name.strip_prefix(PREFIX)?.strip_suffix(SUFFIX)?;
    let (first, last) = middle.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

/// A history file as retention sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredFile {
    pub name: String,
    /// The last exit time it holds (from its name).
    pub last_end_ns: i64,
    pub bytes: u64,
}

/// Which files retention removes (indexes into `files`): those whose newest row is older than
/// `max_age_ns` before `now_ns`, then the oldest of the rest until they take at most
/// `max_bytes`. The newest file is never removed for size (a single file over the limit stays
/// until a newer one comes).
pub fn to_remove(files: &[StoredFile], now_ns: i64, max_age_ns: i64, max_bytes: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..files.len()).collect();
    order.sort_by_key(|&i| (files[i].last_end_ns, files[i].name.clone()));
    let mut removed = Vec::new();
    let mut kept_bytes: u64 = files.iter().map(|f| f.bytes).sum();
    let newest = order.last().copied();
    for &i in &order {
        let too_old = now_ns.saturating_sub(files[i].last_end_ns) > max_age_ns;
        let too_big = kept_bytes > max_bytes && Some(i) != newest;
        if too_old || too_big {
            removed.push(i);
            kept_bytes -= files[i].bytes;
        }
    }
    removed
}

/// Whether the buffered rows are written now: there are some, and the oldest has waited a
/// period, or there are [`MAX_BUFFERED_ROWS`].
pub fn due(buffered: usize, waited_ns: i64, period_ns: i64) -> bool {
    buffered > 0 && (waited_ns >= period_ns || buffered >= MAX_BUFFERED_ROWS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_carry_the_exit_times_and_sort_by_them() {
        let a = file_name(5, 1_700_000_000_000_000_000);
        assert_eq!(parse_file_name(&a), Some((5, 1_700_000_000_000_000_000)));
        assert!(file_name(9, 10) < file_name(10, 11));
        assert_eq!(parse_file_name(".exits-1-2.parquet.tmp"), None);
        assert_eq!(parse_file_name("exits-1.parquet"), None);
        assert_eq!(parse_file_name("other.parquet"), None);
    }

    fn file(name: &str, last: i64, bytes: u64) -> StoredFile {
        StoredFile {
            name: name.into(),
            last_end_ns: last,
            bytes,
        }
    }

    #[test]
    fn retention_drops_the_too_old_then_the_oldest_until_the_size_fits() {
        let files = [file("b", 200, 10), file("a", 100, 10), file("c", 300, 10)];
        // Nothing to do.
        assert!(to_remove(&files, 310, 1_000, 100).is_empty());
        // Age: older than 150 at 310 is "a" (210 old) and "b" (110 old? no: 110 < 150).
        assert_eq!(to_remove(&files, 310, 150, 100), vec![1]);
        // Size: 30 bytes kept at most 15: the two oldest go, the newest stays.
        assert_eq!(to_remove(&files, 310, 1_000, 15), vec![1, 0]);
        // The newest file stays even alone over the limit.
        assert_eq!(to_remove(&files, 310, 1_000, 0), vec![1, 0]);
        // ... but not past the age limit.
        assert_eq!(to_remove(&files, 10_000, 1_000, 0), vec![1, 0, 2]);
    }

    #[test]
    fn rows_are_written_at_each_period_or_when_many() {
        assert!(!due(0, 10_000, 1));
        assert!(!due(5, 9, 10));
        assert!(due(5, 10, 10));
        assert!(due(MAX_BUFFERED_ROWS, 0, 10));
    }

    #[test]
    fn who_sees_a_row_and_when_it_lived() {
        let row = HistoryRow {
            uid: Some(1000),
            start_ns: 100,
            end_ns: Some(200),
            ..HistoryRow::default()
        };
        assert!(row.visible_to(1000));
        assert!(row.visible_to(0));
        assert!(!row.visible_to(1001));
        let unknown = HistoryRow {
            uid: None,
            ..row.clone()
        };
        assert!(!unknown.visible_to(1000) && unknown.visible_to(0));
        assert!(row.lived_within(150, 160));
        assert!(row.lived_within(0, 100));
        assert!(row.lived_within(200, 300));
        assert!(!row.lived_within(201, 300));
        assert!(!row.lived_within(0, 99));
    }

    #[test]
    fn a_history_file_is_processes_columns_then_uid_and_cgroup() {
        let rows = [Exited {
            process: ProcessRecord {
                pid: 7,
                start_time_ns: 1_000,
                end_time_ns: Some(2_000),
                comm: "true".into(),
                cpu_user_ns: Some(3),
                ..ProcessRecord::default()
            },
            uid: Some(1000),
            cgroup_id: Some(42),
            cgroup: None,
        }];
        let batch = history_batch(&rows).unwrap();
        let processes = schema::processes_schema();
        let names: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .collect();
        let expected: Vec<&str> = processes
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .chain(EXTRA_COLUMNS)
            .collect();
        assert_eq!(names, expected);
        assert_eq!(batch.num_rows(), 1);
        let uid = batch.column_by_name("uid").unwrap();
        let uid = uid.as_any().downcast_ref::<UInt32Array>().unwrap();
        assert_eq!(uid.value(0), 1000);
    }
}
