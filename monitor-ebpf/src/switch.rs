//! `sched_switch`, for two purposes: the final context switch of an exited thread, and the
//! waiting times of the tree's threads (`waits`, BTF tracepoint only). The exit event (filled at
//! `sched_process_exit`, see `exit`) waits in `PENDING` until the final switch, because only now
//! has the scheduler added the thread's last slice of CPU time (`dequeue_entity()` calls
//! `update_curr()` before the switch).
use aya_ebpf::{
    helpers::{bpf_get_current_task, bpf_ktime_get_boot_ns},
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
};
use monitor_common::{stat, wait_state, ExitEvent, TASK_DEAD};

use crate::{count, off, ready, task, waits, EVENTS, PENDING, WAITS};

#[btf_tracepoint(function = "sched_switch")]
pub fn switch_btf(ctx: BtfTracePointContext) -> i32 {
    // (bool preempt, struct task_struct *prev, struct task_struct *next, unsigned int prev_state)
    let preempt: u64 = ctx.arg(0);
    let prev: usize = ctx.arg(1);
    let next: usize = ctx.arg(2);
    if !ready() {
        return 0;
    }
    // `prev_state` is an argument since Linux 5.18; before, it is prev's own state (a constant
    // flag of the read-only OFFSETS: the verifier drops the branch the kernel does not have).
    let prev_state: u64 = if off!(switch_prev_state_arg) != 0 {
        ctx.arg(3)
    } else {
        task::read::<u32>(prev, off!(task_state)) as u64
    };
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    if prev_state as u32 & TASK_DEAD != 0 {
        finish(prev, now);
    } else {
        // The bool argument occupies a whole register slot; only its low byte is defined.
        waits::switched_out(prev, prev_state as u32, preempt & 0xff != 0, now);
    }
    waits::switched_in(next, now);
    0
}

#[tracepoint]
pub fn switch_tp(_ctx: TracePointContext) -> u32 {
    if !ready() {
        return 0;
    }
    // The classic record encodes prev_state differently; the switch runs on prev's stack, so
    // the current task is prev, and its own state says TASK_DEAD.
    // SAFETY: the helper returns the running task.
    let current = unsafe { bpf_get_current_task() } as usize;
    let state: u32 = task::read(current, off!(task_state));
    if state & TASK_DEAD != 0 {
        // SAFETY: plain helper call.
        finish(current, unsafe { bpf_ktime_get_boot_ns() });
    }
    0
}

fn finish(task: usize, now: u64) {
    if !ready() {
        return;
    }
    let tid = task::pid(task);
    let Some(pending) = PENDING.get_ptr_mut(&tid) else {
        let _ = WAITS.remove(&tid);
        return;
    };
    // SAFETY: a valid map value for the duration of the program; the dead thread's own final
    // switch is the only place that completes it.
    unsafe {
        (*pending).runtime_ns = task::read(task, off!(task_sum_exec_runtime));
        (*pending).utime_ns = task::read(task, off!(task_utime));
        (*pending).stime_ns = task::read(task, off!(task_stime));
        (*pending).nvcsw = task::read(task, off!(task_nvcsw));
        (*pending).nivcsw = task::read(task, off!(task_nivcsw));
        if let Some(w) = WAITS.get_ptr_mut(&tid) {
            // On its CPU until now, whatever the entry says (see `TaskWaits::settle`).
            (*w).settle(now, (*pending).runtime_ns);
            (*pending).run_queue_ns = (*w).total_ns[wait_state::RUNNABLE as usize];
            (*pending).blocked_ns = (*w).total_ns[wait_state::BLOCKED as usize];
            (*pending).sleep_ns = (*w).total_ns[wait_state::SLEEPING as usize];
            (*pending).waits_known = 1;
        }
        send(&mut *pending);
    }
    let _ = PENDING.remove(&tid);
    let _ = WAITS.remove(&tid);
}

/// Stamps and sends an exit event (copied from map memory into the ring buffer).
pub fn send(event: &mut ExitEvent) {
    // SAFETY: plain helper call.
    event.header.time_ns = unsafe { bpf_ktime_get_boot_ns() };
    if EVENTS
        .output::<ExitEvent>(&*event, crate::submit_flags())
        .is_err()
    {
        count(stat::RINGBUF_FULL);
    }
}
