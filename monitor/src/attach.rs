//! `montrace attach PID`: follows a process montrace did not start, and every descendant it has
//! now (found in /proc) or creates later (through eBPF), until the tree is gone, `--duration`
//! has passed, or Ctrl-C. The run directory is the same as `run`'s.
//!
//! For a process that was already running, the exit figures count the threads that exit while
//! montrace watches; threads that ended before the attach are in its /proc samples only.
//!
//! Where a resident agent answers (`montrace agent`, found as `run` finds it), the agent follows
//! the tree instead, with no privilege here: it checks the process as it checks `run`'s (through
//! a pidfd; for an ordinary user, a process of their own they could ptrace) and tracks it with
//! the descendants it has now that the user may follow; this process seeds the tree from /proc
//! as it does with programs of its own.
use std::{ffi::OsString, path::Path};

use anyhow::Context as _;

use crate::{
    cli::AttachArgs,
    commands::{CommandError, Exit},
    follow::launch,
    follow::{
        end,
        session::{self, Root, Session},
        Source,
    },
    host,
    kernel::decode::{self, KernelEvent},
    kernel::ebpf::Probes,
    kernel::privilege,
    run,
    store::run_json,
    store::summary_json,
    tracking::polling::Poller,
};

/// Follows the process `args.pid` (its arguments checked by `commands::attach`): 0, 124 after a
/// limit, or why montrace could not attach.
pub fn attach(args: AttachArgs) -> Exit {
    let started = (host::boottime_ns(), host::realtime_ns());
    let pid = args.pid;
    let no_process = || {
        CommandError::usage_line(format!(
            "montrace: there is no process {pid} (it may have exited): nothing to attach to"
        ))
    };
    let Ok(comm) = crate::host::read_small_file(format!("/proc/{pid}/comm")) else {
        return Err(no_process());
    };
    // A handle on the process from before any check: whatever is checked and then followed is
    // this process, never another that took its pid in between (see `Target`).
    let Some(target) = Target::open(pid) else {
        return Err(no_process());
    };
    if let Err(why) = may_attach(pid).and_then(|()| target.still_there()) {
        return Err(CommandError::usage(why));
    }
    // Room for the sampler's open /proc handles.
    host::raise_open_files_limit();
    // Before any thread exists (the BTF preload and NVML start some): montrace receives the
    // forwarded signals through a signalfd.
    launch::block_forwarded_signals().context("blocking signals")?;
    let agent = run::find_agent()?;
    let offsets = if agent.is_some() {
        None
    } else {
        ebpf_offsets(pid)
    };
    let name = OsString::from(format!("attach-{}", comm.trim()));
    let out_dir = match run::create_out_dir(args.record.out.as_deref(), &name, started.1) {
        Ok(dir) => dir,
        Err(err @ run::OutDirError::NotEmpty(_)) => return Err(CommandError::usage(err)),
        Err(run::OutDirError::Other(err)) => return Err(err.into()),
    };
    let feed = (offsets.as_ref(), agent);
    let result = follow_attached(&args, &target, feed, &out_dir, started);
    if result.is_err() && run::dir_is_empty(&out_dir) {
        let _ = crate::store::userfs::remove_dir(&out_dir);
    }
    Ok(result?)
}

/// The process an attach follows: a pidfd opened before any check, and its start time.
pub(crate) struct Target {
    handle: crate::follow::pidfd::Handle,
    pid: u32,
    start_boot_ns: u64,
}

impl Target {
    /// None when there is no such process.
    fn open(pid: u32) -> Option<Target> {
        let start_boot_ns = crate::sampling::procstat::proc_start_boot_ns(pid).ok()?;
        let handle = crate::follow::pidfd::Handle::open(pid, start_boot_ns)?;
        Some(Target {
            handle,
            pid,
            start_boot_ns,
        })
    }

    /// Whether the process the handle holds is still alive and still has its pid: while it
    /// lives, its pid is no other's, so what was checked or tracked under that pid since the
    /// handle was opened was this process.
    fn still_there(&self) -> Result<(), String> {
        let alive = self.handle.signal(0).is_ok();
        if alive && crate::follow::pidfd::same_process(self.pid, self.start_boot_ns) {
            Ok(())
        } else {
            Err(format!(
                "process {} exited while montrace was attaching to it: nothing recorded",
                self.pid
            ))
        }
    }
}

/// An ordinary user may follow only the processes they could ptrace themselves: every one of the
/// target's user and group ids (real, effective, saved) is theirs, and the kernel's own ptrace
/// check (`ptrace_may_access` in attach mode, as opening /proc/PID/mem makes it: a non-dumpable
/// process such as ssh-agent, one with capabilities the user lacks, and Yama's ptrace_scope all
/// count) lets them. Root may follow any.
fn may_attach(pid: u32) -> Result<(), String> {
    // SAFETY: getuid/getgid have no preconditions.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    if uid == 0 {
        return Ok(());
    }
    let status = crate::host::read_small_file(format!("/proc/{pid}/status"))
        .map_err(|e| format!("cannot read /proc/{pid}/status: {e}"))?;
    let (uids, gids) =
        status_ids(&status).ok_or_else(|| format!("malformed /proc/{pid}/status"))?;
    if !(uids.iter().all(|&u| u == uid) && gids.iter().all(|&g| g == gid)) {
        return Err(format!(
            "process {pid} runs as uid {} / gid {}: without root, montrace attaches only to your \
             own processes (those you could trace with a debugger); use `sudo montrace attach \
             {pid}`",
            uids[1], gids[1]
        ));
    }
    match std::fs::File::open(format!("/proc/{pid}/mem")) {
        Ok(_) => Ok(()),
        Err(err)
            if err.raw_os_error() == Some(libc::EACCES)
                || err.raw_os_error() == Some(libc::EPERM) =>
        {
            Err(format!(
                "process {pid} is yours, but the kernel would not let a debugger attach to it \
                 ({err}: it is not dumpable, like ssh-agent or a program that changed identity, \
                 holds capabilities you lack, or kernel.yama.ptrace_scope forbids it): montrace \
                 attaches only to what you could trace; use `sudo montrace attach {pid}`"
            ))
        }
        Err(err) => Err(format!("cannot check process {pid}: {err}")),
    }
}

/// The real, effective and saved user and group ids of a /proc/PID/status text.
fn status_ids(status: &str) -> Option<([u32; 3], [u32; 3])> {
    let ids = |key: &str| -> Option<[u32; 3]> {
        let line = status.lines().find_map(|l| l.strip_prefix(key))?;
        let mut fields = line.split_whitespace().map(|f| f.parse::<u32>().ok());
        Some([fields.next()??, fields.next()??, fields.next()??])
    };
    Some((ids("Uid:")?, ids("Gid:")?))
}

/// The kernel's field offsets, or None when attach must poll /proc (no privilege, no BTF): said
/// once.
fn ebpf_offsets(pid: u32) -> Option<crate::kernel::ebpf::KernelBtf> {
    let why_not = if !host::can_load_ebpf() {
        format!(
            "exact tracking needs root or the granted binary (`sudo montrace setcap`), e.g. \
             `sudo montrace attach {pid}`"
        )
    } else {
        // aya's own BTF parses go on beside montrace's (start-up).
        crate::kernel::ebpf::preload();
        match crate::kernel::ebpf::KernelBtf::read() {
            Ok(kernel) => return Some(kernel),
            Err(err) => err.to_string(),
        }
    };
    crate::say!(
        "montrace: warning: no eBPF ({why_not}); following the tree by polling /proc instead: \
         processes that live shorter than --interval may be missed (tracking_mode \"polling\")"
    );
    None
}

/// The mark socket of an attach: at `--mark-socket`, else in a private directory, said once.
fn bind_marks(args: &AttachArgs) -> Option<crate::follow::marks::MarkServer> {
    let bound = match &args.mark_socket {
        Some(path) => {
            crate::follow::marks::MarkServer::bind_at(path, crate::store::userfs::owner())
        }
        None => crate::follow::marks::MarkServer::bind(),
    };
    match bound {
        Ok(server) => {
            if args.mark_socket.is_none() && !args.record.quiet {
                crate::say!(
                    "montrace: phase marks: send them to {} ({}=that path montrace mark ...)",
                    server.path().display(),
                    crate::follow::marks::SOCKET_ENV
                );
            }
            Some(server)
        }
        Err(err) => {
            crate::say!("montrace: warning: no phase marks for this attach: {err:#}");
            None
        }
    }
}

/// Loads and attaches the programs where `offsets` says montrace can (a failure falls back to
/// polling, said once); a capable user's capabilities go right after.
fn load_probes(
    args: &AttachArgs,
    offsets: Option<&crate::kernel::ebpf::KernelBtf>,
) -> anyhow::Result<(Option<Probes>, Option<crate::kernel::ebpf::Events>)> {
    let loaded = match offsets {
        Some(offsets) => session::load_probes(
            offsets,
            &crate::kernel::ebpf::Load {
                ring_buffer_bytes: args.record.ring_buffer_size,
                tracepoints: args.record.tracepoints,
                iter_later: false,
                // The tree is older than montrace.
                tree_born_after_ns: 0,
                track_all: false,
            },
            args.record.quiet,
            false,
        )?,
        None => None,
    };
    // The granted binary's capabilities were for loading and attaching only.
    if privilege::capable_user() {
        privilege::drop_all().context("dropping capabilities after loading the eBPF programs")?;
    }
    Ok(match loaded {
        Some((probes, ring)) => (Some(probes), Some(ring)),
        None => (None, None),
    })
}

/// The tree as it is now: the process and its descendants, found in /proc (events made from it,
/// the root first) and put in the kernel's tracked map. A fork between a scan and the map insert
/// would escape, so scan again until a scan finds nobody new; from then on the kernel follows
/// every fork (or, polling, `poller` goes on from here).
fn find_tree(
    pid: u32,
    poller: &mut Poller,
    mut probes: Option<&mut Probes>,
) -> anyhow::Result<Vec<KernelEvent>> {
    let mut root = poller
        .adopt(pid, host::boottime_ns())
        .with_context(|| format!("process {pid} exited before montrace could attach"))?;
    if let Some(probes) = probes.as_deref_mut() {
        probes.track(pid)?;
    }
    // A found process's events are stamped with the moment the kernel follows it: every child it
    // forks from then on has its own fork event, and a child that started before it may have
    // come and gone unseen (it "vanished"). The order of the two times is what tells them apart.
    *root.time_ns_mut() = host::boottime_ns();
    let mut existing = vec![root];
    loop {
        let (mut found, _) = poller.scan(host::boottime_ns());
        if found.is_empty() {
            return Ok(existing);
        }
        for event in &found {
            if let (KernelEvent::Fork { pid, .. }, Some(probes)) = (event, probes.as_deref_mut()) {
                probes.track(*pid)?;
            }
        }
        let followed = host::boottime_ns();
        for event in &mut found {
            *event.time_ns_mut() = followed;
        }
        existing.extend(found);
    }
}

/// Where an attach's kernel events come from.
enum Feed {
    /// Its own programs' ring.
    Ring(aya::maps::RingBuf<aya::maps::MapData>),
    /// The agent's stream of the tree's records.
    Agent(crate::follow::agent::Stream),
    /// None: the poller that found the tree follows it.
    Polling,
}

impl Feed {
    /// The programs loaded here (`offsets`), or the agent asked to follow the tree of `pid`
    /// (before the tree is looked for in /proc: what forks from then on is in its stream).
    fn open(
        args: &AttachArgs,
        (offsets, agent): (
            Option<&crate::kernel::ebpf::KernelBtf>,
            Option<crate::follow::agent::Connection>,
        ),
    ) -> anyhow::Result<(Option<Probes>, Feed)> {
        let (mut probes, events) = load_probes(args, offsets)?;
        if let Some(agent) = agent {
            let stream = agent.follow_tree(args.pid)?;
            if stream.skipped > 0 {
                crate::say!(
                    "montrace: warning: the montrace agent does not follow {} processes of the \
                     tree (and their descendants): they are not yours, or their image is \
                     set-uid; they are sampled from /proc only",
                    stream.skipped
                );
            }
            return Ok((None, Feed::Agent(stream)));
        }
        if let Some(probes) = &mut probes {
            probes.free_loader();
        }
        let feed = match events {
            Some(events) => Feed::Ring(events.into_ring()?),
            None => Feed::Polling,
        };
        Ok((probes, feed))
    }

    /// The events reported so far, decoded.
    fn reported(&mut self) -> anyhow::Result<Vec<KernelEvent>> {
        let page_size = host::page_size();
        let mut reported = Vec::new();
        match self {
            Feed::Ring(ring) => {
                while let Some(item) = ring.next() {
                    reported.push(decode::decode(&item, page_size)?);
                }
            }
            Feed::Agent(stream) => {
                let mut records = Vec::new();
                stream.take_in(|record| records.push(record.to_vec()))?;
                for record in &records {
                    reported.push(decode::decode(record, page_size)?);
                }
            }
            Feed::Polling => {}
        }
        Ok(reported)
    }

    fn into_source(self, poller: Poller) -> Source {
        match self {
            Feed::Ring(ring) => Source::Ebpf(crate::kernel::ebpf::Events::Mapped(ring)),
            Feed::Agent(stream) => Source::Agent(stream),
            Feed::Polling => Source::Polling(poller),
        }
    }
}

/// The recording of an attach: the programs loaded (or the agent asked), the tree found and
/// checked once more, then followed by a [`Session`]; summary.json holds it as one repetition.
fn follow_attached(
    args: &AttachArgs,
    target: &Target,
    feed: (
        Option<&crate::kernel::ebpf::KernelBtf>,
        Option<crate::follow::agent::Connection>,
    ),
    out_dir: &Path,
    started: (u64, i64),
) -> anyhow::Result<i32> {
    let pid = args.pid;
    let options = args.record.recording();
    let mut gpu = end::open_gpu(&options)?;
    let mut stream = crate::follow::stream::Stream::from_options(
        args.record.stream.as_deref(),
        args.record.stream_fd,
    )?;
    let (mut probes, mut feed) = Feed::open(args, feed)?;
    let mut poller = Poller::new();
    let existing = find_tree(pid, &mut poller, probes.as_mut())?;
    // Tracked now: the process that was checked must still be the one under this pid (and still
    // pass the check), or the kernel is following a stranger.
    if let Err(why) = target.still_there().and_then(|()| may_attach(pid)) {
        anyhow::bail!(why);
    }

    let config = session::Config {
        options: &options,
        out_dir,
        root: Root::Attached { pid },
        linger: None,
        stop_after: args.duration,
        started,
        last: true,
        print_summary: !args.record.quiet,
    };
    let mut session = Session::start(config, probes, gpu.monitor_mut(), stream.as_mut())?;
    let (argv, executable) = match &existing[0] {
        KernelEvent::Exec { argv, filename, .. } => (argv.clone(), filename.clone()),
        _ => (Vec::new(), String::new()),
    };
    // What the kernel reported while the tree was being scanned: the forks of tracked processes
    // among it. A child forked then is in those events from its birth, and was often found in
    // /proc too: it is recorded once, from the kernel's events.
    let reported = feed.reported()?;
    let recorder = session.recorder();
    for event in &seen_only_in_proc(existing, &reported) {
        recorder.on_event(event);
        // Should its fork event come late after all, the kernel's record takes over.
        recorder.tracker.seen_in_proc(event.pid());
    }
    for event in &reported {
        recorder.on_event(event);
    }

    // Phase marks: the processes were started without montrace's socket in their
    // environment, so the socket is where the user asked (or said on stderr).
    let marks = bind_marks(args);
    // Without eBPF the poller that found the tree goes on following it.
    let source = feed.into_source(poller);
    let followed = session.follow(source, marks)?;
    // summary.json as the recording's own files.
    let durability = followed.durability();
    let info = followed.finish(
        &gpu,
        stream.as_mut(),
        session::Ending {
            argv: argv.clone(),
            executable,
            cgroup: run_json::CgroupReport {
                error: Some(
                    "attach: the processes were already running; montrace does not move them \
                     into a cgroup"
                        .into(),
                ),
                ..run_json::CgroupReport::default()
            },
        },
    );
    let repetition: summary_json::Repetition = info.repetition(".");
    end::write_summary(
        (out_dir, durability),
        argv,
        0,
        vec![repetition],
        info.limit_breach.clone(),
        Vec::new(),
        (info.labels.clone(), info.context.clone()),
    );
    Ok(info.exit_status)
}

/// The events made from /proc for the tree found at the attach, less those of the processes
/// whose fork is among the kernel's `reported` events (same pid, and a start time /proc's clock
/// ticks cannot tell apart): the kernel tracked those from their fork, so its own events tell
/// their whole life, and the /proc ones would make a second row of the same process.
fn seen_only_in_proc(seeded: Vec<KernelEvent>, reported: &[KernelEvent]) -> Vec<KernelEvent> {
    let forked: Vec<(u32, u64)> = reported
        .iter()
        .filter_map(|e| match e {
            KernelEvent::Fork { pid, start_ns, .. } => Some((*pid, *start_ns)),
            _ => None,
        })
        .collect();
    seeded
        .into_iter()
        .filter(|e| {
            let start_ns = match e {
                KernelEvent::Fork { start_ns, .. }
                | KernelEvent::Exec { start_ns, .. }
                | KernelEvent::Exit { start_ns, .. } => *start_ns,
            };
            !forked
                .iter()
                .any(|&(pid, start)| pid == e.pid() && host::same_start_ns(start_ns, start))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Root only (clone3's set_tid): run by `cargo xtask test` with the other `live_` tests.
    #[test]
    #[ignore = "needs root: it hands a pid out again through clone3's set_tid"]
    fn live_an_attach_target_whose_pid_was_reused_is_refused() {
        let mut child = std::process::Command::new("sleep")
            .arg("60")
            .spawn()
            .unwrap();
        let pid = child.id();
        let target = Target::open(pid).unwrap();
        assert_eq!(target.still_there(), Ok(()));
        child.kill().unwrap();
        child.wait().unwrap();
        // Another process takes the pid.
        let stranger = ::tests::pids::spawn_with_pid(pid, &["/bin/sleep", "60"])
            .expect("the pid could not be handed out again");
        let refused = target.still_there();
        drop(stranger);
        assert!(refused
            .unwrap_err()
            .contains("exited while montrace was attaching"));
    }

    #[test]
    fn status_ids_reads_real_effective_and_saved() {
        let status = "Name:\tsh\nUid:\t1000\t0\t0\t0\nGid:\t1000\t1000\t1000\t1000\n";
        assert_eq!(status_ids(status), Some(([1000, 0, 0], [1000, 1000, 1000])));
        assert_eq!(status_ids("Name:\tsh\n"), None);
        // This test process may attach to itself, whoever runs it.
        assert_eq!(may_attach(std::process::id()), Ok(()));
    }

    const MS: u64 = 1_000_000;

    fn fork(pid: u32, start_ns: u64, parent_pid: u32) -> KernelEvent {
        KernelEvent::Fork {
            time_ns: start_ns,
            pid,
            start_ns,
            parent_pid,
            comm: "sh".into(),
        }
    }

    fn exec(pid: u32, start_ns: u64) -> KernelEvent {
        KernelEvent::Exec {
            time_ns: start_ns + MS,
            pid,
            start_ns,
            old_tid: pid,
            comm: "sleep".into(),
            filename: "/usr/bin/sleep".into(),
            argv: vec!["sleep".into(), "1".into()],
            argv_truncated: false,
        }
    }

    #[test]
    fn a_child_the_kernel_saw_fork_is_not_seeded_from_proc_again() {
        // /proc start times are whole clock ticks; the kernel's are exact.
        let tick = 1_000_000_000 / procfs::ticks_per_second();
        let seeded = vec![
            exec(100, 50 * tick), // the attached process
            fork(101, 60 * tick, 100),
            exec(101, 60 * tick), // alive before the attach: only /proc knows its fork
            fork(102, 70 * tick, 100),
            exec(102, 70 * tick),      // forked while the tree was scanned
            fork(103, 80 * tick, 100), // pid 103 of another start: a different process
        ];
        let reported = vec![
            fork(102, 70 * tick + tick / 3, 100),
            exec(102, 70 * tick + tick / 3),
            fork(103, 90 * tick, 100),
        ];
        let kept: Vec<(u32, u64)> = seen_only_in_proc(seeded, &reported)
            .iter()
            .map(|e| match e {
                KernelEvent::Fork { pid, start_ns, .. }
                | KernelEvent::Exec { pid, start_ns, .. }
                | KernelEvent::Exit { pid, start_ns, .. } => (*pid, *start_ns / tick),
            })
            .collect();
        assert_eq!(kept, [(100, 50), (101, 60), (101, 60), (103, 80)]);
    }
}
