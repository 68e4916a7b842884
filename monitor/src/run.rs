//! `montrace run`: the orchestration. Checks everything that can fail before the command starts,
//! then loads the probes, starts the command held at a barrier, tracks it, and follows the tree
//! until the command and every descendant are gone; finally writes the run directory.
use std::{
    collections::HashSet,
    ffi::OsString,
    os::fd::OwnedFd,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context as _};
use aya::maps::{MapData, RingBuf};
use tokio::io::{unix::AsyncFd, Interest};

use crate::{
    btf,
    cgroup::RunCgroup,
    cli::{RecordOptions, RunArgs, EXIT_NOT_FOUND},
    ebpf::{Probes, TrackingMode},
    gpu::{GpuMonitor, GpuStatus},
    host,
    launch::{self, Identity},
    limits,
    live::LiveLine,
    marks::{self, MarkServer},
    metrics,
    polling::{self, Poller},
    recorder::Recorder,
    summary::{self, RunInfo},
    tracker::{Clock, Tracker},
    units, userfs,
};

/// What the event loop learnt.
pub(crate) struct Outcome {
    pub wait_status: i32,
    /// The wait ended (--linger, attach's --duration or Ctrl-C) with processes still running.
    pub linger_expired: bool,
    pub signals_forwarded: Vec<i32>,
    pub breach: Option<metrics::LimitBreach>,
    /// attach: the signal that ended the monitoring.
    pub stopped_by_signal: Option<i32>,
}

/// Starts GPU monitoring as `--gpu` asks, and says why there is none (`--gpu auto`). Fails with
/// `--gpu require` and no GPU, or a `--limit gpu-mem` that no GPU can enforce.
pub fn open_gpu(record: &RecordOptions) -> anyhow::Result<GpuStatus> {
    let gpu = GpuMonitor::open(record.gpu)?;
    if let Some(error) = gpu
        .unavailable_reason()
        .and_then(|reason| limits::needs_gpu(&record.limits, &reason))
    {
        bail!(error);
    }
    if let (Some(notice), false) = (gpu.notice(), record.quiet) {
        crate::say!("{notice}");
    }
    Ok(gpu)
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let started_boot_ns = host::boottime_ns();
    let started_wall_ns = host::realtime_ns();
    let program = args.command[0].clone();
    let Some(executable) = launch::resolve_command(&program, std::env::var_os("PATH").as_deref())
    else {
        crate::say!("montrace: {}: command not found", program.to_string_lossy());
        return Ok(EXIT_NOT_FOUND);
    };

    // Room for the sampler's open /proc handles; the command gets the limit back.
    host::raise_open_files_limit();
    let offsets = ebpf_offsets(&args, &program)?;
    // Before any thread exists (NVML may start some), so every thread has the forwarded
    // signals blocked and montrace receives them through a signalfd; the command gets the
    // original mask back before it execs.
    let child_sigmask = launch::block_forwarded_signals().context("blocking signals")?;
    // `--gpu require` fails here, before anything is created or started.
    let mut gpu = open_gpu(&args.record)?;
    // Only root can become another user; without root the command keeps montrace's identity.
    // SAFETY: geteuid has no preconditions.
    let identity = if args.as_root || unsafe { libc::geteuid() } != 0 {
        None
    } else {
        launch::sudo_identity()?
    };

    let out_dir = match create_out_dir(args.record.out.as_deref(), &program, started_wall_ns) {
        Ok(dir) => dir,
        Err(err @ OutDirError::NotEmpty(_)) => {
            crate::say!("montrace: error: {err}");
            return Ok(crate::cli::EXIT_USAGE);
        }
        Err(OutDirError::Other(err)) => return Err(err),
    };
    let offsets = offsets.as_ref();
    let result = if args.repeat == 1 && args.warmup == 0 {
        record(
            &args,
            &executable,
            offsets,
            &out_dir,
            identity.as_ref(),
            &child_sigmask,
            &mut gpu,
            (started_boot_ns, started_wall_ns),
            !args.record.quiet,
        )
        .map(|info| {
            let breach = info.limit_breach.clone();
            // The command's status is montrace's last word, summary.json or not.
            write_summary(
                &out_dir,
                command_argv(&args),
                0,
                vec![info.repetition(".")],
                breach,
            );
            info.exit_status
        })
    } else {
        repeat(
            &args,
            &executable,
            offsets,
            &out_dir,
            identity.as_ref(),
            &child_sigmask,
            &mut gpu,
        )
    };
    if result.is_err() && dir_is_empty(&out_dir) {
        // Nothing was recorded: leave no litter behind.
        let _ = userfs::remove_dir(&out_dir);
    }
    result
}

/// `--repeat N --warmup K`: K warm-up runs, then N measured ones, each in its own sub-directory;
/// summary.json at the top holds every measured repetition. A repetition that fails (non-zero
/// exit, or a limit) ends the series: its figures would not be comparable.
fn repeat(
    args: &RunArgs,
    executable: &Path,
    offsets: Option<&monitor_common::Offsets>,
    out_dir: &Path,
    identity: Option<&Identity>,
    child_sigmask: &libc::sigset_t,
    gpu: &mut GpuStatus,
) -> anyhow::Result<i32> {
    let mut repetitions = Vec::new();
    let total = args.warmup + args.repeat;
    for i in 0..total {
        let warmup = i < args.warmup;
        let name = if warmup {
            format!("warmup-{:02}", i + 1)
        } else {
            format!("rep-{:03}", i - args.warmup + 1)
        };
        let dir = out_dir.join(&name);
        userfs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let info = record(
            args,
            executable,
            offsets,
            &dir,
            identity,
            child_sigmask,
            gpu,
            (host::boottime_ns(), host::realtime_ns()),
            false,
        )?;
        if !args.record.quiet {
            crate::say!(
                "montrace: {name}: exit {}, wall {:.3}s, CPU {:.3}s, peak RSS {}",
                info.exit_status,
                info.duration_s,
                (info.totals.cpu_user_ns + info.totals.cpu_system_ns) as f64 / 1e9,
                info.totals
                    .peak_rss_bytes
                    .map_or("n/a".into(), units::format_bytes),
            );
        }
        let failed = info.exit_status != 0 || info.limit_breach.is_some();
        if !warmup {
            repetitions.push(info.repetition(&name));
        }
        if failed {
            crate::say!(
                "montrace: {name} failed (exit {}): no further repetitions",
                info.exit_status
            );
            let breach = info.limit_breach.clone();
            write_summary(
                out_dir,
                command_argv(args),
                args.warmup as usize,
                repetitions,
                breach,
            );
            return Ok(info.exit_status);
        }
    }
    let summary = write_summary(
        out_dir,
        command_argv(args),
        args.warmup as usize,
        repetitions,
        None,
    );
    if !args.record.quiet {
        crate::say_raw!(
            "{}",
            summary::format_repeat_stats(&summary, &out_dir.display().to_string())
        );
    }
    Ok(summary.exit_status)
}

/// Writes summary.json (with the user's identity, see `userfs`). A failure is said, not
/// returned: the command has run, and its status stays montrace's exit status.
pub(crate) fn write_summary(
    out_dir: &Path,
    argv: Vec<String>,
    warmup: usize,
    repetitions: Vec<metrics::Repetition>,
    breach: Option<metrics::LimitBreach>,
) -> metrics::Summary {
    let summary = metrics::Summary::new(
        shell_words(&argv),
        argv,
        host::uname().0,
        warmup,
        repetitions,
        breach,
    );
    let path = out_dir.join(metrics::SUMMARY_FILE);
    let written = serde_json::to_string_pretty(&summary)
        .map_err(std::io::Error::other)
        .and_then(|json| userfs::write_atomic(&path, (json + "\n").as_bytes()));
    if let Err(err) = written {
        crate::say!("montrace: error: cannot write {}: {err}", path.display());
    }
    summary
}

#[allow(clippy::too_many_arguments)]
/// The kernel field offsets the eBPF programs need, or None when montrace must poll /proc
/// instead (not root, no BTF), which `--require-ebpf` turns into an error.
fn ebpf_offsets(
    args: &RunArgs,
    program: &OsString,
) -> anyhow::Result<Option<monitor_common::Offsets>> {
    let why_not = if !host::can_load_ebpf() {
        format!(
            "montrace needs root to load its eBPF programs (CAP_BPF and CAP_PERFMON): run it with sudo, \
             e.g. `sudo montrace run -- {}`",
            program.to_string_lossy()
        )
    } else {
        match btf::Btf::from_file(Path::new(btf::VMLINUX_BTF)).and_then(|b| btf::kernel_offsets(&b))
        {
            Ok(offsets) => return Ok(Some(offsets)),
            Err(err) => format!("{err}"),
        }
    };
    if args.require_ebpf {
        bail!("{why_not} (--require-ebpf is set, so montrace does not fall back to polling /proc)");
    }
    crate::say!("montrace: warning: no eBPF ({why_not}).");
    crate::say!(
        "montrace: warning: following the tree by polling /proc every {:?} instead: processes that \
         live shorter than that may be missed (tracking_mode \"polling\" in run.json)",
        args.record.interval
    );
    Ok(None)
}

#[allow(clippy::too_many_arguments)]
fn record(
    args: &RunArgs,
    executable: &Path,
    offsets: Option<&monitor_common::Offsets>,
    out_dir: &Path,
    identity: Option<&Identity>,
    child_sigmask: &libc::sigset_t,
    gpu: &mut GpuStatus,
    (started_boot_ns, started_wall_ns): (u64, i64),
    print_summary: bool,
) -> anyhow::Result<RunInfo> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the event loop")?;

    let loaded = match offsets {
        Some(offsets) => match Probes::load(
            offsets,
            args.record.ring_buffer_size,
            args.record.tracepoints,
        ) {
            Ok(loaded) => Some(loaded),
            Err(err) if !args.require_ebpf => {
                crate::say!(
                    "montrace: warning: {err:#}; following the tree by polling /proc instead"
                );
                None
            }
            Err(err) => return Err(err),
        },
        None => None,
    };
    let (mut probes, ring) = match loaded {
        Some((probes, ring)) => (Some(probes), Some(ring)),
        None => {
            polling::become_subreaper()
                .context("becoming the subreaper of the command's orphans")?;
            (None, None)
        }
    };
    let clock = Clock {
        boot_to_wall_ns: host::boot_to_wall_ns(),
    };
    let mut cgroup_report = summary::CgroupReport::default();
    let cgroup = match RunCgroup::create(&format!("run-{}-{started_wall_ns}", std::process::id())) {
        Ok(cgroup) => Some(cgroup),
        Err(err) => {
            crate::say!(
                "montrace: no cgroup for the run, so no kernel totals to compare with: {err}"
            );
            cgroup_report.error = Some(err.to_string());
            None
        }
    };

    // Phase marks: the command finds the socket in its environment.
    let marks = match MarkServer::bind(identity.map(|id| (id.uid, id.gid))) {
        Ok(server) => Some(server),
        Err(err) => {
            crate::say!("montrace: warning: no phase marks for this run: {err:#}");
            None
        }
    };
    let extra_env: Vec<(OsString, OsString)> = marks
        .iter()
        .map(|m| (marks::SOCKET_ENV.into(), m.path().as_os_str().to_owned()))
        .collect();
    let held = launch::spawn_held(
        executable,
        &args.command,
        &extra_env,
        identity,
        child_sigmask,
    )?;
    let root_pid = held.pid;
    if let Some(probes) = &mut probes {
        probes.track(root_pid)?;
    }
    if let Some(cgroup) = &cgroup {
        // Before exec, so the cgroup's totals include everything the command does.
        if let Err(err) = cgroup.add(root_pid) {
            cgroup_report.error = Some(err.to_string());
        }
    }
    let mut tracker = Tracker::new(clock);
    let approx_start = host::proc_start_boot_ns(root_pid).unwrap_or_else(|_| host::boottime_ns());
    tracker.add_root(root_pid, approx_start, &args.command[0].to_string_lossy());
    // A repetition starts from nothing: its peaks and energy are its own.
    let mut monitor = gpu.monitor_mut();
    if let Some(monitor) = monitor.as_deref_mut() {
        monitor.reset();
    }
    let mut recorder = Recorder::create(
        out_dir,
        tracker,
        root_pid,
        args.record.memory_detail,
        monitor,
    )?;
    if let Err(err) = held.release(executable, identity) {
        // The child exits with 126/127; its exit is still recorded like any other.
        crate::say!("montrace: {err}");
    }

    let signals = launch::signal_fd().context("creating the signal fd")?;
    let source = match ring {
        Some(ring) => Source::Ebpf(ring),
        None => Source::Polling(Poller::new()),
    };
    let cfg = FollowConfig {
        opts: &args.record,
        root_pid,
        root_is_child: true,
        linger: args.linger,
        stop_after: None,
        started_boot_ns,
    };
    let outcome = match runtime.block_on(follow(source, signals, marks, &mut recorder, &cfg)) {
        Ok(outcome) => outcome,
        Err(err) => {
            // The command is still montrace's to supervise: record no more, wait for it.
            recorder.stop_recording(&format!("{err:#}"));
            let wait_status =
                launch::wait_status(root_pid).unwrap_or(crate::cli::EXIT_MONTRACE_FAILED << 8);
            Outcome {
                wait_status,
                linger_expired: false,
                signals_forwarded: Vec::new(),
                breach: None,
                stopped_by_signal: None,
            }
        }
    };
    let end_wall_ns = host::realtime_ns();
    let end_boot_ns = host::boottime_ns();
    let lost = match probes.as_ref().map(Probes::lost).transpose() {
        Ok(lost) => lost.unwrap_or_default(),
        Err(err) => {
            crate::say!("montrace: warning: cannot read the lost-event counters: {err:#}");
            Default::default()
        }
    };
    let tracking_mode = probes.as_ref().map_or(TrackingMode::Polling, |p| p.mode);
    let ebpf_load_ms = probes.as_ref().map(|p| p.load_ms);
    drop(probes);
    let mut finished = recorder.finish();
    let gpu_summary = finished.gpu.take().unwrap_or_else(|| gpu.summary());
    let tree_cpu = finished.totals.cpu_user_ns + finished.totals.cpu_system_ns;
    close_cgroup(cgroup, &mut cgroup_report, tree_cpu);

    let status = outcome.wait_status;
    let (exit_code, exit_signal) = if libc::WIFSIGNALED(status) {
        (None, Some(libc::WTERMSIG(status)))
    } else {
        (Some(libc::WEXITSTATUS(status)), None)
    };
    let exit_status = if outcome.breach.is_some() {
        crate::limits::EXIT_LIMIT_BREACHED
    } else {
        exit_code.unwrap_or_else(|| 128 + exit_signal.unwrap_or(0))
    };
    let info = build_run_info(Ended {
        argv: command_argv(args),
        executable: executable.display().to_string(),
        started: (started_boot_ns, started_wall_ns),
        ended: (end_boot_ns, end_wall_ns),
        gpu: gpu_summary,
        tracking_mode,
        lost,
        ebpf_load_ms,
        identity,
        exit: (exit_code, exit_signal, exit_status),
        outcome,
        finished,
        cgroup: cgroup_report,
        interval: args.record.interval,
        out_dir,
    });
    write_run_info(&info, out_dir, print_summary, !args.record.no_report);
    Ok(info)
}

/// Reads the run cgroup's totals (and the per-process coverage of its CPU), then removes it.
pub(crate) fn close_cgroup(
    cgroup: Option<RunCgroup>,
    report: &mut summary::CgroupReport,
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
pub(crate) struct Ended<'a> {
    pub argv: Vec<String>,
    pub executable: String,
    /// (boot, wall) ns.
    pub started: (u64, i64),
    pub ended: (u64, i64),
    pub gpu: crate::gpu::GpuSummary,
    pub tracking_mode: TrackingMode,
    pub lost: crate::ebpf::LostEvents,
    pub ebpf_load_ms: Option<f64>,
    pub identity: Option<&'a Identity>,
    /// (exit code, signal, montrace's own exit status).
    pub exit: (Option<i32>, Option<i32>, i32),
    pub outcome: Outcome,
    pub finished: crate::recorder::Finished,
    pub cgroup: summary::CgroupReport,
    pub interval: Duration,
    pub out_dir: &'a Path,
}

pub(crate) fn build_run_info(e: Ended<'_>) -> RunInfo {
    let (host_name, kernel) = host::uname();
    let (start_time, end_time, duration_s) = RunInfo::new_times(e.started.1, e.ended.1);
    let finished = e.finished;
    RunInfo {
        schema_version: summary::RUN_JSON_VERSION,
        montrace_version: env!("CARGO_PKG_VERSION").to_string(),
        command: shell_words(&e.argv),
        argv: e.argv,
        executable: e.executable,
        start_time,
        end_time,
        duration_s,
        command_wall_s: finished
            .exec_time_boot_ns
            .map(|t| e.ended.0.saturating_sub(t) as f64 / 1e9),
        host: host_name,
        kernel,
        tracking_mode: e.tracking_mode,
        exit_code: e.exit.0,
        exit_signal: e.exit.1,
        exit_status: e.exit.2,
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
            .map(|t| t.saturating_sub(e.started.0) as f64 / 1e6),
        ebpf_load_ms: e.ebpf_load_ms,
        uid: e.identity.map_or(0, |id| id.uid),
        gid: e.identity.map_or(0, |id| id.gid),
        linger_expired: e.outcome.linger_expired,
        signals_forwarded: e.outcome.signals_forwarded,
        limit_breach: e.outcome.breach,
        out_dir: e.out_dir.display().to_string(),
        recording_error: finished.recording_error,
    }
}

/// Writes run.json and the report (with the user's identity, see `userfs`), prints the summary.
/// Failures are said, not returned: the command has run, and its status stays montrace's exit
/// status.
pub(crate) fn write_run_info(info: &RunInfo, out_dir: &Path, print_summary: bool, report: bool) {
    let run_json = out_dir.join("run.json");
    let written = serde_json::to_string_pretty(info)
        .map_err(std::io::Error::other)
        .and_then(|json| userfs::write_atomic(&run_json, (json + "\n").as_bytes()));
    if let Err(err) = &written {
        crate::say!(
            "montrace: error: cannot write {}: {err}",
            run_json.display()
        );
    }
    if report && written.is_ok() && info.recording_error.is_none() {
        // The data is on disk already: a report that fails is a warning, not a failed run.
        if let Err(err) =
            crate::report::write_report(out_dir, crate::cli::ReportFormat::Both, "exe")
        {
            crate::say!(
                "montrace: warning: no report for {}: {}",
                out_dir.display(),
                crate::term::error_line(&err)
            );
        }
    }
    if print_summary {
        crate::say_raw!("{}", summary::format_summary(info));
    }
}

/// Follows the tree until the command has exited and every tracked process is gone (or the
/// linger time after the command's exit has passed), sampling and flushing on the way.
/// Where lifecycle events come from.
pub(crate) enum Source {
    Ebpf(RingBuf<MapData>),
    Polling(Poller),
}

/// The ring buffer once it has records; never, when polling.
async fn readable(
    ring: Option<&mut AsyncFd<RingBuf<MapData>>>,
) -> std::io::Result<tokio::io::unix::AsyncFdReadyMutGuard<'_, RingBuf<MapData>>> {
    match ring {
        Some(ring) => ring.readable_mut().await,
        None => std::future::pending().await,
    }
}

/// How `follow` runs: `run` follows the command it started; `attach` a process it did not.
pub(crate) struct FollowConfig<'a> {
    pub opts: &'a RecordOptions,
    pub root_pid: u32,
    /// False for `attach`: nothing waits for the root (it is not montrace's child), and a
    /// SIGINT/SIGTERM/SIGHUP to montrace ends the monitoring instead of being forwarded.
    pub root_is_child: bool,
    /// `run --linger`: how long to wait for descendants once the root exited.
    pub linger: Option<Duration>,
    /// `attach --duration`: stop after this long.
    pub stop_after: Option<Duration>,
    pub started_boot_ns: u64,
}

pub(crate) async fn follow(
    source: Source,
    signals: OwnedFd,
    marks: Option<MarkServer>,
    recorder: &mut Recorder<'_>,
    cfg: &FollowConfig<'_>,
) -> anyhow::Result<Outcome> {
    let root_pid = cfg.root_pid;
    let opts = cfg.opts;
    let (mut ring, mut poller) = match source {
        Source::Ebpf(ring) => {
            // SAFETY: the ring buffer owns its map fd and keeps it open and unchanged until the
            // AsyncFd drops it.
            let ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
                .context("watching the ring buffer")?;
            (Some(ring), None)
        }
        Source::Polling(poller) => (None, Some(poller)),
    };
    let mut marks = match marks {
        // SAFETY: the server owns its socket and keeps it open until the AsyncFd drops it.
        Some(server) => Some(
            unsafe { AsyncFd::register_with_interest(server, Interest::READABLE) }
                .map_err(|e| e.into_parts().1)
                .context("watching the mark socket")?,
        ),
        None => None,
    };
    // SAFETY: the signalfd is owned and stays open until the AsyncFd drops it.
    let signals = unsafe { AsyncFd::register_with_interest(signals, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
        .context("watching signals")?;
    // With eBPF a thread waits for the command; polling reaps every child of montrace itself.
    let (status_tx, mut status_rx) = tokio::sync::oneshot::channel();
    if cfg.root_is_child && poller.is_none() {
        std::thread::spawn(move || {
            let _ = status_tx.send(launch::wait_status(root_pid));
        });
    }

    let mut outcome = Outcome {
        wait_status: 0,
        linger_expired: false,
        signals_forwarded: Vec::new(),
        breach: None,
        stopped_by_signal: None,
    };
    // After a limit breach: when the stragglers get SIGKILL.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let wall_limit = opts.limits.iter().find_map(|l| match l {
        limits::Limit::Wall(d) => Some(tokio::time::Instant::now() + *d),
        _ => None,
    });
    let started = std::time::Instant::now()
        - Duration::from_nanos(host::boottime_ns().saturating_sub(cfg.started_boot_ns));
    let mut root_done = !cfg.root_is_child;
    let mut deadline: Option<tokio::time::Instant> =
        cfg.stop_after.map(|d| tokio::time::Instant::now() + d);
    let live = LiveLine::new(opts.quiet);
    let mut live_tick = tokio::time::interval(Duration::from_millis(500));
    live_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sample_tick = tokio::time::interval(opts.interval);
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush_tick = tokio::time::interval(opts.flush_interval);
    flush_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut liveness_tick = tokio::time::interval(Duration::from_millis(500));
    // The eBPF programs wake montrace only once the ring buffer fills up (a quarter of it);
    // below that, events are drained on this timer: one wake-up per 20 ms, not one per event.
    let mut drain_tick = tokio::time::interval(Duration::from_millis(20));
    drain_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Tracked pids missing from /proc at the last liveness check.
    let mut missing_before: HashSet<u32> = HashSet::new();
    liveness_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    /// Takes in every lifecycle event available now. Polling may also find the command
    /// reaped, and returns its wait status then. Recorder calls are guarded: a panic stops
    /// recording, never the supervision of the command.
    fn drain(
        ring: &mut Option<AsyncFd<RingBuf<MapData>>>,
        poller: &mut Option<Poller>,
        recorder: &mut Recorder<'_>,
        root_pid: u32,
    ) -> Option<i32> {
        if let Some(ring) = ring {
            let ring = ring.get_mut();
            while let Some(item) = ring.next() {
                recorder.guarded(|r| r.on_record(&item));
            }
            return None;
        }
        let poller = poller.as_mut()?;
        let now = host::boottime_ns();
        let mut root_status = None;
        // Scan, reap, and scan again after a reap: a process reaped now may have forked a child
        // since the scan, and that child is still in /proc: the second scan finds it before the tree
        // could look empty.
        loop {
            let (events, vanished) = poller.scan(now);
            recorder.guarded(|r| {
                for event in &events {
                    r.on_event(event);
                }
                for gone in vanished {
                    r.tracker
                        .ended_unobserved(gone.pid, now, &gone.figures, gone.exit_code);
                }
            });
            let (exits, status) = poller.reap(root_pid, now);
            recorder.guarded(|r| exits.iter().for_each(|event| r.on_event(event)));
            root_status = root_status.or(status);
            if exits.is_empty() {
                break;
            }
        }
        recorder.guarded(Recorder::store_finished);
        root_status
    }

    // Interrupting signals (SIGINT, SIGTERM, SIGHUP) received so far: the second sends SIGTERM
    // to the whole tree, the third SIGKILL (see `escalation`).
    let mut interrupts = 0u32;
    let mut root_exited_at: Option<tokio::time::Instant> = None;
    let mut said_lingering = false;
    // The command was reaped: from now on only its descendants keep the run going.
    macro_rules! root_exited {
        ($status:expr) => {{
            outcome.wait_status = $status;
            root_done = true;
            root_exited_at = Some(tokio::time::Instant::now());
            deadline = cfg.linger.map(|d| tokio::time::Instant::now() + d);
        }};
    }
    // Takes in the events available now (polling may reap the command on the way).
    macro_rules! take_in {
        () => {
            if let Some(status) = drain(&mut ring, &mut poller, recorder, root_pid) {
                root_exited!(status);
            }
        };
    }

    loop {
        tokio::select! {
            guard = readable(ring.as_mut()) => {
                let mut guard = guard?;
                let ring = guard.get_inner_mut();
                while let Some(item) = ring.next() {
                    recorder.guarded(|r| r.on_record(&item));
                }
                guard.clear_ready();
            }
            guard = signals.readable() => {
                let mut guard = guard?;
                let received = launch::read_signals(guard.get_inner());
                guard.clear_ready();
                if !cfg.root_is_child && !received.is_empty() {
                    // Attached to someone else's processes: Ctrl-C stops watching them.
                    outcome.stopped_by_signal = received.first().map(|r| r.signal);
                    drain(&mut ring, &mut poller, recorder, root_pid);
                    outcome.linger_expired = recorder.tracker.live_count() > 0;
                    break;
                }
                for received in received {
                    interrupts += 1;
                    let pids = recorder.tracker.live_pids();
                    match escalation(interrupts, received) {
                        Some(signal) if signal == received.signal => {
                            // A signal sent to montrace itself (kill, a CI runner's timeout) is
                            // passed on.
                            launch::kill_all(&pids, signal);
                            outcome.signals_forwarded.push(signal);
                        }
                        Some(signal) => {
                            launch::kill_all(&pids, signal);
                            outcome.signals_forwarded.push(signal);
                            crate::say!(
                                "montrace: {} sent to the {} processes of the tree{}",
                                signal_name(signal),
                                pids.len(),
                                if signal == libc::SIGKILL { "" } else { " (once more: SIGKILL)" }
                            );
                        }
                        // A terminal's Ctrl-C already reached the command's process group.
                        None => {}
                    }
                }
            }
            status = &mut status_rx, if !root_done && poller.is_none() => {
                root_exited!(status.context("waiter thread ended")?.context("waiting for the command")?);
            }
            _ = sample_tick.tick() => {
                // Exits first, so a process that just ended is not sampled as gone.
                take_in!();
                recorder.guarded(Recorder::sample);
            }
            _ = sleep_until(if outcome.breach.is_none() { wall_limit } else { None }) => {}
            guard = marks_readable(marks.as_mut()) => {
                let mut guard = guard?;
                let received = guard.get_inner_mut().receive(host::realtime_ns);
                guard.clear_ready();
                // Every sender forked before it sent: with the events drained, the tracker
                // knows each one (or has just seen it end).
                take_in!();
                recorder.guarded(|r| r.on_marks(received));
            }
            _ = drain_tick.tick(), if ring.is_some() => {
                take_in!();
            }
            _ = live_tick.tick(), if live.enabled() => {
                live.show(&recorder.live_status(started.elapsed()));
            }
            _ = sleep_until(kill_at) => {
                launch::kill_all(&recorder.tracker.live_pids(), libc::SIGKILL);
                kill_at = None;
            }
            _ = flush_tick.tick() => {
                take_in!();
                recorder.guarded(Recorder::flush);
            }
            _ = liveness_tick.tick(), if root_done && ring.is_some() => {
                take_in!();
                // An exit event is queued at the process's final context switch, which its parent
                // can beat by microseconds when it reaps it: a tracked pid gone from /proc on two
                // ticks in a row (with drains between) lost its exit event.
                let gone: HashSet<u32> = recorder
                    .tracker
                    .live_pids()
                    .into_iter()
                    .filter(|pid| !Path::new(&format!("/proc/{pid}")).exists())
                    .collect();
                let vanished: Vec<u32> = gone.intersection(&missing_before).copied().collect();
                recorder.guarded(|r| {
                    for pid in vanished {
                        r.tracker.vanished(pid, host::boottime_ns());
                    }
                    r.store_finished();
                });
                missing_before = gone;
            }
            _ = sleep_until(deadline) => {
                // The command is reaped already (the deadline starts then).
                drain(&mut ring, &mut poller, recorder, root_pid);
                outcome.linger_expired = recorder.tracker.live_count() > 0;
                break;
            }
        }
        if outcome.breach.is_none() && !opts.limits.is_empty() && !recorder.is_broken() {
            let usage = recorder.usage(started.elapsed());
            if let Some((limit, value)) = limits::first_breach(&opts.limits, &usage) {
                outcome.breach = Some(metrics::LimitBreach {
                    limit: limit.name().to_string(),
                    threshold: limit.threshold(),
                    value,
                    time: units::rfc3339(host::realtime_ns()),
                    elapsed_s: started.elapsed().as_secs_f64(),
                });
                // Parents first, so none carries on after a child it waits for is killed.
                launch::kill_all(&recorder.tracker.live_pids(), libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + opts.kill_grace);
            }
        }
        // A broken recorder cannot say when the descendants are gone: the command's end is.
        if root_done && (recorder.tracker.live_count() == 0 || recorder.is_broken()) {
            break;
        }
        if let (Some(at), false, false) = (root_exited_at, said_lingering, opts.quiet) {
            if at.elapsed() >= LINGER_NOTICE_AFTER {
                said_lingering = true;
                crate::say!(
                    "{}",
                    lingering_notice(
                        &recorder.tracker.live_names(5),
                        recorder.tracker.live_count(),
                        cfg.linger
                    )
                );
            }
        }
    }
    // Marks sent just before the tree ended.
    let last_marks = marks
        .as_mut()
        .map(|m| m.get_mut().receive(host::realtime_ns));
    if let Some(status) = drain(&mut ring, &mut poller, recorder, root_pid) {
        outcome.wait_status = status;
    }
    recorder.guarded(|r| {
        r.store_finished();
        r.on_marks(last_marks.unwrap_or_default());
    });
    live.clear();
    if let Some(server) = &marks {
        if let Some(first) = server.get_ref().first_invalid() {
            crate::say!(
                "montrace: warning: ignored {} datagrams on the mark socket that were not marks; \
                 the first, from pid {}: {}",
                server.get_ref().invalid(),
                first.pid,
                first.error
            );
        }
    }
    Ok(outcome)
}

/// How long after the command's exit montrace says which descendants it still waits for.
const LINGER_NOTICE_AFTER: Duration = Duration::from_secs(1);

/// What montrace says, once, while it waits for the processes the command left running.
fn lingering_notice(oldest: &[(u32, String)], live: usize, linger: Option<Duration>) -> String {
    let mut names: Vec<String> = oldest
        .iter()
        .map(|(pid, comm)| format!("{comm} ({pid})"))
        .collect();
    if live > oldest.len() {
        names.push(format!("and {} more", live - oldest.len()));
    }
    let until = match linger {
        Some(d) => format!("at most {:?} (--linger)", d),
        None => "until they end (--linger DURATION limits the wait)".into(),
    };
    format!(
        "montrace: the command exited; waiting {until} for {live} processes it left running: {}. \
         Ctrl-C twice sends them SIGTERM, three times SIGKILL",
        names.join(", ")
    )
}

/// What montrace sends to the tree for the `count`-th interrupting signal it received: the
/// first is passed on as it is (unless the terminal already delivered it to the command's
/// process group), the second becomes SIGTERM to every process of the tree, the third and later
/// SIGKILL. (`kill_all` adds SIGCONT to a terminating signal, for stopped processes.)
fn escalation(count: u32, received: launch::Received) -> Option<i32> {
    match count {
        0 | 1 if received.from_terminal => None,
        0 | 1 => Some(received.signal),
        2 => Some(libc::SIGTERM),
        _ => Some(libc::SIGKILL),
    }
}

fn signal_name(signal: i32) -> &'static str {
    match signal {
        libc::SIGTERM => "SIGTERM",
        libc::SIGKILL => "SIGKILL",
        libc::SIGINT => "SIGINT",
        libc::SIGHUP => "SIGHUP",
        _ => "a signal",
    }
}

/// The mark socket once it has datagrams; never, without one.
async fn marks_readable(
    marks: Option<&mut AsyncFd<MarkServer>>,
) -> std::io::Result<tokio::io::unix::AsyncFdReadyMutGuard<'_, MarkServer>> {
    match marks {
        Some(marks) => marks.readable_mut().await,
        None => std::future::pending().await,
    }
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// Why there is no run directory.
#[derive(Debug, thiserror::Error)]
pub enum OutDirError {
    /// `--out` names a directory that already holds files: a run directory is never reused.
    #[error(
        "{} is not empty: montrace never writes a run into a directory that holds files (an \
         earlier run's would be mixed with this one's, or overwritten). Choose a new --out, or \
         leave --out out for a fresh ./montrace-runs/<time>-<command>",
        .0.display()
    )]
    NotEmpty(PathBuf),
    #[error("{0:#}")]
    Other(#[from] anyhow::Error),
}

/// The default run directory, or the one asked for, created with the invoking user's identity
/// before the command starts (so an unwritable place fails early). An existing `--out` is used
/// only when it is an empty directory.
pub(crate) fn create_out_dir(
    requested: Option<&Path>,
    program: &OsString,
    now_wall_ns: i64,
) -> Result<PathBuf, OutDirError> {
    let dir = match requested {
        Some(dir) => {
            match userfs::list_dir(dir) {
                Ok(names) if !names.is_empty() => return Err(OutDirError::NotEmpty(dir.into())),
                // An empty directory the user made for the run.
                Ok(_) => {}
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
                    userfs::create_dir_all(dir).with_context(|| {
                        format!(
                            "cannot create the run directory {}: choose a writable place with --out",
                            dir.display()
                        )
                    })?;
                }
                Err(err) => {
                    return Err(anyhow::Error::new(err)
                        .context(format!(
                            "cannot use {} as the run directory: choose another with --out",
                            dir.display()
                        ))
                        .into())
                }
            }
            dir.to_path_buf()
        }
        None => {
            let name = Path::new(program)
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "command".into());
            let name: String = name
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            let parent = PathBuf::from("montrace-runs");
            userfs::create_dir_all(&parent).with_context(|| {
                format!(
                    "cannot create {}: choose another place with --out",
                    parent.display()
                )
            })?;
            new_dir(
                &parent,
                &format!("{}-{name}", units::compact_utc(now_wall_ns)),
            )
            .with_context(|| {
                format!(
                    "cannot create a run directory in {}: choose another place with --out",
                    parent.display()
                )
            })?
        }
    };
    let probe = dir.join(".montrace-write-test");
    userfs::create_new(&probe)
        .and_then(|_| userfs::remove_file(&probe))
        .with_context(|| {
            format!(
                "the run directory {} is not writable: choose another with --out",
                dir.display()
            )
        })?;
    Ok(dir)
}

/// Creates `parent/name`, or `parent/name-2`, ... when runs start within the same second: a new
/// directory each time, never one that exists (mkdir fails on any existing name, a symlink too).
fn new_dir(parent: &Path, name: &str) -> std::io::Result<PathBuf> {
    let mut candidate = parent.join(name);
    for n in 2.. {
        match userfs::create_dir(&candidate) {
            Ok(()) => return Ok(candidate),
            Err(err) if err.kind() == std::io::ErrorKind::AlreadyExists => {
                candidate = parent.join(format!("{name}-{n}"));
            }
            Err(err) => return Err(err),
        }
    }
    unreachable!("one of infinitely many names is free")
}

pub(crate) fn dir_is_empty(dir: &Path) -> bool {
    userfs::list_dir(dir).is_ok_and(|names| names.is_empty())
}

fn command_argv(args: &RunArgs) -> Vec<String> {
    args.command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Joins argv for display, quoting words a shell would split.
fn shell_words(argv: &[String]) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shell_words_quotes_what_needs_it() {
        let argv = ["sh", "-c", "exit 7", "it's"].map(String::from);
        assert_eq!(shell_words(&argv), r"sh -c 'exit 7' 'it'\''s'");
    }

    #[test]
    fn new_dir_never_reuses_a_run_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let first = new_dir(tmp.path(), "x").unwrap();
        assert_eq!(first, tmp.path().join("x"));
        // A planted symlink takes a name too, and is not followed.
        std::os::unix::fs::symlink("/nonexistent", tmp.path().join("x-2")).unwrap();
        let next = new_dir(tmp.path(), "x").unwrap();
        assert_eq!(next, tmp.path().join("x-3"));
        assert!(next.is_dir());
    }

    #[test]
    fn an_existing_out_is_used_only_when_empty() {
        let tmp = tempfile::tempdir().unwrap();
        let program = OsString::from("true");
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(create_out_dir(Some(&empty), &program, 0).unwrap(), empty);
        let used = tmp.path().join("used");
        std::fs::create_dir(&used).unwrap();
        std::fs::write(used.join("run.json"), b"{}").unwrap();
        let err = create_out_dir(Some(&used), &program, 0).unwrap_err();
        assert!(matches!(err, OutDirError::NotEmpty(_)), "{err}");
        assert_eq!(std::fs::read(used.join("run.json")).unwrap(), b"{}");
        let nested = tmp.path().join("a/b/c");
        assert_eq!(create_out_dir(Some(&nested), &program, 0).unwrap(), nested);
        assert!(dir_is_empty(&nested));
    }
}
