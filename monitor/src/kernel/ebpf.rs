//! The edge to the kernel: loads montrace's eBPF programs, attaches them, and hands out the ring
//! buffer and the tracked-process map. Decoding what comes out of the ring is in `decode`.
use std::{
    path::Path,
    sync::{Arc, Mutex, PoisonError},
};

use anyhow::{bail, Context as _};
use aya::{
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use monitor_common::{stat, Offsets, TaskWaits};

use crate::kernel::decode::WaitTotals;
pub use crate::store::model::{LostEvents, TrackingMode};

/// `--tracepoints`: which attachment to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TracepointChoice {
    /// BTF tracepoints, falling back to classic ones when they cannot be attached.
    Auto,
    Btf,
    Classic,
}

impl LostEvents {
    /// Events that never reached montrace (read errors lose a field, not an event).
    pub fn total(&self) -> u64 {
        self.ringbuf_full + self.track_map_full
    }
}

const PROGRAMS: [(&str, &str, &str); 4] = [
    ("fork", "sched_process_fork", "sched"),
    ("exec", "sched_process_exec", "sched"),
    ("exit", "sched_process_exit", "sched"),
    // Completes exit events at the exited thread's final switch (see monitor-ebpf's switch.rs).
    ("switch", "sched_switch", "sched"),
];

/// BTF tracepoints only: the waiting times of the tree's threads (with `sched_switch`). The
/// classic fallback has no task pointers, and leaves them unknown.
const WAIT_PROGRAMS: [(&str, &str); 2] = [
    ("wakeup", "sched_wakeup"),
    ("wakeup_new", "sched_wakeup_new"),
];

/// BTF tracepoints only, and optional: socket bytes per process (Linux 6.3 and later). Without
/// them the byte counts are unknown (null), and montrace says why once.
const NET_PROGRAMS: [(&str, &str); 2] = [
    ("send_length", "sock_send_length"),
    ("recv_length", "sock_recv_length"),
];

const TRACEFS: &str = "/sys/kernel/tracing";

/// The hash maps keyed by a pid or tid of a live task, and the most entries each may have. Each
/// is made with no more than the kernel's `pid_max` (32,768 on most machines): no more tasks
/// can live at once. The kernel initialises one bucket per entry when it makes a map, on the
/// start-up's path (65,536 took about 0.7 ms a map here).
const PID_MAPS: [(&str, u32); 3] = [
    ("TRACKED", monitor_common::MAX_TRACKED),
    ("WAITS", monitor_common::MAX_WAITING_THREADS),
    ("NET", monitor_common::MAX_NET_THREADS),
];

/// The ring buffer of lifecycle events: its map as loaded, or mapped into montrace's memory
/// ([`Events::into_ring`]). Mapping its pages takes about 0.9 ms for the default 8 MiB: `run`
/// does it once the command runs (start-up); the kernel keeps what comes meanwhile.
pub enum Events {
    Loaded(aya::maps::Map),
    Mapped(RingBuf<MapData>),
}

impl Events {
    pub fn into_ring(self) -> anyhow::Result<RingBuf<MapData>> {
        match self {
            Events::Loaded(map) => RingBuf::try_from(map).context("mapping the ring buffer"),
            Events::Mapped(ring) => Ok(ring),
        }
    }
}

/// montrace's eBPF object, built by `build.rs` (see `kernel::object` for what is changed in it
/// before it is loaded).
pub(crate) const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor"));

/// Start-up: aya 0.14's loader reads and parses the kernel's BTF (5 MB here, 4 KiB a read
/// from sysfs, 15 to 19 ms) when it is made, whether it needs it or not, and no API skips that;
/// it is the longest step before the command can start. montrace reads the BTF once more for its
/// own field offsets and for the attach subset (see [`KernelBtf`]), mapped and without an index
/// of every name (2 to 5 ms). [`preload`] makes the loader on another thread, so that the two
/// overlap; the next [`Probes::load`] takes it up. The thread: start it once the
/// forwarded signals are blocked (it inherits the mask), and as a capable user before anything
/// drops capabilities (it is joined by the load that uses it, before capabilities go).
static PRELOADED: std::sync::Mutex<Option<std::thread::JoinHandle<EbpfLoader<'static>>>> =
    std::sync::Mutex::new(None);

/// Starts making aya's loader on another thread (see [`PRELOADED`]).
pub fn preload() {
    let loader = std::thread::Builder::new()
        .name("btf-loader".into())
        .spawn(EbpfLoader::new);
    if let (Ok(loader), Ok(mut slot)) = (loader, PRELOADED.lock()) {
        *slot = Some(loader);
    }
}

/// The loader [`preload`] made, if it ran and its thread finished well.
fn take_preloaded() -> Option<EbpfLoader<'static>> {
    let taken = PRELOADED.lock().ok().and_then(|mut slot| slot.take());
    taken.and_then(|thread| thread.join().ok())
}

/// What montrace's own parse of the kernel BTF gives the loader: the field offsets its programs
/// read tasks with, and the attach subset (`btf::Btf::attach_subset`) as aya reads it: the ids of
/// the tracepoints' and the task iterator's targets, so that aya need not parse the whole BTF
/// again for them. Made on the reading thread, beside aya's own parse (start-up).
pub struct KernelBtf {
    pub offsets: Offsets,
    /// None when aya cannot read the subset (then the BTF tracepoints read the kernel's BTF).
    attach: Option<Arc<Btf>>,
}

impl KernelBtf {
    pub fn read() -> Result<KernelBtf, crate::kernel::btf::BtfError> {
        let btf = crate::kernel::btf::Btf::from_file(Path::new(crate::kernel::btf::VMLINUX_BTF))?;
        let offsets = crate::kernel::btf::kernel_offsets(&btf)?;
        let typedefs: Vec<String> = PROGRAMS
            .iter()
            .map(|(_, tracepoint, _)| *tracepoint)
            .chain(WAIT_PROGRAMS.iter().chain(&NET_PROGRAMS).map(|(_, tp)| *tp))
            .map(|tracepoint| format!("btf_trace_{tracepoint}"))
            .collect();
        let typedefs: Vec<&str> = typedefs.iter().map(String::as_str).collect();
        let attach = btf.attach_subset(&typedefs, &[TASK_ITER_TARGET])?;
        let attach = Btf::parse(&attach, aya::Endianness::default())
            .ok()
            .map(Arc::new);
        // aya probes the kernel's BPF features once, at its first load: here, beside its parse,
        // rather than in the load (start-up).
        let _ = aya::features();
        Ok(KernelBtf { offsets, attach })
    }
}

/// The kernel function the `iter/task` program attaches to.
const TASK_ITER_TARGET: &str = "bpf_iter_task";
/// The `iter/task` program's name in montrace's object.
const TASK_ITER_PROGRAM: &str = "sample_tasks";

/// How [`Probes::load`] loads.
#[derive(Clone, Copy, Debug)]
pub struct Load {
    pub ring_buffer_bytes: u32,
    pub tracepoints: TracepointChoice,
    /// The task iterator, which only the sweeps need, is loaded on a thread of its own once the
    /// others are attached, so that the command can start meanwhile (start-up: its verification
    /// is 3 to 4 ms of CPU); [`Probes::take_task_iter`] waits for it. Not where montrace drops
    /// its capabilities before the command starts: no thread of it may keep them then.
    pub iter_later: bool,
    /// `Offsets::tree_born_after_ns`: when the run started (boot ns), or 0 for a tree that is
    /// older (`attach`).
    pub tree_born_after_ns: u64,
    /// The resident agent's whole-machine mode (its flight recorder): every user process is
    /// tracked (the programs' `TRACK_ALL`); false for every run and attach.
    pub track_all: bool,
}

pub struct Probes {
    // Keeps the programs attached: dropping `Ebpf` detaches them. Shared with the thread that
    // loads the task iterator while the command starts (see [`Probes::load`]).
    _ebpf: Arc<Mutex<Ebpf>>,
    /// aya's loader, until [`Probes::free_loader`].
    loader: Option<EbpfLoader<'static>>,
    pub mode: TrackingMode,
    /// Loaded with [`Load::track_all`]: [`Probes::track`] keeps an entry the programs made, and
    /// [`Probes::untrack`] leaves every process tracked.
    track_all: bool,
    tracked: HashMap<MapData, u32, u64>,
    stats: PerCpuArray<MapData, u64>,
    /// Time spent loading and attaching.
    pub load_ms: f64,
    /// Why socket bytes are not counted, when they are not.
    pub net_note: Option<String>,
    /// The live threads' waiting times (BTF tracepoints only), until handed to the recorder.
    waits: Option<WaitsMap>,
    /// The task iterator the sweeps read the tree's figures from, until handed to the recorder;
    /// or why there is none (then the sweeps read /proc).
    task_iter: IterLoad,
}

/// The task iterator of [`Probes`]: loaded, or being loaded on a thread of its own.
enum IterLoad {
    Done(Result<TaskIter, String>),
    Loading(std::thread::JoinHandle<Result<TaskIter, String>>),
}

impl Drop for Probes {
    /// A load still under way ends before the programs go: they are detached when the last
    /// holder of `Ebpf` drops it, and that is this one.
    fn drop(&mut self) {
        drop(self.join_task_iter());
    }
}

/// The `iter/task` program's link: each [`TaskIter::sweep`] opens one pass of it and reads every
/// live thread of the tree, in binary. The link holds the program, so it outlives `Ebpf`'s
/// unloading only as long as the recorder keeps it.
pub struct TaskIter {
    link: std::os::fd::OwnedFd,
    buf: Vec<u8>,
}

impl TaskIter {
    /// Creates the iterator link of the loaded `iter/task` program (`BPF_LINK_CREATE` with
    /// `BPF_TRACE_ITER` and no target; aya keeps its own links' descriptors private, and one link
    /// must serve every sweep).
    fn link(program: &aya::programs::Iter) -> anyhow::Result<TaskIter> {
        use std::os::fd::{AsFd as _, AsRawFd as _, FromRawFd as _};
        // uapi linux/bpf.h: enum bpf_cmd BPF_LINK_CREATE, enum bpf_attach_type BPF_TRACE_ITER.
        const BPF_LINK_CREATE: libc::c_long = 28;
        const BPF_TRACE_ITER: u32 = 28;
        let prog_fd = program.fd()?.as_fd().as_raw_fd();
        // union bpf_attr's link_create: prog_fd, target_fd, attach_type, flags, then the
        // iterator's (absent) link info; the rest zero.
        let mut attr = [0u32; 32];
        attr[0] = prog_fd as u32;
        attr[2] = BPF_TRACE_ITER;
        // SAFETY: a zeroed bpf_attr of the size passed, with the link_create fields set.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_LINK_CREATE,
                attr.as_mut_ptr(),
                std::mem::size_of_val(&attr) as u32,
            )
        };
        if fd < 0 {
            bail!(
                "creating the task iterator's link: {}",
                std::io::Error::last_os_error()
            );
        }
        Ok(TaskIter {
            // SAFETY: a new descriptor the kernel just returned, owned by nothing else.
            link: unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) },
            buf: Vec::with_capacity(64 * 1024),
        })
    }

    /// One pass over the machine's tasks: every live thread of the tree, now.
    pub fn sweep(&mut self) -> std::io::Result<Vec<monitor_common::TaskSample>> {
        use std::io::Read as _;
        use std::os::fd::{AsRawFd as _, FromRawFd as _};
        const BPF_ITER_CREATE: libc::c_long = 33;
        let mut attr = [0u32; 4];
        attr[0] = self.link.as_raw_fd() as u32;
        // SAFETY: a zeroed bpf_attr with iter_create.link_fd set.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_bpf,
                BPF_ITER_CREATE,
                attr.as_mut_ptr(),
                std::mem::size_of_val(&attr) as u32,
            )
        };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: a new descriptor the kernel just returned, owned by nothing else.
        let mut file = unsafe { std::fs::File::from_raw_fd(fd as i32) };
        self.buf.clear();
        file.read_to_end(&mut self.buf)?;
        Ok(crate::kernel::decode::task_samples(&self.buf))
    }
}

/// The kernel's per-thread waiting times of the tracked threads still alive (`WAITS`), read at
/// each sweep. Reading a map through a descriptor montrace already holds needs no capability
/// (Linux 6.5 and later; before, with unprivileged BPF disabled, the read fails and the
/// per-sweep figures are left empty).
pub struct WaitsMap(HashMap<MapData, u32, TaskWaits>);

impl WaitsMap {
    /// Each process's live threads' totals, up to now: one walk of the map.
    pub fn read(&self) -> Result<std::collections::HashMap<u32, WaitTotals>, aya::maps::MapError> {
        let now = crate::host::boottime_ns();
        // A thread that exits during the walk is skipped, not an error.
        let threads: Vec<TaskWaits> = self
            .0
            .iter()
            .filter_map(|entry| match entry {
                Ok((_, waits)) => Some(Ok(waits)),
                Err(aya::maps::MapError::KeyNotFound) => None,
                Err(e) => Some(Err(e)),
            })
            .collect::<Result<_, _>>()?;
        Ok(crate::kernel::decode::waits_by_process(threads, now))
    }

    /// One thread's totals, up to now: one lookup, at the moment its process is read. None: no
    /// entry (it has not left a CPU since it was tracked, or it has exited).
    pub fn thread(&self, tid: u32) -> Result<Option<WaitTotals>, aya::maps::MapError> {
        match self.0.get(&tid, 0) {
            Ok(w) => Ok(Some(WaitTotals::of_thread(&w, crate::host::boottime_ns()))),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Probes {
    /// Loads the programs with the kernel's field offsets and attaches them (see [`Load`]).
    pub fn load(kernel: &KernelBtf, how: &Load) -> anyhow::Result<(Probes, Events)> {
        let started = std::time::Instant::now();
        let Load {
            ring_buffer_bytes,
            tracepoints: choice,
            iter_later,
            tree_born_after_ns,
            track_all,
        } = *how;
        // Leaked (a few hundred bytes a load) so that the loader that borrows them can be freed
        // on a thread of its own.
        let offsets: &'static Offsets = Box::leak(Box::new(Offsets {
            wakeup_bytes: ring_buffer_bytes / 4,
            tree_born_after_ns,
            ..kernel.offsets
        }));
        // Prepared before waiting for the loader, whose parse is the longest step (start-up).
        let object = if crate::kernel::object::allows_unpreallocated_maps(&crate::host::uname().1) {
            Some(crate::kernel::object::with_map_flags(
                OBJECT,
                &crate::kernel::object::UNPREALLOCATED_MAPS,
                crate::kernel::object::BPF_F_NO_PREALLOC,
            )?)
        } else {
            None
        };
        let tasks = crate::host::pid_max().unwrap_or(u32::MAX);
        let mut loader = take_preloaded().unwrap_or_default();
        loader
            .override_global("OFFSETS", offsets, true)
            .override_global("TRACK_ALL", if track_all { &1u32 } else { &0u32 }, true)
            .map_max_entries("EVENTS", ring_buffer_bytes);
        for (map, most) in PID_MAPS {
            loader.map_max_entries(map, most.min(tasks).max(1));
        }
        let loaded = loader.load(object.as_ref().map_or(OBJECT, |o| o.bytes()));
        let mut ebpf = loaded.context("loading montrace's eBPF programs into the kernel failed")?;

        let btf = match (&kernel.attach, choice) {
            (_, TracepointChoice::Classic) => None,
            (Some(btf), _) => Some(Arc::clone(btf)),
            (None, TracepointChoice::Btf) => Some(Arc::new(
                Btf::from_sys_fs().context("reading kernel BTF for tp_btf programs")?,
            )),
            (None, TracepointChoice::Auto) => Btf::from_sys_fs().ok().map(Arc::new),
        };
        let (mode, net_note, task_iter) = match btf {
            Some(btf) => {
                let loaded = load_btf_programs(&mut ebpf, &btf, !iter_later)?;
                match (loaded.core, choice) {
                    (Ok(()), _) => (TrackingMode::TpBtf, loaded.net.err(), loaded.task_iter),
                    (Err(err), TracepointChoice::Btf) => return Err(err),
                    (Err(btf_err), _) => {
                        // The socket programs count for the tracked tree only with the others.
                        unload_net(&mut ebpf);
                        attach_classic(&mut ebpf)
                            .with_context(|| format!("BTF tracepoints failed too ({btf_err:#})"))?;
                        (
                            TrackingMode::Tracepoint,
                            Some("the classic tracepoints do not count them".into()),
                            Err("the task iterator needs the BTF tracepoints' kernel".into()),
                        )
                    }
                }
            }
            None => {
                attach_classic(&mut ebpf)?;
                (
                    TrackingMode::Tracepoint,
                    Some("the classic tracepoints do not count them".into()),
                    Err("the task iterator needs the BTF tracepoints' kernel".into()),
                )
            }
        };
        crate::kernel::features::note_load(crate::kernel::features::Loaded {
            mode,
            net: net_note.clone(),
            task_iter: match &task_iter {
                Ok(TaskIterJob::Loaded(_)) => Some(Ok(())),
                Ok(TaskIterJob::Later(_)) => None,
                Err(why) => Some(Err(why.clone())),
            },
            // The kernels whose exit tracepoint has `group_dead` (6.16 and later) fire it before
            // exit_mm(); the programs themselves test for the address space.
            exit_peak: if kernel.offsets.exit_group_dead_arg != 0 {
                crate::kernel::features::ExitPeak::AddressSpace
            } else {
                crate::kernel::features::ExitPeak::MaxRss
            },
        });
        let events = Events::Loaded(ebpf.take_map("EVENTS").context("no EVENTS map")?);
        let tracked = HashMap::try_from(ebpf.take_map("TRACKED").context("no TRACKED map")?)?;
        let stats = PerCpuArray::try_from(ebpf.take_map("STATS").context("no STATS map")?)?;
        let waits = match mode {
            TrackingMode::TpBtf => Some(WaitsMap(HashMap::try_from(
                ebpf.take_map("WAITS").context("no WAITS map")?,
            )?)),
            _ => None,
        };
        let ebpf = Arc::new(Mutex::new(ebpf));
        let task_iter = match task_iter {
            Ok(TaskIterJob::Later(btf)) => load_task_iter_later(&ebpf, btf),
            Ok(TaskIterJob::Loaded(iter)) => IterLoad::Done(Ok(iter)),
            Err(why) => IterLoad::Done(Err(why)),
        };
        let probes = Probes {
            _ebpf: ebpf,
            loader: Some(loader),
            mode,
            track_all,
            tracked,
            stats,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            net_note,
            waits,
            task_iter,
        };
        Ok((probes, events))
    }

    /// Frees aya's loader (its copy of the kernel's BTF takes milliseconds to free) on a thread
    /// of its own: once the command runs, not while the programs load (start-up).
    pub fn free_loader(&mut self) {
        if let Some(loader) = self.loader.take() {
            dispose(loader);
        }
    }

    /// The live threads' waiting times, for the recorder's sweeps (once; None without the BTF
    /// tracepoints).
    pub fn take_waits(&mut self) -> Option<WaitsMap> {
        self.waits.take()
    }

    /// The task iterator for the recorder's sweeps (once; it waits for a load under way), or why
    /// there is none.
    pub fn take_task_iter(&mut self) -> Result<TaskIter, String> {
        let iter = self.join_task_iter();
        crate::kernel::features::note_task_iter(iter.as_ref().map(drop).map_err(Clone::clone));
        iter
    }

    /// [`Probes::take_task_iter`] without noting what it got (the drop's).
    fn join_task_iter(&mut self) -> Result<TaskIter, String> {
        match std::mem::replace(
            &mut self.task_iter,
            IterLoad::Done(Err("already taken".into())),
        ) {
            IterLoad::Done(iter) => iter,
            IterLoad::Loading(thread) => thread
                .join()
                .unwrap_or_else(|_| Err("the thread loading the task iterator failed".into())),
        }
    }

    /// Starts following `pid`: its forks, execs and exit from now on.
    pub fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        // The whole machine's programs track every process already, with its start time (which
        // an insert of 0 would lose): only a process they missed (the map full) is added.
        const BPF_NOEXIST: u64 = 1;
        if self.track_all {
            return match self.tracked.insert(pid, 0, BPF_NOEXIST) {
                Err(aya::maps::MapError::SyscallError(e))
                    if e.io_error.raw_os_error() == Some(libc::EEXIST) =>
                {
                    Ok(())
                }
                other => other.with_context(|| format!("cannot add pid {pid} to the tracked map")),
            };
        }
        self.tracked
            .insert(pid, 0, 0)
            .with_context(|| format!("cannot add pid {pid} to the tracked map"))
    }

    /// Stops following `pid` (the agent, for a client that is gone): its forks are no longer
    /// followed. A pid not in the map is no error. The whole machine's programs keep it.
    pub fn untrack(&mut self, pid: u32) {
        if !self.track_all {
            drop(self.tracked.remove(&pid));
        }
    }

    pub fn lost(&self) -> anyhow::Result<LostEvents> {
        let sum =
            |index: u32| -> anyhow::Result<u64> { Ok(self.stats.get(&index, 0)?.iter().sum()) };
        Ok(LostEvents {
            ringbuf_full: sum(stat::RINGBUF_FULL)?,
            track_map_full: sum(stat::TRACK_MAP_FULL)?,
            read_errors: sum(stat::READ_ERRORS)?,
            exits_without_final_cpu: sum(stat::PENDING_FULL)?,
        })
    }
}

/// Attaches the `tp_btf` programs with the kernel BTF `btf`.
/// Frees `value` on a thread of its own, where one can be had (start-up).
fn dispose<T: Send + 'static>(value: T) {
    let slot = std::sync::Mutex::new(Some(value));
    let spawned = std::thread::Builder::new()
        .name("dispose".into())
        .spawn(move || drop(slot));
    drop(spawned);
}

/// What [`load_btf_programs`] loaded: the tree's programs (`PROGRAMS` and `WAIT_PROGRAMS`,
/// all needed), the socket-bytes programs (optional, Linux 6.3 and later; Err says why not, and
/// `FEATURES` tells the kernel side they run) and the task iterator (optional).
struct BtfLoaded {
    core: anyhow::Result<()>,
    net: Result<(), String>,
    task_iter: Result<TaskIterJob, String>,
}

/// The task iterator after [`load_btf_programs`]: loaded, or left for [`load_task_iter_later`]
/// with the BTF to load it with.
enum TaskIterJob {
    Loaded(TaskIter),
    Later(Arc<Btf>),
}

/// Loads and links the `iter/task` program of `ebpf`, which `load_btf_programs` left out.
fn load_task_iter(ebpf: &mut Ebpf, btf: &Btf) -> anyhow::Result<TaskIter> {
    let program: &mut aya::programs::Iter = ebpf
        .program_mut(TASK_ITER_PROGRAM)
        .with_context(|| format!("no program {TASK_ITER_PROGRAM}"))?
        .try_into()?;
    load_iter(program, btf)
}

/// Loads the `iter/task` program on its BTF target and creates its link.
fn load_iter(program: &mut aya::programs::Iter, btf: &Btf) -> anyhow::Result<TaskIter> {
    program
        .load(TASK_ITER_TARGET.trim_start_matches("bpf_iter_"), btf)
        .context("loading iter/task")?;
    TaskIter::link(program)
}

/// [`load_task_iter`] on a thread of its own, which holds `ebpf` meanwhile (a panic there
/// leaves it in the poisoned mutex, not dropped); on this one where no thread can be had.
fn load_task_iter_later(ebpf: &Arc<Mutex<Ebpf>>, btf: Arc<Btf>) -> IterLoad {
    let (shared, target) = (Arc::clone(ebpf), Arc::clone(&btf));
    let thread = std::thread::Builder::new()
        .name("iter-load".into())
        .spawn(move || {
            let mut ebpf = shared.lock().unwrap_or_else(PoisonError::into_inner);
            load_task_iter(&mut ebpf, &target).map_err(|e| format!("{e:#}"))
        });
    match thread {
        Ok(thread) => IterLoad::Loading(thread),
        Err(_) => {
            let mut ebpf = ebpf.lock().unwrap_or_else(PoisonError::into_inner);
            IterLoad::Done(load_task_iter(&mut ebpf, &btf).map_err(|e| format!("{e:#}")))
        }
    }
}

/// One program to load (and attach) on its BTF target.
enum Job<'p> {
    Tracepoint {
        tracepoint: &'static str,
        core: bool,
        program: &'p mut BtfTracePoint,
    },
    TaskIter(&'p mut aya::programs::Iter),
}

/// What a [`Job`] came to.
enum Done {
    Tracepoint {
        core: bool,
        result: anyhow::Result<()>,
    },
    TaskIter(anyhow::Result<TaskIter>),
}

impl Job<'_> {
    fn run(self, btf: &Btf) -> Done {
        match self {
            Job::Tracepoint {
                tracepoint,
                core,
                program,
            } => {
                let result = program
                    .load(tracepoint, btf)
                    .with_context(|| format!("loading tp_btf/{tracepoint}"))
                    .and_then(|()| {
                        program
                            .attach()
                            .map(drop)
                            .with_context(|| format!("attaching tp_btf/{tracepoint}"))
                    });
                Done::Tracepoint { core, result }
            }
            Job::TaskIter(program) => Done::TaskIter(load_iter(program, btf)),
        }
    }
}

/// Loads and attaches every `<short>_btf` program, and the `iter/task` one with `iter_now` (else
/// it is left for [`load_task_iter_later`]), on two threads that take the next program as they
/// finish one, the longest to verify first: the kernel's verifier, most of a load, checks one
/// program at a time per caller (start-up). The other thread shares this one's credentials as
/// they are now (a capable user's raised capabilities included) and is gone when this returns.
fn load_btf_programs(ebpf: &mut Ebpf, btf: &Arc<Btf>, iter_now: bool) -> anyhow::Result<BtfLoaded> {
    // Longest first (BPF_PROG_LOAD under strace here: the task iterator 3.5 ms, the exit
    // program 2.5 ms, the others 0.5 to 1 ms each).
    const ORDER: [&str; 9] = [
        TASK_ITER_PROGRAM,
        "exit",
        "exec",
        "switch",
        "fork",
        "send_length",
        "recv_length",
        "wakeup",
        "wakeup_new",
    ];
    let core_targets = PROGRAMS
        .iter()
        .map(|(short, tracepoint, _)| (*short, *tracepoint, true));
    let net_targets = NET_PROGRAMS.iter().map(|(short, tp)| (*short, *tp, false));
    let targets: Vec<(&str, &'static str, bool)> = core_targets
        .chain(WAIT_PROGRAMS.iter().map(|(short, tp)| (*short, *tp, true)))
        .chain(net_targets)
        .collect();
    let mut jobs: Vec<(usize, Job)> = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        let rank = |short: &str| {
            ORDER
                .iter()
                .position(|o| *o == short)
                .unwrap_or(ORDER.len())
        };
        if name == TASK_ITER_PROGRAM {
            if iter_now {
                jobs.push((rank(name), Job::TaskIter(program.try_into()?)));
            }
        } else if let Some((short, tracepoint, core)) = targets
            .iter()
            .find(|(short, _, _)| name.strip_suffix("_btf") == Some(short))
        {
            jobs.push((
                rank(short),
                Job::Tracepoint {
                    tracepoint,
                    core: *core,
                    program: program.try_into()?,
                },
            ));
        }
    }
    for (short, wanted, _) in targets.iter().filter(|(_, _, core)| *core) {
        let found = jobs.iter().any(
            |(_, job)| matches!(job, Job::Tracepoint { tracepoint, .. } if tracepoint == wanted),
        );
        if !found {
            bail!("no program {short}_btf");
        }
    }
    // Popped from the end: the largest last in the Vec.
    jobs.sort_by_key(|(rank, _)| std::cmp::Reverse(*rank));
    let mut done = run_on_two_threads(jobs.into_iter().map(|(_, job)| job).collect(), btf)?;
    let mut loaded = BtfLoaded {
        core: Ok(()),
        net: Ok(()),
        task_iter: if iter_now {
            Err(format!("no program {TASK_ITER_PROGRAM}"))
        } else {
            Ok(TaskIterJob::Later(Arc::clone(btf)))
        },
    };
    // Two threads load, so the jobs finish in any order: of several failures, the one said is the
    // first by its text, the same on every load (docs/kernels.md quotes it).
    let mut core_failures = Vec::new();
    for outcome in done.drain(..) {
        match outcome {
            Done::Tracepoint { core: true, result } => {
                if let Err(err) = result {
                    core_failures.push(err);
                }
            }
            Done::Tracepoint {
                core: false,
                result,
            } => {
                if let Err(err) = result {
                    let said =
                        format!("{err:#} (the sock_*_length tracepoints need Linux 6.3 or later)");
                    if loaded.net.as_ref().err().is_none_or(|kept| said < *kept) {
                        loaded.net = Err(said);
                    }
                }
            }
            Done::TaskIter(result) => {
                loaded.task_iter = result
                    .map(TaskIterJob::Loaded)
                    .map_err(|e| format!("{e:#}"));
            }
        }
    }
    if let Some(first) = core_failures
        .into_iter()
        .min_by_key(|err| format!("{err:#}"))
    {
        loaded.core = Err(first);
    }
    let net_found = NET_PROGRAMS
        .iter()
        .all(|(short, _)| ebpf.program(&format!("{short}_btf")).is_some());
    if !net_found && loaded.net.is_ok() {
        loaded.net = Err("no socket-bytes programs in montrace's object".into());
    }
    if loaded.net.is_ok() {
        let mut features: aya::maps::Array<_, u32> =
            aya::maps::Array::try_from(ebpf.map_mut("FEATURES").context("no FEATURES map")?)?;
        features.set(0, 1, 0).context("setting FEATURES")?;
    } else {
        unload_net(ebpf);
    }
    Ok(loaded)
}

/// Runs `jobs` on this thread and one more, each taking the next from the end of the Vec as it
/// finishes one: what each did, in the order they finished. An error where a job was lost with
/// a panicked thread.
fn run_on_two_threads(jobs: Vec<Job<'_>>, btf: &Arc<Btf>) -> anyhow::Result<Vec<Done>> {
    let count = jobs.len();
    let queue = std::sync::Mutex::new(jobs);
    let work = || {
        let mut done = Vec::new();
        loop {
            let next = match queue.lock() {
                Ok(mut queue) => queue.pop(),
                Err(_) => None,
            };
            match next {
                Some(job) => done.push(job.run(btf)),
                None => return done,
            }
        }
    };
    let done = std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("bpf-load".into())
            .spawn_scoped(scope, work);
        let mut done = work();
        if let Ok(other) = other {
            done.extend(other.join().unwrap_or_default());
        }
        done
    });
    // A job lost with a panicked thread is not done.
    if done.len() != count {
        bail!("a thread loading the eBPF programs failed");
    }
    Ok(done)
}

/// Detaches and unloads the socket-bytes programs (when the others could not be attached, or
/// one of them could not).
fn unload_net(ebpf: &mut Ebpf) {
    for (short, _) in NET_PROGRAMS {
        if let Some(Ok(program)) = ebpf
            .program_mut(&format!("{short}_btf"))
            .map(<&mut BtfTracePoint>::try_from)
        {
            let _ = program.unload();
        }
    }
}

fn attach_classic(ebpf: &mut Ebpf) -> anyhow::Result<()> {
    ensure_tracefs()?;
    for (short, tracepoint, category) in PROGRAMS {
        let name = format!("{short}_tp");
        let program: &mut TracePoint = ebpf
            .program_mut(&name)
            .with_context(|| format!("no program {name}"))?
            .try_into()?;
        program
            .load()
            .with_context(|| format!("loading tracepoint/{category}/{tracepoint}"))?;
        program
            .attach(category, tracepoint)
            .with_context(|| format!("attaching tracepoint/{category}/{tracepoint}"))?;
    }
    Ok(())
}

/// Classic tracepoints are found through tracefs, which a fresh machine may not have mounted.
fn ensure_tracefs() -> anyhow::Result<()> {
    if Path::new(TRACEFS).join("events").exists()
        || Path::new("/sys/kernel/debug/tracing/events").exists()
    {
        return Ok(());
    }
    let target = std::ffi::CString::new(TRACEFS)?;
    let fstype = std::ffi::CString::new("tracefs")?;
    // SAFETY: valid NUL-terminated strings; no data argument.
    let rc = unsafe {
        libc::mount(
            fstype.as_ptr(),
            target.as_ptr(),
            fstype.as_ptr(),
            0,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        bail!(
            "tracefs is not mounted and mounting it at {TRACEFS} failed: {}",
            std::io::Error::last_os_error()
        );
    }
    Ok(())
}
