//! The process tree as a pure state machine: kernel events in, process records out.
//!
//! A process is identified by (pid, start time); while it lives, its pid alone finds it, since
//! the kernel never gives a live pid to two processes. The tracker tolerates lost events: an exec
//! or exit of a process it never saw fork creates the record then, with what is known, and a
//! fork onto a pid that is still "live" closes the stale record first (its exit was lost).
use std::collections::HashMap;

use crate::decode::{KernelEvent, Termination};
use crate::model::{EventKind, EventRecord, ProcessRecord};

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
}

pub struct Tracker {
    clock: Clock,
    entries: Vec<Entry>,
    live: HashMap<u32, usize>,
    max_concurrent: usize,
    root_pid: Option<u32>,
    root_exit_code: Option<i32>,
    /// Processes whose exit event never came (found gone by `vanished`).
    vanished: u64,
}

impl Tracker {
    pub fn new(clock: Clock) -> Tracker {
        Tracker {
            clock,
            entries: Vec::new(),
            live: HashMap::new(),
            max_concurrent: 0,
            root_pid: None,
            root_exit_code: None,
            vanished: 0,
        }
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

    fn insert(&mut self, record: ProcessRecord, start_exact: bool) -> usize {
        if let Some(stale) = self.live.remove(&record.pid) {
            // Its exit event was lost: it cannot still be running under a pid now reused.
            self.entries[stale].record.alive_at_end = false;
            self.vanished += 1;
        }
        let index = self.entries.len();
        self.live.insert(record.pid, index);
        self.entries.push(Entry {
            record,
            start_exact,
        });
        self.max_concurrent = self.max_concurrent.max(self.live.len());
        index
    }

    /// The live record of `pid`, created from what the event says when it was never seen.
    fn live_entry(&mut self, pid: u32, start_ns: u64, time_ns: u64, comm: &str) -> usize {
        if let Some(&index) = self.live.get(&pid) {
            let entry = &mut self.entries[index];
            if !entry.start_exact && start_ns != 0 {
                entry.record.start_time_ns = self.clock.wall(start_ns);
                entry.start_exact = true;
            }
            return index;
        }
        let start = if start_ns != 0 { start_ns } else { time_ns };
        self.insert(
            ProcessRecord {
                pid,
                start_time_ns: self.clock.wall(start),
                comm: comm.to_string(),
                ..ProcessRecord::default()
            },
            start_ns != 0,
        )
    }

    /// Applies one kernel event and returns the row for the lifecycle stream.
    pub fn apply(&mut self, event: &KernelEvent) -> EventRecord {
        match event {
            KernelEvent::Fork {
                time_ns,
                pid,
                start_ns,
                parent_pid,
                comm,
            } => {
                let parent = self.live.get(parent_pid).map(|&i| &self.entries[i].record);
                let record = ProcessRecord {
                    pid: *pid,
                    start_time_ns: self.clock.wall(if *start_ns != 0 {
                        *start_ns
                    } else {
                        *time_ns
                    }),
                    parent_pid: Some(*parent_pid),
                    parent_start_time_ns: parent.map(|p| p.start_time_ns),
                    // Until it execs, a forked child runs its parent's program.
                    filename: parent.and_then(|p| p.filename.clone()),
                    argv: parent.and_then(|p| p.argv.clone()),
                    argv_truncated: parent.is_some_and(|p| p.argv_truncated),
                    comm: comm.clone(),
                    ..ProcessRecord::default()
                };
                let index = self.insert(record, *start_ns != 0);
                let r = &self.entries[index].record;
                EventRecord {
                    parent_pid: r.parent_pid,
                    parent_start_time_ns: r.parent_start_time_ns,
                    ..self.event(EventKind::Fork, *time_ns, index)
                }
            }
            KernelEvent::Exec {
                time_ns,
                pid,
                start_ns,
                comm,
                filename,
                argv,
                argv_truncated,
                ..
            } => {
                let index = self.live_entry(*pid, *start_ns, *time_ns, comm);
                let r = &mut self.entries[index].record;
                r.filename = Some(filename.clone());
                r.argv = Some(argv.clone());
                r.argv_truncated = *argv_truncated;
                r.comm = comm.clone();
                r.exec_count += 1;
                EventRecord {
                    filename: Some(filename.clone()),
                    argv: Some(argv.clone()),
                    ..self.event(EventKind::Exec, *time_ns, index)
                }
            }
            KernelEvent::Exit {
                time_ns,
                pid,
                start_ns,
                whole_process,
                comm,
                stats,
            } => {
                let index = self.live_entry(*pid, *start_ns, *time_ns, comm);
                let termination = Termination::from_exit_code(stats.exit_code);
                let (exit_code, exit_signal) = match termination {
                    Termination::Exited(code) => (Some(code), None),
                    Termination::Signaled { signal, .. } => (None, Some(signal)),
                };
                let kind = if *whole_process {
                    self.live.remove(pid);
                    if Some(*pid) == self.root_pid {
                        self.root_exit_code = Some(stats.exit_code);
                    }
                    let r = &mut self.entries[index].record;
                    r.end_time_ns = Some(self.clock.wall(*time_ns));
                    r.comm = comm.clone();
                    r.exit_code = exit_code;
                    r.exit_signal = exit_signal;
                    r.core_dumped = matches!(
                        termination,
                        Termination::Signaled {
                            core_dumped: true,
                            ..
                        }
                    );
                    r.cpu_user_ns = Some(stats.cpu_user_ns);
                    r.cpu_system_ns = Some(stats.cpu_system_ns);
                    r.peak_rss_bytes = (stats.peak_rss_bytes > 0).then_some(stats.peak_rss_bytes);
                    r.minor_faults = Some(stats.minor_faults);
                    r.major_faults = Some(stats.major_faults);
                    r.voluntary_ctxt_switches = Some(stats.voluntary_ctxt_switches);
                    r.involuntary_ctxt_switches = Some(stats.involuntary_ctxt_switches);
                    r.read_bytes = Some(stats.read_bytes);
                    r.write_bytes = Some(stats.write_bytes);
                    r.read_chars = Some(stats.read_chars);
                    r.write_chars = Some(stats.write_chars);
                    EventKind::Exit
                } else {
                    EventKind::ThreadExit
                };
                EventRecord {
                    tid: Some(stats.tid),
                    exit_code,
                    exit_signal,
                    cpu_user_ns: Some(stats.cpu_user_ns),
                    cpu_system_ns: Some(stats.cpu_system_ns),
                    peak_rss_bytes: Some(stats.peak_rss_bytes),
                    ..self.event(kind, *time_ns, index)
                }
            }
        }
    }

    fn event(&self, kind: EventKind, time_ns: u64, index: usize) -> EventRecord {
        let r = &self.entries[index].record;
        EventRecord {
            time_ns: self.clock.wall(time_ns),
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

    /// A live process that is gone from the system although no exit event came (the event was
    /// lost): it ends now, with unknown figures.
    pub fn vanished(&mut self, pid: u32, now_boot_ns: u64) {
        if let Some(index) = self.live.remove(&pid) {
            self.entries[index].record.end_time_ns = Some(self.clock.wall(now_boot_ns));
            self.vanished += 1;
        }
    }

    pub fn live_count(&self) -> usize {
        self.live.len()
    }

    pub fn live_pids(&self) -> Vec<u32> {
        self.live.keys().copied().collect()
    }

    pub fn max_concurrent(&self) -> usize {
        self.max_concurrent
    }

    pub fn processes_started(&self) -> usize {
        self.entries.len()
    }

    pub fn vanished_count(&self) -> u64 {
        self.vanished
    }

    /// The root's exit code as the kernel reported it (wait-status encoding).
    pub fn root_exit_code(&self) -> Option<i32> {
        self.root_exit_code
    }

    /// All records; processes still live are marked `alive_at_end`.
    pub fn finish(mut self) -> Vec<ProcessRecord> {
        for &index in self.live.values() {
            self.entries[index].record.alive_at_end = true;
        }
        self.entries.into_iter().map(|e| e.record).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::ExitStats;

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
        let p = t.finish();
        assert_eq!(p.len(), 2);
        // The root's estimated start was replaced by the exact one from its exec.
        assert_eq!(p[0].start_time_ns, CLOCK.wall(91));
        assert_eq!(p[0].exit_code, Some(3));
        assert_eq!(p[1].parent_pid, Some(100));
        assert_eq!(p[1].parent_start_time_ns, Some(CLOCK.wall(91)));
        assert_eq!(p[1].filename.as_deref(), Some("/bin/true"));
        assert_eq!(p[1].exec_count, 1);
        assert_eq!(p[1].end_time_ns, Some(CLOCK.wall(300)));
        assert_eq!(p[1].cpu_user_ns, Some(10));
        assert_eq!(p[1].peak_rss_bytes, Some(4096));
        assert!(!p[1].alive_at_end);
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
        let p = t.finish();
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].end_time_ns, Some(CLOCK.wall(70)));
        assert!(!p[1].alive_at_end);
        assert!(p[2].alive_at_end);
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
