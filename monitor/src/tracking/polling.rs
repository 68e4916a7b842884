//! Tracking without eBPF (not root, no BTF, a locked-down kernel): the tree is found by polling
//! /proc at each interval, and montrace is a child subreaper (`PR_SET_CHILD_SUBREAPER`) so that
//! orphans re-parent to it instead of leaving the tree. Its own children (the command and the
//! orphans) are reaped with `wait4`, which gives their exact exit figures; a process reaped by its
//! parent inside the tree ends with the last figures /proc showed. A process that lives shorter
//! than the interval can be missed: that is the price of polling, and run.json says which mode ran.
//!
//! The output is the same `KernelEvent`s the eBPF path produces, so the tracker, the tables and
//! the summary do not know which mode ran.
use std::collections::{HashMap, HashSet};

use crate::kernel::decode::{ExitStats, KernelEvent};

/// One process as a /proc scan sees it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcEntry {
    pub pid: u32,
    pub ppid: u32,
    pub start_ticks: u64,
    pub comm: String,
    pub state: char,
    pub cpu_user_ns: u64,
    pub cpu_system_ns: u64,
    pub rss_bytes: u64,
    pub minor_faults: u64,
    pub major_faults: u64,
    /// Exit code (wait-status encoding) of a zombie, from /proc/PID/stat field 52.
    pub exit_code: Option<i32>,
}

/// Processes of the tree not known yet, parents before children. A process belongs to the tree
/// when its parent does, or when its parent is montrace itself (the command, and orphans that
/// re-parented to montrace as subreaper).
pub fn discover(known: &HashSet<u32>, montrace_pid: u32, snapshot: &[ProcEntry]) -> Vec<u32> {
    let mut members: HashSet<u32> = known.clone();
    let mut found = Vec::new();
    loop {
        let before = found.len();
        for entry in snapshot {
            if members.contains(&entry.pid) || entry.pid == montrace_pid {
                continue;
            }
            if entry.ppid == montrace_pid || members.contains(&entry.ppid) {
                members.insert(entry.pid);
                found.push(entry.pid);
            }
        }
        if found.len() == before {
            return found;
        }
    }
}

/// What montrace last knew of a live member, to end it with if it vanishes unseen.
#[derive(Clone, Debug, Default)]
struct LastSeen {
    start_ticks: u64,
    comm: String,
    exe: Option<String>,
    figures: ExitStats,
    exit_code: Option<i32>,
}

pub struct Poller {
    montrace_pid: u32,
    tick_ns: u64,
    page_size: u64,
    members: HashMap<u32, LastSeen>,
}

/// A process that ended without montrace reaping it: its last figures from /proc.
#[derive(Clone, Debug, PartialEq)]
pub struct Vanished {
    pub pid: u32,
    pub figures: ExitStats,
    /// Known when montrace saw it as a zombie.
    pub exit_code: Option<i32>,
}

impl Default for Poller {
    fn default() -> Poller {
        Poller::new()
    }
}

impl Poller {
    /// The command is found by the first scan like any child of montrace (so its program is
    /// read from /proc like the others').
    pub fn new() -> Poller {
        Poller {
            montrace_pid: std::process::id(),
            // SAFETY: sysconf has no memory-safety preconditions.
            tick_ns: 1_000_000_000 / (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64),
            page_size: crate::host::page_size(),
            members: HashMap::new(),
        }
    }

    /// `attach`: makes a running process the top of the tree, and returns what it runs as an
    /// exec event (None if it is gone). Its descendants are then found by `scan`.
    pub fn adopt(&mut self, root: u32, now_boot_ns: u64) -> Option<KernelEvent> {
        let stat = crate::host::read_small_file(format!("/proc/{root}/stat")).ok()?;
        let entry = parse_stat(root, &stat, self.tick_ns, self.page_size)?;
        let exe = read_exe(root);
        let event = exec_event(
            root,
            entry.start_ticks * self.tick_ns,
            now_boot_ns,
            &entry,
            exe.clone(),
        );
        self.members.insert(
            root,
            LastSeen {
                start_ticks: entry.start_ticks,
                comm: entry.comm,
                exe,
                ..LastSeen::default()
            },
        );
        Some(event)
    }

    /// Scans /proc: fork and exec events for new members (parents first), and the members that
    /// are gone. `now_boot_ns` stamps the synthesized events.
    pub fn scan(&mut self, now_boot_ns: u64) -> (Vec<KernelEvent>, Vec<Vanished>) {
        let snapshot = self.snapshot();
        let by_pid: HashMap<u32, &ProcEntry> = snapshot.iter().map(|e| (e.pid, e)).collect();
        let known: HashSet<u32> = self.members.keys().copied().collect();
        let mut events = Vec::new();
        for pid in discover(&known, self.montrace_pid, &snapshot) {
            let entry = by_pid[&pid];
            let start_ns = entry.start_ticks * self.tick_ns;
            let exe = read_exe(pid);
            let parent_exe = self.members.get(&entry.ppid).and_then(|p| p.exe.clone());
            if entry.ppid != self.montrace_pid {
                events.push(KernelEvent::Fork {
                    time_ns: now_boot_ns,
                    pid,
                    start_ns,
                    parent_pid: entry.ppid,
                    comm: entry.comm.clone(),
                });
            }
            // A child running another program than its parent exec'd (or an orphan, whose
            // parent is unknown): record what it runs.
            if exe.is_some() && (exe != parent_exe || entry.ppid == self.montrace_pid) {
                events.push(exec_event(pid, start_ns, now_boot_ns, entry, exe.clone()));
            }
            self.members.insert(
                pid,
                LastSeen {
                    start_ticks: entry.start_ticks,
                    comm: entry.comm.clone(),
                    exe,
                    ..LastSeen::default()
                },
            );
        }
        // Refresh what is known of live members; those gone (or whose pid now names another
        // process) ended since the last scan.
        let mut vanished = Vec::new();
        self.members.retain(|&pid, seen| match by_pid.get(&pid) {
            Some(entry) if seen.start_ticks == 0 || seen.start_ticks == entry.start_ticks => {
                seen.start_ticks = entry.start_ticks;
                seen.comm.clone_from(&entry.comm);
                seen.figures.cpu_user_ns = entry.cpu_user_ns;
                seen.figures.cpu_system_ns = entry.cpu_system_ns;
                seen.figures.rss_bytes = entry.rss_bytes;
                seen.figures.peak_rss_bytes = seen.figures.peak_rss_bytes.max(entry.rss_bytes);
                seen.figures.minor_faults = entry.minor_faults;
                seen.figures.major_faults = entry.major_faults;
                seen.exit_code = entry.exit_code;
                true
            }
            _ => {
                vanished.push(Vanished {
                    pid,
                    figures: seen.figures,
                    exit_code: seen.exit_code,
                });
                false
            }
        });
        (events, vanished)
    }

    /// Reaps montrace's own children (the command and re-parented orphans) without blocking:
    /// exact exit events from `wait4`, and the command's raw wait status once it is reaped.
    pub fn reap(&mut self, root_pid: u32, now_boot_ns: u64) -> (Vec<KernelEvent>, Option<i32>) {
        let mut events = Vec::new();
        let mut root_status = None;
        loop {
            let mut status = 0;
            // SAFETY: zeroed rusage is a valid out-parameter.
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: valid out-pointers; WNOHANG never blocks.
            let pid = unsafe { libc::wait4(-1, &mut status, libc::WNOHANG, &mut usage) };
            if pid <= 0 {
                break;
            }
            let pid = pid as u32;
            if pid == root_pid {
                root_status = Some(status);
            }
            let seen = self.members.remove(&pid).unwrap_or_default();
            let tv_ns =
                |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000_000 + tv.tv_usec as u64 * 1000;
            let stats = ExitStats {
                tid: pid,
                exit_code: status,
                cpu_user_ns: tv_ns(usage.ru_utime),
                cpu_system_ns: tv_ns(usage.ru_stime),
                // getrusage's figure (KiB); unlike the eBPF path's, it counts the memory of the
                // parent it was forked from before it exec'd.
                peak_rss_bytes: (usage.ru_maxrss as u64 * 1024).max(seen.figures.peak_rss_bytes),
                rss_bytes: 0,
                minor_faults: usage.ru_minflt as u64,
                major_faults: usage.ru_majflt as u64,
                voluntary_ctxt_switches: usage.ru_nvcsw as u64,
                involuntary_ctxt_switches: usage.ru_nivcsw as u64,
                ..ExitStats::default()
            };
            events.push(KernelEvent::Exit {
                time_ns: now_boot_ns,
                pid,
                start_ns: seen.start_ticks * self.tick_ns,
                whole_process: true,
                comm: seen.comm,
                stats,
            });
        }
        (events, root_status)
    }

    fn snapshot(&self) -> Vec<ProcEntry> {
        let mut entries = Vec::new();
        crate::sampling::procstat::each_process(|pid, text, stat| {
            entries.push(entry_of(pid, text, stat, self.tick_ns, self.page_size));
        });
        entries
    }
}

fn exec_event(
    pid: u32,
    start_ns: u64,
    now: u64,
    entry: &ProcEntry,
    exe: Option<String>,
) -> KernelEvent {
    let argv: Vec<String> = crate::host::read_small(format!("/proc/{pid}/cmdline"))
        .map(|bytes| {
            bytes
                .split(|&b| b == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default();
    KernelEvent::Exec {
        time_ns: now,
        pid,
        start_ns,
        old_tid: pid,
        comm: entry.comm.clone(),
        filename: exe.unwrap_or_default(),
        argv,
        argv_truncated: false,
    }
}

fn read_exe(pid: u32) -> Option<String> {
    std::fs::read_link(format!("/proc/{pid}/exe"))
        .ok()
        .map(|p| {
            p.to_string_lossy()
                .trim_end_matches(" (deleted)")
                .to_string()
        })
}

/// The fields polling needs from /proc/PID/stat. comm may hold spaces and ')': fields are counted
/// after its last ')'.
pub fn parse_stat(pid: u32, stat: &str, tick_ns: u64, page_size: u64) -> Option<ProcEntry> {
    let text = stat.as_bytes();
    let parsed = crate::sampling::procstat::parse(text)?;
    Some(entry_of(pid, text, &parsed, tick_ns, page_size))
}

/// A process as the poller keeps it, from its stat `text` and what was parsed of it.
fn entry_of(
    pid: u32,
    text: &[u8],
    parsed: &crate::sampling::procstat::Stat,
    tick_ns: u64,
    page_size: u64,
) -> ProcEntry {
    ProcEntry {
        pid,
        ppid: parsed.ppid,
        start_ticks: parsed.start_ticks,
        comm: String::from_utf8_lossy(parsed.comm(text)).into_owned(),
        state: parsed.state,
        cpu_user_ns: parsed.utime_ticks * tick_ns,
        cpu_system_ns: parsed.stime_ticks * tick_ns,
        rss_bytes: parsed.rss_pages * page_size,
        minor_faults: parsed.minor_faults,
        major_faults: parsed.major_faults,
        exit_code: parsed.exit_code,
    }
}

/// Makes montrace the reaper of orphaned descendants, so they stay in its view.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(pid: u32, ppid: u32) -> ProcEntry {
        ProcEntry {
            pid,
            ppid,
            ..ProcEntry::default()
        }
    }

    #[test]
    fn discovers_descendants_parents_first_and_orphans_of_montrace() {
        let known: HashSet<u32> = [10].into_iter().collect();
        // 12 is listed before its parent 11; 30 is an orphan re-parented to montrace (pid 1);
        // 50 and 51 belong to someone else.
        let snapshot = [
            entry(12, 11),
            entry(11, 10),
            entry(30, 1),
            entry(50, 49),
            entry(51, 50),
            entry(1, 0),
        ];
        let found = discover(&known, 1, &snapshot);
        assert_eq!(found.len(), 3);
        let pos = |p| found.iter().position(|&x| x == p).unwrap();
        assert!(pos(11) < pos(12));
        assert!(found.contains(&30));
        assert!(discover(&known, 1, &[entry(10, 1)]).is_empty());
    }

    #[test]
    fn parses_stat_with_odd_comm_and_zombie_exit_code() {
        let stat = "77 (a) b) Z 10 77 77 0 -1 4194560 5 0 6 0 3 4 0 0 20 0 1 0 4242 1000 7 \
                    18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0 0 0 0 0 0 0 0 256";
        let e = parse_stat(77, stat, 10_000_000, 4096).unwrap();
        assert_eq!(
            (e.pid, e.ppid, e.comm.as_str(), e.state),
            (77, 10, "a) b", 'Z')
        );
        assert_eq!(
            (e.start_ticks, e.cpu_user_ns, e.cpu_system_ns),
            (4242, 30_000_000, 40_000_000)
        );
        assert_eq!(
            (e.rss_bytes, e.minor_faults, e.major_faults),
            (7 * 4096, 5, 6)
        );
        assert_eq!(e.exit_code, Some(256));
        assert!(parse_stat(1, "garbage", 1, 1).is_none());
    }

    #[test]
    fn live_scan_finds_own_children() {
        let mut child = std::process::Command::new("sleep")
            .arg("2")
            .spawn()
            .unwrap();
        // The test process plays montrace: its children are the tree.
        let mut poller = Poller::new();
        poller.montrace_pid = std::process::id();
        let (events, vanished) = poller.scan(1);
        assert!(vanished.is_empty(), "{vanished:?}");
        // A child of "montrace" is found with the program it runs (no fork event: its parent is
        // montrace itself).
        let mine: Vec<_> = events.iter().filter(|e| e.pid() == child.id()).collect();
        assert!(
            matches!(mine.as_slice(), [KernelEvent::Exec { filename, .. }] if filename.ends_with("/sleep")),
            "{events:?}"
        );
        child.kill().unwrap();
        child.wait().unwrap();
        let (_, vanished) = poller.scan(2);
        assert_eq!(
            vanished.iter().map(|v| v.pid).collect::<Vec<_>>(),
            [child.id()]
        );
    }
}
