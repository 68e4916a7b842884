//! `cargo xtask test --stress N`: the end-to-end suite N times, the second half beside noisy
//! neighbours: a CPU hog on one core, a writer that fsyncs, a page-cache filler that reads a
//! file through the cache again and again, and a memory toucher that keeps anonymous memory
//! resident. What a timing- or scheduling-dependent test must survive before it is called
//! fixed: a burner that page-faults from a busy disk (the D state), a sweep that lands late.
//!
//! Every neighbour is bounded so that a stress run cannot fill the disk or run the machine out
//! of memory: the files are truncated and rewritten in place, their size is a share of the
//! free disk, and the memory a share of what the kernel says is available ([`Sizes::for_machine`],
//! a pure function tested below).

use crate::suite::{build_dist, e2e_command, header};
use crate::util::{self, check};
use anyhow::{Context, Result};
use std::fs::File;
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const MIB: u64 = 1 << 20;

/// For each of `n` iterations of the stress run, whether the neighbours run beside it: the
/// second half (the odd middle one with them).
pub fn stress_plan(n: u32) -> Vec<bool> {
    (0..n).map(|i| i >= n / 2).collect()
}

/// Builds once, then runs the end-to-end suite N times, the second half beside the neighbours.
/// Prints each iteration and a closing `stress: P passed, F failed`; fails if any iteration did.
pub fn stress(verbose: bool, n: u32) -> Result<()> {
    crate::setup::setup(verbose)?;
    check(util::cargo().args(["build", "-p", "monitor"]))
        .context("building montrace (debug) failed")?;
    build_dist(verbose)?;
    check(util::cargo().args(["test", "-p", "tests", "--no-run"]))
        .context("building the end-to-end tests failed")?;
    let mut results = Vec::new();
    for (i, noisy) in stress_plan(n).into_iter().enumerate() {
        let neighbours = if noisy {
            Some(Neighbours::start()?)
        } else {
            None
        };
        header(&format!(
            "stress {}/{n}: end-to-end suite{}",
            i + 1,
            neighbours
                .as_ref()
                .map(|n| format!(" beside {}", n.describe()))
                .unwrap_or_default()
        ));
        let started = std::time::Instant::now();
        // Every test file, whatever failed before it: a stress run is for finding them all.
        let passed = e2e_command(false)
            .status()
            .context("running the end-to-end tests")?
            .success();
        let wall = started.elapsed().as_secs_f64();
        let written = neighbours.map(Neighbours::stop).transpose()?;
        eprintln!(
            "xtask: stress {}/{n}: {} in {wall:.0} s{}",
            i + 1,
            if passed { "passed" } else { "FAILED" },
            written
                .as_ref()
                .map(|w| format!(" (with the neighbours: {w})"))
                .unwrap_or_default()
        );
        results.push((passed, noisy, wall));
    }
    let failed = results.iter().filter(|(p, ..)| !p).count();
    for (i, (passed, noisy, wall)) in results.iter().enumerate() {
        eprintln!(
            "  {:>2}  {:<6}  {wall:>5.0} s  {}",
            i + 1,
            if *passed { "passed" } else { "FAILED" },
            if *noisy {
                "hog on CPU 0, fsync writer, page-cache filler, memory toucher"
            } else {
                ""
            }
        );
    }
    eprintln!("stress: {} passed, {failed} failed", results.len() - failed);
    if failed > 0 {
        anyhow::bail!("{failed} of {n} stress iterations failed");
    }
    Ok(())
}

/// How big the I/O and memory neighbours may be on this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sizes {
    /// The fsync writer's file: rewritten from its start once this long.
    pub write_file: u64,
    /// The page-cache filler's file, read through the cache pass after pass.
    pub cache_file: u64,
    /// Anonymous memory kept resident by the toucher.
    pub memory: u64,
}

impl Sizes {
    /// At most 256 MiB written and 2 GiB cached, both within a tenth of the free disk together;
    /// at most 2 GiB of memory touched, and never more than an eighth of what is available (so
    /// page cache + touched memory stay under a third of it: no OOM, and the suite's own
    /// memory tests keep their room). Nothing when the disk or memory is too small to matter.
    pub fn for_machine(mem_available: u64, disk_free: u64) -> Sizes {
        let disk = disk_free / 10;
        let write_file = (256 * MIB).min(disk / 4);
        let cache_file = (2048 * MIB).min(disk - write_file).min(mem_available / 5);
        let memory = (2048 * MIB).min(mem_available / 8);
        let floor = |b: u64| if b < 16 * MIB { 0 } else { b - b % MIB };
        Sizes {
            write_file: floor(write_file),
            cache_file: floor(cache_file),
            memory: floor(memory),
        }
    }
}

/// `MemAvailable` of /proc/meminfo, in bytes.
fn mem_available() -> Result<u64> {
    let meminfo = std::fs::read_to_string("/proc/meminfo").context("reading /proc/meminfo")?;
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib * 1024)
        .context("no MemAvailable in /proc/meminfo")
}

/// Bytes free to an unprivileged user on the filesystem of `dir`.
fn disk_free(dir: &Path) -> Result<u64> {
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())?;
    // SAFETY: `c` is a NUL-terminated path; `st` is a plain struct statvfs fills in.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: as above; statvfs only writes into `st`.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return Err(std::io::Error::last_os_error())
            .with_context(|| format!("statvfs {}", dir.display()));
    }
    Ok(st.f_bavail as u64 * st.f_frsize as u64)
}

/// The noisy neighbours, stopped (and their files removed) when dropped.
struct Neighbours {
    _hog: Hog,
    stop: Arc<AtomicBool>,
    threads: Vec<(&'static str, JoinHandle<Result<u64>>)>,
    dir: PathBuf,
    sizes: Sizes,
}

impl Neighbours {
    fn start() -> Result<Neighbours> {
        // Where the tests' temporary directories go: their disk is the one to keep busy.
        let dir = std::env::temp_dir().join(format!("montrace-stress-{}", std::process::id()));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        let sizes = Sizes::for_machine(mem_available()?, disk_free(&dir)?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        let spawn = |name: &'static str, f: Box<dyn FnOnce() -> Result<u64> + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .map(|h| (name, h))
                .with_context(|| format!("starting the {name}"))
        };
        if sizes.write_file > 0 {
            let (path, stop, size) = (dir.join("fsync"), stop.clone(), sizes.write_file);
            threads.push(spawn(
                "fsync writer",
                Box::new(move || fsync_writer(&path, size, &stop)),
            )?);
        }
        if sizes.cache_file > 0 {
            let (path, stop, size) = (dir.join("cache"), stop.clone(), sizes.cache_file);
            threads.push(spawn(
                "page-cache filler",
                Box::new(move || cache_filler(&path, size, &stop)),
            )?);
        }
        if sizes.memory > 0 {
            let (stop, size) = (stop.clone(), sizes.memory);
            threads.push(spawn(
                "memory toucher",
                Box::new(move || memory_toucher(size, &stop)),
            )?);
        }
        Ok(Neighbours {
            _hog: Hog::start()?,
            stop,
            threads,
            dir,
            sizes,
        })
    }

    fn describe(&self) -> String {
        let s = self.sizes;
        format!(
            "a CPU hog on CPU 0, an fsync writer ({} MiB file), a page-cache filler ({} MiB \
             file) and a memory toucher ({} MiB)",
            s.write_file / MIB,
            s.cache_file / MIB,
            s.memory / MIB
        )
    }

    /// Stops them; says how many MiB each moved (written, read, touched), or why one failed.
    fn stop(mut self) -> Result<String> {
        self.stop.store(true, Ordering::Relaxed);
        let mut moved = Vec::new();
        for (name, thread) in std::mem::take(&mut self.threads) {
            let bytes = thread
                .join()
                .map_err(|_| anyhow::anyhow!("the {name} panicked"))?
                .with_context(|| format!("the {name} failed"))?;
            moved.push(format!("{name} {} MiB", bytes / MIB));
        }
        Ok(moved.join(", "))
    }
}

impl Drop for Neighbours {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (_, thread) in self.threads.drain(..) {
            let _ = thread.join();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Writes 1 MiB blocks, each followed by fsync, rewriting the file from its start once it is
/// `size` long: the disk's queue stays busy and the file never grows past `size`.
fn fsync_writer(path: &Path, size: u64, stop: &AtomicBool) -> Result<u64> {
    let mut f = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![0x5au8; MIB as usize];
    let (mut at, mut written) = (0u64, 0u64);
    while !stop.load(Ordering::Relaxed) {
        if at + MIB > size {
            f.rewind()?;
            at = 0;
        }
        f.write_all(&block)
            .and_then(|()| f.sync_data())
            .with_context(|| format!("writing {}", path.display()))?;
        at += MIB;
        written += MIB;
    }
    Ok(written)
}

/// Writes a `size` file once, then reads it end to end again and again, dropping it from the
/// cache after each pass (POSIX_FADV_DONTNEED), so each pass reads from the disk and fills the
/// page cache anew, pushing out cold pages of other files.
fn cache_filler(path: &Path, size: u64, stop: &AtomicBool) -> Result<u64> {
    use std::os::unix::io::AsRawFd as _;
    let mut f = File::options()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(path)
        .with_context(|| format!("creating {}", path.display()))?;
    let mut block = vec![0xa5u8; MIB as usize];
    for _ in 0..size / MIB {
        if stop.load(Ordering::Relaxed) {
            return Ok(0);
        }
        f.write_all(&block)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    f.sync_all()?;
    let mut read = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // SAFETY: plain syscall on a descriptor this function owns.
        unsafe { libc::posix_fadvise(f.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
        f.rewind()?;
        for _ in 0..size / MIB {
            if stop.load(Ordering::Relaxed) {
                break;
            }
            f.read_exact(&mut block)
                .with_context(|| format!("reading {}", path.display()))?;
            read += MIB;
        }
    }
    Ok(read)
}

/// Keeps `size` bytes of anonymous memory resident, writing a byte of every page each 200 ms
/// (a few ms of CPU per pass: the CPU is the hog's business).
fn memory_toucher(size: u64, stop: &AtomicBool) -> Result<u64> {
    let page = 4096;
    let mut memory = vec![0u8; size as usize];
    let mut touched = 0u64;
    let mut pass = 0u8;
    while !stop.load(Ordering::Relaxed) {
        pass = pass.wrapping_add(1);
        for i in (0..memory.len()).step_by(page) {
            memory[i] = pass;
        }
        touched += size;
        std::hint::black_box(&memory);
        std::thread::sleep(Duration::from_millis(200));
    }
    Ok(touched)
}

/// A busy loop pinned to CPU 0, killed when dropped.
struct Hog(std::process::Child);

impl Hog {
    fn start() -> Result<Hog> {
        use std::os::unix::process::CommandExt as _;
        let mut cmd = Command::new("taskset");
        cmd.args(["-c", "0", "sh", "-c", "while :; do :; done"])
            .stdin(Stdio::null());
        // SAFETY: prctl is async-signal-safe. The hog dies with xtask even when xtask is killed
        // (Drop does not run then).
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .context("starting the CPU hog (taskset, from util-linux)")?;
        Ok(Hog(child))
    }
}

impl Drop for Hog {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_second_half_of_a_stress_run_has_the_neighbours() {
        assert_eq!(stress_plan(5), [false, false, true, true, true]);
        assert_eq!(stress_plan(4), [false, false, true, true]);
        assert_eq!(stress_plan(1), [true]);
        assert!(stress_plan(0).is_empty());
    }

    /// The neighbours for real, for 20 s (minutes of disk and memory traffic: `#[ignore]`d;
    /// `cargo test -p xtask -- --ignored neighbours_run`): each moves data, and their files are
    /// gone afterwards.
    #[test]
    #[ignore]
    fn neighbours_run_and_leave_nothing_behind() {
        let n = Neighbours::start().unwrap();
        let dir = n.dir.clone();
        eprintln!("{}", n.describe());
        std::thread::sleep(Duration::from_secs(20));
        let moved = n.stop().unwrap();
        eprintln!("moved: {moved}");
        assert!(!dir.exists(), "{dir:?}");
        assert!(
            moved.contains("fsync writer") && !moved.contains("writer 0 MiB"),
            "{moved}"
        );
        assert!(!moved.contains("toucher 0 MiB"), "{moved}");
    }

    #[test]
    fn the_neighbours_cannot_fill_the_disk_or_the_memory() {
        const GIB: u64 = 1 << 30;
        // The 24 GiB CI machine, 20 GiB available, 40 GiB of free disk: the full sizes.
        let ci = Sizes::for_machine(20 * GIB, 40 * GIB);
        assert_eq!(
            ci,
            Sizes {
                write_file: 256 * MIB,
                cache_file: 2 * GIB,
                memory: 2 * GIB
            }
        );
        // A nearly full disk and little memory: a tenth of the disk, an eighth of the memory.
        let small = Sizes::for_machine(GIB, GIB);
        assert_eq!(small.write_file, 25 * MIB);
        assert!(small.write_file + small.cache_file <= GIB / 10, "{small:?}");
        assert_eq!(small.memory, 128 * MIB);
        // Too little to matter: nothing at all rather than a few bytes.
        assert_eq!(
            Sizes::for_machine(64 * MIB, 64 * MIB),
            Sizes {
                write_file: 0,
                cache_file: 0,
                memory: 0
            }
        );
        for (mem, disk) in [(0, 0), (GIB, 0), (0, GIB), (u64::MAX / 2, u64::MAX / 2)] {
            let s = Sizes::for_machine(mem, disk);
            assert!(s.write_file + s.cache_file <= disk / 10, "{s:?}");
            assert!(s.cache_file + s.memory <= mem / 3, "{s:?}");
        }
    }
}
