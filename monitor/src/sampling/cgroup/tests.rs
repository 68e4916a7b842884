use super::*;

/// This machine's cgroup mounts (hybrid: v1 controllers plus an empty cgroup2), with a
/// non-cgroup line and an escaped mount point added.
const HYBRID_MOUNTINFO: &str = "\
23 1 0:21 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
34 31 0:31 / /sys/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
36 31 0:33 / /sys/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
38 31 0:35 / /sys/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

/// A systemd host with pure cgroup v2.
const V2_MOUNTINFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
";

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap()
}

#[test]
fn mountinfo_finds_v1_and_v2_mounts() {
    let text = format!(
            "{HYBRID_MOUNTINFO}50 31 0:40 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
             51 22 0:41 / /mnt/my\\040cg rw shared:9 master:2 - cgroup2 none rw\n\
             not a mountinfo line\n"
        );
    let mounts = parse_mountinfo_cgroups(&text);
    assert_eq!(mounts.len(), 12);
    assert_eq!(
        mounts[0],
        CgroupMount {
            mount_point: "/sys/fs/cgroup/cpu".into(),
            root: "/".into(),
            version: CgroupVersion::V1,
            controllers: vec!["cpu".into()],
        }
    );
    let systemd = &mounts[8];
    assert_eq!(systemd.mount_point, Path::new("/sys/fs/cgroup/systemd"));
    assert!(
        systemd.controllers.is_empty(),
        "name=systemd is no controller"
    );
    assert_eq!(mounts[9].version, CgroupVersion::V2);
    assert_eq!(mounts[9].mount_point, Path::new("/sys/fs/cgroup/unified"));
    assert_eq!(mounts[10].controllers, ["cpu", "cpuacct"]);
    assert_eq!(mounts[11].mount_point, Path::new("/mnt/my cg"));
    assert_eq!(mounts[11].version, CgroupVersion::V2);

    let v2 = parse_mountinfo_cgroups(V2_MOUNTINFO);
    assert_eq!(v2.len(), 1);
    assert_eq!(v2[0].mount_point, Path::new("/sys/fs/cgroup"));
}

#[test]
fn cpu_stat_reads_the_three_times() {
    // Documentation/admin-guide/cgroup-v2.rst shape, with the cpu controller's extras.
    let text = "usage_usec 2979790936\nuser_usec 2706898206\nsystem_usec 272892729\n\
                    core_sched.force_idle_usec 0\nnr_periods 0\nnr_throttled 0\n\
                    throttled_usec 0\nnr_bursts 0\nburst_usec 0\n";
    assert_eq!(
        parse_cpu_stat(text).unwrap(),
        CpuStat {
            usage_usec: Some(2_979_790_936),
            user_usec: Some(2_706_898_206),
            system_usec: Some(272_892_729),
        }
    );
    assert_eq!(
        parse_cpu_stat("usage_usec 5\n").unwrap().user_usec,
        None,
        "a missing key is None"
    );
    let err = parse_cpu_stat("usage_usec lots\n").unwrap_err();
    assert!(err.contains("usage_usec"), "{err}");
}

#[test]
fn io_stat_sums_devices() {
    let text = "8:16 rbytes=1459200 wbytes=314773504 rios=192 wios=353 dbytes=0 dios=0\n\
                    8:0 rbytes=90430464 wbytes=299008000 rios=8950 wios=1252 dbytes=50331648 dios=3021\n";
    assert_eq!(
        parse_io_stat(text).unwrap(),
        IoBytes {
            read: 1_459_200 + 90_430_464,
            write: 314_773_504 + 299_008_000,
        }
    );
    assert_eq!(parse_io_stat("").unwrap(), IoBytes::default());
    assert!(parse_io_stat("8:0 rbytes=x\n").is_err());
    assert!(parse_io_stat("8:0 garbage\n").is_err());
}

#[test]
fn blkio_service_bytes_sums_read_and_write() {
    // An empty cgroup, as this machine's root shows it.
    assert_eq!(
        parse_blkio_service_bytes("Total 0\n").unwrap(),
        IoBytes::default()
    );
    let text = "8:16 Read 4096\n8:16 Write 0\n8:16 Sync 4096\n8:16 Async 0\n\
                    8:16 Discard 0\n8:16 Total 4096\n\
                    8:0 Read 4542464\n8:0 Write 1048576\n8:0 Sync 5591040\n8:0 Async 0\n\
                    8:0 Discard 0\n8:0 Total 5591040\nTotal 5595136\n";
    assert_eq!(
        parse_blkio_service_bytes(text).unwrap(),
        IoBytes {
            read: 4096 + 4_542_464,
            write: 1_048_576,
        }
    );
    assert!(parse_blkio_service_bytes("8:0 Read many\n").is_err());
    assert!(parse_blkio_service_bytes("what is this line\n").is_err());
}

/// A fake pure-v2 tree: the mount root offers the usual controllers, already has cpu and
/// memory on, and `montrace/` exists from an earlier run.
fn fake_v2() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("sys/fs/cgroup");
    write(
        &root.join("cgroup.controllers"),
        "cpuset cpu io memory hugetlb pids rdma misc\n",
    );
    write(&root.join("cgroup.subtree_control"), "cpu memory\n");
    write(&root.join("montrace/cgroup.subtree_control"), "");
    (tmp, root)
}

#[test]
fn v2_fake_tree_create_add_totals_remove() {
    let (tmp, root) = fake_v2();
    let cg = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "run-1-2").unwrap();
    assert_eq!(cg.version(), CgroupVersion::V2);
    let leaf = root.join("montrace/run-1-2");
    assert!(leaf.is_dir());
    assert_eq!(cg.path(), leaf.display().to_string());
    // Only what was missing is written to the root; everything to montrace/.
    assert_eq!(read(&root.join("cgroup.subtree_control")), "+io +pids");
    assert_eq!(
        read(&root.join("montrace/cgroup.subtree_control")),
        "+cpu +memory +io +pids"
    );

    // The files the kernel would create with the directory.
    write(&leaf.join("cgroup.procs"), "");
    write(
        &leaf.join("cpu.stat"),
        "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\nnr_periods 0\n",
    );
    write(&leaf.join("memory.peak"), "8388608\n");
    write(
        &leaf.join("io.stat"),
        "8:0 rbytes=4096 wbytes=8192 rios=1 wios=2 dbytes=0 dios=0\n",
    );
    write(&leaf.join("pids.peak"), "3\n");

    cg.add(4242).unwrap();
    assert_eq!(read(&leaf.join("cgroup.procs")), "4242");
    assert_eq!(
        cg.totals().unwrap(),
        CgroupTotals {
            cpu_usage_ns: Some(1_500_000),
            cpu_user_ns: Some(1_000_000),
            cpu_system_ns: Some(500_000),
            memory_peak_bytes: Some(8_388_608),
            io_read_bytes: Some(4096),
            io_write_bytes: Some(8192),
            pids_peak: Some(3),
        }
    );

    write(&leaf.join("cgroup.procs"), ""); // the process has exited
    cg.remove().unwrap();
    assert!(!leaf.exists());
    assert!(root.join("montrace").is_dir(), "the shared parent stays");
}

#[test]
fn resident_memory_is_anon_plus_mapped_files_each_page_once() {
    // v2: anon + file_mapped; file (page cache) and kernel memory are left out.
    let v2 = "anon 367001600\nfile 52428800\nkernel 1048576\nshmem 4096\nfile_mapped 8192\n\
              anon_thp 0\n";
    assert_eq!(
        parse_resident(CgroupVersion::V2, v2),
        Ok(367_001_600 + 8192)
    );
    // v1 uses the hierarchical totals, not the cgroup's own lines.
    let v1 = "rss 1\nmapped_file 2\ntotal_rss 4096\ntotal_mapped_file 8192\n";
    assert_eq!(parse_resident(CgroupVersion::V1, v1), Ok(4096 + 8192));
    assert!(parse_resident(CgroupVersion::V1, v2)
        .unwrap_err()
        .contains("total_rss"));
    assert!(parse_resident(CgroupVersion::V2, "anon x\nfile_mapped 1\n")
        .unwrap_err()
        .contains("anon"));

    // A fake v2 run cgroup: memory.stat of its directory.
    let (tmp, root) = fake_v2();
    let cg = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "run-3-4").unwrap();
    let reader = cg.resident_reader().expect("memory is enabled");
    let err = reader.read().unwrap_err();
    assert!(err.to_string().contains("memory.stat"), "{err}");
    write(&root.join("montrace/run-3-4/memory.stat"), v2);
    assert_eq!(reader.read().unwrap(), 367_001_600 + 8192);
}

#[test]
fn v2_old_kernel_lacks_memory_peak_and_a_bad_file_is_a_parse_error() {
    let (tmp, root) = fake_v2();
    let cg = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "run-old").unwrap();
    let leaf = root.join("montrace/run-old");
    write(
        &leaf.join("cpu.stat"),
        "usage_usec 7\nuser_usec 4\nsystem_usec 3\n",
    );
    let t = cg.totals().unwrap();
    assert_eq!(t.cpu_usage_ns, Some(7000));
    assert_eq!(t.memory_peak_bytes, None);
    assert_eq!(t.io_read_bytes, None);
    assert_eq!(t.pids_peak, None);

    write(&leaf.join("memory.peak"), "max\n");
    let err = cg.totals().unwrap_err();
    assert!(matches!(err, CgroupError::Parse { ref path, .. } if path.ends_with("memory.peak")));
    assert!(err.to_string().contains("memory.peak"), "{err}");
}

#[test]
fn v2_run_name_clash_is_an_error() {
    let (tmp, _root) = fake_v2();
    let _first = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "same").unwrap();
    let err = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "same").unwrap_err();
    assert!(
        matches!(err, CgroupError::Io { ref source, .. } if source.kind() == io::ErrorKind::AlreadyExists),
        "{err:?}"
    );
    assert!(RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "a/b").is_err());
    assert!(RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "..").is_err());
}

#[test]
fn leftovers_of_dead_montraces_are_removed_by_the_next_run() {
    let (tmp, root) = fake_v2();
    let first = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "run-1-1").unwrap();
    let parent = root.join(PARENT);
    // pid 4194305 is above the kernel's largest pid: that montrace is certainly gone.
    let dead_empty = parent.join("run-4194305-7");
    let dead_busy = parent.join("run-4194305-8");
    let ours = parent.join(format!("run-{}-9", std::process::id()));
    for dir in [&dead_empty, &dead_busy, &ours] {
        fs::create_dir(dir).unwrap();
        write(&dir.join("cgroup.procs"), "");
    }
    write(&dead_busy.join("cgroup.procs"), "4242\n");
    let second = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "run-2-2").unwrap();
    assert!(
        !dead_empty.exists(),
        "an empty leftover of a dead montrace is removed"
    );
    assert!(dead_busy.exists(), "a leftover that holds a process stays");
    assert!(ours.exists(), "a live montrace's cgroup stays");
    // pid 1 is alive: its cgroup is not a leftover.
    assert!(parent.join("run-1-1").exists());
    drop((first, second));
}

#[test]
fn remove_refuses_a_cgroup_with_survivors() {
    let (tmp, root) = fake_v2();
    let cg = RunCgroup::create_in(tmp.path(), V2_MOUNTINFO, "linger").unwrap();
    let leaf = root.join("montrace/linger");
    write(&leaf.join("cgroup.procs"), "100\n101\n");
    let err = cg.remove().unwrap_err();
    assert!(
        matches!(err, CgroupError::Busy { ref path, processes: 2 } if *path == leaf),
        "{err:?}"
    );
    assert!(err.to_string().contains("2 process"), "{err}");
    assert!(leaf.join("cgroup.procs").exists(), "left in place");
}

/// A fake tree shaped like this machine: v1 hierarchies plus a cgroup2 offering only hugetlb.
fn fake_hybrid() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("sys/fs/cgroup");
    for c in [
        "cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "systemd",
    ] {
        fs::create_dir_all(base.join(c)).unwrap();
    }
    write(&base.join("unified/cgroup.controllers"), "hugetlb\n");
    tmp
}

#[test]
fn v1_fake_tree_create_add_totals_remove() {
    let tmp = fake_hybrid();
    let base = tmp.path().join("sys/fs/cgroup");
    let cg = RunCgroup::create_in(tmp.path(), HYBRID_MOUNTINFO, "run-9").unwrap();
    assert_eq!(cg.version(), CgroupVersion::V1);
    assert_eq!(
        cg.path(),
        format!(
            "{}/{{memory,cpuacct,blkio,pids}}/montrace/run-9",
            base.display()
        )
    );
    let leaves: Vec<PathBuf> = ["memory", "cpuacct", "blkio", "pids"]
        .iter()
        .map(|c| base.join(c).join("montrace/run-9"))
        .collect();
    for leaf in &leaves {
        assert!(leaf.is_dir(), "{}", leaf.display());
        write(&leaf.join("cgroup.procs"), "");
    }
    assert!(!base.join("cpu/montrace").exists());
    assert!(!base.join("unified/montrace").exists());

    cg.add(77).unwrap();
    for leaf in &leaves {
        assert_eq!(read(&leaf.join("cgroup.procs")), "77");
    }

    write(&leaves[0].join("memory.max_usage_in_bytes"), "2101248\n");
    write(&leaves[1].join("cpuacct.usage"), "123456789\n");
    write(&leaves[1].join("cpuacct.usage_user"), "100000000\n");
    write(&leaves[1].join("cpuacct.usage_sys"), "20000000\n");
    write(
        &leaves[2].join("blkio.throttle.io_service_bytes_recursive"),
        "8:0 Read 4096\n8:0 Write 512\n8:0 Sync 4608\n8:0 Async 0\n8:0 Discard 0\n\
             8:0 Total 4608\nTotal 4608\n",
    );
    write(&leaves[3].join("pids.peak"), "2\n");
    assert_eq!(
        cg.totals().unwrap(),
        CgroupTotals {
            cpu_usage_ns: Some(123_456_789),
            cpu_user_ns: Some(100_000_000),
            cpu_system_ns: Some(20_000_000),
            memory_peak_bytes: Some(2_101_248),
            io_read_bytes: Some(4096),
            io_write_bytes: Some(512),
            pids_peak: Some(2),
        }
    );

    // The resident memory comes from the memory hierarchy's memory.stat, hierarchical totals.
    write(
        &leaves[0].join("memory.stat"),
        "cache 999\nrss 5\nmapped_file 6\ntotal_cache 4096\ntotal_rss 367001600\n\
         total_mapped_file 8192\n",
    );
    assert_eq!(
        cg.resident_reader().unwrap().read().unwrap(),
        367_001_600 + 8192
    );

    for leaf in &leaves {
        write(&leaf.join("cgroup.procs"), "");
    }
    cg.remove().unwrap();
    for leaf in &leaves {
        assert!(!leaf.exists(), "{}", leaf.display());
    }
}

#[test]
fn v1_co_mounted_cpu_cpuacct_without_blkio_or_pids() {
    let tmp = tempfile::tempdir().unwrap();
    let base = tmp.path().join("sys/fs/cgroup");
    fs::create_dir_all(base.join("cpu,cpuacct")).unwrap();
    fs::create_dir_all(base.join("memory")).unwrap();
    let mountinfo = "\
25 24 0:22 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid - cgroup cgroup rw,cpu,cpuacct
26 24 0:23 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory
";
    let cg = RunCgroup::create_in(tmp.path(), mountinfo, "r").unwrap();
    assert_eq!(cg.version(), CgroupVersion::V1);
    assert_eq!(cg.hierarchies.len(), 2);
    let cpu = base.join("cpu,cpuacct/montrace/r");
    write(&cpu.join("cpuacct.usage"), "5\n");
    let t = cg.totals().unwrap();
    assert_eq!(t.cpu_usage_ns, Some(5));
    assert_eq!(t.cpu_user_ns, None);
    assert_eq!(t.io_read_bytes, None);
    assert_eq!(t.pids_peak, None);
    cg.remove().unwrap();
    assert!(!cpu.exists());
    assert!(!base.join("memory/montrace/r").exists());
}

#[test]
fn v1_blkio_falls_back_to_the_cfq_file() {
    let tmp = fake_hybrid();
    let cg = RunCgroup::create_in(tmp.path(), HYBRID_MOUNTINFO, "cfq").unwrap();
    let blkio = tmp.path().join("sys/fs/cgroup/blkio/montrace/cfq");
    write(
        &blkio.join("blkio.io_service_bytes_recursive"),
        "8:0 Read 10\n8:0 Write 20\nTotal 30\n",
    );
    let t = cg.totals().unwrap();
    assert_eq!((t.io_read_bytes, t.io_write_bytes), (Some(10), Some(20)));
    cg.remove().unwrap();
}

#[test]
fn no_controllers_says_what_was_found() {
    let tmp = tempfile::tempdir().unwrap();
    write(
        &tmp.path().join("sys/fs/cgroup/unified/cgroup.controllers"),
        "hugetlb\n",
    );
    let mountinfo = "\
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";
    let err = RunCgroup::create_in(tmp.path(), mountinfo, "x").unwrap_err();
    let CgroupError::NoControllers(found) = &err else {
        panic!("{err:?}");
    };
    assert!(
        found.contains("/sys/fs/cgroup/unified offers [hugetlb]"),
        "{found}"
    );
    assert!(
        found.contains("has [cpu cpuacct] but not [memory]"),
        "{found}"
    );
    assert!(
        err.to_string().contains("cpu and memory controllers"),
        "{err}"
    );

    let err = RunCgroup::create_in(tmp.path(), "", "x").unwrap_err();
    assert!(
        err.to_string()
            .contains("no cgroup2 mount; no cgroup v1 hierarchies"),
        "{err}"
    );
}

#[test]
fn v1_failure_midway_undoes_what_was_made() {
    let tmp = fake_hybrid();
    // pids has no mount point directory: mkdir fails there, after memory/cpuacct/blkio.
    fs::remove_dir(tmp.path().join("sys/fs/cgroup/pids")).unwrap();
    let err = RunCgroup::create_in(tmp.path(), HYBRID_MOUNTINFO, "half").unwrap_err();
    assert!(matches!(err, CgroupError::Io { ref path, .. } if path.ends_with("pids/montrace")));
    for c in ["memory", "cpuacct", "blkio"] {
        let leaf = tmp
            .path()
            .join("sys/fs/cgroup")
            .join(c)
            .join("montrace/half");
        assert!(!leaf.exists(), "{}", leaf.display());
    }
}

/// Live, on this host (root): a busy shell, forked and held before its exec, is added to a
/// real run cgroup, released, reaped; the kernel's totals must cover its CPU and memory.
#[test]
#[ignore = "needs root: `cargo xtask test` runs it as root (its root unit tier)"]
fn live_cgroup_counts_a_busy_child() {
    // SAFETY: geteuid has no preconditions.
    assert_eq!(
        unsafe { libc::geteuid() },
        0,
        "this test creates a real cgroup: run it as root"
    );
    let cg = RunCgroup::create(&format!("montrace-test-{}", std::process::id()))
        .expect("creating a run cgroup on this host");
    eprintln!("version {:?}, path {}", cg.version(), cg.path());
    let dirs: Vec<PathBuf> = cg.hierarchies.iter().map(|h| h.dir.clone()).collect();

    let sh = CString::new("/bin/sh").unwrap();
    let dash_c = CString::new("-c").unwrap();
    let script = CString::new("i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done").unwrap();
    let argv = [
        sh.as_ptr(),
        dash_c.as_ptr(),
        script.as_ptr(),
        std::ptr::null(),
    ];
    let mut fds = [0; 2];
    // SAFETY: fds is a valid two-int array.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) }, 0);
    // SAFETY: the child only calls async-signal-safe functions (close, read, execv, _exit)
    // on data prepared before the fork.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: see the fork above; `byte` outlives the read, argv is NULL-terminated.
        unsafe {
            libc::close(fds[1]);
            let mut byte = 0u8;
            libc::read(fds[0], (&raw mut byte).cast(), 1);
            libc::execv(sh.as_ptr(), argv.as_ptr());
            libc::_exit(127);
        }
    }
    // SAFETY: closing our copies of the pipe's ends, which we own.
    unsafe { libc::close(fds[0]) };
    let added = cg.add(pid as u32);
    // SAFETY: one byte from a live buffer to our write end, then closing it (we own it).
    unsafe {
        libc::write(fds[1], b"g".as_ptr().cast(), 1);
        libc::close(fds[1]);
    }
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid out-parameter.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: pid is our child; status and ru are valid out-parameters.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut ru) }, pid);
    added.expect("adding the child");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0);

    let tv_ns = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
    let child_ns = tv_ns(ru.ru_utime) + tv_ns(ru.ru_stime);
    let t = cg.totals().expect("reading the totals");
    eprintln!("child rusage {child_ns} ns; cgroup totals {t:?}");
    let usage = t.cpu_usage_ns.expect("cpu usage");
    assert!(child_ns > 0);
    assert!(
        usage > child_ns / 2,
        "cgroup cpu {usage} ns vs child rusage {child_ns} ns"
    );
    assert!(t.memory_peak_bytes.expect("memory peak") > 0);

    cg.remove().expect("removing the run cgroup");
    for dir in dirs {
        assert!(!dir.exists(), "{} is still there", dir.display());
    }
}

/// A pure-v2 host where the user session's subtree is delegated: montrace runs in
/// `.../app.slice/term.scope`, and `app.slice` hands `cpu memory pids` to its children.
fn fake_delegated() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let slice = tmp
        .path()
        .join("sys/fs/cgroup/user.slice/user@1000.service/app.slice");
    write(&slice.join("cgroup.subtree_control"), "cpu memory pids\n");
    write(&slice.join("term.scope/cgroup.subtree_control"), "");
    // The file the kernel makes with montrace/ (an earlier run made the directory).
    write(&slice.join("montrace/cgroup.subtree_control"), "");
    (tmp, slice)
}

const DELEGATED_SELF: &str = "0::/user.slice/user@1000.service/app.slice/term.scope\n";

#[test]
fn delegated_v2_creates_the_run_beside_montraces_own_cgroup() {
    let (tmp, slice) = fake_delegated();
    let cg = RunCgroup::create_delegated_in(tmp.path(), V2_MOUNTINFO, DELEGATED_SELF, "run-5-6")
        .unwrap();
    assert_eq!(cg.version(), CgroupVersion::V2);
    let leaf = slice.join("montrace/run-5-6");
    assert!(leaf.is_dir());
    assert_eq!(cg.path(), leaf.display().to_string());
    // Only what app.slice already gives its children, and nothing written outside montrace/.
    assert_eq!(
        read(&slice.join("cgroup.subtree_control")),
        "cpu memory pids\n"
    );
    assert_eq!(
        read(&slice.join("montrace/cgroup.subtree_control")),
        "+cpu +memory +pids"
    );
    write(&leaf.join("cgroup.procs"), "");
    write(
        &leaf.join("cpu.stat"),
        "usage_usec 9\nuser_usec 5\nsystem_usec 4\n",
    );
    cg.add(77).unwrap();
    assert_eq!(read(&leaf.join("cgroup.procs")), "77");
    assert_eq!(cg.totals().unwrap().cpu_usage_ns, Some(9000));
    write(&leaf.join("cgroup.procs"), "");
    cg.remove().unwrap();
    assert!(!leaf.exists());
}

#[test]
fn delegated_v2_in_a_bind_mounted_subtree_maps_the_path() {
    let (tmp, slice) = fake_delegated();
    // A container that sees only user@1000.service, mounted at /sys/fs/cgroup.
    let mountinfo =
        "30 22 0:26 /user.slice/user@1000.service /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    let moved = tmp.path().join("sys/fs/cgroup/app.slice");
    fs::create_dir_all(moved.parent().unwrap()).unwrap();
    fs::rename(&slice, &moved).unwrap();
    let cg =
        RunCgroup::create_delegated_in(tmp.path(), mountinfo, DELEGATED_SELF, "run-1-1").unwrap();
    assert!(moved.join("montrace/run-1-1").is_dir(), "{}", cg.path());
}

#[test]
fn delegated_v2_without_a_v2_line_or_mount_says_why() {
    let (tmp, _slice) = fake_delegated();
    let err =
        RunCgroup::create_delegated_in(tmp.path(), HYBRID_MOUNTINFO, "1:cpu:/\n", "r").unwrap_err();
    assert!(matches!(err, CgroupError::NoDelegation(_)), "{err:?}");
    assert!(err.to_string().contains("0::"), "{err}");
    assert!(
        err.to_string().contains("systemd-run --user --scope"),
        "{err}"
    );
    let v1_only: String = HYBRID_MOUNTINFO
        .lines()
        .filter(|l| !l.contains("cgroup2"))
        .map(|l| format!("{l}\n"))
        .collect();
    let err =
        RunCgroup::create_delegated_in(tmp.path(), &v1_only, DELEGATED_SELF, "r").unwrap_err();
    assert!(err.to_string().contains("no cgroup2 mount"), "{err}");
    let err = RunCgroup::create_delegated_in(
        tmp.path(),
        "30 22 0:26 /other /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        DELEGATED_SELF,
        "r",
    )
    .unwrap_err();
    assert!(
        err.to_string().contains("outside the cgroup2 mount"),
        "{err}"
    );
}
