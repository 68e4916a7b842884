//! Parquet output: zstd-compressed files whose key-value metadata carries the schema's metadata
//! (the schema version among it). Every error names the file it concerns.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::RecordBatch;
use arrow_schema::{ArrowError, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::errors::ParquetError;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;

use crate::model::EventRecord;
use crate::schema;

/// Events buffered by [`EventSink`] before they are written out as one row group.
pub const EVENT_BATCH_ROWS: usize = 8192;

const ZSTD_LEVEL: i32 = 3;

#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("cannot create {}: {source}", .path.display())]
    Create {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot write {}: {source}", .path.display())]
    Parquet { path: PathBuf, source: ParquetError },
    #[error("cannot write {}: {source}", .path.display())]
    Arrow { path: PathBuf, source: ArrowError },
}

/// One Parquet file being written. Rows are buffered in memory until [`TableWriter::flush`]
/// closes the row group; [`TableWriter::finish`] writes the footer, without which the file is
/// unreadable.
pub struct TableWriter {
    path: PathBuf,
    schema: SchemaRef,
    inner: ArrowWriter<File>,
}

impl TableWriter {
    /// Creates (or truncates) `path` for rows of `schema`.
    pub fn create(path: &Path, schema: SchemaRef) -> Result<Self, WriteError> {
        let path = path.to_path_buf();
        let metadata = schema
            .metadata()
            .iter()
            .map(|(k, v)| KeyValue::new(k.clone(), v.clone()))
            .collect();
        let level = ZstdLevel::try_new(ZSTD_LEVEL).expect("valid zstd level");
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(level))
            .set_key_value_metadata(Some(metadata))
            .build();
        let file = match File::create(&path) {
            Ok(file) => file,
            Err(source) => return Err(WriteError::Create { path, source }),
        };
        match ArrowWriter::try_new(file, schema.clone(), Some(props)) {
            Ok(inner) => Ok(TableWriter {
                path,
                schema,
                inner,
            }),
            Err(source) => Err(WriteError::Parquet { path, source }),
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Adds rows to the current row group. The batch must have the writer's schema.
    pub fn write(&mut self, batch: &RecordBatch) -> Result<(), WriteError> {
        // ArrowWriter does not check this itself: a mismatched batch would corrupt the file.
        if batch.schema().fields() != self.schema.fields() {
            let source = ArrowError::SchemaError(format!(
                "batch columns {:?} do not match the file's {:?}",
                field_names(&batch.schema()),
                field_names(&self.schema)
            ));
            return Err(WriteError::Arrow {
                path: self.path.clone(),
                source,
            });
        }
        let result = self.inner.write(batch);
        self.check(result)
    }

    /// Closes the current row group and hands its bytes to the OS, so that buffered rows do not
    /// pile up in memory.
    pub fn flush(&mut self) -> Result<(), WriteError> {
        let result = self.inner.flush();
        self.check(result)?;
        let result = self.inner.sync().map_err(ParquetError::from);
        self.check(result)
    }

    /// Writes the footer and closes the file; returns how many rows it holds.
    pub fn finish(self) -> Result<u64, WriteError> {
        let TableWriter { path, inner, .. } = self;
        match inner.close() {
            Ok(metadata) => Ok(metadata.file_metadata().num_rows() as u64),
            Err(source) => Err(WriteError::Parquet { path, source }),
        }
    }

    fn check<T>(&self, result: Result<T, ParquetError>) -> Result<T, WriteError> {
        result.map_err(|source| WriteError::Parquet {
            path: self.path.clone(),
            source,
        })
    }
}

fn field_names(schema: &SchemaRef) -> Vec<&str> {
    schema.fields().iter().map(|f| f.name().as_str()).collect()
}

/// Writes a whole table at once (e.g. `processes.parquet` at the end of a run); returns its rows.
pub fn write_table(path: &Path, schema: SchemaRef, batch: &RecordBatch) -> Result<u64, WriteError> {
    let mut writer = TableWriter::create(path, schema)?;
    writer.write(batch)?;
    writer.finish()
}

/// `events.parquet`, written as the events come: every `batch_rows` events (or on
/// [`EventSink::flush`]) the buffer becomes one row group, so memory stays bounded on long runs.
pub struct EventSink {
    writer: TableWriter,
    buffer: Vec<EventRecord>,
    batch_rows: usize,
}

impl EventSink {
    pub fn create(path: &Path) -> Result<Self, WriteError> {
        Self::with_batch_rows(path, EVENT_BATCH_ROWS)
    }

    /// Like [`EventSink::create`], writing a row group every `batch_rows` events (at least 1).
    pub fn with_batch_rows(path: &Path, batch_rows: usize) -> Result<Self, WriteError> {
        let batch_rows = batch_rows.max(1);
        Ok(EventSink {
            writer: TableWriter::create(path, schema::events_schema())?,
            buffer: Vec::with_capacity(batch_rows),
            batch_rows,
        })
    }

    pub fn path(&self) -> &Path {
        self.writer.path()
    }

    pub fn push(&mut self, event: EventRecord) -> Result<(), WriteError> {
        self.buffer.push(event);
        if self.buffer.len() >= self.batch_rows {
            self.flush()?;
        }
        Ok(())
    }

    /// Writes the buffered events as a row group (nothing when none are buffered).
    pub fn flush(&mut self) -> Result<(), WriteError> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        let batch = schema::events_batch(&self.buffer).map_err(|source| WriteError::Arrow {
            path: self.writer.path.clone(),
            source,
        })?;
        self.buffer.clear();
        self.writer.write(&batch)?;
        self.writer.flush()
    }

    /// Writes what is buffered and the footer; returns how many events the file holds.
    pub fn finish(mut self) -> Result<u64, WriteError> {
        self.flush()?;
        self.writer.finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{EventKind, ProcessRecord};
    use crate::schema::{events_batch, processes_batch, processes_schema, SCHEMA_VERSION_KEY};
    use arrow_array::cast::AsArray;
    use arrow_array::types::{TimestampNanosecondType, UInt32Type, UInt64Type};
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::file::metadata::ParquetMetaData;

    /// Reads a whole file back: its Parquet metadata and its rows. Checks that the Arrow schema
    /// read from the file is `schema`, metadata included.
    fn read(path: &Path, schema: SchemaRef) -> (ParquetMetaData, Vec<RecordBatch>) {
        let builder = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
        assert_eq!(builder.schema(), &schema);
        let metadata = builder.metadata().as_ref().clone();
        let batches = builder
            .build()
            .unwrap()
            .collect::<Result<Vec<_>, _>>()
            .unwrap();
        (metadata, batches)
    }

    /// Same columns (types, timezones, nullability) and the same values and nulls. Batches
    /// read back carry no schema metadata, so that is left out.
    fn assert_same_rows(back: &RecordBatch, expected: &RecordBatch) {
        assert_eq!(back.schema().fields(), expected.schema().fields());
        assert_eq!(back.columns(), expected.columns());
    }

    /// The file says its schema version and compresses every column with zstd.
    fn assert_file_format(metadata: &ParquetMetaData) {
        let kv = metadata.file_metadata().key_value_metadata().unwrap();
        let version = kv.iter().find(|kv| kv.key == SCHEMA_VERSION_KEY).unwrap();
        assert_eq!(version.value.as_deref(), Some("1"));
        assert!(metadata.num_row_groups() > 0);
        for row_group in metadata.row_groups() {
            for column in row_group.columns() {
                assert!(
                    matches!(column.compression(), Compression::ZSTD(_)),
                    "{column:?}"
                );
            }
        }
    }

    fn full_process() -> ProcessRecord {
        ProcessRecord {
            pid: 1234,
            start_time_ns: 1_700_000_000_123_456_789,
            parent_pid: Some(1000),
            parent_start_time_ns: Some(1_699_999_999_000_000_001),
            end_time_ns: Some(1_700_000_002_987_654_321),
            filename: Some("/usr/bin/env".into()),
            argv: Some(vec!["env".into(), String::new(), "x=ü y".into()]),
            argv_truncated: true,
            comm: "env".into(),
            exec_count: 3,
            exit_code: Some(0),
            exit_signal: Some(11),
            core_dumped: true,
            cpu_user_ns: Some(1_500_000_000),
            cpu_system_ns: Some(250_000_000),
            peak_rss_bytes: Some(5 << 30),
            minor_faults: Some(100),
            major_faults: Some(2),
            voluntary_ctxt_switches: Some(30),
            involuntary_ctxt_switches: Some(4),
            read_bytes: Some(4096),
            write_bytes: Some(8192),
            read_chars: Some(10_000),
            write_chars: Some(20_000),
            alive_at_end: false,
        }
    }

    fn event(i: u32) -> EventRecord {
        EventRecord {
            time_ns: 1_700_000_000_000_000_000 + i64::from(i),
            kind: EventKind::Exec,
            pid: i,
            start_time_ns: 1_600_000_000_000_000_000,
            parent_pid: None,
            parent_start_time_ns: None,
            filename: Some(format!("/bin/prog{i}")),
            argv: Some(vec![format!("prog{i}"), "--flag".into()]),
            tid: None,
            exit_code: None,
            exit_signal: None,
            cpu_user_ns: None,
            cpu_system_ns: None,
            peak_rss_bytes: None,
        }
    }

    #[test]
    fn processes_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("processes.parquet");
        let sparse = ProcessRecord {
            pid: 7,
            start_time_ns: -5,
            comm: "sh".into(),
            alive_at_end: true,
            ..Default::default()
        };
        let batch = processes_batch(&[full_process(), sparse]).unwrap();
        assert_eq!(write_table(&path, processes_schema(), &batch).unwrap(), 2);

        let (metadata, batches) = read(&path, processes_schema());
        assert_file_format(&metadata);
        assert_eq!(batches.len(), 1);
        let back = &batches[0];
        assert_same_rows(back, &batch);

        let start = back
            .column_by_name("start_time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        assert_eq!(start.timezone(), Some("UTC"));
        assert_eq!(start.values(), &[1_700_000_000_123_456_789, -5]);
        let end = back
            .column_by_name("end_time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        assert_eq!(end.value(0), 1_700_000_002_987_654_321);
        assert!(end.is_null(1));
        let argv = back.column_by_name("argv").unwrap().as_list::<i32>();
        let args: Vec<_> = argv
            .value(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .map(str::to_owned)
            .collect();
        assert_eq!(args, ["env", "", "x=ü y"]);
        assert!(argv.is_null(1));
        let rss = back
            .column_by_name("peak_rss_bytes")
            .unwrap()
            .as_primitive::<UInt64Type>();
        assert_eq!(rss.value(0), 5 << 30);
        let comm = back.column_by_name("comm").unwrap().as_string::<i32>();
        assert_eq!(comm.value(1), "sh");
        for (field, column) in back.schema().fields().iter().zip(back.columns()) {
            assert!(
                !column.is_null(0),
                "{} is null for the full record",
                field.name()
            );
            assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
        }
    }

    #[test]
    fn events_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.parquet");
        let exit = EventRecord {
            time_ns: 1_700_000_003_000_000_000,
            kind: EventKind::Exit,
            pid: 1234,
            start_time_ns: 1_700_000_000_123_456_789,
            parent_pid: Some(1000),
            parent_start_time_ns: Some(1_699_999_999_000_000_001),
            filename: Some("/usr/bin/env".into()),
            argv: Some(vec!["env".into()]),
            tid: Some(1235),
            exit_code: Some(3),
            exit_signal: Some(9),
            cpu_user_ns: Some(10),
            cpu_system_ns: Some(20),
            peak_rss_bytes: Some(30),
        };
        let fork = EventRecord {
            kind: EventKind::Fork,
            parent_pid: None,
            parent_start_time_ns: None,
            filename: None,
            argv: None,
            tid: None,
            exit_code: None,
            exit_signal: None,
            cpu_user_ns: None,
            cpu_system_ns: None,
            peak_rss_bytes: None,
            ..exit.clone()
        };
        let events = vec![exit, fork];
        let mut sink = EventSink::create(&path).unwrap();
        for event in &events {
            sink.push(event.clone()).unwrap();
        }
        assert_eq!(sink.finish().unwrap(), 2);

        let (metadata, batches) = read(&path, schema::events_schema());
        assert_file_format(&metadata);
        assert_eq!(batches.len(), 1);
        let back = &batches[0];
        assert_same_rows(back, &events_batch(&events).unwrap());
        let time = back
            .column_by_name("time")
            .unwrap()
            .as_primitive::<TimestampNanosecondType>();
        assert_eq!(time.timezone(), Some("UTC"));
        assert_eq!(time.value(0), 1_700_000_003_000_000_000);
        let kind = back.column_by_name("kind").unwrap().as_string::<i32>();
        assert_eq!(kind.iter().flatten().collect::<Vec<_>>(), ["exit", "fork"]);
        let tid = back
            .column_by_name("tid")
            .unwrap()
            .as_primitive::<UInt32Type>();
        assert_eq!(tid.value(0), 1235);
        for (field, column) in back.schema().fields().iter().zip(back.columns()) {
            assert!(
                !column.is_null(0),
                "{} is null for the full event",
                field.name()
            );
            assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
        }
    }

    #[test]
    fn event_sink_writes_bounded_row_groups_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.parquet");
        let mut sink = EventSink::with_batch_rows(&path, 100).unwrap();
        for i in 0..250 {
            sink.push(event(i)).unwrap();
        }
        assert_eq!(sink.finish().unwrap(), 250);

        let (metadata, batches) = read(&path, schema::events_schema());
        assert_file_format(&metadata);
        let sizes: Vec<i64> = metadata
            .row_groups()
            .iter()
            .map(|rg| rg.num_rows())
            .collect();
        assert_eq!(sizes, [100, 100, 50]);
        let expected: Vec<EventRecord> = (0..250).map(event).collect();
        let pids: Vec<u32> = batches
            .iter()
            .flat_map(|b| {
                b.column_by_name("pid")
                    .unwrap()
                    .as_primitive::<UInt32Type>()
                    .values()
                    .to_vec()
            })
            .collect();
        assert_eq!(pids, (0..250).collect::<Vec<_>>());
        // Row by row the same as converting all events at once.
        let all = events_batch(&expected).unwrap();
        let mut offset = 0;
        for batch in &batches {
            assert_same_rows(batch, &all.slice(offset, batch.num_rows()));
            offset += batch.num_rows();
        }
        assert_eq!(offset, 250);
    }

    #[test]
    fn event_sink_flush_closes_a_row_group() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.parquet");
        let mut sink = EventSink::create(&path).unwrap();
        sink.push(event(1)).unwrap();
        sink.flush().unwrap();
        sink.flush().unwrap(); // nothing buffered: no empty row group
        sink.push(event(2)).unwrap();
        assert_eq!(sink.finish().unwrap(), 2);
        let (metadata, _) = read(&path, schema::events_schema());
        assert_eq!(metadata.num_row_groups(), 2);
    }

    #[test]
    fn empty_sink_is_a_valid_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.parquet");
        assert_eq!(EventSink::create(&path).unwrap().finish().unwrap(), 0);
        let (metadata, batches) = read(&path, schema::events_schema());
        assert_eq!(metadata.file_metadata().num_rows(), 0);
        assert!(batches.is_empty());
        let kv = metadata.file_metadata().key_value_metadata().unwrap();
        assert!(kv.iter().any(|kv| kv.key == SCHEMA_VERSION_KEY));
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing").join("processes.parquet");
        let err = TableWriter::create(&path, processes_schema())
            .err()
            .unwrap();
        assert!(matches!(err, WriteError::Create { .. }));
        assert!(
            err.to_string()
                .starts_with(&format!("cannot create {}: ", path.display())),
            "{err}"
        );

        let path = dir.path().join("processes.parquet");
        let mut writer = TableWriter::create(&path, processes_schema()).unwrap();
        let err = writer
            .write(&events_batch(&[event(1)]).unwrap())
            .unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("cannot write {}: ", path.display())),
            "{err}"
        );
    }
}
