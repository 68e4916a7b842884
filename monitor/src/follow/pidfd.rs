//! Signals that reach only the processes of the tree. A pid alone is not an identity: after a
//! lost exit event (a full ring buffer) the kernel may give a tracked pid to an unrelated
//! process, which montrace must never signal or wait for. Every signal therefore goes through a
//! pidfd (which pins one process, whatever happens to its pid afterwards) whose process is
//! checked to have the start time montrace recorded for it; liveness compares start times too.
//!
//! [`which_to_signal`] is the pure core (which pids, in which order); [`signal_tree`] and
//! [`Handle`] are the thin edges over `pidfd_open(2)`, `pidfd_send_signal(2)` and /proc.
use std::{
    collections::{HashMap, HashSet},
    io,
    os::fd::{AsRawFd as _, OwnedFd},
};

use crate::host;

/// A tracked process: its pid and its start time (ns since boot, as the kernel or /proc gave it).
pub type Identity = (u32, u64);

/// An open handle on one process, checked to be the one montrace tracked.
#[derive(Debug)]
pub struct Handle {
    pid: u32,
    /// None on kernels without pidfd_open (before 5.3): then the start time was checked just
    /// before the signal, which leaves a window of one system call for a reuse.
    fd: Option<OwnedFd>,
}

impl Handle {
    /// Opens `pid` and checks that it started at `start_boot_ns` (to /proc's clock-tick
    /// resolution): None when it is gone or when its pid now belongs to another process.
    pub fn open(pid: u32, start_boot_ns: u64) -> Option<Handle> {
        let fd = match crate::host::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(err) if err.raw_os_error() == Some(libc::ENOSYS) => None,
            Err(_) => return None,
        };
        // Read after the pidfd is open: if the process the pidfd holds has the recorded start
        // time now, it is the tracked one (a reused pid has a later start); if it exited and its
        // pid was reused in between, the start differs and nothing is sent.
        same_process(pid, start_boot_ns).then_some(Handle { pid, fd })
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Sends `signal`; an error when the process is gone.
    pub fn signal(&self, signal: i32) -> io::Result<()> {
        let rc = match &self.fd {
            // SAFETY: a live pidfd, no siginfo, no flags.
            Some(fd) => unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    fd.as_raw_fd(),
                    signal,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                )
            },
            // SAFETY: plain syscall (see `fd`: the start time was checked just before).
            None => unsafe { libc::kill(self.pid as libc::pid_t, signal) as libc::c_long },
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// Whether `pid` is, right now, the process that started at `start_boot_ns`.
pub fn same_process(pid: u32, start_boot_ns: u64) -> bool {
    crate::sampling::procstat::proc_start_boot_ns(pid)
        .is_ok_and(|now| host::same_start_ns(now, start_boot_ns))
}

/// The tracked processes that are gone: no longer in /proc, or their pid now another process's.
pub fn gone(tracked: &[Identity]) -> HashSet<u32> {
    tracked
        .iter()
        .filter(|&&(pid, start)| !same_process(pid, start))
        .map(|&(pid, _)| pid)
        .collect()
}

/// Which pids get a signal to the tree: the tracked ones that are still themselves (`verified`,
/// parents first as given), then the processes /proc shows as their descendants that montrace
/// does not track (their fork events were lost), each after its parent. `parents`: pid → parent
/// pid of every process in /proc.
pub fn which_to_signal(verified: &[u32], parents: &HashMap<u32, u32>) -> Vec<u32> {
    let mut children: HashMap<u32, Vec<u32>> = HashMap::new();
    for (&pid, &ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    children.values_mut().for_each(|c| c.sort_unstable());
    let mut seen: HashSet<u32> = verified.iter().copied().collect();
    let mut out: Vec<u32> = verified.to_vec();
    let mut next = 0;
    while next < out.len() {
        let pid = out[next];
        next += 1;
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            if seen.insert(child) {
                out.push(child);
            }
        }
    }
    out
}

/// pid → parent pid of every process in /proc, with its start time (to open a handle on it).
fn proc_parents() -> (HashMap<u32, u32>, HashMap<u32, u64>) {
    let mut parents = HashMap::new();
    let mut starts = HashMap::new();
    let tick_ns = host::tick_ns();
    crate::sampling::procstat::each_process(|pid, _, stat| {
        parents.insert(pid, stat.ppid);
        starts.insert(pid, stat.start_ticks * tick_ns);
    });
    (parents, starts)
}

/// Sends `signal` to the tree: each tracked process that is still itself (through a checked
/// pidfd, parents first as given), and the untracked descendants /proc shows under them (their
/// fork events were lost), never a process whose pid was reused. A terminating signal is followed
/// by SIGCONT: a stopped process acts on SIGTERM only once it runs again, and would otherwise
/// hold the run open until someone continues it. Returns how many processes were signalled.
pub fn signal_tree(tracked: &[Identity], signal: i32) -> usize {
    let continue_after = matches!(signal, libc::SIGTERM | libc::SIGINT | libc::SIGHUP);
    let mut handles: Vec<Handle> = tracked
        .iter()
        .filter_map(|&(pid, start)| Handle::open(pid, start))
        .collect();
    let (parents, starts) = proc_parents();
    let verified: Vec<u32> = handles.iter().map(Handle::pid).collect();
    for pid in which_to_signal(&verified, &parents)
        .into_iter()
        .skip(verified.len())
    {
        if let Some(handle) = starts.get(&pid).and_then(|&start| Handle::open(pid, start)) {
            handles.push(handle);
        }
    }
    let mut sent = 0;
    for handle in &handles {
        if handle.signal(signal).is_ok() {
            sent += 1;
            if continue_after {
                let _ = handle.signal(libc::SIGCONT);
            }
        }
    }
    sent
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn untracked_descendants_follow_their_parents_and_strangers_are_left_out() {
        // 10 → 11 → 12 (12 untracked: its fork event was lost), 10 → 13; 20 is a stranger
        // with a child 21; 1 is init.
        let parents = HashMap::from([
            (1, 0),
            (10, 1),
            (11, 10),
            (12, 11),
            (13, 10),
            (20, 1),
            (21, 20),
        ]);
        assert_eq!(which_to_signal(&[10, 11], &parents), [10, 11, 13, 12]);
        // A tracked pid that is no longer itself is not in `verified`: nothing under it either
        // unless another verified process is its ancestor.
        assert_eq!(which_to_signal(&[], &parents), Vec::<u32>::new());
    }

    #[test]
    fn a_process_is_itself_only_with_its_own_start_time() {
        let me = std::process::id();
        let start = crate::sampling::procstat::proc_start_boot_ns(me).unwrap();
        assert!(same_process(me, start));
        assert!(!same_process(me, start + 10_000_000_000));
        assert!(Handle::open(me, start).is_some());
        assert!(Handle::open(me, start.saturating_sub(10_000_000_000)).is_none());
        assert_eq!(gone(&[(me, start)]), HashSet::new());
        assert_eq!(gone(&[(me, start + 10_000_000_000)]), HashSet::from([me]));
    }

    #[test]
    fn a_handle_signals_its_process_and_not_a_reused_pid() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = crate::sampling::procstat::proc_start_boot_ns(pid).unwrap();
        // A wrong start time (as after a reuse): nothing is sent.
        assert_eq!(
            signal_tree(&[(pid, start + 10_000_000_000)], libc::SIGTERM),
            0
        );
        assert!(child.try_wait().unwrap().is_none());
        assert_eq!(signal_tree(&[(pid, start)], libc::SIGTERM), 1);
        let status = child.wait().unwrap();
        use std::os::unix::process::ExitStatusExt as _;
        assert_eq!(status.signal(), Some(libc::SIGTERM));
    }
}
