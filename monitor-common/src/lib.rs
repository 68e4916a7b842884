//! Event layouts and map constants shared by the eBPF programs (`monitor-ebpf`) and the agent
//! (`monitor`). This crate is the one source of truth for the bytes that cross the ring buffer:
//! every struct is `#[repr(C)]`, starts with an [`EventHeader`], and holds no pointers.
#![no_std]

/// Bytes of the exec'd filename kept per exec event (NUL-terminated inside the buffer).
pub const FILENAME_LEN: usize = 256;
/// Bytes of argv kept per exec event: the NUL-separated strings as they sit on the new stack.
pub const ARGV_LEN: usize = 512;
/// Length of the kernel's `task_struct::comm`.
pub const COMM_LEN: usize = 16;

/// Default ring buffer size; the agent may override it at load time (`--ring-buffer`).
pub const RING_BUFFER_BYTES: u32 = 8 << 20;
/// Most processes tracked at once (live processes only: an exit removes its entry).
pub const MAX_TRACKED: u32 = 65_536;
/// Most exited threads waiting for their final context switch at once (see `ExitEvent`).
pub const MAX_PENDING_EXITS: u32 = 16_384;
/// `task_struct::__state` of a task that has exited and schedules for the last time
/// (`TASK_DEAD` in include/linux/sched.h; a #define, so not in BTF).
pub const TASK_DEAD: u32 = 0x80;
/// A task blocked without being woken by signals (`TASK_UNINTERRUPTIBLE`: the D state, mostly
/// I/O), unless it also has `TASK_NOLOAD` (`TASK_IDLE`: kernel threads waiting for work).
pub const TASK_UNINTERRUPTIBLE: u32 = 0x2;
pub const TASK_NOLOAD: u32 = 0x400;
/// Most tracked threads with socket bytes at once (see [`NetBytes`]).
pub const MAX_NET_THREADS: u32 = 65_536;
/// Address families counted apart (`sock_common::skc_family`).
pub const AF_UNIX: u16 = 1;
pub const AF_INET: u16 = 2;
pub const AF_INET6: u16 = 10;
/// `MSG_PEEK`: a receive that leaves the data queued moves no bytes.
pub const MSG_PEEK: u32 = 2;

/// Bytes a tracked thread sent and received through sockets, by address family, kept per thread
/// (by tid) by the `sock_send_length`/`sock_recv_length` programs (Linux 6.3 and later) and sent
/// with its exit event; a process's are the sum over its threads.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NetBytes {
    /// IPv4 and IPv6.
    pub inet_sent: u64,
    pub inet_received: u64,
    pub unix_sent: u64,
    pub unix_received: u64,
}

/// Most threads of tracked processes whose waiting is followed at once (see [`TaskWaits`]).
pub const MAX_WAITING_THREADS: u32 = 65_536;

/// Where a tracked thread's time went off the CPU, kept per thread (by tid) by the `sched_switch`
/// and `sched_wakeup`/`sched_wakeup_new` programs and sent with its exit event: each interval
/// starts at a switch-out or wake-up (`since_ns`, with the `state` it left the CPU in) and is
/// added to its total at the next wake-up or switch-in.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskWaits {
    /// When the current interval began (boot-clock ns): the switch-out or wake-up, or, on a CPU
    /// (`RUNNING`), the switch-in.
    pub since_ns: u64,
    /// One of [`wait_state`].
    pub state: u32,
    /// The thread's process (thread group id), so that userspace can sum a live process's
    /// threads at each sweep.
    pub tgid: u32,
    /// Time spent in each [`wait_state`], indexed by it: runnable waiting for a CPU (run-queue
    /// delay), blocked uninterruptibly (the D state, mostly I/O), sleeping (a timer, a pipe, a
    /// lock, a child...). An array indexed by a masked state keeps the verifier's bounds simple.
    pub total_ns: [u64; 4],
    /// `sum_exec_runtime` at the last switch-in, or, off a CPU, at the last switch-out. The
    /// kernel adds the slice in progress to it only at the next tick or switch (every 4 ms at
    /// HZ=250): the task iterator reads a thread on a CPU as this plus the time since
    /// `since_ns`, as `/proc/PID/schedstat` does. Off a CPU, it tells how much of an interval
    /// whose switch-in the programs never saw was spent on a CPU (see [`TaskWaits::settle`]).
    pub runtime_ns: u64,
    /// The most the sweeps (the task iterator) counted of the interval in progress, so that an
    /// interval closed without its switch-in adds no less than a sweep already showed.
    pub reported_ns: u64,
}

impl TaskWaits {
    /// What a sweep at `now` shows of the interval in progress (none while on a CPU): its length
    /// less the CPU time the thread held in it (`runtime`, its `sum_exec_runtime` now, against
    /// `runtime_ns` when the interval opened), as [`TaskWaits::settle`] reckons it. A thread
    /// whose switch-in the programs missed is running while the entry says it waits: without
    /// this a sweep counted its running as waiting, and the close could not go below that
    /// (a burner alone on a CPU once showed 362 ms of run-queue delay in 500 ms, all of them on
    /// a CPU).
    #[inline(always)]
    pub fn in_progress(&self, now: u64, runtime: u64) -> u64 {
        if self.state == wait_state::RUNNING || self.since_ns == 0 || now <= self.since_ns {
            return 0;
        }
        (now - self.since_ns).saturating_sub(runtime.saturating_sub(self.runtime_ns))
    }

    /// Closes the interval in progress at `now`, `runtime` the thread's exact `sum_exec_runtime`
    /// then: at its wake-up or switch-in, where it ends, and where the thread is on a CPU (it is
    /// switching out, or dying at its final switch) while the entry says otherwise. It adds the
    /// interval's length to the total of its state, less the CPU time the thread held in it, and
    /// no less than a sweep showed of it (`RUNNING` collects nothing).
    ///
    /// Where every event reached the programs, the thread held no CPU in the interval and the
    /// length is all of it. An entry that says it is off a CPU while it is on one missed its
    /// switch-in, and perhaps its wake-up; one closed at a switch-in or wake-up may have missed
    /// a whole slice on a CPU in between, its switch-in and its switch-out (beside the stress
    /// run's neighbours, four burners on two CPUs then showed up to 6.9 ms more run-queue delay
    /// in 1 s than their wall time less their CPU time left room for). The kernel does not
    /// always report switches and wake-ups: on the 6.18 VM montrace is tested on, no
    /// tracepoint fires while the VM's guest agent (pid 1's threads) is the current task, so a
    /// wake-up in an interrupt over the agent, or the switch from the agent to the thread,
    /// never reaches the programs; elsewhere, a program run the
    /// kernel skips (its `recursion_misses`) does the same. Overwritten, the interval since
    /// `since_ns` was lost, and the exit showed less than the last sweep (1.5 s asleep at the
    /// sweep, 0.2 ms at the exit, for a `timeout` whose SIGALRM came over the agent). It is
    /// closed instead in the state last seen, less the CPU time it held (`runtime_ns` was read
    /// at the switch-out that opened it), and never below what a sweep already counted of it
    /// (`reported_ns`): the figures never go back. Whether the thread woke and waited for a CPU
    /// in it is not known; that time is counted in the state last seen.
    #[inline(always)]
    pub fn settle(&mut self, now: u64, runtime: u64) {
        if self.state == wait_state::RUNNING || self.since_ns == 0 || now < self.since_ns {
            return;
        }
        let mut off_cpu = self.in_progress(now, runtime);
        if off_cpu < self.reported_ns {
            off_cpu = self.reported_ns;
        }
        self.total_ns[(self.state & 3) as usize] += off_cpu;
    }
}

/// One live thread of the tree at a sweep, written by the `iter/task` program (`sample`) in
/// binary instead of the text of `/proc/PID/{stat,io}`: the agent reads one iterator per sweep
/// and sums a process's threads (with the exit figures of those that already exited).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TaskSample {
    pub tgid: u32,
    pub tid: u32,
    /// The thread's own `start_boottime` (the process's when `tid == tgid`).
    pub start_ns: u64,
    /// When the program read this thread (`bpf_ktime_get_boot_ns`), before its figures.
    pub read_ns: u64,
    /// `se.sum_exec_runtime`, exact; `utime`/`stime` (tick-sampled) split it as /proc does.
    pub runtime_ns: u64,
    pub utime_ns: u64,
    pub stime_ns: u64,
    /// Resident pages (file + anon + shmem) of the address space, which its threads share; 0
    /// without one. (No high-water mark: the sweeps have no use for it, and the 512-byte stack
    /// of Linux 6.1's verifier, the record and the descriptor words together, has no room.)
    pub rss_pages: u64,
    /// `mm->total_vm`: the virtual size in pages.
    pub vm_pages: u64,
    pub min_flt: u64,
    pub maj_flt: u64,
    pub read_bytes: u64,
    pub write_bytes: u64,
    pub rchar: u64,
    pub wchar: u64,
    /// Time off the CPU while tracked, from `WAITS`, its interval in progress counted up to
    /// the pass (see [`TaskWaits`]): runnable waiting for a CPU, blocked, sleeping.
    pub run_queue_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
    /// `task_struct::__state`.
    pub state: u32,
    /// The process's open descriptors, as `/proc/PID/fd`'s size counts them (the bits set in
    /// its descriptor table's `open_fds`), on its leader's record (`tid == tgid`) only;
    /// [`FDS_UNKNOWN`] on the others' and where the table was too large to count.
    pub fds: u32,
}

/// `TaskSample::fds` when the record does not count them.
pub const FDS_UNKNOWN: u32 = u32::MAX;

/// `TaskWaits::state` values.
pub mod wait_state {
    pub const RUNNING: u32 = 0;
    pub const RUNNABLE: u32 = 1;
    pub const BLOCKED: u32 = 2;
    pub const SLEEPING: u32 = 3;
}

/// `EventHeader::kind` values.
pub mod kind {
    pub const FORK: u32 = 1;
    pub const EXEC: u32 = 2;
    /// The last thread of a process exited (`group_dead`).
    pub const EXIT: u32 = 3;
    /// One thread of a multi-threaded process exited; the process lives on.
    pub const THREAD_EXIT: u32 = 4;
}

/// Indexes of the per-CPU `STATS` array of counters kept in the kernel.
pub mod stat {
    /// An event could not be reserved in the ring buffer (it was full): that event is lost.
    pub const RINGBUF_FULL: u32 = 0;
    /// A new process could not be added to the tracked map (it was full): it and its
    /// descendants are not followed.
    pub const TRACK_MAP_FULL: u32 = 1;
    /// A kernel read failed (`bpf_probe_read_*`), so some field of an event is zero.
    pub const READ_ERRORS: u32 = 2;
    /// An exit could not wait for its final context switch (the pending map was full), so it
    /// was sent at once, without the CPU time since the thread's last tick.
    pub const PENDING_FULL: u32 = 3;
    pub const COUNT: u32 = 4;
}

/// Common start of every event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EventHeader {
    /// One of [`kind`].
    pub kind: u32,
    /// Process id (the kernel's tgid) the event is about.
    pub pid: u32,
    /// When it happened: `bpf_ktime_get_boot_ns()`, nanoseconds since boot (suspend included).
    pub time_ns: u64,
    /// The process's `task_struct::start_boottime` (ns since boot). With `pid` it names a
    /// process uniquely; 0 when the kernel side could not read it (classic-tracepoint fork).
    pub start_ns: u64,
}

/// The pid namespace levels below the host's whose pids a fork record carries (a container is
/// at level 1, a container in a container at 2).
pub const NS_LEVELS: usize = 4;

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ForkEvent {
    pub header: EventHeader,
    pub parent_pid: u32,
    /// How many pid namespaces below the host's the child is (`struct pid::level`; 0: the
    /// host's).
    pub ns_level: u32,
    pub parent_start_ns: u64,
    pub comm: [u8; COMM_LEN],
    /// The child's pid in its pid namespace at level 1, 2, ... [`NS_LEVELS`] (0 past
    /// `ns_level`): what a client in a container calls it. The agent names processes to such a
    /// client by these (`header.pid` is the host's).
    pub ns_pids: [u32; NS_LEVELS],
}

/// The length of a fork record without `ns_pids` (an agent built before they were added sends
/// these): a client reads both, the pids in namespaces then all 0.
pub const FORK_EVENT_SHORT_LEN: usize = core::mem::offset_of!(ForkEvent, ns_pids);

#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ExecEvent {
    pub header: EventHeader,
    /// The thread id that called execve (differs from `pid` when a non-leader thread exec'd).
    pub old_tid: u32,
    /// Bytes of `argv` that are valid.
    pub argv_len: u32,
    /// Total length of the argument area (`mm->arg_end - mm->arg_start`); greater than
    /// `argv_len` when argv was cut.
    pub argv_total_len: u64,
    pub comm: [u8; COMM_LEN],
    pub filename: [u8; FILENAME_LEN],
    pub argv: [u8; ARGV_LEN],
}

/// Final figures of one exiting thread: kind `THREAD_EXIT`, or `EXIT` when it was the last
/// thread of its process. A process's figures are the sum over its threads' exit events; memory
/// figures describe the address space all its threads share.
///
/// It is filled at `sched_process_exit` (while the address space still exists) and sent at the
/// thread's final `sched_switch`, with its CPU time read then: at the exit tracepoint the
/// scheduler has not yet added the time since the last tick or switch, which for a process that
/// lives a few milliseconds is most of its CPU time.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ExitEvent {
    pub header: EventHeader,
    /// Thread id of the exiting task.
    pub tid: u32,
    /// `task_struct::exit_code`, encoded like a wait status: `(status << 8) | signal | 0x80 core`.
    pub exit_code: i32,
    /// Exact CPU time (`se.sum_exec_runtime`), ns.
    pub runtime_ns: u64,
    /// Tick-sampled user and system time, ns; only their ratio is used, to split `runtime_ns`
    /// the way the kernel's `cputime_adjust()` does for getrusage.
    pub utime_ns: u64,
    pub stime_ns: u64,
    /// Peak resident set of this process's own address space, in pages:
    /// `max(mm->hiwater_rss, current rss counters)`. 0 for kernel threads / no mm.
    pub peak_rss_pages: u64,
    /// Resident pages at exit (file + anon + shmem counters); becomes the process's last sample.
    pub rss_pages: u64,
    pub min_flt: u64,
    pub maj_flt: u64,
    pub nvcsw: u64,
    pub nivcsw: u64,
    /// Storage I/O accounting (`task_io_accounting`), bytes.
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Bytes passed to read/write-like syscalls (`rchar`, `wchar`).
    pub rchar: u64,
    pub wchar: u64,
    /// The thread's time off the CPU while tracked (see [`TaskWaits`]), when `waits_known` is
    /// 1: only the BTF tracepoints follow it.
    pub run_queue_ns: u64,
    pub blocked_ns: u64,
    pub sleep_ns: u64,
    pub waits_known: u32,
    /// 1 when `net` holds the thread's socket bytes (the `sock_*_length` programs attached).
    pub net_known: u32,
    pub net: NetBytes,
    pub comm: [u8; COMM_LEN],
    /// The exiting thread's real uid (`bpf_get_current_uid_gid`) and cgroup v2 id
    /// (`bpf_get_current_cgroup_id`, the inode number of its cgroup's directory): who ran it and
    /// where, for the agent's flight recorder.
    pub uid: u32,
    pub _pad: u32,
    pub cgroup_id: u64,
}

/// Kernel struct field offsets, computed in userspace from `/sys/kernel/btf/vmlinux` and written
/// into the eBPF object's read-only global `OFFSETS` before load (aya-ebpf has no CO-RE).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Offsets {
    /// Non-zero once filled in; programs do nothing while it is 0.
    pub ready: u32,
    pub task_pid: u32,
    pub task_tgid: u32,
    pub task_start_boottime: u32,
    pub task_comm: u32,
    pub task_exit_code: u32,
    pub task_utime: u32,
    pub task_stime: u32,
    pub task_sum_exec_runtime: u32,
    pub task_min_flt: u32,
    pub task_maj_flt: u32,
    pub task_nvcsw: u32,
    pub task_nivcsw: u32,
    pub task_ioac: u32,
    pub task_signal: u32,
    pub task_mm: u32,
    pub task_real_parent: u32,
    pub signal_utime: u32,
    pub signal_stime: u32,
    pub signal_sum_sched_runtime: u32,
    pub signal_min_flt: u32,
    pub signal_maj_flt: u32,
    pub signal_nvcsw: u32,
    pub signal_nivcsw: u32,
    pub signal_ioac: u32,
    pub ioac_rchar: u32,
    pub ioac_wchar: u32,
    pub ioac_read_bytes: u32,
    pub ioac_write_bytes: u32,
    pub mm_hiwater_rss: u32,
    /// Where the value of `mm->rss_stat`'s first counter is (with `percpu_counter_count`, 0 where
    /// this already points at it), and the stride between counters: a `struct percpu_counter`
    /// (Linux 6.2 and later) or an `atomic_long_t` of `struct mm_rss_stat` (before).
    pub mm_rss_stat: u32,
    pub percpu_counter_size: u32,
    pub percpu_counter_count: u32,
    pub mm_arg_start: u32,
    pub mm_arg_end: u32,
    pub bprm_filename: u32,
    /// `signal_struct::live` (an atomic_t): 0 at exit means the whole thread group is gone. Used
    /// by the classic exit tracepoint, whose record has no `group_dead` on older kernels.
    pub signal_live: u32,
    /// `task_struct::children` / `sibling` list heads: the classic fork tracepoint gives only the
    /// child's pid, so the child task is found at the tail of the parent's children list.
    pub task_children: u32,
    pub task_sibling: u32,
    /// Offsets inside the classic tracepoint records (`trace_event_raw_sched_process_*`).
    pub tp_fork_child_pid: u32,
    pub tp_exec_filename_loc: u32,
    pub tp_exec_old_pid: u32,
    /// `task_struct::__state`, for the classic `sched_switch` record, which reports the state in
    /// another encoding.
    pub task_state: u32,
    /// `sock::__sk_common.skc_family`: a socket's address family.
    pub sock_family: u32,
    /// Not an offset, but set by the agent at load like them: once this many bytes wait in the
    /// ring buffer, an event wakes the agent up; below it the agent drains on its own timer,
    /// instead of waking up for every event.
    pub wakeup_bytes: u32,
    /// Indexes into `mm->rss_stat[]` (enum `MM_*PAGES`); file, anon and shmem pages make up RSS.
    pub mm_filepages: u32,
    pub mm_anonpages: u32,
    pub mm_shmempages: u32,
    /// `mm_struct::total_vm`: the virtual size, in pages.
    pub mm_total_vm: u32,
    /// The descriptor table: `task_struct::files`, `files_struct::fdt`, and `fdtable`'s
    /// `max_fds` and `open_fds` (a bitmap of `max_fds` bits).
    pub task_files: u32,
    pub files_fdt: u32,
    pub fdt_max_fds: u32,
    pub fdt_open_fds: u32,
    /// `task_struct::flags` (`PF_*`): the task iterator skips kernel threads by it.
    pub task_flags: u32,
    /// The child's pids in its pid namespaces (a fork record's `ns_pids`): `task_struct::
    /// thread_pid` (a `struct pid *`), its `level` and `numbers` (an array of `struct upid`,
    /// `upid_size` bytes each, whose `nr` is at `upid_nr`).
    pub task_thread_pid: u32,
    pub pid_level: u32,
    pub pid_numbers: u32,
    pub upid_size: u32,
    pub upid_nr: u32,
    /// 1 when the kernel's `btf_trace_sched_process_exit` has the `group_dead` argument (it has
    /// since Linux 6.16; before, its only argument is the task, and `tp_btf` programs must not
    /// read past it): read from the kernel's BTF at load, like the offsets.
    pub exit_group_dead_arg: u32,
    /// 1 when `btf_trace_sched_switch` has the `prev_state` argument (Linux 5.18 and later);
    /// before, prev's state is read from its `task_struct`.
    pub switch_prev_state_arg: u32,
    /// `signal_struct::maxrss` (pages): the process's peak resident set as getrusage reports it.
    /// Before Linux 6.16 the exit tracepoint fires after the address space is gone, and this is
    /// the only peak left at exit (it also counts the images the process ran before its last
    /// exec).
    pub signal_maxrss: u32,
    /// 1 when the RSS counters are structs (`percpu_counter`, Linux 6.2 and later) that the
    /// task iterator may load directly; 0 for `atomic_long_t`s, read with the helper.
    pub rss_counters_typed: u32,
    /// Not an offset, but set by the agent at load like them: the task iterator skips the tasks
    /// that started before this (`CLOCK_BOOTTIME` ns) without looking them up in `TRACKED`, as
    /// no process of a `run`'s tree is older than the run; 0 (`attach`) skips none.
    pub tree_born_after_ns: u64,
}

#[cfg(feature = "user")]
mod pod {
    // SAFETY: plain #[repr(C)] structs of integers and byte arrays, any bit pattern valid.
    unsafe impl aya::Pod for super::Offsets {}
    unsafe impl aya::Pod for super::EventHeader {}
    unsafe impl aya::Pod for super::ForkEvent {}
    unsafe impl aya::Pod for super::ExecEvent {}
    unsafe impl aya::Pod for super::ExitEvent {}
    unsafe impl aya::Pod for super::TaskWaits {}
    unsafe impl aya::Pod for super::NetBytes {}
    unsafe impl aya::Pod for super::TaskSample {}
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Asleep since 1,000 ns, the runtime 5,000 ns at that switch-out.
    fn asleep() -> TaskWaits {
        TaskWaits {
            since_ns: 1_000,
            state: wait_state::SLEEPING,
            total_ns: [0, 10, 20, 30],
            runtime_ns: 5_000,
            ..TaskWaits::default()
        }
    }

    #[test]
    fn a_wake_up_or_switch_in_closes_the_interval_in_its_state() {
        // No CPU time since the switch-out (runtime still 5,000): the whole interval.
        let mut w = asleep();
        w.settle(1_600, 5_000);
        assert_eq!(w.total_ns, [0, 10, 20, 630]);
        // On a CPU: nothing to add.
        let mut running = TaskWaits {
            state: wait_state::RUNNING,
            ..asleep()
        };
        running.settle(1_600, 5_000);
        assert_eq!(running.total_ns, [0, 10, 20, 30]);
        // No interval open yet (a new entry), or a clock read before it: nothing either.
        let mut new = TaskWaits {
            since_ns: 0,
            ..asleep()
        };
        new.settle(1_600, 5_000);
        let mut early = asleep();
        early.settle(900, 5_000);
        assert_eq!(new.total_ns, [0, 10, 20, 30]);
        assert_eq!(early.total_ns, [0, 10, 20, 30]);
    }

    #[test]
    fn a_slice_whose_switch_in_and_out_went_unseen_is_not_counted_as_waiting() {
        // Runnable since 1,000 ns; it got a CPU for 250 ns and lost it again, neither switch
        // seen, and its switch-in at 1,600 ns closes the interval: 350 ns waiting, not 600.
        let mut w = TaskWaits {
            state: wait_state::RUNNABLE,
            ..asleep()
        };
        w.settle(1_600, 5_250);
        assert_eq!(w.total_ns, [0, 360, 20, 30]);
    }

    #[test]
    fn a_sweep_shows_the_interval_in_progress_less_the_cpu_time_it_held() {
        let mut w = TaskWaits {
            since_ns: 1_000,
            state: wait_state::RUNNABLE,
            runtime_ns: 5_000,
            ..TaskWaits::default()
        };
        // Waiting all along: the whole interval.
        assert_eq!(w.in_progress(2_000, 5_000), 1_000);
        // Its switch-in unseen, it ran 800 ns of the 1,000: 200 shown, not 1,000.
        assert_eq!(w.in_progress(2_000, 5_800), 200);
        assert_eq!(w.in_progress(2_000, 9_000), 0);
        // On a CPU, or not begun: nothing.
        assert_eq!(w.in_progress(500, 5_000), 0);
        w.state = wait_state::RUNNING;
        assert_eq!(w.in_progress(2_000, 5_000), 0);
    }

    #[test]
    fn an_unseen_switch_in_settles_the_interval_less_its_cpu_time() {
        // Switching out at 2,000 ns after 300 ns on a CPU whose switch-in was never seen: the
        // 1,000 ns interval was 700 ns off the CPU, counted asleep (the state last seen).
        let mut w = asleep();
        w.settle(2_000, 5_300);
        assert_eq!(w.total_ns, [0, 10, 20, 730]);
        // On a CPU as the entry says: nothing to settle.
        let mut running = TaskWaits {
            state: wait_state::RUNNING,
            ..asleep()
        };
        running.settle(2_000, 5_300);
        assert_eq!(running.total_ns, [0, 10, 20, 30]);
        // More CPU than wall time (the runtime read before the interval's start): nothing off it.
        let mut busy = asleep();
        busy.settle(2_000, 9_000);
        assert_eq!(busy.total_ns, [0, 10, 20, 30]);
    }

    #[test]
    fn a_settled_interval_never_adds_less_than_a_sweep_showed_of_it() {
        // A sweep at 1,900 ns counted 900 ns asleep (the thread was on a CPU by then, unseen):
        // settled at 2,000 ns with 300 ns on a CPU, it adds the 900 ns, not 700, so the exit is
        // never below that sweep.
        let mut w = TaskWaits {
            reported_ns: 900,
            ..asleep()
        };
        w.settle(2_000, 5_300);
        assert_eq!(w.total_ns, [0, 10, 20, 930]);
        // Below the exact figure, the sweep changes nothing.
        let mut w = TaskWaits {
            reported_ns: 500,
            ..asleep()
        };
        w.settle(2_000, 5_300);
        assert_eq!(w.total_ns, [0, 10, 20, 730]);
    }
}
