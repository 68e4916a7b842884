//! The end of a followed tree: the run cgroup's totals, run.json (`RunInfo`), summary.json, the
//! report and the printed summary, shared by `run` and `attach`. Every file goes through
//! `userfs` (the invoking user's identity), and a failure to write one is said, never returned:
//! by now the command has run, and its status is montrace's exit status.
use std::{path::Path, time::Duration};

use crate::{
    follow::launch::Identity,
    follow::limits,
    follow::recorder::{Finished, Recorder},
    host,
    kernel::ebpf::TrackingMode,
    sampling::cgroup::RunCgroup,
    sampling::gpu::{GpuMode, GpuMonitor, GpuStatus},
    store::run_json::{self, RunInfo},
    store::summary_json,
    store::userfs,
    store::Durability,
};

use super::{Options, Outcome};

/// Starts GPU monitoring as `--gpu` asks, and says why there is none (`--gpu auto`). Fails with
/// `--gpu require` and no GPU, or a `--limit gpu-mem` that no GPU can enforce.
pub fn open_gpu(record: &Options) -> anyhow::Result<GpuStatus> {
    let gpu = GpuMonitor::open(record.gpu)?;
    if let Some(error) = gpu
        .tree_memory_unavailable_reason()
        .and_then(|reason| limits::needs_gpu(&record.limits, &reason))
    {
        anyhow::bail!(error);
    }
    say_gpu_notice(&gpu, record.quiet);
    Ok(gpu)
}

/// Says why GPU data is missing or unattributed, once GPU monitoring is opened (see
/// [`GpuStatus::notice`]), unless `--quiet`.
fn say_gpu_notice(gpu: &GpuStatus, quiet: bool) {
    if let (Some(notice), false) = (gpu.notice(), quiet) {
        crate::say!("{notice}");
    }
}

/// GPU monitoring opened on a thread of its own beside the start-up: `--gpu auto` with no
/// `--limit gpu-mem`. Starting NVML took 15 ms on an H100 (driver 580: a standalone run's
/// `startup_ms` 35 ms with `--gpu off`, 51 ms with `auto`; a user's run through the agent 1.7 ms
/// and 17.5 ms), ten times the agent's whole start-up. Where kernel events follow the tree (the
/// programs, or the agent), they wait in their ring meanwhile. The thread says when NVML has
/// opened ([`GpuOpened`]): the follow loop then sweeps at once, and the recorder takes the
/// monitor ([`GpuOpening::ready`]) and reads the GPUs while the command runs; a monitor that
/// opened too late for a sweep is read once at the run's end. Neither the command nor the
/// follow loop waits for NVML. A tree that is done before NVML opened is not held for it
/// either: its run.json says the GPU was not monitored and why (waiting cost a user's
/// `/bin/true` through the agent 20.7 ms of wall on an H200, driver 580: 30.4 ms with `auto`,
/// 9.7 ms with `off`), and montrace exits without waiting for the thread
/// ([`nvml_left_opening`]). Polling sees only what lives at a sweep, so there it is taken
/// before. `--gpu require` and a gpu-mem limit open it first: they refuse the run when no GPU
/// can be monitored. On a machine that shows no NVIDIA driver (`gpu::driver_absent`), `auto`
/// opens nothing, and starts no thread.
pub struct GpuOpening {
    /// Opened; None while the thread runs.
    status: Option<GpuStatus>,
    thread: Option<std::thread::JoinHandle<GpuStatus>>,
    opened: std::sync::Arc<GpuOpened>,
    quiet: bool,
}

/// What the opening thread sets, and notifies, as NVML's opening ends (just before the thread
/// returns its status).
#[derive(Default)]
pub struct GpuOpened {
    done: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

impl GpuOpened {
    /// Returns once NVML's opening has ended (at once if it has).
    pub async fn wait(&self) {
        self.notify.notified().await;
    }
}

/// Set when montrace is done while NVML is still opening on its thread: `main` then ends the
/// process with `_exit`, so that no exit handler or library destructor (the driver library's)
/// runs beside a thread that is inside that library.
static NVML_LEFT_OPENING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Whether a [`GpuOpening`] was dropped with NVML still opening on its thread (see
/// [`NVML_LEFT_OPENING`]).
pub fn nvml_left_opening() -> bool {
    NVML_LEFT_OPENING.load(std::sync::atomic::Ordering::SeqCst)
}

/// Why run.json has no GPU figures when the tree was done before NVML opened.
pub const NVML_STILL_OPENING: &str = "the run ended before NVML had opened (it opens beside the \
     run and takes tens of milliseconds on some machines): no GPU was sampled";

impl GpuOpening {
    /// Opens GPU monitoring as `--gpu` asks: on a thread where nothing can refuse the run,
    /// otherwise here (see [`open_gpu`]).
    pub fn start(record: &Options) -> anyhow::Result<GpuOpening> {
        let refusable = record.gpu != GpuMode::Auto || limits::gpu_limit(&record.limits).is_some();
        let opened = std::sync::Arc::new(GpuOpened::default());
        let absent = match refusable {
            true => None,
            false => crate::sampling::gpu::driver_absent(),
        };
        if let Some(reason) = absent {
            // No driver to open: no thread either.
            return Ok(GpuOpening {
                status: Some(GpuStatus::Unavailable { reason }),
                thread: None,
                opened,
                quiet: record.quiet,
            });
        }
        if !refusable {
            let mode = record.gpu;
            let told = std::sync::Arc::clone(&opened);
            // Without capabilities before NVML starts, so no thread the driver starts from
            // there holds one (NVML needs none).
            let opening =
                crate::kernel::privilege::spawn_without_capabilities("gpu-open", move || {
                    // `auto` never fails: no GPU is a status.
                    let status =
                        GpuMonitor::open(mode).unwrap_or_else(|err| GpuStatus::Unavailable {
                            reason: err.reason().to_owned(),
                        });
                    told.done.store(true, std::sync::atomic::Ordering::Release);
                    told.notify.notify_one();
                    status
                });
            if let Ok(thread) = opening {
                return Ok(GpuOpening {
                    status: None,
                    thread: Some(thread),
                    opened,
                    quiet: record.quiet,
                });
            }
        }
        Ok(GpuOpening {
            status: Some(open_gpu(record)?),
            thread: None,
            opened,
            quiet: record.quiet,
        })
    }

    /// What tells that NVML's opening has ended, while it goes on; None once it is over.
    pub fn opened(&self) -> Option<std::sync::Arc<GpuOpened>> {
        self.thread
            .is_some()
            .then(|| std::sync::Arc::clone(&self.opened))
    }

    /// The status, waiting for the opening thread the first time (and saying its notice then,
    /// as [`open_gpu`] does when it opens).
    pub fn status(&mut self) -> &mut GpuStatus {
        if let Some(thread) = self.thread.take() {
            let status = thread.join().unwrap_or_else(|_| GpuStatus::Unavailable {
                reason: "opening NVML failed (its thread panicked)".into(),
            });
            say_gpu_notice(&status, self.quiet);
            self.status = Some(status);
        }
        self.status.get_or_insert(GpuStatus::Off)
    }

    /// The GPU monitor, if a GPU is monitored, reset: a repetition starts from nothing (its
    /// peaks and energy are its own). Waits for the opening thread, as [`GpuOpening::status`].
    pub fn fresh_monitor(&mut self) -> Option<&mut GpuMonitor> {
        let monitor = self.status().monitor_mut()?;
        monitor.reset();
        Some(monitor)
    }

    /// The status once NVML has opened (or failed to), without waiting for NVML: None while it
    /// is still opening. (Once the thread said so, joining it waits only for its return.)
    pub fn ready(&mut self) -> Option<&mut GpuStatus> {
        let opening = !self.opened.done.load(std::sync::atomic::Ordering::Acquire);
        if opening && self.thread.as_ref().is_some_and(|t| !t.is_finished()) {
            return None;
        }
        Some(self.status())
    }
}

impl Drop for GpuOpening {
    /// A thread that has finished is joined; one still inside NVML is left to run, and `main`
    /// ends the process without exit handlers ([`nvml_left_opening`]).
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            if thread.is_finished() {
                let _ = thread.join();
            } else {
                NVML_LEFT_OPENING.store(true, std::sync::atomic::Ordering::SeqCst);
            }
        }
    }
}

/// Starts the OTLP export `--otlp` asks for, into `recorder`: a collector that cannot be reached
/// is a warning, never a failed run. One of the steps `run` and `attach` share.
pub fn start_otlp(recorder: &mut Recorder<'_>, record: &Options, run_id: &str) {
    let Some(url) = &record.otlp else {
        return;
    };
    match crate::fleet::otlp::Exporter::start(url) {
        Ok(exporter) => recorder.set_otlp(
            exporter,
            crate::fleet::otlp::RunAttributes {
                host: host::uname().0,
                run_id: run_id.to_string(),
                labels: record.labels.clone(),
            },
        ),
        Err(err) => crate::say!("montrace: warning: no OTLP export: {err}"),
    }
}

/// A recording closed once its tree was followed: when it ended, what the kernel lost and how
/// it tracked, and the recorder's figures.
pub struct Closed {
    pub ended_boot_ns: u64,
    pub ended_wall_ns: i64,
    pub lost: crate::kernel::ebpf::LostEvents,
    pub tracking_mode: TrackingMode,
    pub ebpf_load_ms: Option<f64>,
    pub finished: Finished,
    /// Whether the tables were synced, and run.json will be (see [`Durability::of_run`]).
    pub durability: Durability,
}

/// Closes a recording whose tree was followed: the end times first, then git's status (beside
/// the closing of the tables, never beside the command), the programs' figures, the tables
/// (synced when the recording, from `started_boot_ns`, lasted `flush_interval` or longer).
pub fn close(
    recorder: Recorder<'_>,
    probes: Option<crate::kernel::ebpf::Probes>,
    capture: &mut crate::fleet::context::Capture,
    (started_boot_ns, flush_interval): (u64, Duration),
) -> Closed {
    let (ended_boot_ns, ended_wall_ns) = (host::boottime_ns(), host::realtime_ns());
    let recorded = Duration::from_nanos(ended_boot_ns.saturating_sub(started_boot_ns));
    let durability = Durability::of_run(recorded, flush_interval);
    capture.command_ended();
    let (lost, tracking_mode, ebpf_load_ms) = probe_figures(probes);
    Closed {
        ended_boot_ns,
        ended_wall_ns,
        lost,
        tracking_mode,
        ebpf_load_ms,
        finished: recorder.finish(durability),
        durability,
    }
}

/// Says a recording's end: the stream's `end` line (and the stream closed after the `last`
/// one), run.json, the report and the printed summary.
pub fn publish(
    info: &RunInfo,
    stream: Option<&mut crate::follow::stream::Stream>,
    last: bool,
    (out_dir, durability): (&Path, Durability),
    (print_summary, report): (bool, bool),
) {
    if let Some(stream) = stream {
        stream.send(&stream_end(info, last, stream.dropped()));
        if last {
            stream.finish();
        }
    }
    write_run_info(info, (out_dir, durability), print_summary, report);
}

/// Writes summary.json (with the user's identity, see `userfs`; synced or not: `durability`). A
/// failure is said, not returned: the command has run, and its status stays montrace's exit
/// status.
pub fn write_summary(
    (out_dir, durability): (&Path, Durability),
    argv: Vec<String>,
    warmup: usize,
    repetitions: Vec<summary_json::Repetition>,
    breach: Option<summary_json::LimitBreach>,
    warnings: Vec<String>,
    (labels, context): (
        std::collections::BTreeMap<String, String>,
        Option<crate::fleet::context::Context>,
    ),
) -> summary_json::Summary {
    let mut summary = summary_json::Summary::new(
        shell_words(&argv),
        argv,
        host::uname().0,
        warmup,
        repetitions,
        breach,
    );
    summary.warnings = warnings;
    summary.labels = labels;
    summary.context = context;
    let path = out_dir.join(summary_json::SUMMARY_FILE);
    let written = serde_json::to_string_pretty(&summary)
        .map_err(std::io::Error::other)
        .and_then(|json| userfs::write_atomic_with(&path, (json + "\n").as_bytes(), durability));
    if let Err(err) = written {
        crate::say!("montrace: error: cannot write {}: {err}", path.display());
    }
    summary
}

/// The lost-event counters, the tracking mode and the load time of the programs (polling: no
/// programs), then detaches them.
pub fn probe_figures(
    probes: Option<crate::kernel::ebpf::Probes>,
) -> (crate::kernel::ebpf::LostEvents, TrackingMode, Option<f64>) {
    let lost = match probes
        .as_ref()
        .map(crate::kernel::ebpf::Probes::lost)
        .transpose()
    {
        Ok(lost) => lost.unwrap_or_default(),
        Err(err) => {
            crate::say!("montrace: warning: cannot read the lost-event counters: {err:#}");
            Default::default()
        }
    };
    let mode = probes.as_ref().map_or(TrackingMode::Polling, |p| p.mode);
    let load_ms = probes.as_ref().map(|p| p.load_ms);
    (lost, mode, load_ms)
}

/// The command's exit code or signal from its wait status, and what montrace exits with: 124
/// after a `--limit` breach, else the code, or 128 + the signal as shells do.
pub fn exit_of(outcome: &Outcome) -> (Option<i32>, Option<i32>, i32) {
    let status = outcome.wait_status;
    let (code, signal) = if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (Some(libc::WEXITSTATUS(status)), None)
    };
    let exit_status = if outcome.breach.is_some() {
        crate::exit_code::EXIT_LIMIT_BREACHED
    } else {
        code.unwrap_or_else(|| 128 + signal.unwrap_or(0))
    };
    (code, signal, exit_status)
}

/// Reads the run cgroup's totals (and the per-process coverage of its CPU), then removes it.
pub fn close_cgroup(
    cgroup: Option<RunCgroup>,
    report: &mut run_json::CgroupReport,
    tree_cpu_ns: u64,
) {
    let Some(cgroup) = cgroup else { return };
    report.version = Some(cgroup.version());
    report.path = Some(cgroup.path());
    match cgroup.totals() {
        Ok(totals) => {
            report.cpu_coverage = totals
                .cpu_usage_ns
                .filter(|&ns| ns > 0)
                .map(|ns| tree_cpu_ns as f64 / ns as f64);
            report.totals = Some(totals);
        }
        Err(err) => report.error = Some(err.to_string()),
    }
    match cgroup.remove() {
        Ok(()) => report.removed = true,
        Err(err) => report.error = Some(err.to_string()),
    }
}

/// What `run` and `attach` know when the tree is done.
pub struct Ended<'a> {
    pub argv: Vec<String>,
    pub executable: String,
    /// When montrace started: boot-clock and wall-clock ns.
    pub started_boot_ns: u64,
    pub started_wall_ns: i64,
    /// When the tree was done.
    pub ended_boot_ns: u64,
    pub ended_wall_ns: i64,
    pub gpu: crate::sampling::gpu::GpuSummary,
    pub tracking_mode: TrackingMode,
    pub lost: crate::kernel::ebpf::LostEvents,
    pub ebpf_load_ms: Option<f64>,
    pub identity: Option<&'a Identity>,
    /// The command's exit code, or the signal that killed it.
    pub exit_code: Option<i32>,
    pub exit_signal: Option<i32>,
    /// What montrace exits with.
    pub exit_status: i32,
    pub outcome: Outcome,
    pub finished: crate::follow::recorder::Finished,
    pub cgroup: run_json::CgroupReport,
    pub interval: Duration,
    pub out_dir: &'a Path,
    pub run_id: String,
    pub labels: std::collections::BTreeMap<String, String>,
    pub context: Option<crate::fleet::context::Context>,
}

/// The spans as the command's wall time counts them: a process that started before it starts
/// at its start, `from_wall_ns`. For a run that is the command's exec (the held child was forked
/// before the programs were loaded, and its wait is not the command's), for an attached tree
/// the attach.
fn clip_to_run(
    spans: &[crate::analysis::critical::Span],
    from_wall_ns: i64,
) -> Vec<crate::analysis::critical::Span> {
    spans
        .iter()
        .map(|s| crate::analysis::critical::Span {
            start_ns: s.start_ns.max(from_wall_ns),
            parent: s.parent.map(|(pid, start)| (pid, start.max(from_wall_ns))),
            end_ns: s.end_ns.map(|end| end.max(from_wall_ns)),
            ..s.clone()
        })
        .collect()
}

pub fn build_run_info(e: Ended<'_>) -> RunInfo {
    let (host_name, kernel) = host::uname();
    let (start_time, end_time, duration_s) = RunInfo::new_times(e.started_wall_ns, e.ended_wall_ns);
    let finished = e.finished;
    let command_wall_ns = finished
        .exec_time_boot_ns
        .map(|t| e.ended_boot_ns.saturating_sub(t));
    // Polling misses processes shorter than a sweep and sees ends a sweep late: a critical path
    // or a parallelism from it would be invented (a path longer than the wall time, "100 %
    // serial" while four workers ran), so a polled run has none. An attached tree's processes
    // count from the attach: their lives before it are not the run's.
    let time = (e.tracking_mode != TrackingMode::Polling).then(|| {
        let from_wall_ns = finished.exec_time_wall_ns.unwrap_or(e.started_wall_ns);
        let spans = clip_to_run(&finished.spans, from_wall_ns);
        crate::analysis::critical::analyse(
            &spans,
            command_wall_ns.unwrap_or(e.ended_boot_ns.saturating_sub(e.started_boot_ns)),
            finished.load.serial_share(e.ended_wall_ns),
        )
    });
    RunInfo {
        schema_version: run_json::RUN_JSON_VERSION,
        montrace_version: env!("CARGO_PKG_VERSION").to_string(),
        run_id: e.run_id,
        labels: e.labels,
        context: e.context,
        command: shell_words(&e.argv),
        argv: e.argv,
        executable: e.executable,
        start_time,
        end_time,
        duration_s,
        command_wall_s: command_wall_ns.map(|ns| ns as f64 / 1e9),
        host: host_name,
        kernel,
        tracking_mode: e.tracking_mode,
        features: crate::kernel::features::of_run(e.tracking_mode, &e.cgroup),
        samples_from: Some(finished.samples_from.to_owned()),
        exit_code: e.exit_code,
        exit_signal: e.exit_signal,
        exit_status: e.exit_status,
        lost_events: e.lost,
        vanished_processes: finished.vanished,
        processes_started: finished.started,
        max_concurrent: finished.max_concurrent,
        totals: finished.totals,
        tree_memory_peaks: finished.memory_peaks,
        samples: finished.sample_rows,
        sample_interval_ms: e.interval.as_secs_f64() * 1e3,
        cgroup: e.cgroup,
        gpu: e.gpu,
        startup_ms: finished
            .exec_time_boot_ns
            .map(|t| t.saturating_sub(e.started_boot_ns) as f64 / 1e6),
        ebpf_load_ms: e.ebpf_load_ms,
        // The command's identity: the sudo user's, else montrace's own.
        // SAFETY: getuid/getgid have no preconditions.
        uid: e
            .identity
            .map_or_else(|| unsafe { libc::getuid() }, |id| id.uid),
        gid: e
            .identity
            .map_or_else(|| unsafe { libc::getgid() }, |id| id.gid),
        linger_expired: e.outcome.linger_expired,
        signals_forwarded: e.outcome.signals_forwarded,
        limit_breach: e.outcome.breach,
        out_dir: e.out_dir.display().to_string(),
        recording_error: finished.recording_error,
        capacity: Some(finished.capacity),
        time,
        marks_dropped: e.outcome.marks_dropped,
    }
}

/// Writes run.json (synced or not: `durability`) and the report (with the user's identity, see
/// `userfs`), prints the summary. Failures are said, not returned: the command has run, and its
/// status stays montrace's exit status.
pub fn write_run_info(
    info: &RunInfo,
    (out_dir, durability): (&Path, Durability),
    print_summary: bool,
    report: bool,
) {
    let written = run_json::write_with(out_dir, info, durability);
    if let Err(err) = &written {
        crate::say!(
            "montrace: error: cannot write {}: {err}",
            run_json::path_in(out_dir).display()
        );
    }
    if report && written.is_ok() && info.recording_error.is_none() {
        // The data is on disk already: a report that fails is a warning, not a failed run.
        if let Err(err) = crate::analysis::report::write_default_report(out_dir) {
            crate::say!(
                "montrace: warning: no report for {}: {}",
                out_dir.display(),
                crate::term::error_line(&err)
            );
        }
    }
    if print_summary {
        crate::say_raw!("{}", crate::follow::summary::format_summary(info));
    }
}

/// Joins argv for display, quoting words a shell would split.
pub fn shell_words(argv: &[String]) -> String {
    argv.iter()
        .map(|a| {
            if !a.is_empty()
                && a.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_./=:,+@%".contains(c))
            {
                a.clone()
            } else {
                format!("'{}'", a.replace('\'', r"'\''"))
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last `--stream` line of a recording (`final` for the last of a series), with the lines
/// dropped so far because the reader did not keep up.
pub fn stream_end(info: &RunInfo, last: bool, dropped_lines: u64) -> crate::follow::stream::Line {
    crate::follow::stream::Line::End {
        time: info.end_time.clone(),
        exit_status: info.exit_status,
        wall_s: info.command_wall_s.unwrap_or(info.duration_s),
        processes_started: info.processes_started,
        cpu_s: (info.totals.cpu_user_ns + info.totals.cpu_system_ns) as f64 / 1e9,
        peak_rss_bytes: info.totals.peak_rss_bytes,
        dropped_lines,
        is_final: last,
    }
}
