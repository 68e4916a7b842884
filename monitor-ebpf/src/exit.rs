//! `sched_process_exit`: a thread of a tracked process exited. Every event carries that
//! thread's own figures; the agent sums a process's thread exits. Reading `signal_struct`'s
//! totals instead would be wrong twice: a leader that exited first (pthread_exit) stays a zombie
//! whose figures are folded in only at reaping, and `wait_task_zombie()` adds reaped children's
//! I/O into the parent's `signal->ioac`. When the last thread exits (`group_dead`) the process
//! leaves `TRACKED`. Since Linux 6.16 this tracepoint fires before `exit_mm()`, so the address space,
//! and with it the process's own peak RSS, is still readable; before, the peak is the kernel's
//! `signal->maxrss` (see `handle`), and the tracepoint has no `group_dead` argument.
use aya_ebpf::{
    helpers::bpf_get_current_task,
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use monitor_common::{kind, stat, EventHeader};

use crate::{count, off, ready, switch, task, NET, PENDING, SCRATCH, TRACKED};

#[btf_tracepoint(function = "sched_process_exit")]
pub fn exit_btf(ctx: BtfTracePointContext) -> i32 {
    if !ready() {
        return 0;
    }
    let current: usize = ctx.arg(0);
    // `group_dead` is an argument since Linux 6.16; before, the prototype has the task only and
    // the verifier refuses a read of a second argument. The flag is a constant of the read-only
    // OFFSETS, so the verifier drops the branch the kernel does not have.
    let group_dead = if off!(exit_group_dead_arg) != 0 {
        let group_dead: u64 = ctx.arg(1);
        // The bool argument occupies a whole register slot; only its low byte is defined.
        group_dead & 0xff != 0
    } else {
        last_thread(current)
    };
    handle(current, group_dead);
    0
}

/// do_exit() decrements signal->live before the exit tracepoint: 0 means the last thread.
fn last_thread(task: usize) -> bool {
    let signal: usize = task::read(task, off!(task_signal));
    let live: i32 = task::read(signal, off!(signal_live));
    live == 0
}

#[tracepoint]
pub fn exit_tp(_ctx: TracePointContext) -> u32 {
    if !ready() {
        return 0;
    }
    // SAFETY: the helper returns the running task, the one exiting.
    let current = unsafe { bpf_get_current_task() } as usize;
    handle(current, last_thread(current));
    0
}

fn handle(task: usize, group_dead: bool) {
    if !ready() {
        return;
    }
    let tgid = task::tgid(task);
    // SAFETY: value copied out at once.
    let start_ns = match unsafe { TRACKED.get(&tgid) } {
        // Seeded by the agent's whole-machine mode from /proc, without its start time.
        Some(start) if *start == 0 && crate::track_all() => task::start_ns(task),
        Some(start) => *start,
        None => return,
    };
    // Where `group_dead` is read from signal->live, two threads exiting at once can both read 0:
    // the one that removes the process sends its exit, the other is a thread already counted.
    if group_dead && TRACKED.remove(&tgid).is_err() {
        return;
    }
    let Some(e) = SCRATCH.get_ptr_mut(0) else {
        return;
    };
    let ioac = off!(task_ioac);
    let (mut peak, current) = task::rss_pages::<task::Probe>(task);
    // Before Linux 6.16 this tracepoint fires after exit_mm(): no address space is left, and the
    // last thread's do_exit() has folded its peak into signal->maxrss (setmax_mm_hiwater_rss),
    // the figure getrusage reports, which counts the images before the last exec too.
    if peak == 0 && group_dead {
        let signal: usize = task::read(task, off!(task_signal));
        // In pages (getrusage converts it to KiB).
        peak = task::read(signal, off!(signal_maxrss));
    }
    let tid = task::pid(task);
    // SAFETY: this CPU's scratch slot; nothing else runs on this CPU while the program does.
    unsafe {
        (*e).header = EventHeader {
            kind: if group_dead {
                kind::EXIT
            } else {
                kind::THREAD_EXIT
            },
            pid: tgid,
            time_ns: 0,
            start_ns,
        };
        (*e).tid = tid;
        (*e).exit_code = task::read(task, off!(task_exit_code));
        (*e).runtime_ns = task::read(task, off!(task_sum_exec_runtime));
        (*e).utime_ns = task::read(task, off!(task_utime));
        (*e).stime_ns = task::read(task, off!(task_stime));
        (*e).peak_rss_pages = peak;
        (*e).rss_pages = current;
        (*e).min_flt = task::read(task, off!(task_min_flt));
        (*e).maj_flt = task::read(task, off!(task_maj_flt));
        (*e).nvcsw = task::read(task, off!(task_nvcsw));
        (*e).nivcsw = task::read(task, off!(task_nivcsw));
        (*e).read_bytes = task::read(task, ioac + off!(ioac_read_bytes));
        (*e).write_bytes = task::read(task, ioac + off!(ioac_write_bytes));
        (*e).rchar = task::read(task, ioac + off!(ioac_rchar));
        (*e).wchar = task::read(task, ioac + off!(ioac_wchar));
        (*e).comm = task::comm(task);
        // Filled at the final switch from `WAITS` (BTF tracepoints only).
        (*e).run_queue_ns = 0;
        (*e).blocked_ns = 0;
        (*e).sleep_ns = 0;
        (*e).waits_known = 0;
        // This thread's socket bytes (the agent sums a process's threads).
        (*e).net = monitor_common::NetBytes::default();
        if let Some(net) = NET.get_ptr(&tid) {
            (*e).net = *net;
        }
        let _ = NET.remove(&tid);
        (*e).net_known = crate::net_attached() as u32;
        // The exiting task is the current one at this tracepoint.
        (*e).uid = aya_ebpf::helpers::bpf_get_current_uid_gid() as u32;
        (*e)._pad = 0;
        (*e).cgroup_id = aya_ebpf::helpers::generated::bpf_get_current_cgroup_id();
        // Sent at the thread's final context switch, with its CPU time complete then; if the
        // pending map is full, now, with what the scheduler has accounted so far.
        if PENDING.insert(&tid, &*e, 0).is_err() {
            count(stat::PENDING_FULL);
            switch::send(&mut *e);
        }
    }
}
