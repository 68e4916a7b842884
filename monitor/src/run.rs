//! `montrace run`: the orchestration. Checks everything that can fail before the command starts,
//! then loads the probes, starts the command held at a barrier, tracks it, and follows the tree
//! until the command and every descendant are gone; finally writes the run directory.
use std::{
    collections::HashMap,
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
    cli::{RunArgs, EXIT_NOT_FOUND},
    decode::{self, KernelEvent},
    ebpf::Probes,
    host,
    launch::{self, Identity},
    limits, metrics, rates,
    sampler::{MemoryDetail, ProcReader, ReadError, SystemReading},
    summary::{self, RunInfo},
    tracker::{Clock, Tracker},
    units, writer,
};

/// What the event loop learnt.
struct Outcome {
    wait_status: i32,
    linger_expired: bool,
    signals_forwarded: Vec<i32>,
    breach: Option<metrics::LimitBreach>,
}

/// Everything recorded during a run: the tree, the tables on disk, and the state rates need.
/// Kernel events and /proc sweeps go in; rows go out to crash-safe tables as they are made.
struct Recorder {
    tracker: Tracker,
    events: writer::EventTable,
    processes: writer::ProcessTable,
    samples: writer::SampleTable,
    system: writer::SystemTable,
    reader: ProcReader,
    detail: MemoryDetail,
    /// Last sample of each live process, keyed by (pid, start time).
    previous: HashMap<(u32, i64), rates::Previous>,
    previous_system: Option<SystemReading>,
    totals: summary::TreeTotals,
    memory_peaks: summary::TreeMemoryPeaks,
    sample_rows: u64,
    /// Sum of RSS over the tree at the last sweep.
    last_sweep_rss: Option<u64>,
    page_size: u64,
    root_pid: u32,
    exec_time_boot_ns: Option<u64>,
}

impl Recorder {
    /// What the tree uses now, for `--limit`: CPU of exited processes (exact) plus the last
    /// sample of each live one.
    fn usage(&self, elapsed: Duration) -> limits::Usage {
        let live_cpu: u64 = self.previous.values().map(|p| p.cpu_total_ns).sum();
        limits::Usage {
            tree_rss_bytes: self.last_sweep_rss,
            tree_cpu_ns: self.totals.cpu_user_ns + self.totals.cpu_system_ns + live_cpu,
            processes_started: self.tracker.processes_started() as u64,
            elapsed,
        }
    }

    fn create(
        out_dir: &Path,
        tracker: Tracker,
        root_pid: u32,
        detail: MemoryDetail,
    ) -> anyhow::Result<Recorder> {
        Ok(Recorder {
            tracker,
            events: writer::PartedTable::events(out_dir)?,
            processes: writer::ProcessTable::processes(out_dir)?,
            samples: writer::PartedTable::samples(out_dir)?,
            system: writer::PartedTable::system(out_dir)?,
            reader: ProcReader::new(),
            detail,
            previous: HashMap::new(),
            previous_system: None,
            totals: summary::TreeTotals::default(),
            memory_peaks: summary::TreeMemoryPeaks::default(),
            sample_rows: 0,
            last_sweep_rss: None,
            page_size: host::page_size(),
            root_pid,
            exec_time_boot_ns: None,
        })
    }

    /// One ring-buffer record: the tree changes, an event row is written, and a process that
    /// ended leaves its exit figures as its last sample.
    fn on_record(&mut self, bytes: &[u8]) -> anyhow::Result<()> {
        let event = decode::decode(bytes, self.page_size)?;
        if let KernelEvent::Exec { pid, time_ns, .. } = &event {
            if *pid == self.root_pid && self.exec_time_boot_ns.is_none() {
                self.exec_time_boot_ns = Some(*time_ns);
            }
        }
        let row = self.tracker.apply(&event);
        if let Some(figures) = self.tracker.take_last_exit() {
            let previous = self.previous.remove(&(row.pid, row.start_time_ns));
            self.samples.push(rates::exit_sample(
                row.pid,
                &figures,
                row.time_ns,
                row.start_time_ns,
                previous.as_ref(),
            ))?;
            self.sample_rows += 1;
        }
        self.events.push(row)?;
        self.store_finished()
    }

    fn store_finished(&mut self) -> anyhow::Result<()> {
        for record in self.tracker.take_finished() {
            self.previous.remove(&(record.pid, record.start_time_ns));
            self.totals.add(&record);
            self.processes.push(record)?;
        }
        Ok(())
    }

    /// One sweep: every live process of the tree and the system, stamped with one time.
    fn sample(&mut self) -> anyhow::Result<()> {
        let clock = self.tracker.clock();
        let now = host::realtime_ns();
        let mut sweep = Vec::new();
        for (pid, start_time_ns) in self.tracker.live_processes() {
            let reading = match self.reader.read_process(pid, self.detail) {
                Ok(reading) => reading,
                // It exited since the last drain; its exit event brings its last figures.
                Err(ReadError::Gone(_)) => continue,
                Err(err) => {
                    eprintln!("montrace: warning: {err}");
                    continue;
                }
            };
            // A pid reused by a process outside the tree since the exit was queued is not ours.
            let start_boot_ns = (start_time_ns - clock.boot_to_wall_ns).max(0) as u64;
            if !host::same_start(reading.start_ticks, start_boot_ns) {
                continue;
            }
            let key = (pid, start_time_ns);
            let sample =
                rates::process_sample(&reading, now, start_time_ns, self.previous.get(&key));
            self.previous.insert(key, rates::Previous::from(&sample));
            sweep.push(sample);
        }
        self.memory_peaks.add_sweep(&sweep);
        self.last_sweep_rss = Some(sweep.iter().filter_map(|s| s.rss_bytes).sum());
        self.sample_rows += sweep.len() as u64;
        for sample in sweep {
            self.samples.push(sample)?;
        }
        match self.reader.read_system() {
            Ok(reading) => {
                self.system.push(rates::system_sample(
                    &reading,
                    now,
                    self.previous_system.as_ref(),
                ))?;
                self.previous_system = Some(reading);
            }
            Err(err) => eprintln!("montrace: warning: {err}"),
        }
        Ok(())
    }

    fn flush(&mut self) -> anyhow::Result<()> {
        self.events.flush()?;
        self.processes.flush()?;
        self.samples.flush()?;
        self.system.flush()?;
        Ok(())
    }

    /// Writes the processes still alive and closes every table into its final file.
    fn finish(mut self) -> anyhow::Result<Finished> {
        let max_concurrent = self.tracker.max_concurrent();
        let vanished = self.tracker.vanished_count();
        let started = self.tracker.processes_started();
        for record in self.tracker.finish() {
            self.totals.add(&record);
            self.processes.push(record)?;
        }
        self.events.finish()?;
        self.processes.finish()?;
        self.samples.finish()?;
        self.system.finish()?;
        Ok(Finished {
            max_concurrent,
            vanished,
            started,
            totals: self.totals,
            memory_peaks: self.memory_peaks,
            sample_rows: self.sample_rows,
            exec_time_boot_ns: self.exec_time_boot_ns,
        })
    }
}

struct Finished {
    max_concurrent: usize,
    vanished: u64,
    started: usize,
    totals: summary::TreeTotals,
    memory_peaks: summary::TreeMemoryPeaks,
    sample_rows: u64,
    exec_time_boot_ns: Option<u64>,
}

pub fn run(args: RunArgs) -> anyhow::Result<i32> {
    let started_boot_ns = host::boottime_ns();
    let started_wall_ns = host::realtime_ns();
    let program = args.command[0].clone();
    let Some(executable) = launch::resolve_command(&program, std::env::var_os("PATH").as_deref())
    else {
        eprintln!("montrace: {}: command not found", program.to_string_lossy());
        return Ok(EXIT_NOT_FOUND);
    };

    if !host::can_load_ebpf() {
        bail!(
            "montrace needs root to load its eBPF programs (CAP_BPF and CAP_PERFMON): run it with sudo, \
             e.g. `sudo montrace run -- {}`",
            program.to_string_lossy()
        );
    }
    let identity = if args.as_root {
        None
    } else {
        launch::sudo_identity()?
    };
    let kernel_btf = btf::Btf::from_file(Path::new(btf::VMLINUX_BTF))?;
    let offsets = btf::kernel_offsets(&kernel_btf).context(
        "this kernel's BTF lacks a field montrace reads; please report it with `uname -r`",
    )?;

    let out_dir = create_out_dir(
        args.out.as_deref(),
        &program,
        started_wall_ns,
        identity.as_ref(),
    )?;
    let result = if args.repeat == 1 && args.warmup == 0 {
        record(
            &args,
            &executable,
            &offsets,
            &out_dir,
            identity.as_ref(),
            (started_boot_ns, started_wall_ns),
            !args.quiet,
        )
        .and_then(|info| {
            let breach = info.limit_breach.clone();
            write_summary(
                &out_dir,
                &args,
                vec![info.repetition(".")],
                breach,
                identity.as_ref(),
            )?;
            Ok(info.exit_status)
        })
    } else {
        repeat(&args, &executable, &offsets, &out_dir, identity.as_ref())
    };
    if result.is_err() && dir_is_empty(&out_dir) {
        // Nothing was recorded: leave no litter behind.
        let _ = std::fs::remove_dir(&out_dir);
    }
    result
}

/// `--repeat N --warmup K`: K warm-up runs, then N measured ones, each in its own sub-directory;
/// summary.json at the top holds every measured repetition. A repetition that fails (non-zero
/// exit, or a limit) ends the series: its figures would not be comparable.
fn repeat(
    args: &RunArgs,
    executable: &Path,
    offsets: &monitor_common::Offsets,
    out_dir: &Path,
    identity: Option<&Identity>,
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
        std::fs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let info = record(
            args,
            executable,
            offsets,
            &dir,
            identity,
            (host::boottime_ns(), host::realtime_ns()),
            false,
        )?;
        if !args.quiet {
            eprintln!(
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
            eprintln!(
                "montrace: {name} failed (exit {}): no further repetitions",
                info.exit_status
            );
            let breach = info.limit_breach.clone();
            write_summary(out_dir, args, repetitions, breach, identity)?;
            return Ok(info.exit_status);
        }
    }
    let summary = write_summary(out_dir, args, repetitions, None, identity)?;
    if !args.quiet {
        eprint!(
            "{}",
            summary::format_repeat_stats(&summary, &out_dir.display().to_string())
        );
    }
    Ok(summary.exit_status)
}

fn write_summary(
    out_dir: &Path,
    args: &RunArgs,
    repetitions: Vec<metrics::Repetition>,
    breach: Option<metrics::LimitBreach>,
    identity: Option<&Identity>,
) -> anyhow::Result<metrics::Summary> {
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let summary = metrics::Summary::new(
        shell_words(&argv),
        argv,
        host::uname().0,
        args.warmup as usize,
        repetitions,
        breach,
    );
    let path = out_dir.join(metrics::SUMMARY_FILE);
    std::fs::write(&path, serde_json::to_string_pretty(&summary)? + "\n")
        .with_context(|| format!("cannot write {}", path.display()))?;
    if let Some(id) = identity {
        host::chown_tree(out_dir, id.uid, id.gid)?;
    }
    Ok(summary)
}

#[allow(clippy::too_many_arguments)]
fn record(
    args: &RunArgs,
    executable: &Path,
    offsets: &monitor_common::Offsets,
    out_dir: &Path,
    identity: Option<&Identity>,
    (started_boot_ns, started_wall_ns): (u64, i64),
    print_summary: bool,
) -> anyhow::Result<RunInfo> {
    // Before any thread exists, so every thread (and the command, until it restores the mask)
    // has the forwarded signals blocked and montrace receives them through a signalfd.
    let child_sigmask = launch::block_forwarded_signals().context("blocking signals")?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .enable_time()
        .build()
        .context("starting the event loop")?;

    let (mut probes, ring) = Probes::load(offsets, args.ring_buffer_size, args.tracepoints)?;
    let clock = Clock {
        boot_to_wall_ns: host::boot_to_wall_ns(),
    };
    let mut cgroup_report = summary::CgroupReport::default();
    let cgroup = match RunCgroup::create(&format!("run-{}-{started_wall_ns}", std::process::id())) {
        Ok(cgroup) => Some(cgroup),
        Err(err) => {
            eprintln!(
                "montrace: no cgroup for the run, so no kernel totals to compare with: {err}"
            );
            cgroup_report.error = Some(err.to_string());
            None
        }
    };

    let held = launch::spawn_held(executable, &args.command, identity, &child_sigmask)?;
    let root_pid = held.pid;
    probes.track(root_pid)?;
    if let Some(cgroup) = &cgroup {
        // Before exec, so the cgroup's totals include everything the command does.
        if let Err(err) = cgroup.add(root_pid) {
            cgroup_report.error = Some(err.to_string());
        }
    }
    let mut tracker = Tracker::new(clock);
    let approx_start = host::proc_start_boot_ns(root_pid).unwrap_or_else(|_| host::boottime_ns());
    tracker.add_root(root_pid, approx_start, &args.command[0].to_string_lossy());
    let mut recorder = Recorder::create(out_dir, tracker, root_pid, args.memory_detail)?;
    if let Err(err) = held.release(executable, identity) {
        // The child exits with 126/127; its exit is still recorded like any other.
        eprintln!("montrace: {err}");
    }

    let signals = launch::signal_fd().context("creating the signal fd")?;
    let outcome = runtime.block_on(follow(
        ring,
        signals,
        &mut recorder,
        root_pid,
        args,
        started_boot_ns,
    ))?;
    let end_wall_ns = host::realtime_ns();
    let end_boot_ns = host::boottime_ns();
    let lost = probes.lost()?;
    let tracking_mode = probes.mode;
    let ebpf_load_ms = probes.load_ms;
    drop(probes);
    let finished = recorder.finish()?;

    if let Some(cgroup) = cgroup {
        cgroup_report.version = Some(cgroup.version());
        cgroup_report.path = Some(cgroup.path());
        match cgroup.totals() {
            Ok(totals) => {
                let tree_cpu = finished.totals.cpu_user_ns + finished.totals.cpu_system_ns;
                cgroup_report.cpu_coverage = totals
                    .cpu_usage_ns
                    .filter(|&ns| ns > 0)
                    .map(|ns| tree_cpu as f64 / ns as f64);
                cgroup_report.totals = Some(totals);
            }
            Err(err) => cgroup_report.error = Some(err.to_string()),
        }
        match cgroup.remove() {
            Ok(()) => cgroup_report.removed = true,
            Err(err) => cgroup_report.error = Some(err.to_string()),
        }
    }

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
    let (host_name, kernel) = host::uname();
    let (start_time, end_time, duration_s) = RunInfo::new_times(started_wall_ns, end_wall_ns);
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    let info = RunInfo {
        schema_version: summary::RUN_JSON_VERSION,
        montrace_version: env!("CARGO_PKG_VERSION").to_string(),
        command: shell_words(&argv),
        argv,
        executable: executable.display().to_string(),
        start_time,
        end_time,
        duration_s,
        command_wall_s: finished
            .exec_time_boot_ns
            .map(|t| end_boot_ns.saturating_sub(t) as f64 / 1e9),
        host: host_name,
        kernel,
        tracking_mode,
        exit_code,
        exit_signal,
        exit_status,
        lost_events: lost,
        vanished_processes: finished.vanished,
        processes_started: finished.started,
        max_concurrent: finished.max_concurrent,
        totals: finished.totals,
        tree_memory_peaks: finished.memory_peaks,
        samples: finished.sample_rows,
        sample_interval_ms: args.interval.as_secs_f64() * 1e3,
        cgroup: cgroup_report,
        startup_ms: finished
            .exec_time_boot_ns
            .map(|t| t.saturating_sub(started_boot_ns) as f64 / 1e6),
        ebpf_load_ms,
        uid: identity.map_or(0, |id| id.uid),
        gid: identity.map_or(0, |id| id.gid),
        linger_expired: outcome.linger_expired,
        signals_forwarded: outcome.signals_forwarded,
        limit_breach: outcome.breach,
        out_dir: out_dir.display().to_string(),
    };
    let json = serde_json::to_string_pretty(&info)? + "\n";
    let run_json = out_dir.join("run.json");
    std::fs::write(&run_json, json)
        .with_context(|| format!("cannot write {}", run_json.display()))?;
    if let Some(id) = identity {
        host::chown_tree(out_dir, id.uid, id.gid)
            .with_context(|| format!("cannot hand {} to uid {}", out_dir.display(), id.uid))?;
    }
    if print_summary {
        eprint!("{}", summary::format_summary(&info));
    }
    Ok(info)
}

/// Follows the tree until the command has exited and every tracked process is gone (or the
/// linger time after the command's exit has passed), sampling and flushing on the way.
async fn follow(
    ring: RingBuf<MapData>,
    signals: OwnedFd,
    recorder: &mut Recorder,
    root_pid: u32,
    args: &RunArgs,
    started_boot_ns: u64,
) -> anyhow::Result<Outcome> {
    // SAFETY: both values own their descriptor (the ring buffer's map fd, the signalfd) and keep
    // it open and unchanged until the AsyncFd drops them.
    let mut ring = unsafe { AsyncFd::register_with_interest(ring, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
        .context("watching the ring buffer")?;
    // SAFETY: as above.
    let signals = unsafe { AsyncFd::register_with_interest(signals, Interest::READABLE) }
        .map_err(|e| e.into_parts().1)
        .context("watching signals")?;
    let (status_tx, mut status_rx) = tokio::sync::oneshot::channel();
    std::thread::spawn(move || {
        let _ = status_tx.send(launch::wait_status(root_pid));
    });

    let mut outcome = Outcome {
        wait_status: 0,
        linger_expired: false,
        signals_forwarded: Vec::new(),
        breach: None,
    };
    // After a limit breach: when the stragglers get SIGKILL.
    let mut kill_at: Option<tokio::time::Instant> = None;
    let wall_limit = args.limits.iter().find_map(|l| match l {
        limits::Limit::Wall(d) => Some(tokio::time::Instant::now() + *d),
        _ => None,
    });
    let started = std::time::Instant::now()
        - Duration::from_nanos(host::boottime_ns().saturating_sub(started_boot_ns));
    let mut root_done = false;
    let mut deadline: Option<tokio::time::Instant> = None;
    let mut sample_tick = tokio::time::interval(args.interval);
    sample_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut flush_tick = tokio::time::interval(args.flush_interval);
    flush_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut liveness_tick = tokio::time::interval(Duration::from_millis(500));
    liveness_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    fn drain(ring: &mut RingBuf<MapData>, recorder: &mut Recorder) -> anyhow::Result<()> {
        while let Some(item) = ring.next() {
            recorder.on_record(&item)?;
        }
        Ok(())
    }

    loop {
        tokio::select! {
            guard = ring.readable_mut() => {
                let mut guard = guard?;
                drain(guard.get_inner_mut(), recorder)?;
                guard.clear_ready();
            }
            guard = signals.readable() => {
                let mut guard = guard?;
                for received in launch::read_signals(guard.get_inner()) {
                    // A terminal's Ctrl-C already reached the command's process group; a signal
                    // sent to montrace itself (kill, a CI runner's timeout) is passed on.
                    if !received.from_terminal {
                        launch::kill_all(&recorder.tracker.live_pids(), received.signal);
                        outcome.signals_forwarded.push(received.signal);
                    }
                }
                guard.clear_ready();
            }
            status = &mut status_rx, if !root_done => {
                outcome.wait_status = status.context("waiter thread ended")?.context("waiting for the command")?;
                root_done = true;
                deadline = args.linger.map(|d| tokio::time::Instant::now() + d);
            }
            _ = sample_tick.tick() => {
                // Exits first, so a process that just ended is not sampled as gone.
                drain(ring.get_mut(), recorder)?;
                recorder.sample()?;
            }
            _ = sleep_until(if outcome.breach.is_none() { wall_limit } else { None }) => {}
            _ = sleep_until(kill_at) => {
                launch::kill_all(&recorder.tracker.live_pids(), libc::SIGKILL);
                kill_at = None;
            }
            _ = flush_tick.tick() => {
                drain(ring.get_mut(), recorder)?;
                recorder.flush()?;
            }
            _ = liveness_tick.tick(), if root_done => {
                drain(ring.get_mut(), recorder)?;
                // An exit event is queued before the process can disappear from /proc, so a
                // tracked pid gone from /proc after a drain lost its exit event.
                for pid in recorder.tracker.live_pids() {
                    if !Path::new(&format!("/proc/{pid}")).exists() {
                        recorder.tracker.vanished(pid, host::boottime_ns());
                    }
                }
                recorder.store_finished()?;
            }
            _ = sleep_until(deadline) => {
                drain(ring.get_mut(), recorder)?;
                outcome.linger_expired = recorder.tracker.live_count() > 0;
                break;
            }
        }
        if outcome.breach.is_none() && !args.limits.is_empty() {
            let usage = recorder.usage(started.elapsed());
            if let Some((limit, value)) = limits::first_breach(&args.limits, &usage) {
                outcome.breach = Some(metrics::LimitBreach {
                    limit: limit.name().to_string(),
                    threshold: limit.threshold(),
                    value,
                    time: units::rfc3339(host::realtime_ns()),
                    elapsed_s: started.elapsed().as_secs_f64(),
                });
                // Parents first, so none carries on after a child it waits for is killed.
                launch::kill_all(&recorder.tracker.live_pids(), libc::SIGTERM);
                kill_at = Some(tokio::time::Instant::now() + args.kill_grace);
            }
        }
        if root_done && recorder.tracker.live_count() == 0 {
            break;
        }
    }
    drain(ring.get_mut(), recorder)?;
    Ok(outcome)
}

async fn sleep_until(deadline: Option<tokio::time::Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

/// The default run directory, or the one asked for; created (and handed to the invoking user)
/// before the command starts, so an unwritable place fails early.
fn create_out_dir(
    requested: Option<&Path>,
    program: &OsString,
    now_wall_ns: i64,
    identity: Option<&Identity>,
) -> anyhow::Result<PathBuf> {
    let dir = match requested {
        Some(dir) => dir.to_path_buf(),
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
            let created_parent = !parent.exists();
            std::fs::create_dir_all(&parent).with_context(|| {
                format!(
                    "cannot create {}: choose another place with --out",
                    parent.display()
                )
            })?;
            if let (true, Some(id)) = (created_parent, identity) {
                host::chown_tree(&parent, id.uid, id.gid)?;
            }
            unique_dir(
                &parent,
                &format!("{}-{name}", units::compact_utc(now_wall_ns)),
            )
        }
    };
    std::fs::create_dir_all(&dir).with_context(|| {
        format!(
            "cannot create the run directory {}: choose a writable place with --out",
            dir.display()
        )
    })?;
    let probe = dir.join(".montrace-write-test");
    std::fs::write(&probe, b"").with_context(|| {
        format!(
            "the run directory {} is not writable: choose another with --out",
            dir.display()
        )
    })?;
    std::fs::remove_file(&probe)?;
    if let Some(id) = identity {
        host::chown_tree(&dir, id.uid, id.gid)?;
    }
    Ok(dir)
}

/// `parent/name`, or `parent/name-2`, ... when runs start within the same second.
fn unique_dir(parent: &Path, name: &str) -> PathBuf {
    let mut candidate = parent.join(name);
    let mut n = 2;
    while candidate.exists() {
        candidate = parent.join(format!("{name}-{n}"));
        n += 1;
    }
    candidate
}

fn dir_is_empty(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none())
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
    fn unique_dir_never_reuses_a_run_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let first = unique_dir(tmp.path(), "x");
        std::fs::create_dir(&first).unwrap();
        let second = unique_dir(tmp.path(), "x");
        assert_eq!(second, tmp.path().join("x-2"));
    }
}
