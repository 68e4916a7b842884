//! `sched_process_exec`: a tracked process replaced its program. Filename and argv are read here,
//! in the kernel: a process that lives 1 ms is gone before anything could read /proc.
use aya_ebpf::{
    cty::c_void,
    helpers::{
        bpf_get_current_task, bpf_ktime_get_boot_ns, bpf_probe_read_kernel_str_bytes,
        generated::bpf_probe_read_user,
    },
    macros::{btf_tracepoint, tracepoint},
    programs::{BtfTracePointContext, TracePointContext},
    EbpfContext,
};
use monitor_common::{kind, stat, EventHeader, ExecEvent, ARGV_LEN};

use crate::{count, off, ready, task, EVENTS, TRACKED};

#[btf_tracepoint(function = "sched_process_exec")]
pub fn exec_btf(ctx: BtfTracePointContext) -> i32 {
    if !ready() {
        return 0;
    }
    let current: usize = ctx.arg(0);
    let old_tid: i32 = ctx.arg(1);
    let bprm: usize = ctx.arg(2);
    let filename: usize = task::read(bprm, off!(bprm_filename));
    handle(current, old_tid as u32, filename);
    0
}

#[tracepoint]
pub fn exec_tp(ctx: TracePointContext) -> u32 {
    if !ready() {
        return 0;
    }
    // SAFETY: offsets from the record's BTF layout (trace_event_raw_sched_process_exec).
    let loc = unsafe { ctx.read_at::<u32>(off!(tp_exec_filename_loc)) }.unwrap_or(0);
    // SAFETY: as above.
    let old_tid = unsafe { ctx.read_at::<i32>(off!(tp_exec_old_pid)) }.unwrap_or(0);
    // __data_loc: low 16 bits are the string's offset inside the record.
    let filename = ctx.as_ptr() as usize + (loc & 0xffff) as usize;
    // SAFETY: the helper returns the running task, the one that exec'd.
    let current = unsafe { bpf_get_current_task() } as usize;
    handle(current, old_tid as u32, filename);
    0
}

fn handle(current: usize, old_tid: u32, filename: usize) {
    let tgid = task::tgid(current);
    // SAFETY: value copied out at once.
    if unsafe { TRACKED.get(&tgid) }.is_none() {
        return;
    }
    let Some(mut entry) = EVENTS.reserve::<ExecEvent>(0) else {
        count(stat::RINGBUF_FULL);
        return;
    };
    let e = entry.as_mut_ptr();
    // SAFETY: `e` points at a reserved, exclusively owned ExecEvent in the ring buffer; every
    // field the agent reads is written below before submit.
    unsafe {
        (*e).header = EventHeader {
            kind: kind::EXEC,
            pid: tgid,
            time_ns: bpf_ktime_get_boot_ns(),
            start_ns: task::start_ns(current),
        };
        (*e).old_tid = old_tid;
        (*e).comm = task::comm(current);
        if bpf_probe_read_kernel_str_bytes(filename as *const u8, &mut (*e).filename).is_err() {
            (*e).filename[0] = 0;
            count(stat::READ_ERRORS);
        }
        // argv sits NUL-separated between mm->arg_start and arg_end on the new stack, which the
        // kernel has just written, so it is resident.
        let mm: usize = task::read(current, off!(task_mm));
        let start: u64 = task::read(mm, off!(mm_arg_start));
        let end: u64 = task::read(mm, off!(mm_arg_end));
        let total = end.saturating_sub(start);
        let mut len = total;
        if len > ARGV_LEN as u64 {
            len = ARGV_LEN as u64;
        }
        (*e).argv_total_len = total;
        let rc = bpf_probe_read_user(
            (*e).argv.as_mut_ptr() as *mut c_void,
            len as u32,
            start as *const c_void,
        );
        (*e).argv_len = if rc == 0 {
            len as u32
        } else {
            count(stat::READ_ERRORS);
            0
        };
    }
    entry.submit(crate::submit_flags());
}
