//! Turns ring-buffer records into typed events. Pure: bytes in, values out; no clock, no kernel.
use monitor_common::{
    kind, wait_state, EventHeader, ExecEvent, ExitEvent, ForkEvent, TaskSample, TaskWaits,
};

/// A lifecycle event as the kernel reported it. Times are ns since boot.
#[derive(Clone, Debug, PartialEq)]
pub enum KernelEvent {
    Fork {
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        parent_pid: u32,
        comm: String,
    },
    Exec {
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        old_tid: u32,
        comm: String,
        filename: String,
        argv: Vec<String>,
        argv_truncated: bool,
    },
    Exit {
        time_ns: u64,
        pid: u32,
        start_ns: u64,
        /// False for one thread of a process that lives on.
        whole_process: bool,
        comm: String,
        stats: ExitStats,
    },
}

impl KernelEvent {
    /// The event's time, ns since boot.
    pub fn time_ns_mut(&mut self) -> &mut u64 {
        match self {
            KernelEvent::Fork { time_ns, .. }
            | KernelEvent::Exec { time_ns, .. }
            | KernelEvent::Exit { time_ns, .. } => time_ns,
        }
    }

    pub fn pid(&self) -> u32 {
        match self {
            KernelEvent::Fork { pid, .. }
            | KernelEvent::Exec { pid, .. }
            | KernelEvent::Exit { pid, .. } => *pid,
        }
    }
}

/// How a process ended, from the kernel's wait-status-like `exit_code`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Termination {
    Exited(i32),
    Signaled { signal: i32, core_dumped: bool },
}

impl Termination {
    pub fn from_exit_code(code: i32) -> Termination {
        let signal = code & 0x7f;
        if signal == 0 {
            Termination::Exited((code >> 8) & 0xff)
        } else {
            Termination::Signaled {
                signal,
                core_dumped: code & 0x80 != 0,
            }
        }
    }

    /// The shell convention montrace exits with: the status, or 128 + the signal.
    pub fn shell_status(self) -> i32 {
        match self {
            Termination::Exited(status) => status,
            Termination::Signaled { signal, .. } => 128 + signal,
        }
    }
}

/// Final figures of a thread at exit, or, summed over its threads, of a process.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ExitStats {
    pub tid: u32,
    pub exit_code: i32,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub peak_rss_bytes: u64,
    /// Resident memory at exit.
    pub rss_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub voluntary_ctxt_switches: u64,
    pub involuntary_ctxt_switches: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_chars: u64,
    pub write_chars: u64,
    /// Time off the CPU while tracked: runnable waiting for a CPU, blocked (D state), sleeping.
    /// None where it is not followed (classic tracepoints, polling).
    pub run_queue_ns: Option<u64>,
    pub blocked_ns: Option<u64>,
    pub sleep_ns: Option<u64>,
    /// Bytes sent and received through sockets, IPv4/IPv6 and unix. None where they are not
    /// counted (before Linux 6.3, classic tracepoints, polling).
    pub net: Option<NetTotals>,
}

/// Socket bytes of a process by address family.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetTotals {
    pub inet_sent: u64,
    pub inet_received: u64,
    pub unix_sent: u64,
    pub unix_received: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum DecodeError {
    #[error("ring buffer record of {len} bytes is too short for event kind {kind}")]
    Short { kind: u32, len: usize },
    #[error("ring buffer record has unknown event kind {0}")]
    UnknownKind(u32),
}

impl ExitStats {
    /// Adds another thread's counters (CPU, faults, context switches, I/O). Memory and identity
    /// fields are left alone: they describe the shared address space and the last thread.
    pub fn add_thread(&mut self, other: &ExitStats) {
        self.cpu_user_ns += other.cpu_user_ns;
        self.cpu_system_ns += other.cpu_system_ns;
        self.minor_faults += other.minor_faults;
        self.major_faults += other.major_faults;
        self.voluntary_ctxt_switches += other.voluntary_ctxt_switches;
        self.involuntary_ctxt_switches += other.involuntary_ctxt_switches;
        self.read_bytes += other.read_bytes;
        self.write_bytes += other.write_bytes;
        self.read_chars += other.read_chars;
        self.write_chars += other.write_chars;
        self.run_queue_ns = add_known(self.run_queue_ns, other.run_queue_ns);
        self.blocked_ns = add_known(self.blocked_ns, other.blocked_ns);
        self.sleep_ns = add_known(self.sleep_ns, other.sleep_ns);
        self.net = match (self.net, other.net) {
            (Some(a), Some(b)) => Some(NetTotals {
                inet_sent: a.inet_sent + b.inet_sent,
                inet_received: a.inet_received + b.inet_received,
                unix_sent: a.unix_sent + b.unix_sent,
                unix_received: a.unix_received + b.unix_received,
            }),
            (a, b) => a.or(b),
        };
    }
}

/// Where a process's live threads' time went off the CPU so far (see [`TaskWaits`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WaitTotals {
    pub run_queue_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
}

/// Sums the kernel's per-thread `WAITS` entries by process, each thread's interval in progress
/// counted up to `now_boot_ns` (boot clock, as the programs stamp it).
pub fn waits_by_process(
    threads: impl IntoIterator<Item = TaskWaits>,
    now_boot_ns: u64,
) -> std::collections::HashMap<u32, WaitTotals> {
    let mut by_process = std::collections::HashMap::<u32, WaitTotals>::new();
    for w in threads {
        by_process
            .entry(w.tgid)
            .or_default()
            .add(&WaitTotals::of_thread(&w, now_boot_ns));
    }
    by_process
}

impl WaitTotals {
    /// One thread's totals, its interval in progress counted up to `now_boot_ns`.
    pub fn of_thread(w: &TaskWaits, now_boot_ns: u64) -> WaitTotals {
        let mut total = w.total_ns;
        if w.since_ns != 0 && now_boot_ns > w.since_ns && w.state != wait_state::RUNNING {
            total[(w.state & 3) as usize] += now_boot_ns - w.since_ns;
        }
        WaitTotals {
            run_queue_ns: total[wait_state::RUNNABLE as usize],
            blocked_ns: total[wait_state::BLOCKED as usize],
            sleep_ns: total[wait_state::SLEEPING as usize],
        }
    }

    pub fn add(&mut self, other: &WaitTotals) {
        self.run_queue_ns += other.run_queue_ns;
        self.blocked_ns += other.blocked_ns;
        self.sleep_ns += other.sleep_ns;
    }
}

/// The sum of what is known.
fn add_known(a: Option<u64>, b: Option<u64>) -> Option<u64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a + b),
        (a, None) => a,
        (None, b) => b,
    }
}

pub(crate) fn read_pod<T: Copy>(bytes: &[u8], kind: u32) -> Result<T, DecodeError> {
    if bytes.len() < size_of::<T>() {
        return Err(DecodeError::Short {
            kind,
            len: bytes.len(),
        });
    }
    // SAFETY: length checked above; T is one of the #[repr(C)] integer/byte-array event structs,
    // valid for any bit pattern; read_unaligned because ring records are only 8-byte aligned.
    Ok(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<T>()) })
}

/// A fork record, of this build or an older agent's (without `ns_pids`, read as 0).
pub fn read_fork(bytes: &[u8]) -> Result<ForkEvent, DecodeError> {
    let mut whole = [0u8; size_of::<ForkEvent>()];
    let len = bytes.len().min(whole.len());
    if len < monitor_common::FORK_EVENT_SHORT_LEN {
        return Err(DecodeError::Short {
            kind: kind::FORK,
            len: bytes.len(),
        });
    }
    whole[..len].copy_from_slice(&bytes[..len]);
    read_pod(&whole, kind::FORK)
}

/// Decodes one ring-buffer record. `page_size` converts the kernel's page counts to bytes.
pub fn decode(bytes: &[u8], page_size: u64) -> Result<KernelEvent, DecodeError> {
    let header: EventHeader = read_pod(bytes, 0)?;
    match header.kind {
        kind::FORK => {
            let e = read_fork(bytes)?;
            Ok(KernelEvent::Fork {
                time_ns: header.time_ns,
                pid: header.pid,
                start_ns: header.start_ns,
                parent_pid: e.parent_pid,
                comm: c_string(&e.comm),
            })
        }
        kind::EXEC => {
            let e: ExecEvent = read_pod(bytes, header.kind)?;
            let len = (e.argv_len as usize).min(e.argv.len());
            Ok(KernelEvent::Exec {
                time_ns: header.time_ns,
                pid: header.pid,
                start_ns: header.start_ns,
                old_tid: e.old_tid,
                comm: c_string(&e.comm),
                filename: c_string(&e.filename),
                argv: split_argv(&e.argv[..len]),
                argv_truncated: e.argv_total_len > len as u64,
            })
        }
        kind::EXIT | kind::THREAD_EXIT => {
            let e: ExitEvent = read_pod(bytes, header.kind)?;
            let (cpu_user_ns, cpu_system_ns) = split_cputime(e.runtime_ns, e.utime_ns, e.stime_ns);
            Ok(KernelEvent::Exit {
                time_ns: header.time_ns,
                pid: header.pid,
                start_ns: header.start_ns,
                whole_process: header.kind == kind::EXIT,
                comm: c_string(&e.comm),
                stats: ExitStats {
                    tid: e.tid,
                    exit_code: e.exit_code,
                    cpu_user_ns,
                    cpu_system_ns,
                    peak_rss_bytes: e.peak_rss_pages * page_size,
                    rss_bytes: e.rss_pages * page_size,
                    minor_faults: e.min_flt,
                    major_faults: e.maj_flt,
                    voluntary_ctxt_switches: e.nvcsw,
                    involuntary_ctxt_switches: e.nivcsw,
                    read_bytes: e.read_bytes,
                    write_bytes: e.write_bytes,
                    read_chars: e.rchar,
                    write_chars: e.wchar,
                    run_queue_ns: (e.waits_known != 0).then_some(e.run_queue_ns),
                    blocked_ns: (e.waits_known != 0).then_some(e.blocked_ns),
                    sleep_ns: (e.waits_known != 0).then_some(e.sleep_ns),
                    net: (e.net_known != 0).then_some(NetTotals {
                        inet_sent: e.net.inet_sent,
                        inet_received: e.net.inet_received,
                        unix_sent: e.net.unix_sent,
                        unix_received: e.net.unix_received,
                    }),
                },
            })
        }
        other => Err(DecodeError::UnknownKind(other)),
    }
}

/// A live process's figures from its live threads' [`TaskSample`]s (the `iter/task` program),
/// before its exited threads' exit figures are added.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveFigures {
    /// The process's start (its leader's `start_boottime`), when its leader was among them.
    pub start_ns: Option<u64>,
    /// When the pass read its last thread (boot clock, ns): after its start, and before the exit
    /// of any of the threads read.
    pub read_ns: u64,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub rss_pages: u64,
    pub vm_pages: u64,
    pub threads: u32,
    /// One-letter state as /proc shows it: the leader's, or a thread's without it.
    pub state: char,
    pub minor_faults: u64,
    pub major_faults: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub read_chars: u64,
    pub write_chars: u64,
    /// Its live threads' waiting times so far.
    pub waits: WaitTotals,
    /// Its open descriptors, counted on its leader's record; None without the leader, or for a
    /// table too large for the program to count (then /proc counts them).
    pub fds: Option<u32>,
}

/// The records of one pass of the task iterator, whole records only.
pub fn task_samples(bytes: &[u8]) -> Vec<TaskSample> {
    bytes
        .chunks_exact(size_of::<TaskSample>())
        // SAFETY: a whole record; TaskSample is #[repr(C)] integers, valid for any bit pattern.
        .map(|chunk| unsafe { std::ptr::read_unaligned(chunk.as_ptr().cast::<TaskSample>()) })
        .collect()
}

/// Sums the live threads of each process (by tgid): CPU split per thread as the exit events
/// are, counters added, the address space's figures (shared by the threads) taken once.
pub fn live_figures(samples: &[TaskSample]) -> std::collections::HashMap<u32, LiveFigures> {
    let mut by_process = std::collections::HashMap::<u32, LiveFigures>::new();
    for t in samples {
        let p = by_process.entry(t.tgid).or_insert(LiveFigures {
            state: task_state_letter(t.state),
            ..LiveFigures::default()
        });
        let (user, system) = split_cputime(t.runtime_ns, t.utime_ns, t.stime_ns);
        p.cpu_user_ns += user;
        p.cpu_system_ns += system;
        p.rss_pages = p.rss_pages.max(t.rss_pages);
        p.vm_pages = p.vm_pages.max(t.vm_pages);
        p.threads += 1;
        p.read_ns = p.read_ns.max(t.read_ns);
        p.minor_faults += t.min_flt;
        p.major_faults += t.maj_flt;
        p.read_bytes += t.read_bytes;
        p.write_bytes += t.write_bytes;
        p.read_chars += t.rchar;
        p.write_chars += t.wchar;
        p.waits.add(&WaitTotals {
            run_queue_ns: t.run_queue_ns,
            blocked_ns: t.blocked_ns,
            sleep_ns: t.sleep_ns,
        });
        if t.tid == t.tgid {
            p.start_ns = Some(t.start_ns);
            p.state = task_state_letter(t.state);
            p.fds = (t.fds != monitor_common::FDS_UNKNOWN).then_some(t.fds);
        }
    }
    by_process
}

/// `task_struct::__state` as the letter /proc shows (`task_state_index()`): the lowest report
/// bits, idle for an uninterruptible sleep that does not count as load. A dead task (TASK_DEAD,
/// whose `exit_state` says zombie) shows as `Z`.
pub fn task_state_letter(state: u32) -> char {
    const TASK_UNINTERRUPTIBLE: u32 = 0x2;
    const TASK_DEAD: u32 = 0x80;
    const TASK_NOLOAD: u32 = 0x400;
    if state & TASK_DEAD != 0 {
        return 'Z';
    }
    if state & (TASK_UNINTERRUPTIBLE | TASK_NOLOAD) == TASK_UNINTERRUPTIBLE | TASK_NOLOAD {
        return 'I';
    }
    match state & 0x7f {
        0 => 'R',
        s => b"SDTtXZP"[s.trailing_zeros() as usize] as char,
    }
}

/// Splits the exact runtime into user and system time in the ratio of the tick-sampled
/// utime/stime, as the kernel's `cputime_adjust()` does for getrusage and /proc, so that
/// user + system equals the exact total.
pub fn split_cputime(runtime_ns: u64, utime_ns: u64, stime_ns: u64) -> (u64, u64) {
    if stime_ns == 0 {
        return (runtime_ns, 0);
    }
    if utime_ns == 0 {
        return (0, runtime_ns);
    }
    let stime =
        (runtime_ns as u128 * stime_ns as u128 / (stime_ns as u128 + utime_ns as u128)) as u64;
    (runtime_ns - stime, stime)
}

fn c_string(bytes: &[u8]) -> String {
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    String::from_utf8_lossy(&bytes[..end]).into_owned()
}

/// argv as it sits on the stack: NUL-terminated strings back to back. A cut-off last string is
/// kept as far as it goes.
fn split_argv(bytes: &[u8]) -> Vec<String> {
    let bytes = bytes.strip_suffix(&[0]).unwrap_or(bytes);
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|&b| b == 0)
        .map(|s| String::from_utf8_lossy(s).into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn task_samples_sum_to_process_figures() {
        let thread = |tgid, tid, runtime_ns, rss_pages, state| TaskSample {
            tgid,
            tid,
            start_ns: 1000 + tid as u64,
            // The pass reads thread 8 after thread 7.
            read_ns: 5000 + tid as u64,
            runtime_ns,
            utime_ns: 3,
            stime_ns: 1,
            rss_pages,
            vm_pages: 2 * rss_pages,
            min_flt: 1,
            maj_flt: 2,
            read_bytes: 10,
            write_bytes: 20,
            rchar: 30,
            wchar: 40,
            run_queue_ns: 5,
            blocked_ns: 6,
            sleep_ns: tid as u64,
            state,
            // Counted on the leader's record only.
            fds: if tid == tgid {
                tgid * 3
            } else {
                monitor_common::FDS_UNKNOWN
            },
        };
        let records = [
            thread(7, 8, 400, 50, 0x1),
            thread(7, 7, 800, 50, 0x2),
            thread(9, 10, 100, 0, 0x0),
            thread(11, 11, 100, 0, 0x0),
        ];
        let mut bytes: Vec<u8> = Vec::new();
        for r in &records {
            // SAFETY: viewing a plain #[repr(C)] record as its bytes.
            bytes.extend_from_slice(unsafe {
                std::slice::from_raw_parts(
                    (r as *const TaskSample).cast::<u8>(),
                    size_of::<TaskSample>(),
                )
            });
        }
        // A torn last record is dropped.
        bytes.extend_from_slice(&[1, 2, 3]);
        let samples = task_samples(&bytes);
        assert_eq!(samples, records);
        let live = live_figures(&samples);
        let p = live[&7];
        assert_eq!(p.start_ns, Some(1007), "the leader's start");
        assert_eq!(p.read_ns, 5008, "read when its last thread was");
        assert_eq!((p.cpu_user_ns, p.cpu_system_ns), (300 + 600, 100 + 200));
        assert_eq!((p.rss_pages, p.vm_pages, p.threads), (50, 100, 2));
        assert_eq!(p.state, 'D', "the leader's state");
        assert_eq!(
            p.fds,
            Some(21),
            "the leader's descriptors, not a sum over threads"
        );
        assert_eq!((p.minor_faults, p.major_faults), (2, 4));
        assert_eq!(
            (p.read_bytes, p.write_bytes, p.read_chars, p.write_chars),
            (20, 40, 60, 80)
        );
        let q = live[&9];
        assert_eq!((q.start_ns, q.state, q.threads), (None, 'R', 1));
        assert_eq!(q.fds, None, "no leader, no count");
        assert_eq!(live[&11].fds, Some(33));
    }

    #[test]
    fn task_states_read_as_proc_shows_them() {
        let letters: String = [0x0, 0x1, 0x2, 0x4, 0x8, 0x40, 0x402, 0x80, 0x2001, 0x101]
            .into_iter()
            .map(task_state_letter)
            .collect();
        assert_eq!(letters, "RSDTtPIZSS");
    }

    #[test]
    fn live_threads_waits_are_summed_by_process_with_the_interval_in_progress() {
        let thread = |tgid, state, since_ns, total_ns| TaskWaits {
            since_ns,
            state,
            tgid,
            total_ns,
            ..TaskWaits::default()
        };
        let threads = [
            // Process 10: one thread runnable since 900 (100 ns so far), one asleep since 500.
            thread(10, wait_state::RUNNABLE, 900, [0, 5, 7, 11]),
            thread(10, wait_state::SLEEPING, 500, [0, 1, 0, 2]),
            // Process 20: on a CPU since 950 (no wait in progress), and one blocked since 990.
            thread(20, wait_state::RUNNING, 950, [0, 3, 0, 0]),
            thread(20, wait_state::BLOCKED, 990, [0, 0, 4, 0]),
            // A stamp after `now` (read racing the kernel) adds nothing.
            thread(30, wait_state::SLEEPING, 2000, [0, 0, 0, 9]),
        ];
        let sums = waits_by_process(threads, 1000);
        assert_eq!(
            sums[&10],
            WaitTotals {
                run_queue_ns: 5 + 100 + 1,
                blocked_ns: 7,
                sleep_ns: 11 + 2 + 500
            }
        );
        assert_eq!(
            sums[&20],
            WaitTotals {
                run_queue_ns: 3,
                blocked_ns: 4 + 10,
                sleep_ns: 0
            }
        );
        assert_eq!(sums[&30].sleep_ns, 9);
        assert_eq!(sums.len(), 3);
    }
    use monitor_common::{ARGV_LEN, COMM_LEN, FILENAME_LEN};

    fn bytes_of<T>(value: &T) -> Vec<u8> {
        // SAFETY: reading the bytes of a plain #[repr(C)] value for a test.
        unsafe { std::slice::from_raw_parts((value as *const T).cast::<u8>(), size_of::<T>()) }
            .to_vec()
    }

    fn comm(s: &str) -> [u8; COMM_LEN] {
        let mut c = [0u8; COMM_LEN];
        c[..s.len()].copy_from_slice(s.as_bytes());
        c
    }

    fn header(kind: u32) -> EventHeader {
        EventHeader {
            kind,
            pid: 42,
            time_ns: 1_000,
            start_ns: 500,
        }
    }

    /// `make` (pid 42) forked by pid 7, with these pids in pid namespaces.
    fn fork_event(ns_pids: [u32; 4]) -> ForkEvent {
        ForkEvent {
            header: header(kind::FORK),
            parent_pid: 7,
            ns_level: 0,
            parent_start_ns: 9,
            comm: comm("make"),
            ns_pids,
        }
    }

    #[test]
    fn decodes_fork() {
        let e = fork_event([0; 4]);
        assert_eq!(
            decode(&bytes_of(&e), 4096).unwrap(),
            KernelEvent::Fork {
                time_ns: 1_000,
                pid: 42,
                start_ns: 500,
                parent_pid: 7,
                comm: "make".into()
            }
        );
    }

    /// An older agent's fork record ends before `ns_pids`: read with them 0; shorter is refused.
    #[test]
    fn decodes_a_fork_record_without_the_namespace_pids() {
        let e = fork_event([5, 6, 0, 0]);
        let whole = bytes_of(&e);
        let short = &whole[..monitor_common::FORK_EVENT_SHORT_LEN];
        assert_eq!(short.len(), 56);
        let read = read_fork(short).unwrap();
        assert_eq!((read.parent_pid, read.ns_pids), (7, [0; 4]));
        assert_eq!(decode(short, 4096).unwrap(), decode(&whole, 4096).unwrap());
        assert_eq!(
            read_fork(&whole[..40]).unwrap_err(),
            DecodeError::Short {
                kind: kind::FORK,
                len: 40
            }
        );
    }

    fn exec_event(args: &[u8], total: u64) -> ExecEvent {
        let mut e = ExecEvent {
            header: header(kind::EXEC),
            old_tid: 43,
            argv_len: args.len() as u32,
            argv_total_len: total,
            comm: comm("true"),
            filename: [0xAA; FILENAME_LEN],
            argv: [0xBB; ARGV_LEN],
        };
        e.filename[..10].copy_from_slice(b"/bin/true\0");
        e.argv[..args.len()].copy_from_slice(args);
        e
    }

    #[test]
    fn decodes_exec_argv() {
        let args = b"/bin/echo\0hello world\0\0x\0";
        let e = exec_event(args, args.len() as u64);
        match decode(&bytes_of(&e), 4096).unwrap() {
            KernelEvent::Exec {
                filename,
                argv,
                argv_truncated,
                old_tid,
                ..
            } => {
                assert_eq!(filename, "/bin/true");
                assert_eq!(argv, ["/bin/echo", "hello world", "", "x"]);
                assert!(!argv_truncated);
                assert_eq!(old_tid, 43);
            }
            other => panic!("not an exec: {other:?}"),
        }
    }

    #[test]
    fn exec_argv_cut_by_kernel_is_flagged_and_kept() {
        let e = exec_event(b"a\0bcd", 900);
        match decode(&bytes_of(&e), 4096).unwrap() {
            KernelEvent::Exec {
                argv,
                argv_truncated,
                ..
            } => {
                assert_eq!(argv, ["a", "bcd"]);
                assert!(argv_truncated);
            }
            other => panic!("not an exec: {other:?}"),
        }
    }

    #[test]
    fn exec_with_empty_argv() {
        let e = exec_event(b"", 0);
        match decode(&bytes_of(&e), 4096).unwrap() {
            KernelEvent::Exec { argv, .. } => assert!(argv.is_empty()),
            other => panic!("not an exec: {other:?}"),
        }
    }

    #[test]
    fn decodes_exit_with_page_size_and_cpu_split() {
        let e = ExitEvent {
            header: header(kind::EXIT),
            tid: 42,
            exit_code: 7 << 8,
            runtime_ns: 1_000_000,
            utime_ns: 3,
            stime_ns: 1,
            peak_rss_pages: 10,
            rss_pages: 8,
            min_flt: 1,
            maj_flt: 2,
            nvcsw: 3,
            nivcsw: 4,
            read_bytes: 5,
            write_bytes: 6,
            rchar: 7,
            wchar: 8,
            run_queue_ns: 9,
            blocked_ns: 10,
            sleep_ns: 11,
            waits_known: 1,
            net_known: 1,
            net: monitor_common::NetBytes {
                inet_sent: 12,
                inet_received: 13,
                unix_sent: 14,
                unix_received: 15,
            },
            comm: comm("sh"),
            ..ExitEvent::default()
        };
        match decode(&bytes_of(&e), 4096).unwrap() {
            KernelEvent::Exit {
                whole_process,
                stats,
                comm,
                ..
            } => {
                assert!(whole_process);
                assert_eq!(comm, "sh");
                assert_eq!(stats.cpu_user_ns, 750_000);
                assert_eq!(stats.cpu_system_ns, 250_000);
                assert_eq!(stats.peak_rss_bytes, 40_960);
                assert_eq!(stats.rss_bytes, 32_768);
                assert_eq!(
                    Termination::from_exit_code(stats.exit_code),
                    Termination::Exited(7)
                );
                assert_eq!(
                    (
                        stats.read_bytes,
                        stats.write_bytes,
                        stats.read_chars,
                        stats.write_chars
                    ),
                    (5, 6, 7, 8)
                );
                assert_eq!(
                    (stats.run_queue_ns, stats.blocked_ns, stats.sleep_ns),
                    (Some(9), Some(10), Some(11))
                );
                let net = stats.net.unwrap();
                assert_eq!(
                    (
                        net.inet_sent,
                        net.inet_received,
                        net.unix_sent,
                        net.unix_received
                    ),
                    (12, 13, 14, 15)
                );
            }
            other => panic!("not an exit: {other:?}"),
        }
        // Without the BTF tracepoints the waits are unknown, not 0.
        let unknown = ExitEvent {
            waits_known: 0,
            net_known: 0,
            ..e
        };
        match decode(&bytes_of(&unknown), 4096).unwrap() {
            KernelEvent::Exit { stats, .. } => {
                assert_eq!((stats.run_queue_ns, stats.sleep_ns), (None, None));
                assert_eq!(stats.net, None);
            }
            other => panic!("not an exit: {other:?}"),
        }
        let mut process = ExitStats {
            run_queue_ns: Some(5),
            ..ExitStats::default()
        };
        process.add_thread(&ExitStats {
            run_queue_ns: Some(7),
            sleep_ns: Some(3),
            ..ExitStats::default()
        });
        assert_eq!(
            (process.run_queue_ns, process.sleep_ns),
            (Some(12), Some(3))
        );
        let thread = ExitEvent {
            header: header(kind::THREAD_EXIT),
            ..e
        };
        assert!(matches!(
            decode(&bytes_of(&thread), 4096).unwrap(),
            KernelEvent::Exit {
                whole_process: false,
                ..
            }
        ));
    }

    #[test]
    fn rejects_short_and_unknown_records() {
        assert_eq!(
            decode(&[1, 0, 0], 4096),
            Err(DecodeError::Short { kind: 0, len: 3 })
        );
        let fork_header = bytes_of(&header(kind::FORK));
        assert_eq!(
            decode(&fork_header, 4096),
            Err(DecodeError::Short {
                kind: kind::FORK,
                len: fork_header.len()
            })
        );
        assert_eq!(
            decode(&bytes_of(&header(99)), 4096),
            Err(DecodeError::UnknownKind(99))
        );
    }

    #[test]
    fn termination_follows_wait_status_encoding() {
        assert_eq!(Termination::from_exit_code(0), Termination::Exited(0));
        assert_eq!(
            Termination::from_exit_code(9),
            Termination::Signaled {
                signal: 9,
                core_dumped: false
            }
        );
        assert_eq!(
            Termination::from_exit_code(0x80 | 11),
            Termination::Signaled {
                signal: 11,
                core_dumped: true
            }
        );
        assert_eq!(Termination::from_exit_code(9).shell_status(), 137);
        assert_eq!(Termination::from_exit_code(3 << 8).shell_status(), 3);
    }

    #[test]
    fn cputime_split_keeps_the_exact_total() {
        assert_eq!(split_cputime(100, 0, 0), (100, 0));
        assert_eq!(split_cputime(100, 0, 5), (0, 100));
        assert_eq!(split_cputime(100, 5, 0), (100, 0));
        let (u, s) = split_cputime(1_000_000_007, 2, 1);
        assert_eq!(u + s, 1_000_000_007);
        assert_eq!(s, 333_333_335);
        // No overflow with large values.
        let (u, s) = split_cputime(u64::MAX / 2, u64::MAX / 4, u64::MAX / 4);
        assert_eq!(u + s, u64::MAX / 2);
    }
}
