//! `iter/task`: one sweep's figures of every live thread of the tree, written in binary
//! (`TaskSample`) to the iterator's file, which the agent reads instead of the text of
//! `/proc/PID/stat` and `/proc/PID/io` for each process: the kernel formats no text, and one
//! read returns the whole tree. The kernel calls the program for every task on the machine;
//! those outside `TRACKED` are skipped, kernel threads (never tracked) and tasks older than the
//! run (`tree_born_after_ns`) before the map lookup, which costs more than reading their flags
//! and start time (a machine has from tens to thousands of them).
use aya_ebpf::{
    bindings::seq_file,
    helpers::{bpf_ktime_get_boot_ns, generated::bpf_seq_write},
};
use monitor_common::{wait_state, TaskSample, FDS_UNKNOWN};

use crate::{
    off, ready,
    task::{self, Direct, Reader as _},
    TRACKED, WAITS,
};

/// `struct bpf_iter__task`: the iterator's context.
#[repr(C)]
pub struct IterTask {
    /// `struct bpf_iter_meta *`, whose first field is the `seq_file *` to write to.
    meta: *const *mut seq_file,
    /// `struct task_struct *`, NULL at the end of the walk.
    task: usize,
}

#[no_mangle]
#[link_section = "iter/task"]
pub fn sample_tasks(ctx: *const IterTask) -> i32 {
    // SAFETY: the kernel passes a valid context; its fields are read with typed loads, which
    // the verifier knows the types of (the seq_file pointer must stay one for the helper).
    let (meta, task) = unsafe { ((*ctx).meta, (*ctx).task) };
    if task == 0 || !ready() {
        return 0;
    }
    // The task and every struct pointer read from it are typed (BTF) for the verifier: plain
    // loads (`task::Direct`), not a helper call per field.
    let get = |base: usize, offset: usize| -> u64 { Direct::get(base, offset) };
    // include/linux/sched.h
    const PF_KTHREAD: u32 = 0x0020_0000;
    if Direct::get::<u32>(task, off!(task_flags)) & PF_KTHREAD != 0 {
        return 0;
    }
    let start_ns: u64 = Direct::get(task, off!(task_start_boottime));
    if start_ns < off!(tree_born_after_ns) as u64 {
        return 0;
    }
    let tgid = Direct::get::<i32>(task, off!(task_tgid)) as u32;
    let tid = Direct::get::<i32>(task, off!(task_pid)) as u32;
    // Every struct pointer at once, before any branch that goes on (see `task::Direct`): wasted
    // on a task of the run's age outside the tree, which is rare.
    let mm: usize = Direct::get(task, off!(task_mm));
    let files: usize = Direct::get(task, off!(task_files));
    let fdt: usize = Direct::get(files, off!(files_fdt));
    // A thread of the tree has its entry in `WAITS` once it has left a CPU (only tracked threads
    // get one): one map lookup for it, the tracked map's too only for the others (each lookup
    // costs a few hundred ns, most of the program's time).
    let waits_so_far = WAITS.get_ptr_mut(&tid);
    // SAFETY: checked for presence only.
    if waits_so_far.is_none() && unsafe { TRACKED.get(&tgid) }.is_none() {
        return 0;
    }
    // When this thread was read, before any of its figures (its state included): a thread seen
    // alive here sends its exit event later, so the recorder's exit row, stamped then, comes
    // after this row (the pass's own end, stamped in user space, can come after both).
    // SAFETY: plain helper call.
    let now = unsafe { bpf_ktime_get_boot_ns() };
    let ioac = off!(task_ioac);
    let (_, rss) = task::mm_rss_pages::<Direct>(mm);
    // Its waiting times so far, the interval in progress up to now (as `TaskWaits::close` would).
    let mut waits = [0u64; 4];
    let mut runtime_ns: u64 = get(task, off!(task_sum_exec_runtime));
    // SAFETY: a map value stays valid while the program runs (read without a copy: the 512-byte
    // stack holds the sample and the descriptor words already).
    if let Some(w) = waits_so_far.map(|w| unsafe { &mut *w }) {
        waits = w.total_ns;
        let state = (w.state & 3) as usize;
        if w.since_ns != 0 && now > w.since_ns {
            if state != wait_state::RUNNING as usize {
                // Less the CPU time it held meanwhile (its switch-in may have gone unseen).
                let so_far = w.in_progress(now, runtime_ns);
                waits[state] += so_far;
                // What this sweep showed of the interval: its close adds no less, should the
                // programs miss the thread's switch-in (`TaskWaits::settle`).
                if so_far > w.reported_ns {
                    w.reported_ns = so_far;
                }
            } else if w.runtime_ns + (now - w.since_ns) > runtime_ns {
                // On a CPU: the slice in progress is not in sum_exec_runtime yet.
                runtime_ns = w.runtime_ns + (now - w.since_ns);
            }
        }
    }
    let sample = TaskSample {
        tgid,
        tid,
        start_ns,
        read_ns: now,
        runtime_ns,
        utime_ns: get(task, off!(task_utime)),
        stime_ns: get(task, off!(task_stime)),
        rss_pages: rss,
        vm_pages: get(mm, off!(mm_total_vm)),
        min_flt: get(task, off!(task_min_flt)),
        maj_flt: get(task, off!(task_maj_flt)),
        read_bytes: get(task, ioac + off!(ioac_read_bytes)),
        write_bytes: get(task, ioac + off!(ioac_write_bytes)),
        rchar: get(task, ioac + off!(ioac_rchar)),
        wchar: get(task, ioac + off!(ioac_wchar)),
        run_queue_ns: waits[wait_state::RUNNABLE as usize],
        blocked_ns: waits[wait_state::BLOCKED as usize],
        sleep_ns: waits[wait_state::SLEEPING as usize],
        state: Direct::get(task, off!(task_state)),
        // The descriptor table is the process's: counted once, on its leader's record.
        fds: if tid == tgid {
            task::open_fds::<Direct>(files, fdt)
        } else {
            FDS_UNKNOWN
        },
    };
    // SAFETY: `meta` is the kernel's; the record lives on this stack for the call.
    unsafe {
        let seq = *meta;
        bpf_seq_write(
            seq,
            &sample as *const TaskSample as *const core::ffi::c_void,
            core::mem::size_of::<TaskSample>() as u32,
        );
    }
    0
}
