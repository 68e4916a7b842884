//! Reads /proc: the raw figures of one process, or of the whole machine. This is the edge of the
//! sampling pipeline (`sampler` reads -> `rates` derives the rows of `model`); nothing here knows
//! about time, so there are no rates here, only counters as the kernel shows them. The only state
//! is open /proc/PID handles, which the recorder keeps from one sweep to the next because reading
//! a process through them costs half as much as opening its files again.
//!
//! A process is read at every sweep, so its files are parsed here from a reused buffer, with no
//! allocation; the system files, read once per sweep, go through the procfs crate. Every reader
//! takes a root directory so tests run on a fake /proc tree in a temp dir.

use std::collections::HashMap;
use std::ffi::CStr;
use std::fs::{self, File};
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::procstat::{self, parse_u64};
use procfs::{
    parse_pressure_record, ExplicitSystemInfo, FromRead, FromReadSI, KernelStats, LoadAverage,
    Meminfo, ProcError,
};

/// How much memory detail each process sample reads.
///
/// Measured cost of one `read_process`, opening /proc/PID each time (release build, Linux 6.18,
/// 2-vCPU VM, this machine's live processes): `Basic` about 13 µs for any process. A sweep reads
/// through handles kept open (`ProcessHandle`), which about halves that: a process-sample of a
/// `sleep` (reading, rates and row together) costs about 14 µs with `Full`, where smaps_rollup
/// is read again only when RSS moved or every 2 s. smaps_rollup is the costly read: the kernel
/// walks every page table of the process, so it grows with resident memory, from about 20 µs
/// for small processes (a shell, a few MiB resident) to 0.65 ms at 130 MiB resident and 13 ms
/// at 2 GiB (about 6 ms per GiB of 4 KiB pages). For a tree of large processes sampled often,
/// use `Basic`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum MemoryDetail {
    /// RSS, USS, PSS and swap (reads smaps_rollup).
    Full,
    /// RSS only (skips smaps_rollup: cheaper for processes with large address spaces).
    Basic,
}

/// Why a read failed. Callers drop `Gone` processes silently: a process can exit between the
/// moment it is listed and the moment its files are read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("process {0} is gone")]
    Gone(u32),
    #[error("cannot read {path}: {message}")]
    Io { path: PathBuf, message: String },
}

/// The raw figures of one process at one moment. Counters are cumulative since it started.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessReading {
    pub pid: u32,
    /// When it started, in clock ticks since boot (`/proc/PID/stat` field 22): with the pid, it
    /// tells a reused pid from the process the caller knows.
    pub start_ticks: u64,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub rss_bytes: u64,
    pub vms_bytes: u64,
    pub threads: u32,
    /// One-letter state (R, S, D, Z, ...).
    pub state: char,
    pub minor_faults: u64,
    pub major_faults: u64,
    /// Open file descriptors; None where /proc/PID/fd cannot be listed (permission).
    pub fds: Option<u32>,
    /// None where /proc/PID/io is not readable (permission, or a kernel without task I/O
    /// accounting).
    pub io: Option<IoReading>,
    /// None with `MemoryDetail::Basic`, and for a process without an address space (zombie,
    /// kernel thread) or a kernel without smaps_rollup (before 4.14).
    pub smaps: Option<SmapsReading>,
}

/// `/proc/PID/io`, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IoReading {
    /// Storage I/O (`read_bytes`, `write_bytes`).
    pub read_bytes: u64,
    pub write_bytes: u64,
    /// Bytes through read/write-like syscalls (`rchar`, `wchar`).
    pub read_chars: u64,
    pub write_chars: u64,
}

/// `/proc/PID/smaps_rollup`, bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmapsReading {
    /// Private_Clean + Private_Dirty.
    pub uss_bytes: u64,
    pub pss_bytes: u64,
    pub swap_bytes: u64,
}

/// The whole machine at one moment.
#[derive(Clone, Debug, PartialEq)]
pub struct SystemReading {
    /// The aggregate `cpu` line of /proc/stat.
    pub cpu: CpuTicks,
    pub mem_total_bytes: u64,
    /// MemAvailable (MemFree on kernels before 3.14, which lack it).
    pub mem_available_bytes: u64,
    pub mem_free_bytes: u64,
    /// Cached + SReclaimable.
    pub cached_bytes: u64,
    pub swap_total_bytes: u64,
    pub swap_free_bytes: u64,
    /// 1, 5 and 15 minute load averages.
    pub load: (f64, f64, f64),
    /// None where the kernel has no pressure stall information (before 4.20, or `psi=0`).
    pub psi: Option<Psi>,
}

/// Clock ticks since boot, summed over all CPUs, from the `cpu` line of /proc/stat. Guest time is
/// left out: the kernel already counts it in `user` and `nice`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    pub user: u64,
    pub nice: u64,
    pub system: u64,
    pub idle: u64,
    pub iowait: u64,
    pub irq: u64,
    pub softirq: u64,
    pub steal: u64,
}

/// Pressure stall information: percent of the last 10 s in which some (or all) non-idle tasks
/// waited for the resource. There is no system-wide CPU "full" figure: the kernel reports it as
/// 0 (or not at all, before 5.13).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Psi {
    pub cpu_some_avg10: f64,
    pub memory_some_avg10: f64,
    pub memory_full_avg10: f64,
    pub io_some_avg10: f64,
    pub io_full_avg10: f64,
}

/// Reads processes and system figures from a procfs root (/proc, or a fake tree in tests).
#[derive(Debug)]
pub struct ProcReader {
    root: PathBuf,
    ticks_per_second: u64,
    page_size: u64,
    /// Linux 6.2+ reports the number of open fds as the size of /proc/PID/fd (one stat instead of
    /// a listing, for which the kernel builds a dentry per fd). Only procfs does this, so a fake
    /// tree is always listed.
    fd_count_in_dir_size: bool,
    /// Where each process file is read: reused, so a reading allocates nothing.
    buf: Vec<u8>,
    /// [`SYSTEM_FILES`], each opened at its first read and kept open.
    system_files: [Option<File>; SYSTEM_FILES.len()],
}

/// The system's files a sweep reads (under the root). They are kept open: a `pread` from offset
/// 0 has the kernel write one anew, without the walk of /proc, the open and the close that
/// reading it by path costs at every sweep.
const SYSTEM_FILES: [&str; 6] = [
    "stat",
    "meminfo",
    "loadavg",
    "pressure/cpu",
    "pressure/memory",
    "pressure/io",
];
const STAT: usize = 0;
const MEMINFO: usize = 1;
const LOADAVG: usize = 2;
const PRESSURE: [usize; 3] = [3, 4, 5];

impl Default for ProcReader {
    fn default() -> Self {
        Self::new()
    }
}

/// `PF_KTHREAD` in the stat flags word (include/linux/sched.h): a kernel thread, which has no
/// address space to summarize.
const PF_KTHREAD: u64 = 0x0020_0000;

/// /proc/PID of one process, kept open from one sweep to the next: a sweep then reads stat and
/// io with one `pread` each, where opening them by path cost a walk of /proc, a check of the
/// directory, an open and a close per file, about half of a reading's time.
///
/// The descriptors refer to the process, not to its number: once it is reaped, every read or
/// lookup through them fails (ESRCH or ENOENT), even after the pid is reused, so a reused pid
/// reads as `Gone`, never as another process.
#[derive(Debug)]
pub struct ProcessHandle {
    pid: u32,
    /// O_PATH descriptor of /proc/PID: io and smaps_rollup are opened relative to it.
    dir: OwnedFd,
    stat: File,
    /// O_PATH descriptor of /proc/PID/fd where its size is the fd count (`fstat` of it is a
    /// third of the cost of an `fstatat` that looks "fd" up at every reading).
    fd_dir: Option<OwnedFd>,
    /// None until /proc/PID/io opens (a process may hide it from a user who is not root, and a
    /// kernel without task I/O accounting has none): tried again at each reading, as permission
    /// can change when the process execs.
    io: Option<File>,
}

impl ProcessHandle {
    /// Descriptors one handle holds at most, for budgeting against RLIMIT_NOFILE.
    pub const MAX_FDS: u64 = 4;
}

/// Handles of live processes carried from one sweep to the next, keyed by (pid, start time) as
/// the recorder knows processes. A sweep takes each process's handle out and keeps it again
/// after a good reading; the sweep's end closes every handle not kept: processes that exited or
/// left the tree. At most `capacity` are kept, so the descriptors stay within RLIMIT_NOFILE;
/// processes beyond it are opened again at each sweep.
#[derive(Debug)]
pub struct HandleCache<H> {
    current: HashMap<(u32, i64), H>,
    /// What this sweep kept, for the next one.
    kept: HashMap<(u32, i64), H>,
    capacity: usize,
}

impl<H> HandleCache<H> {
    pub fn new(capacity: usize) -> Self {
        HandleCache {
            current: HashMap::new(),
            kept: HashMap::new(),
            capacity,
        }
    }

    /// The handle the last sweep kept for this process.
    pub fn take(&mut self, key: (u32, i64)) -> Option<H> {
        self.current.remove(&key)
    }

    /// Keeps a handle for the next sweep (or closes it, when the cache is full).
    pub fn keep(&mut self, key: (u32, i64), handle: H) {
        if self.kept.len() < self.capacity {
            self.kept.insert(key, handle);
        }
    }

    /// Closes the handles this sweep did not keep.
    pub fn end_sweep(&mut self) {
        std::mem::swap(&mut self.current, &mut self.kept);
        self.kept.clear();
    }

    /// Closes the handle of a process that ended, without waiting for the next sweep.
    pub fn remove(&mut self, key: (u32, i64)) {
        self.current.remove(&key);
    }
}

/// How many processes a `HandleCache` may keep open under this RLIMIT_NOFILE soft limit: what is
/// left after a reserve for montrace itself (its tables, eBPF maps and programs, the files a
/// reading opens for a moment), a quarter of the limit and at least 256.
pub fn handle_capacity(open_files_limit: u64) -> usize {
    let reserve = (open_files_limit / 4).max(256);
    let handles = open_files_limit.saturating_sub(reserve) / ProcessHandle::MAX_FDS;
    usize::try_from(handles).unwrap_or(usize::MAX)
}

impl ProcReader {
    /// The live /proc, with this system's clock tick rate and page size.
    pub fn new() -> Self {
        Self::with_root(
            PathBuf::from("/proc"),
            procfs::ticks_per_second(),
            procfs::page_size(),
        )
    }

    /// A procfs tree at `root` (a fake one in tests), read as if the kernel had the given clock
    /// tick rate (`sysconf(_SC_CLK_TCK)`, 100 almost everywhere) and page size.
    pub fn with_root(root: PathBuf, ticks_per_second: u64, page_size: u64) -> Self {
        assert!(
            ticks_per_second > 0 && page_size > 0,
            "ticks_per_second and page_size must be positive"
        );
        // montrace itself always has descriptors open, so a size of 0 here means a kernel
        // before 6.2, where the size of /proc/PID/fd says nothing.
        let fd_count_in_dir_size =
            root == Path::new("/proc") && fs::metadata("/proc/self/fd").is_ok_and(|m| m.len() > 0);
        ProcReader {
            root,
            ticks_per_second,
            page_size,
            fd_count_in_dir_size,
            buf: vec![0; 4096],
            system_files: Default::default(),
        }
    }

    /// Reads one process: /proc/PID/stat (cpu, memory, threads, state, faults), the fd count and
    /// /proc/PID/io, plus /proc/PID/smaps_rollup with `MemoryDetail::Full`. A process that is gone
    /// at any point of the read gives `ReadError::Gone`.
    pub fn read_process(
        &mut self,
        pid: u32,
        detail: MemoryDetail,
    ) -> Result<ProcessReading, ReadError> {
        let mut handle = self.open_process(pid)?;
        self.read_open_process(&mut handle, |_| detail == MemoryDetail::Full)
    }

    /// Opens /proc/PID and its stat file, for `read_open_process` to read at every sweep.
    pub fn open_process(&self, pid: u32) -> Result<ProcessHandle, ReadError> {
        let dir_path = self.root.join(pid.to_string());
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
            .open(&dir_path)
            .map_err(|e| fail(&self.root, pid, "", e))?;
        let dir = OwnedFd::from(dir);
        let stat = open_at(&dir, c"stat").map_err(|e| fail(&self.root, pid, "stat", e))?;
        let fd_dir = if self.fd_count_in_dir_size {
            let fd_dir = openat(&dir, c"fd", libc::O_PATH | libc::O_DIRECTORY);
            Some(fd_dir.map_err(|e| fail(&self.root, pid, "fd", e))?)
        } else {
            None
        };
        Ok(ProcessHandle {
            pid,
            dir,
            stat,
            fd_dir,
            io: None,
        })
    }

    /// Reads the process of `handle` as `read_process` does, asking `want_smaps(rss_bytes)`
    /// whether smaps_rollup, by far the costliest read (a walk of the page tables), is worth
    /// reading this time.
    pub fn read_open_process(
        &mut self,
        handle: &mut ProcessHandle,
        want_smaps: impl FnOnce(u64) -> bool,
    ) -> Result<ProcessReading, ReadError> {
        let pid = handle.pid;
        let stat = read_whole(&handle.stat, &mut self.buf)
            .map_err(|e| fail(&self.root, pid, "stat", e))?;
        let stat = procstat::parse(stat).ok_or_else(|| ReadError::Io {
            path: process_path(&self.root, pid, "stat"),
            message: "the contents are incomplete or malformed".to_string(),
        })?;
        let rss_bytes = stat.rss_pages.saturating_mul(self.page_size);
        let detail = if want_smaps(rss_bytes) {
            MemoryDetail::Full
        } else {
            MemoryDetail::Basic
        };
        let io = self.read_io(handle);
        let io = self.optional(handle, "io", io)?;
        // A zombie or a kernel thread has no address space: the kernel answers ESRCH.
        let has_address_space = !matches!(stat.state, 'Z' | 'X') && stat.flags & PF_KTHREAD == 0;
        let (fds, smaps) = self.read_fds_and_smaps(
            handle,
            None,
            detail == MemoryDetail::Full && has_address_space,
        )?;
        Ok(ProcessReading {
            pid,
            start_ticks: stat.start_ticks,
            cpu_user_ns: ticks_to_ns(stat.utime_ticks, self.ticks_per_second),
            cpu_system_ns: ticks_to_ns(stat.stime_ticks, self.ticks_per_second),
            // The same figures as statm's size and resident (and status's VmSize/VmRSS), so
            // neither of those files is read.
            rss_bytes,
            vms_bytes: stat.vsize_bytes,
            threads: u32::try_from(stat.threads).unwrap_or(0),
            state: stat.state,
            minor_faults: stat.minor_faults,
            major_faults: stat.major_faults,
            fds,
            io,
            smaps,
        })
    }

    /// A process's reading from montrace's task iterator: its live threads' figures (`live`)
    /// plus those of its threads that already exited (`exited`, from their exit events), as
    /// /proc would add them up, except that CPU time is exact (not clock ticks) and I/O is the
    /// process's own (/proc/PID/io also counts reaped children's). The start is the leader's, or
    /// `start_boot_ns` (the tracker's) when the leader is gone. Descriptors and smaps_rollup
    /// (the leader's count, when the program could count them) come from the program too; the
    /// rest, and smaps_rollup, from [`ProcReader::complete_kernel_reading`].
    pub fn reading_from_kernel(
        &self,
        pid: u32,
        live: &crate::kernel::decode::LiveFigures,
        exited: &crate::kernel::decode::ExitStats,
        start_boot_ns: u64,
    ) -> ProcessReading {
        let tick_ns = 1_000_000_000 / self.ticks_per_second.max(1);
        ProcessReading {
            pid,
            start_ticks: live.start_ns.unwrap_or(start_boot_ns) / tick_ns,
            cpu_user_ns: live.cpu_user_ns + exited.cpu_user_ns,
            cpu_system_ns: live.cpu_system_ns + exited.cpu_system_ns,
            rss_bytes: live.rss_pages.saturating_mul(self.page_size),
            vms_bytes: live.vm_pages.saturating_mul(self.page_size),
            threads: live.threads,
            state: live.state,
            minor_faults: live.minor_faults + exited.minor_faults,
            major_faults: live.major_faults + exited.major_faults,
            fds: live.fds,
            io: Some(IoReading {
                read_bytes: live.read_bytes + exited.read_bytes,
                write_bytes: live.write_bytes + exited.write_bytes,
                read_chars: live.read_chars + exited.read_chars,
                write_chars: live.write_chars + exited.write_chars,
            }),
            smaps: None,
        }
    }

    /// One process's reading for a sweep, from the sources merged: the figures of montrace's task
    /// iterator where its pass saw the process (`kernel`; `exited` gives its exited threads'
    /// figures, which the pass no longer sees), completed from /proc; else all from /proc.
    pub fn read_merged(
        &mut self,
        handle: &mut ProcessHandle,
        kernel: Option<&crate::kernel::decode::LiveFigures>,
        exited: impl FnOnce() -> crate::kernel::decode::ExitStats,
        start_boot_ns: u64,
        want_smaps: impl FnOnce(u64) -> bool,
    ) -> Result<ProcessReading, ReadError> {
        let Some(live) = kernel else {
            return self.read_open_process(handle, want_smaps);
        };
        let mut reading = self.reading_from_kernel(handle.pid, live, &exited(), start_boot_ns);
        self.complete_kernel_reading(handle, &mut reading, want_smaps)?;
        Ok(reading)
    }

    /// What only /proc has, for a process whose other figures came from the kernel (montrace's
    /// task iterator): its open descriptors where the program could not count them, and
    /// smaps_rollup when `want_smaps(rss_bytes)` says so (RSS moved) and it has an address
    /// space.
    pub fn complete_kernel_reading(
        &mut self,
        handle: &mut ProcessHandle,
        reading: &mut ProcessReading,
        want_smaps: impl FnOnce(u64) -> bool,
    ) -> Result<(), ReadError> {
        let has_address_space = !matches!(reading.state, 'Z' | 'X') && reading.vms_bytes > 0;
        let smaps = has_address_space && want_smaps(reading.rss_bytes);
        let counted = reading.fds;
        (reading.fds, reading.smaps) = self.read_fds_and_smaps(handle, counted, smaps)?;
        Ok(())
    }

    /// The descriptors (`counted` already, or counted in /proc now) and smaps_rollup if asked.
    fn read_fds_and_smaps(
        &mut self,
        handle: &mut ProcessHandle,
        counted: Option<u32>,
        smaps: bool,
    ) -> Result<(Option<u32>, Option<SmapsReading>), ReadError> {
        let fds = match counted {
            Some(fds) => Some(fds),
            None => {
                let fds = self.count_fds(handle);
                self.optional(handle, "fd", fds.map(Some))?
            }
        };
        let smaps = if smaps {
            let smaps = open_at(&handle.dir, c"smaps_rollup")
                .and_then(|file| read_whole(&file, &mut self.buf).map(parse_smaps_rollup));
            self.optional(handle, "smaps_rollup", smaps)?
        } else {
            None
        };
        Ok((fds, smaps))
    }

    /// /proc/PID/io, opened the first time it can be; None when its contents do not parse.
    fn read_io(&mut self, handle: &mut ProcessHandle) -> io::Result<Option<IoReading>> {
        let file = match handle.io.take() {
            Some(file) => file,
            None => open_at(&handle.dir, c"io")?,
        };
        let io = read_whole(&file, &mut self.buf).map(parse_io);
        handle.io = Some(file);
        io
    }

    /// A file some processes lack or hide: permission denied, or contents that do not parse,
    /// give None. Not found (ENOENT, or ESRCH when the process died while the file was read) is
    /// None while the process is still there (a kernel without the file) and `Gone` once it is
    /// not.
    fn optional<T>(
        &self,
        handle: &ProcessHandle,
        name: &str,
        result: io::Result<Option<T>>,
    ) -> Result<Option<T>, ReadError> {
        match result {
            Ok(value) => Ok(value),
            Err(e) => match e.raw_os_error() {
                Some(libc::EACCES | libc::EPERM) => Ok(None),
                Some(libc::ENOENT | libc::ESRCH) if stat_at(&handle.dir, c"stat").is_ok() => {
                    Ok(None)
                }
                _ => Err(fail(&self.root, handle.pid, name, e)),
            },
        }
    }

    /// The number of open descriptors. Not procfs's `Process::fd_count`: when the size gives 0
    /// (a zombie, or a kernel before 6.2) it lists the directory and counts "." and "..".
    fn count_fds(&self, handle: &ProcessHandle) -> io::Result<u32> {
        if let Some(fd_dir) = &handle.fd_dir {
            // fs/proc/fd.c, proc_fd_getattr: the size is the number of open descriptors (0 for a
            // zombie, which has none).
            let size = fstat(fd_dir)?.st_size;
            return Ok(u32::try_from(size).unwrap_or(u32::MAX));
        }
        let fd_dir = open_dir_at(&handle.dir, c"fd")?;
        // std lists a directory only by path: /proc/self/fd/N is the directory just opened, so
        // the listing is of this process even if its pid was reused meanwhile.
        let mut count = 0;
        for entry in fs::read_dir(format!("/proc/self/fd/{}", fd_dir.as_raw_fd()))? {
            entry?;
            count += 1;
        }
        Ok(count)
    }

    /// Reads /proc/stat, /proc/meminfo, /proc/loadavg and /proc/pressure/{cpu,memory,io}.
    pub fn read_system(&mut self) -> Result<SystemReading, ReadError> {
        let cpu = self.read_cpu_ticks()?;
        let meminfo = Meminfo::from_read(self.read_system_file(MEMINFO)?)
            .map_err(|e| io_error(&self.root.join(SYSTEM_FILES[MEMINFO]), e))?;
        let load = LoadAverage::from_read(self.read_system_file(LOADAVG)?)
            .map_err(|e| io_error(&self.root.join(SYSTEM_FILES[LOADAVG]), e))?;
        Ok(SystemReading {
            cpu,
            mem_total_bytes: meminfo.mem_total,
            mem_available_bytes: meminfo.mem_available.unwrap_or(meminfo.mem_free),
            mem_free_bytes: meminfo.mem_free,
            cached_bytes: meminfo.cached + meminfo.s_reclaimable.unwrap_or(0),
            swap_total_bytes: meminfo.swap_total,
            swap_free_bytes: meminfo.swap_free,
            load: (widen(load.one), widen(load.five), widen(load.fifteen)),
            psi: self.read_psi()?,
        })
    }

    /// The machine's CPU time since boot, by state (`/proc/stat`'s first line), alone.
    pub fn read_cpu_ticks(&mut self) -> Result<CpuTicks, ReadError> {
        let info = ExplicitSystemInfo {
            // Only the per-CPU lines' helpers use the boot time; the raw ticks are read here.
            boot_time_secs: 0,
            ticks_per_second: self.ticks_per_second,
            page_size: self.page_size,
            is_little_endian: cfg!(target_endian = "little"),
        };
        let stat = KernelStats::from_read(self.read_system_file(STAT)?, &info)
            .map_err(|e| io_error(&self.root.join(SYSTEM_FILES[STAT]), e))?;
        let cpu = &stat.total;
        Ok(CpuTicks {
            user: cpu.user,
            nice: cpu.nice,
            system: cpu.system,
            idle: cpu.idle,
            iowait: cpu.iowait.unwrap_or(0),
            irq: cpu.irq.unwrap_or(0),
            softirq: cpu.softirq.unwrap_or(0),
            steal: cpu.steal.unwrap_or(0),
        })
    }

    /// The bytes of `SYSTEM_FILES[index]`, read through its kept descriptor (opened now if not
    /// yet).
    fn system_bytes(&mut self, index: usize) -> io::Result<&[u8]> {
        let file = match &mut self.system_files[index] {
            Some(file) => file,
            slot @ None => slot.insert(File::open(self.root.join(SYSTEM_FILES[index]))?),
        };
        read_whole(file, &mut self.buf)
    }

    /// [`ProcReader::system_bytes`], a failure as a [`ReadError`] (its path made only then).
    fn read_system_file(&mut self, index: usize) -> Result<&[u8], ReadError> {
        match self.system_bytes(index).map(<[u8]>::len) {
            Ok(len) => Ok(&self.buf[..len]),
            Err(e) => Err(self.system_error(index, e)),
        }
    }

    /// `read_pressure` of a kept system file.
    fn read_system_pressure(
        &mut self,
        index: usize,
    ) -> Result<Option<(PressureLine, Option<PressureLine>)>, ReadError> {
        match self.system_bytes(index).map(<[u8]>::len) {
            Ok(len) => parse_pressure(
                &String::from_utf8_lossy(&self.buf[..len]),
                &self.root.join(SYSTEM_FILES[index]),
            )
            .map(Some),
            Err(e) if pressure_unsupported(&e) => Ok(None),
            Err(e) => Err(self.system_error(index, e)),
        }
    }

    /// A failed read of `SYSTEM_FILES[index]`, naming its path.
    fn system_error(&self, index: usize, error: io::Error) -> ReadError {
        let path = self.root.join(SYSTEM_FILES[index]);
        io_error(&path, proc_error(error, path.clone()))
    }

    fn read_psi(&mut self) -> Result<Option<Psi>, ReadError> {
        let [cpu, memory, io] = PRESSURE;
        let Some((cpu_some, _)) = self.read_system_pressure(cpu)? else {
            return Ok(None);
        };
        let Some((memory_some, Some(memory_full))) = self.read_system_pressure(memory)? else {
            return Ok(None);
        };
        let Some((io_some, Some(io_full))) = self.read_system_pressure(io)? else {
            return Ok(None);
        };
        Ok(Some(Psi {
            cpu_some_avg10: cpu_some.avg10,
            memory_some_avg10: memory_some.avg10,
            memory_full_avg10: memory_full.avg10,
            io_some_avg10: io_some.avg10,
            io_full_avg10: io_full.avg10,
        }))
    }
}

/// A cgroup v2 directory's stall totals (`cpu.pressure`, `memory.pressure`, `io.pressure`,
/// which the cgroup core keeps for every cgroup, with or without controllers): microseconds
/// during which some (at least one) or all of its non-idle tasks were stalled on that resource.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stalls {
    pub cpu_some_us: u64,
    /// None before Linux 5.13 (the cpu file had no `full` line).
    pub cpu_full_us: Option<u64>,
    pub memory_some_us: u64,
    pub memory_full_us: u64,
    pub io_some_us: u64,
    pub io_full_us: u64,
}

/// The stall totals of cgroup `dir`; None where the kernel keeps none (no PSI, or `psi=0`).
pub fn read_cgroup_stalls(dir: &Path) -> Result<Option<Stalls>, ReadError> {
    let Some((cpu_some, cpu_full)) = read_pressure(&dir.join("cpu.pressure"))? else {
        return Ok(None);
    };
    let Some((memory_some, Some(memory_full))) = read_pressure(&dir.join("memory.pressure"))?
    else {
        return Ok(None);
    };
    let Some((io_some, Some(io_full))) = read_pressure(&dir.join("io.pressure"))? else {
        return Ok(None);
    };
    Ok(Some(Stalls {
        cpu_some_us: cpu_some.total_us,
        cpu_full_us: cpu_full.map(|f| f.total_us),
        memory_some_us: memory_some.total_us,
        memory_full_us: memory_full.total_us,
        io_some_us: io_some.total_us,
        io_full_us: io_full.total_us,
    }))
}

/// One line of a pressure file.
#[derive(Clone, Copy, Debug, PartialEq)]
struct PressureLine {
    /// Share of the last 10 s stalled, percent.
    avg10: f64,
    /// Stalled time since boot (or since the cgroup was made), microseconds.
    total_us: u64,
}

/// The `some` and `full` lines of one pressure file (/proc/pressure/* or a cgroup's
/// *.pressure); None where the kernel has no PSI (no such file, or EOPNOTSUPP when booted with
/// `psi=0`). procfs's `CpuPressure` is not used: it requires the `full` line, which the cpu
/// file lacks before Linux 5.13.
fn read_pressure(path: &Path) -> Result<Option<(PressureLine, Option<PressureLine>)>, ReadError> {
    match crate::host::read_small_file(path) {
        Ok(text) => parse_pressure(&text, path).map(Some),
        Err(e) if pressure_unsupported(&e) => Ok(None),
        Err(e) => Err(io_error(path, proc_error(e, path.to_path_buf()))),
    }
}

/// No such file, or EOPNOTSUPP (a kernel booted with `psi=0`): no PSI here.
fn pressure_unsupported(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::EOPNOTSUPP)
}

/// The `some` and `full` lines of a pressure file's `text` (read from `path`).
fn parse_pressure(
    text: &str,
    path: &Path,
) -> Result<(PressureLine, Option<PressureLine>), ReadError> {
    let (mut some, mut full) = (None, None);
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let record = parse_pressure_record(line).map_err(|e| io_error(path, e))?;
        let parsed = PressureLine {
            avg10: widen(record.avg10),
            total_us: record.total,
        };
        if line.starts_with("some") {
            some = Some(parsed);
        } else {
            full = Some(parsed);
        }
    }
    match some {
        Some(some) => Ok((some, full)),
        None => Err(ReadError::Io {
            path: path.to_path_buf(),
            message: "no \"some\" line".to_string(),
        }),
    }
}

/// /proc/PID/`name`, or /proc/PID itself when `name` is empty: for error messages.
fn process_path(root: &Path, pid: u32, name: &str) -> PathBuf {
    let dir = root.join(pid.to_string());
    if name.is_empty() {
        dir
    } else {
        dir.join(name)
    }
}

/// A failed read of a process's file (`name` as in `process_path`): not found (ENOENT, ESRCH)
/// means the process is gone.
fn fail(root: &Path, pid: u32, name: &str, error: io::Error) -> ReadError {
    match error.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => ReadError::Gone(pid),
        _ => {
            let path = process_path(root, pid, name);
            io_error(&path, proc_error(error, path.clone()))
        }
    }
}

/// Opens `name` in a /proc/PID directory for reading.
fn open_at(dir: &OwnedFd, name: &CStr) -> io::Result<File> {
    openat(dir, name, libc::O_RDONLY).map(File::from)
}

fn open_dir_at(dir: &OwnedFd, name: &CStr) -> io::Result<OwnedFd> {
    openat(dir, name, libc::O_RDONLY | libc::O_DIRECTORY)
}

/// std opens files only by path; openat relative to /proc/PID is what ties a file to the
/// process rather than to its number.
fn openat(dir: &OwnedFd, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: `dir` is an open descriptor and `name` a NUL-terminated string, both alive for
    // the call.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: openat just returned this descriptor, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `fstatat` of `name` in a /proc/PID directory, or of the directory itself when `name` is
/// empty (`AT_EMPTY_PATH`, which also works on an O_PATH descriptor).
fn stat_at(dir: &OwnedFd, name: &CStr) -> io::Result<libc::stat> {
    let flags = if name.is_empty() {
        libc::AT_EMPTY_PATH
    } else {
        0
    };
    let mut stat = MaybeUninit::<libc::stat>::uninit();
    // SAFETY: `dir` is an open descriptor, `name` a NUL-terminated string and `stat` room for
    // one struct stat, all alive for the call.
    let rc = unsafe { libc::fstatat(dir.as_raw_fd(), name.as_ptr(), stat.as_mut_ptr(), flags) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstatat succeeded, so it filled `stat`.
    Ok(unsafe { stat.assume_init() })
}

fn fstat(file: &OwnedFd) -> io::Result<libc::stat> {
    stat_at(file, c"")
}

/// The whole of a process file, read with `pread` from offset 0 into `buf` (grown when a file
/// fills it). Reading at offset 0 makes the kernel produce the contents anew (`seq_read_iter`
/// starts over at position 0, fs/seq_file.c), so one open descriptor serves every sweep. A read
/// shorter than the room left is the end: these files are one seq_file record, produced whole
/// and copied out as far as it fits, so no second read is spent to find the end.
fn read_whole<'b>(file: &File, buf: &'b mut Vec<u8>) -> io::Result<&'b [u8]> {
    let mut len = 0;
    loop {
        if len == buf.len() {
            buf.resize(buf.len().max(4096) * 2, 0);
        }
        match file.read_at(&mut buf[len..], len as u64) {
            Ok(n) => {
                len += n;
                if n == 0 || len < buf.len() {
                    return Ok(&buf[..len]);
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Parses /proc/PID/io ("name: value" lines). None when a field it needs is missing.
fn parse_io(io: &[u8]) -> Option<IoReading> {
    let (mut rchar, mut wchar, mut read_bytes, mut write_bytes) = (None, None, None, None);
    for (name, value) in colon_fields(io) {
        let slot = match name {
            b"rchar" => &mut rchar,
            b"wchar" => &mut wchar,
            b"read_bytes" => &mut read_bytes,
            b"write_bytes" => &mut write_bytes,
            _ => continue,
        };
        *slot = Some(parse_u64(value)?);
    }
    Some(IoReading {
        read_bytes: read_bytes?,
        write_bytes: write_bytes?,
        read_chars: rchar?,
        write_chars: wchar?,
    })
}

/// Parses /proc/PID/smaps_rollup: one pseudo-mapping ("[rollup]") whose fields are in kB. None
/// when a field it needs is missing (an empty file, for one).
fn parse_smaps_rollup(rollup: &[u8]) -> Option<SmapsReading> {
    let (mut pss, mut private_clean, mut private_dirty, mut swap) = (None, None, None, None);
    for (name, value) in colon_fields(rollup) {
        let slot = match name {
            b"Pss" => &mut pss,
            b"Private_Clean" => &mut private_clean,
            b"Private_Dirty" => &mut private_dirty,
            b"Swap" => &mut swap,
            _ => continue,
        };
        let kib = parse_u64(value.strip_suffix(b"kB")?.trim_ascii())?;
        *slot = Some(kib.saturating_mul(1024));
    }
    Some(SmapsReading {
        uss_bytes: private_clean?.saturating_add(private_dirty?),
        pss_bytes: pss?,
        swap_bytes: swap?,
    })
}

/// The "name: value" lines of a file, value trimmed (a line without ':' is skipped: the
/// header line of smaps_rollup).
fn colon_fields(text: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    text.split(|&b| b == b'\n').filter_map(|line| {
        let colon = line.iter().position(|&b| b == b':')?;
        Some((&line[..colon], line[colon + 1..].trim_ascii()))
    })
}

fn ticks_to_ns(ticks: u64, ticks_per_second: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(ticks_per_second);
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// procfs parses loads and PSI averages (printed with two decimals) as f32; going through the
/// shortest decimal form gives the f64 of the printed number (0.52, not 0.5199999809265137).
fn widen(value: f32) -> f64 {
    value.to_string().parse().unwrap_or(f64::from(value))
}

/// An io::Error from reading a process's file, classified the way procfs does, plus ESRCH (the
/// process died while its file was open) as not found.
fn proc_error(error: io::Error, path: PathBuf) -> ProcError {
    match error.raw_os_error() {
        Some(libc::ENOENT | libc::ESRCH) => ProcError::NotFound(Some(path)),
        Some(libc::EACCES | libc::EPERM) => ProcError::PermissionDenied(Some(path)),
        _ => ProcError::Io(error, Some(path)),
    }
}

fn io_error(path: &Path, error: ProcError) -> ReadError {
    let (error_path, message) = match error {
        ProcError::PermissionDenied(p) => (p, "permission denied (run as root)".to_string()),
        ProcError::NotFound(p) => (p, "no such file".to_string()),
        ProcError::Incomplete(p) => (p, "the contents are incomplete or malformed".to_string()),
        ProcError::Io(e, p) => (p, e.to_string()),
        ProcError::Other(message) => (None, message),
        ProcError::InternalError(e) => (None, e.to_string()),
    };
    ReadError::Io {
        path: error_path.unwrap_or_else(|| path.to_path_buf()),
        message,
    }
}

pub mod tree_memory;

/// The machine's busy CPU time since boot, in seconds over all CPUs (/proc/stat's `cpu` line:
/// everything but idle and iowait), and the number of online CPUs; None when unreadable.
pub fn machine_busy_cpu_s() -> Option<(f64, usize)> {
    // /proc/stat alone: the whole system reading (memory, load, pressure) was 6 files, 0.2 ms of
    // a spaced run's start-up on the 2-core test machine, and again at its end.
    let cpu = ProcReader::new().read_cpu_ticks().ok()?;
    let busy = cpu.user + cpu.nice + cpu.system + cpu.irq + cpu.softirq + cpu.steal;
    // SAFETY: sysconf has no preconditions.
    let cpus = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    Some((
        busy as f64 / crate::host::ticks_per_second() as f64,
        cpus.max(1) as usize,
    ))
}

#[cfg(test)]
mod tests;
