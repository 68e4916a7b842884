use super::*;
use crate::store::records::EventKind;
use crate::store::records::SampleSource;
use arrow_array::cast::AsArray;
use arrow_array::Array;

fn full_process() -> ProcessRecord {
    ProcessRecord {
        pid: 42,
        start_time_ns: 1_700_000_000_123_456_789,
        parent_pid: Some(41),
        parent_start_time_ns: Some(1_700_000_000_000_000_001),
        end_time_ns: Some(1_700_000_001_000_000_000),
        filename: Some("/usr/bin/cc".into()),
        argv: Some(vec!["cc".into(), "-c".into(), "a b.c".into()]),
        argv_truncated: true,
        comm: "cc".into(),
        exec_count: 2,
        exit_code: Some(1),
        exit_signal: None,
        core_dumped: false,
        cpu_user_ns: Some(u64::MAX),
        cpu_system_ns: Some(2),
        peak_rss_bytes: Some(3 << 30),
        minor_faults: Some(4),
        major_faults: Some(5),
        voluntary_ctxt_switches: Some(6),
        involuntary_ctxt_switches: Some(7),
        read_bytes: Some(8),
        write_bytes: Some(9),
        read_chars: Some(10),
        write_chars: Some(11),
        run_queue_ns: Some(12),
        blocked_ns: Some(13),
        sleep_ns: Some(14),
        net_inet_sent_bytes: Some(15),
        net_inet_received_bytes: Some(16),
        net_unix_sent_bytes: Some(17),
        net_unix_received_bytes: Some(18),
        alive_at_end: false,
    }
}

#[test]
fn processes_columns_in_order() {
    let schema = processes_schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "pid",
            "start_time",
            "parent_pid",
            "parent_start_time",
            "end_time",
            "filename",
            "argv",
            "argv_truncated",
            "comm",
            "exec_count",
            "exit_code",
            "exit_signal",
            "core_dumped",
            "cpu_user_ns",
            "cpu_system_ns",
            "peak_rss_bytes",
            "minor_faults",
            "major_faults",
            "voluntary_ctxt_switches",
            "involuntary_ctxt_switches",
            "read_bytes",
            "write_bytes",
            "read_chars",
            "write_chars",
            "run_queue_ns",
            "blocked_ns",
            "sleep_ns",
            "net_inet_sent_bytes",
            "net_inet_received_bytes",
            "net_unix_sent_bytes",
            "net_unix_received_bytes",
            "alive_at_end",
            "start_time_ns",
            "parent_start_time_ns",
            "end_time_ns",
        ]
    );
    let required: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| !f.is_nullable())
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        required,
        [
            "pid",
            "start_time",
            "argv_truncated",
            "comm",
            "exec_count",
            "core_dumped",
            "alive_at_end",
            "start_time_ns"
        ]
    );
    assert_eq!(
        schema.field_with_name("start_time").unwrap().data_type(),
        &utc()
    );
    assert_eq!(
        schema.field_with_name("start_time_ns").unwrap().data_type(),
        &DataType::Int64
    );
    assert_eq!(
        schema.field_with_name("argv").unwrap().data_type(),
        &DataType::List(Arc::new(Field::new("item", DataType::Utf8, false)))
    );
    assert_eq!(schema.metadata()[SCHEMA_VERSION_KEY], "3");
}

#[test]
fn events_columns_in_order() {
    let schema = events_schema();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(
        names,
        [
            "time",
            "kind",
            "pid",
            "start_time",
            "parent_pid",
            "parent_start_time",
            "filename",
            "argv",
            "tid",
            "exit_code",
            "exit_signal",
            "cpu_user_ns",
            "cpu_system_ns",
            "peak_rss_bytes",
            "time_ns",
            "start_time_ns",
            "parent_start_time_ns",
        ]
    );
    // Shared columns have the same type and nullability in both tables.
    let processes = processes_schema();
    for field in schema
        .fields()
        .iter()
        .filter(|f| !["time", "time_ns", "kind", "tid"].contains(&f.name().as_str()))
    {
        assert_eq!(
            processes.field_with_name(field.name()).unwrap(),
            field.as_ref()
        );
    }
    assert_eq!(schema.metadata()[SCHEMA_VERSION_KEY], "3");
}

#[test]
fn processes_batch_values() {
    let empty = ProcessRecord {
        pid: 7,
        comm: "sh".into(),
        alive_at_end: true,
        ..Default::default()
    };
    let batch = processes_batch(&[full_process(), empty]).unwrap();
    assert_eq!(batch.num_rows(), 2);
    assert_eq!(batch.schema(), processes_schema());

    // The timestamp holds microseconds (what every engine reads), its twin the exact
    // nanoseconds (what identity needs).
    let start = batch.column_by_name("start_time").unwrap();
    let start = start.as_primitive::<TimestampMicrosecondType>();
    assert_eq!(start.values(), &[1_700_000_000_123_456, 0]);
    let exact = batch.column_by_name("start_time_ns").unwrap();
    let exact = exact.as_primitive::<Int64Type>();
    assert_eq!(exact.values(), &[1_700_000_000_123_456_789, 0]);
    // Null in both, or in neither.
    for name in ["parent_start_time", "end_time"] {
        let time = batch.column_by_name(name).unwrap();
        let exact = batch.column_by_name(&exact_time_column(name)).unwrap();
        assert_eq!(time.logical_nulls(), exact.logical_nulls(), "{name}");
        assert!(time.is_null(1) && !time.is_null(0), "{name}");
    }
    let argv = batch.column_by_name("argv").unwrap().as_list::<i32>();
    assert_eq!(
        argv.value(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect::<Vec<_>>(),
        ["cc", "-c", "a b.c"]
    );
    assert!(argv.is_null(1));
    let cpu = batch
        .column_by_name("cpu_user_ns")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(cpu.value(0), u64::MAX);
    assert!(cpu.is_null(1));
    let exit_signal = batch.column_by_name("exit_signal").unwrap();
    assert_eq!(exit_signal.null_count(), 2);
    let alive = batch.column_by_name("alive_at_end").unwrap().as_boolean();
    assert!(!alive.value(0) && alive.value(1));
    // Every nullable column is null for the record with nothing set.
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn events_batch_values() {
    let fork = EventRecord {
        time_ns: 5,
        kind: EventKind::Fork,
        pid: 2,
        start_time_ns: 4,
        parent_pid: Some(1),
        parent_start_time_ns: Some(3),
        filename: None,
        argv: None,
        tid: None,
        exit_code: None,
        exit_signal: None,
        cpu_user_ns: None,
        cpu_system_ns: None,
        peak_rss_bytes: None,
    };
    let exit = EventRecord {
        kind: EventKind::ThreadExit,
        tid: Some(3),
        exit_signal: Some(9),
        ..fork.clone()
    };
    let batch = events_batch(&[fork, exit]).unwrap();
    let kind = batch.column_by_name("kind").unwrap().as_string::<i32>();
    assert_eq!(
        kind.iter().flatten().collect::<Vec<_>>(),
        ["fork", "thread_exit"]
    );
    let tid = batch
        .column_by_name("tid")
        .unwrap()
        .as_primitive::<UInt32Type>();
    assert!(tid.is_null(0));
    assert_eq!(tid.value(1), 3);
}

#[test]
fn no_rows_is_an_empty_batch() {
    assert_eq!(processes_batch(&[]).unwrap().num_rows(), 0);
    assert_eq!(events_batch(&[]).unwrap().num_columns(), 14 + 3);
    assert_eq!(samples_batch(&[]).unwrap().num_columns(), 26 + 2);
    assert_eq!(system_batch(&[]).unwrap().num_columns(), 31 + 1);
}

/// The field names of a record, in declaration order, read from its `Debug` output (the
/// values of a default record contain no commas).
fn record_fields(debug: &str) -> Vec<String> {
    let inner = &debug[debug.find('{').unwrap() + 1..debug.rfind('}').unwrap()];
    inner
        .split(", ")
        .map(|f| f.split(':').next().unwrap().trim().to_owned())
        .collect()
}

/// Column names are the record's field names, `_ns` dropped from the times, then the times'
/// exact twins, which have the fields' own names.
fn assert_columns_are_fields(schema: &SchemaRef, debug: &str) {
    let fields = record_fields(debug);
    let is_time = |f: &String| ["time_ns", "start_time_ns"].contains(&f.as_str());
    let expected: Vec<String> = fields
        .iter()
        .map(|f| match is_time(f) {
            true => f.trim_end_matches("_ns").to_owned(),
            false => f.clone(),
        })
        .chain(fields.iter().filter(|f| is_time(f)).cloned())
        .collect();
    let names: Vec<&str> = schema.fields().iter().map(|f| f.name().as_str()).collect();
    assert_eq!(names, expected);
    assert_eq!(schema.metadata()[SCHEMA_VERSION_KEY], "3");
}

/// Times are microseconds in UTC, the zone in the type (schema version 3).
fn utc() -> DataType {
    DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into()))
}

/// A sample with every field set (also used by the writer's tests).
pub(crate) fn full_sample() -> SampleRecord {
    SampleRecord {
        time_ns: 1_700_000_001_000_000_000,
        pid: 42,
        start_time_ns: 1_700_000_000_123_456_789,
        source: SampleSource::Procfs,
        cpu_user_ns: 1,
        cpu_system_ns: 2,
        cpu_percent: Some(150.5),
        rss_bytes: Some(3),
        uss_bytes: Some(4),
        pss_bytes: Some(5),
        swap_bytes: Some(6),
        vms_bytes: Some(7),
        threads: Some(8),
        fds: Some(9),
        read_bytes: Some(10),
        write_bytes: Some(11),
        read_chars: Some(12),
        write_chars: Some(13),
        minor_faults: Some(14),
        major_faults: Some(u64::MAX),
        state: Some("R".into()),
        run_queue_ns: Some(15),
        blocked_ns: Some(16),
        sleep_ns: Some(17),
        run_queue_percent: Some(18.5),
        blocked_percent: Some(19.5),
    }
}

/// A system row with every field set (also used by the writer's tests).
pub(crate) fn full_system() -> SystemRecord {
    SystemRecord {
        time_ns: 1_700_000_001_000_000_000,
        cpu_user_percent: Some(1.0),
        cpu_nice_percent: Some(2.0),
        cpu_system_percent: Some(3.0),
        cpu_idle_percent: Some(4.0),
        cpu_iowait_percent: Some(5.0),
        cpu_irq_percent: Some(6.0),
        cpu_steal_percent: Some(7.0),
        mem_total_bytes: 8,
        mem_available_bytes: 9,
        mem_used_bytes: 10,
        mem_cached_bytes: 11,
        swap_total_bytes: 12,
        swap_used_bytes: 13,
        load_1: 14.0,
        load_5: 15.0,
        load_15: 16.0,
        psi_cpu_some_avg10: Some(17.0),
        psi_memory_some_avg10: Some(18.0),
        psi_memory_full_avg10: Some(19.0),
        psi_io_some_avg10: Some(20.0),
        psi_io_full_avg10: Some(21.5),
        run_cpu_some_percent: Some(22.5),
        run_cpu_full_percent: Some(23.5),
        run_memory_some_percent: Some(24.5),
        run_memory_full_percent: Some(25.5),
        run_io_some_percent: Some(26.5),
        run_io_full_percent: Some(27.5),
        tree_rss_bytes: Some(28),
        tree_uss_bytes: Some(29),
        tree_pss_bytes: Some(30),
    }
}

#[test]
fn samples_columns_are_the_record_fields() {
    let schema = samples_schema();
    assert_columns_are_fields(&schema, &format!("{:?}", SampleRecord::default()));
    let required: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| !f.is_nullable())
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        required,
        [
            "time",
            "pid",
            "start_time",
            "source",
            "cpu_user_ns",
            "cpu_system_ns",
            "time_ns",
            "start_time_ns"
        ]
    );
    assert_eq!(schema.field_with_name("time").unwrap().data_type(), &utc());
    assert_eq!(
        schema.field_with_name("cpu_percent").unwrap().data_type(),
        &DataType::Float64
    );
    assert_eq!(
        schema.field_with_name("threads").unwrap().data_type(),
        &DataType::UInt32
    );
    // The join key has the same type as in processes.parquet.
    let processes = processes_schema();
    for name in ["pid", "start_time"] {
        assert_eq!(
            processes.field_with_name(name).unwrap(),
            schema.field_with_name(name).unwrap()
        );
    }
}

#[test]
fn system_columns_are_the_record_fields() {
    let schema = system_schema();
    assert_columns_are_fields(&schema, &format!("{:?}", SystemRecord::default()));
    let required: Vec<&str> = schema
        .fields()
        .iter()
        .filter(|f| !f.is_nullable())
        .map(|f| f.name().as_str())
        .collect();
    assert_eq!(
        required,
        [
            "time",
            "mem_total_bytes",
            "mem_available_bytes",
            "mem_used_bytes",
            "mem_cached_bytes",
            "swap_total_bytes",
            "swap_used_bytes",
            "load_1",
            "load_5",
            "load_15",
            "time_ns"
        ]
    );
    assert_eq!(schema.field_with_name("time").unwrap().data_type(), &utc());
    assert_eq!(
        schema.field_with_name("load_1").unwrap().data_type(),
        &DataType::Float64
    );
}

#[test]
fn samples_batch_values() {
    let exit = SampleRecord {
        pid: 43,
        source: SampleSource::Exit,
        ..Default::default()
    };
    let batch = samples_batch(&[full_sample(), exit]).unwrap();
    assert_eq!(batch.schema(), samples_schema());
    let source = batch.column_by_name("source").unwrap().as_string::<i32>();
    assert_eq!(
        source.iter().flatten().collect::<Vec<_>>(),
        ["procfs", "exit"]
    );
    let cpu = batch
        .column_by_name("cpu_percent")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(cpu.value(0), 150.5);
    let faults = batch
        .column_by_name("major_faults")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(faults.value(0), u64::MAX);
    let state = batch.column_by_name("state").unwrap().as_string::<i32>();
    assert_eq!(state.value(0), "R");
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn system_batch_values() {
    let sparse = SystemRecord {
        time_ns: 5,
        ..Default::default()
    };
    let batch = system_batch(&[full_system(), sparse]).unwrap();
    assert_eq!(batch.schema(), system_schema());
    let psi = batch
        .column_by_name("psi_io_full_avg10")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(psi.value(0), 21.5);
    let total = batch
        .column_by_name("mem_total_bytes")
        .unwrap()
        .as_primitive::<UInt64Type>();
    assert_eq!(total.values(), &[8, 0]);
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

/// A GPU row with every field set (also used by the writer's tests).
pub(crate) fn full_gpu() -> GpuRecord {
    GpuRecord {
        time_ns: 1_700_000_001_000_000_000,
        gpu_index: 1,
        uuid: Some("GPU-12345678-aaaa-bbbb-cccc-dddddddddddd".into()),
        name: Some("NVIDIA H100 80GB HBM3".into()),
        utilization_gpu_percent: Some(97.0),
        utilization_memory_percent: Some(41.0),
        memory_used_bytes: Some(70 << 30),
        memory_total_bytes: Some(80 << 30),
        power_watts: Some(612.25),
        energy_joules: Some(1234.5),
        temperature_c: Some(67),
        sm_clock_mhz: Some(1980),
        memory_clock_mhz: Some(2619),
        throttle_reasons: Some(vec!["sw_power_cap".into(), "0x1000".into()]),
    }
}

/// A sample row and an accounting row of gpu_processes (also used by the writer's tests).
pub(crate) fn gpu_process_rows() -> Vec<GpuProcessRecord> {
    vec![
        GpuProcessRecord {
            time_ns: 1_700_000_001_000_000_000,
            gpu_index: 1,
            pid: 42,
            start_time_ns: 1_700_000_000_123_456_789,
            source: crate::store::records::GpuProcessSource::Sample,
            gpu_memory_bytes: Some(3 << 30),
            sm_utilization_percent: Some(88.5),
            memory_utilization_percent: Some(12.0),
            ..Default::default()
        },
        GpuProcessRecord {
            time_ns: 1_700_000_002_000_000_000,
            gpu_index: 1,
            pid: 42,
            start_time_ns: 1_700_000_000_123_456_789,
            source: crate::store::records::GpuProcessSource::Accounting,
            max_gpu_memory_bytes: Some(5 << 30),
            lifetime_gpu_utilization_percent: Some(75.0),
            lifetime_memory_utilization_percent: Some(20.0),
            context_time_ns: Some(1_500_000_000),
            ..Default::default()
        },
    ]
}

fn required_columns(schema: &SchemaRef) -> Vec<&str> {
    schema
        .fields()
        .iter()
        .filter(|f| !f.is_nullable())
        .map(|f| f.name().as_str())
        .collect()
}

#[test]
fn gpu_columns_are_the_record_fields() {
    let schema = gpu_schema();
    assert_columns_are_fields(&schema, &format!("{:?}", GpuRecord::default()));
    assert_eq!(required_columns(&schema), ["time", "gpu_index", "time_ns"]);
    assert_eq!(schema.field_with_name("time").unwrap().data_type(), &utc());
    for (name, data_type) in [
        ("utilization_gpu_percent", DataType::Float64),
        ("power_watts", DataType::Float64),
        ("energy_joules", DataType::Float64),
        ("memory_used_bytes", DataType::UInt64),
        ("temperature_c", DataType::UInt32),
        ("sm_clock_mhz", DataType::UInt32),
    ] {
        assert_eq!(
            schema.field_with_name(name).unwrap().data_type(),
            &data_type,
            "{name}"
        );
    }
    assert_eq!(
        schema
            .field_with_name("throttle_reasons")
            .unwrap()
            .data_type(),
        &DataType::List(Arc::new(Field::new("item", DataType::Utf8, false)))
    );
}

#[test]
fn gpu_processes_columns_are_the_record_fields() {
    let schema = gpu_processes_schema();
    assert_columns_are_fields(&schema, &format!("{:?}", GpuProcessRecord::default()));
    assert_eq!(
        required_columns(&schema),
        [
            "time",
            "gpu_index",
            "pid",
            "start_time",
            "source",
            "time_ns",
            "start_time_ns"
        ]
    );
    // The join keys have the same types as in processes.parquet and gpu.parquet.
    let processes = processes_schema();
    for name in ["pid", "start_time"] {
        assert_eq!(
            processes.field_with_name(name).unwrap(),
            schema.field_with_name(name).unwrap()
        );
    }
    let gpu = gpu_schema();
    for name in ["time", "gpu_index"] {
        assert_eq!(
            gpu.field_with_name(name).unwrap(),
            schema.field_with_name(name).unwrap()
        );
    }
}

#[test]
fn gpu_batch_values() {
    let sparse = GpuRecord {
        time_ns: 5,
        ..Default::default()
    };
    let batch = gpu_batch(&[full_gpu(), sparse]).unwrap();
    assert_eq!(batch.schema(), gpu_schema());
    let reasons = batch
        .column_by_name("throttle_reasons")
        .unwrap()
        .as_list::<i32>();
    assert_eq!(
        reasons
            .value(0)
            .as_string::<i32>()
            .iter()
            .flatten()
            .collect::<Vec<_>>(),
        ["sw_power_cap", "0x1000"]
    );
    let power = batch
        .column_by_name("power_watts")
        .unwrap()
        .as_primitive::<Float64Type>();
    assert_eq!(power.value(0), 612.25);
    for (field, column) in batch.schema().fields().iter().zip(batch.columns()) {
        assert!(!column.is_null(0), "{}", field.name());
        assert_eq!(column.is_null(1), field.is_nullable(), "{}", field.name());
    }
}

#[test]
fn gpu_processes_batch_values() {
    let batch = gpu_processes_batch(&gpu_process_rows()).unwrap();
    assert_eq!(batch.schema(), gpu_processes_schema());
    let source = batch.column_by_name("source").unwrap().as_string::<i32>();
    assert_eq!(
        source.iter().flatten().collect::<Vec<_>>(),
        ["sample", "accounting"]
    );
    // Each kind of row fills its own columns and leaves the other kind's null.
    let sample_only = [
        "gpu_memory_bytes",
        "sm_utilization_percent",
        "memory_utilization_percent",
    ];
    let accounting_only = [
        "max_gpu_memory_bytes",
        "lifetime_gpu_utilization_percent",
        "lifetime_memory_utilization_percent",
        "context_time_ns",
    ];
    for name in sample_only {
        let column = batch.column_by_name(name).unwrap();
        assert!(!column.is_null(0) && column.is_null(1), "{name}");
    }
    for name in accounting_only {
        let column = batch.column_by_name(name).unwrap();
        assert!(column.is_null(0) && !column.is_null(1), "{name}");
    }
    assert_eq!(
        batch.num_columns(),
        5 + sample_only.len() + accounting_only.len() + 2
    );
}
