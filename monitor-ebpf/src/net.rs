//! Socket bytes per thread: `sock_send_length` and `sock_recv_length` (Linux 6.3 and later)
//! fire with the length every send and receive moved; a tracked thread's bytes add up in `NET`
//! by address family (inet, unix), and go out with its exit event (`exit`); the agent sums a
//! process's threads. Per thread, so that no two CPUs ever add to one entry at once.

use aya_ebpf::{
    helpers::bpf_get_current_pid_tgid, macros::btf_tracepoint, programs::BtfTracePointContext,
};
use monitor_common::{NetBytes, AF_INET, AF_INET6, AF_UNIX, MSG_PEEK};

use crate::{off, ready, task, NET, TRACKED};

#[btf_tracepoint(function = "sock_send_length")]
pub fn send_length_btf(ctx: BtfTracePointContext) -> i32 {
    // (struct sock *sk, int ret, int flags)
    let sk: usize = ctx.arg(0);
    let ret: i64 = ctx.arg(1);
    if ready() {
        count(sk, ret as i32, true);
    }
    0
}

#[btf_tracepoint(function = "sock_recv_length")]
pub fn recv_length_btf(ctx: BtfTracePointContext) -> i32 {
    let sk: usize = ctx.arg(0);
    let ret: i64 = ctx.arg(1);
    let flags: i64 = ctx.arg(2);
    // A peek leaves the data queued: the receive that takes it counts it.
    if ready() && flags as u32 & MSG_PEEK == 0 {
        count(sk, ret as i32, false);
    }
    0
}

fn count(sk: usize, len: i32, sent: bool) {
    if len <= 0 {
        return;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (tgid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // SAFETY: the value is only tested for presence.
    if unsafe { TRACKED.get(&tgid) }.is_none() {
        return;
    }
    let family: u16 = task::read(sk, off!(sock_family));
    // Which counter: 0..4 in the order of `NetBytes`.
    let index = match family {
        AF_INET | AF_INET6 => 0,
        AF_UNIX => 2,
        _ => return,
    } + if sent { 0 } else { 1 };
    let mut entry = NET.get_ptr_mut(&tid);
    if entry.is_none() {
        let _ = NET.insert(&tid, &NetBytes::default(), 0);
        entry = NET.get_ptr_mut(&tid);
    }
    let Some(bytes) = entry else {
        return;
    };
    // SAFETY: a valid map value of four u64 counters, the index masked into them; only this
    // thread, running here, adds to its entry.
    unsafe {
        let counters = bytes as *mut u64;
        *counters.add(index & 3) += len as u64;
    }
}
