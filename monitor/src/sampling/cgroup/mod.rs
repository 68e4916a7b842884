//! The run's own cgroup: the command is placed in `montrace/<name>` before its exec, so the
//! kernel's totals for the whole tree (CPU, peak memory, block I/O, peak pids) can be set beside
//! montrace's per-process sums ("coverage"). At the end the totals are read and the cgroup removed.
//!
//! Both layouts are supported, chosen from `/proc/self/mountinfo`:
//! - **v2**: a `cgroup2` mount whose `cgroup.controllers` offers `cpu` and `memory`. montrace
//!   enables `+cpu +memory +io +pids` (those offered) in the `cgroup.subtree_control` of the mount
//!   root and of `montrace/`, then creates `montrace/<name>`.
//! - **v1**: separate hierarchies; `memory` and `cpuacct` are required, `blkio` and `pids` are
//!   used when mounted. `montrace/<name>` is created in each (once per hierarchy where several
//!   controllers share one mount, e.g. `cpu,cpuacct`).
//!
//! A hybrid host (v1 controllers plus a `cgroup2` mount at `/sys/fs/cgroup/unified` that offers
//! no memory controller) therefore uses v1.
//!
//! Without root, only a **delegated v2 subtree** can hold the run: a directory of the cgroup2
//! hierarchy this user may write, as a systemd user session gives (`user@UID.service/...`).
//! montrace creates `montrace/<name>` in the parent of its own cgroup, or else in its own cgroup,
//! and enables only what that directory already hands its children. Nothing here panics: every failure is a
//! [`CgroupError`] saying what was found and what to do, so the caller can record it and go on.
//!
//! The shared `montrace/` parent is left in place on removal: other runs may be using it, and
//! removing it would race their `mkdir montrace/<name>`.
pub use crate::store::model::{CgroupTotals, CgroupVersion};
use std::{
    collections::BTreeSet,
    ffi::CString,
    fs,
    io::{self, Write as _},
    os::unix::ffi::OsStrExt,
    path::{Path, PathBuf},
    time::Duration,
};

/// The directory under each cgroup root that holds the runs' cgroups.
const PARENT: &str = "montrace";
/// v2 controllers montrace enables where offered. Only `memory` must succeed: `cpu.stat`'s
/// `usage_usec`/`user_usec`/`system_usec` are kept by the cgroup core even without `cpu`.
const V2_WANTED: [&str; 4] = ["cpu", "memory", "io", "pids"];
const V2_MUST_ENABLE: [&str; 1] = ["memory"];
/// v1 controllers montrace uses: the first two are required.
const V1_WANTED: [&str; 4] = ["memory", "cpuacct", "blkio", "pids"];
const V1_REQUIRED: [&str; 2] = ["memory", "cpuacct"];
/// v1 controller names, to tell them from other super options (`rw`, `name=systemd`, ...).
const V1_CONTROLLERS: [&str; 14] = [
    "cpu",
    "cpuacct",
    "cpuset",
    "memory",
    "devices",
    "freezer",
    "net_cls",
    "net_prio",
    "blkio",
    "perf_event",
    "hugetlb",
    "pids",
    "rdma",
    "misc",
];
/// `statfs` magic numbers of cgroup filesystems (linux/magic.h).
const CGROUP2_SUPER_MAGIC: u64 = 0x6367_7270;
const CGROUP_SUPER_MAGIC: u64 = 0x0027_e0eb;
/// An emptied cgroup can answer `rmdir` with EBUSY for a moment after its last process was
/// reaped; retry this many times, 10 ms apart, before reporting it busy.
const BUSY_RETRIES: u32 = 20;

#[derive(Debug, thiserror::Error)]
pub enum CgroupError {
    /// What was found, e.g. which controllers the cgroup2 mount offers.
    #[error(
        "no usable cgroup: {0}; kernel totals need cgroup v2 with the cpu and memory controllers \
         or cgroup v1 memory and cpuacct hierarchies (mount them, or run on a host that has them)"
    )]
    NoControllers(String),
    /// Without root: why no delegated cgroup v2 subtree could be used.
    #[error(
        "no delegated cgroup v2 subtree: {0}; without root, kernel totals need a cgroup v2 \
         directory this user may write: start montrace in a user scope (`systemd-run --user \
         --scope montrace run ...`), or run it under sudo"
    )]
    NoDelegation(String),
    #[error(
        "cgroup file {}: {source} (a run cgroup needs root or a delegated cgroup v2 subtree, \
         and a writable cgroup filesystem)",
        path.display()
    )]
    Io { path: PathBuf, source: io::Error },
    #[error(
        "cgroup {} still holds {processes} process(es) or child cgroups (a survivor, e.g. after \
         --linger); left in place: `rmdir {}` once they have exited",
        path.display(),
        path.display()
    )]
    Busy { path: PathBuf, processes: usize },
    #[error("cannot parse {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
}

/// One cgroup mount from mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CgroupMount {
    /// Where it is mounted (octal escapes such as `\040` decoded).
    pub mount_point: PathBuf,
    /// The cgroup shown at the mount point, relative to the hierarchy's (or the cgroup
    /// namespace's) root: `/` unless a subtree is bind-mounted.
    pub root: PathBuf,
    pub version: CgroupVersion,
    /// v1: the controllers of the hierarchy (from the super options). v2: empty; the offered
    /// controllers are in the mount's `cgroup.controllers`.
    pub controllers: Vec<String>,
}

/// The `cpu.stat` (v2) fields montrace uses, in microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuStat {
    pub usage_usec: Option<u64>,
    pub user_usec: Option<u64>,
    pub system_usec: Option<u64>,
}

/// Bytes read and written, summed over devices.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IoBytes {
    pub read: u64,
    pub write: u64,
}

/// One directory of the run's cgroup: v2 has one, v1 one per hierarchy used.
#[derive(Debug)]
struct Hierarchy {
    /// The montrace controllers served by this directory (v1), or all enabled ones (v2).
    controllers: Vec<&'static str>,
    mount: PathBuf,
    dir: PathBuf,
}

/// The run's cgroup, created by [`RunCgroup::create`] and removed by [`RunCgroup::remove`].
#[derive(Debug)]
pub struct RunCgroup {
    version: CgroupVersion,
    name: String,
    hierarchies: Vec<Hierarchy>,
}

impl RunCgroup {
    /// Creates `montrace/<name>` (name: unique per run, e.g. `run-<pid>-<ns>`) on this host.
    /// As root, under the cgroup mount's root; otherwise in a delegated cgroup v2 subtree (see
    /// [`RunCgroup::create_delegated_in`]).
    pub fn create(name: &str) -> Result<RunCgroup, CgroupError> {
        let path = Path::new("/proc/self/mountinfo");
        let mountinfo = crate::host::read_small_file(path).map_err(|e| io_err(path, e))?;
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return Self::create_in(Path::new("/"), &mountinfo, name);
        }
        let path = Path::new("/proc/self/cgroup");
        let own = crate::host::read_small_file(path).map_err(|e| io_err(path, e))?;
        Self::create_delegated_in(Path::new("/"), &mountinfo, &own, name)
    }

    /// As [`RunCgroup::create`], with mount points taken from `mountinfo` and resolved under
    /// `fs_root` instead of `/` (tests build a fake tree in a tempdir).
    pub fn create_in(
        fs_root: &Path,
        mountinfo: &str,
        name: &str,
    ) -> Result<RunCgroup, CgroupError> {
        check_name(name)?;
        let mounts = parse_mountinfo_cgroups(mountinfo);
        match choose(fs_root, &mounts)? {
            Layout::V2 { root, offered } => {
                let wanted = wanted_v2(&offered);
                enable_controllers(&root, &wanted, &V2_MUST_ENABLE)?;
                create_v2(root, wanted, &V2_MUST_ENABLE, name)
            }
            Layout::V1(hierarchies) => create_v1(hierarchies, name),
        }
    }

    /// The run cgroup of a montrace without root: `montrace/<name>` in a cgroup v2 directory
    /// this user may write, which a systemd user session delegates (everything under
    /// `user@UID.service`). Tried in order: the parent of montrace's own cgroup (`self_cgroup`
    /// is `/proc/self/cgroup`), which normally holds no process and so can hand controllers to
    /// its children, then montrace's own cgroup (then only `cpu.stat`, which the cgroup core
    /// keeps without any controller). Nothing outside the new `montrace/` is changed: its
    /// controllers are those the chosen directory already gives its children, and none is
    /// required.
    pub fn create_delegated_in(
        fs_root: &Path,
        mountinfo: &str,
        self_cgroup: &str,
        name: &str,
    ) -> Result<RunCgroup, CgroupError> {
        check_name(name)?;
        let mounts = parse_mountinfo_cgroups(mountinfo);
        let Some(mount) = mounts.iter().find(|m| m.version == CgroupVersion::V2) else {
            return Err(CgroupError::NoDelegation("no cgroup2 mount".into()));
        };
        let Some(own) = self_cgroup.lines().find_map(|l| l.strip_prefix("0::")) else {
            return Err(CgroupError::NoDelegation(
                "/proc/self/cgroup has no cgroup v2 line (0::)".into(),
            ));
        };
        let Ok(relative) = Path::new(own.trim()).strip_prefix(&mount.root) else {
            return Err(CgroupError::NoDelegation(format!(
                "montrace's cgroup {own} lies outside the cgroup2 mount at {} (root {})",
                mount.mount_point.display(),
                mount.root.display()
            )));
        };
        let mount_dir = under(fs_root, &mount.mount_point);
        let own_dir = mount_dir.join(relative);
        let mut candidates = vec![];
        if own_dir != mount_dir {
            candidates.extend(own_dir.parent().map(Path::to_path_buf));
        }
        candidates.push(own_dir);
        let mut refused = Vec::new();
        for dir in candidates {
            let children_get = crate::host::read_small_file(dir.join("cgroup.subtree_control"))
                .map_err(|e| io_err(&dir, e))?;
            let offered: Vec<String> = children_get.split_whitespace().map(String::from).collect();
            match create_v2(dir.clone(), wanted_v2(&offered), &[], name) {
                // montrace/ itself, or a run inside a montrace/ that root made there before (a
                // root run or `montrace doctor` in the same cgroup: in a VM without systemd,
                // every process is in the root cgroup): no place of this user's either.
                Err(CgroupError::Io { path, source })
                    if path.starts_with(dir.join(PARENT))
                        && matches!(
                            source.raw_os_error(),
                            Some(libc::EACCES | libc::EPERM | libc::EROFS)
                        ) =>
                {
                    refused.push(format!("{} ({source})", dir.display()));
                }
                result => return result,
            }
        }
        Err(CgroupError::NoDelegation(format!(
            "montrace's cgroup is {}, and this user may not create cgroups in {}",
            own.trim(),
            refused.join(" nor in ")
        )))
    }

    pub fn version(&self) -> CgroupVersion {
        self.version
    }

    /// Its directories, one per hierarchy (v2: one).
    pub fn dirs(&self) -> Vec<PathBuf> {
        self.hierarchies.iter().map(|h| h.dir.clone()).collect()
    }

    /// The directory whose `*.pressure` files are the run's own stall totals: a v2 run cgroup's
    /// (cgroup v1 keeps none per cgroup).
    pub fn pressure_dir(&self) -> Option<PathBuf> {
        (self.version == CgroupVersion::V2).then(|| self.hierarchies[0].dir.clone())
    }

    /// Human-readable location, for run.json: the directory (v2), or the v1 directories, as
    /// `/sys/fs/cgroup/{memory,cpuacct,blkio,pids}/montrace/<name>` when they share a parent.
    pub fn path(&self) -> String {
        let mounts: Vec<&Path> = self.hierarchies.iter().map(|h| h.mount.as_path()).collect();
        let parent = mounts[0].parent();
        let names: Option<Vec<String>> = mounts
            .iter()
            .map(|m| {
                (m.parent() == parent)
                    .then(|| m.file_name().map(|n| n.to_string_lossy().into_owned()))
                    .flatten()
            })
            .collect();
        match (parent, names) {
            (Some(parent), Some(names)) if names.len() > 1 => format!(
                "{}/{{{}}}/{PARENT}/{}",
                parent.display(),
                names.join(","),
                self.name
            ),
            _ => self
                .hierarchies
                .iter()
                .map(|h| h.dir.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        }
    }

    /// The run cgroup's directory, opened for a child to be made in it (`clone3` with
    /// `CLONE_INTO_CGROUP`, see `launch::spawn_held`) rather than moved there by [`RunCgroup::add`].
    /// v2 only: a v1 run cgroup is a directory in each of several hierarchies, and clone3 takes
    /// one cgroup v2 directory. None where it cannot be opened (the child is then moved).
    pub fn open_for_clone(&self) -> Option<std::os::fd::OwnedFd> {
        use std::os::unix::fs::OpenOptionsExt as _;
        if self.version != CgroupVersion::V2 {
            return None;
        }
        let dir = &self.hierarchies.first()?.dir;
        fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(dir)
            .ok()
            .map(std::os::fd::OwnedFd::from)
    }

    /// Moves process `pid` (all its threads) into the run's cgroup, in every hierarchy.
    pub fn add(&self, pid: u32) -> Result<(), CgroupError> {
        for h in &self.hierarchies {
            write_file(&h.dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Reads the kernel's totals. A file the kernel does not provide gives None; a file that
    /// cannot be read or parsed is an error.
    pub fn totals(&self) -> Result<CgroupTotals, CgroupError> {
        let mut t = CgroupTotals::default();
        match self.version {
            CgroupVersion::V2 => {
                let dir = &self.hierarchies[0].dir;
                let path = dir.join("cpu.stat");
                if let Some(text) = read_optional(&path)? {
                    let cpu = parse_cpu_stat(&text).map_err(|m| parse_err(&path, m))?;
                    let ns = |us: Option<u64>| us.map(|v| v.saturating_mul(1000));
                    t.cpu_usage_ns = ns(cpu.usage_usec);
                    t.cpu_user_ns = ns(cpu.user_usec);
                    t.cpu_system_ns = ns(cpu.system_usec);
                }
                t.memory_peak_bytes = read_u64(&dir.join("memory.peak"))?;
                let path = dir.join("io.stat");
                if let Some(text) = read_optional(&path)? {
                    let io = parse_io_stat(&text).map_err(|m| parse_err(&path, m))?;
                    t.io_read_bytes = Some(io.read);
                    t.io_write_bytes = Some(io.write);
                }
                t.pids_peak = read_u64(&dir.join("pids.peak"))?;
            }
            CgroupVersion::V1 => {
                if let Some(dir) = self.dir_of("cpuacct") {
                    t.cpu_usage_ns = read_u64(&dir.join("cpuacct.usage"))?;
                    t.cpu_user_ns = read_u64(&dir.join("cpuacct.usage_user"))?;
                    t.cpu_system_ns = read_u64(&dir.join("cpuacct.usage_sys"))?;
                }
                if let Some(dir) = self.dir_of("memory") {
                    t.memory_peak_bytes = read_u64(&dir.join("memory.max_usage_in_bytes"))?;
                }
                if let Some(dir) = self.dir_of("blkio") {
                    // The throttle file counts every bio of the cgroup; the plain one only
                    // exists with CFQ (before Linux 5.0). v1 charges buffered writes to the
                    // writeback thread, so writes here are mostly direct and sync ones.
                    for file in [
                        "blkio.throttle.io_service_bytes_recursive",
                        "blkio.io_service_bytes_recursive",
                    ] {
                        let path = dir.join(file);
                        if let Some(text) = read_optional(&path)? {
                            let io = parse_blkio_service_bytes(&text)
                                .map_err(|m| parse_err(&path, m))?;
                            t.io_read_bytes = Some(io.read);
                            t.io_write_bytes = Some(io.write);
                            break;
                        }
                    }
                }
                if let Some(dir) = self.dir_of("pids") {
                    t.pids_peak = read_u64(&dir.join("pids.peak"))?;
                }
            }
        }
        Ok(t)
    }

    /// Removes the run's directories (rmdir, leaf first). If any still holds processes (a
    /// survivor after --linger), nothing is removed and [`CgroupError::Busy`] says how many.
    pub fn remove(self) -> Result<(), CgroupError> {
        // Check every hierarchy before removing any, so a v1 run is never left half-removed.
        for h in &self.hierarchies {
            let processes = count_procs(&h.dir)?;
            if processes > 0 {
                return Err(CgroupError::Busy {
                    path: h.dir.clone(),
                    processes,
                });
            }
        }
        for h in self.hierarchies.iter().rev() {
            remove_cgroup_dir(&h.dir)?;
        }
        Ok(())
    }

    /// Where the run's resident memory is read at each sweep (the tree's memory figure and the
    /// `rss` limit): the memory hierarchy's `memory.stat`.
    pub fn resident_reader(&self) -> Option<ResidentReader> {
        let dir = match self.version {
            CgroupVersion::V2 => Some(self.hierarchies[0].dir.as_path())
                .filter(|_| self.hierarchies[0].controllers.contains(&"memory")),
            CgroupVersion::V1 => self.dir_of("memory"),
        }?;
        Some(ResidentReader {
            path: dir.join("memory.stat"),
            version: self.version,
        })
    }

    fn dir_of(&self, controller: &str) -> Option<&Path> {
        self.hierarchies
            .iter()
            .find(|h| h.controllers.contains(&controller))
            .map(|h| h.dir.as_path())
    }
}

impl Drop for RunCgroup {
    /// On every path out of a run (an error after the cgroup was made included), its
    /// directories go: best effort, leaf first; one that still holds processes stays (and the
    /// next run removes it once they are gone, see `remove_stale`).
    fn drop(&mut self) {
        for h in self.hierarchies.iter().rev() {
            if matches!(count_procs(&h.dir), Ok(0)) {
                let _ = remove_cgroup_dir(&h.dir);
            }
        }
    }
}

/// Reads a run cgroup's resident memory: the pages its processes map, each once however many
/// processes map it (a vfork child and its parent, a forked child's shared pages), as the
/// kernel charges them to the cgroup.
#[derive(Debug, Clone)]
pub struct ResidentReader {
    path: PathBuf,
    version: CgroupVersion,
}

impl ResidentReader {
    pub fn read(&self) -> Result<u64, CgroupError> {
        let text = crate::host::read_small_file(&self.path).map_err(|e| io_err(&self.path, e))?;
        parse_resident(self.version, &text).map_err(|m| parse_err(&self.path, m))
    }
}

/// The resident memory in a `memory.stat`: anonymous pages plus mapped file pages (shmem
/// included), i.e. what RSS counts, each page once. v2: `anon` + `file_mapped`; v1: the
/// hierarchical `total_rss` (anonymous and swap cache) + `total_mapped_file`. Page cache that no
/// process maps, and kernel memory, are left out (`memory.peak` / `memory.max_usage_in_bytes`
/// include them). Pages first charged to another cgroup (a shared library someone else loaded)
/// are not in it.
pub fn parse_resident(version: CgroupVersion, text: &str) -> Result<u64, String> {
    let keys: [&str; 2] = match version {
        CgroupVersion::V2 => ["anon", "file_mapped"],
        CgroupVersion::V1 => ["total_rss", "total_mapped_file"],
    };
    let mut found = [None; 2];
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        if let Some(i) = keys.iter().position(|k| *k == key) {
            found[i] = Some(number(key, value)?);
        }
    }
    match found {
        [Some(a), Some(b)] => Ok(a.saturating_add(b)),
        _ => Err(format!("memory.stat lacks {} or {}", keys[0], keys[1])),
    }
}

/// Which layout to use, and where.
enum Layout {
    V2 {
        root: PathBuf,
        offered: Vec<String>,
    },
    /// (mount point under fs_root, montrace controllers it serves), one per hierarchy.
    V1(Vec<(PathBuf, Vec<&'static str>)>),
}

fn choose(fs_root: &Path, mounts: &[CgroupMount]) -> Result<Layout, CgroupError> {
    let mut found = Vec::new();
    for m in mounts.iter().filter(|m| m.version == CgroupVersion::V2) {
        let root = under(fs_root, &m.mount_point);
        match crate::host::read_small_file(root.join("cgroup.controllers")) {
            Ok(text) => {
                let offered: Vec<String> = text.split_whitespace().map(String::from).collect();
                if ["cpu", "memory"]
                    .iter()
                    .all(|c| offered.iter().any(|o| o == c))
                {
                    return Ok(Layout::V2 { root, offered });
                }
                found.push(format!(
                    "cgroup2 at {} offers [{}] (needs cpu and memory)",
                    m.mount_point.display(),
                    offered.join(" ")
                ));
            }
            Err(e) => found.push(format!(
                "cgroup2 at {} is unreadable ({e})",
                m.mount_point.display()
            )),
        }
    }
    if found.is_empty() {
        found.push("no cgroup2 mount".into());
    }

    let mut hierarchies: Vec<(PathBuf, Vec<&'static str>)> = Vec::new();
    let mut missing = Vec::new();
    for controller in V1_WANTED {
        let mount = mounts.iter().find(|m| {
            m.version == CgroupVersion::V1 && m.controllers.iter().any(|c| c == controller)
        });
        match mount {
            Some(m) => {
                let dir = under(fs_root, &m.mount_point);
                match hierarchies.iter_mut().find(|(d, _)| *d == dir) {
                    Some((_, served)) => served.push(controller),
                    None => hierarchies.push((dir, vec![controller])),
                }
            }
            None if V1_REQUIRED.contains(&controller) => missing.push(controller),
            None => {}
        }
    }
    if missing.is_empty() {
        return Ok(Layout::V1(hierarchies));
    }
    let v1: BTreeSet<&str> = mounts
        .iter()
        .filter(|m| m.version == CgroupVersion::V1)
        .flat_map(|m| m.controllers.iter().map(String::as_str))
        .collect();
    found.push(if v1.is_empty() {
        "no cgroup v1 hierarchies".into()
    } else {
        format!(
            "cgroup v1 has [{}] but not [{}]",
            v1.into_iter().collect::<Vec<_>>().join(" "),
            missing.join(" ")
        )
    });
    Err(CgroupError::NoControllers(found.join("; ")))
}

/// The montrace controllers among `offered`, in montrace's order.
fn wanted_v2(offered: &[String]) -> Vec<&'static str> {
    V2_WANTED
        .into_iter()
        .filter(|c| offered.iter().any(|o| o == c))
        .collect()
}

/// Creates `root/montrace/` (shared, kept) and `root/montrace/<name>`, with `wanted` enabled
/// for the run (those in `must` or nothing fails the creation).
fn create_v2(
    root: PathBuf,
    wanted: Vec<&'static str>,
    must: &[&str],
    name: &str,
) -> Result<RunCgroup, CgroupError> {
    let parent = root.join(PARENT);
    make_dir(&parent, true)?;
    remove_stale(&parent);
    enable_controllers(&parent, &wanted, must)?;
    let dir = parent.join(name);
    make_dir(&dir, false)?;
    Ok(RunCgroup {
        version: CgroupVersion::V2,
        name: name.to_string(),
        hierarchies: vec![Hierarchy {
            controllers: wanted,
            mount: root,
            dir,
        }],
    })
}

fn check_name(name: &str) -> Result<(), CgroupError> {
    if name.is_empty() || name.contains('/') || name == "." || name == ".." {
        return Err(CgroupError::Parse {
            path: PathBuf::from(name),
            message: "a run cgroup name must be one non-empty path component".into(),
        });
    }
    Ok(())
}

fn create_v1(
    hierarchies: Vec<(PathBuf, Vec<&'static str>)>,
    name: &str,
) -> Result<RunCgroup, CgroupError> {
    let mut made: Vec<Hierarchy> = Vec::new();
    for (mount, controllers) in hierarchies {
        let parent = mount.join(PARENT);
        let dir = parent.join(name);
        let result = make_dir(&parent, true).and_then(|()| {
            remove_stale(&parent);
            make_dir(&dir, false)
        });
        if let Err(e) = result {
            // Undo the hierarchies already made; the error that stopped us is the one to report.
            for h in made.iter().rev() {
                let _ = fs::remove_dir(&h.dir);
            }
            return Err(e);
        }
        made.push(Hierarchy {
            controllers,
            mount,
            dir,
        });
    }
    Ok(RunCgroup {
        version: CgroupVersion::V1,
        name: name.to_string(),
        hierarchies: made,
    })
}

/// Enables `wanted` in `dir/cgroup.subtree_control` (those not already on). All in one write
/// first; if the kernel refuses it, one at a time, so an optional controller that cannot be
/// enabled (io, pids, even cpu) costs only its own figures.
fn enable_controllers(
    dir: &Path,
    wanted: &[&'static str],
    must: &[&str],
) -> Result<(), CgroupError> {
    let path = dir.join("cgroup.subtree_control");
    let current = crate::host::read_small_file(&path).map_err(|e| io_err(&path, e))?;
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !current.split_whitespace().any(|t| t == *c))
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    let all: Vec<String> = missing.iter().map(|c| format!("+{c}")).collect();
    if write_file(&path, &all.join(" ")).is_ok() {
        return Ok(());
    }
    for c in missing {
        match write_file(&path, &format!("+{c}")) {
            Err(e) if must.contains(&c) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

/// The pid in a run cgroup's name (`run-<pid>-<ns>`).
fn run_pid(name: &str) -> Option<u32> {
    name.strip_prefix("run-")?.split('-').next()?.parse().ok()
}

/// Removes the run cgroups under `parent` (`montrace/`) that a montrace killed before its end
/// left behind: those whose montrace pid is gone, and that hold no process (the kernel refuses
/// to remove one that does, and a tree that outlived its montrace keeps its cgroup). A pid in
/// use again by another process keeps its leftover until that process is gone too.
fn remove_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(run_pid) else {
            continue;
        };
        // SAFETY: kill with signal 0 only checks that the process exists.
        let alive = unsafe { libc::kill(pid as libc::pid_t, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM);
        if !alive && entry.file_type().is_ok_and(|t| t.is_dir()) {
            if let Ok(0) = count_procs(&entry.path()) {
                let _ = remove_cgroup_dir(&entry.path());
            }
        }
    }
}

/// `mkdir`; `existing_ok` for the shared `montrace/` parent, not for a run's own directory.
fn make_dir(path: &Path, existing_ok: bool) -> Result<(), CgroupError> {
    match fs::create_dir(path) {
        Err(e) if existing_ok && e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
        r => r.map_err(|e| io_err(path, e)),
    }
}

/// Removes one run directory. On cgroupfs a plain `rmdir` does it (the kernel's files go with
/// it). A fake tree on an ordinary filesystem (tests) holds real files, so there, and only
/// there, the directory's plain files are deleted first. Never recursive.
fn remove_cgroup_dir(dir: &Path) -> Result<(), CgroupError> {
    let mut attempt = 0;
    loop {
        let e = match fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => e,
        };
        match e.raw_os_error() {
            Some(libc::EBUSY) => {
                let processes = count_procs(dir)?;
                if processes > 0 || attempt >= BUSY_RETRIES {
                    return Err(CgroupError::Busy {
                        path: dir.to_path_buf(),
                        processes,
                    });
                }
                attempt += 1;
                std::thread::sleep(Duration::from_millis(10));
            }
            Some(libc::ENOTEMPTY) if is_plain_fs(dir) => {
                for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
                    let entry = entry.map_err(|e| io_err(dir, e))?;
                    if entry.file_type().is_ok_and(|t| t.is_file()) {
                        fs::remove_file(entry.path()).map_err(|e| io_err(&entry.path(), e))?;
                    }
                }
                return fs::remove_dir(dir).map_err(|e| io_err(dir, e));
            }
            _ => return Err(io_err(dir, e)),
        }
    }
}

/// True when `path` is on a filesystem that is certainly not cgroupfs (statfs succeeded and
/// the magic is neither cgroup's nor cgroup2's).
fn is_plain_fs(path: &Path) -> bool {
    let Ok(c_path) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: zeroed statfs is a valid out-parameter; c_path is a NUL-terminated path.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statfs(c_path.as_ptr(), &mut st) } != 0 {
        return false;
    }
    #[allow(clippy::unnecessary_cast)] // f_type's type differs between targets
    let magic = st.f_type as u64;
    magic != CGROUP2_SUPER_MAGIC && magic != CGROUP_SUPER_MAGIC
}

/// Distinct pids in `dir/cgroup.procs` (v1 may list one twice); a missing file counts none.
fn count_procs(dir: &Path) -> Result<usize, CgroupError> {
    let text = read_optional(&dir.join("cgroup.procs"))?.unwrap_or_default();
    Ok(text.split_whitespace().collect::<BTreeSet<_>>().len())
}

fn under(fs_root: &Path, mount_point: &Path) -> PathBuf {
    fs_root.join(mount_point.strip_prefix("/").unwrap_or(mount_point))
}

fn io_err(path: &Path, source: io::Error) -> CgroupError {
    CgroupError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn parse_err(path: &Path, message: String) -> CgroupError {
    CgroupError::Parse {
        path: path.to_path_buf(),
        message,
    }
}

/// Writes `text` in one `write` without creating the file (cgroup files exist or are wrong).
fn write_file(path: &Path, text: &str) -> Result<(), CgroupError> {
    fs::OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(path)
        .and_then(|mut f| f.write_all(text.as_bytes()))
        .map_err(|e| io_err(path, e))
}

/// The file's text, or None when the kernel does not provide it.
fn read_optional(path: &Path) -> Result<Option<String>, CgroupError> {
    match crate::host::read_small_file(path) {
        Ok(text) => Ok(Some(text)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io_err(path, e)),
    }
}

/// A file holding one number, or None when the kernel does not provide it.
fn read_u64(path: &Path) -> Result<Option<u64>, CgroupError> {
    read_optional(path)?
        .map(|text| {
            text.trim()
                .parse()
                .map_err(|e| parse_err(path, format!("{:?} is not a number: {e}", text.trim())))
        })
        .transpose()
}

fn number(key: &str, value: &str) -> Result<u64, String> {
    value
        .parse()
        .map_err(|e| format!("{key} {value:?} is not a number: {e}"))
}

/// The cgroup mounts in `/proc/self/mountinfo` text. Lines that are not cgroup mounts, or
/// not mountinfo-shaped, are skipped.
pub fn parse_mountinfo_cgroups(text: &str) -> Vec<CgroupMount> {
    let mut mounts = Vec::new();
    for line in text.lines() {
        // id parent maj:min root mount_point options [optional...] - fstype source super_options
        let fields: Vec<&str> = line.split_whitespace().collect();
        let Some(sep) = fields.iter().position(|f| *f == "-") else {
            continue;
        };
        if sep < 6 || fields.len() < sep + 2 {
            continue;
        }
        let mount_point = PathBuf::from(unescape_octal(fields[4]));
        let root = PathBuf::from(unescape_octal(fields[3]));
        match fields[sep + 1] {
            "cgroup2" => mounts.push(CgroupMount {
                mount_point,
                root,
                version: CgroupVersion::V2,
                controllers: Vec::new(),
            }),
            "cgroup" => {
                let super_options = fields.get(sep + 3).copied().unwrap_or("");
                mounts.push(CgroupMount {
                    mount_point,
                    root,
                    version: CgroupVersion::V1,
                    controllers: super_options
                        .split(',')
                        .filter(|o| V1_CONTROLLERS.contains(o))
                        .map(String::from)
                        .collect(),
                });
            }
            _ => {}
        }
    }
    mounts
}

/// Decodes mountinfo's `\NNN` octal escapes (space, tab, newline, backslash).
fn unescape_octal(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let escape = bytes
            .get(i + 1..i + 4)
            .filter(|d| bytes[i] == b'\\' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match escape {
            Some(d) => {
                let value = d.iter().fold(0u32, |v, b| v * 8 + u32::from(b - b'0'));
                out.push(u8::try_from(value).unwrap_or(b'?'));
                i += 4;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// v2 `cpu.stat` ("key value" lines); keys other than the three used are ignored.
pub fn parse_cpu_stat(text: &str) -> Result<CpuStat, String> {
    let mut stat = CpuStat::default();
    for line in text.lines() {
        let mut parts = line.split_whitespace();
        let (Some(key), Some(value)) = (parts.next(), parts.next()) else {
            continue;
        };
        let slot = match key {
            "usage_usec" => &mut stat.usage_usec,
            "user_usec" => &mut stat.user_usec,
            "system_usec" => &mut stat.system_usec,
            _ => continue,
        };
        *slot = Some(number(key, value)?);
    }
    Ok(stat)
}

/// v2 `io.stat`: "MAJ:MIN rbytes=N wbytes=N rios=N ..." per device; rbytes and wbytes summed.
pub fn parse_io_stat(text: &str) -> Result<IoBytes, String> {
    let mut io = IoBytes::default();
    for line in text.lines() {
        for field in line.split_whitespace().skip(1) {
            let Some((key, value)) = field.split_once('=') else {
                return Err(format!("unexpected field {field:?} in line {line:?}"));
            };
            match key {
                "rbytes" => io.read = io.read.saturating_add(number(key, value)?),
                "wbytes" => io.write = io.write.saturating_add(number(key, value)?),
                _ => {}
            }
        }
    }
    Ok(io)
}

/// v1 `blkio.*io_service_bytes_recursive`: "MAJ:MIN Read N" / "Write" / "Sync" / "Async" /
/// "Discard" / "Total" per device and a final "Total N"; Read and Write summed over devices.
pub fn parse_blkio_service_bytes(text: &str) -> Result<IoBytes, String> {
    let mut io = IoBytes::default();
    for line in text.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        match fields.as_slice() {
            [_, "Read", n] => io.read = io.read.saturating_add(number("Read", n)?),
            [_, "Write", n] => io.write = io.write.saturating_add(number("Write", n)?),
            [_, _, _] | ["Total", _] | [] => {}
            _ => return Err(format!("unexpected line {line:?}")),
        }
    }
    Ok(io)
}

#[cfg(test)]
mod tests;
