//! The report's text: the header, the tables and the captions, filled into the `minijinja`
//! templates `report.html` (one self-contained page: inline CSS, inline SVG, a few lines of
//! inline script to sort the tables) and `report.md` (plots as `report-*.svg` files beside it).

use minijinja::{Environment, Value};
use serde::Serialize;

use crate::units::md_code;
use crate::{kernel::ebpf::TrackingMode, store::run_json::RunInfo};

use super::load::RunData;
use super::model::{exit_text, signal_name, Model};
use super::{color_hex, fmt_percent, fmt_secs, Report, TABLE_GROUPS, TOP_PROCESSES};
use crate::units::format_bytes;

const HTML_TEMPLATE: &str = include_str!("report.html");
const MARKDOWN_TEMPLATE: &str = include_str!("report.md");

/// One line of the header.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Item {
    pub label: String,
    pub value: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Column {
    pub label: &'static str,
    /// What it means (the HTML shows it on hover).
    pub title: &'static str,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cell {
    pub text: String,
    /// For sorting the HTML table (-1 when unknown).
    pub sort: f64,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct GroupRow {
    pub color: String,
    pub name: String,
    pub cells: Vec<Cell>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
struct PlotView {
    id: String,
    title: String,
    caption: String,
    svg: String,
    file: String,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
struct View {
    title: String,
    command: String,
    version: &'static str,
    header: Vec<Item>,
    notes: Vec<String>,
    group_by: String,
    group_columns: Vec<Column>,
    groups: Vec<GroupRow>,
    more_groups: Option<String>,
    process_columns: Vec<Column>,
    top_cpu: Vec<GroupRow>,
    top_memory: Vec<GroupRow>,
    plots: Vec<PlotView>,
    timeline_caption: String,
    timeline_svg: String,
    timeline_html: String,
    timeline_axis_svg: String,
    timeline_file: &'static str,
    /// Group-table columns hidden on a narrow window (the page says so).
    minor_columns: Vec<&'static str>,
    /// "Where the time went", from run.json `time` (absent without it).
    time: Option<TimeView>,
    /// Its parallelism plot.
    time_plot: Option<PlotView>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TimeView {
    pub summary: String,
    /// What each column of the steps' table is.
    pub columns: &'static str,
    pub steps: Vec<StepRow>,
    pub more: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepRow {
    pub start: String,
    pub duration: String,
    pub cpu: String,
    pub run_queue: String,
    pub blocked: String,
    pub command: String,
}

/// What the columns of the critical path's table are.
pub const STEP_COLUMNS: &str = "The steps of the critical path: start, when the process started, \
     after the command's start; duration, its wall time from its fork to its exit; CPU, its CPU \
     time (user + system, its own threads); waiting for a CPU, the time its threads were runnable \
     but not on a CPU (run-queue delay); blocked, the time they were blocked uninterruptibly (the \
     D state, mostly storage I/O). The rest of its duration it was asleep (waiting for a child, a \
     pipe, a timer). n/a: not measured (the tree was followed without the BTF tracepoints).";

/// Steps of the critical path listed at most.
pub const TIME_STEPS: usize = 30;

/// The report's first section: the critical path and how parallel the run was.
pub fn time_view(info: &RunInfo, cores: Option<f64>) -> Option<TimeView> {
    let time = info.time.as_ref()?;
    // Runs recorded before the count was kept: the steps they list are all there were.
    let count = time.critical_path_steps.max(time.critical_path.len());
    let wall = info.command_wall_s.unwrap_or(info.duration_s);
    let cores = cores.map_or(String::new(), |c| format!(" of {}", trim_cores(c)));
    // Runs recorded before the serial share was kept say nothing of it.
    let serial = time.serial_share.map_or(String::new(), |share| {
        format!(
            " For {:.0} % of the wall time at most one process was running or waiting to run \
             (estimated from the samples).",
            share * 100.0
        )
    });
    let summary = format!(
        "The critical path, the chain of processes that bounded the wall time, took {} of the \
         {} wall time in {} step{}. On average {:.2} processes were running or waiting to run \
         (the tree's CPU time plus run-queue delay over the wall time), and {:.2} cores{cores} \
         were used (its CPU time over the wall time).{serial}",
        fmt_secs(time.critical_path_s),
        fmt_secs(wall),
        count,
        if count == 1 { "" } else { "s" },
        time.avg_parallelism,
        time.avg_cores_used,
    );
    let opt = |v: Option<f64>| v.map_or("n/a".to_string(), fmt_secs);
    let steps = crate::analysis::critical::longest(&time.critical_path, TIME_STEPS)
        .into_iter()
        .map(|s| StepRow {
            start: fmt_secs(s.start_s),
            duration: fmt_secs(s.duration_s),
            cpu: fmt_secs(s.cpu_s),
            run_queue: opt(s.run_queue_s),
            blocked: opt(s.blocked_s),
            command: s.command.clone(),
        })
        .collect();
    let more = count.saturating_sub(TIME_STEPS);
    let kept = time.critical_path.len();
    Some(TimeView {
        summary,
        columns: STEP_COLUMNS,
        steps,
        more: (more > 0).then(|| {
            let where_ = if kept < count {
                format!(
                    "run.json (time.critical_path) keeps the {kept} longest of them, in order"
                )
            } else {
                "they are in run.json (time.critical_path)".to_owned()
            };
            format!("The {TIME_STEPS} longest steps are listed, in order; {more} more ran on the path: {where_}.")
        }),
    })
}

fn trim_cores(c: f64) -> String {
    let text = format!("{c:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

/// The per-group table's columns that give way on a narrow window, so that the group, its
/// instances, memory peaks, CPU total and duration stay in view.
pub const MINOR_COLUMNS: [&str; 6] = [
    "samples",
    "agg. peak PSS",
    "CPU user",
    "CPU system",
    "avg USS",
    "avg CPU",
];

/// The columns of the per-group table, after the group's name.
pub const GROUP_COLUMNS: [Column; 14] = [
    Column {
        label: "instances",
        title: "processes in the group",
    },
    Column {
        label: "samples",
        title: "sweep rows (procfs) of its processes",
    },
    Column {
        label: "peak USS / instance",
        title: "the largest private memory (USS) of one process",
    },
    Column {
        label: "peak RSS / instance",
        title: "the largest peak resident memory of one process: the kernel's exact figure at \
                its exit (VmHWM), so processes too short to be sampled count (* where a process \
                had none and its largest sample counts instead)",
    },
    Column {
        label: "agg. peak USS",
        title: "largest sum of the group's USS at one sweep",
    },
    Column {
        label: "agg. peak RSS",
        title: "largest sum of the group's RSS at one sweep",
    },
    Column {
        label: "agg. peak PSS",
        title: "largest sum of the group's PSS at one sweep",
    },
    Column {
        label: "peak CPU",
        title: "largest sum of the group's CPU% at one sweep (100% = one core)",
    },
    Column {
        label: "CPU user",
        title: "user CPU seconds (exact exit figures)",
    },
    Column {
        label: "CPU system",
        title: "system CPU seconds (exact exit figures)",
    },
    Column {
        label: "CPU total",
        title: "user + system CPU seconds",
    },
    Column {
        label: "avg USS",
        title: "mean USS over the group's sweep rows (one process's typical private memory)",
    },
    Column {
        label: "avg CPU",
        title: "CPU total over duration (100% = one core busy while the group ran)",
    },
    Column {
        label: "duration",
        title: "from the first start of one of its processes to the last end",
    },
];

/// The per-group table's GPU column, after "agg. peak PSS", only for runs with GPU samples (so
/// the table of a run without them is as it always was).
pub const GPU_MEMORY_COLUMN: Column = Column {
    label: "agg. peak GPU mem",
    title: "largest sum of the GPU memory the group's processes held at one sweep, all GPUs",
};
/// Where [`GPU_MEMORY_COLUMN`] goes among [`GROUP_COLUMNS`].
const GPU_MEMORY_AT: usize = 7;

/// The columns of the per-group table of `model`, after the group's name.
pub fn group_columns(model: &Model) -> Vec<Column> {
    let mut columns = GROUP_COLUMNS.to_vec();
    if has_gpu_memory(model) {
        columns.insert(GPU_MEMORY_AT, GPU_MEMORY_COLUMN);
    }
    columns
}

fn has_gpu_memory(model: &Model) -> bool {
    model.groups.iter().any(|g| g.agg_peak_gpu_memory.is_some())
}

/// The columns of the top-process tables, after pid.
pub const PROCESS_COLUMNS: [Column; 8] = [
    Column {
        label: "group",
        title: "its group",
    },
    Column {
        label: "command",
        title: "its command line (cut at 80 characters)",
    },
    Column {
        label: "start",
        title: "seconds after the start of the run",
    },
    Column {
        label: "duration",
        title: "wall time from its start to its end",
    },
    Column {
        label: "CPU",
        title: "user + system CPU seconds",
    },
    Column {
        label: "peak RSS",
        title: "peak resident memory (exit VmHWM, or the largest sample)",
    },
    Column {
        label: "peak USS",
        title: "largest sampled private memory",
    },
    Column {
        label: "exit",
        title: "how it ended",
    },
];

fn cell(text: String, sort: f64) -> Cell {
    Cell { text, sort }
}

fn bytes_cell(v: Option<u64>) -> Cell {
    match v {
        Some(b) => cell(format_bytes(b), b as f64),
        None => cell("n/a".into(), -1.0),
    }
}

fn float_bytes_cell(v: Option<f64>) -> Cell {
    match v {
        Some(b) => cell(format_bytes(b.round() as u64), b),
        None => cell("n/a".into(), -1.0),
    }
}

fn percent_cell(v: Option<f64>) -> Cell {
    match v {
        Some(p) => cell(fmt_percent(p), p),
        None => cell("n/a".into(), -1.0),
    }
}

fn secs_cell(ns: u64) -> Cell {
    let s = ns as f64 / 1e9;
    cell(fmt_secs(s), s)
}

/// The per-group table: the first [`TABLE_GROUPS`] groups.
pub fn group_rows(model: &Model) -> Vec<GroupRow> {
    let gpu = has_gpu_memory(model);
    model
        .groups
        .iter()
        .take(TABLE_GROUPS)
        .enumerate()
        .map(|(g, st)| {
            let mut cpu_total = secs_cell(st.cpu_ns());
            if st.cpu_from_samples > 0 {
                // Some processes had no exit figures: their CPU time is a lower bound.
                cpu_total.text.push('*');
            }
            let mut cells = vec![
                cell(st.instances.to_string(), st.instances as f64),
                cell(st.samples.to_string(), st.samples as f64),
                bytes_cell(st.peak_uss_instance),
                {
                    let mut peak = bytes_cell(st.peak_rss_instance);
                    if st.peak_rss_from_samples > 0 && st.peak_rss_instance.is_some() {
                        // Some processes had no exit figure: a sampled peak is a lower bound.
                        peak.text.push('*');
                    }
                    peak
                },
                bytes_cell(st.agg_peak_uss),
                bytes_cell(st.agg_peak_rss),
                bytes_cell(st.agg_peak_pss),
                percent_cell(st.peak_cpu_percent),
                secs_cell(st.cpu_user_ns),
                secs_cell(st.cpu_system_ns),
                cpu_total,
                float_bytes_cell(st.avg_uss),
                percent_cell(st.avg_cpu_percent),
                {
                    let s = st.duration_ns() as f64 / 1e9;
                    cell(fmt_secs(s), s)
                },
            ];
            if gpu {
                cells.insert(GPU_MEMORY_AT, bytes_cell(st.agg_peak_gpu_memory));
            }
            GroupRow {
                color: color_hex(Some(g)),
                name: st.name.clone(),
                cells,
            }
        })
        .collect()
}

fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max - 1).collect();
        s.push('…');
        s
    }
}

fn process_rows(data: &RunData, model: &Model, top: &[super::model::TopProcess]) -> Vec<GroupRow> {
    top.iter()
        .map(|t| {
            let p = &data.processes[t.process];
            let g = model.group_of[t.process];
            let start = model.secs(p.start_ns);
            let duration = (model.end_of(p) - p.start_ns) as f64 / 1e9;
            GroupRow {
                color: color_hex(Some(g)),
                name: p.pid.to_string(),
                cells: vec![
                    cell(model.groups[g].name.clone(), g as f64),
                    // Whole: the part that tells `cc1 src/u07.c` from `cc1 src/u08.c` is
                    // often at the end (the page wraps it).
                    cell(p.command_line(), 0.0),
                    cell(format!("+{}", fmt_secs(start)), start),
                    cell(fmt_secs(duration), duration),
                    secs_cell(t.cpu_ns),
                    bytes_cell(t.peak_rss),
                    bytes_cell(t.peak_uss),
                    cell(exit_text(p), 0.0),
                ],
            }
        })
        .collect()
}

/// `2024-05-01T12:00:00.123456Z` -> `2024-05-01 12:00:00 UTC`.
fn readable_time(rfc3339: &str) -> String {
    match (rfc3339.get(..10), rfc3339.get(11..19)) {
        (Some(date), Some(time)) if rfc3339.ends_with('Z') => format!("{date} {time} UTC"),
        _ => rfc3339.to_string(),
    }
}

/// The command line the report is about: run.json's, else the first process's.
pub fn command(data: &RunData) -> String {
    data.info
        .as_ref()
        .map(|info| info.command.clone())
        .or_else(|| {
            data.processes
                .iter()
                .min_by_key(|p| p.start_ns)
                .map(|p| p.command_line())
        })
        .unwrap_or_default()
}

/// The header: what was run, where, how it ended and how complete the record is. Without
/// run.json (a run that did not end cleanly) it says what the tables alone tell.
pub fn header(report: &Report) -> Vec<Item> {
    let data = &report.data;
    let model = &report.model;
    let mut items = Vec::new();
    let mut put = |label: &str, value: String| {
        items.push(Item {
            label: label.into(),
            value,
        })
    };
    let info = data.info.as_ref();
    if let Some(info) = info {
        put("Host", format!("{} (Linux {})", info.host, info.kernel));
        put("Start", readable_time(&info.start_time));
        let duration = match info.command_wall_s {
            Some(wall) => format!(
                "{} (montrace in all: {})",
                fmt_secs(wall),
                fmt_secs(info.duration_s)
            ),
            None => fmt_secs(info.duration_s),
        };
        put("Duration", duration);
        put("Exit status", exit_status(info));
        put("Tracking", tracking(info.tracking_mode));
        if let Some(missing) = missing_features(info) {
            put("Not on this kernel", missing);
        }
        put("Lost events", lost_events(info));
        put("Coverage", coverage(&info.cgroup));
        put(
            "Processes",
            format!(
                "{} started, at most {} at once",
                info.processes_started, info.max_concurrent
            ),
        );
    } else {
        let secs = model.secs(model.t1_ns);
        put("Duration", format!("{} of data", fmt_secs(secs)));
        put("Exit status", "unknown (no run.json)".into());
        put("Processes", format!("{} seen", data.processes.len()));
    }
    put("CPU", cpu_total(model, info));
    if let Some(peak) = memory_peak(report) {
        put("Memory peak", peak);
    }
    if let Some(peaks) = info.map(|i| i.tree_memory_peaks) {
        let p = [peaks.uss_bytes, peaks.rss_bytes, peaks.pss_bytes];
        if p.iter().any(Option::is_some) {
            let show = |v: Option<u64>| v.map_or("n/a".into(), format_bytes);
            put(
                "Tree memory, sampled peaks",
                format!("USS {}, RSS {}, PSS {}", show(p[0]), show(p[1]), show(p[2])),
            );
        }
    }
    let sweeps = report.model.sweeps.len();
    put(
        "Samples",
        match info.map(|i| i.sample_interval_ms).filter(|&ms| ms > 0.0) {
            Some(ms) => format!("{sweeps} sweeps every {ms} ms"),
            None => format!("{sweeps} sweeps"),
        },
    );
    items
}

/// The tree's CPU as run.json and summary.json give it: the exit figures of the processes that
/// ended (exact), then, apart, what the samples show of those without exit figures (still
/// running at the end, or their exit lost): over the recording where run.json says (runs of
/// this version), else their last sample, since their start.
fn cpu_total(model: &super::model::Model, info: Option<&RunInfo>) -> String {
    let secs = |ns: u64| fmt_secs(ns as f64 / 1e9);
    let exact = |sampled: bool| {
        model
            .procs
            .iter()
            .filter(|p| p.cpu_from_samples == sampled)
            .fold((0u64, 0u64, 0usize), |(u, s, n), p| {
                (u + p.cpu_user_ns, s + p.cpu_system_ns, n + 1)
            })
    };
    let (user, system, _) = exact(false);
    let mut text = format!(
        "{} (user {}, system {})",
        secs(user + system),
        secs(user),
        secs(system)
    );
    let unfinished = match info.map(|i| &i.totals) {
        Some(t) if t.unfinished_processes > 0 => Some((
            t.unfinished_cpu_user_ns + t.unfinished_cpu_system_ns,
            t.unfinished_processes,
            "while recorded",
        )),
        _ => Some(exact(true))
            .filter(|(_, _, n)| *n > 0)
            .map(|(u, s, n)| (u + s, n, "since their start")),
    };
    if let Some((ns, n, over)) = unfinished {
        text.push_str(&format!(
            " for the processes that ended (exit figures); + {} sampled ({over}) for {n} \
             without exit figures (still running at the end, or their exit lost)",
            secs(ns)
        ));
    }
    text
}

/// The memory peak, exact figures first: the whole tree's from the kernel (the run cgroup's
/// `memory.peak`) where it has one, the largest process's (its exit VmHWM) and which command it
/// was, then the sampled peak of the tree and when it happened. A sampled sum below the exact
/// peak of one process says why.
pub fn memory_peak(report: &Report) -> Option<String> {
    let data = &report.data;
    let info = data.info.as_ref();
    let mut parts = Vec::new();
    let exact_tree = info.and_then(|i| i.cgroup.totals.as_ref()?.memory_peak_bytes);
    if let Some(bytes) = exact_tree {
        parts.push(format!(
            "whole tree {} (exact: the kernel's, page cache included)",
            format_bytes(bytes)
        ));
    }
    let largest = data
        .processes
        .iter()
        .filter_map(|p| p.peak_rss_bytes.map(|b| (b, p)))
        .max_by_key(|(b, _)| *b);
    if let Some((bytes, p)) = largest {
        parts.push(format!(
            "largest process {} (exact: {}, pid {})",
            format_bytes(bytes),
            cut(&p.command_line(), 100),
            p.pid
        ));
    }
    let counted_once = info.and_then(|i| {
        let peaks = i.tree_memory_peaks;
        Some((peaks.rss_bytes?, peaks.source?))
    });
    if let Some((rss, source)) = counted_once {
        use crate::sampling::sampler::tree_memory::TreeMemorySource;
        let how = match source {
            TreeMemorySource::Cgroup => "resident, from the run cgroup's accounting",
            TreeMemorySource::Pss => "PSS summed over its address spaces",
            TreeMemorySource::RssByAddressSpace => "RSS summed over its address spaces",
        };
        let mut text = format!("whole tree sampled {} ({how})", format_bytes(rss));
        if largest.is_some_and(|(b, _)| b > rss) {
            text.push_str(
                " (sampled at each sweep only: a peak between two sweeps is missed, so it can be \
                 below one process's exact peak)",
            );
        }
        parts.push(text);
    } else if let Some((t, rss)) = report.model.tree_rss_peak() {
        let mut text = format!(
            "whole tree sampled {} RSS at +{}",
            format_bytes(rss),
            fmt_secs(report.model.secs(t))
        );
        if largest.is_some_and(|(b, _)| b > rss) {
            text.push_str(
                " (sampled at each sweep only: a peak between two sweeps is missed, so it can be \
                 below one process's exact peak)",
            );
        }
        parts.push(text);
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

/// How the command ended, and the limit that stopped it.
fn exit_status(info: &RunInfo) -> String {
    let mut exit = match (info.exit_code, info.exit_signal) {
        (Some(code), _) => format!("exited with {code}"),
        (None, Some(sig)) => match signal_name(sig) {
            Some(name) => format!("killed by {name} ({sig})"),
            None => format!("killed by signal {sig}"),
        },
        (None, None) => "unknown".into(),
    };
    if let Some(breach) = &info.limit_breach {
        exit.push_str(&format!(
            "; stopped by --limit {} after {} (montrace exit status {})",
            breach.limit,
            fmt_secs(breach.elapsed_s),
            info.exit_status
        ));
    }
    exit
}

fn tracking(mode: TrackingMode) -> String {
    match mode {
        TrackingMode::TpBtf => "tp_btf (BTF tracepoints)".into(),
        TrackingMode::Tracepoint => "tracepoint (classic tracepoints)".into(),
        TrackingMode::Polling => "polling".into(),
    }
}

/// What the kernel (or the mode) did not give the run, from run.json's `features`; None when
/// nothing was missing or the run predates them.
fn missing_features(info: &RunInfo) -> Option<String> {
    let missing: Vec<String> = info
        .features
        .iter()
        .filter(|f| !f.available)
        .map(|f| format!("{}: {}", f.name.replace('_', " "), f.detail))
        .collect();
    (!missing.is_empty()).then(|| missing.join("; "))
}

fn lost_events(info: &RunInfo) -> String {
    let lost = &info.lost_events;
    let (ring, map, reads) = (lost.ringbuf_full, lost.track_map_full, lost.read_errors);
    let mut parts = Vec::new();
    if ring + map > 0 {
        parts.push(format!(
            "{} events lost (ring buffer full {ring}, tracking map full {map})",
            ring + map
        ));
    }
    if reads > 0 {
        parts.push(format!("{reads} kernel reads failed"));
    }
    if info.vanished_processes > 0 {
        parts.push(format!("{} exits never seen", info.vanished_processes));
    }
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join("; ")
    }
}

fn coverage(cgroup: &crate::store::run_json::CgroupReport) -> String {
    match (cgroup.cpu_coverage, &cgroup.error) {
        (Some(c), _) => format!(
            "{} of the run cgroup's CPU time is in the per-process figures",
            fmt_percent(c * 100.0)
        ),
        (None, Some(err)) => format!("unknown: {err}"),
        (None, None) => "unknown (no cgroup)".into(),
    }
}

fn timeline_caption(report: &Report) -> String {
    let t = &report.timeline;
    let n = report.data.processes.len();
    let mut text = if t.merged {
        format!(
            "{n} processes in {} rows: siblings of one group are merged into one row (its \
             processes are the ticks inside it).",
            t.rows.len()
        )
    } else if t.rows.iter().any(|r| r.folded) {
        format!(
            "{n} processes in {} rows, under their parents.",
            t.rows.len()
        )
    } else {
        format!("{n} processes, one row each, under their parents.")
    };
    let folds: Vec<usize> = t
        .rows
        .iter()
        .filter(|r| r.folded)
        .map(|r| r.members.len())
        .collect();
    if !folds.is_empty() {
        text.push_str(&format!(
            " {} row{} fold{} {} identical siblings (children of one parent with the same command \
             line and none of their own), labelled with their count; in the HTML report, click \
             one to open it.",
            folds.len(),
            if folds.len() == 1 { "" } else { "s" },
            if folds.len() == 1 { "s" } else { "" },
            folds.iter().sum::<usize>()
        ));
    }
    if let Some(depth) = t.folded_below {
        text.push_str(&format!(
            " Levels deeper than {depth} are folded into their ancestors."
        ));
    }
    if t.cut_rows > 0 {
        text.push_str(&format!(
            " {} more rows ({} processes) are not drawn.",
            t.cut_rows, t.cut_processes
        ));
    }
    let on_path = report
        .model
        .on_critical_path
        .iter()
        .filter(|&&on| on)
        .count();
    if on_path > 0 {
        text.push_str(&format!(
            " Outlined: the {on_path} process{} on the critical path (run.json \
             time.critical_path), the chain that bounded the wall time.",
            if on_path == 1 { "" } else { "es" }
        ));
    }
    text.push_str(" Hover over a bar for its figures.");
    text
}

fn view(report: &Report) -> View {
    let data = &report.data;
    let model = &report.model;
    let command = command(data);
    let more = model.groups.len().saturating_sub(TABLE_GROUPS);
    let more_groups = (more > 0).then(|| {
        let processes: usize = model.groups[TABLE_GROUPS..]
            .iter()
            .map(|g| g.instances)
            .sum();
        format!("{more} smaller groups ({processes} processes) are not listed.")
    });
    View {
        title: format!("montrace: {}", cut(&command, 60)),
        command,
        version: env!("CARGO_PKG_VERSION"),
        header: header(report),
        notes: data.notes.clone(),
        group_by: report.group_by.describe(),
        group_columns: group_columns(model),
        groups: group_rows(model),
        more_groups,
        process_columns: PROCESS_COLUMNS.to_vec(),
        top_cpu: process_rows(
            data,
            model,
            &super::model::top_by_cpu(data, model, TOP_PROCESSES),
        ),
        top_memory: process_rows(
            data,
            model,
            &super::model::top_by_memory(data, model, TOP_PROCESSES),
        ),
        plots: report.plots.iter().map(plot_view).collect(),
        timeline_caption: timeline_caption(report),
        timeline_svg: report.timeline_svg.clone(),
        timeline_html: report.timeline_html.clone(),
        timeline_axis_svg: super::timeline::axis_svg(model),
        timeline_file: "report-timeline.svg",
        minor_columns: MINOR_COLUMNS.to_vec(),
        time: data
            .info
            .as_ref()
            .and_then(|info| time_view(info, info.capacity.as_ref().map(|c| c.cpu_cores))),
        time_plot: report.time_plot.as_ref().map(plot_view),
    }
}

fn plot_view(p: &super::plots::Plot) -> PlotView {
    PlotView {
        id: p.id.clone(),
        title: p.title.clone(),
        caption: p.caption.clone(),
        svg: p.svg.clone(),
        file: format!("report-{}.svg", p.id),
    }
}

/// Markdown table cells: no line breaks, `|` and inline markup escaped.
fn md_escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\\' | '|' | '*' | '_' | '`' | '[' | ']' => {
                out.push('\\');
                out.push(c);
            }
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '\n' | '\r' | '\t' => out.push(' '),
            c => out.push(c),
        }
    }
    out
}

fn environment() -> Result<Environment<'static>, minijinja::Error> {
    let mut env = Environment::new();
    env.set_keep_trailing_newline(true);
    env.add_filter("md", |v: String| md_escape(&v));
    env.add_filter("md_code", |v: String| md_code(&v));
    env.add_template("report.html", HTML_TEMPLATE)?;
    env.add_template("report.md", MARKDOWN_TEMPLATE)?;
    Ok(env)
}

fn render(name: &str, view: &View) -> anyhow::Result<String> {
    let env = environment()?;
    let out = env
        .get_template(name)?
        .render(Value::from_serialize(view))
        .map_err(|e| anyhow::anyhow!("cannot render {name}: {e:#}"))?;
    Ok(out)
}

/// The self-contained HTML page.
pub fn html(report: &Report) -> anyhow::Result<String> {
    render("report.html", &view(report))
}

/// The Markdown report and the SVG files it links to, as (file name, contents).
pub fn markdown(report: &Report) -> anyhow::Result<(String, Vec<(String, String)>)> {
    let view = view(report);
    let mut files: Vec<(String, String)> = view
        .time_plot
        .iter()
        .chain(&view.plots)
        .filter(|p| !p.svg.is_empty())
        .map(|p| (p.file.clone(), p.svg.clone()))
        .collect();
    files.push((view.timeline_file.to_string(), view.timeline_svg.clone()));
    Ok((render("report.md", &view)?, files))
}

/// The per-group table alone, as Markdown (what the snapshot test pins).
pub fn group_table_markdown(report: &Report) -> String {
    let columns = group_columns(&report.model);
    let mut out = String::from("| | group |");
    for c in &columns {
        out.push_str(&format!(" {} |", c.label));
    }
    out.push_str("\n|---|---|");
    out.push_str(&"--:|".repeat(columns.len()));
    out.push('\n');
    for (k, row) in group_rows(&report.model).iter().enumerate() {
        out.push_str(&format!("| {} | {} |", k + 1, md_escape(&row.name)));
        for c in &row.cells {
            out.push_str(&format!(" {} |", md_escape(&c.text)));
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::report::tests::fixture;
    use crate::analysis::report::{model, prepare, prepare_data};

    #[test]
    fn where_the_time_went_lists_the_critical_path() {
        use crate::analysis::critical::{Step, TimeAnalysis};
        let report = prepare(&fixture(), "exe").unwrap();
        let mut info = report.data.info.clone().expect("the fixture has run.json");
        assert_eq!(
            time_view(&info, Some(2.0)),
            None,
            "no section without run.json time"
        );
        let step = |pid, start_s: f64| Step {
            pid,
            command: format!("cc -c {pid}.c"),
            start_s,
            duration_s: 0.3,
            cpu_s: 0.29,
            run_queue_s: Some(0.01),
            blocked_s: None,
        };
        info.time = Some(TimeAnalysis {
            critical_path: (0..35).map(|i| step(i, i as f64 * 0.3)).collect(),
            critical_path_s: 10.5,
            critical_path_steps: 35,
            avg_parallelism: 1.5,
            avg_cores_used: 1.25,
            serial_share: Some(0.375),
        });
        let view = time_view(&info, Some(2.0)).unwrap();
        assert!(view
            .columns
            .contains("duration, its wall time from its fork to its exit"));
        assert!(
            view.summary.contains(
                "For 38 % of the wall time at most one process was running or waiting to run"
            ),
            "{}",
            view.summary
        );
        assert!(view.summary.contains("took 10.50 s"), "{}", view.summary);
        assert!(view.summary.contains("in 35 steps"), "{}", view.summary);
        assert!(
            view.summary.contains("1.25 cores of 2 were used"),
            "{}",
            view.summary
        );
        assert_eq!(view.steps.len(), TIME_STEPS);
        assert_eq!(view.steps[1].start, "0.300 s");
        assert_eq!(
            (
                view.steps[0].run_queue.as_str(),
                view.steps[0].blocked.as_str()
            ),
            ("0.010 s", "n/a")
        );
        assert_eq!(
            view.more.as_deref(),
            Some(
                "The 30 longest steps are listed, in order; 5 more ran on the path: they are in \
                 run.json (time.critical_path)."
            )
        );
        // A path longer than run.json keeps: the longest steps, in order, and the count.
        let time = info.time.as_mut().unwrap();
        time.critical_path[33].duration_s = 2.0;
        time.critical_path_steps = 20_000;
        let view = time_view(&info, Some(2.0)).unwrap();
        assert!(view.summary.contains("in 20000 steps"), "{}", view.summary);
        assert_eq!(view.steps.len(), TIME_STEPS);
        assert_eq!(view.steps[TIME_STEPS - 1].duration, "2.000 s");
        assert_eq!(view.steps[TIME_STEPS - 2].command, "cc -c 28.c");
        assert!(
            view.more.as_deref().unwrap().contains(
                "19970 more ran on the path: run.json (time.critical_path) keeps the 35 longest"
            ),
            "{:?}",
            view.more
        );
    }

    #[test]
    fn the_timeline_caption_says_what_the_outline_is() {
        use crate::analysis::critical::{Step, TimeAnalysis};
        let mut data = crate::analysis::report::load::load(&fixture()).unwrap();
        let before = timeline_caption(&prepare_data(data.clone(), model::GroupBy::Exe));
        assert!(!before.contains("critical path"), "{before}");
        // The root shell, at the command's start.
        let info = data.info.as_mut().unwrap();
        info.time = Some(TimeAnalysis {
            critical_path: vec![Step {
                pid: 28534,
                command: "sh".into(),
                start_s: 0.0,
                duration_s: 0.884,
                cpu_s: 0.003,
                run_queue_s: None,
                blocked_s: None,
            }],
            critical_path_steps: 1,
            ..Default::default()
        });
        let report = prepare_data(data, model::GroupBy::Exe);
        let caption = timeline_caption(&report);
        assert!(
            caption.contains("Outlined: the 1 process on the critical path"),
            "{caption}"
        );
        let html = html(&report).unwrap();
        assert!(html.contains(super::super::timeline::CRITICAL_LEGEND));
    }

    /// The fixture with run.json `time` (a one-step path: the root shell) and, when given, the
    /// run's cores.
    fn with_time(cores: Option<f64>) -> crate::analysis::report::Report {
        use crate::analysis::critical::TimeAnalysis;
        let mut data = crate::analysis::report::load::load(&fixture()).unwrap();
        let info = data.info.as_mut().unwrap();
        info.time = Some(TimeAnalysis {
            critical_path_s: 0.884,
            critical_path_steps: 1,
            ..Default::default()
        });
        info.capacity = cores.map(|cpu_cores| crate::sampling::capacity::Capacity {
            cpu_cores,
            cpu_basis: "host".into(),
            memory_bytes: 1 << 30,
            memory_basis: "host".into(),
        });
        prepare_data(data, model::GroupBy::Exe)
    }

    #[test]
    fn where_the_time_went_plots_the_processes_alive_against_the_cores() {
        assert!(prepare(&fixture(), "exe").unwrap().time_plot.is_none());
        let report = with_time(Some(2.0));
        let plot = report.time_plot.as_ref().expect("a run with time");
        assert_eq!(plot.id, "parallelism");
        // Exact steps: the most at once is run.json's max_concurrent.
        let most = report.data.info.as_ref().unwrap().max_concurrent;
        assert_eq!(most, 13);
        assert!(
            plot.caption.contains(&format!("at most {most} at once")),
            "{}",
            plot.caption
        );
        assert!(
            plot.caption.contains("the 2 cores the run had"),
            "{}",
            plot.caption
        );
        // The fixture was recorded without the BTF tracepoints: cores used, not wanted.
        assert!(plot.svg.contains(">\ncores used\n</text>"));
        assert!(!plot.svg.contains("cores wanted"));
        assert!(
            plot.caption.contains("no line for the cores wanted"),
            "{}",
            plot.caption
        );
        assert!(
            plot.svg.contains(">\n2 cores\n</text>"),
            "the cores' line is labelled"
        );
        // Whole-number ticks only on the count axis.
        assert!(!plot.svg.contains(">\n0.5\n</text>"));
        let (markdown, files) = markdown(&report).unwrap();
        let section = &markdown
            [markdown.find("## Where the time went").unwrap()..markdown.find("## Groups").unwrap()];
        assert!(
            section.contains(
                "![Parallelism: cores used and wanted, processes alive](report-parallelism.svg)"
            ),
            "{section}"
        );
        assert_eq!(files[0].0, "report-parallelism.svg");
        let html = html(&report).unwrap();
        let section = &html[html.find(r#"<section id="time">"#).unwrap()
            ..html.find(r#"<section id="groups">"#).unwrap()];
        assert!(section.contains(r#"<figure id="plot-parallelism">"#));
        assert_eq!(section.matches("<svg").count(), 1);
        // Without the cores, no line and no word of them.
        let plot = with_time(None).time_plot.unwrap();
        assert!(!plot.svg.contains(" cores\n</text>"));
        assert!(!plot.caption.contains("cores the run had"));
    }

    #[test]
    fn markdown_escapes() {
        assert_eq!(md_escape("a|b_c*<d>\n"), r"a\|b\_c\*&lt;d&gt; ");
    }

    #[test]
    fn group_table_snapshot() {
        let report = prepare(&fixture(), "exe").unwrap();
        assert_eq!(
            group_table_markdown(&report),
            r###"| | group | instances | samples | peak USS / instance | peak RSS / instance | agg. peak USS | agg. peak RSS | agg. peak PSS | peak CPU | CPU user | CPU system | CPU total | avg USS | avg CPU | duration |
|---|---|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|
| 1 | sh | 7 | 40 | 36.9 MiB | 39.8 MiB | 75.5 MiB | 81.4 MiB | 75.8 MiB | 120% | 0.146 s | 0.198 s | 0.343 s | 8.6 MiB | 39% | 0.884 s |
| 2 | tr | 3 | 10 | 172.0 KiB | 1.6 MiB | 360.0 KiB | 4.7 MiB | 603.0 KiB | 30% | 0.041 s | 0.062 s | 0.103 s | 125.2 KiB | 22% | 0.461 s |
| 3 | head | 3 | 10 | 172.0 KiB | 1.6 MiB | 364.0 KiB | 4.8 MiB | 616.0 KiB | 10.0% | 0.000 s | 0.036 s | 0.036 s | 131.2 KiB | 7.8% | 0.461 s |
| 4 | sleep | 3 | 9 | 156.0 KiB | 1.7 MiB | 228.0 KiB | 3.3 MiB | 415.0 KiB | 0.0% | 0.003 s | 0.000 s | 0.003 s | 124.0 KiB | 0.4% | 0.564 s |
| 5 | seq | 1 | 0 | n/a | 1.6 MiB | n/a | n/a | n/a | n/a | 0.001 s | 0.000 s | 0.001 s | n/a | 26% | 0.004 s |
| 6 | true | 5 | 0 | n/a | 1.0 MiB | n/a | n/a | n/a | n/a | 0.001 s | 0.000 s | 0.001 s | n/a | 5.2% | 0.010 s |
"###
        );
    }

    #[test]
    fn markdown_snapshot() {
        let report = prepare(&fixture(), "exe").unwrap();
        let (markdown, files) = markdown(&report).unwrap();
        assert_eq!(
            markdown,
            include_str!("../../../tests/golden/run-small/report.md")
        );
        let names: Vec<&str> = files.iter().map(|f| f.0.as_str()).collect();
        assert_eq!(
            names,
            [
                "report-uss.svg",
                "report-rss-uss.svg",
                "report-memory-stacked.svg",
                "report-cpu.svg",
                "report-cpu-time.svg",
                "report-instances.svg",
                "report-timeline.svg"
            ]
        );
        for (name, svg) in &files {
            assert!(svg.starts_with("<svg"), "{name}");
            assert!(svg.trim_end().ends_with("</svg>"), "{name}");
        }
    }

    #[test]
    fn html_is_one_self_contained_page() {
        let report = prepare(&fixture(), "exe").unwrap();
        let html = html(&report).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        // Nothing is fetched: no external URL other than the SVG namespace.
        for needle in ["src=\"http", "href=\"http", "url(http", "@import", "<link"] {
            assert!(!html.contains(needle), "{needle}");
        }
        // The plots, the timeline's axis (kept in view while the rows scroll) and its rows: those
        // before the five `/bin/true`, their folded row, and the row of each of them inside.
        assert_eq!(html.matches("<svg").count(), report.plots.len() + 1 + 3);
        assert!(html.contains(r#"<div class="axis"><svg"#));
        // The command of every top process, whole: the root's ends, past 80 characters, with
        // `for i in $(seq 5); do /bin/true; done`.
        let root = html
            .lines()
            .find(|l| l.contains("<td class=\"cmd\">sh -c for i in 1 2 3"))
            .expect("the root shell in the top processes");
        assert!(root.contains("for i in $(seq 5); do "), "{root}");
        assert!(html.contains("<title>"));
        // Every process of the fixture has its bar (one row each: it is small), but the five
        // `/bin/true` of the shell loop are one row that opens to show them.
        let rows = &report.timeline.rows;
        assert_eq!(rows.len(), report.data.processes.len() - 4);
        let folded: Vec<&super::super::timeline::Row> = rows.iter().filter(|r| r.folded).collect();
        assert_eq!(folded.len(), 1);
        assert_eq!(folded[0].members.len(), 5);
        assert!(folded[0]
            .members
            .iter()
            .all(|&m| report.data.processes[m].command_line() == "/bin/true"));
        let fold = &html[html.find(r#"<details class="fold"><summary>"#).unwrap()..];
        let fold = &fold[..fold.find("</details>").unwrap()];
        let (summary, inside) = fold.split_at(fold.find("</summary>").unwrap());
        assert!(summary.contains("5 × /bin/true</text>"), "{summary}");
        assert!(summary.contains(r#"<tspan class="fold-closed">"#));
        for &m in &folded[0].members {
            let label = format!(">true {}</text>", report.data.processes[m].pid);
            assert!(inside.contains(&label), "{label}");
            assert!(
                !html.replacen(fold, "", 1).contains(&label),
                "{label} only inside"
            );
        }
        // The Markdown's SVG file has the row closed, with its count.
        let svg = &report.timeline_svg;
        assert!(svg.contains(">5 × /bin/true</text>"));
        assert!(!svg.contains("fold-closed"));
        assert!(!svg.contains(&format!(
            ">true {}</text>",
            report.data.processes[folded[0].members[0]].pid
        )));
    }

    #[test]
    fn a_killed_run_without_run_json_still_reports() {
        let mut data = crate::analysis::report::load::load(&fixture()).unwrap();
        data.info = None;
        data.notes.push("run.json is missing".into());
        let report = prepare_data(data, crate::analysis::report::model::GroupBy::Comm);
        let items = header(&report);
        let labels: Vec<&str> = items.iter().map(|i| i.label.as_str()).collect();
        assert_eq!(
            labels,
            [
                "Duration",
                "Exit status",
                "Processes",
                "CPU",
                "Memory peak",
                "Samples"
            ]
        );
        // Without run.json: the exact peak of the largest process, and the sampled one.
        let peak = &items[4].value;
        assert!(
            peak.starts_with("largest process 39.8 MiB (exact: sh -c x="),
            "{peak}"
        );
        assert!(
            peak.contains("whole tree sampled 84.6 MiB RSS at +"),
            "{peak}"
        );
        let html = html(&report).unwrap();
        assert!(html.contains("run.json is missing"));
    }
}
