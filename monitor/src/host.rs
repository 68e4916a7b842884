//! Small reads of the host: clocks, uname, page size, pid_max, open-files limit, capabilities,
//! small files of /proc, /sys and cgroupfs.
//!
//! At the bottom of the layers (`layers.rs`), beside `units` and `term`: the kernel tier stamps
//! and sizes its maps with these facts (boottime clock, uname, pid_max), and every stage above
//! reads the same clocks. It uses nothing of the crate.

/// The whole text of a small file of /proc, /sys or a cgroup filesystem. Such files say their
/// size is 0, so `std::fs::read_to_string` asks for it (`statx`) and then reads 32 bytes, 32,
/// 64, 128 and so on: 11 system calls for /proc/meminfo. This reads 4 KiB at a time: 4 calls
/// (open, the read, the read of 0 that ends it, close). It reads on to that 0, unlike the
/// sampler's `read_whole`, which stops at a short read: a file of many seq_file records
/// (mountinfo, one a mount) can come short of its end in one read.
pub fn read_small_file(path: impl AsRef<std::path::Path>) -> std::io::Result<String> {
    String::from_utf8(read_small(path)?)
        .map_err(|err| std::io::Error::new(std::io::ErrorKind::InvalidData, err))
}

/// [`read_small_file`]'s bytes (a /proc/PID/stat: 3 calls where `std::fs::read` makes 8).
pub fn read_small(path: impl AsRef<std::path::Path>) -> std::io::Result<Vec<u8>> {
    read_start(path, usize::MAX)
}

/// At most the first `limit` bytes of a small file, read as [`read_small_file`] does.
pub fn read_start(path: impl AsRef<std::path::Path>, limit: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read as _;
    let mut file = std::fs::File::open(path)?;
    let mut bytes = vec![0u8; 4096.min(limit)];
    let mut len = 0;
    while len < limit {
        if len == bytes.len() {
            bytes.resize(len.saturating_mul(2).min(limit), 0);
        }
        match file.read(&mut bytes[len..]) {
            Ok(0) => break,
            Ok(n) => len += n,
            Err(err) if err.kind() == std::io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    bytes.truncate(len);
    Ok(bytes)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: zeroed timespec is a valid out-parameter.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer; these clocks always exist on Linux.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// ns since boot, suspend included: the clock of `bpf_ktime_get_boot_ns()`.
pub fn boottime_ns() -> u64 {
    clock_ns(libc::CLOCK_BOOTTIME)
}

pub fn realtime_ns() -> i64 {
    clock_ns(libc::CLOCK_REALTIME) as i64
}

/// CLOCK_REALTIME - CLOCK_BOOTTIME, read back to back (the smaller gap of three tries).
pub fn boot_to_wall_ns() -> i64 {
    (0..3)
        .map(|_| {
            let b1 = boottime_ns();
            let r = realtime_ns();
            let b2 = boottime_ns();
            (b2 - b1, r - ((b1 + b2) / 2) as i64)
        })
        .min_by_key(|(gap, _)| *gap)
        .map(|(_, offset)| offset)
        .unwrap_or(0)
}

pub fn page_size() -> u64 {
    // SAFETY: sysconf has no memory-safety preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as u64
    } else {
        4096
    }
}

/// The kernel's `pid_max` (`/proc/sys/kernel/pid_max`): no more tasks can live at once than
/// there are pid numbers below it. None when it cannot be read.
pub fn pid_max() -> Option<u32> {
    read_small_file("/proc/sys/kernel/pid_max")
        .ok()
        .and_then(|text| text.trim().parse().ok())
}

/// RLIMIT_NOFILE as montrace found it, when [`raise_open_files_limit`] changed it.
static ORIGINAL_OPEN_FILES_LIMIT: std::sync::OnceLock<libc::rlimit> = std::sync::OnceLock::new();

/// Raises montrace's soft limit on open descriptors to the hard limit. The sampler keeps a few
/// descriptors open per live process ([`crate::sampling::sampler::handle_capacity`]), and the usual soft
/// limit of 1024 would leave a large build's processes to be opened again at every sweep. The
/// command does not inherit the raise: [`original_open_files_limit`] is what it gets back.
pub fn raise_open_files_limit() {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct rlimit, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0
        || limit.rlim_cur >= limit.rlim_max
    {
        return;
    }
    let raised = libc::rlimit {
        rlim_cur: limit.rlim_max,
        rlim_max: limit.rlim_max,
    };
    // SAFETY: setrlimit reads one struct rlimit.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
        let _ = ORIGINAL_OPEN_FILES_LIMIT.set(limit);
    }
}

/// RLIMIT_NOFILE as it was before [`raise_open_files_limit`] raised it; None if it did not.
pub fn original_open_files_limit() -> Option<libc::rlimit> {
    ORIGINAL_OPEN_FILES_LIMIT.get().copied()
}

/// The soft limit on open descriptors (RLIMIT_NOFILE); 1024, the usual default, if unknown.
pub fn open_files_limit() -> u64 {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one struct rlimit, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0 {
        limit.rlim_cur
    } else {
        1024
    }
}

pub fn ticks_per_second() -> u64 {
    // SAFETY: as above.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if hz > 0 {
        hz as u64
    } else {
        100
    }
}

/// One clock tick of /proc's times, in ns.
pub fn tick_ns() -> u64 {
    1_000_000_000 / ticks_per_second()
}

/// (host name, kernel release) from uname(2).
pub fn uname() -> (String, String) {
    // SAFETY: zeroed utsname is a valid out-parameter.
    let mut u: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    unsafe { libc::uname(&mut u) };
    let field = |f: &[libc::c_char]| {
        let bytes: Vec<u8> = f
            .iter()
            .take_while(|&&c| c != 0)
            .map(|&c| c as u8)
            .collect();
        String::from_utf8_lossy(&bytes).into_owned()
    };
    (field(&u.nodename), field(&u.release))
}

/// Whether a start time read from /proc (clock ticks since boot) is the process whose exact start
/// time montrace knows: they agree to within a tick (/proc truncates to ticks).
pub fn same_start(start_ticks: u64, start_boot_ns: u64) -> bool {
    same_start_ns(
        start_ticks * (1_000_000_000 / ticks_per_second()),
        start_boot_ns,
    )
}

/// As [`same_start`], with the /proc start time already in ns since boot (ticks × tick length).
pub fn same_start_ns(from_proc_ns: u64, start_boot_ns: u64) -> bool {
    from_proc_ns.abs_diff(start_boot_ns) <= 2 * (1_000_000_000 / ticks_per_second())
}

/// Whether this process may load tracing eBPF programs: root, or CAP_BPF + CAP_PERFMON, or
/// CAP_SYS_ADMIN in its effective set.
pub fn can_load_ebpf() -> bool {
    let Ok(status) = read_small_file("/proc/self/status") else {
        return false;
    };
    let Some(caps) = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
    else {
        return false;
    };
    const CAP_SYS_ADMIN: u64 = 1 << 21;
    const CAP_PERFMON: u64 = 1 << 38;
    const CAP_BPF: u64 = 1 << 39;
    caps & CAP_SYS_ADMIN != 0 || (caps & CAP_BPF != 0 && caps & CAP_PERFMON != 0)
}

/// montrace's own CPU time so far (user + system of every thread), in seconds.
pub fn own_cpu_s() -> f64 {
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) } != 0 {
        return 0.0;
    }
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}

/// A pidfd for `pid` (Linux 5.3): it pins that one process, whatever becomes of the pid, and
/// polls readable once the process exits.
pub fn pidfd_open(pid: u32) -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd as _;
    // SAFETY: plain syscall; the result is checked.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor (pidfds are close-on-exec), owned from here on.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_times_match_within_a_tick() {
        let tick = 1_000_000_000 / ticks_per_second();
        assert!(same_start(100, 100 * tick + tick / 2));
        assert!(!same_start(100, 110 * tick));
    }

    /// The same text as std's read, for files of /proc made as they are read, one longer than
    /// the first buffer among them, and a regular file; a missing file is an error.
    #[test]
    fn small_files_read_whole() {
        let meminfo = read_small_file("/proc/meminfo").unwrap();
        let std_meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
        assert_eq!(
            meminfo.lines().next(),
            std_meminfo.lines().next(),
            "MemTotal"
        );
        for path in ["/proc/self/mountinfo", "/proc/self/cgroup"] {
            let ours = read_small_file(path).unwrap();
            assert!(!ours.is_empty(), "{path}");
            assert_eq!(ours, std::fs::read_to_string(path).unwrap(), "{path}");
        }
        let dir = tempfile::tempdir().unwrap();
        let long: String = (0..2000).map(|i| format!("line {i}\n")).collect();
        assert!(long.len() > 3 * 4096);
        std::fs::write(dir.path().join("long"), &long).unwrap();
        assert_eq!(read_small_file(dir.path().join("long")).unwrap(), long);
        std::fs::write(dir.path().join("empty"), "").unwrap();
        assert_eq!(read_small_file(dir.path().join("empty")).unwrap(), "");
        assert!(read_small_file(dir.path().join("missing")).is_err());
        // The start of a file, whatever its length against the buffer's.
        let path = dir.path().join("long");
        for limit in [0, 10, 4096, 4097, 9000, long.len(), long.len() + 1] {
            let start = read_start(&path, limit).unwrap();
            assert_eq!(start, long.as_bytes()[..limit.min(long.len())], "{limit}");
        }
        assert_eq!(read_small(&path).unwrap(), long.as_bytes());
    }

    #[test]
    fn wall_offset_maps_now_to_now() {
        let offset = boot_to_wall_ns();
        let mapped = boottime_ns() as i64 + offset;
        assert!((mapped - realtime_ns()).abs() < 50_000_000);
    }
}
