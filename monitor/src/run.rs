//! `montrace run`: the orchestration. Checks everything that can fail before the command starts,
//! then loads the probes, starts the command held at a barrier, tracks it, and follows the tree
//! until the command and every descendant are gone; finally writes the run directory.
use std::{
    ffi::OsString,
    path::{Path, PathBuf},
    time::Duration,
};

use anyhow::{bail, Context as _};

use crate::{
    analysis::bench::plan,
    cli::RunArgs,
    commands::{CommandError, Exit},
    exit_code::EXIT_NOT_FOUND,
    follow::launch::{self, Identity},
    follow::marks::{self, MarkServer},
    follow::{
        end::{close_cgroup, write_summary, GpuOpening, NVML_STILL_OPENING},
        session::{self, Root, Session},
        Source,
    },
    host,
    kernel::ebpf::KernelBtf,
    kernel::ebpf::Probes,
    kernel::privilege,
    sampling::cgroup::RunCgroup,
    sampling::gpu::GpuStatus,
    store::run_json::{self, RunInfo},
    store::userfs,
    store::Durability,
    tracking::polling::{self, Poller},
    units,
};

/// Runs the command (its arguments checked by `commands::run`): its exit status, or why montrace
/// could not run it.
pub fn run(args: RunArgs) -> Exit {
    if let Some(refused) = args.as_root.then(launch::as_root_refused).flatten() {
        return Err(CommandError::usage(refused));
    }
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
    // Before any thread exists (the BTF preload and NVML start some), so every thread has the
    // forwarded signals blocked and montrace receives them through a signalfd; the command gets
    // the original mask back before it execs.
    let child_sigmask = launch::block_forwarded_signals().context("blocking signals")?;
    let mut offsets = EbpfOffsets::start(&args, &program)?;
    // `--gpu require` fails here, before anything is created or started; `auto` opens beside.
    let mut gpu = GpuOpening::start(&args.record.recording())?;
    // Only root can become another user; without root the command keeps montrace's identity.
    // SAFETY: geteuid has no preconditions.
    let identity = if args.as_root || unsafe { libc::geteuid() } != 0 {
        None
    } else {
        launch::sudo_identity()?
    };

    // Before the run directory: a --stream that cannot be created leaves nothing behind.
    let mut stream = crate::follow::stream::Stream::from_options(
        args.record.stream.as_deref(),
        args.record.stream_fd,
    )?;
    let out_dir = match create_out_dir(args.record.out.as_deref(), &program, started_wall_ns) {
        Ok(dir) => dir,
        Err(err @ OutDirError::NotEmpty(_)) => return Err(CommandError::usage(err)),
        Err(OutDirError::Other(err)) => return Err(err.into()),
    };
    let result = repeat(
        &args,
        &executable,
        &mut offsets,
        &out_dir,
        identity.as_ref(),
        &child_sigmask,
        (&mut gpu, &mut stream),
        (started_boot_ns, started_wall_ns),
    );
    if result.is_err() && dir_is_empty(&out_dir) {
        // Nothing was recorded: leave no litter behind.
        let _ = userfs::remove_dir(&out_dir);
    }
    if let (Ok(_), Some(dest)) = (&result, &args.publish) {
        // As the user: the run directory is the (untrusted) command's to plant links in.
        let published = userfs::as_user(|| {
            crate::fleet::publish::publish_paths(std::slice::from_ref(&out_dir), dest)
                .map_err(std::io::Error::other)
        });
        if let Err(err) = published {
            crate::say!(
                "montrace: warning: --publish {dest}: {err}; the run directory is complete: \
                 `montrace publish {} {dest}` later",
                out_dir.display()
            );
        }
    }
    Ok(result?)
}

/// One run, or `--repeat N --warmup K`: K warm-up runs, then N measured ones, each in its own
/// sub-directory; summary.json at the top holds every measured repetition. Each is framed by
/// `--prepare` and `--cleanup`. A repetition that fails (non-zero exit, or a limit) or a hook
/// that fails ends the series: its figures would not be comparable.
#[allow(clippy::too_many_arguments)]
fn repeat(
    args: &RunArgs,
    executable: &Path,
    offsets: &mut EbpfOffsets,
    out_dir: &Path,
    identity: Option<&Identity>,
    child_sigmask: &libc::sigset_t,
    (gpu, stream): (&mut GpuOpening, &mut Option<crate::follow::stream::Stream>),
    started: (u64, i64),
) -> anyhow::Result<i32> {
    let single = args.repeat == 1 && args.warmup == 0;
    let mut series = Series::default();
    // commands::run refuses such a series first, with exit status 2; a library caller gets the
    // error.
    let total = plan::series_length(args.warmup, args.repeat).map_err(anyhow::Error::msg)?;
    for i in 0..total {
        let warmup = i < args.warmup;
        let name = if single {
            ".".to_string()
        } else if warmup {
            format!("warmup-{:02}", i + 1)
        } else {
            format!("rep-{:03}", i - args.warmup + 1)
        };
        let dir = if single {
            out_dir.to_path_buf()
        } else {
            out_dir.join(&name)
        };
        if let Some(code) = hook(args.prepare.as_deref(), "--prepare", &name, identity)? {
            series.ended = Some((code, None));
            break;
        }
        if !single {
            userfs::create_dir(&dir).with_context(|| format!("cannot create {}", dir.display()))?;
        }
        let window = MachineWindow::open();
        let info = record(
            args,
            executable,
            offsets,
            &dir,
            identity,
            child_sigmask,
            (gpu, stream),
            if i == 0 {
                started
            } else {
                (host::boottime_ns(), host::realtime_ns())
            },
            single && !args.record.quiet,
            i + 1 == total,
        )?;
        let other_cpu_share = window.other_share(&info);
        let wall_s = info.command_wall_s.unwrap_or(info.duration_s);
        if !args.record.quiet && !single {
            crate::say!(
                "montrace: {name}: exit {}, wall {wall_s:.3}s (the command's), CPU {:.3}s, peak RSS {}",
                info.exit_status,
                (info.totals.cpu_user_ns + info.totals.cpu_system_ns) as f64 / 1e9,
                info.totals
                    .peak_rss_bytes
                    .map_or("n/a".into(), units::format_bytes),
            );
        }
        series.context = info.context.clone();
        let failed = info.exit_status != 0 || info.limit_breach.is_some();
        let mut repetition = info.repetition(&name);
        repetition.other_cpu_share = other_cpu_share;
        let figures = plan::Measured::of(&name, &repetition);
        if warmup {
            series.warmups.push(figures);
        } else {
            series.repetitions.push(repetition);
            series.measured.push(figures);
        }
        if failed {
            if !single {
                crate::say!(
                    "montrace: {name} failed (exit {}): no further repetitions",
                    info.exit_status
                );
            }
            series.ended = Some((info.exit_status, info.limit_breach.clone()));
            break;
        }
        if let Some(code) = hook(args.cleanup.as_deref(), "--cleanup", &name, identity)? {
            series.ended = Some((code, None));
            break;
        }
    }
    // summary.json is synced as a run's files are: when the whole series recorded for its
    // flush interval or longer.
    let recorded = Duration::from_nanos(host::boottime_ns().saturating_sub(started.0));
    let durability = Durability::of_run(recorded, args.record.flush_interval);
    Ok(series.finish(args, (out_dir, durability), single))
}

/// What a series of repetitions measured, and how it ended if it stopped early.
#[derive(Default)]
struct Series {
    repetitions: Vec<crate::store::summary_json::Repetition>,
    warmups: Vec<plan::Measured>,
    measured: Vec<plan::Measured>,
    /// The status (and breach) of the repetition or hook that stopped the series.
    ended: Option<(i32, Option<crate::store::summary_json::LimitBreach>)>,
    context: Option<crate::fleet::context::Context>,
}

impl Series {
    /// The series' warnings, summary.json and statistics; montrace's exit status.
    fn finish(
        self,
        args: &RunArgs,
        (out_dir, durability): (&Path, Durability),
        single: bool,
    ) -> i32 {
        let Series {
            repetitions,
            warmups,
            measured,
            ended,
            context,
        } = self;
        // A single run is not a measurement series: nothing to warn about.
        let warnings = if single {
            Vec::new()
        } else {
            plan::warnings(&warmups, &measured)
        };
        for warning in &warnings {
            crate::say!("montrace: warning: {warning}");
        }
        let stopped = ended.is_some();
        let (status, breach) = ended.unwrap_or((0, None));
        let summary = write_summary(
            (out_dir, durability),
            command_argv(args),
            args.warmup as usize,
            repetitions,
            breach,
            warnings,
            (args.record.labels.iter().cloned().collect(), context),
        );
        if !args.record.quiet && !single && !stopped {
            crate::say_raw!(
                "{}",
                crate::follow::summary::format_repeat_stats(
                    &summary,
                    &out_dir.display().to_string()
                )
            );
        }
        // The command's (or the failing hook's) status is montrace's last word.
        if stopped {
            status
        } else {
            summary.exit_status
        }
    }
}

/// Runs a `--prepare`/`--cleanup` script, if given. Some(status) when it failed (said on
/// stderr), which ends the series.
fn hook(
    script: Option<&str>,
    flag: &str,
    name: &str,
    identity: Option<&Identity>,
) -> anyhow::Result<Option<i32>> {
    let Some(script) = script else {
        return Ok(None);
    };
    let code = launch::run_script(script, identity)
        .with_context(|| format!("cannot start {flag} `{script}`"))?;
    if code == 0 {
        return Ok(None);
    }
    let at = if name == "." {
        String::new()
    } else {
        format!(" at {name}")
    };
    crate::say!(
        "montrace: {flag} `{script}` failed (exit {code}){at}: no further runs; fix it, or run \
         it by hand to see why"
    );
    Ok(Some(code))
}

/// The machine's busy CPU and montrace's own at the start of a run, to tell how much of the
/// machine other work took during it.
struct MachineWindow {
    busy: Option<(f64, usize)>,
    own_s: f64,
    started: std::time::Instant,
}

impl MachineWindow {
    fn open() -> MachineWindow {
        MachineWindow {
            busy: crate::sampling::sampler::machine_busy_cpu_s(),
            own_s: host::own_cpu_s(),
            started: std::time::Instant::now(),
        }
    }

    fn other_share(&self, info: &RunInfo) -> Option<f64> {
        let (before, cpus) = self.busy?;
        let (after, _) = crate::sampling::sampler::machine_busy_cpu_s()?;
        let tree_s = (info.totals.cpu_user_ns + info.totals.cpu_system_ns) as f64 / 1e9;
        plan::other_cpu_share(
            after - before,
            tree_s,
            host::own_cpu_s() - self.own_s,
            self.started.elapsed().as_secs_f64(),
            cpus,
        )
    }
}

/// The kernel field offsets the eBPF programs need, or None when montrace must poll /proc
/// instead (not root, no BTF), which `--require-ebpf` turns into an error.
///
/// Start-up: montrace's parse of the kernel BTF (10 to 20 ms here) runs on a thread of its own
/// from montrace's start, and the run joins it only where the programs load. Meanwhile the command
/// is forked, held, and moved into the run cgroup: with cgroup v1 that move waits for an RCU
/// grace period (25 to 30 ms on this machine, seen with strace), which then overlaps the parse
/// instead of following it.
struct EbpfOffsets {
    /// The parse under way since montrace started, until the first [`EbpfOffsets::get`].
    reading: Option<std::thread::JoinHandle<Result<KernelBtf, crate::kernel::btf::BtfError>>>,
    /// The offsets once read; None while reading, or when montrace polls /proc.
    kernel: Option<KernelBtf>,
    /// The resident agent, which follows the tree instead (then nothing is read or loaded here).
    agent: Option<crate::follow::agent::Connection>,
}

impl EbpfOffsets {
    /// Starts reading the offsets (with aya's own parse beside it), or decides on polling now
    /// when montrace may not load eBPF at all.
    fn start(args: &RunArgs, program: &OsString) -> anyhow::Result<EbpfOffsets> {
        let mut offsets = EbpfOffsets {
            reading: None,
            kernel: None,
            agent: None,
        };
        if let Some(agent) = find_agent()? {
            offsets.agent = Some(agent);
            return Ok(offsets);
        }
        if !host::can_load_ebpf() {
            let why_not = format!(
                "exact tracking needs CAP_BPF and CAP_PERFMON: grant them to the installed binary \
                 once with `sudo montrace setcap` (then every user gets it, with their own \
                 environment), or run `sudo montrace run -- {}`",
                program.to_string_lossy()
            );
            no_ebpf(args, &why_not)?;
            return Ok(offsets);
        }
        // aya's own BTF parse goes on beside montrace's (start-up).
        crate::kernel::ebpf::preload();
        match std::thread::Builder::new()
            .name("btf-offsets".into())
            .spawn(KernelBtf::read)
        {
            Ok(reading) => offsets.reading = Some(reading),
            Err(_) => offsets.take(args, KernelBtf::read())?,
        }
        Ok(offsets)
    }

    /// Keeps what the parse gave, or falls back to polling (said once) when it failed.
    fn take(
        &mut self,
        args: &RunArgs,
        read: Result<KernelBtf, crate::kernel::btf::BtfError>,
    ) -> anyhow::Result<()> {
        match read {
            Ok(kernel) => self.kernel = Some(kernel),
            Err(err) => no_ebpf(args, &err.to_string())?,
        }
        Ok(())
    }

    /// The offsets, once read (the first call waits for the reading thread).
    fn get(&mut self, args: &RunArgs) -> anyhow::Result<Option<&KernelBtf>> {
        if let Some(reading) = self.reading.take() {
            let read = reading.join().unwrap_or_else(|_| KernelBtf::read());
            self.take(args, read)?;
        }
        Ok(self.kernel.as_ref())
    }
}

/// The resident agent to follow the tree with: the one `MONTRACE_AGENT_SOCKET` names (not
/// reaching it is an error), else one listening at the default socket when montrace may not load
/// the programs itself (root and the granted binary load their own there).
pub(crate) fn find_agent() -> anyhow::Result<Option<crate::follow::agent::Connection>> {
    use crate::follow::agent;
    let Some((path, named)) = agent::socket_path() else {
        return Ok(None);
    };
    if !named && host::can_load_ebpf() {
        return Ok(None);
    }
    match agent::Connection::connect(&path) {
        Ok(connection) => Ok(Some(connection)),
        Err(err) if named => bail!(
            "cannot reach the montrace agent at {} ({err}): start it (`sudo montrace agent`), or \
             unset {} to run without it",
            path.display(),
            agent::SOCKET_ENV
        ),
        Err(_) => Ok(None),
    }
}

/// No eBPF for `why_not`: an error with `--require-ebpf`, else polling, said on stderr.
fn no_ebpf(args: &RunArgs, why_not: &str) -> anyhow::Result<()> {
    if args.require_ebpf {
        bail!("{why_not} (--require-ebpf is set, so montrace does not fall back to polling /proc)");
    }
    crate::say!("montrace: warning: no eBPF ({why_not}).");
    crate::say!(
        "montrace: warning: following the tree by polling /proc every {:?} instead: processes that \
         live shorter than that may be missed (tracking_mode \"polling\" in run.json)",
        args.record.interval
    );
    Ok(())
}

/// One recording of the command: launched held, moved into the run cgroup while the programs
/// load, released, then followed by a [`Session`] until its tree is done.
#[allow(clippy::too_many_arguments)]
fn record(
    args: &RunArgs,
    executable: &Path,
    offsets: &mut EbpfOffsets,
    out_dir: &Path,
    identity: Option<&Identity>,
    child_sigmask: &libc::sigset_t,
    (gpu, stream): (&mut GpuOpening, &mut Option<crate::follow::stream::Stream>),
    started: (u64, i64),
    print_summary: bool,
    last: bool,
) -> anyhow::Result<RunInfo> {
    let (cgroup, mut cgroup_report) = create_cgroup(started.1, args.record.quiet);
    let marks = bind_marks();
    let extra_env: Vec<(OsString, OsString)> = marks
        .iter()
        .map(|m| (marks::SOCKET_ENV.into(), m.path().as_os_str().to_owned()))
        .collect();
    // The command is forked first and held at its barrier (it runs nothing until released). On
    // cgroup v2 it is made in the run cgroup; otherwise moving it there, which waits for the
    // kernel (an RCU grace period, 10 ms or more), goes on beside the loading of the programs
    // (start-up).
    let into = cgroup.as_ref().and_then(RunCgroup::open_for_clone);
    let held = launch::spawn_held(
        executable,
        &args.command,
        &extra_env,
        identity,
        child_sigmask,
        into.as_ref().map(std::os::fd::AsFd::as_fd),
    )?;
    drop(into);
    let root_pid = held.pid;
    let to_move = cgroup.as_ref().filter(|_| !held.in_cgroup);
    let (loaded, mut added) =
        load_beside_cgroup_add(args, offsets, to_move, root_pid, last, started.0);
    if held.in_cgroup {
        added = Some(Ok(()));
    }
    // How the command came into the cgroup; not at all where the move failed.
    cgroup_report.entered = match added {
        Some(Ok(())) if held.in_cgroup => Some(run_json::CgroupEntry::AtClone),
        Some(Ok(())) => Some(run_json::CgroupEntry::Moved),
        _ => None,
    };
    // A failure drops the held command, which then exits without running anything.
    let (mut probes, ring) = loaded?;
    // The tree's memory figure comes from the run cgroup only where the command is in it.
    let resident = match &added {
        Some(Ok(_)) => cgroup.as_ref().and_then(RunCgroup::resident_reader),
        _ => None,
    };
    if let Some(Err(err)) = added {
        cgroup_report.error = Some(err.to_string());
    }
    if let Some(probes) = &mut probes {
        probes.track(root_pid)?;
    }
    // The agent checks its request while the tables are made: its answer is taken after them,
    // but first where a refusal fails the run (`--require-ebpf`: nothing is recorded then).
    let mut asked = offsets.agent.as_ref().map(|a| a.ask_to_follow(root_pid));
    let mut agent = agent_follows(args, asked.take_if(|_| args.require_ebpf))?;
    let options = args.record.recording();
    let config = session::Config {
        options: &options,
        out_dir,
        root: Root::Launched {
            pid: root_pid,
            program: &args.command[0],
            identity,
        },
        linger: args.linger,
        stop_after: None,
        started,
        last,
        print_summary,
    };
    let mut gpu_slot = Some(&mut *gpu);
    let polled = ring.is_none() && agent.is_none() && asked.is_none();
    let early = early_gpu_monitor(polled, &mut gpu_slot);
    let mut session = Session::start(config, probes, early, stream.as_mut())?;
    if agent.is_none() {
        agent = agent_follows(args, asked)?;
    }
    session
        .recorder()
        .set_pressure(cgroup.as_ref().and_then(RunCgroup::pressure_dir));
    session.recorder().set_resident(resident);
    if let Err(err) = held.release(executable, identity) {
        // The child exits with 126/127; its exit is still recorded like any other.
        crate::say!("montrace: {err}");
    }
    if let Some(probes) = session.probes() {
        probes.free_loader();
    }
    if let Some(gpu) = gpu_slot.take() {
        session.recorder().set_gpu_opening(gpu, out_dir);
    }
    let source = match (ring, agent) {
        (Some(events), _) => Source::Ebpf(events),
        (None, Some(stream)) => Source::Agent(stream),
        (None, None) => Source::Polling(Poller::new()),
    };
    let followed = session.follow(source, marks)?;
    close_cgroup(cgroup, &mut cgroup_report, followed.tree_cpu_ns());
    // Not waited for: a tree done before NVML opened has no GPU data (see `GpuOpening`).
    let unready = GpuStatus::Unavailable {
        reason: NVML_STILL_OPENING.into(),
    };
    Ok(followed.finish(
        gpu.ready().map_or(&unready, |status| &*status),
        stream.as_mut(),
        session::Ending {
            argv: command_argv(args),
            executable: executable.display().to_string(),
            cgroup: cgroup_report,
        },
    ))
}

/// What [`load_probes`] gives: the probes and their ring buffer, none where the agent or
/// polling follows the tree.
type Loaded = anyhow::Result<(Option<Probes>, Option<crate::kernel::ebpf::Events>)>;

/// Whether the command went into the run cgroup, none where there is no run cgroup.
type Added = Option<Result<(), crate::sampling::cgroup::CgroupError>>;

/// Loads the programs (or drops a granted user's capabilities where the agent follows the tree)
/// while `root_pid` is moved into the run cgroup beside, on a thread of its own: the move waits
/// for the kernel (start-up).
fn load_beside_cgroup_add(
    args: &RunArgs,
    offsets: &mut EbpfOffsets,
    cgroup: Option<&RunCgroup>,
    root_pid: u32,
    last: bool,
    started_boot_ns: u64,
) -> (Loaded, Added) {
    std::thread::scope(|scope| {
        // Before exec, so the cgroup's totals include everything the command does.
        let adding = cgroup.and_then(|cgroup| {
            std::thread::Builder::new()
                .name("cgroup-add".into())
                .spawn_scoped(scope, move || cgroup.add(root_pid))
                .ok()
        });
        let loaded = if offsets.agent.is_some() {
            // The agent loads; a granted binary keeps none of its capabilities for the run.
            if privilege::capable_user() {
                privilege::drop_all()
                    .context("dropping capabilities: the agent follows the tree")
                    .map(|()| (None, None))
            } else {
                Ok((None, None))
            }
        } else {
            offsets
                .get(args)
                .and_then(|offsets| load_probes(args, offsets, last, started_boot_ns))
        };
        let added = match adding {
            Some(thread) => thread.join().ok(),
            None => cgroup.map(|cgroup| cgroup.add(root_pid)),
        };
        (loaded, added)
    })
}

/// The GPU monitor the recorder starts with: where kernel events follow the tree, they wait in
/// their ring (or the agent's stream) while NVML opens (15 ms on an H100, on a thread since
/// start-up began: see `GpuOpening`), and the recorder takes the monitor at its first sweep
/// after NVML opened (left in `slot`): NVML is no part of the start-up or of the follow loop.
/// Polling sees only what lives at a sweep: it takes the monitor first. (A run polled because
/// the agent refused it does not: the refusal is known once the session has started.)
fn early_gpu_monitor<'g>(
    polled: bool,
    slot: &mut Option<&'g mut GpuOpening>,
) -> Option<&'g mut crate::sampling::gpu::GpuMonitor> {
    match polled {
        true => slot.take().and_then(GpuOpening::fresh_monitor),
        false => None,
    }
}

/// The agent's answer to `asked`, its request to follow the command (sent before the command
/// runs anything): the stream of the tree's records, or, where it refused, montrace polls /proc,
/// said once; none where there is no agent.
fn agent_follows(
    args: &RunArgs,
    asked: Option<anyhow::Result<crate::follow::agent::Asked<'_>>>,
) -> anyhow::Result<Option<crate::follow::agent::Stream>> {
    // Each repetition of `--repeat` is followed by the agent (taking the connection for the
    // first left the others to polling).
    let stream = match asked.map(|asked| asked.and_then(crate::follow::agent::Asked::answer)) {
        Some(Ok(stream)) => Some(stream),
        Some(Err(err)) => {
            no_ebpf(args, &format!("{err:#}"))?;
            polling::become_subreaper()
                .context("becoming the subreaper of the command's orphans")?;
            None
        }
        None => None,
    };
    Ok(stream)
}

/// Loads and attaches the eBPF programs (when `offsets` says montrace can) for a run that started
/// at `started_boot_ns` (none of its tree is older), or makes montrace the subreaper that polling
/// needs. A capable user's capabilities go right after (before the last repetition, only the
/// effective set).
fn load_probes(
    args: &RunArgs,
    offsets: Option<&crate::kernel::ebpf::KernelBtf>,
    last: bool,
    started_boot_ns: u64,
) -> anyhow::Result<(Option<Probes>, Option<crate::kernel::ebpf::Events>)> {
    if privilege::capable_user() {
        // A repetition after the first: take up the capabilities kept for loading again.
        privilege::set_effective(true).context("raising capabilities to load eBPF")?;
    }
    let loaded = match offsets {
        Some(offsets) => session::load_probes(
            offsets,
            &crate::kernel::ebpf::Load {
                ring_buffer_bytes: args.record.ring_buffer_size,
                tracepoints: args.record.tracepoints,
                // The task iterator loads while the command starts, where montrace keeps its
                // privilege (root) rather than dropping it before the command starts.
                iter_later: !privilege::capable_user(),
                tree_born_after_ns: started_boot_ns,
                track_all: false,
            },
            args.record.quiet,
            args.require_ebpf,
        )?,
        None => None,
    };
    // An ordinary user's capabilities (the granted binary) are for loading and attaching only:
    // from here on montrace acts with the user's rights alone, and the command starts with none.
    // Before the last repetition only the effective set goes (the next one loads again).
    if privilege::capable_user() {
        if last {
            privilege::drop_all()
        } else {
            privilege::set_effective(false)
        }
        .context("dropping capabilities after loading the eBPF programs")?;
    }
    match loaded {
        Some((probes, ring)) => Ok((Some(probes), Some(ring))),
        None => {
            polling::become_subreaper()
                .context("becoming the subreaper of the command's orphans")?;
            Ok((None, None))
        }
    }
}

/// The run's cgroup (and what run.json says of it), or none, said once without `--quiet` (as
/// the GPU's notice: run.json says why either way). An ordinary user without a delegated
/// cgroup v2 subtree gets none at every run: said under `--quiet` too, the line cost a `/bin/true`
/// run through the agent 0.3 ms of wall where stderr is a pipe (its reader woken; 80
/// interleaved runs on the 2-core test machine), besides the noise.
///
/// Inside a limited cgroup that is not the top of its hierarchy (a batch job's, a slice's), a
/// run cgroup at the top would take the command out of its limits: it stays where it is. Root
/// looks at the limits before it makes anything. Without root a run cgroup can only be made in
/// the user's own delegated subtree: it is made first, and removed again where it is not below
/// the limited cgroup (a limit on montrace's own cgroup, the run cgroup made beside it); below
/// a job's or a user slice's limit it holds the command within it. Where none can be made
/// (most users without a systemd session), the limits (some 20 files, 0.26 ms of such a user's
/// start-up on the 2-core test machine) are read beside the command instead, for run.json's
/// capacity.
fn create_cgroup(started_wall_ns: i64, quiet: bool) -> (Option<RunCgroup>, run_json::CgroupReport) {
    let mut report = run_json::CgroupReport::default();
    let say = |why: &str| {
        if !quiet {
            crate::say!(
                "montrace: no cgroup for the run, so no kernel totals to compare with: {why}"
            );
        }
    };
    let confined = |limit: String| {
        format!(
            "montrace runs in a limited cgroup ({limit}); moving the command into a run cgroup \
             would lift that limit, so it stays there"
        )
    };
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if let Some(limit) = root
        .then(|| crate::sampling::capacity::confining_cgroup(None))
        .flatten()
    {
        let why = confined(limit);
        say(&why);
        report.error = Some(why);
        return (None, report);
    }
    match RunCgroup::create(&format!("run-{}-{started_wall_ns}", std::process::id())) {
        Ok(cgroup) => match (!root)
            .then(|| crate::sampling::capacity::confining_cgroup(Some(&cgroup.dirs())))
            .flatten()
        {
            None => (Some(cgroup), report),
            Some(limit) => {
                let mut why = confined(limit);
                if let Err(err) = cgroup.remove() {
                    why = format!(
                        "{why} (and the run cgroup made first could not be removed: {err})"
                    );
                }
                say(&why);
                report.error = Some(why);
                (None, report)
            }
        },
        Err(err) => {
            say(&err.to_string());
            report.error = Some(err.to_string());
            (None, report)
        }
    }
}

/// The phase-mark socket the command finds in its environment, or none, said once.
fn bind_marks() -> Option<MarkServer> {
    match MarkServer::bind() {
        Ok(server) => Some(server),
        Err(err) => {
            crate::say!("montrace: warning: no phase marks for this run: {err:#}");
            None
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    use crate::follow::end::shell_words;

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
        std::fs::write(run_json::path_in(&used), b"{}").unwrap();
        let err = create_out_dir(Some(&used), &program, 0).unwrap_err();
        assert!(matches!(err, OutDirError::NotEmpty(_)), "{err}");
        assert_eq!(std::fs::read(run_json::path_in(&used)).unwrap(), b"{}");
        let nested = tmp.path().join("a/b/c");
        assert_eq!(create_out_dir(Some(&nested), &program, 0).unwrap(), nested);
        assert!(dir_is_empty(&nested));
    }
}
