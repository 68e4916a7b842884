//! The agent's side of the flight recorder: the ring's records of the whole machine in, through
//! the same [`Tracker`] a run uses (so a row's figures are those a run's processes.parquet
//! has), rows of exited processes out, buffered until [`super::due`], then written as one file
//! off the event loop ([`write`]) with the retention applied after it.
use std::{
    collections::HashMap,
    os::unix::fs::{DirBuilderExt as _, MetadataExt as _, PermissionsExt as _},
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

use anyhow::{bail, Context as _};
use monitor_common::{kind, EventHeader, ExitEvent};

use super::{due, file_name, history_batch, history_schema, to_remove, Exited, StoredFile};
use crate::{
    kernel::decode::decode,
    sampling::host,
    tracking::tracker::{Clock, Tracker},
};

/// Where the flight recorder writes unless `--history` names another directory.
pub const DEFAULT_DIR: &str = "/var/lib/montrace";

/// Rows held at most while a write is under way (a slow disk): beyond, new rows are counted
/// lost rather than held.
const MAX_HELD_ROWS: usize = 4 * super::MAX_BUFFERED_ROWS;

/// What `montrace agent --history` was asked for.
#[derive(Clone, Debug)]
pub struct Options {
    pub dir: PathBuf,
    /// How long a row waits in memory at most before its file is written.
    pub period: Duration,
    pub max_bytes: u64,
    pub max_age: Duration,
}

pub struct Recorder {
    pub options: Options,
    tracker: Tracker,
    page_size: u64,
    buffered: Vec<Exited>,
    /// When the oldest buffered row came.
    oldest: Option<Instant>,
    cgroups: CgroupNames,
    /// Rows not kept because too many waited for a slow write.
    pub lost_rows: u64,
}

impl Recorder {
    pub fn new(options: Options) -> Recorder {
        Recorder {
            options,
            tracker: Tracker::new(Clock {
                boot_to_wall_ns: host::boot_to_wall_ns(),
            }),
            page_size: host::page_size(),
            buffered: Vec::new(),
            oldest: None,
            cgroups: CgroupNames::default(),
            lost_rows: 0,
        }
    }

    /// One record of the ring (any process's).
    pub fn record(&mut self, record: &[u8]) {
        let Ok(event) = decode(record, self.page_size) else {
            return;
        };
        // Who the process was, from its exit record (the last thread's, `EXIT`).
        let owner = exit_owner(record);
        self.tracker.apply(&event);
        for process in self.tracker.take_finished() {
            if self.buffered.len() >= MAX_HELD_ROWS {
                self.lost_rows += 1;
                continue;
            }
            let (uid, cgroup_id) = match owner {
                Some((pid, uid, cgroup)) if pid == process.pid => (Some(uid), Some(cgroup)),
                _ => (None, None),
            };
            let cgroup = cgroup_id.and_then(|id| self.cgroups.name(id));
            self.buffered.push(Exited {
                process,
                uid,
                cgroup_id,
                cgroup,
            });
            self.oldest.get_or_insert_with(Instant::now);
        }
    }

    /// The buffered rows, when they are due to be written (see [`super::due`]).
    pub fn take_due(&mut self, now: Instant) -> Option<Vec<Exited>> {
        let waited = self
            .oldest
            .map_or(0, |t| now.duration_since(t).as_nanos() as i64);
        if !due(
            self.buffered.len(),
            waited,
            self.options.period.as_nanos() as i64,
        ) {
            return None;
        }
        Some(self.take_all())
    }

    /// Every buffered row (the agent stopping).
    pub fn take_all(&mut self) -> Vec<Exited> {
        self.oldest = None;
        std::mem::take(&mut self.buffered)
    }

    /// Processes followed now (those alive that the recorder saw).
    pub fn live(&self) -> usize {
        self.tracker.live_count()
    }
}

/// (pid, uid, cgroup id) of a whole-process exit record.
fn exit_owner(record: &[u8]) -> Option<(u32, u32, u64)> {
    if record.len() < std::mem::size_of::<ExitEvent>() {
        return None;
    }
    // SAFETY: the length was checked; ExitEvent is plain old data, read unaligned.
    let e = unsafe { std::ptr::read_unaligned(record.as_ptr().cast::<ExitEvent>()) };
    let EventHeader { kind: k, pid, .. } = e.header;
    (k == kind::EXIT).then_some((pid, e.uid, e.cgroup_id))
}

/// Makes the history directory root's alone (0700), or refuses one that is not: a symlink,
/// not a directory, or owned by another user (whoever owns it could read every user's
/// processes).
pub fn prepare_dir(dir: &Path) -> anyhow::Result<()> {
    match std::fs::symlink_metadata(dir) {
        Err(err) if err.kind() == std::io::ErrorKind::NotFound => {
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                std::fs::create_dir_all(parent)
                    .with_context(|| format!("cannot make {}", parent.display()))?;
            }
            std::fs::DirBuilder::new()
                .mode(0o700)
                .create(dir)
                .with_context(|| format!("cannot make {}", dir.display()))?;
        }
        Err(err) => return Err(err).with_context(|| format!("cannot look at {}", dir.display())),
        Ok(meta) if !meta.is_dir() => bail!(
            "{} is not a directory (a symlink is refused too): name another with --history",
            dir.display()
        ),
        Ok(meta) if meta.uid() != 0 => bail!(
            "{} belongs to uid {}, not root: the history is every user's, so its directory is \
             root's alone",
            dir.display(),
            meta.uid()
        ),
        Ok(_) => {}
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .with_context(|| format!("cannot make {} root's alone (0700)", dir.display()))?;
    // A write that an agent killed left half done (its temporary name): never a history file.
    for entry in std::fs::read_dir(dir)?.filter_map(Result::ok) {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        if name.starts_with(".exits-") && name.ends_with(".tmp") {
            drop(std::fs::remove_file(entry.path()));
        }
    }
    Ok(())
}

/// What one write did.
#[derive(Debug)]
pub struct Written {
    pub file: String,
    pub rows: usize,
    pub removed: Vec<String>,
}

/// Writes `rows` as one file (complete and synced, or absent), then removes what the retention
/// says. Blocking.
pub fn write(options: &Options, rows: &[Exited]) -> anyhow::Result<Written> {
    let ends = rows.iter().filter_map(|r| r.process.end_time_ns);
    let first = ends.clone().min().unwrap_or_default();
    let last = ends.max().unwrap_or_default();
    let mut name = file_name(first, last);
    // Two writes of the same exit times (a burst cut by MAX_BUFFERED_ROWS in the same ns):
    // never one over the other.
    let mut n = 0;
    while options.dir.join(&name).exists() {
        n += 1;
        name = file_name(first, last + n);
    }
    let batch = history_batch(rows).context("building the rows")?;
    crate::store::writer::write_table(&options.dir.join(&name), history_schema(), &batch)?;
    let removed = apply_retention(options)?;
    Ok(Written {
        file: name,
        rows: rows.len(),
        removed,
    })
}

/// Removes the files the retention says ([`to_remove`]); their names.
pub fn apply_retention(options: &Options) -> anyhow::Result<Vec<String>> {
    let files: Vec<StoredFile> = std::fs::read_dir(&options.dir)?
        .filter_map(Result::ok)
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let (_, last) = super::parse_file_name(&name)?;
            Some(StoredFile {
                name,
                last_end_ns: last,
                bytes: entry.metadata().ok()?.len(),
            })
        })
        .collect();
    let now = host::realtime_ns();
    let max_age = i64::try_from(options.max_age.as_nanos()).unwrap_or(i64::MAX);
    let mut removed = Vec::new();
    for i in to_remove(&files, now, max_age, options.max_bytes) {
        let path = options.dir.join(&files[i].name);
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        removed.push(files[i].name.clone());
    }
    Ok(removed)
}

/// The user processes alive now (not kernel threads), for the programs to track from the
/// start: those forked later the programs add themselves.
pub fn live_user_processes() -> Vec<u32> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let mut pids = Vec::new();
    crate::sampling::procstat::each_process(|pid, _, stat| {
        if stat.flags & PF_KTHREAD == 0 {
            pids.push(pid);
        }
    });
    pids
}

/// The paths of cgroups by id (the inode number of the cgroup's directory on the cgroup2
/// mount), found by walking the mount again when an id is not known, at most once a second.
#[derive(Default)]
struct CgroupNames {
    by_id: HashMap<u64, String>,
    walked: Option<Instant>,
}

/// Where the cgroup2 hierarchy is mounted (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a
/// hybrid machine), from /proc/self/mounts; None without one.
fn cgroup2_mount() -> Option<PathBuf> {
    let mounts = crate::host::read_small_file("/proc/self/mounts").ok()?;
    mount_of_type(&mounts, "cgroup2")
}

/// The mount point of the first mount of `fs_type` in a mounts table (pure).
fn mount_of_type(mounts: &str, fs_type: &str) -> Option<PathBuf> {
    mounts.lines().find_map(|line| {
        let mut fields = line.split_whitespace();
        let (_, point, kind) = (fields.next()?, fields.next()?, fields.next()?);
        // Spaces in a mount point are written \040.
        (kind == fs_type).then(|| PathBuf::from(point.replace("\\040", " ")))
    })
}

/// The most cgroups one walk looks at.
const MAX_CGROUPS: usize = 20_000;

impl CgroupNames {
    fn name(&mut self, id: u64) -> Option<String> {
        if let Some(name) = self.by_id.get(&id) {
            return Some(name.clone());
        }
        if self
            .walked
            .is_some_and(|t| t.elapsed() < Duration::from_secs(1))
        {
            return None;
        }
        self.walked = Some(Instant::now());
        self.by_id.clear();
        let root = cgroup2_mount()?;
        // Only the cgroup2 file system's directories: another mounted below it (a v1
        // hierarchy) numbers its inodes on its own.
        let device = std::fs::metadata(&root).ok()?.dev();
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            if self.by_id.len() >= MAX_CGROUPS {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if meta.dev() != device || !meta.is_dir() {
                continue;
            }
            let relative = dir.strip_prefix(&root).unwrap_or(&dir);
            self.by_id
                .insert(meta.ino(), format!("/{}", relative.display()));
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            stack.extend(
                entries
                    .filter_map(Result::ok)
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        self.by_id.get(&id).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_whole_process_exit_names_its_owner() {
        let mut e = ExitEvent::default();
        e.header.kind = kind::EXIT;
        e.header.pid = 42;
        e.uid = 1000;
        e.cgroup_id = 7;
        // SAFETY: plain old data, read as bytes.
        let bytes = unsafe {
            std::slice::from_raw_parts(
                (&e as *const ExitEvent).cast::<u8>(),
                std::mem::size_of::<ExitEvent>(),
            )
        }
        .to_vec();
        assert_eq!(exit_owner(&bytes), Some((42, 1000, 7)));
        e.header.kind = kind::THREAD_EXIT;
        // SAFETY: as above.
        let thread = unsafe {
            std::slice::from_raw_parts(
                (&e as *const ExitEvent).cast::<u8>(),
                std::mem::size_of::<ExitEvent>(),
            )
        }
        .to_vec();
        assert_eq!(exit_owner(&thread), None);
        assert_eq!(exit_owner(&bytes[..8]), None);
    }

    #[test]
    fn the_cgroup2_mount_is_found_in_the_mounts_table() {
        let hybrid =
            "tmpfs /sys/fs/cgroup tmpfs rw 0 0\ncgroup /sys/fs/cgroup/cpu cgroup rw,cpu 0 0\n\
                      cgroup2 /sys/fs/cgroup/unified cgroup2 rw 0 0\n";
        assert_eq!(
            mount_of_type(hybrid, "cgroup2"),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(mount_of_type("proc /proc proc rw 0 0\n", "cgroup2"), None);
    }

    #[test]
    fn this_process_is_a_live_user_process() {
        assert!(live_user_processes().contains(&std::process::id()));
    }

    #[test]
    fn retention_removes_the_oldest_file_on_disk() {
        let dir = tempfile::tempdir().unwrap();
        let now = host::realtime_ns();
        for (i, end) in [now - 3_000, now - 2_000, now - 1_000]
            .into_iter()
            .enumerate()
        {
            std::fs::write(dir.path().join(file_name(end, end)), vec![0u8; 100 + i]).unwrap();
        }
        std::fs::write(dir.path().join("keep.txt"), vec![0u8; 10_000]).unwrap();
        let options = Options {
            dir: dir.path().to_owned(),
            period: Duration::from_secs(1),
            max_bytes: 250,
            max_age: Duration::from_secs(3600),
        };
        assert_eq!(
            apply_retention(&options).unwrap(),
            vec![file_name(now - 3_000, now - 3_000)]
        );
        assert!(
            dir.path().join("keep.txt").exists(),
            "not the recorder's: kept"
        );
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 3);
    }
}
