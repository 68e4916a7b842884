//! `sched_process_fork`: a tracked process created a new process; the child joins the tree.
use aya_ebpf::{
    helpers::{bpf_get_current_task, bpf_ktime_get_boot_ns},
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use monitor_common::{kind, stat, EventHeader, ForkEvent};

use crate::{count, off, ready, task, EVENTS, TRACKED};

#[btf_tracepoint(function = "sched_process_fork")]
pub fn fork_btf(ctx: BtfTracePointContext) -> i32 {
    let parent: usize = ctx.arg(0);
    let child: usize = ctx.arg(1);
    handle(parent, child);
    0
}

#[tracepoint]
pub fn fork_tp(ctx: TracePointContext) -> u32 {
    if !ready() {
        return 0;
    }
    // SAFETY: the offset comes from the record's BTF layout (trace_event_raw_sched_process_fork).
    let child_pid = unsafe { ctx.read_at::<i32>(off!(tp_fork_child_pid)) }.unwrap_or(0) as u32;
    // SAFETY: the helper returns the running task (the parent at this tracepoint).
    let parent = unsafe { bpf_get_current_task() } as usize;
    if let Some(child) = find_child(parent, child_pid) {
        handle(parent, child);
    }
    0
}

/// The classic record carries only the child's pid. A new process is appended to its parent's
/// `children` list (copy_process, under tasklist_lock) before this tracepoint fires, so it sits
/// at the tail; a few entries are checked in case a sibling thread forked at the same time.
/// A thread (CLONE_THREAD) is never on that list: not finding the pid means "not a process".
fn find_child(parent: usize, child_pid: u32) -> Option<usize> {
    let head = parent + off!(task_children);
    let mut node: usize = task::read(head, 8); // list_head.prev: the last child
    let sibling = off!(task_sibling);
    for _ in 0..4 {
        if node == 0 || node == head {
            return None;
        }
        let child = node - sibling;
        if task::pid(child) == child_pid {
            return Some(child);
        }
        node = task::read(node, 8);
    }
    None
}

fn handle(parent: usize, child: usize) {
    if !ready() {
        return;
    }
    let parent_tgid = task::tgid(parent);
    let child_tgid = task::tgid(child);
    // A new thread of a tracked process is not a new process.
    if parent_tgid == child_tgid {
        return;
    }
    // SAFETY: the map value is a plain u64 copied out at once.
    let parent_start = match unsafe { TRACKED.get(&parent_tgid) } {
        Some(start) => *start,
        // The whole machine: any new user process (a kernel thread's flags say PF_KTHREAD).
        None if crate::track_all() => {
            const PF_KTHREAD: u32 = 0x0020_0000;
            if task::read::<u32>(child, off!(task_flags)) & PF_KTHREAD != 0 {
                return;
            }
            task::start_ns(parent)
        }
        None => return,
    };
    let child_start = task::start_ns(child);
    let (ns_level, ns_pids) = task::ns_pids(child);
    if TRACKED.insert(&child_tgid, &child_start, 0).is_err() {
        count(stat::TRACK_MAP_FULL);
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<ForkEvent>(0) else {
        count(stat::RINGBUF_FULL);
        return;
    };
    entry.write(ForkEvent {
        header: EventHeader {
            kind: kind::FORK,
            pid: child_tgid,
            // SAFETY: plain helper call.
            time_ns: unsafe { bpf_ktime_get_boot_ns() },
            start_ns: child_start,
        },
        parent_pid: parent_tgid,
        ns_level,
        parent_start_ns: parent_start,
        comm: task::comm(child),
        ns_pids,
    });
    entry.submit(crate::submit_flags());
}
