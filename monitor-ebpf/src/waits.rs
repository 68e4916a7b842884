//! Where a tracked thread's time goes off the CPU: run-queue delay (runnable, waiting for a
//! CPU), blocked (the D state) and sleeping, per thread in `WAITS`, from `sched_switch` (an
//! interval starts when a thread leaves the CPU, and a run-queue wait ends when it comes back)
//! and `sched_wakeup`/`sched_wakeup_new` (a sleep or block ends, a run-queue wait starts). The
//! thread's totals go out with its exit event (`switch::finish`). Only the BTF tracepoints feed
//! it: the classic `sched_switch` record has no task pointers.
use aya_ebpf::{
    helpers::bpf_ktime_get_boot_ns, macros::btf_tracepoint, programs::BtfTracePointContext,
};
use monitor_common::{wait_state, TaskWaits, TASK_NOLOAD, TASK_UNINTERRUPTIBLE};

use crate::{off, ready, task, TRACKED, WAITS};

#[btf_tracepoint(function = "sched_wakeup")]
pub fn wakeup_btf(ctx: BtfTracePointContext) -> i32 {
    let woken: usize = ctx.arg(0);
    if ready() {
        wake(woken);
    }
    0
}

#[btf_tracepoint(function = "sched_wakeup_new")]
pub fn wakeup_new_btf(ctx: BtfTracePointContext) -> i32 {
    let new: usize = ctx.arg(0);
    if ready() && unsafe { TRACKED.get(&task::tgid(new)) }.is_some() {
        // SAFETY: plain helper call.
        let now = unsafe { bpf_ktime_get_boot_ns() };
        // The wait starts at the thread's birth (its start time, the one its rows carry), not at
        // this wake-up: between the two the forking parent finishes the fork, and on a busy
        // machine it can lose its CPU there for milliseconds. Counted here as waiting for a CPU,
        // the thread's CPU and waits add up to the whole of its wall time.
        let born = task::start_ns(new);
        let waits = TaskWaits {
            since_ns: if born > 0 && born <= now { born } else { now },
            state: wait_state::RUNNABLE,
            tgid: task::tgid(new),
            ..TaskWaits::default()
        };
        let _ = WAITS.insert(&task::pid(new), &waits, 0);
    }
    0
}

/// A thread woke up: its sleep or block ends, its wait for a CPU begins.
fn wake(woken: usize) {
    let Some(w) = WAITS.get_ptr_mut(&task::pid(woken)) else {
        return;
    };
    // SAFETY: a valid map value for the duration of the program; one CPU updates a thread's
    // entry at a time (the scheduler holds its run-queue lock).
    unsafe {
        match (*w).state {
            wait_state::BLOCKED | wait_state::SLEEPING => {
                // SAFETY: plain helper call.
                let now = bpf_ktime_get_boot_ns();
                (*w).settle(now, task::read(woken, off!(task_sum_exec_runtime)));
                (*w).state = wait_state::RUNNABLE;
                (*w).since_ns = now;
                (*w).reported_ns = 0;
            }
            _ => {}
        }
    }
}

/// `prev` leaves the CPU: still runnable when `preempted` or its state is 0; otherwise blocked
/// or sleeping, until its wake-up.
pub fn switched_out(prev: usize, prev_state: u32, preempted: bool, now: u64) {
    let tid = task::pid(prev);
    let mut entry = WAITS.get_ptr_mut(&tid);
    if entry.is_none() && unsafe { TRACKED.get(&task::tgid(prev)) }.is_some() {
        let waits = TaskWaits {
            tgid: task::tgid(prev),
            ..TaskWaits::default()
        };
        let _ = WAITS.insert(&tid, &waits, 0);
        entry = WAITS.get_ptr_mut(&tid);
    }
    let Some(w) = entry else {
        return;
    };
    let state = if preempted || prev_state == 0 {
        wait_state::RUNNABLE
    } else if prev_state & TASK_UNINTERRUPTIBLE != 0 && prev_state & TASK_NOLOAD == 0 {
        wait_state::BLOCKED
    } else {
        wait_state::SLEEPING
    };
    // The scheduler has added the slice that ends here (update_curr() before the switch).
    let runtime: u64 = task::read(prev, off!(task_sum_exec_runtime));
    // SAFETY: as in `wake`.
    unsafe {
        // On a CPU until now, whatever the entry says (see `TaskWaits::settle`).
        (*w).settle(now, runtime);
        (*w).state = state;
        (*w).since_ns = now;
        (*w).runtime_ns = runtime;
        (*w).reported_ns = 0;
    }
}

/// `next` gets the CPU: its wait for it ends.
pub fn switched_in(next: usize, now: u64) {
    if let Some(w) = WAITS.get_ptr_mut(&task::pid(next)) {
        let runtime: u64 = task::read(next, off!(task_sum_exec_runtime));
        // SAFETY: as in `wake`.
        unsafe {
            // Less any slice on a CPU whose switches went unseen (see `TaskWaits::settle`).
            (*w).settle(now, runtime);
            (*w).state = wait_state::RUNNING;
            (*w).since_ns = now;
            (*w).reported_ns = 0;
            (*w).runtime_ns = runtime;
        }
    }
}
