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
#[derive(Clone, Debug)]
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
}

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
        let fds = self.count_fds(handle);
        let fds = self.optional(handle, "fd", fds.map(Some))?;
        // A zombie or a kernel thread has no address space: the kernel answers ESRCH.
        let has_address_space = !matches!(stat.state, 'Z' | 'X') && stat.flags & PF_KTHREAD == 0;
        let smaps = if detail == MemoryDetail::Full && has_address_space {
            let smaps = open_at(&handle.dir, c"smaps_rollup")
                .and_then(|file| read_whole(&file, &mut self.buf).map(parse_smaps_rollup));
            self.optional(handle, "smaps_rollup", smaps)?
        } else {
            None
        };
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
    pub fn read_system(&self) -> Result<SystemReading, ReadError> {
        let stat_path = self.root.join("stat");
        let info = ExplicitSystemInfo {
            // Only the per-CPU lines' helpers use the boot time; the raw ticks are read here.
            boot_time_secs: 0,
            ticks_per_second: self.ticks_per_second,
            page_size: self.page_size,
            is_little_endian: cfg!(target_endian = "little"),
        };
        let stat =
            KernelStats::from_file(&stat_path, &info).map_err(|e| io_error(&stat_path, e))?;
        let meminfo_path = self.root.join("meminfo");
        let meminfo = Meminfo::from_file(&meminfo_path).map_err(|e| io_error(&meminfo_path, e))?;
        let load_path = self.root.join("loadavg");
        let load = LoadAverage::from_file(&load_path).map_err(|e| io_error(&load_path, e))?;
        let cpu = &stat.total;
        Ok(SystemReading {
            cpu: CpuTicks {
                user: cpu.user,
                nice: cpu.nice,
                system: cpu.system,
                idle: cpu.idle,
                iowait: cpu.iowait.unwrap_or(0),
                irq: cpu.irq.unwrap_or(0),
                softirq: cpu.softirq.unwrap_or(0),
                steal: cpu.steal.unwrap_or(0),
            },
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

    fn read_psi(&self) -> Result<Option<Psi>, ReadError> {
        let dir = self.root.join("pressure");
        let Some((cpu_some, _)) = read_pressure(&dir.join("cpu"))? else {
            return Ok(None);
        };
        let Some((memory_some, Some(memory_full))) = read_pressure(&dir.join("memory"))? else {
            return Ok(None);
        };
        let Some((io_some, Some(io_full))) = read_pressure(&dir.join("io"))? else {
            return Ok(None);
        };
        Ok(Some(Psi {
            cpu_some_avg10: cpu_some,
            memory_some_avg10: memory_some,
            memory_full_avg10: memory_full,
            io_some_avg10: io_some,
            io_full_avg10: io_full,
        }))
    }
}

/// The avg10 of the `some` and `full` lines of one /proc/pressure file; None where the kernel
/// has no PSI (no such file, or EOPNOTSUPP when booted with `psi=0`). procfs's `CpuPressure`
/// is not used: it requires the `full` line, which the cpu file lacks before Linux 5.13.
fn read_pressure(path: &Path) -> Result<Option<(f64, Option<f64>)>, ReadError> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => return Ok(None),
        Err(e) => return Err(io_error(path, proc_error(e, path.to_path_buf()))),
    };
    let (mut some, mut full) = (None, None);
    for line in text.lines().filter(|line| !line.trim().is_empty()) {
        let record = parse_pressure_record(line).map_err(|e| io_error(path, e))?;
        if line.starts_with("some") {
            some = Some(widen(record.avg10));
        } else {
            full = Some(widen(record.avg10));
        }
    }
    match some {
        Some(some) => Ok(Some((some, full))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;
    use std::os::unix::fs::symlink;
    use std::rc::Rc;
    use std::time::{Duration, Instant};

    use crate::sampling::procstat::tests::STAT;

    const IO: &str = "rchar: 6976\nwchar: 1234\nsyscr: 10\nsyscw: 3\nread_bytes: 4096\n\
        write_bytes: 8192\ncancelled_write_bytes: 0\n";

    const SMAPS_ROLLUP: &str = "\
560d4e2ce000-7ffc51cc4000 ---p 00000000 00:00 0                          [rollup]
Rss:                1684 kB
Pss:                 275 kB
Pss_Dirty:           112 kB
Pss_Anon:            112 kB
Pss_File:            163 kB
Pss_Shmem:             0 kB
Shared_Clean:       1528 kB
Shared_Dirty:          0 kB
Private_Clean:        44 kB
Private_Dirty:       112 kB
Referenced:         1684 kB
Anonymous:           112 kB
KSM:                   0 kB
LazyFree:              0 kB
AnonHugePages:         0 kB
ShmemPmdMapped:        0 kB
FilePmdMapped:         0 kB
Shared_Hugetlb:        0 kB
Private_Hugetlb:       0 kB
Swap:                  8 kB
SwapPss:               8 kB
Locked:                0 kB
";

    const PROC_STAT: &str = "\
cpu  301319 15 31156 108378 830 7 356 766 0 0
cpu0 150572 10 15811 53978 507 3 141 402 0 0
cpu1 150747 5 15345 54400 323 4 215 364 0 0
intr 1644061 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 1 1 9 0 0 0 0 443 132
ctxt 2206860
btime 1795326395
processes 84820
procs_running 2
procs_blocked 0
softirq 796652 0 131551 7 55818 72757 0 316 148396 0 387807
";

    const MEMINFO: &str = "\
MemTotal:       24682416 kB
MemFree:        10466520 kB
MemAvailable:   24013824 kB
Buffers:          150420 kB
Cached:         13280604 kB
SwapCached:            0 kB
Active:          5550340 kB
Inactive:        7923748 kB
Active(anon):       1552 kB
Inactive(anon):    54272 kB
Active(file):    5548788 kB
Inactive(file):  7869476 kB
Unevictable:       20236 kB
Mlocked:           17732 kB
SwapTotal:       2097148 kB
SwapFree:        2000000 kB
Zswap:                 0 kB
Zswapped:              0 kB
Dirty:            641292 kB
Writeback:             0 kB
AnonPages:         63412 kB
Mapped:            49252 kB
Shmem:             12776 kB
KReclaimable:     474740 kB
Slab:             539092 kB
SReclaimable:     474740 kB
SUnreclaim:        64352 kB
KernelStack:        1608 kB
PageTables:         2592 kB
SecPageTables:         0 kB
NFS_Unstable:          0 kB
Bounce:                0 kB
WritebackTmp:          0 kB
CommitLimit:    12341208 kB
Committed_AS:     129040 kB
VmallocTotal:   34359738367 kB
VmallocUsed:       14396 kB
VmallocChunk:          0 kB
Percpu:              792 kB
AnonHugePages:         0 kB
ShmemHugePages:        0 kB
ShmemPmdMapped:        0 kB
FileHugePages:   2238464 kB
FilePmdMapped:         0 kB
Balloon:               0 kB
HugePages_Total:       0
HugePages_Free:        0
HugePages_Rsvd:        0
HugePages_Surp:        0
Hugepagesize:       2048 kB
Hugetlb:               0 kB
DirectMap4k:       24576 kB
DirectMap2M:     2072576 kB
DirectMap1G:    25165824 kB
";

    const LOADAVG: &str = "3.20 0.52 3.09 4/103 19904\n";

    const PRESSURE_CPU: &str = "some avg10=17.80 avg60=8.46 avg300=42.87 total=1031234058\n\
        full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
    const PRESSURE_MEMORY: &str = "some avg10=1.25 avg60=0.01 avg300=0.04 total=8027280\n\
        full avg10=0.75 avg60=0.00 avg300=0.00 total=4784333\n";
    const PRESSURE_IO: &str = "some avg10=3.10 avg60=0.00 avg300=0.00 total=2000\n\
        full avg10=2.05 avg60=0.00 avg300=0.00 total=1000\n";

    fn write(path: &Path, contents: &str) {
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, contents).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
    }

    /// A fake /proc with process 123 and the system files. Only the files the reader reads are
    /// there: no statm or status, which proves stat alone carries the memory and thread figures.
    fn fake_proc() -> tempfile::TempDir {
        let root = tempfile::tempdir().unwrap();
        let pid = root.path().join("123");
        write(&pid.join("stat"), STAT);
        write(&pid.join("io"), IO);
        write(&pid.join("smaps_rollup"), SMAPS_ROLLUP);
        fs::create_dir_all(pid.join("fd")).unwrap();
        for fd in 0..4 {
            symlink("/dev/null", pid.join("fd").join(fd.to_string())).unwrap();
        }
        write(&root.path().join("stat"), PROC_STAT);
        write(&root.path().join("meminfo"), MEMINFO);
        write(&root.path().join("loadavg"), LOADAVG);
        write(&root.path().join("pressure/cpu"), PRESSURE_CPU);
        write(&root.path().join("pressure/memory"), PRESSURE_MEMORY);
        write(&root.path().join("pressure/io"), PRESSURE_IO);
        root
    }

    fn reader(root: &tempfile::TempDir) -> ProcReader {
        ProcReader::with_root(root.path().to_path_buf(), 100, 4096)
    }

    fn expected_process() -> ProcessReading {
        ProcessReading {
            pid: 123,
            start_ticks: 206709,
            cpu_user_ns: 2_500_000_000,
            cpu_system_ns: 750_000_000,
            rss_bytes: 1024 * 4096,
            vms_bytes: 12345344,
            threads: 4,
            state: 'S',
            minor_faults: 5432,
            major_faults: 12,
            fds: Some(4),
            io: Some(IoReading {
                read_bytes: 4096,
                write_bytes: 8192,
                read_chars: 6976,
                write_chars: 1234,
            }),
            smaps: Some(SmapsReading {
                uss_bytes: (44 + 112) * 1024,
                pss_bytes: 275 * 1024,
                swap_bytes: 8 * 1024,
            }),
        }
    }

    #[test]
    fn reads_every_field_of_a_fake_process_with_full_detail() {
        let root = fake_proc();
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(reading, expected_process());
    }

    #[test]
    fn basic_detail_skips_smaps_rollup() {
        let root = fake_proc();
        let reading = reader(&root)
            .read_process(123, MemoryDetail::Basic)
            .unwrap();
        assert_eq!(
            reading,
            ProcessReading {
                smaps: None,
                ..expected_process()
            }
        );
    }

    #[test]
    fn comm_with_spaces_and_parens_parses() {
        let root = fake_proc();
        write(
            &root.path().join("123/stat"),
            &STAT.replace("(my prog) (x))", "(a) b ) (c)"),
        );
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(reading, expected_process());
    }

    #[test]
    fn ticks_convert_at_the_given_rate() {
        let root = fake_proc();
        let reading = ProcReader::with_root(root.path().to_path_buf(), 250, 16384)
            .read_process(123, MemoryDetail::Basic)
            .unwrap();
        assert_eq!(reading.cpu_user_ns, 1_000_000_000);
        assert_eq!(reading.cpu_system_ns, 300_000_000);
        assert_eq!(reading.rss_bytes, 1024 * 16384);
    }

    #[test]
    fn missing_pid_directory_is_gone() {
        let root = fake_proc();
        let error = reader(&root)
            .read_process(456, MemoryDetail::Full)
            .unwrap_err();
        assert!(matches!(error, ReadError::Gone(456)), "{error:?}");
        assert_eq!(error.to_string(), "process 456 is gone");
    }

    #[test]
    fn process_vanishing_after_its_handle_opened_is_gone() {
        let root = fake_proc();
        let mut reader = reader(&root);
        let mut handle = reader.open_process(123).unwrap();
        fs::remove_dir_all(root.path().join("123")).unwrap();
        let error = reader.read_open_process(&mut handle, |_| true).unwrap_err();
        assert!(matches!(error, ReadError::Gone(123)), "{error:?}");
    }

    #[test]
    fn open_handle_reads_the_files_anew_each_time() {
        let root = fake_proc();
        let mut reader = reader(&root);
        let mut handle = reader.open_process(123).unwrap();
        let first = reader.read_open_process(&mut handle, |_| true).unwrap();
        assert_eq!(first, expected_process());
        write(
            &root.path().join("123/stat"),
            &STAT.replace(" 250 75 ", " 300 75 "),
        );
        write(
            &root.path().join("123/io"),
            &IO.replace("rchar: 6976", "rchar: 7000"),
        );
        let second = reader.read_open_process(&mut handle, |_| true).unwrap();
        assert_eq!(second.cpu_user_ns, 3_000_000_000);
        assert_eq!(second.io.unwrap().read_chars, 7000);
    }

    #[test]
    fn want_smaps_gets_the_rss_and_decides() {
        let root = fake_proc();
        let mut reader = reader(&root);
        let mut handle = reader.open_process(123).unwrap();
        let mut asked = None;
        let reading = reader
            .read_open_process(&mut handle, |rss| {
                asked = Some(rss);
                false
            })
            .unwrap();
        assert_eq!(asked, Some(1024 * 4096));
        assert_eq!(reading.smaps, None);
    }

    #[test]
    fn missing_smaps_rollup_leaves_smaps_none() {
        // Kernels before 4.14 (or without CONFIG_PROC_PAGE_MONITOR) have no smaps_rollup: the
        // rest of the reading is still worth having.
        let root = fake_proc();
        fs::remove_file(root.path().join("123/smaps_rollup")).unwrap();
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(
            reading,
            ProcessReading {
                smaps: None,
                ..expected_process()
            }
        );
    }

    #[test]
    fn empty_smaps_rollup_leaves_smaps_none() {
        let root = fake_proc();
        write(&root.path().join("123/smaps_rollup"), "");
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(reading.smaps, None);
    }

    #[test]
    fn zombie_smaps_rollup_is_not_read() {
        let root = fake_proc();
        write(
            &root.path().join("123/stat"),
            &STAT.replace(")) S 1", ")) Z 1"),
        );
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(reading.state, 'Z');
        assert_eq!(reading.smaps, None);
    }

    #[test]
    fn missing_io_leaves_io_none() {
        // Kernels without CONFIG_TASK_IO_ACCOUNTING have no /proc/PID/io.
        let root = fake_proc();
        fs::remove_file(root.path().join("123/io")).unwrap();
        let reading = reader(&root).read_process(123, MemoryDetail::Full).unwrap();
        assert_eq!(
            reading,
            ProcessReading {
                io: None,
                ..expected_process()
            }
        );
    }

    #[test]
    fn malformed_stat_is_an_error_naming_the_file() {
        let root = fake_proc();
        write(&root.path().join("123/stat"), "123 (cut short) S 1 2\n");
        let error = reader(&root)
            .read_process(123, MemoryDetail::Full)
            .unwrap_err();
        match error {
            ReadError::Io { path, .. } => assert_eq!(path, root.path().join("123/stat")),
            other => panic!("expected an I/O error, got {other:?}"),
        }
    }

    fn expected_system() -> SystemReading {
        SystemReading {
            cpu: CpuTicks {
                user: 301319,
                nice: 15,
                system: 31156,
                idle: 108378,
                iowait: 830,
                irq: 7,
                softirq: 356,
                steal: 766,
            },
            mem_total_bytes: 24682416 * 1024,
            mem_available_bytes: 24013824 * 1024,
            mem_free_bytes: 10466520 * 1024,
            cached_bytes: (13280604 + 474740) * 1024,
            swap_total_bytes: 2097148 * 1024,
            swap_free_bytes: 2000000 * 1024,
            load: (3.2, 0.52, 3.09),
            psi: Some(Psi {
                cpu_some_avg10: 17.8,
                memory_some_avg10: 1.25,
                memory_full_avg10: 0.75,
                io_some_avg10: 3.1,
                io_full_avg10: 2.05,
            }),
        }
    }

    #[test]
    fn reads_every_field_of_fake_system_files() {
        let root = fake_proc();
        assert_eq!(reader(&root).read_system().unwrap(), expected_system());
    }

    #[test]
    fn system_without_pressure_has_no_psi() {
        let root = fake_proc();
        fs::remove_dir_all(root.path().join("pressure")).unwrap();
        let reading = reader(&root).read_system().unwrap();
        assert_eq!(
            reading,
            SystemReading {
                psi: None,
                ..expected_system()
            }
        );
    }

    #[test]
    fn cpu_pressure_without_a_full_line_still_reads() {
        // Before Linux 5.13 /proc/pressure/cpu has only the "some" line.
        let root = fake_proc();
        write(
            &root.path().join("pressure/cpu"),
            "some avg10=17.80 avg60=8.46 avg300=42.87 total=1031234058\n",
        );
        assert_eq!(reader(&root).read_system().unwrap(), expected_system());
    }

    #[test]
    fn meminfo_without_mem_available_falls_back_to_free() {
        let root = fake_proc();
        let meminfo = MEMINFO.replace("MemAvailable:   24013824 kB\n", "");
        write(&root.path().join("meminfo"), &meminfo);
        let reading = reader(&root).read_system().unwrap();
        assert_eq!(reading.mem_available_bytes, 10466520 * 1024);
    }

    #[test]
    fn missing_system_file_is_an_error_naming_it() {
        let root = fake_proc();
        fs::remove_file(root.path().join("meminfo")).unwrap();
        let error = reader(&root).read_system().unwrap_err();
        match &error {
            ReadError::Io { path, .. } => assert_eq!(*path, root.path().join("meminfo")),
            other => panic!("expected an I/O error, got {other:?}"),
        }
        assert!(error.to_string().contains("meminfo"), "{error}");
    }

    #[test]
    fn live_own_process_reads_plausibly() {
        let mut reader = ProcReader::new();
        let reading = reader
            .read_process(std::process::id(), MemoryDetail::Full)
            .unwrap();
        assert!(reading.rss_bytes > 0, "{reading:?}");
        assert!(reading.vms_bytes >= reading.rss_bytes, "{reading:?}");
        assert!(reading.threads >= 1, "{reading:?}");
        assert!(matches!(reading.state, 'R' | 'S'), "{reading:?}");
        assert!(reading.start_ticks > 0, "{reading:?}");
        // stdin, stdout, stderr at least (the test harness may have closed or redirected some).
        assert!(reading.fds.is_some_and(|n| n >= 1), "{reading:?}");
        assert!(reading.io.is_some(), "{reading:?}");
        let smaps = reading.smaps.expect("smaps_rollup of this process");
        assert!(smaps.pss_bytes > 0 && smaps.uss_bytes > 0, "{smaps:?}");
        assert!(
            smaps.uss_bytes <= reading.rss_bytes,
            "{smaps:?} {reading:?}"
        );
    }

    #[test]
    fn live_zombie_reads_and_reaped_child_is_gone() {
        let mut reader = ProcReader::new();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let mut handle = reader.open_process(pid).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let zombie = loop {
            let reading = reader.read_open_process(&mut handle, |_| true).unwrap();
            if reading.state == 'Z' {
                break reading;
            }
            assert!(Instant::now() < deadline, "child never exited: {reading:?}");
            std::thread::sleep(Duration::from_millis(5));
        };
        assert_eq!(zombie.fds, Some(0), "{zombie:?}");
        assert_eq!(zombie.smaps, None, "{zombie:?}");
        assert_eq!(zombie.rss_bytes, 0, "{zombie:?}");
        child.wait().unwrap();
        // Through the handle kept open, as a sweep reads it, and by pid, as a first reading.
        let error = reader.read_open_process(&mut handle, |_| true).unwrap_err();
        assert!(matches!(error, ReadError::Gone(p) if p == pid), "{error:?}");
        let error = reader.read_process(pid, MemoryDetail::Full).unwrap_err();
        assert!(matches!(error, ReadError::Gone(p) if p == pid), "{error:?}");
    }

    #[test]
    fn live_child_killed_while_its_handle_is_open_is_gone() {
        let mut reader = ProcReader::new();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let mut handle = reader.open_process(child.id()).unwrap();
        let alive = reader.read_open_process(&mut handle, |_| true).unwrap();
        assert!(alive.io.is_some() && alive.fds.is_some(), "{alive:?}");
        child.kill().unwrap();
        child.wait().unwrap();
        let error = reader.read_open_process(&mut handle, |_| true).unwrap_err();
        assert!(matches!(error, ReadError::Gone(_)), "{error:?}");
    }

    #[test]
    fn io_parses_and_needs_its_four_fields() {
        assert_eq!(
            parse_io(IO.as_bytes()),
            Some(IoReading {
                read_bytes: 4096,
                write_bytes: 8192,
                read_chars: 6976,
                write_chars: 1234,
            })
        );
        assert_eq!(parse_io(IO.replace("wchar: 1234\n", "").as_bytes()), None);
        assert_eq!(
            parse_io(IO.replace("wchar: 1234", "wchar: x").as_bytes()),
            None
        );
        assert_eq!(parse_io(b""), None);
    }

    #[test]
    fn smaps_rollup_parses_kib_and_needs_its_fields() {
        assert_eq!(
            parse_smaps_rollup(SMAPS_ROLLUP.as_bytes()),
            Some(SmapsReading {
                uss_bytes: (44 + 112) * 1024,
                pss_bytes: 275 * 1024,
                swap_bytes: 8 * 1024,
            })
        );
        let without_swap = SMAPS_ROLLUP.replace("Swap:                  8 kB\n", "");
        assert_eq!(parse_smaps_rollup(without_swap.as_bytes()), None);
        assert_eq!(parse_smaps_rollup(b""), None);
    }

    #[test]
    fn numbers_are_plain_digits_without_overflow() {
        assert_eq!(parse_u64(b"0"), Some(0));
        assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_u64(b"18446744073709551616"), None);
        assert_eq!(parse_u64(b""), None);
        assert_eq!(parse_u64(b"+1"), None);
        assert_eq!(parse_u64(b"1 "), None);
    }

    /// A handle that counts how many of its kind were closed.
    struct Counted(Rc<Cell<usize>>);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.set(self.0.get() + 1);
        }
    }

    #[test]
    fn handle_cache_closes_handles_of_processes_a_sweep_did_not_read() {
        let closed = Rc::new(Cell::new(0));
        let mut cache = HandleCache::new(10);
        for key in [(1, 10), (2, 20), (3, 30)] {
            assert!(cache.take(key).is_none());
            cache.keep(key, Counted(closed.clone()));
        }
        cache.end_sweep();
        assert_eq!(closed.get(), 0);
        // Process 2 exited: the next sweep reads only 1 and 3.
        for key in [(1, 10), (3, 30)] {
            let handle = cache.take(key).expect("kept by the last sweep");
            cache.keep(key, handle);
        }
        cache.end_sweep();
        assert_eq!(closed.get(), 1);
        assert!(cache.take((2, 20)).is_none());
        // Its pid reused by a new process of the tree: a different key, no handle yet.
        assert!(cache.take((1, 99)).is_none());
    }

    #[test]
    fn handle_cache_closes_an_ended_process_at_once() {
        let closed = Rc::new(Cell::new(0));
        let mut cache = HandleCache::new(10);
        cache.keep((1, 10), Counted(closed.clone()));
        cache.end_sweep();
        cache.remove((1, 10));
        assert_eq!(closed.get(), 1);
        assert!(cache.take((1, 10)).is_none());
    }

    #[test]
    fn handle_cache_beyond_capacity_closes_at_once() {
        let closed = Rc::new(Cell::new(0));
        let mut cache = HandleCache::new(2);
        for pid in 1..=3 {
            cache.keep((pid, 0), Counted(closed.clone()));
        }
        assert_eq!(closed.get(), 1);
        cache.end_sweep();
        assert!(cache.take((1, 0)).is_some() && cache.take((2, 0)).is_some());
        assert!(cache.take((3, 0)).is_none());
    }

    #[test]
    fn handle_capacity_leaves_a_reserve_under_the_fd_limit() {
        assert_eq!(handle_capacity(1024), 192);
        assert_eq!(handle_capacity(20_000), 3_750);
        assert_eq!(handle_capacity(256), 0);
        assert_eq!(handle_capacity(0), 0);
    }

    #[test]
    fn live_system_reads_plausibly() {
        let reading = ProcReader::new().read_system().unwrap();
        assert!(reading.cpu.user + reading.cpu.system + reading.cpu.idle > 0);
        assert!(reading.mem_total_bytes > 0);
        assert!(reading.mem_available_bytes <= reading.mem_total_bytes);
        assert!(reading.swap_free_bytes <= reading.swap_total_bytes);
        assert!(reading.load.0 >= 0.0);
        assert_eq!(
            reading.psi.is_some(),
            Path::new("/proc/pressure/memory").exists(),
            "{reading:?}"
        );
    }
}
