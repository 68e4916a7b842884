//! montrace's kernel side: follows a process tree through `sched_process_fork`, `_exec` and
//! `_exit`, and reports each process's final figures at exit.
//!
//! Filtering happens here: `TRACKED` holds the live processes of the tree (tgid -> start time),
//! a child inherits tracking at fork, and an exit removes it. Nothing outside the tree reaches
//! the ring buffer.
//!
//! Each tracepoint has two entry points: a BTF tracepoint (`tp_btf`, typed task pointers, no
//! tracefs) and a classic tracepoint fallback. Both call the same handler in that event's file.
#![no_std]
#![no_main]

mod exec;
mod exit;
mod fork;
mod net;
mod sample;
mod switch;
mod task;
mod waits;

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray, RingBuf},
};
use monitor_common::{
    ExitEvent, NetBytes, Offsets, TaskWaits, MAX_NET_THREADS, MAX_PENDING_EXITS, MAX_TRACKED,
    MAX_WAITING_THREADS, RING_BUFFER_BYTES,
};

/// Kernel field offsets, written by the agent before load (see `monitor::kernel::btf`).
#[no_mangle]
static OFFSETS: Offsets = unsafe { core::mem::zeroed() };

/// 1 for the resident agent's whole-machine mode (`montrace agent --history`), written by the
/// loader before load like `OFFSETS`: every user process forked is tracked, not only the
/// children of tracked ones (kernel threads never are), and an exit of a process seeded without
/// its start time reads it from the task. 0 (every `run` and `attach`): only the trees put in
/// `TRACKED`.
#[no_mangle]
static TRACK_ALL: u32 = 0;

pub(crate) fn track_all() -> bool {
    // SAFETY: a read of a static the loader patched into .rodata; volatile so that the compiler
    // cannot fold its zero initial value.
    unsafe { core::ptr::read_volatile(core::ptr::addr_of!(TRACK_ALL)) != 0 }
}

/// Lifecycle events for the agent.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

/// Live processes of the tree: tgid -> `start_boottime` (ns). The agent inserts the command's pid
/// before letting it exec; forks add children; group exits remove them.
#[map]
static TRACKED: HashMap<u32, u64> = HashMap::with_max_entries(MAX_TRACKED, 0);

/// Exited threads (by tid) waiting for their final context switch, where their CPU time is
/// complete and their exit event is sent (see `switch`).
#[map]
static PENDING: HashMap<u32, ExitEvent> = HashMap::with_max_entries(MAX_PENDING_EXITS, 0);

/// Where each thread of the tree spent its time off the CPU (by tid; see `waits`).
#[map]
static WAITS: HashMap<u32, TaskWaits> = HashMap::with_max_entries(MAX_WAITING_THREADS, 0);

/// Socket bytes of each tracked thread that used a socket (by tid; see `net`).
#[map]
static NET: HashMap<u32, NetBytes> = HashMap::with_max_entries(MAX_NET_THREADS, 0);

/// What the agent attached beyond the process tracepoints, set after attaching: index 0 is 1
/// when the `sock_*_length` programs run (socket bytes are then known, 0 included).
#[map]
static FEATURES: Array<u32> = Array::with_max_entries(1, 0);

pub(crate) fn net_attached() -> bool {
    FEATURES.get(0).is_some_and(|v| *v == 1)
}

/// One exit event under construction per CPU: the 512-byte BPF stack cannot hold it.
#[map]
static SCRATCH: PerCpuArray<ExitEvent> = PerCpuArray::with_max_entries(1, 0);

/// Counters of what could not be delivered (see `monitor_common::stat`).
#[map]
static STATS: PerCpuArray<u64> = PerCpuArray::with_max_entries(monitor_common::stat::COUNT, 0);

/// Reads one field of `OFFSETS`. Volatile so the compiler cannot fold the zero initial value.
macro_rules! off {
    ($field:ident) => {{
        // SAFETY: reading a field of a static through a raw pointer; the loader has patched the
        // value into the object's .rodata before load.
        #[allow(unused_unsafe)]
        let value = unsafe { core::ptr::read_volatile(core::ptr::addr_of!(crate::OFFSETS.$field)) };
        value as usize
    }};
}
pub(crate) use off;

pub(crate) fn ready() -> bool {
    off!(ready) != 0
}

/// Flags for submitting an event: no wake-up while the agent's drain timer can keep up, a
/// forced one once the ring buffer fills up (`wakeup_bytes`, a quarter of it).
pub(crate) fn submit_flags() -> u64 {
    const BPF_RB_AVAIL_DATA: u64 = 0;
    const BPF_RB_NO_WAKEUP: u64 = 1;
    const BPF_RB_FORCE_WAKEUP: u64 = 2;
    if EVENTS.query(BPF_RB_AVAIL_DATA) >= off!(wakeup_bytes) as u64 {
        BPF_RB_FORCE_WAKEUP
    } else {
        BPF_RB_NO_WAKEUP
    }
}

pub(crate) fn count(stat: u32) {
    if let Some(slot) = STATS.get_ptr_mut(stat) {
        // SAFETY: per-CPU slot, no concurrent writer on this CPU while the program runs.
        unsafe { *slot += 1 };
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 13] = *b"Dual MIT/GPL\0";
