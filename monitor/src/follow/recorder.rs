//! The recorder: where a run's data goes. Kernel events (or, without eBPF, events synthesized
//! from /proc) and /proc sweeps come in; rows go out to the crash-safe tables as they are made,
//! and the running totals that run.json, the summary and `--limit` need are kept up to date.
//!
//! Recording never ends the run: when a write fails (a full disk, a removed directory), the
//! recorder says so once, writes nothing more (what reached the disk stays readable), and goes on
//! following the tree, so that montrace still supervises the command to its end and exits with
//! its status. A panic inside a recorder call ([`Recorder::guarded`]) stops recording likewise.
use std::{collections::HashMap, path::Path, time::Duration};

/// Longest time USS/PSS/swap of a process whose RSS did not move are repeated without reading
/// smaps_rollup again, where processes of the tree started, exec'd or exited since the last read:
/// its pages' sharing changes when other processes come and go.
const SMAPS_MAX_AGE_NS: i64 = 2_000_000_000;
/// The same where the tree's processes stayed as they were since the last read: only processes
/// outside the tree move the sharing then. A tree of 200 idle processes at 10 Hz spent more than
/// a quarter of montrace's CPU re-reading smaps_rollup every 2 s (a `perf` profile, 2026-11-25).
const SMAPS_MAX_AGE_STEADY_NS: i64 = 10_000_000_000;

/// Whether a process's smaps_rollup, last read at `read_at` (wall ns) when its RSS was
/// `read_rss`, is read again at `now`, its RSS being `rss` and the tree having last changed at
/// `tree_changed` (see `SMAPS_MAX_AGE_NS`). Where the tree's memory figure is its PSS
/// (`pss_counts`: no run cgroup), at once when the tree changed since: a fork halves the PSS of
/// the pages its child shares without moving the parent's RSS, and a parent's PSS from before
/// the fork beside its child's would count those pages one and a half times.
fn smaps_due(
    read_rss: u64,
    read_at: i64,
    rss: u64,
    now: i64,
    tree_changed: i64,
    pss_counts: bool,
) -> bool {
    if pss_counts && tree_changed > read_at {
        return true;
    }
    let max_age = if tree_changed > read_at {
        SMAPS_MAX_AGE_NS
    } else {
        SMAPS_MAX_AGE_STEADY_NS
    };
    read_rss != rss || now - read_at > max_age
}

/// Whether a sweep reads a process's smaps_rollup, its address space being `image` at `now`:
/// always where none was read before or the address space is not the one last read (see
/// `SmapsImage::same_as`), else by `smaps_due`.
///
/// Also always where the sharing of its pages changed since (`sharing_changed`: a fork, exec
/// or exit in its fork family, `tree_memory::ForkFamilies`): a parent's PSS from before its fork beside its child's, read
/// after, counted the pages the child shares one and a half times (539 MiB for a 359 MiB tree).
fn smaps_wanted(
    cached: Option<&tree_memory::SmapsSeen>,
    image: &tree_memory::SmapsImage,
    now: i64,
    tree_changed: i64,
    sharing_changed: Option<i64>,
    pss_counts: bool,
) -> bool {
    cached.is_none_or(|seen| {
        !seen.image.same_as(image)
            || sharing_changed.is_some_and(|changed| changed > seen.read_at)
            || smaps_due(
                seen.image.rss_bytes,
                seen.read_at,
                image.rss_bytes,
                now,
                tree_changed,
                pss_counts,
            )
    })
}

use crate::{
    follow::end::{GpuOpened, GpuOpening, NVML_STILL_OPENING},
    follow::limits,
    host,
    kernel::decode::{self, KernelEvent, WaitTotals},
    sampling::gpu::{GpuMonitor, GpuState, GpuSummary},
    sampling::rates,
    sampling::sampler::{
        self,
        tree_memory::{self, SweepMemory, TreeMemorySource},
        HandleCache, MemoryDetail, ProcReader, ProcessHandle, ReadError, SmapsReading,
        SystemReading,
    },
    sampling::sweep::{self, KernelSweep, SweepWaits},
    store::records::SampleRecord,
    store::run_json,
    store::writer,
    store::Durability,
    tracking::tracker::Tracker,
};

/// One table's closing (its parts merged, its file written, synced and renamed into place).
type Closing = Box<dyn FnOnce() -> Result<(), writer::WriteError> + Send>;

/// Runs every closing (all of them, whatever fails) and returns the first error. The first goes
/// to `closer` where there is one. The rest run in parallel, each on a thread of its own but the
/// first, on this one, so that the work of large tables and the disk's waits overlap (finishing
/// is on the command's critical path); otherwise one after the other here: for a short run's
/// tables (a few rows, no parts) starting the threads cost more than it saved, 0.5 to 1.1 ms of
/// a `/bin/true` run with the static (musl) build, whose threads start slower, and nothing
/// either way with glibc's (40 interleaved runs through the agent on the 2-core test machine).
fn close_tables(
    closings: Vec<Closing>,
    in_parallel: bool,
    closer: Option<Closer>,
) -> Result<(), writer::WriteError> {
    let mut closings = closings.into_iter();
    let handed = closer.and_then(|closer| closings.next().map(|close| closer.hand(close)));
    let result = match in_parallel {
        false => {
            // Every one, whatever fails before it.
            let mut result = Ok(());
            for close in closings {
                let closed = close();
                result = result.and(closed);
            }
            result
        }
        true => std::thread::scope(|scope| {
            let here = closings.next();
            let threads: Vec<_> = closings.map(|close| scope.spawn(close)).collect();
            let mut result = here.map_or(Ok(()), |close| close());
            for thread in threads {
                let closed = thread.join().unwrap_or_else(|_| Err(panicked()));
                result = result.and(closed);
            }
            result
        }),
    };
    match handed {
        Some(handed) => handed.wait().and(result),
        None => result,
    }
}

/// The closings of the five tables every run has. The first goes to the closer: the processes
/// table, then the marks, and only then `processes.parts/`, whose removal holds the run
/// directory's lock while it waits for the disk (see [`Closer`]), by when the main thread has
/// written most of its files.
fn table_closings(
    (processes, events, samples, system, marks): (
        writer::ProcessTable,
        writer::EventTable,
        writer::SampleTable,
        writer::SystemTable,
        writer::MarkTable,
    ),
    durability: Durability,
) -> Vec<Closing> {
    vec![
        Box::new(move || {
            let processes = processes.finish_leaving_parts(durability);
            let marks = marks.finish_with(durability).map(drop);
            let (_, left) = processes?;
            marks.and(left.remove())
        }),
        Box::new(move || events.finish_with(durability).map(drop)),
        Box::new(move || samples.finish_with(durability).map(drop)),
        Box::new(move || system.finish_with(durability).map(drop)),
    ]
}

fn panicked() -> writer::WriteError {
    writer::WriteError::Panicked("closing a table".into())
}

/// A thread started while the command runs that makes the small tables' final writers ahead
/// ([`writer::small_writer`]: otherwise 0.13 ms of the end's CPU, and work on this thread before
/// a `/bin/true` had ended), then waits for the run's end, when it closes the processes table
/// (the largest of a short run) and the marks table beside this thread's closing of the rest:
/// the other core is free by then. Removing `processes.parts` waits for the disk where the
/// filesystem discards freed blocks at once (ext4 mounted with `discard` frees the directory's
/// block with a synchronous discard: 130 of its 170 µs here), holding the run directory's lock
/// meanwhile, which every file made or renamed there waits for: it comes last, after the marks.
/// A thread started at the end cost about what it saved (`close_tables`); started beforehand it
/// takes a `/bin/true` run's end from 1.21 to 0.80 ms and 1.26 to 0.88 ms (phase timestamps, 30
/// runs each way, twice, through the agent on the 2-core test machine).
pub struct Closer {
    /// The writers made ahead, one for each schema given to [`Closer::start`], in order.
    ready: std::sync::mpsc::Receiver<Vec<Option<writer::ReadyWriter>>>,
    closing: std::sync::mpsc::SyncSender<Closing>,
    closed: std::sync::mpsc::Receiver<Result<(), writer::WriteError>>,
}

/// A closing handed to a [`Closer`].
struct Handed(Result<std::sync::mpsc::Receiver<Result<(), writer::WriteError>>, Closing>);

impl Closer {
    /// Starts the thread, which makes a small file's writer for each of `schemas`; none where
    /// it cannot start (then the end makes them, and closes every table, on this thread).
    pub fn start(schemas: Vec<arrow_schema::SchemaRef>) -> Option<Closer> {
        let (ready_tx, ready) = std::sync::mpsc::sync_channel(1);
        let (closing, to_close) = std::sync::mpsc::sync_channel::<Closing>(1);
        let (closed_tx, closed) = std::sync::mpsc::sync_channel(1);
        crate::kernel::privilege::spawn_without_capabilities("montrace-close", move || {
            let writers = schemas.iter().map(writer::small_writer).collect();
            let _ = ready_tx.send(writers);
            // For the end (run.json's capacity), beside the command rather than before it.
            crate::sampling::capacity::read_limits();
            // Ends without work when the closer is dropped (a recording that failed).
            if let Ok(close) = to_close.recv() {
                let _ = closed_tx.send(close());
            }
        })
        .ok()?;
        Some(Closer {
            ready,
            closing,
            closed,
        })
    }

    /// The writers made ahead, waiting for them where the thread is still at it; none where it
    /// has gone.
    fn ready_writers(&self) -> Vec<Option<writer::ReadyWriter>> {
        self.ready.recv().unwrap_or_default()
    }

    /// Gives `close` to the thread, or back where the thread has gone.
    fn hand(self, close: Closing) -> Handed {
        match self.closing.send(close) {
            Ok(()) => Handed(Ok(self.closed)),
            Err(std::sync::mpsc::SendError(close)) => Handed(Err(close)),
        }
    }
}

impl Handed {
    /// How the closing ended, done here where the thread had gone.
    fn wait(self) -> Result<(), writer::WriteError> {
        match self.0 {
            Ok(closed) => closed.recv().unwrap_or_else(|_| Err(panicked())),
            Err(close) => close(),
        }
    }
}

/// Everything recorded during a run: the tree, the tables on disk, and the state rates need.
/// Kernel events and /proc sweeps go in; rows go out to crash-safe tables as they are made.
pub struct Recorder<'g> {
    pub tracker: Tracker,
    events: writer::EventTable,
    processes: writer::ProcessTable,
    samples: writer::SampleTable,
    system: writer::SystemTable,
    marks: writer::MarkTable,
    /// GPU monitoring, when a GPU can be monitored (borrowed for one recording, so `--repeat`
    /// keeps one NVML session); its tables exist only then.
    gpu: Option<&'g mut GpuMonitor>,
    gpu_table: Option<writer::GpuTable>,
    gpu_processes: Option<writer::GpuProcessTable>,
    /// Why a monitor handed over late could not be recorded (see [`Recorder::set_gpu`]).
    gpu_unrecorded: Option<String>,
    /// Closes the processes table beside the others at the end, once following has begun.
    closer: Option<Closer>,
    /// GPU monitoring still opening on its thread, taken at the first sweep after it opened
    /// ([`Recorder::set_gpu_opening`]), and the run directory its tables go to.
    gpu_opening: Option<(&'g mut GpuOpening, std::path::PathBuf)>,
    reader: ProcReader,
    /// /proc/PID of each live process, open from one sweep to the next.
    handles: HandleCache<ProcessHandle>,
    detail: MemoryDetail,
    /// Processes that ended lately: pid -> (start time, end time), so a phase mark from a
    /// process that exited right after sending it still finds its process.
    ended: HashMap<u32, (i64, Option<i64>)>,
    /// The last smaps_rollup figures of each live process, with the address space they describe
    /// and when they were read: they are read again when that address space changed (RSS moved,
    /// an exec, sharing its parent's ended), or after `SMAPS_MAX_AGE_NS` (the tree changed
    /// since; `SMAPS_MAX_AGE_STEADY_NS` where it did not).
    smaps: HashMap<(u32, i64), tree_memory::SmapsSeen>,
    /// When a process of the tree last started, exec'd or exited (wall ns).
    tree_changed_ns: i64,
    /// The tree's fork families, and when each one's sharing of pages last changed.
    families: tree_memory::ForkFamilies,
    /// Last sample of each live process, keyed by (pid, start time).
    previous: HashMap<(u32, i64), rates::Previous>,
    previous_system: Option<SystemReading>,
    totals: run_json::TreeTotals,
    /// Each live process's CPU (user, system) to count from, and at its last sample: what a
    /// process that ends without exit figures (still running at the end, its exit lost) used
    /// while recorded. It counts from zero, except a process already running when the recording
    /// began (attach's tree), whose CPU before is not the recording's: from its first sample.
    cpu_seen: HashMap<(u32, i64), CpuSeen>,
    /// When the recording began, and the processes handed over with the tracker (`run`'s
    /// command, held before its exec: all its CPU is the recording's).
    began_ns: i64,
    handed_over: Vec<(u32, i64)>,
    memory_peaks: run_json::TreeMemoryPeaks,
    sample_rows: u64,
    /// The tree's memory at the last sweep, each memory image once (see `memory_source`): what
    /// `--limit rss` checks.
    last_sweep_rss: Option<u64>,
    /// Where the tree's memory figure comes from: the run cgroup's accounting where one exists
    /// (`resident`), else the sum of PSS (or RSS) over the tree's address spaces.
    memory_source: TreeMemorySource,
    resident: Option<crate::sampling::cgroup::ResidentReader>,
    /// Sum of CPU% over the tree at the last sweep.
    last_sweep_cpu_percent: Option<f64>,
    page_size: u64,
    root_pid: u32,
    exec_time_boot_ns: Option<u64>,
    /// Why recording stopped, once it has: no row is written after that.
    failure: Option<String>,
    /// A recorder call panicked: its state cannot be trusted, so it is not called again.
    broken: bool,
    /// Ring-buffer records that could not be decoded (said once).
    bad_records: u64,
    /// `--stream`: the run as it goes, one JSON line at a time.
    stream: Option<&'g mut crate::follow::stream::Stream>,
    /// The command's first exec was streamed (it starts it: it has no fork event).
    root_streamed: bool,
    created: std::time::Instant,
    /// What 100 % of CPU and memory is for this run (a container's limits, or the host): read
    /// when first needed (a `--stream` sweep's line, the end), not before the command starts;
    /// the closer's thread reads the limits beside the command (`capacity::read_limits`).
    capacity: Option<crate::sampling::capacity::Capacity>,
    /// Every ended process, as the critical-path analysis needs it.
    spans: Vec<crate::analysis::critical::Span>,
    /// The tree's busy processes between sweeps, from every sample row, since the command's
    /// exec (since the recorder began, for `attach`): run.json `time.serial_share`.
    load: crate::analysis::critical::Load,
    /// The live threads' waiting times in the kernel (BTF tracepoints), read at each sweep.
    waits: Option<crate::kernel::ebpf::WaitsMap>,
    /// `--otlp`: the exporter, the run's attributes, and the processes ended since the last
    /// sweep, whose spans go with the next one.
    otlp: Option<(
        crate::fleet::otlp::Exporter,
        crate::fleet::otlp::RunAttributes,
    )>,
    ended_spans: Vec<crate::store::records::ProcessRecord>,
    /// montrace's task iterator, which the sweeps read the tree's figures from (None: /proc).
    task_iter: Option<crate::kernel::ebpf::TaskIter>,
    /// A v2 run cgroup's directory, whose stall totals are read at each sweep, and the last
    /// reading with its time.
    pressure: Option<std::path::PathBuf>,
    previous_stalls: Option<(i64, crate::sampling::sampler::Stalls)>,
}

impl<'g> Recorder<'g> {
    /// What the tree uses now, for `--limit`: CPU of exited processes (exact) plus the last
    /// sample of each live one.
    /// What the live status line shows.
    pub fn live_status(&self, elapsed: Duration) -> crate::follow::live::Status {
        crate::follow::live::Status {
            elapsed,
            live: self.tracker.live_count(),
            started: self.tracker.processes_started(),
            cpu_percent: self.last_sweep_cpu_percent,
            rss_bytes: self.last_sweep_rss,
            gpu_memory_bytes: self.gpu.as_ref().and_then(|g| g.last_tree_memory_bytes()),
        }
    }

    pub fn usage(&self, elapsed: Duration) -> limits::Usage {
        let live_cpu: u64 = self.previous.values().map(|p| p.cpu_total_ns).sum();
        limits::Usage {
            tree_rss_bytes: self.last_sweep_rss,
            tree_cpu_ns: self.totals.cpu_user_ns + self.totals.cpu_system_ns + live_cpu,
            processes_started: self.tracker.processes_started() as u64,
            elapsed,
            tree_gpu_memory_bytes: self.gpu.as_ref().and_then(|g| g.last_tree_memory_bytes()),
        }
    }

    pub fn create(
        out_dir: &Path,
        tracker: Tracker,
        root_pid: u32,
        detail: MemoryDetail,
        gpu: Option<&'g mut GpuMonitor>,
        stream: Option<&'g mut crate::follow::stream::Stream>,
    ) -> anyhow::Result<Recorder<'g>> {
        let handed_over = tracker.live_processes();
        let mut recorder = Recorder {
            tracker,
            cpu_seen: HashMap::new(),
            began_ns: host::realtime_ns(),
            handed_over,
            events: writer::PartedTable::events(out_dir)?,
            processes: writer::ProcessTable::processes(out_dir)?,
            samples: writer::PartedTable::samples(out_dir)?,
            system: writer::PartedTable::system(out_dir)?,
            marks: writer::PartedTable::marks(out_dir)?,
            gpu_table: None,
            gpu_processes: None,
            gpu_unrecorded: None,
            closer: None,
            gpu_opening: None,
            gpu: None,
            reader: ProcReader::new(),
            handles: HandleCache::new(sampler::handle_capacity(host::open_files_limit())),
            detail,
            previous: HashMap::new(),
            smaps: HashMap::new(),
            tree_changed_ns: 0,
            families: Default::default(),
            ended: HashMap::new(),
            previous_system: None,
            totals: run_json::TreeTotals::default(),
            memory_peaks: run_json::TreeMemoryPeaks::default(),
            sample_rows: 0,
            last_sweep_rss: None,
            memory_source: memory_source_without_cgroup(detail),
            resident: None,
            last_sweep_cpu_percent: None,
            page_size: host::page_size(),
            root_pid,
            exec_time_boot_ns: None,
            failure: None,
            broken: false,
            bad_records: 0,
            stream,
            root_streamed: false,
            created: std::time::Instant::now(),
            capacity: None,
            spans: Vec::new(),
            load: crate::analysis::critical::Load::new(host::realtime_ns()),
            waits: None,
            task_iter: None,
            otlp: None,
            ended_spans: Vec::new(),
            pressure: None,
            previous_stalls: None,
        };
        // GPU tables where a monitor is given, made as for one handed over later: a failure
        // here fails the start.
        recorder.set_gpu(gpu, out_dir)?;
        Ok(recorder)
    }

    /// Sends lines to `--stream`, if given.
    fn stream_lines(&mut self, lines: impl IntoIterator<Item = crate::follow::stream::Line>) {
        if let Some(stream) = self.stream.as_deref_mut() {
            lines.into_iter().for_each(|line| stream.send(&line));
        }
    }

    /// A `--limit` was crossed: its line in `--stream`.
    pub fn stream_breach(&mut self, breach: &crate::store::summary_json::LimitBreach) {
        self.stream_lines([crate::follow::stream::Line::Limit {
            time: breach.time.clone(),
            limit: breach.limit.clone(),
            threshold: breach.threshold,
            value: breach.value,
        }]);
    }

    /// Why recording stopped, if it did.
    pub fn failure(&self) -> Option<&str> {
        self.failure.as_deref()
    }

    /// A recorder call panicked: only the command's own end is waited for now.
    pub fn is_broken(&self) -> bool {
        self.broken
    }

    /// Stops recording (the first reason is kept and said once); the tree is still followed.
    pub fn stop_recording(&mut self, why: &str) {
        if self.failure.is_none() {
            crate::say!(
                "montrace: error: recording stopped: {why}. What was written so far stays in the \
                 run directory; montrace goes on supervising the command and exits with its status"
            );
            self.failure = Some(why.to_owned());
        }
    }

    /// Runs `f` (a call into the recorder from the run loop), catching a panic: that stops
    /// recording for good, and None is returned, as it is for every call after it.
    pub fn guarded<T>(&mut self, f: impl FnOnce(&mut Self) -> T) -> Option<T> {
        if self.broken {
            return None;
        }
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(self))) {
            Ok(value) => Some(value),
            Err(panic) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "unknown".into());
                self.broken = true;
                self.stop_recording(&format!("internal error (a panic: {what})"));
                None
            }
        }
    }

    /// One write into the tables, unless recording has stopped; a failure stops it.
    fn write(&mut self, f: impl FnOnce(&mut Self) -> Result<(), writer::WriteError>) {
        if self.failure.is_some() {
            return;
        }
        if let Err(err) = f(self) {
            self.stop_recording(&err.to_string());
        }
    }

    /// One ring-buffer record: the tree changes, an event row is written, and a process that
    /// ended leaves its exit figures as its last sample.
    /// One ring buffer record. Unlike [`Recorder::on_event`], ended processes are not stored
    /// yet: the caller stores them once the batch it drains is taken in
    /// ([`Recorder::store_finished`]), so that a thread's exit event that comes just after its
    /// process's (their final context switches can come in either order) still adds its figures
    /// to the process (see `Tracker::late_thread_exit`).
    pub fn on_record(&mut self, bytes: &[u8]) {
        match decode::decode(bytes, self.page_size) {
            Ok(event) => self.apply(&event),
            Err(err) => {
                self.bad_records += 1;
                if self.bad_records == 1 {
                    crate::say!("montrace: warning: an event from the kernel was skipped: {err}");
                }
            }
        }
    }

    /// One lifecycle event, from the kernel or synthesized by polling.
    /// One lifecycle event, and the processes it ended stored.
    pub fn on_event(&mut self, event: &KernelEvent) {
        self.apply(event);
        self.store_finished()
    }

    fn apply(&mut self, event: &KernelEvent) {
        let mut command_exec = false;
        if let KernelEvent::Exec { pid, time_ns, .. } = event {
            if *pid == self.root_pid && self.exec_time_boot_ns.is_none() {
                self.exec_time_boot_ns = Some(*time_ns);
                command_exec = true;
            }
        }
        let row = self.tracker.apply(event);
        if row.kind != crate::store::records::EventKind::ThreadExit {
            self.tree_changed_ns = self.tree_changed_ns.max(row.time_ns);
        }
        if self.detail == MemoryDetail::Full {
            match event {
                KernelEvent::Fork {
                    pid, parent_pid, ..
                } => self.families.fork(*pid, *parent_pid, row.time_ns),
                KernelEvent::Exec { pid, .. } => self.families.exec(*pid, row.time_ns),
                KernelEvent::Exit {
                    pid,
                    whole_process: true,
                    ..
                } => self.families.exit(*pid, row.time_ns),
                KernelEvent::Exit { .. } => {}
            }
        }
        if command_exec {
            // The command's wall time starts here: the load with it.
            self.load = crate::analysis::critical::Load::new(row.time_ns);
        }
        if let Some(figures) = self.tracker.take_last_exit() {
            let previous = self.previous.remove(&(row.pid, row.start_time_ns));
            let since = previous.as_ref().map_or(row.start_time_ns, |p| p.time_ns);
            let exit = rates::exit_sample(
                row.pid,
                &figures,
                row.time_ns,
                row.start_time_ns,
                previous.as_ref(),
            );
            add_to_load(&mut self.load, &exit, since, exit.time_ns);
            self.write(|r| r.samples.push(exit));
            self.sample_rows += 1;
        }
        if self.stream.is_some() {
            let first = row.pid == self.root_pid && !self.root_streamed;
            if first && row.kind == crate::store::records::EventKind::Exec {
                self.root_streamed = true;
            }
            let lines = crate::follow::stream::Line::of_event(&row, self.root_pid, first);
            self.stream_lines(lines);
        }
        self.write(|r| r.events.push(row));
    }

    pub fn store_finished(&mut self) {
        for record in self.tracker.take_finished() {
            self.previous.remove(&(record.pid, record.start_time_ns));
            self.smaps.remove(&(record.pid, record.start_time_ns));
            self.handles.remove((record.pid, record.start_time_ns));
            self.ended
                .insert(record.pid, (record.start_time_ns, record.end_time_ns));
            let seen = self.cpu_seen.remove(&(record.pid, record.start_time_ns));
            add_to_totals(&mut self.totals, &record, seen);
            if let (Some(gpu), Some(end)) = (self.gpu.as_deref_mut(), record.end_time_ns) {
                // Its accounting figures (when the driver keeps them) come at a later sweep.
                gpu.on_exit(record.pid, record.start_time_ns, end);
            }
            self.spans.push(span_of(&record));
            if self.otlp.is_some() {
                self.ended_spans.push(record.clone());
            }
            self.write(|r| r.processes.push(record));
        }
    }

    /// Hands the recorder an OTLP exporter: each sweep's metrics and the spans of the processes
    /// that ended go to it.
    pub fn set_otlp(
        &mut self,
        exporter: crate::fleet::otlp::Exporter,
        run: crate::fleet::otlp::RunAttributes,
    ) {
        self.otlp = Some((exporter, run));
    }

    /// Sends what ended since the last call, and this sweep's metrics when given.
    fn export(&mut self, sweep: Option<&[crate::store::records::SampleRecord]>) {
        let Some((exporter, run)) = &mut self.otlp else {
            return;
        };
        if let Some(sweep) = sweep {
            let rows: Vec<_> = sweep
                .iter()
                .filter_map(|s| Some((self.tracker.live_record(s.pid)?, s)))
                .collect();
            exporter.send_metrics(&crate::fleet::otlp::metrics_request(run, &rows));
        }
        if !self.ended_spans.is_empty() {
            exporter.send_spans(&crate::fleet::otlp::spans_request(run, &self.ended_spans));
            self.ended_spans.clear();
        }
    }

    /// Hands the recorder montrace's task iterator: sweeps then read the tree's figures from it
    /// (descriptors and smaps_rollup still from /proc).
    pub fn set_task_iter(&mut self, iter: Option<crate::kernel::ebpf::TaskIter>) {
        self.task_iter = iter;
    }

    /// Hands the recorder GPU monitoring (at its creation, or after: `run` opens NVML beside the
    /// start-up and hands it over once NVML has opened): its tables are created in `out_dir`
    /// now, both or neither. An error leaves the recording without GPU data, and run.json's
    /// `gpu` says why.
    pub fn set_gpu(
        &mut self,
        gpu: Option<&'g mut GpuMonitor>,
        out_dir: &Path,
    ) -> anyhow::Result<()> {
        if gpu.is_some() {
            let tables = writer::PartedTable::gpu(out_dir).and_then(|devices| {
                writer::PartedTable::gpu_processes(out_dir).map(|processes| (devices, processes))
            });
            match tables {
                Ok((devices, processes)) => {
                    (self.gpu_table, self.gpu_processes) = (Some(devices), Some(processes));
                }
                Err(err) => {
                    self.gpu_unrecorded = Some(format!("its tables could not be created: {err}"));
                    return Err(err.into());
                }
            }
        }
        self.gpu = gpu;
        Ok(())
    }

    /// Starts the [`Closer`], while the command starts (called as following begins; its thread
    /// and what it makes ahead then cost the end nothing).
    pub fn start_closer(&mut self) {
        if self.closer.is_none() {
            self.closer = Closer::start(vec![
                self.processes.schema().clone(),
                self.events.schema().clone(),
                self.samples.schema().clone(),
                self.system.schema().clone(),
                self.marks.schema().clone(),
            ]);
        }
    }

    /// Hands the recorder GPU monitoring that is still opening (`run` opens NVML beside the
    /// start-up, see [`GpuOpening`]): each sweep takes it once it has opened, without waiting,
    /// and creates its tables in `out_dir` then. A tree done before it opened has no GPU data,
    /// and run.json says why ([`NVML_STILL_OPENING`]).
    pub fn set_gpu_opening(&mut self, opening: &'g mut GpuOpening, out_dir: &Path) {
        self.gpu_opening = Some((opening, out_dir.to_path_buf()));
        self.take_opened_gpu();
    }

    /// What tells that the GPU monitoring handed over still opening has opened (the follow loop
    /// sweeps then); None where there is none.
    pub fn gpu_opened(&self) -> Option<std::sync::Arc<GpuOpened>> {
        self.gpu_opening
            .as_ref()
            .and_then(|(opening, _)| opening.opened())
    }

    /// Takes the monitor of [`Recorder::gpu_opening`] if NVML has opened; a monitor from an
    /// earlier repetition starts from nothing.
    fn take_opened_gpu(&mut self) {
        let opened = self
            .gpu_opening
            .as_mut()
            .is_some_and(|(opening, _)| opening.ready().is_some());
        let Some((opening, out_dir)) = self.gpu_opening.take_if(|_| opened) else {
            return;
        };
        if let Err(err) = self.set_gpu(opening.fresh_monitor(), &out_dir) {
            crate::say!("montrace: warning: no GPU data: {err:#}");
        }
    }

    /// Hands the recorder the run cgroup's directory, whose stall totals system rows then carry.
    pub fn set_pressure(&mut self, dir: Option<std::path::PathBuf>) {
        self.pressure = dir;
    }

    /// Hands the recorder the run cgroup's memory accounting: the tree's memory figure (and the
    /// `rss` limit) then comes from it, each page counted once whoever maps it.
    pub fn set_resident(&mut self, reader: Option<crate::sampling::cgroup::ResidentReader>) {
        self.memory_source = match reader {
            Some(_) => TreeMemorySource::Cgroup,
            None => memory_source_without_cgroup(self.detail),
        };
        self.resident = reader;
    }

    /// The live processes that run in their parent's address space (a vfork child before its
    /// exec, any CLONE_VM child), by pid, with the parent's pid. Asked before the sweep reads
    /// anything: a child that execs between this and its reading then shows its new, own image,
    /// which is left out (a small undercount), where asking after the reading would find it
    /// exec'd and count the shared image twice. Only a process that has not exec'd since its
    /// fork can share its parent's address space (an exec always makes a new one), so others
    /// cost no syscall.
    fn sharing_parents(&self) -> HashMap<u32, u32> {
        let mut shares = HashMap::new();
        for (pid, _) in self.tracker.live_processes() {
            let Some(record) = self.tracker.live_record(pid) else {
                continue;
            };
            let Some(parent) = record.parent_pid.filter(|_| record.exec_count == 0) else {
                continue;
            };
            if self.tracker.live_record(parent).is_some()
                && tree_memory::same_address_space(pid, parent) == Some(true)
            {
                shares.insert(pid, parent);
            }
        }
        shares
    }

    /// The sweep's memory summed over the tree's address spaces: a process that shares its
    /// parent's (`shares`, from [`Recorder::sharing_parents`]) adds nothing.
    fn sweep_memory(
        &self,
        sweep: &[crate::store::records::SampleRecord],
        shares: &HashMap<u32, u32>,
    ) -> SweepMemory {
        let index: HashMap<u32, usize> =
            sweep.iter().enumerate().map(|(i, s)| (s.pid, i)).collect();
        let parents: Vec<Option<usize>> = sweep
            .iter()
            .map(|s| index.get(shares.get(&s.pid)?).copied())
            .collect();
        let spaces = tree_memory::address_spaces(&parents, |_, _| Some(true));
        let members: Vec<tree_memory::Member> = sweep
            .iter()
            .map(|s| tree_memory::Member {
                rss: s.rss_bytes,
                uss: s.uss_bytes,
                pss: s.pss_bytes,
            })
            .collect();
        tree_memory::sum_once(&spaces, &members)
    }

    /// The tree's memory figure for this sweep, by `memory_source`. A run cgroup that cannot be
    /// read is said once and left for the sums over address spaces.
    fn tree_memory_figure(&mut self, sums: &SweepMemory) -> Option<u64> {
        if let Some(reader) = &self.resident {
            match reader.read() {
                Ok(bytes) => return Some(bytes),
                Err(err) => {
                    self.memory_source = memory_source_without_cgroup(self.detail);
                    crate::say!(
                        "montrace: warning: the run cgroup's memory cannot be read ({err}); the \
                         tree's memory is the sum of {} over its address spaces from now on",
                        if self.memory_source == TreeMemorySource::Pss {
                            "PSS"
                        } else {
                            "RSS"
                        }
                    );
                    self.resident = None;
                }
            }
        }
        sums.figure(self.memory_source, None)
    }

    /// Hands the recorder the kernel's per-thread waiting times, so that samples carry them.
    pub fn set_waits(&mut self, waits: Option<crate::kernel::ebpf::WaitsMap>) {
        self.waits = waits;
    }

    /// Now, on the clock of the kernel's events (the wall clock as the run began, advanced by
    /// the boot clock): a sweep's rows, the GPUs' and the exit rows keep their order however the
    /// wall clock is slewed or stepped meanwhile.
    fn now(&self) -> i64 {
        self.tracker.clock().wall(host::boottime_ns())
    }

    /// One sweep: every live process of the tree and the system, stamped with one time.
    pub fn sample(&mut self) {
        self.take_opened_gpu();
        let clock = self.tracker.clock();
        let now = self.now();
        self.load.sweep(now);
        // Rows reach back one interval, or a few for a process left unread: a run of days
        // keeps 256 to 512 intervals, not one per sweep.
        self.load.fold_older(256);
        let shares = self.sharing_parents();
        let kernel = self.kernel_sweep();
        let mut waits = SweepWaits::default();
        let mut sweep = Vec::new();
        for key in self.tracker.live_processes() {
            let at = SweepAt {
                now,
                boot_to_wall_ns: clock.boot_to_wall_ns,
                shares: &shares,
                kernel: kernel.as_ref(),
            };
            if let Some(sample) = self.sample_process(key, &at, &mut waits) {
                sweep.push(sample);
            }
        }
        self.handles.end_sweep();
        self.end_sweep(sweep, &shares, now);
    }

    /// The whole tree's figures in one binary read, where montrace's task iterator runs; a
    /// failed read is said once, and the sweeps read /proc from then on.
    fn kernel_sweep(&mut self) -> Option<KernelSweep> {
        match KernelSweep::read(self.task_iter.as_mut()?) {
            Ok(kernel) => Some(kernel),
            Err(err) => {
                crate::say!(
                    "montrace: warning: montrace's task iterator cannot be read ({err}); the \
                     sweeps read /proc from now on"
                );
                self.task_iter = None;
                None
            }
        }
    }

    /// One live process's row of this sweep, with what the next sweep needs kept; None where it
    /// is gone, a zombie, or no longer the tree's (its pid reused).
    fn sample_process(
        &mut self,
        key: (u32, i64),
        at: &SweepAt<'_>,
        waits: &mut SweepWaits,
    ) -> Option<SampleRecord> {
        let (pid, start_time_ns) = key;
        let now = at.now;
        let cached = self.smaps.get(&key).copied();
        let full = self.detail == MemoryDetail::Full;
        let start_boot_ns = (start_time_ns - at.boot_to_wall_ns).max(0) as u64;
        let tree_changed_ns = self.tree_changed_ns;
        let pss_counts = self.memory_source == TreeMemorySource::Pss;
        let sharing_changed = self.families.changed_at(pid);
        // The address space as this sweep sees it, by the RSS just read.
        let image = |rss_bytes| tree_memory::SmapsImage {
            rss_bytes,
            exec_count: self.tracker.live_record(pid).map_or(0, |r| r.exec_count),
            shares_with: at.shares.get(&pid).copied(),
        };
        // What `want_smaps` answered, if the reader asked (it does not for a process with
        // no address space): cached figures stand for this sweep only where it said no.
        let asked = std::cell::Cell::new(None);
        let want_smaps = |rss| {
            let want = full
                && smaps_wanted(
                    cached.as_ref(),
                    &image(rss),
                    now,
                    tree_changed_ns,
                    sharing_changed,
                    pss_counts,
                );
            asked.set(Some(want));
            want
        };
        let from_kernel = at.kernel.and_then(|k| k.of(pid));
        // When the CPU figure was read, on the clock of the kernel's events: the iterator's
        // read of the process, or the moment before /proc/PID/stat (the first file read) is
        // opened. A lower bound, never later than the process's exit, so that its exit row
        // comes after this one even when the sweep is preempted between a read and a clock.
        let measured = at.boot_to_wall_ns
            + from_kernel.map_or_else(host::boottime_ns, |live| live.read_ns) as i64;
        let tracker = &self.tracker;
        let reader = &mut self.reader;
        let reading = match self.handles.take(key) {
            Some(handle) => Ok(handle),
            None => reader.open_process(pid),
        }
        .and_then(|mut handle| {
            let reading = reader.read_merged(
                &mut handle,
                from_kernel,
                || tracker.exited_threads(pid),
                start_boot_ns,
                want_smaps,
            )?;
            Ok((handle, reading))
        });
        let (handle, mut reading) = match reading {
            Ok(read) => read,
            // It exited since the last drain; its exit event brings its last figures.
            Err(ReadError::Gone(_)) => return None,
            Err(err) => {
                crate::say!("montrace: warning: {err}");
                return None;
            }
        };
        // A zombie has exited: its figures are final, and its exit event (sent at its last
        // context switch, which can come a moment after /proc shows it dead, and reaches the
        // ring buffer later still) brings them exactly. A row read from the zombie would be
        // stamped after the exit, so the exit row, which must be the process's last, would
        // land before it (and show no CPU share, no time having passed).
        if matches!(reading.state, 'Z' | 'X') {
            return None;
        }
        // A pid reused by a process outside the tree since the exit was queued is not ours.
        if !host::same_start(reading.start_ticks, start_boot_ns) {
            return None;
        }
        // The handle is this process's for good (see `ProcessHandle`): the next sweep
        // reads through it.
        self.handles.keep(key, handle);
        let fresh = reading.smaps;
        // The same address space as at the last read, read lately: the same USS/PSS/swap,
        // repeated. None where a wanted read brought nothing (no address space now).
        reading.smaps =
            tree_memory::row_smaps(reading.vms_bytes, fresh, asked.get(), cached.as_ref());
        let seen = image(reading.rss_bytes);
        self.keep_smaps(key, fresh.is_some(), reading.smaps, seen, now);
        let mut sample = rates::process_sample(
            &reading,
            now,
            measured,
            start_time_ns,
            self.previous.get(&key),
        );
        let live = waits.live(self.waits.as_ref(), from_kernel, pid, reading.threads);
        self.add_waits(&mut sample, key, live, measured);
        self.account(key, &sample, measured);
        Some(sample)
    }

    /// The address space's figures of the row, kept for the next sweeps where they were read now
    /// (`fresh`), forgotten where the row has none (no address space now).
    fn keep_smaps(
        &mut self,
        key: (u32, i64),
        fresh: bool,
        smaps: Option<SmapsReading>,
        image: tree_memory::SmapsImage,
        now: i64,
    ) {
        match (fresh, smaps) {
            (true, Some(smaps)) => {
                let seen = tree_memory::SmapsSeen {
                    image,
                    read_at: now,
                    smaps,
                };
                self.smaps.insert(key, seen);
            }
            (_, None) => {
                self.smaps.remove(&key);
            }
            // Cached figures repeated: kept as they were read.
            (false, Some(_)) => {}
        }
    }

    /// The waiting times of the process's live threads (`live`, from the task iterator's pass or
    /// the waits map) plus its exited threads', onto its row. A map that cannot be read is said
    /// once, and the samples go on without waits.
    fn add_waits(
        &mut self,
        sample: &mut SampleRecord,
        (pid, start_time_ns): (u32, i64),
        live: Option<Result<WaitTotals, String>>,
        measured: i64,
    ) {
        match live {
            Some(Ok(live)) => rates::add_waits(
                sample,
                sweep::process_waits(self.tracker.exited_thread_waits(pid), &live),
                measured,
                start_time_ns,
                self.previous.get(&(pid, start_time_ns)),
            ),
            Some(Err(err)) => {
                crate::say!(
                    "montrace: warning: the waiting times of live threads cannot be \
                     read ({err}); samples go on without them (processes.parquet keeps \
                     the exact figures at exit)"
                );
                self.waits = None;
            }
            None => {}
        }
    }

    /// A row taken: into the tree's load (the critical path), the CPU seen of the process, and
    /// the reading the next row's rates start from.
    fn account(&mut self, key: (u32, i64), sample: &SampleRecord, measured: i64) {
        let start_time_ns = key.1;
        let since = self.previous.get(&key).map_or(start_time_ns, |p| p.time_ns);
        add_to_load(&mut self.load, sample, since, measured);
        let cpu = (sample.cpu_user_ns, sample.cpu_system_ns);
        let before = start_time_ns < self.began_ns && !self.handed_over.contains(&key);
        self.cpu_seen
            .entry(key)
            .and_modify(|(_, last)| *last = cpu)
            .or_insert((if before { cpu } else { (0, 0) }, cpu));
        self.previous
            .insert(key, rates::Previous::of(sample, measured));
    }

    /// The sweep's rows taken: the tree's memory, the stream's line, the exporters, the files;
    /// then the GPUs and the system, stamped `now` as well.
    /// The GPUs' part of a sweep at `now`, where a GPU is monitored: their rows, and the tree's
    /// processes on them.
    fn sample_gpu(&mut self, now: i64) {
        let Some(gpu) = self.gpu.as_deref_mut() else {
            return;
        };
        let tracker = &self.tracker;
        let (device_rows, process_rows) = gpu.sample(now, |pid| tracker.start_time_of(pid));
        self.write(|r| {
            if let (Some(devices), Some(processes)) = (&mut r.gpu_table, &mut r.gpu_processes) {
                device_rows
                    .into_iter()
                    .try_for_each(|row| devices.push(row))?;
                process_rows
                    .into_iter()
                    .try_for_each(|row| processes.push(row))?;
            }
            Ok(())
        });
    }

    /// At the end: a monitor that opened too late for the sweep the follow loop makes when it
    /// opens (the tree was done in between) is taken and read once, so that the run still has
    /// its GPUs' figures; one still opening is not waited for ([`Recorder::gpu_summary`] says
    /// why there are none then).
    fn take_late_gpu(&mut self) {
        if self.gpu.is_some() || self.broken {
            return;
        }
        self.take_opened_gpu();
        self.sample_gpu(self.now());
    }

    fn end_sweep(&mut self, sweep: Vec<SampleRecord>, shares: &HashMap<u32, u32>, now: i64) {
        let memory = self.sweep_memory(&sweep, shares);
        let figure = self.tree_memory_figure(&memory);
        let tree_memory = (figure, memory.uss, memory.pss);
        self.memory_peaks
            .add_sweep(self.memory_source, figure, &memory);
        self.last_sweep_rss = figure;
        self.last_sweep_cpu_percent = Some(sweep.iter().filter_map(|s| s.cpu_percent).sum());
        self.sample_rows += sweep.len() as u64;
        if self.stream.is_some() {
            self.stream_sweep(&sweep, &memory, now);
        }
        self.export(Some(&sweep));
        self.write(|r| sweep.into_iter().try_for_each(|s| r.samples.push(s)));
        self.sample_gpu(now);
        match self.reader.read_system() {
            Ok(reading) => {
                let mut row = rates::system_sample(&reading, now, self.previous_system.as_ref());
                (row.tree_rss_bytes, row.tree_uss_bytes, row.tree_pss_bytes) = tree_memory;
                self.add_stalls(&mut row);
                self.write(|r| r.system.push(row));
                self.previous_system = Some(reading);
            }
            Err(err) => crate::say!("montrace: warning: {err}"),
        }
    }

    /// The stream's line of a sweep (`--stream`).
    fn stream_sweep(&mut self, sweep: &[SampleRecord], memory: &SweepMemory, now: i64) {
        let capacity = self
            .capacity
            .get_or_insert_with(crate::sampling::capacity::Capacity::read);
        let cpu_percent = self.last_sweep_cpu_percent.unwrap_or(0.0);
        let rss_bytes = self.last_sweep_rss.unwrap_or(0);
        let (cpu_of_capacity, rss_of_capacity) = (
            capacity.cpu_share_percent(cpu_percent),
            capacity.memory_share_percent(rss_bytes),
        );
        let sum =
            |f: fn(&SampleRecord) -> Option<u64>| sweep.iter().filter_map(f).reduce(|a, b| a + b);
        let line = crate::follow::stream::Line::Sweep {
            time: crate::units::rfc3339(now),
            elapsed_s: self.created.elapsed().as_secs_f64(),
            live: self.tracker.live_count(),
            started: self.tracker.processes_started(),
            cpu_percent,
            cpu_percent_of_capacity: cpu_of_capacity,
            rss_bytes,
            rss_percent_of_capacity: rss_of_capacity,
            uss_bytes: memory.uss,
            pss_bytes: memory.pss,
            read_bytes: sum(|s| s.read_bytes).unwrap_or(0),
            write_bytes: sum(|s| s.write_bytes).unwrap_or(0),
            gpu_memory_bytes: self.gpu.as_ref().and_then(|g| g.last_tree_memory_bytes()),
        };
        self.stream_lines([line]);
    }

    /// The run cgroup's stall shares since the last sweep, when it keeps them.
    fn add_stalls(&mut self, row: &mut crate::store::records::SystemRecord) {
        let Some(dir) = &self.pressure else { return };
        match crate::sampling::sampler::read_cgroup_stalls(dir) {
            Ok(Some(stalls)) => {
                let now = host::realtime_ns();
                if let Some((then, previous)) = &self.previous_stalls {
                    rates::add_stalls(row, (*then, previous), (now, &stalls));
                }
                self.previous_stalls = Some((now, stalls));
            }
            Ok(None) => self.pressure = None,
            Err(err) => {
                crate::say!("montrace: warning: the run cgroup's pressure: {err}; not read again");
                self.pressure = None;
            }
        }
    }

    /// Phase marks the command sent; a mark from a process of the tree carries its start time.
    pub fn on_marks(&mut self, marks: Vec<crate::follow::marks::ReceivedMark>) {
        for mark in marks {
            let row = crate::store::records::MarkRecord {
                time_ns: mark.time_ns,
                pid: mark.pid,
                start_time_ns: self.tracker.start_time_of(mark.pid).or_else(|| {
                    // It sent the mark and exited before montrace read it.
                    self.ended
                        .get(&mark.pid)
                        .filter(|(start, _)| *start <= mark.time_ns)
                        .map(|(start, _)| *start)
                }),
                label: mark.label,
                kind: mark.kind,
            };
            self.stream_lines([crate::follow::stream::Line::of_mark(&row)]);
            self.write(|r| r.marks.push(row));
        }
    }

    pub fn flush(&mut self) {
        self.write(|r| {
            if let Some(table) = &mut r.gpu_table {
                table.flush()?;
            }
            if let Some(table) = &mut r.gpu_processes {
                table.flush()?;
            }
            r.marks.flush()?;
            r.events.flush()?;
            r.processes.flush()?;
            r.samples.flush()?;
            r.system.flush()
        });
    }

    /// What run.json says under `gpu`, where the recorder knows: the monitor's figures, or why
    /// there are none. None where it had no monitor to take (run.json then says what the
    /// caller's status says).
    fn gpu_summary(&mut self) -> Option<GpuSummary> {
        if self.gpu_opening.take().is_some() {
            // Still opening at the end (`take_late_gpu` took it otherwise): nothing was read.
            self.gpu_unrecorded = Some(NVML_STILL_OPENING.to_string());
        }
        self.gpu.as_deref().map(GpuMonitor::summary).or_else(|| {
            let reason = self.gpu_unrecorded.take()?;
            Some(GpuSummary::not_monitored(
                GpuState::Unavailable,
                Some(reason),
            ))
        })
    }

    /// Writes the processes still alive and closes every table into its final file, synced to
    /// the disk or not (`durability`). After a failure (recording stopped) nothing more is
    /// written: the parts on disk are the record.
    pub fn finish(mut self, durability: Durability) -> Finished {
        // Before the tracker goes: the read attributes the tree's processes.
        self.take_late_gpu();
        let max_concurrent = self.tracker.max_concurrent();
        let vanished = self.tracker.vanished_count();
        let started = self.tracker.processes_started();
        let exec_time_wall_ns = self.exec_time_boot_ns.map(|t| self.tracker.clock().wall(t));
        if !self.broken {
            let clock = self.tracker.clock();
            let tracker = std::mem::replace(&mut self.tracker, Tracker::new(clock));
            for record in tracker.finish() {
                let seen = self.cpu_seen.remove(&(record.pid, record.start_time_ns));
                add_to_totals(&mut self.totals, &record, seen);
                self.spans.push(span_of(&record));
                if self.otlp.is_some() {
                    self.ended_spans.push(record.clone());
                }
                self.write(|r| r.processes.push(record));
            }
        }
        // The last spans, then at most 2 s for the collector to take what is queued.
        self.export(None);
        if let Some((exporter, _)) = self.otlp.take() {
            let report = exporter.finish(std::time::Duration::from_secs(2));
            if report.failed > 0 || report.dropped > 0 {
                crate::say!(
                    "montrace: warning: OTLP: {} requests sent, {} failed, {} dropped (the \
                     collector was down or slower than the sweeps); the run directory is complete",
                    report.sent,
                    report.failed,
                    report.dropped
                );
            }
        }
        let now = self.now();
        let gpu_rows = self
            .gpu
            .as_deref_mut()
            .filter(|_| !self.broken)
            .map(|gpu| gpu.finish(now));
        let gpu_summary = self.gpu_summary();
        let Recorder {
            mut events,
            mut processes,
            mut samples,
            mut system,
            mut marks,
            gpu_table,
            gpu_processes,
            closer,
            mut failure,
            ..
        } = self;
        if let (None, Some(closer)) = (&failure, &closer) {
            // In the order given to `Closer::start` (a table takes only a writer of its schema).
            let mut ready = closer.ready_writers().into_iter();
            processes.set_ready(ready.next().flatten());
            events.set_ready(ready.next().flatten());
            samples.set_ready(ready.next().flatten());
            system.set_ready(ready.next().flatten());
            marks.set_ready(ready.next().flatten());
        }
        if failure.is_none() {
            // Threads only where there is work for them: a short run's tables are closed one
            // after the other here (see `close_tables`).
            let small = events.is_small()
                && processes.is_small()
                && samples.is_small()
                && system.is_small()
                && marks.is_small()
                && gpu_table.as_ref().is_none_or(|t| t.is_small());
            let mut closings =
                table_closings((processes, events, samples, system, marks), durability);
            if let (Some(devices), Some(mut gpu_processes)) = (gpu_table, gpu_processes) {
                closings.push(Box::new(move || {
                    for row in gpu_rows.into_iter().flatten() {
                        gpu_processes.push(row)?;
                    }
                    devices.finish_with(durability)?;
                    gpu_processes.finish_with(durability).map(drop)
                }));
            }
            if let Err(err) = close_tables(closings, !small, closer) {
                crate::say!(
                    "montrace: error: the run's tables could not be closed: {err}. Their parts \
                     (`*.parts/*.parquet`) hold every row flushed"
                );
                failure = Some(err.to_string());
            }
        } else {
            // Dropped without `finish`: what is buffered is flushed if it can be (errors
            // ignored), the parts stay.
            drop((events, processes, samples, system, marks));
        }
        let gpu = gpu_summary;
        Finished {
            gpu,
            max_concurrent,
            vanished,
            started,
            totals: self.totals,
            memory_peaks: self.memory_peaks,
            sample_rows: self.sample_rows,
            exec_time_boot_ns: self.exec_time_boot_ns,
            exec_time_wall_ns,
            recording_error: failure,
            capacity: self
                .capacity
                .unwrap_or_else(crate::sampling::capacity::Capacity::read),
            spans: self.spans,
            load: self.load,
            samples_from: if self.task_iter.is_some() {
                "task_iter"
            } else {
                "procfs"
            },
        }
    }
}

/// A process's CPU (user, system ns) to count from, and at its last sample.
type CpuSeen = ((u64, u64), (u64, u64));

/// Adds an ended process to the totals: its exit figures, or, without them, the CPU its samples
/// showed (`seen`: where its count starts, and its last sample).
fn add_to_totals(
    totals: &mut run_json::TreeTotals,
    record: &crate::store::records::ProcessRecord,
    seen: Option<CpuSeen>,
) {
    totals.add(record);
    if record.cpu_user_ns.is_none() && record.cpu_system_ns.is_none() {
        let ((user0, system0), (user, system)) = seen.unwrap_or_default();
        totals.add_unfinished(user.saturating_sub(user0), system.saturating_sub(system0));
    }
}

/// Where the tree's memory figure comes from without a run cgroup: PSS where smaps_rollup is read
/// (it splits a forked child's shared pages instead of counting them twice), else RSS.
fn memory_source_without_cgroup(detail: MemoryDetail) -> TreeMemorySource {
    match detail {
        MemoryDetail::Full => TreeMemorySource::Pss,
        MemoryDetail::Basic => TreeMemorySource::RssByAddressSpace,
    }
}

/// What every process of one sweep is read with.
struct SweepAt<'a> {
    /// The sweep's time (wall clock, ns): every row of it is stamped with it.
    now: i64,
    boot_to_wall_ns: i64,
    /// Who shares an address space with whom (see `sharing_parents`).
    shares: &'a HashMap<u32, u32>,
    /// The task iterator's pass, where it runs.
    kernel: Option<&'a KernelSweep>,
}

/// Adds a sample row, which covers `from_ns..to_ns`, to the tree's load.
fn add_to_load(
    load: &mut crate::analysis::critical::Load,
    sample: &crate::store::records::SampleRecord,
    from_ns: i64,
    to_ns: i64,
) {
    if let Some(cpu) = sample.cpu_percent {
        let waiting = sample.run_queue_percent.unwrap_or(0.0);
        load.add(from_ns, to_ns, cpu / 100.0, waiting / 100.0);
    }
}

/// What the critical-path analysis keeps of a process.
fn span_of(r: &crate::store::records::ProcessRecord) -> crate::analysis::critical::Span {
    crate::analysis::critical::Span {
        pid: r.pid,
        start_ns: r.start_time_ns,
        parent: r.parent_pid.zip(r.parent_start_time_ns),
        end_ns: r.end_time_ns,
        cpu_ns: r.cpu_user_ns.unwrap_or(0) + r.cpu_system_ns.unwrap_or(0),
        run_queue_ns: r.run_queue_ns,
        blocked_ns: r.blocked_ns,
        command: crate::analysis::critical::command_of(
            r.argv.as_deref(),
            r.filename.as_deref(),
            &r.comm,
        ),
    }
}

pub struct Finished {
    /// GPU figures, when GPUs were monitored.
    pub gpu: Option<GpuSummary>,
    pub max_concurrent: usize,
    pub vanished: u64,
    pub started: usize,
    pub totals: run_json::TreeTotals,
    pub memory_peaks: run_json::TreeMemoryPeaks,
    pub sample_rows: u64,
    pub exec_time_boot_ns: Option<u64>,
    /// The same on the clock of `spans` (wall-clock ns).
    pub exec_time_wall_ns: Option<i64>,
    /// Why recording stopped before the end, if it did (see the module's doc).
    pub recording_error: Option<String>,
    pub capacity: crate::sampling::capacity::Capacity,
    pub spans: Vec<crate::analysis::critical::Span>,
    /// The tree's busy processes between sweeps.
    pub load: crate::analysis::critical::Load,
    /// run.json `samples_from`.
    pub samples_from: &'static str,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::follow::limits::{first_breach, Limit};
    use crate::sampling::gpu::fake::{FakeBackend, FakeDevice};
    use crate::sampling::gpu::{GpuDevice, GpuProcess};
    use crate::tracking::tracker::Clock;

    /// Every table is closed whatever fails before it, and the first failure is the one said,
    /// one after the other or in parallel, with the first handed to a closer thread or not.
    #[test]
    fn every_table_is_closed_and_the_first_failure_said() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::sync::Arc;
        for (in_parallel, with_closer) in
            [(false, false), (true, false), (false, true), (true, true)]
        {
            let case = format!("in parallel: {in_parallel}, closer: {with_closer}");
            let closed = Arc::new(AtomicUsize::new(0));
            let closing = |fails: Option<&'static str>| -> Closing {
                let closed = Arc::clone(&closed);
                Box::new(move || {
                    closed.fetch_add(1, Ordering::SeqCst);
                    fails.map_or(Ok(()), |what| {
                        Err(writer::WriteError::Panicked(what.into()))
                    })
                })
            };
            let closer = || with_closer.then(|| Closer::start(vec![]).expect("the closer starts"));
            let closings = vec![
                closing(None),
                closing(Some("first")),
                closing(None),
                closing(Some("second")),
                closing(None),
            ];
            let err = close_tables(closings, in_parallel, closer()).unwrap_err();
            assert!(err.to_string().contains("first"), "{case}: {err}");
            assert_eq!(closed.load(Ordering::SeqCst), 5, "{case}");
            // The closer's own failure comes first: its table is the first.
            let closings = vec![closing(Some("handed")), closing(Some("here"))];
            let err = close_tables(closings, in_parallel, closer()).unwrap_err();
            assert!(err.to_string().contains("handed"), "{case}: {err}");
            assert_eq!(closed.load(Ordering::SeqCst), 7, "{case}");
            let closings = vec![closing(None), closing(None)];
            assert!(
                close_tables(closings, in_parallel, closer()).is_ok(),
                "{case}"
            );
            assert_eq!(closed.load(Ordering::SeqCst), 9, "{case}");
        }
    }

    /// The closer makes a small file's writer for each schema, in their order.
    #[test]
    fn the_closer_makes_the_writers_ahead() {
        let schemas = vec![
            crate::store::schema::events_schema(),
            crate::store::schema::marks_schema(),
        ];
        let closer = Closer::start(schemas).expect("the closer starts");
        let ready = closer.ready_writers();
        assert_eq!(ready.len(), 2);
        assert!(ready.iter().all(Option::is_some));
    }

    /// The closing handed to the closer runs on its thread, not on the caller's, and a closing
    /// that panics there is an error, not a hang.
    #[test]
    fn the_closer_closes_on_its_own_thread_and_a_panic_there_is_an_error() {
        let here = std::thread::current().id();
        let (tx, rx) = std::sync::mpsc::channel();
        let on_thread: Closing = Box::new(move || {
            let _ = tx.send(std::thread::current().id());
            Ok(())
        });
        let closer = Closer::start(vec![]).expect("the closer starts");
        assert!(close_tables(vec![on_thread], false, Some(closer)).is_ok());
        assert_ne!(rx.recv().unwrap(), here);
        let panics: Closing = Box::new(|| panic!("a closing that panics"));
        let closer = Closer::start(vec![]).expect("the closer starts");
        let err = close_tables(vec![panics], false, Some(closer)).unwrap_err();
        assert!(matches!(err, writer::WriteError::Panicked(_)), "{err}");
    }

    #[test]
    fn smaps_is_read_again_when_the_address_space_is_not_the_one_last_read() {
        let s = 1_000_000_000;
        let image = |rss_bytes, exec_count, shares_with| tree_memory::SmapsImage {
            rss_bytes,
            exec_count,
            shares_with,
        };
        let seen = tree_memory::SmapsSeen {
            image: image(100, 0, Some(7)),
            read_at: 10 * s,
            smaps: sampler::SmapsReading {
                uss_bytes: 90,
                pss_bytes: 95,
                swap_bytes: 0,
            },
        };
        let wanted = |now: &tree_memory::SmapsImage| {
            smaps_wanted(Some(&seen), now, 10 * s + 1, 0, None, false)
        };
        assert!(smaps_wanted(
            None,
            &image(100, 0, None),
            10 * s,
            0,
            None,
            false
        ));
        // Still in its parent's address space, RSS unmoved, read a moment ago: repeated.
        assert!(!wanted(&image(100, 0, Some(7))));
        // Out of it (kcmp apart), exec'd, or RSS moved: read again.
        assert!(wanted(&image(100, 0, None)));
        assert!(wanted(&image(100, 1, Some(7))));
        assert!(wanted(&image(101, 0, Some(7))));
        // The same address space, after the age limit.
        let same = image(100, 0, Some(7));
        assert!(smaps_wanted(Some(&seen), &same, 21 * s, 0, None, false));
        // Its fork family's sharing changed (a fork, exec or exit) after the read, not before.
        assert!(smaps_wanted(
            Some(&seen),
            &same,
            10 * s + 1,
            0,
            Some(10 * s + 1),
            false
        ));
        assert!(!smaps_wanted(
            Some(&seen),
            &same,
            10 * s + 1,
            0,
            Some(10 * s),
            false
        ));
    }

    #[test]
    fn smaps_is_read_again_when_rss_moves_and_after_2_s_or_10_s_in_a_steady_tree_or_a_fork() {
        let s = 1_000_000_000;
        // RSS moved: at once, however fresh the last read.
        assert!(smaps_due(100, 10 * s, 101, 10 * s + 1, 0, false));
        // The tree changed after the last read: every 2 s.
        assert!(!smaps_due(100, 10 * s, 100, 12 * s, 11 * s, false));
        assert!(smaps_due(100, 10 * s, 100, 12 * s + 1, 11 * s, false));
        // It did not (its last change came before the read): every 10 s.
        assert!(!smaps_due(100, 10 * s, 100, 12 * s + 1, 9 * s, false));
        assert!(!smaps_due(100, 10 * s, 100, 20 * s, 10 * s, false));
        assert!(smaps_due(100, 10 * s, 100, 20 * s + 1, 10 * s, false));
        // Where PSS is the tree's figure: at once after a change of the tree, else as before.
        assert!(smaps_due(100, 10 * s, 100, 10 * s + 2, 10 * s + 1, true));
        assert!(!smaps_due(100, 10 * s, 100, 12 * s, 9 * s, true));
    }

    /// A sweep that finds a tracked process dead (a zombie, not reaped yet) writes no row for it:
    /// its exit event's row is its last, measured from its previous row (here, from its start).
    #[test]
    fn a_zombie_gets_no_sample_row_and_its_exit_row_comes_last() {
        let mut child = std::process::Command::new("/bin/true").spawn().unwrap();
        let pid = child.id();
        // Wait until it is a zombie (not reaped: `child` is not waited for yet).
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while !std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        }) {
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} never became a zombie"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let clock = Clock {
            boot_to_wall_ns: host::realtime_ns() - host::boottime_ns() as i64,
        };
        let start_boot_ns = crate::sampling::procstat::proc_start_boot_ns(pid).unwrap();
        let mut tracker = Tracker::new(clock);
        tracker.add_root(pid, start_boot_ns, "true");
        let dir = tempfile::tempdir().unwrap();
        let mut recorder =
            Recorder::create(dir.path(), tracker, pid, MemoryDetail::Basic, None, None).unwrap();
        recorder.sample();
        assert_eq!(recorder.sample_rows, 0, "no row from the zombie");
        recorder.on_event(&KernelEvent::Exit {
            time_ns: host::boottime_ns(),
            pid,
            start_ns: start_boot_ns,
            whole_process: true,
            comm: "true".into(),
            stats: crate::kernel::decode::ExitStats {
                cpu_user_ns: 1_000_000,
                ..Default::default()
            },
        });
        assert_eq!(recorder.sample_rows, 1, "the exit row");
        child.wait().unwrap();
        recorder.finish(Durability::Unsynced);
        let rows = crate::analysis::report::load::read_file(
            &dir.path().join(crate::store::schema::SAMPLES_FILE),
        )
        .unwrap();
        let cpu = rows[0]
            .column_by_name("cpu_percent")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Float64Array>()
            .unwrap()
            .clone();
        assert_eq!(cpu.len(), 1);
        assert!(
            !arrow_array::Array::is_null(&cpu, 0),
            "the exit row has a CPU share"
        );
    }

    /// The wall clock moved 5 ms ahead of the boot clock since the run began (slewed by NTP, or
    /// stepped): a sweep that reads a live process just before it exits still stamps its row
    /// before the exit row, and the exit row has a CPU share. Sweeps stamped with the wall clock
    /// itself wrote the exit row 5 ms before the sweep's, with no time passed between them.
    #[test]
    fn a_wall_clock_moved_since_the_start_keeps_the_exit_row_last() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let clock = Clock {
            boot_to_wall_ns: host::realtime_ns() - host::boottime_ns() as i64 - 5_000_000,
        };
        let start_boot_ns = crate::sampling::procstat::proc_start_boot_ns(pid).unwrap();
        let mut tracker = Tracker::new(clock);
        tracker.add_root(pid, start_boot_ns, "sleep");
        let dir = tempfile::tempdir().unwrap();
        let mut recorder =
            Recorder::create(dir.path(), tracker, pid, MemoryDetail::Basic, None, None).unwrap();
        recorder.sample();
        assert_eq!(recorder.sample_rows, 1, "the live process's row");
        child.kill().unwrap();
        child.wait().unwrap();
        recorder.on_event(&KernelEvent::Exit {
            time_ns: host::boottime_ns(),
            pid,
            start_ns: start_boot_ns,
            whole_process: true,
            comm: "sleep".into(),
            stats: crate::kernel::decode::ExitStats::default(),
        });
        assert_eq!(recorder.sample_rows, 2, "and its exit row");
        recorder.finish(Durability::Unsynced);
        let batches = crate::analysis::report::load::read_file(
            &dir.path().join(crate::store::schema::SAMPLES_FILE),
        )
        .unwrap();
        let column = |name: &str| batches[0].column_by_name(name).unwrap().clone();
        let time = crate::store::read::times_ns(column("time").as_ref()).unwrap();
        let cpu = crate::store::read::numbers(column("cpu_percent").as_ref()).unwrap();
        assert_eq!(time.len(), 2);
        assert!(time[1] > time[0], "the exit row comes last: {time:?}");
        assert_eq!(cpu[1], Some(0.0), "the exit row's CPU share");
    }

    /// A process still running at the end has no exit figures: the totals count, apart, the CPU
    /// its samples show it using while recorded. One already running when the recording began
    /// (as `attach` finds it) counts from its first sample; `run`'s command, handed over with
    /// the tracker, from zero.
    #[test]
    fn a_process_alive_at_the_end_counts_its_sampled_cpu_apart() {
        use arrow_array::cast::AsArray;
        use arrow_array::types::UInt64Type;
        let own = std::process::id();
        let clock = Clock {
            boot_to_wall_ns: host::realtime_ns() - host::boottime_ns() as i64,
        };
        let start = crate::sampling::procstat::proc_start_boot_ns(own).unwrap();
        // 50 ms of this thread's own CPU time, not of wall time: beside the other unit tests
        // on a busy machine, 50 ms of wall time can hold less than the clock tick (10 ms) that
        // /proc's CPU figures move by. The kernel's thread CPU clock only grows while the thread
        // is on a CPU, so the process's figure grows by at least the 50 ms (five ticks).
        let thread_cpu_ns = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes into the timespec we own; the clock id is valid.
            unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
            t.tv_sec * 1_000_000_000 + t.tv_nsec
        };
        let burn = || {
            let until = thread_cpu_ns() + 50_000_000;
            let mut x = 0u64;
            while thread_cpu_ns() < until {
                x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
            }
        };
        for handed_over in [false, true] {
            let mut tracker = Tracker::new(clock);
            if handed_over {
                tracker.add_root(own, start, "test");
            }
            let dir = tempfile::tempdir().unwrap();
            let mut recorder =
                Recorder::create(dir.path(), tracker, own, MemoryDetail::Basic, None, None)
                    .unwrap();
            if !handed_over {
                recorder.tracker.add_root(own, start, "test");
            }
            recorder.sample();
            burn();
            recorder.sample();
            let t = recorder.finish(Durability::Unsynced).totals;
            assert_eq!((t.cpu_user_ns, t.cpu_system_ns), (0, 0), "no exit figures");
            assert_eq!(t.unfinished_processes, 1);
            // The two sample rows, as written.
            let batches = crate::analysis::report::load::read_file(
                &dir.path().join(crate::store::schema::SAMPLES_FILE),
            )
            .unwrap();
            let column = |name: &str| -> Vec<u64> {
                batches
                    .iter()
                    .flat_map(|b| {
                        b.column_by_name(name)
                            .unwrap()
                            .as_primitive::<UInt64Type>()
                            .values()
                            .to_vec()
                    })
                    .collect()
            };
            let (user, system) = (column("cpu_user_ns"), column("cpu_system_ns"));
            assert_eq!(user.len(), 2);
            let first = if handed_over {
                (0, 0)
            } else {
                (user[0], system[0])
            };
            assert_eq!(
                (t.unfinished_cpu_user_ns, t.unfinished_cpu_system_ns),
                (user[1] - first.0, system[1] - first.1),
                "handed over: {handed_over}"
            );
            // Guarantee: the burn added 50 ms of CPU (five ticks) between the two sweeps.
            assert!(t.unfinished_cpu_user_ns + t.unfinished_cpu_system_ns > 0);
        }
    }

    /// `--limit gpu-mem` through the recorder: a sweep reads the fake GPU's process list, and
    /// `usage` carries the tree's share of it (this test process is the tree; pid 1 is not).
    #[test]
    fn usage_carries_the_trees_gpu_memory_for_the_limit() {
        let own = std::process::id();
        let fake = FakeBackend::new(vec![FakeDevice {
            info: GpuDevice {
                index: 0,
                uuid: None,
                name: None,
                memory_total_bytes: Some(80 << 30),
                mig_mode: None,
            },
            processes: Some(vec![
                GpuProcess {
                    pid: own,
                    used_memory_bytes: Some(3 << 30),
                },
                GpuProcess {
                    pid: 1,
                    used_memory_bytes: Some(50 << 30),
                },
            ]),
            ..Default::default()
        }]);
        let mut gpu = GpuMonitor::new(fake.boxed()).unwrap();
        let clock = Clock {
            boot_to_wall_ns: host::realtime_ns() - host::boottime_ns() as i64,
        };
        let mut tracker = Tracker::new(clock);
        tracker.add_root(
            own,
            crate::sampling::procstat::proc_start_boot_ns(own).unwrap(),
            "test",
        );
        let dir = tempfile::tempdir().unwrap();
        let mut recorder = Recorder::create(
            dir.path(),
            tracker,
            own,
            MemoryDetail::Basic,
            Some(&mut gpu),
            None,
        )
        .unwrap();
        let limit = Limit::GpuMem(2 << 30);
        let usage = recorder.usage(Duration::ZERO);
        assert_eq!(usage.tree_gpu_memory_bytes, None, "no GPU sample yet");
        assert_eq!(first_breach(&[limit], &usage), None);

        recorder.sample();
        let usage = recorder.usage(Duration::from_secs(1));
        assert_eq!(usage.tree_gpu_memory_bytes, Some(3 << 30));
        assert_eq!(
            first_breach(&[limit], &usage),
            Some((limit, (3u64 << 30) as f64))
        );
        assert_eq!(first_breach(&[Limit::GpuMem(4 << 30)], &usage), None);
    }
}
