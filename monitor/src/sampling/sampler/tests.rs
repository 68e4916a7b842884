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

/// The system files stay open from one sweep to the next: each sweep reads what they hold then
/// (the kernel writes /proc's anew at each read from the start; a fake file is rewritten in
/// place here), a shorter text included.
#[test]
fn each_sweep_reads_the_system_files_as_they_are_then() {
    let root = fake_proc();
    let mut reader = reader(&root);
    assert_eq!(reader.read_system().unwrap(), expected_system());
    let shorter = LOADAVG.replace("3.20 0.52 3.09", "1.5 0.25 0.1");
    assert!(shorter.len() < LOADAVG.len());
    write(&root.path().join("loadavg"), &shorter);
    assert_eq!(
        reader.read_system().unwrap(),
        SystemReading {
            load: (1.5, 0.25, 0.1),
            ..expected_system()
        }
    );
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
