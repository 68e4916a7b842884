//! Reads of kernel structs at the offsets the agent computed from BTF.
use aya_ebpf::helpers::bpf_probe_read_kernel;
use monitor_common::{stat, COMM_LEN, FDS_UNKNOWN, NS_LEVELS};

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
/// (a NULL base included) reading 0, at a tenth of a helper call's cost. The offsets are the
/// read-only `OFFSETS`, which the verifier reads as constants and checks against the struct's
/// BTF. No test of the base: every branch before a load of a struct pointer makes the verifier
/// walk that load once more, and each walk of one looks the struct's name up among the kernel's
/// types several times (`btf_nested_type_is_trusted`, a linear search of some 100,000 types).
pub struct Direct;

impl Reader for Direct {
    #[inline(always)]
    fn get<T: Default + Copy>(base: usize, offset: usize) -> T {
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

/// How many pid namespaces below the host's the task is, and its pids in those at levels 1 to
/// [`NS_LEVELS`] (0 past its level): `thread_pid->numbers[level].nr`.
#[inline(always)]
pub fn ns_pids(task: usize) -> (u32, [u32; NS_LEVELS]) {
    let pid: usize = read(task, off!(task_thread_pid));
    let level: u32 = read(pid, off!(pid_level));
    let stride = off!(upid_size);
    let base = off!(pid_numbers) + off!(upid_nr);
    let mut nrs = [0u32; NS_LEVELS];
    for (i, nr) in nrs.iter_mut().enumerate() {
        if (i as u32) < level {
            *nr = read::<i32>(pid, base + (i + 1) * stride) as u32;
        }
    }
    (level, nrs)
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
    mm_rss_pages::<R>(mm)
}

/// [`rss_pages`] of the address space `mm` (0 reads as none where `R` reads NULL as 0).
#[inline(always)]
pub fn mm_rss_pages<R: Reader>(mm: usize) -> (u64, u64) {
    let hiwater: u64 = R::get(mm, off!(mm_hiwater_rss));
    let stride = off!(percpu_counter_size);
    let base = off!(mm_rss_stat) + off!(percpu_counter_count);
    // Each per-CPU counter's central value can lag below zero while deltas sit on other CPUs;
    // like the kernel's get_mm_counter (what /proc shows), each is read as at least zero.
    let counter = |member: usize| -> u64 {
        // Before Linux 6.2 the counters are `atomic_long_t`s, through which the verifier of
        // those kernels allows no typed load ("Type 'atomic_long_t' is not a struct"): read
        // with the helper there (a constant of OFFSETS: the verifier drops the other branch).
        let v = if off!(rss_counters_typed) != 0 {
            R::get::<i64>(mm, base + member * stride)
        } else {
            read::<i64>(mm, base + member * stride)
        };
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

/// The most words of `open_fds` counted: tables of up to 64 * 16 = 1,024 descriptors (the usual
/// soft limit of open files, which bounds a table's size), larger ones are left to /proc. They
/// are read with one helper call into a zeroed buffer on the stack (128 of its 512 bytes; the
/// sample beside it takes most of the rest), then all 16 words are counted, with no branch per
/// word: the verifier walks a loop once per turn at load time, on montrace's start-up.
const FD_WORDS: usize = 16;

/// The open descriptors of the table `fdt` of the task's `files` (both read by the caller, with
/// `R`), as `/proc/PID/fd`'s size counts them (fs/proc/fd.c, `proc_readfd_count`): the bits set
/// in the first `max_fds` bits of the table's `open_fds`; 0 without `files` (an exited task),
/// [`FDS_UNKNOWN`] without a table or when it is larger than this counts.
#[inline(always)]
pub fn open_fds<R: Reader>(files: usize, fdt: usize) -> u32 {
    if files == 0 {
        return 0;
    }
    if fdt == 0 {
        return FDS_UNKNOWN;
    }
    let max_fds: u32 = R::get(fdt, off!(fdt_max_fds));
    // A pointer to words, not to a struct: the verifier gives no type to load through, so the
    // bitmap is read with the helper.
    let bitmap: usize = R::get(fdt, off!(fdt_open_fds));
    let words = (max_fds as usize).div_ceil(64);
    if bitmap == 0 || words > FD_WORDS {
        return FDS_UNKNOWN;
    }
    // The words past the table's end belong to the next bitmap (close_on_exec): not read, so
    // they stay 0.
    let mut bits = [0u64; FD_WORDS];
    // SAFETY: at most FD_WORDS words into a buffer of FD_WORDS; the helper validates `bitmap`.
    let read = unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            bits.as_mut_ptr() as *mut core::ffi::c_void,
            (words * 8) as u32,
            bitmap as *const core::ffi::c_void,
        )
    };
    if read != 0 {
        count(stat::READ_ERRORS);
        return FDS_UNKNOWN;
    }
    let mut count = 0u32;
    for word in bits {
        count += word.count_ones();
    }
    count
}
