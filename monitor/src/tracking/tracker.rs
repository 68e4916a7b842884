//! The process tree as a pure state machine: kernel events in, process records out.
//!
//! A process is identified by (pid, start time); while it lives, its pid alone finds it, since
//! the kernel never gives a live pid to two processes. The tracker tolerates lost events: an exec
//! or exit of a process it never saw fork creates the record then, with what is known, and a
//! fork onto a pid that is still "live" closes the stale record first (its exit was lost).
use std::collections::{HashMap, VecDeque};

use crate::kernel::decode::{ExitStats, KernelEvent, Termination};
use crate::store::records::{EventKind, EventRecord, ProcessRecord};

/// Converts the kernel's boot-time stamps to wall-clock time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Clock {
    /// CLOCK_REALTIME - CLOCK_BOOTTIME, ns, read once at start.
    pub boot_to_wall_ns: i64,
}

impl Clock {
    pub fn wall(&self, boot_ns: u64) -> i64 {
        boot_ns as i64 + self.boot_to_wall_ns
    }
}

struct Entry {
    record: ProcessRecord,
    /// False while the start time is an estimate (the root, before its exec event).
    start_exact: bool,
    /// Sum of the figures of its threads that already exited.
    exited_threads: ExitStats,
    /// Known from a /proc scan ([`Tracker::seen_in_proc`]), not from the kernel's fork event.
    seen_in_proc: bool,
}

/// Holds only live processes: a process that exits moves to `finished`, which the caller drains
/// (`take_finished`) to disk, so memory stays bounded by what runs at once, not by run length.
pub struct Tracker {
    clock: Clock,
    live: HashMap<u32, Entry>,
    finished: Vec<ProcessRecord>,
    started: usize,
    max_concurrent: usize,
    root_pid: Option<u32>,
    root_exit_code: Option<i32>,
    /// Processes whose exit event never came (found gone by `vanished`).
    vanished: u64,
    /// Whole-process figures of the last process that exited (see `take_last_exit`).
    last_exit: Option<ExitStats>,
    /// (pid, start time) of the processes that exited last, at most [`RECENTLY_ENDED`]: a
    /// thread's exit event can come after its process's (see [`Tracker::late_thread_exit`]).
    ended: VecDeque<(u32, i64)>,
}

/// How many ended processes the tracker remembers for their threads' late exit events.
const RECENTLY_ENDED: usize = 4_096;

impl Tracker {
    pub fn new(clock: Clock) -> Tracker {
        Tracker {
            clock,
            live: HashMap::new(),
            finished: Vec::new(),
            started: 0,
            max_concurrent: 0,
            root_pid: None,
            root_exit_code: None,
            vanished: 0,
            last_exit: None,
            ended: VecDeque::new(),
        }
    }

    /// The whole-process figures (summed over its threads) of the process whose exit the last
    /// `apply` recorded, if it recorded one: its final sample is built from them.
    pub fn take_last_exit(&mut self) -> Option<ExitStats> {
        self.last_exit.take()
    }

    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// The command montrace started. `start_boot_ns` is an estimate (from /proc's clock ticks)
    /// until its exec event brings the exact value.
    pub fn add_root(&mut self, pid: u32, start_boot_ns: u64, comm: &str) {
        self.root_pid = Some(pid);
        self.insert(
            ProcessRecord {
                pid,
                start_time_ns: self.clock.wall(start_boot_ns),
                comm: comm.to_string(),
                ..ProcessRecord::default()
            },
            false,
        );
    }

    fn insert(&mut self, record: ProcessRecord, start_exact: bool) -> &mut Entry {
        let pid = record.pid;
        if let Some(stale) = self.live.remove(&pid) {
            // Its exit event was lost: it cannot still be running under a pid now reused.
            self.finished.push(stale.record);
            self.vanished += 1;
        }
        self.started += 1;
        let entry = self.live.entry(pid).or_insert(Entry {
            record,
            start_exact,
            exited_threads: ExitStats::default(),
            seen_in_proc: false,
        });
        entry
    }

    fn note_concurrency(&mut self) {
        self.max_concurrent = self.max_concurrent.max(self.live.len());
    }

    /// The live record of `pid`, created from what the event says when it was never seen.
    fn live_entry(&mut self, pid: u32, start_ns: u64, time_ns: u64, comm: &str) -> &mut Entry {
        let clock = self.clock;
        if self.live.contains_key(&pid) {
            let entry = self.live.get_mut(&pid).expect("checked above");
            if !entry.start_exact && start_ns != 0 {
                entry.record.start_time_ns = clock.wall(start_ns);
                entry.start_exact = true;
            }
            return entry;
        }
        let start = if start_ns != 0 { start_ns } else { time_ns };
        self.insert(
            ProcessRecord {
                pid,
                start_time_ns: clock.wall(start),
                comm: comm.to_string(),
                ..ProcessRecord::default()
            },
            start_ns != 0,
        )
    }

    /// Applies one kernel event and returns the row for the lifecycle stream.
    pub fn apply(&mut self, event: &KernelEvent) -> EventRecord {
        let row = match event {
            KernelEvent::Fork {
                time_ns,
                pid,
                start_ns,
                parent_pid,
                comm,
            } => self.apply_fork(*time_ns, *pid, *start_ns, *parent_pid, comm),
            KernelEvent::Exec {
                time_ns,
                pid,
                start_ns,
                comm,
                filename,
                argv,
                argv_truncated,
                ..
            } => self.apply_exec(
                *time_ns,
                *pid,
                *start_ns,
                comm,
                filename,
                argv,
                *argv_truncated,
            ),
            KernelEvent::Exit {
                time_ns,
                pid,
                start_ns,
                whole_process,
                comm,
                stats,
            } => self.apply_exit(*time_ns, *pid, *start_ns, *whole_process, comm, stats),
        };
        self.note_concurrency();
        row
    }

    fn apply_fork(
        &mut self,
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        parent_pid: u32,
        comm: &str,
    ) -> EventRecord {
        let clock = self.clock;
        let parent = self.live.get(&parent_pid).map(|e| &e.record);
        let record = ProcessRecord {
            pid,
            start_time_ns: clock.wall(if start_ns != 0 { start_ns } else { time_ns }),
            parent_pid: Some(parent_pid),
            parent_start_time_ns: parent.map(|p| p.start_time_ns),
            // Until it execs, a forked child runs its parent's program.
            filename: parent.and_then(|p| p.filename.clone()),
            argv: parent.and_then(|p| p.argv.clone()),
            argv_truncated: parent.is_some_and(|p| p.argv_truncated),
            comm: comm.to_owned(),
            ..ProcessRecord::default()
        };
        let r = match self.live.get_mut(&pid) {
            // Found in /proc first (montrace attach scans the tree while the kernel
            // already follows it): the same process, which the kernel now tells from
            // its fork on, so its record is the kernel's.
            Some(seen)
                if seen.seen_in_proc
                    && start_ns != 0
                    && crate::host::same_start_ns(
                        seen.record.start_time_ns as u64,
                        record.start_time_ns as u64,
                    ) =>
            {
                seen.record = record;
                seen.start_exact = true;
                seen.seen_in_proc = false;
                &seen.record
            }
            _ => &self.insert(record, start_ns != 0).record,
        };
        EventRecord {
            parent_pid: r.parent_pid,
            parent_start_time_ns: r.parent_start_time_ns,
            ..event_row(clock, EventKind::Fork, time_ns, r)
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn apply_exec(
        &mut self,
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        comm: &str,
        filename: &str,
        argv: &[String],
        argv_truncated: bool,
    ) -> EventRecord {
        let clock = self.clock;
        let r = &mut self.live_entry(pid, start_ns, time_ns, comm).record;
        r.filename = Some(filename.to_owned());
        r.argv = Some(argv.to_vec());
        r.argv_truncated = argv_truncated;
        r.comm = comm.to_owned();
        r.exec_count += 1;
        EventRecord {
            filename: Some(filename.to_owned()),
            argv: Some(argv.to_vec()),
            ..event_row(clock, EventKind::Exec, time_ns, r)
        }
    }

    fn apply_exit(
        &mut self,
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        whole_process: bool,
        comm: &str,
        stats: &ExitStats,
    ) -> EventRecord {
        let clock = self.clock;
        let termination = Termination::from_exit_code(stats.exit_code);
        let (exit_code, exit_signal) = match termination {
            Termination::Exited(code) => (Some(code), None),
            Termination::Signaled { signal, .. } => (None, Some(signal)),
        };
        if !whole_process {
            if let Some(row) = self.late_thread_exit(time_ns, (pid, start_ns), stats, exit_code) {
                return row;
            }
        }
        let entry = self.live_entry(pid, start_ns, time_ns, comm);
        // A process's figures are the sum over its threads' exits.
        let mut figures = entry.exited_threads;
        figures.add_thread(stats);
        figures.tid = stats.tid;
        figures.exit_code = stats.exit_code;
        figures.peak_rss_bytes = stats.peak_rss_bytes;
        figures.rss_bytes = stats.rss_bytes;
        let r = &mut entry.record;
        let (kind, row_figures) = if whole_process {
            r.end_time_ns = Some(clock.wall(time_ns));
            // The process's name is its main thread's (what /proc/PID/comm shows): the last
            // thread to exit may be a worker that named itself (`cuda-EvtHandlr`).
            if stats.tid == pid || r.comm.is_empty() {
                r.comm = comm.to_owned();
            }
            r.exit_code = exit_code;
            r.exit_signal = exit_signal;
            r.core_dumped = matches!(
                termination,
                Termination::Signaled {
                    core_dumped: true,
                    ..
                }
            );
            r.cpu_user_ns = Some(figures.cpu_user_ns);
            r.cpu_system_ns = Some(figures.cpu_system_ns);
            r.peak_rss_bytes = (figures.peak_rss_bytes > 0).then_some(figures.peak_rss_bytes);
            r.minor_faults = Some(figures.minor_faults);
            r.major_faults = Some(figures.major_faults);
            r.voluntary_ctxt_switches = Some(figures.voluntary_ctxt_switches);
            r.involuntary_ctxt_switches = Some(figures.involuntary_ctxt_switches);
            r.read_bytes = Some(figures.read_bytes);
            r.write_bytes = Some(figures.write_bytes);
            r.read_chars = Some(figures.read_chars);
            r.write_chars = Some(figures.write_chars);
            r.run_queue_ns = figures.run_queue_ns;
            r.blocked_ns = figures.blocked_ns;
            r.sleep_ns = figures.sleep_ns;
            r.net_inet_sent_bytes = figures.net.map(|n| n.inet_sent);
            r.net_inet_received_bytes = figures.net.map(|n| n.inet_received);
            r.net_unix_sent_bytes = figures.net.map(|n| n.unix_sent);
            r.net_unix_received_bytes = figures.net.map(|n| n.unix_received);
            (EventKind::Exit, figures)
        } else {
            entry.exited_threads.add_thread(stats);
            (EventKind::ThreadExit, *stats)
        };
        let r = &self.live[&pid].record;
        let row = EventRecord {
            tid: Some(stats.tid),
            exit_code,
            exit_signal,
            cpu_user_ns: Some(row_figures.cpu_user_ns),
            cpu_system_ns: Some(row_figures.cpu_system_ns),
            peak_rss_bytes: Some(row_figures.peak_rss_bytes),
            ..event_row(clock, kind, time_ns, r)
        };
        if whole_process {
            self.last_exit = Some(figures);
            if Some(pid) == self.root_pid {
                self.root_exit_code = Some(stats.exit_code);
            }
            if let Some(entry) = self.live.remove(&pid) {
                if self.ended.len() == RECENTLY_ENDED {
                    self.ended.pop_front();
                }
                self.ended.push_back((pid, entry.record.start_time_ns));
                self.finished.push(entry.record);
            }
        }
        row
    }

    /// A thread's exit that comes after its process's: each exit event is sent at the thread's
    /// final context switch, and the thread that ended the process (the last one alive) can
    /// switch out for good before another that had already left (seen with a CUDA program's
    /// threads in a PID namespace's init). It is that process's, not a new one: its figures are
    /// added to the record while it is still held (they are not in the process's sum), and no
    /// second record is made. None when the process is not one that just ended.
    fn late_thread_exit(
        &mut self,
        time_ns: u64,
        (pid, start_ns): (u32, u64),
        stats: &ExitStats,
        exit_code: Option<i32>,
    ) -> Option<EventRecord> {
        if start_ns == 0 || self.live.contains_key(&pid) {
            return None;
        }
        let start = self.clock.wall(start_ns);
        if !self.ended.iter().rev().any(|&e| e == (pid, start)) {
            return None;
        }
        let held = self
            .finished
            .iter_mut()
            .rev()
            .find(|r| r.pid == pid && r.start_time_ns == start);
        let record = match held {
            Some(r) => {
                let add = |v: &mut Option<u64>, x: u64| *v = Some(v.unwrap_or(0) + x);
                add(&mut r.cpu_user_ns, stats.cpu_user_ns);
                add(&mut r.cpu_system_ns, stats.cpu_system_ns);
                add(&mut r.minor_faults, stats.minor_faults);
                add(&mut r.major_faults, stats.major_faults);
                add(
                    &mut r.voluntary_ctxt_switches,
                    stats.voluntary_ctxt_switches,
                );
                add(
                    &mut r.involuntary_ctxt_switches,
                    stats.involuntary_ctxt_switches,
                );
                add(&mut r.read_bytes, stats.read_bytes);
                add(&mut r.write_bytes, stats.write_bytes);
                add(&mut r.read_chars, stats.read_chars);
                add(&mut r.write_chars, stats.write_chars);
                r.clone()
            }
            // Already written out: the row says the thread ended; its few figures stay out.
            None => ProcessRecord {
                pid,
                start_time_ns: start,
                ..ProcessRecord::default()
            },
        };
        Some(EventRecord {
            tid: Some(stats.tid),
            exit_code,
            cpu_user_ns: Some(stats.cpu_user_ns),
            cpu_system_ns: Some(stats.cpu_system_ns),
            peak_rss_bytes: Some(stats.peak_rss_bytes),
            ..event_row(self.clock, EventKind::ThreadExit, time_ns, &record)
        })
    }

    /// A live process that is gone from the system although no exit event came (the event was
    /// lost): it ends now, with unknown figures.
    pub fn vanished(&mut self, pid: u32, now_boot_ns: u64) {
        if let Some(mut entry) = self.live.remove(&pid) {
            entry.record.end_time_ns = Some(self.clock.wall(now_boot_ns));
            self.finished.push(entry.record);
            self.vanished += 1;
        }
    }

    /// A process that ended without an exit event, as polling mode finds them (its parent reaped
    /// it between two scans): it ends now with the last figures /proc showed; its exit status is
    /// known only when it was seen as a zombie.
    pub fn ended_unobserved(
        &mut self,
        pid: u32,
        now_boot_ns: u64,
        figures: &ExitStats,
        exit_code: Option<i32>,
    ) {
        let Some(mut entry) = self.live.remove(&pid) else {
            return;
        };
        let r = &mut entry.record;
        r.end_time_ns = Some(self.clock.wall(now_boot_ns));
        if let Some(code) = exit_code {
            match Termination::from_exit_code(code) {
                Termination::Exited(status) => r.exit_code = Some(status),
                Termination::Signaled {
                    signal,
                    core_dumped,
                } => {
                    r.exit_signal = Some(signal);
                    r.core_dumped = core_dumped;
                }
            }
        }
        r.cpu_user_ns = Some(figures.cpu_user_ns);
        r.cpu_system_ns = Some(figures.cpu_system_ns);
        r.peak_rss_bytes = (figures.peak_rss_bytes > 0).then_some(figures.peak_rss_bytes);
        r.minor_faults = Some(figures.minor_faults);
        r.major_faults = Some(figures.major_faults);
        self.finished.push(entry.record);
    }

    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    /// Live pids, oldest process first (so parents come before their children).
    pub fn live_pids(&self) -> Vec<u32> {
        self.live_identities()
            .into_iter()
            .map(|(pid, _)| pid)
            .collect()
    }

    /// (pid, start time in ns since boot) of every live process, oldest first (parents before
    /// their children): what a signal to the tree is checked against (`follow::pidfd`).
    pub fn live_identities(&self) -> Vec<(u32, u64)> {
        let mut live: Vec<(i64, u32)> = self
            .live
            .values()
            .map(|e| (e.record.start_time_ns, e.record.pid))
            .collect();
        live.sort_unstable();
        live.into_iter()
            .map(|(wall, pid)| (pid, (wall - self.clock.boot_to_wall_ns).max(0) as u64))
            .collect()
    }

    /// (pid, command name) of the oldest `n` live processes, to say which ones montrace waits for.
    pub fn live_names(&self, n: usize) -> Vec<(u32, String)> {
        let mut live: Vec<(i64, u32, &str)> = self
            .live
            .values()
            .map(|e| (e.record.start_time_ns, e.record.pid, e.record.comm.as_str()))
            .collect();
        live.sort_unstable();
        live.into_iter()
            .take(n)
            .map(|(_, pid, comm)| (pid, comm.to_owned()))
            .collect()
    }

    /// (pid, start time) of every live process, for the sampler.
    pub fn live_processes(&self) -> Vec<(u32, i64)> {
        self.live
            .values()
            .map(|e| (e.record.pid, e.record.start_time_ns))
            .collect()
    }

    /// The summed figures of a live process's threads that already exited (zero when none did).
    pub fn exited_threads(&self, pid: u32) -> ExitStats {
        self.live
            .get(&pid)
            .map(|e| e.exited_threads)
            .unwrap_or_default()
    }

    /// The waiting times of a live process's threads that already exited (their exit events
    /// carry them); zero when none did.
    pub fn exited_thread_waits(&self, pid: u32) -> crate::kernel::decode::WaitTotals {
        let t = self.exited_threads(pid);
        crate::kernel::decode::WaitTotals {
            run_queue_ns: t.run_queue_ns.unwrap_or(0),
            blocked_ns: t.blocked_ns.unwrap_or(0),
            sleep_ns: t.sleep_ns.unwrap_or(0),
        }
    }

    /// A live process's record so far (its identity, parent, command).
    pub fn live_record(&self, pid: u32) -> Option<&ProcessRecord> {
        self.live.get(&pid).map(|e| &e.record)
    }

    /// Start time of a live process.
    pub fn start_time_of(&self, pid: u32) -> Option<i64> {
        self.live.get(&pid).map(|e| e.record.start_time_ns)
    }

    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    pub fn processes_started(&self) -> usize {
        self.started
    }

    pub fn vanished_count(&self) -> u64 {
        self.vanished
    }

    /// The root's exit code as the kernel reported it (wait-status encoding).
    pub fn root_exit_code(&self) -> Option<i32> {
        self.root_exit_code
    }

    /// Marks a live process as known from a /proc scan (`montrace attach` seeds the tree that
    /// way): if the kernel's fork event of the same process comes after all, it takes the record
    /// over instead of counting as a second process.
    pub fn seen_in_proc(&mut self, pid: u32) {
        if let Some(entry) = self.live.get_mut(&pid) {
            entry.seen_in_proc = true;
        }
    }

    /// Records of processes that ended since the last call.
    pub fn take_finished(&mut self) -> Vec<ProcessRecord> {
        std::mem::take(&mut self.finished)
    }

    /// Every record not yet taken; processes still live are marked `alive_at_end`.
    pub fn finish(mut self) -> Vec<ProcessRecord> {
        let mut out = std::mem::take(&mut self.finished);
        let mut live: Vec<ProcessRecord> = self
            .live
            .into_values()
            .map(|mut e| {
                e.record.alive_at_end = true;
                e.record
            })
            .collect();
        live.sort_by_key(|r| r.start_time_ns);
        out.extend(live);
        out
    }
}

fn event_row(clock: Clock, kind: EventKind, time_ns: u64, r: &ProcessRecord) -> EventRecord {
    EventRecord {
        time_ns: clock.wall(time_ns),
        kind,
        pid: r.pid,
        start_time_ns: r.start_time_ns,
        parent_pid: None,
        parent_start_time_ns: None,
        filename: None,
        argv: None,
        tid: None,
        exit_code: None,
        exit_signal: None,
        cpu_user_ns: None,
        cpu_system_ns: None,
        peak_rss_bytes: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernel::decode::ExitStats;

    const CLOCK: Clock = Clock {
        boot_to_wall_ns: 1_000_000_000_000,
    };

    fn fork(time: u64, pid: u32, parent: u32) -> KernelEvent {
        KernelEvent::Fork {
            time_ns: time,
            pid,
            start_ns: time,
            parent_pid: parent,
            comm: "sh".into(),
        }
    }

    fn exec(time: u64, pid: u32, start: u64, file: &str) -> KernelEvent {
        KernelEvent::Exec {
            time_ns: time,
            pid,
            start_ns: start,
            old_tid: pid,
            comm: file.rsplit('/').next().unwrap().into(),
            filename: file.into(),
            argv: vec![file.into(), "-x".into()],
            argv_truncated: false,
        }
    }

    fn exit(time: u64, pid: u32, start: u64, code: i32, whole: bool) -> KernelEvent {
        KernelEvent::Exit {
            time_ns: time,
            pid,
            start_ns: start,
            whole_process: whole,
            comm: "x".into(),
            stats: ExitStats {
                tid: pid,
                exit_code: code,
                cpu_user_ns: 10,
                cpu_system_ns: 5,
                peak_rss_bytes: 4096,
                ..ExitStats::default()
            },
        }
    }

    #[test]
    fn follows_a_tree_with_lineage_and_exit_figures() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(100, 90, "montrace");
        t.apply(&exec(95, 100, 91, "/bin/sh"));
        t.apply(&fork(200, 101, 100));
        t.apply(&exec(210, 101, 200, "/bin/true"));
        assert_eq!(t.live_count(), 2);
        t.apply(&exit(300, 101, 200, 0, true));
        t.apply(&exit(400, 100, 0, 3 << 8, true));
        assert_eq!(t.live_count(), 0);
        assert_eq!(t.max_concurrent(), 2);
        assert_eq!(t.root_exit_code(), Some(3 << 8));
        // Exited processes come out in exit order, as they can be written to disk.
        let p = t.take_finished();
        assert_eq!(p.len(), 2);
        assert!(t.finish().is_empty());
        let (child, root) = (&p[0], &p[1]);
        // The root's estimated start was replaced by the exact one from its exec.
        assert_eq!(root.start_time_ns, CLOCK.wall(91));
        assert_eq!(root.exit_code, Some(3));
        let p = [root.clone(), child.clone()];
        assert_eq!(p[1].parent_pid, Some(100));
        assert_eq!(p[1].parent_start_time_ns, Some(CLOCK.wall(91)));
        assert_eq!(p[1].filename.as_deref(), Some("/bin/true"));
        assert_eq!(p[1].exec_count, 1);
        assert_eq!(p[1].end_time_ns, Some(CLOCK.wall(300)));
        assert_eq!(p[1].cpu_user_ns, Some(10));
        assert_eq!(p[1].peak_rss_bytes, Some(4096));
        assert!(!p[1].alive_at_end);
    }

    /// A thread's exit event of `pid` with its own tid and comm.
    fn thread_exit(
        time: u64,
        pid: u32,
        start: u64,
        tid: u32,
        comm: &str,
        whole: bool,
    ) -> KernelEvent {
        match exit(time, pid, start, 0, whole) {
            KernelEvent::Exit {
                time_ns,
                pid,
                start_ns,
                whole_process,
                mut stats,
                ..
            } => {
                stats.tid = tid;
                KernelEvent::Exit {
                    time_ns,
                    pid,
                    start_ns,
                    whole_process,
                    comm: comm.into(),
                    stats,
                }
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_thread_exit_after_its_process_exit_is_that_process_s() {
        // As recorded on an H100: the process's last thread (921, which ended it) switched out
        // for good before another (916), so 916's exit event came after the process's.
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        t.apply(&fork(10, 881, 1));
        t.apply(&exec(11, 881, 10, "/usr/bin/python3"));
        t.apply(&thread_exit(20, 881, 10, 881, "python3", false));
        t.apply(&thread_exit(30, 881, 10, 921, "cuda-EvtHandlr", true));
        let late = t.apply(&thread_exit(31, 881, 10, 916, "cuda00001400006", false));
        assert_eq!(late.kind, EventKind::ThreadExit);
        assert_eq!((late.pid, late.tid), (881, Some(916)));
        assert_eq!(t.live_count(), 1, "no second record of 881");
        assert_eq!(t.processes_started(), 2);
        let p = t.take_finished();
        assert_eq!(p.len(), 1);
        // Named after its main thread; the late thread's CPU is added (3 threads × 10 + 5).
        assert_eq!(p[0].comm, "python3");
        assert_eq!((p[0].cpu_user_ns, p[0].cpu_system_ns), (Some(30), Some(15)));
        // Taken to disk already: still no new record.
        t.apply(&thread_exit(32, 881, 10, 917, "x", false));
        assert_eq!(t.live_count(), 1);
        assert!(t.take_finished().is_empty());
        // A new process under the same pid is a new record.
        t.apply(&fork(40, 881, 1));
        t.apply(&thread_exit(41, 881, 40, 990, "x", false));
        assert_eq!(t.live_count(), 2);
    }

    #[test]
    fn forked_child_inherits_program_until_exec() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        t.apply(&exec(2, 1, 1, "/bin/bash"));
        t.apply(&fork(3, 2, 1));
        let p = t.finish();
        assert_eq!(p[1].filename.as_deref(), Some("/bin/bash"));
        assert_eq!(p[1].exec_count, 0);
        assert!(p[1].alive_at_end);
    }

    #[test]
    fn pid_reuse_makes_two_rows() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        t.apply(&fork(10, 7, 1));
        t.apply(&exit(20, 7, 10, 0, true));
        t.apply(&fork(30, 7, 1));
        t.apply(&exit(40, 7, 30, 9, true));
        let p = t.finish();
        let sevens: Vec<_> = p.iter().filter(|r| r.pid == 7).collect();
        assert_eq!(sevens.len(), 2);
        assert_ne!(sevens[0].start_time_ns, sevens[1].start_time_ns);
        assert_eq!(sevens[1].exit_signal, Some(9));
        assert_eq!(sevens[1].exit_code, None);
    }

    #[test]
    fn a_late_fork_event_takes_over_the_process_seen_in_proc() {
        // `montrace attach`: the scan found 7 (start truncated to a clock tick) before the
        // kernel's fork event of the same process was read.
        let tick = 1_000_000_000 / procfs::ticks_per_second();
        let exact = 5 * tick + tick / 3;
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        t.apply(&KernelEvent::Fork {
            time_ns: 6 * tick,
            pid: 7,
            start_ns: 5 * tick,
            parent_pid: 1,
            comm: "sh".into(),
        });
        t.apply(&exec(6 * tick, 7, 5 * tick, "/usr/bin/sleep"));
        t.seen_in_proc(7);
        t.apply(&fork(exact, 7, 1));
        t.apply(&exec(exact + 1, 7, exact, "/usr/bin/sleep"));
        t.apply(&exit(exact + 2, 7, exact, 0, true));
        let sevens: Vec<_> = t.finish().into_iter().filter(|r| r.pid == 7).collect();
        assert_eq!(sevens.len(), 1, "{sevens:#?}");
        assert_eq!(sevens[0].start_time_ns, CLOCK.wall(exact));
        assert_eq!(sevens[0].exec_count, 1, "the kernel's exec only");
        assert_eq!(sevens[0].exit_code, Some(0));

        // Not seen in /proc: a fork of a live pid is a reused pid, whatever the start times.
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        t.apply(&fork(5 * tick, 7, 1));
        t.apply(&fork(exact, 7, 1));
        assert_eq!(t.vanished_count(), 1);
        assert_eq!(t.finish().iter().filter(|r| r.pid == 7).count(), 2);
    }

    #[test]
    fn process_figures_sum_its_threads_including_a_leader_that_exited_first() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        // The leader (tid 1) exits first with pthread_exit; then thread 3; the last is thread 2.
        let thread = |tid: u32, cpu: u64, io: u64, whole: bool| KernelEvent::Exit {
            time_ns: 10,
            pid: 1,
            start_ns: 0,
            whole_process: whole,
            comm: "x".into(),
            stats: ExitStats {
                tid,
                cpu_user_ns: cpu,
                cpu_system_ns: 1,
                read_bytes: io,
                peak_rss_bytes: 8192,
                ..ExitStats::default()
            },
        };
        assert_eq!(t.apply(&thread(1, 100, 5, false)).cpu_user_ns, Some(100));
        t.apply(&thread(3, 20, 0, false));
        let row = t.apply(&thread(2, 3, 7, true));
        assert_eq!(
            (row.kind, row.cpu_user_ns, row.cpu_system_ns),
            (EventKind::Exit, Some(123), Some(3))
        );
        let totals = t.take_last_exit().unwrap();
        assert_eq!(
            (totals.cpu_user_ns, totals.read_bytes, totals.tid),
            (123, 12, 2)
        );
        assert!(t.take_last_exit().is_none());
        let p = t.take_finished();
        assert_eq!(
            (p[0].cpu_user_ns, p[0].read_bytes, p[0].peak_rss_bytes),
            (Some(123), Some(12), Some(8192))
        );
    }

    #[test]
    fn thread_exit_keeps_process_alive() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        let row = t.apply(&exit(5, 1, 0, 0, false));
        assert_eq!(row.kind, EventKind::ThreadExit);
        assert_eq!(t.live_count(), 1);
        assert_eq!(t.finish()[0].end_time_ns, None);
    }

    #[test]
    fn tolerates_lost_fork_and_lost_exit() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        // Exec of a process whose fork was lost: it is recorded anyway.
        t.apply(&exec(50, 9, 45, "/bin/ls"));
        // Fork onto a pid whose exit was lost: the stale record is closed.
        t.apply(&fork(60, 9, 1));
        assert_eq!(t.vanished_count(), 1);
        t.vanished(1, 70);
        assert_eq!(t.live_count(), 1);
        assert_eq!(t.processes_started(), 3);
        let p = t.finish();
        assert_eq!(p.len(), 3);
        // First the stale pid 9 (closed by the reuse), then the root (vanished), then the live 9.
        assert_eq!((p[0].pid, p[0].alive_at_end), (9, false));
        assert_eq!((p[1].pid, p[1].end_time_ns), (1, Some(CLOCK.wall(70))));
        assert_eq!((p[2].pid, p[2].alive_at_end), (9, true));
    }

    #[test]
    fn event_rows_carry_kind_specific_fields() {
        let mut t = Tracker::new(CLOCK);
        t.add_root(1, 1, "x");
        let f = t.apply(&fork(10, 2, 1));
        assert_eq!((f.kind, f.parent_pid), (EventKind::Fork, Some(1)));
        let e = t.apply(&exec(11, 2, 10, "/bin/true"));
        assert_eq!(e.filename.as_deref(), Some("/bin/true"));
        assert_eq!(e.time_ns, CLOCK.wall(11));
        let x = t.apply(&exit(12, 2, 10, 9, true));
        assert_eq!(
            (x.kind, x.exit_signal, x.tid),
            (EventKind::Exit, Some(9), Some(2))
        );
    }
}
