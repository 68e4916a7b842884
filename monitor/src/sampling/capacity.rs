//! What 100 % means for a run: the CPU and memory its processes may use. Inside a limited
//! container, a cgroup limit on montrace's own cgroup or one of its ancestors (v2 `cpu.max` and
//! `memory.max`; v1 `cpu.cfs_quota_us`/`cpu.cfs_period_us` and `memory.limit_in_bytes`), or a
//! CPU affinity narrower than the machine (a cpuset); otherwise the host's CPUs and memory.
//! run.json records which (`capacity`), and the percentages of the live stream, the report and
//! the Python package are taken against it.
//!
//! Pure: the parsers, [`cgroup_dirs`] and [`decide`]; the edge, [`Capacity::read`], reads
//! /proc/self/cgroup, /proc/self/mountinfo, the limit files, the affinity and /proc/meminfo.
use std::path::{Path, PathBuf};

use super::cgroup::{CgroupMount, CgroupVersion};
pub use crate::store::model::Capacity;

impl Capacity {
    /// True when either figure comes from a limit rather than the whole host.
    pub fn limited(&self) -> bool {
        self.cpu_basis != HOST || self.memory_basis != HOST
    }

    /// `cpu_percent` (100 = one core) as a share of the CPU capacity.
    pub fn cpu_share_percent(&self, cpu_percent: f64) -> f64 {
        cpu_percent / self.cpu_cores.max(f64::MIN_POSITIVE)
    }

    /// Bytes as a share of the memory capacity, in percent.
    pub fn memory_share_percent(&self, bytes: u64) -> f64 {
        bytes as f64 / self.memory_bytes.max(1) as f64 * 100.0
    }

    /// One line for people: `2 cores (host), 23.5 GiB (cgroup v1 memory.limit_in_bytes ...)`.
    pub fn describe(&self) -> String {
        format!(
            "{} core{} ({}), {} ({})",
            trim_float(self.cpu_cores),
            if self.cpu_cores == 1.0 { "" } else { "s" },
            self.cpu_basis,
            crate::units::format_bytes(self.memory_bytes),
            self.memory_basis
        )
    }

    /// This process's capacity, read now (the run's processes inherit montrace's cgroup and
    /// affinity). Anything unreadable counts as no limit.
    pub fn read() -> Capacity {
        let limits = Limits::get();
        decide(
            limits.host_cores,
            limits.host_memory,
            &limits.cpu,
            &limits.memory,
        )
    }
}

/// Reads the limits now, once a process (some 20 files of /proc and the cgroup tree: 0.26 ms
/// on the 2-core test machine), so that [`Capacity::read`] and [`confining_cgroup`] later find
/// them read. A run does it on a thread while its command starts.
pub fn read_limits() {
    Limits::get();
}

/// The cgroup limit on montrace (one that decides its capacity, set below the top of its cgroup
/// hierarchy: the top is the host's root, or a container's own cgroup) that moving the command
/// into the run cgroup would lift, if one would: montrace then leaves the command where it is.
/// `run_dirs`: the run cgroup's directories, one per hierarchy it has; None for one at the top
/// of every hierarchy (root's), which lifts every such limit.
pub fn confining_cgroup(run_dirs: Option<&[PathBuf]>) -> Option<String> {
    let limits = Limits::get();
    let capacity = decide(
        limits.host_cores,
        limits.host_memory,
        &limits.cpu,
        &limits.memory,
    );
    limits
        .below_top
        .iter()
        .find(|(at, basis)| {
            (*basis == capacity.cpu_basis || *basis == capacity.memory_basis) && lifts(at, run_dirs)
        })
        .map(|(_, basis)| basis.clone())
}

/// Whether moving the command into `run_dirs` (see [`confining_cgroup`]) takes it out from
/// under the limit set at `at`: one of them is in that limit's hierarchy, and not below it.
/// A run cgroup made inside the limited cgroup (an ordinary user's, in a delegated subtree below
/// a job's or a user slice's limit) keeps the limit over the command.
fn lifts(at: &CgroupDir, run_dirs: Option<&[PathBuf]>) -> bool {
    run_dirs.is_none_or(|runs| {
        runs.iter()
            .any(|run| run.starts_with(&at.mount) && !run.starts_with(&at.dir))
    })
}

/// The host's figures and every limit found, with those set below the top of a hierarchy.
struct Limits {
    host_cores: f64,
    host_memory: u64,
    cpu: Vec<(f64, String)>,
    memory: Vec<(u64, String)>,
    /// The limits set below the top of a hierarchy: where, and their basis.
    below_top: Vec<(CgroupDir, String)>,
}

impl Limits {
    /// Read once a process: a run asks before its command starts where it may make a run
    /// cgroup (`confining_cgroup`), beside the command otherwise ([`read_limits`]), and for its
    /// end (`Capacity::read`), some 60 files of /proc and the cgroup tree each time; the limits
    /// of montrace's own cgroup do not change under it.
    fn get() -> &'static Limits {
        static LIMITS: std::sync::OnceLock<Limits> = std::sync::OnceLock::new();
        LIMITS.get_or_init(Limits::read)
    }

    fn read() -> Limits {
        // std's available_parallelism reads the cgroup tree for a quota too: only if sysconf
        // fails.
        let host_cores = online_cpus()
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
            as f64;
        let host_memory = crate::host::read_small_file("/proc/meminfo")
            .ok()
            .and_then(|t| mem_total(&t))
            .unwrap_or(0);
        let mut limits = Limits {
            host_cores,
            host_memory,
            cpu: Vec::new(),
            memory: Vec::new(),
            below_top: Vec::new(),
        };
        if let Some(n) = affinity_cpus() {
            limits.cpu.push((
                n as f64,
                format!("CPU affinity (cpuset): {n} of {host_cores} CPUs"),
            ));
        }
        let own = crate::host::read_small_file("/proc/self/cgroup").unwrap_or_default();
        let mounts = crate::host::read_small_file("/proc/self/mountinfo")
            .map(|t| super::cgroup::parse_mountinfo_cgroups(&t))
            .unwrap_or_default();
        for at in cgroup_dirs(&own, &mounts) {
            let (cpu, memory) = (limits.cpu.len(), limits.memory.len());
            collect_limits(at.files, &at.dir, &mut limits.cpu, &mut limits.memory);
            if !at.is_top() {
                let found = limits.cpu[cpu..].iter().map(|(_, b)| b.clone());
                let found: Vec<(CgroupDir, String)> = found
                    .chain(limits.memory[memory..].iter().map(|(_, b)| b.clone()))
                    .map(|basis| (at.clone(), basis))
                    .collect();
                limits.below_top.extend(found);
            }
        }
        limits
    }
}

/// The basis of a figure that no limit lowered.
pub const HOST: &str = "host";

/// The smallest limit below the host's figure, with its basis; the host's otherwise.
pub fn decide(
    host_cores: f64,
    host_memory: u64,
    cpu_limits: &[(f64, String)],
    memory_limits: &[(u64, String)],
) -> Capacity {
    let cpu = cpu_limits
        .iter()
        .filter(|(c, _)| *c > 0.0 && *c < host_cores)
        .min_by(|a, b| a.0.total_cmp(&b.0));
    let memory = memory_limits
        .iter()
        .filter(|(m, _)| *m > 0 && (host_memory == 0 || *m < host_memory))
        .min_by_key(|(m, _)| *m);
    Capacity {
        cpu_cores: cpu.map_or(host_cores, |c| c.0),
        cpu_basis: cpu.map_or_else(|| HOST.to_owned(), |c| c.1.clone()),
        memory_bytes: memory.map_or(host_memory, |m| m.0),
        memory_basis: memory.map_or_else(|| HOST.to_owned(), |m| m.1.clone()),
    }
}

/// v2 `cpu.max`: `QUOTA PERIOD` in µs, or `max PERIOD` (no limit).
pub fn parse_cpu_max(text: &str) -> Option<f64> {
    let mut fields = text.split_whitespace();
    let quota = fields.next()?;
    let period: f64 = fields.next().unwrap_or("100000").parse().ok()?;
    cores(quota, period)
}

/// v1 `cpu.cfs_quota_us` (`-1`: no limit) over `cpu.cfs_period_us`.
pub fn parse_cfs_quota(quota: &str, period: &str) -> Option<f64> {
    cores(quota.trim(), period.trim().parse().ok()?)
}

fn cores(quota: &str, period: f64) -> Option<f64> {
    let quota: f64 = quota.parse().ok()?;
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// v2 `memory.max` (`max`: no limit) or v1 `memory.limit_in_bytes` (no limit is a huge value,
/// the largest page-aligned `i64`).
pub fn parse_memory_limit(text: &str) -> Option<u64> {
    let value: u64 = text.trim().parse().ok()?;
    (value < 1 << 60).then_some(value)
}

/// MemTotal of /proc/meminfo, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find_map(|l| l.strip_prefix("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().next()?.parse().ok()?;
    Some(kib * 1024)
}

/// Which limit files a cgroup directory may hold: v2's, or a v1 hierarchy's, whose `cpu.*` files
/// exist only where it has the `cpu` controller and `memory.*` only where it has `memory` (the
/// others are not looked for: each failed open was a system call of every run's start).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitFiles {
    V2,
    V1 { cpu: bool, memory: bool },
}

/// A cgroup directory that may hold a limit on this process.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupDir {
    pub files: LimitFiles,
    pub dir: PathBuf,
    /// Its hierarchy's mount point.
    pub mount: PathBuf,
}

impl CgroupDir {
    /// The top of what this process sees of the hierarchy.
    pub fn is_top(&self) -> bool {
        self.dir == self.mount
    }
}

/// The directories that may hold a limit on this process: its cgroup in the v2 hierarchy and in
/// the v1 `cpu` and `memory` hierarchies, then each ancestor up to the mount point (the top of
/// what this process sees: a container's own cgroup when it has a cgroup namespace).
pub fn cgroup_dirs(proc_self_cgroup: &str, mounts: &[CgroupMount]) -> Vec<CgroupDir> {
    let mut dirs = Vec::new();
    for line in proc_self_cgroup.lines() {
        let mut fields = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) =
            (fields.next(), fields.next(), fields.next())
        else {
            continue;
        };
        let (mount, files) = if id == "0" && controllers.is_empty() {
            let v2 = mounts.iter().find(|m| m.version == CgroupVersion::V2);
            (v2, LimitFiles::V2)
        } else {
            let listed: Vec<&str> = controllers.split(',').collect();
            let (cpu, memory) = (listed.contains(&"cpu"), listed.contains(&"memory"));
            if !cpu && !memory {
                continue;
            }
            let files = LimitFiles::V1 { cpu, memory };
            let v1 = mounts.iter().find(|m| {
                m.version == CgroupVersion::V1
                    && listed
                        .iter()
                        .all(|c| m.controllers.iter().any(|mc| mc == c))
            });
            (v1, files)
        };
        let Some(mount) = mount else { continue };
        let relative = Path::new(path)
            .strip_prefix(&mount.root)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let mut dir = mount.mount_point.join(relative);
        loop {
            dirs.push(CgroupDir {
                files,
                dir: dir.clone(),
                mount: mount.mount_point.clone(),
            });
            if dir == mount.mount_point || !dir.pop() || !dir.starts_with(&mount.mount_point) {
                break;
            }
        }
    }
    dirs
}

/// Reads the limit files of one cgroup directory.
fn collect_limits(
    files: LimitFiles,
    dir: &Path,
    cpu: &mut Vec<(f64, String)>,
    memory: &mut Vec<(u64, String)>,
) {
    let read = |name: &str| crate::host::read_small_file(dir.join(name)).ok();
    let basis = |what: &str| {
        format!(
            "cgroup {what} ({})",
            dir.join(what.rsplit(' ').next().unwrap_or(what)).display()
        )
    };
    match files {
        LimitFiles::V2 => {
            if let Some(c) = read("cpu.max").as_deref().and_then(parse_cpu_max) {
                cpu.push((c, basis("v2 cpu.max")));
            }
            if let Some(m) = read("memory.max").as_deref().and_then(parse_memory_limit) {
                memory.push((m, basis("v2 memory.max")));
            }
        }
        LimitFiles::V1 {
            cpu: has_cpu,
            memory: has_memory,
        } => {
            if has_cpu {
                if let (Some(q), Some(p)) = (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
                    if let Some(c) = parse_cfs_quota(&q, &p) {
                        cpu.push((c, basis("v1 cpu.cfs_quota_us")));
                    }
                }
            }
            if has_memory {
                if let Some(m) = read("memory.limit_in_bytes")
                    .as_deref()
                    .and_then(parse_memory_limit)
                {
                    memory.push((m, basis("v1 memory.limit_in_bytes")));
                }
            }
        }
    }
}

fn online_cpus() -> Option<usize> {
    // SAFETY: sysconf has no memory-safety preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    usize::try_from(n).ok().filter(|&n| n > 0)
}

/// CPUs in this process's affinity mask.
fn affinity_cpus() -> Option<usize> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let ok =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    // SAFETY: the set was filled by the kernel.
    (ok == 0).then(|| unsafe { libc::CPU_COUNT(&set) } as usize)
}

fn trim_float(v: f64) -> String {
    let text = format!("{v:.2}");
    text.trim_end_matches('0').trim_end_matches('.').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount(point: &str, root: &str, version: CgroupVersion, controllers: &[&str]) -> CgroupMount {
        CgroupMount {
            mount_point: point.into(),
            root: root.into(),
            version,
            controllers: controllers.iter().map(|c| c.to_string()).collect(),
        }
    }

    #[test]
    fn limits_parse_and_no_limit_is_none() {
        assert_eq!(parse_cpu_max("150000 100000\n"), Some(1.5));
        assert_eq!(parse_cpu_max("max 100000\n"), None);
        assert_eq!(parse_cfs_quota("50000\n", "100000\n"), Some(0.5));
        assert_eq!(parse_cfs_quota("-1\n", "100000\n"), None);
        assert_eq!(parse_memory_limit("268435456\n"), Some(256 << 20));
        assert_eq!(parse_memory_limit("max\n"), None);
        assert_eq!(parse_memory_limit("9223372036854771712\n"), None);
        assert_eq!(
            mem_total("MemTotal:       24684092 kB\nMemFree: 1 kB\n"),
            Some(24684092 * 1024)
        );
    }

    #[test]
    fn the_smallest_limit_below_the_host_wins() {
        let host = decide(2.0, 24 << 30, &[], &[]);
        assert_eq!((host.cpu_cores, host.memory_bytes), (2.0, 24 << 30));
        assert!(!host.limited());
        let limited = decide(
            8.0,
            64 << 30,
            &[
                (4.0, "affinity".into()),
                (1.5, "job cpu.max".into()),
                (16.0, "parent".into()),
            ],
            &[
                (128 << 30, "bigger than the host".into()),
                (1 << 30, "memory.max".into()),
            ],
        );
        assert_eq!(limited.cpu_cores, 1.5);
        assert_eq!(limited.cpu_basis, "job cpu.max");
        assert_eq!(limited.memory_bytes, 1 << 30);
        assert!(limited.limited());
        assert_eq!(limited.cpu_share_percent(75.0), 50.0);
        assert_eq!(limited.memory_share_percent(512 << 20), 50.0);
        // A limit above the host's figure is no limit.
        let loose = decide(
            2.0,
            1 << 30,
            &[(4.0, "quota".into())],
            &[(2 << 30, "max".into())],
        );
        assert!(!loose.limited());
    }

    #[test]
    fn the_dirs_go_from_the_own_cgroup_up_to_the_mount_in_each_hierarchy() {
        let mounts = [
            mount("/sys/fs/cgroup/memory", "/", CgroupVersion::V1, &["memory"]),
            mount(
                "/sys/fs/cgroup/cpu,cpuacct",
                "/",
                CgroupVersion::V1,
                &["cpu", "cpuacct"],
            ),
            mount("/sys/fs/cgroup/pids", "/", CgroupVersion::V1, &["pids"]),
            mount("/sys/fs/cgroup/unified", "/", CgroupVersion::V2, &[]),
        ];
        let own = "9:pids:/a\n4:memory:/jobs/42\n2:cpu,cpuacct:/jobs\n0::/user.slice/s.scope\n";
        let dirs: Vec<String> = cgroup_dirs(own, &mounts)
            .into_iter()
            .map(|d| {
                let top = if d.is_top() { " (top)" } else { "" };
                format!("{:?} {}{top}", d.files, d.dir.display())
            })
            .collect();
        let memory = "V1 { cpu: false, memory: true }";
        let cpu = "V1 { cpu: true, memory: false }";
        assert_eq!(
            dirs,
            [
                format!("{memory} /sys/fs/cgroup/memory/jobs/42"),
                format!("{memory} /sys/fs/cgroup/memory/jobs"),
                format!("{memory} /sys/fs/cgroup/memory (top)"),
                format!("{cpu} /sys/fs/cgroup/cpu,cpuacct/jobs"),
                format!("{cpu} /sys/fs/cgroup/cpu,cpuacct (top)"),
                "V2 /sys/fs/cgroup/unified/user.slice/s.scope".into(),
                "V2 /sys/fs/cgroup/unified/user.slice".into(),
                "V2 /sys/fs/cgroup/unified (top)".into(),
            ]
        );
        // A container with its own cgroup namespace: its cgroup is the mount's top, "/".
        let container = [mount("/sys/fs/cgroup", "/", CgroupVersion::V2, &[])];
        let dirs = cgroup_dirs("0::/\n", &container);
        assert_eq!(
            dirs,
            [CgroupDir {
                files: LimitFiles::V2,
                dir: "/sys/fs/cgroup".into(),
                mount: "/sys/fs/cgroup".into(),
            }]
        );
        assert!(dirs[0].is_top());
    }

    /// A limit on a job's or a user slice's cgroup holds the user's run cgroup made below it (in
    /// the delegated subtree); one on montrace's own cgroup does not hold the run cgroup made
    /// beside it, and root's, at the top, is below no limit. A v1 limit stays over a command
    /// moved in v2 only.
    #[test]
    fn a_run_cgroup_below_the_limited_cgroup_keeps_its_limit() {
        let v2 = |dir: &str| CgroupDir {
            files: LimitFiles::V2,
            dir: dir.into(),
            mount: "/sys/fs/cgroup".into(),
        };
        let slice = v2("/sys/fs/cgroup/user.slice/user-1000.slice");
        let own =
            v2("/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/x.scope");
        let run: &[PathBuf] = &[
            "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/montrace/run-1"
                .into(),
        ];
        assert!(!lifts(&slice, Some(run)), "below the slice's limit");
        assert!(
            lifts(&own, Some(run)),
            "beside montrace's own limited cgroup"
        );
        assert!(lifts(&slice, None), "root's, at the top");
        let v1 = CgroupDir {
            files: LimitFiles::V1 {
                cpu: false,
                memory: true,
            },
            dir: "/sys/fs/cgroup/memory/jobs/42".into(),
            mount: "/sys/fs/cgroup/memory".into(),
        };
        assert!(!lifts(&v1, Some(run)), "another hierarchy");
        assert!(lifts(
            &v1,
            Some(&["/sys/fs/cgroup/memory/montrace/run-1".into()])
        ));
        // Components, not characters: montrace/run-10 is not below montrace/run-1.
        let run1 = v2("/sys/fs/cgroup/montrace/run-1");
        assert!(lifts(
            &run1,
            Some(&["/sys/fs/cgroup/montrace/run-10".into()])
        ));
    }

    #[test]
    fn the_description_names_both_bases() {
        let c = decide(
            2.0,
            1 << 30,
            &[(0.5, "cgroup v2 cpu.max (/x/cpu.max)".into())],
            &[],
        );
        assert_eq!(
            c.describe(),
            "0.5 cores (cgroup v2 cpu.max (/x/cpu.max)), 1.0 GiB (host)"
        );
    }
}
