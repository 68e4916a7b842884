//! Reads of kernel structs at the offsets the agent computed from BTF.
use aya_ebpf::helpers::bpf_probe_read_kernel;
use monitor_common::{stat, COMM_LEN, FDS_UNKNOWN};

use crate::{count, off};

/// Reads a `T` at `base + offset`; a failed read counts in `STATS` and yields the default.
#[inline(always)]
pub fn read<T: Default + Copy>(base: usize, offset: usize) -> T {
    if base == 0 {
        return T::default();
    }
    // SAFETY: bpf_probe_read_kernel validates the address; a fault returns an error, not a crash.
    match unsafe { bpf_probe_read_kernel((base + offset) as *const T) } {
        Ok(v) => v,
        Err(_) => {
            count(stat::READ_ERRORS);
            T::default()
        }
    }
}

/// How a program reads kernel memory (see [`read`] and [`load`]).
pub trait Reader {
    fn get<T: Default + Copy>(base: usize, offset: usize) -> T;
}

/// Through `bpf_probe_read_kernel`: any address (a task from `bpf_get_current_task`, a classic
/// tracepoint's record), a helper call per read.
pub struct Probe;

impl Reader for Probe {
    #[inline(always)]
    fn get<T: Default + Copy>(base: usize, offset: usize) -> T {
        read(base, offset)
    }
}

/// A plain load from a pointer the verifier knows by its BTF type (the task iterator's task,
/// and the struct pointers loaded from it): the kernel turns it into a guarded load, a fault
/// reading 0, at a tenth of a helper call's cost. The offsets are the read-only `OFFSETS`, which
/// the verifier reads as constants and checks against the struct's BTF.
pub struct Direct;

impl Reader for Direct {
    #[inline(always)]
    fn get<T: Default + Copy>(base: usize, offset: usize) -> T {
        if base == 0 {
            return T::default();
        }
        // SAFETY: verified by the kernel as described above.
        unsafe { core::ptr::read_volatile((base + offset) as *const T) }
    }
}

#[inline(always)]
pub fn tgid(task: usize) -> u32 {
    read::<i32>(task, off!(task_tgid)) as u32
}

#[inline(always)]
pub fn pid(task: usize) -> u32 {
    read::<i32>(task, off!(task_pid)) as u32
}

#[inline(always)]
pub fn start_ns(task: usize) -> u64 {
    read::<u64>(task, off!(task_start_boottime))
}

#[inline(always)]
pub fn comm(task: usize) -> [u8; COMM_LEN] {
    read::<[u8; COMM_LEN]>(task, off!(task_comm))
}

/// (peak, current) resident pages of the task's address space. The peak is what the kernel
/// reports as VmHWM, `max(mm->hiwater_rss, file + anon + shmem counters)`: the high-water mark
/// alone lags, as the kernel only raises it just before RSS shrinks (`update_hiwater_rss`).
#[inline(always)]
pub fn rss_pages<R: Reader>(task: usize) -> (u64, u64) {
    let mm: usize = R::get(task, off!(task_mm));
    if mm == 0 {
        return (0, 0);
    }
    let hiwater: u64 = R::get(mm, off!(mm_hiwater_rss));
    let stride = off!(percpu_counter_size);
    let base = off!(mm_rss_stat) + off!(percpu_counter_count);
    // Each per-CPU counter's central value can lag below zero while deltas sit on other CPUs;
    // like the kernel's get_mm_counter (what /proc shows), each is read as at least zero.
    let counter = |member: usize| -> u64 {
        let v = R::get::<i64>(mm, base + member * stride);
        if v < 0 {
            0
        } else {
            v as u64
        }
    };
    let rss =
        counter(off!(mm_filepages)) + counter(off!(mm_anonpages)) + counter(off!(mm_shmempages));
    let peak = if hiwater > rss { hiwater } else { rss };
    (peak, rss)
}

/// Words of `open_fds` read per helper call, and the most calls: tables of up to
/// 64 * 4 * 64 = 16,384 descriptors are counted here, larger ones are left to /proc.
const FD_WORDS_PER_READ: usize = 4;
const FD_READS: usize = 64;

/// The task's open descriptors as `/proc/PID/fd`'s size counts them (fs/proc/fd.c,
/// `proc_readfd_count`): the bits set in the first `max_fds` bits of its table's `open_fds`; 0
/// without a table (an exited task), [`FDS_UNKNOWN`] when it is larger than this counts.
#[inline(always)]
pub fn open_fds<R: Reader>(task: usize) -> u32 {
    let files: usize = R::get(task, off!(task_files));
    if files == 0 {
        return 0;
    }
    let fdt: usize = R::get(files, off!(files_fdt));
    if fdt == 0 {
        return FDS_UNKNOWN;
    }
    let max_fds: u32 = R::get(fdt, off!(fdt_max_fds));
    // A pointer to words, not to a struct: the verifier gives no type to load through, so the
    // bitmap is read with the helper.
    let bitmap: usize = R::get(fdt, off!(fdt_open_fds));
    let words = (max_fds as usize).div_ceil(64);
    if bitmap == 0 || words > FD_WORDS_PER_READ * FD_READS {
        return FDS_UNKNOWN;
    }
    let mut count = 0u32;
    let mut chunk = 0;
    while chunk < FD_READS {
        let first = chunk * FD_WORDS_PER_READ;
        if first >= words {
            break;
        }
        let bits: [u64; FD_WORDS_PER_READ] = read(bitmap, first * 8);
        let mut i = 0;
        while i < FD_WORDS_PER_READ {
            // The words past the table's end belong to the next bitmap (close_on_exec).
            if first + i < words {
                count += bits[i].count_ones();
            }
            i += 1;
        }
        chunk += 1;
    }
    count
}
