//! The edge to the kernel: loads montrace's eBPF programs, attaches them, and hands out the ring
//! buffer and the tracked-process map. Decoding what comes out of the ring is in `decode`.
use std::path::Path;

use anyhow::{bail, Context as _};
use aya::{
    maps::{HashMap, MapData, PerCpuArray, RingBuf},
    programs::{BtfTracePoint, TracePoint},
    Btf, Ebpf, EbpfLoader,
};
use monitor_common::{stat, Offsets, TaskWaits};

use crate::kernel::decode::WaitTotals;
use serde::Serialize;

/// How montrace's programs are attached to the scheduler's process tracepoints.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum TrackingMode {
    /// BTF-enabled tracepoints (`tp_btf`): typed arguments, no tracefs needed.
    TpBtf,
    /// Classic tracepoints through tracefs (mounted when missing).
    Tracepoint,
    /// No eBPF: the tree is found by polling /proc (see `polling`).
    Polling,
}

/// `--tracepoints`: which attachment to use.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum TracepointChoice {
    /// BTF tracepoints, falling back to classic ones when they cannot be attached.
    Auto,
    Btf,
    Classic,
}

/// Kernel-side counters of what could not be delivered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(default)]
pub struct LostEvents {
    /// Events dropped because the ring buffer was full.
    pub ringbuf_full: u64,
    /// New processes that could not be tracked because the tracked map was full.
    pub track_map_full: u64,
    /// Kernel reads that failed (some field of an event is zero).
    pub read_errors: u64,
    /// Exits sent without waiting for their final context switch (a full pending map): their
    /// CPU time lacks the last slice since the thread's last tick.
    pub exits_without_final_cpu: u64,
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

/// montrace's eBPF object, built by `build.rs` (see `kernel::object` for what is changed in it
/// before it is loaded).
pub(crate) const OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/monitor"));

/// Start-up: aya's loader reads and parses the kernel's BTF (5 MB here, 9 to 24 ms a parse)
/// when it is made, and montrace parses it once more for its own field offsets and for the
/// attach subset (see [`KernelBtf`]). [`preload`] makes the loader on another thread, so that
/// the two parses overlap; the next [`Probes::load`] takes it up. The thread: start it once the
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
/// read tasks with, and the attach subset (`btf::Btf::attach_subset`): the ids of the
/// tracepoints' and the task iterator's targets, so that aya need not parse the whole BTF again
/// for them.
pub struct KernelBtf {
    pub offsets: Offsets,
    attach: Vec<u8>,
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
        Ok(KernelBtf { offsets, attach })
    }
}

/// The kernel function the `iter/task` program attaches to.
const TASK_ITER_TARGET: &str = "bpf_iter_task";

pub struct Probes {
    // Keeps the programs attached: dropping `Ebpf` detaches them.
    _ebpf: Ebpf,
    pub mode: TrackingMode,
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
    task_iter: Result<TaskIter, String>,
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
        let now = crate::sampling::host::boottime_ns();
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
            Ok(w) => Ok(Some(WaitTotals::of_thread(
                &w,
                crate::sampling::host::boottime_ns(),
            ))),
            Err(aya::maps::MapError::KeyNotFound) => Ok(None),
            Err(e) => Err(e),
        }
    }
}

impl Probes {
    /// Loads the programs with the kernel's field offsets and attaches them.
    pub fn load(
        kernel: &KernelBtf,
        ring_buffer_bytes: u32,
        choice: TracepointChoice,
    ) -> anyhow::Result<(Probes, RingBuf<MapData>)> {
        let started = std::time::Instant::now();
        let offsets = Offsets {
            wakeup_bytes: ring_buffer_bytes / 4,
            ..kernel.offsets
        };
        let btf = Btf::parse(&kernel.attach, aya::Endianness::default()).ok();
        let mut loader = take_preloaded().unwrap_or_default();
        let object =
            if crate::kernel::object::allows_unpreallocated_maps(&crate::sampling::host::uname().1)
            {
                Some(crate::kernel::object::with_map_flags(
                    OBJECT,
                    &crate::kernel::object::UNPREALLOCATED_MAPS,
                    crate::kernel::object::BPF_F_NO_PREALLOC,
                )?)
            } else {
                None
            };
        let mut ebpf = loader
            .override_global("OFFSETS", &offsets, true)
            .map_max_entries("EVENTS", ring_buffer_bytes)
            .load(object.as_ref().map_or(OBJECT, |o| o.bytes()))
            .context("loading montrace's eBPF programs into the kernel failed")?;

        let btf = match (btf, choice) {
            (_, TracepointChoice::Classic) => None,
            (Some(btf), _) => Some(btf),
            (None, TracepointChoice::Btf) => {
                Some(Btf::from_sys_fs().context("reading kernel BTF for tp_btf programs")?)
            }
            (None, TracepointChoice::Auto) => Btf::from_sys_fs().ok(),
        };
        let mode = match (choice, &btf) {
            (TracepointChoice::Btf, Some(btf)) => {
                attach_btf(&mut ebpf, btf)?;
                TrackingMode::TpBtf
            }
            (TracepointChoice::Btf, None) => unreachable!("read above or failed"),
            (TracepointChoice::Classic, _) | (TracepointChoice::Auto, None) => {
                attach_classic(&mut ebpf)?;
                TrackingMode::Tracepoint
            }
            (TracepointChoice::Auto, Some(btf)) => match attach_btf(&mut ebpf, btf) {
                Ok(()) => TrackingMode::TpBtf,
                Err(btf_err) => {
                    attach_classic(&mut ebpf)
                        .with_context(|| format!("BTF tracepoints failed too ({btf_err:#})"))?;
                    TrackingMode::Tracepoint
                }
            },
        };

        // Socket bytes: BTF tracepoints of Linux 6.3 and later, optional.
        let net_note = match (&btf, mode) {
            (Some(btf), TrackingMode::TpBtf) => attach_net(&mut ebpf, btf)
                .err()
                .map(|e| format!("{e:#} (the sock_*_length tracepoints need Linux 6.3 or later)")),
            _ => Some("the classic tracepoints do not count them".into()),
        };
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").context("no EVENTS map")?)?;
        let tracked = HashMap::try_from(ebpf.take_map("TRACKED").context("no TRACKED map")?)?;
        let stats = PerCpuArray::try_from(ebpf.take_map("STATS").context("no STATS map")?)?;
        let task_iter = match (&btf, mode) {
            (Some(btf), TrackingMode::TpBtf) => {
                load_task_iter(&mut ebpf, btf).map_err(|e| format!("{e:#}"))
            }
            _ => Err("the task iterator needs the BTF tracepoints' kernel".into()),
        };
        let waits = match mode {
            TrackingMode::TpBtf => Some(WaitsMap(HashMap::try_from(
                ebpf.take_map("WAITS").context("no WAITS map")?,
            )?)),
            _ => None,
        };
        let probes = Probes {
            _ebpf: ebpf,
            mode,
            tracked,
            stats,
            load_ms: started.elapsed().as_secs_f64() * 1e3,
            net_note,
            waits,
            task_iter,
        };
        Ok((probes, ring))
    }

    /// The live threads' waiting times, for the recorder's sweeps (once; None without the BTF
    /// tracepoints).
    pub fn take_waits(&mut self) -> Option<WaitsMap> {
        self.waits.take()
    }

    /// The task iterator for the recorder's sweeps (once), or why there is none.
    pub fn take_task_iter(&mut self) -> Result<TaskIter, String> {
        std::mem::replace(&mut self.task_iter, Err("already taken".into()))
    }

    /// Starts following `pid`: its forks, execs and exit from now on.
    pub fn track(&mut self, pid: u32) -> anyhow::Result<()> {
        self.tracked
            .insert(pid, 0, 0)
            .with_context(|| format!("cannot add pid {pid} to the tracked map"))
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
fn attach_btf(ebpf: &mut Ebpf, btf: &Btf) -> anyhow::Result<()> {
    let names = PROGRAMS
        .iter()
        .map(|(short, tracepoint, _)| (*short, *tracepoint));
    load_btf_programs(ebpf, btf, &names.chain(WAIT_PROGRAMS).collect::<Vec<_>>())
}

/// Loads and attaches the `<short>_btf` programs on their tracepoints, half of them on another
/// thread: the kernel's verifier, most of a load, checks one program at a time per caller
/// (start-up). The thread shares this one's credentials as they are now (a capable user's
/// raised capabilities included) and is gone when this returns.
fn load_btf_programs(ebpf: &mut Ebpf, btf: &Btf, targets: &[(&str, &str)]) -> anyhow::Result<()> {
    let mut programs: Vec<(&str, &mut BtfTracePoint)> = Vec::new();
    for (name, program) in ebpf.programs_mut() {
        if let Some((_, tracepoint)) = targets
            .iter()
            .find(|(short, _)| name.strip_suffix("_btf") == Some(short))
        {
            programs.push((tracepoint, program.try_into()?));
        }
    }
    if let Some((short, _)) = targets
        .iter()
        .find(|(_, tp)| !programs.iter().any(|(found, _)| found == tp))
    {
        bail!("no program {short}_btf");
    }
    let load = |programs: &mut [(&str, &mut BtfTracePoint)]| -> anyhow::Result<()> {
        for (tracepoint, program) in programs {
            program
                .load(tracepoint, btf)
                .with_context(|| format!("loading tp_btf/{tracepoint}"))?;
            program
                .attach()
                .with_context(|| format!("attaching tp_btf/{tracepoint}"))?;
        }
        Ok(())
    };
    let half = programs.len() / 2;
    let (mine, theirs) = programs.split_at_mut(half);
    let theirs = std::sync::Mutex::new(theirs);
    let load_theirs = || match theirs.lock() {
        Ok(mut theirs) => load(&mut theirs),
        Err(_) => bail!("the loading thread panicked"),
    };
    std::thread::scope(|scope| {
        let other = std::thread::Builder::new()
            .name("bpf-load".into())
            .spawn_scoped(scope, load_theirs);
        let mine = load(mine);
        let theirs = match other {
            Ok(thread) => thread
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("the loading thread panicked"))),
            // No thread to spare: load them here.
            Err(_) => load_theirs(),
        };
        mine.and(theirs)
    })
}

/// Loads the `iter/task` program (Linux 5.8 and later) and creates its link.
fn load_task_iter(ebpf: &mut Ebpf, btf: &Btf) -> anyhow::Result<TaskIter> {
    let program: &mut aya::programs::Iter = ebpf
        .program_mut("sample_tasks")
        .context("no program sample_tasks")?
        .try_into()?;
    program
        .load(TASK_ITER_TARGET.trim_start_matches("bpf_iter_"), btf)
        .context("loading iter/task")?;
    TaskIter::link(program)
}

/// Attaches the socket-bytes programs and tells the kernel side they run (`FEATURES`); Err says
/// why not (a kernel before 6.3 has no such tracepoints).
fn attach_net(ebpf: &mut Ebpf, btf: &Btf) -> anyhow::Result<()> {
    load_btf_programs(ebpf, btf, &NET_PROGRAMS)?;
    let mut features: aya::maps::Array<_, u32> =
        aya::maps::Array::try_from(ebpf.map_mut("FEATURES").context("no FEATURES map")?)?;
    features.set(0, 1, 0).context("setting FEATURES")?;
    Ok(())
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
