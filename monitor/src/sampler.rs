//! Reads /proc: the raw figures of one process, or of the whole machine. This is the edge of the
//! sampling pipeline (`sampler` reads -> `rates` derives the rows of `model`); nothing here keeps
//! state or knows about time, so there are no rates here, only counters as the kernel shows them.
//!
//! Parsing goes through the procfs crate; every reader takes a root directory so tests run on a
//! fake /proc tree in a temp dir.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use procfs::process::{Process, Stat};
use procfs::{
    parse_pressure_record, ExplicitSystemInfo, FromRead, FromReadSI, KernelStats, LoadAverage,
    Meminfo, ProcError, ProcResult,
};

/// How much memory detail each process sample reads.
///
/// Measured cost of one `read_process` (release build, Linux 6.18, 2-vCPU VM, this machine's live
/// processes): `Basic` about 13 µs for any process (opening /proc/PID 1 µs, stat 5, io 4, fd
/// count under 1). `Full` adds one read of smaps_rollup, for which the kernel walks every page
/// table of the process, so it grows with resident memory: about 36 µs in all for small
/// processes (a shell, a few MiB resident), 0.65 ms at 130 MiB resident, 13 ms at 2 GiB (about
/// 6 ms per GiB of 4 KiB pages). For a tree of large processes sampled often, use `Basic`.
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
}

impl Default for ProcReader {
    fn default() -> Self {
        Self::new()
    }
}

/// `PF_KTHREAD` in the stat flags word (include/linux/sched.h): a kernel thread, which has no
/// address space to summarize.
const PF_KTHREAD: u32 = 0x0020_0000;

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
        let fd_count_in_dir_size = root == Path::new("/proc");
        ProcReader {
            root,
            ticks_per_second,
            page_size,
            fd_count_in_dir_size,
        }
    }

    /// Reads one process: /proc/PID/stat (cpu, memory, threads, state, faults), the fd count and
    /// /proc/PID/io, plus /proc/PID/smaps_rollup with `MemoryDetail::Full`. A process that is gone
    /// at any point of the read gives `ReadError::Gone`.
    pub fn read_process(
        &self,
        pid: u32,
        detail: MemoryDetail,
    ) -> Result<ProcessReading, ReadError> {
        self.read_process_if(pid, |_| detail == MemoryDetail::Full)
    }

    /// As `read_process`, asking `want_smaps(rss_bytes)` whether smaps_rollup, by far the
    /// costliest read (a walk of the page tables), is worth reading this time.
    pub fn read_process_if(
        &self,
        pid: u32,
        want_smaps: impl FnOnce(u64) -> bool,
    ) -> Result<ProcessReading, ReadError> {
        let dir = self.root.join(pid.to_string());
        // The Process holds an O_PATH descriptor of /proc/PID: every later file is opened
        // relative to it, so a pid reused mid-read reads as gone, never as another process.
        let process = Process::new_with_root(dir.clone()).map_err(|e| fail(pid, &dir, e))?;
        let stat = process
            .stat()
            .map_err(|e| fail(pid, &dir.join("stat"), e))?;
        let detail = if want_smaps(stat.rss.saturating_mul(self.page_size)) {
            MemoryDetail::Full
        } else {
            MemoryDetail::Basic
        };
        self.read_after_stat(&process, &dir, pid, &stat, detail)
    }

    fn read_after_stat(
        &self,
        process: &Process,
        dir: &Path,
        pid: u32,
        stat: &Stat,
        detail: MemoryDetail,
    ) -> Result<ProcessReading, ReadError> {
        let io = self
            .optional(process, dir, pid, process.io())?
            .map(|io| IoReading {
                read_bytes: io.read_bytes,
                write_bytes: io.write_bytes,
                read_chars: io.rchar,
                write_chars: io.wchar,
            });
        let fds = self.optional(process, dir, pid, self.count_fds(dir))?;
        // A zombie or a kernel thread has no address space: the kernel answers ESRCH.
        let has_address_space = !matches!(stat.state, 'Z' | 'X') && stat.flags & PF_KTHREAD == 0;
        let smaps = if detail == MemoryDetail::Full && has_address_space {
            self.optional(process, dir, pid, process.smaps_rollup())?
                .and_then(|rollup| smaps_reading(&rollup.memory_map_rollup))
        } else {
            None
        };
        Ok(ProcessReading {
            pid,
            start_ticks: stat.starttime,
            cpu_user_ns: ticks_to_ns(stat.utime, self.ticks_per_second),
            cpu_system_ns: ticks_to_ns(stat.stime, self.ticks_per_second),
            // The same figures as statm's size and resident (and status's VmSize/VmRSS), so
            // neither of those files is read.
            rss_bytes: stat.rss.saturating_mul(self.page_size),
            vms_bytes: stat.vsize,
            threads: u32::try_from(stat.num_threads).unwrap_or(0),
            state: stat.state,
            minor_faults: stat.minflt,
            major_faults: stat.majflt,
            fds,
            io,
            smaps,
        })
    }

    /// A file some processes lack or hide: permission denied is None. Not found is None while
    /// the process is still there (a kernel without the file, a zombie's smaps_rollup) and
    /// `Gone` once it is not. procfs reports an error in the middle of smaps_rollup (ESRCH when
    /// the address space went away) as Incomplete, so that is checked the same way.
    fn optional<T>(
        &self,
        process: &Process,
        dir: &Path,
        pid: u32,
        result: ProcResult<T>,
    ) -> Result<Option<T>, ReadError> {
        match result {
            Ok(value) => Ok(Some(value)),
            Err(ProcError::PermissionDenied(_)) => Ok(None),
            Err(ProcError::NotFound(_) | ProcError::Incomplete(_)) => match process.stat() {
                Ok(_) => Ok(None),
                Err(e) => Err(fail(pid, &dir.join("stat"), e)),
            },
            // procfs's errors from opening or reading a process file carry its path.
            Err(e) => Err(fail(pid, dir, e)),
        }
    }

    /// procfs's `Process::fd_count` is not used: when the fast path gives 0 (a zombie, or a
    /// kernel before 6.2) it lists the directory and counts "." and "..", and on a fake tree it
    /// returns the directory's size in bytes.
    fn count_fds(&self, process_dir: &Path) -> ProcResult<u32> {
        let path = process_dir.join("fd");
        let count = || -> io::Result<u32> {
            if self.fd_count_in_dir_size {
                let size = fs::metadata(&path)?.len();
                if size > 0 {
                    return Ok(u32::try_from(size).unwrap_or(u32::MAX));
                }
            }
            let mut count = 0;
            for entry in fs::read_dir(&path)? {
                entry?;
                count += 1;
            }
            Ok(count)
        };
        count().map_err(|e| proc_error(e, path.clone()))
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

fn smaps_reading(maps: &procfs::process::MemoryMaps) -> Option<SmapsReading> {
    // smaps_rollup is one pseudo-mapping ("[rollup]") whose fields procfs gives in bytes.
    let fields = &maps.0.first()?.extension.map;
    Some(SmapsReading {
        uss_bytes: fields.get("Private_Clean")? + fields.get("Private_Dirty")?,
        pss_bytes: *fields.get("Pss")?,
        swap_bytes: *fields.get("Swap")?,
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

/// A failed read of a process's file: not found (ENOENT, ESRCH) means the process is gone.
fn fail(pid: u32, path: &Path, error: ProcError) -> ReadError {
    match error {
        ProcError::NotFound(_) => ReadError::Gone(pid),
        error => io_error(path, error),
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
    use std::os::unix::fs::symlink;
    use std::time::{Duration, Instant};

    /// Shaped like a real /proc/PID/stat; comm has a space and a ')' to check the parser finds
    /// the last one. utime 250, stime 75 ticks; 4 threads; starttime 206709; vsize 12345344
    /// bytes; rss 1024 pages.
    const STAT: &str = "123 (my prog) (x)) S 1 123 123 0 -1 4194560 5432 0 12 0 250 75 0 0 20 0 \
        4 0 206709 12345344 1024 18446744073709551615 93830273077248 93830273097129 \
        140735164818512 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 93830273113136 93830273114752 \
        93831026782208 140735164819939 140735164819959 140735164819959 140735164821483 0\n";

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
    fn process_vanishing_after_its_stat_was_read_is_gone() {
        let root = fake_proc();
        let reader = reader(&root);
        let dir = root.path().join("123");
        let process = Process::new_with_root(dir.clone()).unwrap();
        let stat = process.stat().unwrap();
        fs::remove_dir_all(&dir).unwrap();
        let error = reader
            .read_after_stat(&process, &dir, 123, &stat, MemoryDetail::Full)
            .unwrap_err();
        assert!(matches!(error, ReadError::Gone(123)), "{error:?}");
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
        let reader = ProcReader::new();
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
        let reader = ProcReader::new();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        let deadline = Instant::now() + Duration::from_secs(10);
        let zombie = loop {
            let reading = reader.read_process(pid, MemoryDetail::Full).unwrap();
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
        let error = reader.read_process(pid, MemoryDetail::Full).unwrap_err();
        assert!(matches!(error, ReadError::Gone(p) if p == pid), "{error:?}");
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
