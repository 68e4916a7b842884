//! The Arrow schemas of montrace's tables, and the conversion of records into Arrow batches.
//!
//! This is the one place the column lists live: each table is a list of `Column`s, and a
//! column's name, type, nullability and builder come from the same line, so the schema and the
//! batches cannot drift apart. `docs/schema.md` documents the columns; keep it in step.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use arrow_array::builder::{
    BooleanBuilder, Float64Builder, ListBuilder, MapBuilder, PrimitiveBuilder, StringBuilder,
};
use arrow_array::types::{
    ArrowPrimitiveType, Float64Type, Int32Type, Int64Type, TimestampMicrosecondType, UInt32Type,
    UInt64Type,
};
use arrow_array::{ArrayRef, RecordBatch};
use arrow_schema::{ArrowError, DataType, Field, Schema, SchemaRef, TimeUnit};

use crate::store::records::{
    EventRecord, GpuProcessRecord, GpuRecord, MarkRecord, ProcessRecord, RunRecord, SampleRecord,
    SystemRecord,
};
use Values::{Bool, NumMap, Str, StrList, StrMap, Time, F64, I32, U32, U64};

/// Version of the run directory's format (tables and `run.json`); bump on incompatible change.
/// 3: the timestamp columns are `Timestamp(Microsecond, "UTC")`, the one timestamp type that
/// DuckDB 1.x and 2.x (`TIMESTAMPTZ`: `epoch_ms`, `time_bucket`, `< now()`), pandas, polars
/// and Spark (`TimestampType`, no legacy flag) all take as a UTC time; each has an exact twin,
/// `<name>_ns` (Int64 nanoseconds, [`exact_time_column`]), that montrace's readers use.
/// 2: `Timestamp(Nanosecond, None)`; 1: `Timestamp(Nanosecond, "UTC")`. Runs of every version
/// read the same (`store::read::Cols::times_ns`).
pub const SCHEMA_VERSION: u32 = 3;
/// The time zone of every timestamp column: the values are UTC, and saying so in the type is
/// what makes Spark read them as `TimestampType` (without it, `TIMESTAMP_NTZ`) and DuckDB as
/// `TIMESTAMPTZ`, comparable with `now()`.
pub const TIME_ZONE: &str = "UTC";

/// The name of timestamp column `name`'s exact twin: the same instant in nanoseconds since the
/// Unix epoch (Int64), kept because the timestamp itself holds microseconds. Identity
/// (`pid`, `start_time_ns`) and exact durations read the twin.
pub fn exact_time_column(name: &str) -> String {
    format!("{name}_ns")
}

/// Schema metadata key holding [`SCHEMA_VERSION`]; it also lands in each Parquet file's
/// key-value metadata.
pub const SCHEMA_VERSION_KEY: &str = "montrace.schema_version";

/// File names of the tables inside a run directory.
pub const PROCESSES_FILE: &str = "processes.parquet";
pub const EVENTS_FILE: &str = "events.parquet";
pub const SAMPLES_FILE: &str = "samples.parquet";
pub const MARKS_FILE: &str = "marks.parquet";
pub const SYSTEM_FILE: &str = "system.parquet";
pub const GPU_FILE: &str = "gpu.parquet";
pub const GPU_PROCESSES_FILE: &str = "gpu_processes.parquet";

/// One row per process: see [`ProcessRecord`].
static PROCESS_COLUMNS: &[Column<ProcessRecord>] = &[
    required("pid", U32(|r| Some(r.pid))),
    required("start_time", Time(|r| Some(r.start_time_ns))),
    nullable("parent_pid", U32(|r| r.parent_pid)),
    nullable("parent_start_time", Time(|r| r.parent_start_time_ns)),
    nullable("end_time", Time(|r| r.end_time_ns)),
    nullable("filename", Str(|r| r.filename.as_deref())),
    nullable("argv", StrList(|r| r.argv.as_deref())),
    required("argv_truncated", Bool(|r| Some(r.argv_truncated))),
    required("comm", Str(|r| Some(&r.comm))),
    required("exec_count", U32(|r| Some(r.exec_count))),
    nullable("exit_code", I32(|r| r.exit_code)),
    nullable("exit_signal", I32(|r| r.exit_signal)),
    required("core_dumped", Bool(|r| Some(r.core_dumped))),
    nullable("cpu_user_ns", U64(|r| r.cpu_user_ns)),
    nullable("cpu_system_ns", U64(|r| r.cpu_system_ns)),
    nullable("peak_rss_bytes", U64(|r| r.peak_rss_bytes)),
    nullable("minor_faults", U64(|r| r.minor_faults)),
    nullable("major_faults", U64(|r| r.major_faults)),
    nullable(
        "voluntary_ctxt_switches",
        U64(|r| r.voluntary_ctxt_switches),
    ),
    nullable(
        "involuntary_ctxt_switches",
        U64(|r| r.involuntary_ctxt_switches),
    ),
    nullable("read_bytes", U64(|r| r.read_bytes)),
    nullable("write_bytes", U64(|r| r.write_bytes)),
    nullable("read_chars", U64(|r| r.read_chars)),
    nullable("write_chars", U64(|r| r.write_chars)),
    nullable("run_queue_ns", U64(|r| r.run_queue_ns)),
    nullable("blocked_ns", U64(|r| r.blocked_ns)),
    nullable("sleep_ns", U64(|r| r.sleep_ns)),
    nullable("net_inet_sent_bytes", U64(|r| r.net_inet_sent_bytes)),
    nullable(
        "net_inet_received_bytes",
        U64(|r| r.net_inet_received_bytes),
    ),
    nullable("net_unix_sent_bytes", U64(|r| r.net_unix_sent_bytes)),
    nullable(
        "net_unix_received_bytes",
        U64(|r| r.net_unix_received_bytes),
    ),
    required("alive_at_end", Bool(|r| Some(r.alive_at_end))),
];

/// One row per lifecycle event: see [`EventRecord`].
static EVENT_COLUMNS: &[Column<EventRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    required("kind", Str(|r| Some(r.kind.as_str()))),
    required("pid", U32(|r| Some(r.pid))),
    required("start_time", Time(|r| Some(r.start_time_ns))),
    nullable("parent_pid", U32(|r| r.parent_pid)),
    nullable("parent_start_time", Time(|r| r.parent_start_time_ns)),
    nullable("filename", Str(|r| r.filename.as_deref())),
    nullable("argv", StrList(|r| r.argv.as_deref())),
    nullable("tid", U32(|r| r.tid)),
    nullable("exit_code", I32(|r| r.exit_code)),
    nullable("exit_signal", I32(|r| r.exit_signal)),
    nullable("cpu_user_ns", U64(|r| r.cpu_user_ns)),
    nullable("cpu_system_ns", U64(|r| r.cpu_system_ns)),
    nullable("peak_rss_bytes", U64(|r| r.peak_rss_bytes)),
];

/// One row per process per sample: see [`SampleRecord`].
static SAMPLE_COLUMNS: &[Column<SampleRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    required("pid", U32(|r| Some(r.pid))),
    required("start_time", Time(|r| Some(r.start_time_ns))),
    required("source", Str(|r| Some(r.source.as_str()))),
    required("cpu_user_ns", U64(|r| Some(r.cpu_user_ns))),
    required("cpu_system_ns", U64(|r| Some(r.cpu_system_ns))),
    nullable("cpu_percent", F64(|r| r.cpu_percent)),
    nullable("rss_bytes", U64(|r| r.rss_bytes)),
    nullable("uss_bytes", U64(|r| r.uss_bytes)),
    nullable("pss_bytes", U64(|r| r.pss_bytes)),
    nullable("swap_bytes", U64(|r| r.swap_bytes)),
    nullable("vms_bytes", U64(|r| r.vms_bytes)),
    nullable("threads", U32(|r| r.threads)),
    nullable("fds", U32(|r| r.fds)),
    nullable("read_bytes", U64(|r| r.read_bytes)),
    nullable("write_bytes", U64(|r| r.write_bytes)),
    nullable("read_chars", U64(|r| r.read_chars)),
    nullable("write_chars", U64(|r| r.write_chars)),
    nullable("minor_faults", U64(|r| r.minor_faults)),
    nullable("major_faults", U64(|r| r.major_faults)),
    nullable("state", Str(|r| r.state.as_deref())),
    nullable("run_queue_ns", U64(|r| r.run_queue_ns)),
    nullable("blocked_ns", U64(|r| r.blocked_ns)),
    nullable("sleep_ns", U64(|r| r.sleep_ns)),
    nullable("run_queue_percent", F64(|r| r.run_queue_percent)),
    nullable("blocked_percent", F64(|r| r.blocked_percent)),
];

/// One row per system sample: see [`SystemRecord`].
static SYSTEM_COLUMNS: &[Column<SystemRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    nullable("cpu_user_percent", F64(|r| r.cpu_user_percent)),
    nullable("cpu_nice_percent", F64(|r| r.cpu_nice_percent)),
    nullable("cpu_system_percent", F64(|r| r.cpu_system_percent)),
    nullable("cpu_idle_percent", F64(|r| r.cpu_idle_percent)),
    nullable("cpu_iowait_percent", F64(|r| r.cpu_iowait_percent)),
    nullable("cpu_irq_percent", F64(|r| r.cpu_irq_percent)),
    nullable("cpu_steal_percent", F64(|r| r.cpu_steal_percent)),
    required("mem_total_bytes", U64(|r| Some(r.mem_total_bytes))),
    required("mem_available_bytes", U64(|r| Some(r.mem_available_bytes))),
    required("mem_used_bytes", U64(|r| Some(r.mem_used_bytes))),
    required("mem_cached_bytes", U64(|r| Some(r.mem_cached_bytes))),
    required("swap_total_bytes", U64(|r| Some(r.swap_total_bytes))),
    required("swap_used_bytes", U64(|r| Some(r.swap_used_bytes))),
    required("load_1", F64(|r| Some(r.load_1))),
    required("load_5", F64(|r| Some(r.load_5))),
    required("load_15", F64(|r| Some(r.load_15))),
    nullable("psi_cpu_some_avg10", F64(|r| r.psi_cpu_some_avg10)),
    nullable("psi_memory_some_avg10", F64(|r| r.psi_memory_some_avg10)),
    nullable("psi_memory_full_avg10", F64(|r| r.psi_memory_full_avg10)),
    nullable("psi_io_some_avg10", F64(|r| r.psi_io_some_avg10)),
    nullable("psi_io_full_avg10", F64(|r| r.psi_io_full_avg10)),
    nullable("run_cpu_some_percent", F64(|r| r.run_cpu_some_percent)),
    nullable("run_cpu_full_percent", F64(|r| r.run_cpu_full_percent)),
    nullable(
        "run_memory_some_percent",
        F64(|r| r.run_memory_some_percent),
    ),
    nullable(
        "run_memory_full_percent",
        F64(|r| r.run_memory_full_percent),
    ),
    nullable("run_io_some_percent", F64(|r| r.run_io_some_percent)),
    nullable("run_io_full_percent", F64(|r| r.run_io_full_percent)),
    nullable("tree_rss_bytes", U64(|r| r.tree_rss_bytes)),
    nullable("tree_uss_bytes", U64(|r| r.tree_uss_bytes)),
    nullable("tree_pss_bytes", U64(|r| r.tree_pss_bytes)),
];

/// A published dataset's `runs` table, one row per run: see [`RunRecord`].
pub const RUNS_TABLE: &str = "runs";

static RUN_COLUMNS: &[Column<RunRecord>] = &[
    required("start_time", Time(|r| Some(r.start_time_ns))),
    required("end_time", Time(|r| Some(r.end_time_ns))),
    required("command", Str(|r| Some(&r.command))),
    required("argv", StrList(|r| Some(&r.argv))),
    required("labels", StrMap(|r| Some(&r.labels))),
    required("exit_status", I32(|r| Some(r.exit_status))),
    required("tracking_mode", Str(|r| Some(&r.tracking_mode))),
    required("montrace_version", Str(|r| Some(&r.montrace_version))),
    required("kernel", Str(|r| Some(&r.kernel))),
    nullable("cpu_model", Str(|r| r.cpu_model.as_deref())),
    nullable("cpus", U32(|r| r.cpus)),
    nullable("memory_bytes", U64(|r| r.memory_bytes)),
    nullable("git_commit", Str(|r| r.git_commit.as_deref())),
    nullable("git_branch", Str(|r| r.git_branch.as_deref())),
    nullable("git_dirty", Bool(|r| r.git_dirty)),
    nullable("ci_system", Str(|r| r.ci_system.as_deref())),
    nullable("ci_repository", Str(|r| r.ci_repository.as_deref())),
    nullable("ci_pipeline", Str(|r| r.ci_pipeline.as_deref())),
    nullable("ci_job", Str(|r| r.ci_job.as_deref())),
    nullable("slurm_job_id", Str(|r| r.slurm_job_id.as_deref())),
    nullable(
        "slurm_array_task_id",
        Str(|r| r.slurm_array_task_id.as_deref()),
    ),
    nullable("slurm_step_id", Str(|r| r.slurm.step_id.as_deref())),
    nullable("slurm_user", Str(|r| r.slurm.user.as_deref())),
    nullable("slurm_partition", Str(|r| r.slurm.partition.as_deref())),
    nullable("slurm_account", Str(|r| r.slurm.account.as_deref())),
    nullable("slurm_requested_cpus", U32(|r| r.slurm.requested_cpus)),
    nullable(
        "slurm_requested_memory_bytes",
        U64(|r| r.slurm.requested_memory_bytes),
    ),
    nullable("slurm_time_limit_s", U64(|r| r.slurm.time_limit_s)),
    nullable("slurm_requested_gpus", U32(|r| r.slurm.requested_gpus)),
    nullable("k8s_namespace", Str(|r| r.k8s_namespace.as_deref())),
    nullable("k8s_pod", Str(|r| r.k8s_pod.as_deref())),
    nullable("k8s_pod_uid", Str(|r| r.k8s_pod_uid.as_deref())),
    nullable("k8s_container_id", Str(|r| r.k8s_container_id.as_deref())),
    required("wall_s", F64(|r| Some(r.wall_s))),
    required("cpu_s", F64(|r| Some(r.cpu_s))),
    nullable("peak_rss_bytes", U64(|r| r.peak_rss_bytes)),
    required("processes", U64(|r| Some(r.processes))),
    required("max_concurrent", U64(|r| Some(r.max_concurrent))),
    required("read_bytes", U64(|r| Some(r.read_bytes))),
    required("write_bytes", U64(|r| Some(r.write_bytes))),
    nullable("critical_path_s", F64(|r| r.critical_path_s)),
    required("lost_events", U64(|r| Some(r.lost_events))),
    required("metrics", NumMap(|r| Some(&r.metrics))),
];

static RUNS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(RUN_COLUMNS));

/// Schema of a published dataset's `runs` table.
pub fn runs_schema() -> SchemaRef {
    Arc::clone(&RUNS_SCHEMA)
}

/// The rows of a `runs` table.
pub fn runs_batch(rows: &[RunRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(runs_schema(), RUN_COLUMNS, rows)
}

/// One row per phase mark: see [`MarkRecord`].
static MARK_COLUMNS: &[Column<MarkRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    required("pid", U32(|r| Some(r.pid))),
    nullable("start_time", Time(|r| r.start_time_ns)),
    required("label", Str(|r| Some(r.label.as_str()))),
    required("kind", Str(|r| Some(r.kind.as_str()))),
];

static MARKS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(MARK_COLUMNS));

/// Schema of `marks.parquet`.
pub fn marks_schema() -> SchemaRef {
    Arc::clone(&MARKS_SCHEMA)
}

/// The rows of `marks.parquet`, in the given order.
pub fn marks_batch(rows: &[MarkRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(marks_schema(), MARK_COLUMNS, rows)
}

/// One row per GPU per sample: see [`GpuRecord`].
static GPU_COLUMNS: &[Column<GpuRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    required("gpu_index", U32(|r| Some(r.gpu_index))),
    nullable("uuid", Str(|r| r.uuid.as_deref())),
    nullable("name", Str(|r| r.name.as_deref())),
    nullable(
        "utilization_gpu_percent",
        F64(|r| r.utilization_gpu_percent),
    ),
    nullable(
        "utilization_memory_percent",
        F64(|r| r.utilization_memory_percent),
    ),
    nullable("memory_used_bytes", U64(|r| r.memory_used_bytes)),
    nullable("memory_total_bytes", U64(|r| r.memory_total_bytes)),
    nullable("power_watts", F64(|r| r.power_watts)),
    nullable("energy_joules", F64(|r| r.energy_joules)),
    nullable("temperature_c", U32(|r| r.temperature_c)),
    nullable("sm_clock_mhz", U32(|r| r.sm_clock_mhz)),
    nullable("memory_clock_mhz", U32(|r| r.memory_clock_mhz)),
    nullable(
        "throttle_reasons",
        StrList(|r| r.throttle_reasons.as_deref()),
    ),
];

/// One row per tracked process per GPU per sample, and one per GPU it used at its exit: see
/// [`GpuProcessRecord`].
static GPU_PROCESS_COLUMNS: &[Column<GpuProcessRecord>] = &[
    required("time", Time(|r| Some(r.time_ns))),
    required("gpu_index", U32(|r| Some(r.gpu_index))),
    required("pid", U32(|r| Some(r.pid))),
    required("start_time", Time(|r| Some(r.start_time_ns))),
    required("source", Str(|r| Some(r.source.as_str()))),
    nullable("gpu_memory_bytes", U64(|r| r.gpu_memory_bytes)),
    nullable("sm_utilization_percent", F64(|r| r.sm_utilization_percent)),
    nullable(
        "memory_utilization_percent",
        F64(|r| r.memory_utilization_percent),
    ),
    nullable("max_gpu_memory_bytes", U64(|r| r.max_gpu_memory_bytes)),
    nullable(
        "lifetime_gpu_utilization_percent",
        F64(|r| r.lifetime_gpu_utilization_percent),
    ),
    nullable(
        "lifetime_memory_utilization_percent",
        F64(|r| r.lifetime_memory_utilization_percent),
    ),
    nullable("context_time_ns", U64(|r| r.context_time_ns)),
];

static GPU_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(GPU_COLUMNS));
static GPU_PROCESSES_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(GPU_PROCESS_COLUMNS));

/// Schema of `gpu.parquet`.
pub fn gpu_schema() -> SchemaRef {
    Arc::clone(&GPU_SCHEMA)
}

/// The rows of `gpu.parquet`, in the given order.
pub fn gpu_batch(rows: &[GpuRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(gpu_schema(), GPU_COLUMNS, rows)
}

/// Schema of `gpu_processes.parquet`.
pub fn gpu_processes_schema() -> SchemaRef {
    Arc::clone(&GPU_PROCESSES_SCHEMA)
}

/// The rows of `gpu_processes.parquet`, in the given order.
pub fn gpu_processes_batch(rows: &[GpuProcessRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(gpu_processes_schema(), GPU_PROCESS_COLUMNS, rows)
}

static PROCESSES_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(PROCESS_COLUMNS));
static EVENTS_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(EVENT_COLUMNS));
static SAMPLES_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(SAMPLE_COLUMNS));
static SYSTEM_SCHEMA: LazyLock<SchemaRef> = LazyLock::new(|| schema_of(SYSTEM_COLUMNS));

/// Schema of `processes.parquet`.
pub fn processes_schema() -> SchemaRef {
    Arc::clone(&PROCESSES_SCHEMA)
}

/// Schema of `events.parquet`.
pub fn events_schema() -> SchemaRef {
    Arc::clone(&EVENTS_SCHEMA)
}

/// Schema of `samples.parquet`.
pub fn samples_schema() -> SchemaRef {
    Arc::clone(&SAMPLES_SCHEMA)
}

/// Schema of `system.parquet`.
pub fn system_schema() -> SchemaRef {
    Arc::clone(&SYSTEM_SCHEMA)
}

/// The rows of `processes.parquet`, in the given order.
pub fn processes_batch(rows: &[ProcessRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(processes_schema(), PROCESS_COLUMNS, rows)
}

/// The rows of `events.parquet`, in the given order.
pub fn events_batch(rows: &[EventRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(events_schema(), EVENT_COLUMNS, rows)
}

/// The rows of `samples.parquet`, in the given order.
pub fn samples_batch(rows: &[SampleRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(samples_schema(), SAMPLE_COLUMNS, rows)
}

/// The rows of `system.parquet`, in the given order.
pub fn system_batch(rows: &[SystemRecord]) -> Result<RecordBatch, ArrowError> {
    batch_of(system_schema(), SYSTEM_COLUMNS, rows)
}

/// A column of a table whose rows are `R`.
struct Column<R> {
    name: &'static str,
    nullable: bool,
    values: Values<R>,
}

const fn required<R>(name: &'static str, values: Values<R>) -> Column<R> {
    Column {
        name,
        nullable: false,
        values,
    }
}

const fn nullable<R>(name: &'static str, values: Values<R>) -> Column<R> {
    Column {
        name,
        nullable: true,
        values,
    }
}

/// How a column's values are read from a row (None is null). The variant fixes the Arrow type.
enum Values<R> {
    U32(fn(&R) -> Option<u32>),
    I32(fn(&R) -> Option<i32>),
    U64(fn(&R) -> Option<u64>),
    F64(fn(&R) -> Option<f64>),
    Bool(fn(&R) -> Option<bool>),
    /// Nanoseconds since the Unix epoch (UTC), stored twice: as `Timestamp(Microsecond, "UTC")`
    /// under the column's name, which every engine reads natively (DuckDB `TIMESTAMPTZ`:
    /// `TIMESTAMP_NS` fails `epoch_ms` on DuckDB 2 and `now()` comparisons on all; Spark reads
    /// no nanosecond type without a legacy flag), and exactly as Int64 under
    /// [`exact_time_column`], appended after the table's other columns.
    Time(fn(&R) -> Option<i64>),
    Str(fn(&R) -> Option<&str>),
    StrList(fn(&R) -> Option<&[String]>),
    /// `Map<Utf8, Utf8>` (DuckDB `MAP(VARCHAR, VARCHAR)`: `labels['branch']`).
    StrMap(fn(&R) -> Option<&std::collections::BTreeMap<String, String>>),
    /// `Map<Utf8, Float64>` (DuckDB `MAP(VARCHAR, DOUBLE)`).
    NumMap(fn(&R) -> Option<&std::collections::BTreeMap<String, f64>>),
}

fn num_map_builder() -> MapBuilder<StringBuilder, Float64Builder> {
    MapBuilder::new(None, StringBuilder::new(), Float64Builder::new())
}

fn map_builder() -> MapBuilder<StringBuilder, StringBuilder> {
    MapBuilder::new(None, StringBuilder::new(), StringBuilder::new())
}

impl<R> Values<R> {
    fn data_type(&self) -> DataType {
        match self {
            Values::U32(_) => DataType::UInt32,
            Values::I32(_) => DataType::Int32,
            Values::U64(_) => DataType::UInt64,
            Values::F64(_) => DataType::Float64,
            Values::Bool(_) => DataType::Boolean,
            Values::Time(_) => DataType::Timestamp(TimeUnit::Microsecond, Some(TIME_ZONE.into())),
            Values::Str(_) => DataType::Utf8,
            Values::StrList(_) => DataType::List(Arc::new(list_item())),
            Values::StrMap(_) => arrow_array::Array::data_type(&map_builder().finish()).clone(),
            Values::NumMap(_) => arrow_array::Array::data_type(&num_map_builder().finish()).clone(),
        }
    }

    fn build(&self, rows: &[R]) -> ArrayRef {
        match self {
            Values::U32(get) => self.primitive::<UInt32Type>(rows, *get),
            Values::I32(get) => self.primitive::<Int32Type>(rows, *get),
            Values::U64(get) => self.primitive::<UInt64Type>(rows, *get),
            Values::F64(get) => self.primitive::<Float64Type>(rows, *get),
            Values::Time(get) => {
                // Floor, not truncation toward zero, so that a time before 1970 still orders
                // before its exact twin's next microsecond.
                let mut b = PrimitiveBuilder::<TimestampMicrosecondType>::with_capacity(rows.len())
                    .with_data_type(self.data_type());
                b.extend(rows.iter().map(|r| get(r).map(|ns| ns.div_euclid(1_000))));
                Arc::new(b.finish())
            }
            Values::Bool(get) => {
                let mut b = BooleanBuilder::with_capacity(rows.len());
                b.extend(rows.iter().map(get));
                Arc::new(b.finish())
            }
            Values::Str(get) => {
                let mut b = StringBuilder::with_capacity(rows.len(), 0);
                b.extend(rows.iter().map(get));
                Arc::new(b.finish())
            }
            Values::StrMap(get) => {
                let mut b = map_builder();
                for row in rows {
                    match get(row) {
                        Some(map) => {
                            for (k, v) in map {
                                b.keys().append_value(k);
                                b.values().append_value(v);
                            }
                            // Appending to the builder's own children cannot fail.
                            let _ = b.append(true);
                        }
                        None => {
                            let _ = b.append(false);
                        }
                    }
                }
                Arc::new(b.finish())
            }
            Values::NumMap(get) => {
                let mut b = num_map_builder();
                for row in rows {
                    let map = get(row);
                    for (k, v) in map.into_iter().flatten() {
                        b.keys().append_value(k);
                        b.values().append_value(*v);
                    }
                    // Appending to the builder's own children cannot fail.
                    let _ = b.append(map.is_some());
                }
                Arc::new(b.finish())
            }
            Values::StrList(get) => {
                let mut b = ListBuilder::with_capacity(StringBuilder::new(), rows.len())
                    .with_field(list_item());
                for row in rows {
                    match get(row) {
                        Some(items) => {
                            items.iter().for_each(|s| b.values().append_value(s));
                            b.append(true);
                        }
                        None => b.append_null(),
                    }
                }
                Arc::new(b.finish())
            }
        }
    }

    /// The exact twin of a `Time` column (see [`exact_time_column`]), None for other columns.
    fn build_exact(&self, rows: &[R]) -> Option<ArrayRef> {
        let Values::Time(get) = self else {
            return None;
        };
        let mut b = PrimitiveBuilder::<Int64Type>::with_capacity(rows.len());
        b.extend(rows.iter().map(get));
        Some(Arc::new(b.finish()))
    }

    fn primitive<T: ArrowPrimitiveType>(
        &self,
        rows: &[R],
        get: fn(&R) -> Option<T::Native>,
    ) -> ArrayRef {
        let mut b =
            PrimitiveBuilder::<T>::with_capacity(rows.len()).with_data_type(self.data_type());
        b.extend(rows.iter().map(get));
        Arc::new(b.finish())
    }
}

/// The element of `List<Utf8>` columns: argv entries are never null.
fn list_item() -> Field {
    Field::new_list_field(DataType::Utf8, false)
}

fn schema_of<R>(columns: &[Column<R>]) -> SchemaRef {
    let exact = columns
        .iter()
        .filter(|c| matches!(c.values, Values::Time(_)))
        .map(|c| Field::new(exact_time_column(c.name), DataType::Int64, c.nullable));
    let fields: Vec<Field> = columns
        .iter()
        .map(|c| Field::new(c.name, c.values.data_type(), c.nullable))
        .chain(exact)
        .collect();
    let metadata = HashMap::from([(SCHEMA_VERSION_KEY.to_owned(), SCHEMA_VERSION.to_string())]);
    Arc::new(Schema::new(fields).with_metadata(metadata))
}

fn batch_of<R>(
    schema: SchemaRef,
    columns: &[Column<R>],
    rows: &[R],
) -> Result<RecordBatch, ArrowError> {
    let arrays = columns
        .iter()
        .map(|c| c.values.build(rows))
        .chain(columns.iter().filter_map(|c| c.values.build_exact(rows)))
        .collect();
    // try_new checks every array against its field, nullability included.
    RecordBatch::try_new(schema, arrays)
}

#[cfg(test)]
pub(crate) mod tests;
