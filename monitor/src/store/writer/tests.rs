use super::*;
use crate::store::records::{EventKind, ProcessRecord, SampleSource};
use crate::store::schema::tests::{full_sample, full_system};
use crate::store::schema::{
    events_batch, processes_batch, processes_schema, samples_batch, system_batch,
    SCHEMA_VERSION_KEY,
};
use arrow_array::cast::AsArray;
use arrow_array::types::{Int64Type, TimestampMicrosecondType, UInt32Type, UInt64Type};
use arrow_array::Array;
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

/// The file says its schema version and compresses every column with zstd from
/// [`COMPRESS_FROM_ROWS`] rows on, with statistics; none below.
fn assert_file_format(metadata: &ParquetMetaData) {
    let kv = metadata.file_metadata().key_value_metadata().unwrap();
    let version = kv.iter().find(|kv| kv.key == SCHEMA_VERSION_KEY).unwrap();
    assert_eq!(version.value.as_deref(), Some("3"));
    let compressed = metadata.file_metadata().num_rows() as u64 >= COMPRESS_FROM_ROWS;
    for row_group in metadata.row_groups() {
        for column in row_group.columns() {
            assert_eq!(column.statistics().is_some(), compressed, "{column:?}");
            match compressed {
                true => assert!(
                    matches!(column.compression(), Compression::ZSTD(_)),
                    "{column:?}"
                ),
                false => assert_eq!(
                    column.compression(),
                    Compression::UNCOMPRESSED,
                    "{column:?}"
                ),
            }
        }
    }
}

/// The names in `dir`, sorted.
fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The `pid` column of batches, in order.
fn pids(batches: &[RecordBatch]) -> Vec<u32> {
    batches
        .iter()
        .flat_map(|b| {
            b.column_by_name("pid")
                .unwrap()
                .as_primitive::<UInt32Type>()
                .values()
                .to_vec()
        })
        .collect()
}

/// What a reader of the parts directory sees (as `read_parquet('<name>.parts/*.parquet')`).
fn read_parts(dir: &Path, schema: SchemaRef) -> Vec<RecordBatch> {
    names_in(dir)
        .iter()
        .filter(|n| n.ends_with(".parquet"))
        .flat_map(|n| read(&dir.join(n), schema.clone()).1)
        .collect()
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
        run_queue_ns: Some(1_000),
        blocked_ns: Some(0),
        sleep_ns: Some(2_000),
        net_inet_sent_bytes: Some(1),
        net_inet_received_bytes: Some(2),
        net_unix_sent_bytes: Some(3),
        net_unix_received_bytes: Some(4),
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

fn sample(i: u32) -> SampleRecord {
    SampleRecord {
        time_ns: 1_700_000_000_000_000_000 + i64::from(i),
        pid: i,
        start_time_ns: 1_600_000_000_000_000_000,
        source: SampleSource::Procfs,
        rss_bytes: Some(u64::from(i) * 4096),
        ..Default::default()
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
    let batch = processes_batch(&[full_process(), sparse.clone()]).unwrap();
    assert_eq!(write_table(&path, processes_schema(), &batch).unwrap(), 2);
    // Written under a temporary name and renamed: nothing else is left.
    assert_eq!(names_in(dir.path()), ["processes.parquet"]);
    // The same rows through a parted table, flushed in between.
    let parted = tempfile::tempdir().unwrap();
    let mut table = ProcessTable::processes(parted.path()).unwrap();
    table.push(full_process()).unwrap();
    table.flush().unwrap();
    table.push(sparse).unwrap();
    assert_eq!(table.finish().unwrap(), 2);
    assert_eq!(
        std::fs::read(parted.path().join(schema::PROCESSES_FILE)).unwrap(),
        std::fs::read(&path).unwrap()
    );

    let (metadata, batches) = read(&path, processes_schema());
    assert_file_format(&metadata);
    assert_eq!(batches.len(), 1);
    let back = &batches[0];
    assert_same_rows(back, &batch);

    let start = back
        .column_by_name("start_time")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(start.timezone(), Some("UTC"), "UTC, the zone in the type");
    // Microseconds, floored: -5 ns is in the microsecond before the epoch.
    assert_eq!(start.values(), &[1_700_000_000_123_456, -1]);
    let exact = |name: &str| {
        back.column_by_name(&schema::exact_time_column(name))
            .unwrap()
            .as_primitive::<Int64Type>()
            .clone()
    };
    assert_eq!(
        exact("start_time").values(),
        &[1_700_000_000_123_456_789, -5]
    );
    let end = back
        .column_by_name("end_time")
        .unwrap()
        .as_primitive::<TimestampMicrosecondType>();
    assert_eq!(end.value(0), 1_700_000_002_987_654);
    assert!(end.is_null(1));
    assert_eq!(exact("end_time").value(0), 1_700_000_002_987_654_321);
    assert!(exact("end_time").is_null(1));
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
    for (field, column) in back.schema().fields().iter().zip(back.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn events_round_trip() {
    let dir = tempfile::tempdir().unwrap();
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
    let mut table = EventTable::events(dir.path()).unwrap();
    for event in &events {
        table.push(event.clone()).unwrap();
    }
    assert_eq!(table.path(), dir.path().join(schema::EVENTS_FILE));
    assert_eq!(table.finish().unwrap(), 2);

    let (metadata, batches) = read(&dir.path().join("events.parquet"), schema::events_schema());
    assert_file_format(&metadata);
    assert_eq!(batches.len(), 1);
    let back = &batches[0];
    assert_same_rows(back, &events_batch(&events).unwrap());
    let kind = back.column_by_name("kind").unwrap().as_string::<i32>();
    assert_eq!(kind.iter().flatten().collect::<Vec<_>>(), ["exit", "fork"]);
    for (field, column) in back.schema().fields().iter().zip(back.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn samples_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = SampleRecord {
        pid: 9,
        source: SampleSource::Exit,
        ..Default::default()
    };
    let rows = vec![full_sample(), sparse];
    let mut table = SampleTable::samples(dir.path()).unwrap();
    table.push(rows[0].clone()).unwrap();
    table.flush().unwrap();
    table.push(rows[1].clone()).unwrap();
    assert_eq!(table.finish().unwrap(), 2);
    assert_eq!(names_in(dir.path()), [schema::SAMPLES_FILE]);

    let (metadata, batches) = read(
        &dir.path().join(schema::SAMPLES_FILE),
        schema::samples_schema(),
    );
    assert_file_format(&metadata);
    assert_eq!(batches.len(), 1);
    let back = &batches[0];
    assert_same_rows(back, &samples_batch(&rows).unwrap());
    for (field, column) in back.schema().fields().iter().zip(back.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn system_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = SystemRecord {
        time_ns: 1,
        ..Default::default()
    };
    let rows = vec![full_system(), sparse];
    let mut table = SystemTable::system(dir.path()).unwrap();
    for row in &rows {
        table.push(row.clone()).unwrap();
    }
    assert_eq!(table.finish().unwrap(), 2);
    assert_eq!(names_in(dir.path()), [schema::SYSTEM_FILE]);

    let (metadata, batches) = read(
        &dir.path().join(schema::SYSTEM_FILE),
        schema::system_schema(),
    );
    assert_file_format(&metadata);
    let back = &batches[0];
    assert_same_rows(back, &system_batch(&rows).unwrap());
    for (field, column) in back.schema().fields().iter().zip(back.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

/// A kill -9 after two flushes: the parts hold every flushed row and nothing else, each part
/// is a complete file. Then the clean end merges them.
#[test]
fn flushed_rows_survive_a_kill_and_finish_merges_them() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = SampleTable::samples(dir.path()).unwrap();
    let parts_dir = dir.path().join("samples.parts");
    assert_eq!(table.parts_dir(), parts_dir);
    assert!(!parts_dir.exists(), "made with the first part");
    for i in 0..3 {
        table.push(sample(i)).unwrap();
    }
    table.flush().unwrap();
    table.flush().unwrap(); // nothing buffered: no part
    for i in 3..5 {
        table.push(sample(i)).unwrap();
    }
    table.flush().unwrap();
    table.push(sample(5)).unwrap(); // not flushed
    assert_eq!(table.rows(), 6);

    // What a reader sees while montrace runs, or after it is killed.
    assert_eq!(
        names_in(&parts_dir),
        ["samples-000000.parquet", "samples-000001.parquet"]
    );
    assert!(!dir.path().join("samples.parquet").exists());
    for name in names_in(&parts_dir) {
        let (metadata, _) = read(&parts_dir.join(name), schema::samples_schema());
        assert_file_format(&metadata);
    }
    let flushed = read_parts(&parts_dir, schema::samples_schema());
    assert_eq!(pids(&flushed), [0, 1, 2, 3, 4]);
    let expected: Vec<SampleRecord> = (0..6).map(sample).collect();
    assert_same_rows(&flushed[0], &samples_batch(&expected[..3]).unwrap());
    assert_same_rows(&flushed[1], &samples_batch(&expected[3..5]).unwrap());

    assert_eq!(table.finish().unwrap(), 6);
    assert_eq!(names_in(dir.path()), ["samples.parquet"]);
    let (metadata, batches) = read(
        &dir.path().join("samples.parquet"),
        schema::samples_schema(),
    );
    assert_file_format(&metadata);
    assert_eq!(metadata.num_row_groups(), 1);
    assert_eq!(batches.len(), 1);
    assert_same_rows(&batches[0], &samples_batch(&expected).unwrap());
}

#[test]
fn dropping_without_finish_flushes_and_keeps_the_parts() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = EventTable::events(dir.path()).unwrap();
    table.push(event(1)).unwrap();
    table.push(event(2)).unwrap();
    drop(table);
    let parts_dir = dir.path().join("events.parts");
    assert_eq!(names_in(&parts_dir), ["events-000000.parquet"]);
    assert_eq!(
        pids(&read_parts(&parts_dir, schema::events_schema())),
        [1, 2]
    );
}

#[test]
fn an_empty_table_finishes_as_a_valid_file() {
    let dir = tempfile::tempdir().unwrap();
    let table = SystemTable::system(dir.path()).unwrap();
    assert_eq!(table.rows(), 0);
    assert_eq!(table.finish().unwrap(), 0);
    assert_eq!(names_in(dir.path()), ["system.parquet"]);
    let (metadata, batches) = read(&dir.path().join("system.parquet"), schema::system_schema());
    assert_eq!(metadata.file_metadata().num_rows(), 0);
    assert!(batches.is_empty());
    assert_file_format(&metadata);
}

/// Memory is bounded without any flush: the push that fills the buffer writes a part. The
/// merge keeps row groups at most ROW_GROUP_ROWS long, and the order of the rows.
#[test]
fn a_full_buffer_writes_a_part_by_itself() {
    let dir = tempfile::tempdir().unwrap();
    let parts_dir = dir.path().join("events.parts");
    let mut table = EventTable::events(dir.path()).unwrap();
    let total = 2 * MAX_BUFFERED_ROWS + 10;
    for i in 0..=MAX_BUFFERED_ROWS {
        table.push(event(i as u32)).unwrap();
    }
    assert_eq!(names_in(&parts_dir), ["events-000000.parquet"]);
    let (metadata, _) = read(
        &parts_dir.join("events-000000.parquet"),
        schema::events_schema(),
    );
    assert_eq!(
        metadata.file_metadata().num_rows(),
        MAX_BUFFERED_ROWS as i64
    );
    assert_file_format(&metadata);
    for i in MAX_BUFFERED_ROWS + 1..total {
        table.push(event(i as u32)).unwrap();
    }
    assert_eq!(names_in(&parts_dir).len(), 2);
    assert_eq!(table.rows(), total as u64);

    assert_eq!(table.finish().unwrap(), total as u64);
    let (metadata, batches) = read(&dir.path().join("events.parquet"), schema::events_schema());
    assert_file_format(&metadata);
    let sizes: Vec<i64> = metadata
        .row_groups()
        .iter()
        .map(|rg| rg.num_rows())
        .collect();
    assert_eq!(sizes, [ROW_GROUP_ROWS as i64, 10]);
    assert_eq!(pids(&batches), (0..total as u32).collect::<Vec<_>>());
}

/// zstd from [`COMPRESS_FROM_ROWS`] rows on, by the rows of the file (not of a part): one row
/// short of it, the file is uncompressed.
/// A table is small (closed without a thread of its own) until it has a part or as many rows
/// as are compressed.
#[test]
fn a_table_is_small_until_it_has_a_part_or_rows_to_compress() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = SampleTable::samples(dir.path()).unwrap();
    assert!(table.is_small());
    for i in 0..COMPRESS_FROM_ROWS as u32 - 1 {
        table.push(sample(i)).unwrap();
    }
    assert!(table.is_small());
    table.push(sample(0)).unwrap();
    assert!(!table.is_small());
    let other = tempfile::tempdir().unwrap();
    let mut events = EventTable::events(other.path()).unwrap();
    events.push(event(1)).unwrap();
    assert!(events.is_small());
    events.flush().unwrap();
    assert!(!events.is_small(), "a part to merge");
}

/// A table given a writer made ahead (`small_writer`) that stays small writes the very bytes an
/// unprepared one does; one that grows past small (a part, or rows enough to compress) drops
/// its prepared writer and is merged and compressed as ever. Prepared or not, empty too.
#[test]
fn a_prepared_table_writes_what_an_unprepared_one_does() {
    let finish = |rows: u32, flush_at: Option<u32>, prepared: bool| {
        let dir = tempfile::tempdir().unwrap();
        let mut table = EventTable::events(dir.path()).unwrap();
        if prepared {
            table.set_ready(small_writer(table.schema()));
            assert!(table.ready.is_some(), "the writer is made ahead");
        }
        for i in 0..rows {
            table.push(event(i)).unwrap();
            if Some(i) == flush_at {
                table.flush().unwrap();
            }
        }
        assert_eq!(
            table.finish_with(Durability::Unsynced).unwrap(),
            rows as u64
        );
        let path = dir.path().join("events.parquet");
        assert_eq!(
            names_in(dir.path()),
            ["events.parquet"],
            "no temporary file left"
        );
        let (metadata, batches) = read(&path, schema::events_schema());
        assert_file_format(&metadata);
        assert_eq!(pids(&batches), (0..rows).collect::<Vec<_>>());
        std::fs::read(&path).unwrap()
    };
    let small = COMPRESS_FROM_ROWS as u32 - 1;
    for rows in [0, 3, small] {
        assert_eq!(
            finish(rows, None, true),
            finish(rows, None, false),
            "{rows} rows"
        );
    }
    // A writer made for another table's schema is not taken.
    let dir = tempfile::tempdir().unwrap();
    let mut table = EventTable::events(dir.path()).unwrap();
    table.set_ready(small_writer(&schema::marks_schema()));
    assert!(table.ready.is_none(), "a writer of another schema");
    // Grown past small: not the prepared (uncompressed) writer's file.
    let grown = COMPRESS_FROM_ROWS as u32;
    assert_eq!(finish(grown, None, true), finish(grown, None, false));
    assert_eq!(
        finish(5, Some(2), true),
        finish(5, Some(2), false),
        "a part"
    );
}

#[test]
fn files_are_compressed_from_a_thousand_rows_on() {
    for rows in [COMPRESS_FROM_ROWS - 1, COMPRESS_FROM_ROWS] {
        let dir = tempfile::tempdir().unwrap();
        let mut table = EventTable::events(dir.path()).unwrap();
        for i in 0..rows {
            table.push(event(i as u32)).unwrap();
            if i == 10 {
                table.flush().unwrap();
            }
        }
        assert_eq!(table.finish().unwrap(), rows);
        let (metadata, batches) = read(&dir.path().join("events.parquet"), schema::events_schema());
        assert_file_format(&metadata);
        let zstd = matches!(
            metadata.row_group(0).column(0).compression(),
            Compression::ZSTD(_)
        );
        assert_eq!(zstd, rows >= COMPRESS_FROM_ROWS, "{rows} rows");
        assert_eq!(pids(&batches), (0..rows as u32).collect::<Vec<_>>());
    }
}

#[test]
fn a_failed_flush_keeps_the_rows_and_leaves_no_file() {
    let dir = tempfile::tempdir().unwrap();
    let parts_dir = dir.path().join("samples.parts");
    let mut table = SampleTable::samples(dir.path()).unwrap();
    table.push(SampleRecord::default()).unwrap();
    table.flush().unwrap();
    table.push(SampleRecord::default()).unwrap();
    // The parts directory vanished (root ignores permissions, so this is how to fail here).
    std::fs::remove_dir_all(&parts_dir).unwrap();
    let err = table.flush().unwrap_err();
    assert!(
        err.to_string().contains(&parts_dir.display().to_string()),
        "{err}"
    );
    assert_eq!(table.rows(), 2, "the row flushed and the row kept");
    // Once it can be written again, the kept row lands in the next part.
    std::fs::create_dir(&parts_dir).unwrap();
    table.flush().unwrap();
    assert_eq!(names_in(&parts_dir), ["samples-000001.parquet"]);
}

/// A parts directory is made, never taken over: one that is there already (a leftover, or the
/// command's) is an error, at the table's creation (processes) or at its first part (the
/// others), and the rows stay buffered.
#[test]
fn a_table_needs_a_fresh_parts_dir() {
    let dir = tempfile::tempdir().unwrap();
    let _first = ProcessTable::processes(dir.path()).unwrap();
    assert!(dir.path().join("processes.parts").is_dir(), "made at once");
    let err = ProcessTable::processes(dir.path()).err().unwrap();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot create {}: ",
            dir.path().join("processes.parts").display()
        )),
        "{err}"
    );
    std::fs::create_dir(dir.path().join("events.parts")).unwrap();
    let mut events = EventTable::events(dir.path()).unwrap();
    events.push(event(1)).unwrap();
    let err = events.flush().unwrap_err();
    assert!(
        err.to_string().starts_with(&format!(
            "cannot create {}: ",
            dir.path().join("events.parts").display()
        )),
        "{err}"
    );
    assert_eq!(events.rows(), 1);
    assert_eq!(
        names_in(&dir.path().join("events.parts")),
        Vec::<String>::new()
    );
    let missing = dir.path().join("missing");
    assert!(ProcessTable::processes(&missing).is_err());
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("missing").join("processes.parquet");
    let batch = processes_batch(&[full_process()]).unwrap();
    let err = write_table(&path, processes_schema(), &batch).unwrap_err();
    assert!(matches!(err, WriteError::Io { op: "create", .. }));
    assert!(
        err.to_string().starts_with(&format!(
            "cannot create {}: ",
            dir.path().join("missing/.processes.parquet.tmp").display()
        )),
        "{err}"
    );

    let path = dir.path().join("processes.parquet");
    let err = write_table(
        &path,
        processes_schema(),
        &events_batch(&[event(1)]).unwrap(),
    )
    .unwrap_err();
    let temp = dir.path().join(".processes.parquet.tmp");
    assert!(
        err.to_string()
            .starts_with(&format!("cannot write {}: ", temp.display())),
        "{err}"
    );
    // The failed file is gone, and no processes.parquet appeared.
    assert_eq!(names_in(dir.path()), Vec::<String>::new());
}

#[test]
fn gpu_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let sparse = GpuRecord {
        time_ns: 1,
        gpu_index: 3,
        ..Default::default()
    };
    let rows = vec![crate::store::schema::tests::full_gpu(), sparse];
    let mut table = GpuTable::gpu(dir.path()).unwrap();
    table.push(rows[0].clone()).unwrap();
    table.flush().unwrap();
    table.push(rows[1].clone()).unwrap();
    assert_eq!(table.finish().unwrap(), 2);
    assert_eq!(names_in(dir.path()), [schema::GPU_FILE]);

    let (metadata, batches) = read(&dir.path().join(schema::GPU_FILE), schema::gpu_schema());
    assert_file_format(&metadata);
    assert_eq!(batches.len(), 1);
    let back = &batches[0];
    assert_same_rows(back, &schema::gpu_batch(&rows).unwrap());
    for (field, column) in back.schema().fields().iter().zip(back.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn gpu_processes_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    let rows = crate::store::schema::tests::gpu_process_rows();
    let mut table = GpuProcessTable::gpu_processes(dir.path()).unwrap();
    assert_eq!(table.parts_dir(), dir.path().join("gpu_processes.parts"));
    for row in &rows {
        table.push(row.clone()).unwrap();
    }
    assert_eq!(table.finish().unwrap(), 2);
    assert_eq!(names_in(dir.path()), [schema::GPU_PROCESSES_FILE]);

    let (metadata, batches) = read(
        &dir.path().join(schema::GPU_PROCESSES_FILE),
        schema::gpu_processes_schema(),
    );
    assert_file_format(&metadata);
    assert_same_rows(&batches[0], &schema::gpu_processes_batch(&rows).unwrap());
    assert_eq!(pids(&batches), [42, 42]);
}

/// docs/schema.md says from how many rows the files are compressed.
#[test]
fn the_schema_doc_says_from_how_many_rows_files_are_compressed() {
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/schema.md")).unwrap();
    let said = format!(
        "Parquet files of {},{:03} rows or more are zstd-compressed",
        COMPRESS_FROM_ROWS / 1000,
        COMPRESS_FROM_ROWS % 1000
    );
    assert!(doc.contains(&said), "docs/schema.md should say: {said}");
}

/// A table finished leaving its parts directory: the file is complete and in place, the
/// directory (made at once for the processes table) stays, parts and all, until it is removed;
/// a table that never made one has nothing to remove.
#[test]
fn a_finished_tables_parts_directory_stays_until_it_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut table = ProcessTable::processes(dir.path()).unwrap();
    table.push(full_process()).unwrap();
    table.flush().unwrap();
    table.push(full_process()).unwrap();
    let (rows, left) = table.finish_leaving_parts(Durability::Unsynced).unwrap();
    assert_eq!(rows, 2);
    let parts = dir.path().join("processes.parts");
    assert_eq!(names_in(&parts), ["processes-000000.parquet"]);
    let (_, batches) = read(&dir.path().join(schema::PROCESSES_FILE), processes_schema());
    assert_eq!(batches.iter().map(|b| b.num_rows()).sum::<usize>(), 2);
    left.remove().unwrap();
    assert_eq!(names_in(dir.path()), ["processes.parquet"]);

    let mut events = EventTable::events(dir.path()).unwrap();
    events.push(event(1)).unwrap();
    let (rows, left) = events.finish_leaving_parts(Durability::Unsynced).unwrap();
    assert_eq!(rows, 1);
    left.remove().unwrap();
    assert_eq!(
        names_in(dir.path()),
        ["events.parquet", "processes.parquet"]
    );
}
