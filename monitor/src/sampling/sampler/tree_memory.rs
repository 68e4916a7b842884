//! The tree's memory at one sweep, each memory image counted once.
//!
//! Summing every live process's RSS counts one address space several times: a child between
//! `vfork` (or any `clone(CLONE_VM)`) and its exec runs in its parent's address space, so /proc
//! (and the task iterator) show it the parent's whole RSS, USS and PSS. A sweep that lands there
//! doubled the tree's figure (a 350 MiB Python running `subprocess.run(["/bin/true"])` was seen
//! at 822 MiB and stopped by `--limit rss=500MiB`). A `fork`ed child has its own address space
//! but shares its parent's pages until either writes: RSS counts them in both, PSS splits them.
//!
//! So the tree's figure comes, in order of preference, from (`TreeMemorySource`):
//! 1. the run cgroup's own accounting of resident pages (each page once, whoever maps it);
//! 2. the sum of PSS over the tree's address spaces (`--memory-detail full`): shared pages are
//!    split between their sharers, so nothing is counted twice;
//! 3. the sum of RSS over the tree's address spaces (`--memory-detail basic`, no cgroup):
//!    CLONE_VM sharers once; a forked child's not-yet-copied pages still count in each.
//!
//! Address spaces are told apart with `kcmp(KCMP_VM)` between a process and its parent, the only
//! pair a CLONE_VM sharer forms in practice (a vfork child and the process that made it), asked
//! before the sweep reads anything and only for a process that has not exec'd since its fork
//! (`Recorder::sharing_parents`): a vfork child execs within microseconds, and asked after the
//! reading it would be found on its own while its figures were its parent's.
pub use crate::store::model::{SweepMemory, TreeMemorySource};

/// One live process's memory at a sweep.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Member {
    pub rss: Option<u64>,
    pub uss: Option<u64>,
    pub pss: Option<u64>,
}

impl SweepMemory {
    /// The tree's figure by `source`; `cgroup` is the run cgroup's reading (for `Cgroup`).
    pub fn figure(&self, source: TreeMemorySource, cgroup: Option<u64>) -> Option<u64> {
        match source {
            TreeMemorySource::Cgroup => cgroup,
            TreeMemorySource::Pss => self.pss_or_rss,
            TreeMemorySource::RssByAddressSpace => self.rss,
        }
    }
}

/// Which address space each member uses: the index of one member of its group, the same for
/// all members that share it. `parents[i]` is the index of member i's parent, where the parent
/// is a member too; `same(i, j)` says whether members i and j share an address space (None:
/// cannot tell, e.g. kcmp refused: they count apart). Only parent-child pairs are asked; sharing
/// is transitive (a vfork child's vfork child shares its grandparent's).
pub fn address_spaces(
    parents: &[Option<usize>],
    mut same: impl FnMut(usize, usize) -> Option<bool>,
) -> Vec<usize> {
    let mut group: Vec<usize> = (0..parents.len()).collect();
    fn root(group: &mut [usize], mut i: usize) -> usize {
        while group[i] != i {
            group[i] = group[group[i]];
            i = group[i];
        }
        i
    }
    for (child, parent) in parents.iter().enumerate() {
        let Some(parent) = *parent else { continue };
        if parent == child || parent >= parents.len() {
            continue;
        }
        if same(child, parent) == Some(true) {
            let (a, b) = (root(&mut group, child), root(&mut group, parent));
            group[a.max(b)] = a.min(b);
        }
    }
    (0..parents.len()).map(|i| root(&mut group, i)).collect()
}

/// The sweep's sums, each address space once: `spaces` from [`address_spaces`]. Members of one
/// space read one set of counters at moments a few microseconds apart; the largest reading
/// stands for the space.
pub fn sum_once(spaces: &[usize], members: &[Member]) -> SweepMemory {
    let mut by_space: std::collections::BTreeMap<usize, Member> = Default::default();
    let mut pss_or_rss: std::collections::BTreeMap<usize, u64> = Default::default();
    for (&space, m) in spaces.iter().zip(members) {
        let max = |a: Option<u64>, b: Option<u64>| a.max(b);
        let entry = by_space.entry(space).or_default();
        entry.rss = max(entry.rss, m.rss);
        entry.uss = max(entry.uss, m.uss);
        entry.pss = max(entry.pss, m.pss);
        if let Some(v) = m.pss.or(m.rss) {
            let slot = pss_or_rss.entry(space).or_default();
            *slot = (*slot).max(v);
        }
    }
    let total = |f: fn(&Member) -> Option<u64>| {
        by_space
            .values()
            .filter_map(f)
            .fold(None, |sum: Option<u64>, v| Some(sum.unwrap_or(0) + v))
    };
    SweepMemory {
        rss: total(|m| m.rss),
        uss: total(|m| m.uss),
        pss: total(|m| m.pss),
        pss_or_rss: (!pss_or_rss.is_empty()).then(|| pss_or_rss.values().sum()),
    }
}

/// `kcmp(2)`'s `KCMP_VM` (include/uapi/linux/kcmp.h).
const KCMP_VM: libc::c_long = 1;

/// Whether two processes share one address space (`kcmp(pid1, pid2, KCMP_VM)`). None when the
/// kernel cannot say: built without kcmp (CONFIG_KCMP), a process gone, or one montrace may not
/// ptrace-read (a setuid program).
pub fn same_address_space(pid1: u32, pid2: u32) -> Option<bool> {
    // SAFETY: kcmp compares two processes' kernel objects; it takes no pointer of ours.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            pid1 as libc::pid_t,
            pid2 as libc::pid_t,
            KCMP_VM,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    // 0: equal; 1 and 2: ordered unequal; 3: unequal, order unknown.
    match r {
        0 => Some(true),
        1..=3 => Some(false),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rss: u64, uss: Option<u64>, pss: Option<u64>) -> Member {
        Member {
            rss: Some(rss),
            uss,
            pss,
        }
    }

    #[test]
    fn a_vfork_child_before_exec_counts_once() {
        // 0: Python (350), 1: its vfork child (the same address space), 2: a shell, 3: its
        // forked child (its own address space).
        let parents = [None, Some(0), Some(0), Some(2)];
        let mut asked = Vec::new();
        let spaces = address_spaces(&parents, |a, b| {
            asked.push((a, b));
            Some(a == 1 && b == 0)
        });
        assert_eq!(asked, [(1, 0), (2, 0), (3, 2)], "only parent-child pairs");
        assert_eq!(spaces, [0, 0, 2, 3]);
        let members = [
            m(350, Some(340), Some(345)),
            m(351, Some(341), Some(346)),
            m(4, Some(1), Some(2)),
            m(3, None, None),
        ];
        let sums = sum_once(&spaces, &members);
        assert_eq!(
            sums,
            SweepMemory {
                rss: Some(351 + 4 + 3),
                uss: Some(341 + 1),
                pss: Some(346 + 2),
                pss_or_rss: Some(346 + 2 + 3),
            }
        );
        assert_eq!(sums.figure(TreeMemorySource::Pss, Some(9)), Some(351));
        assert_eq!(
            sums.figure(TreeMemorySource::RssByAddressSpace, None),
            Some(358)
        );
        assert_eq!(sums.figure(TreeMemorySource::Cgroup, Some(9)), Some(9));
        assert_eq!(sums.figure(TreeMemorySource::Cgroup, None), None);
    }

    #[test]
    fn sharing_is_transitive_and_unknown_counts_apart() {
        // 0 <- 1 <- 2 share (nested vfork); 3 <- 4: kcmp cannot tell.
        let parents = [None, Some(0), Some(1), None, Some(3)];
        let spaces = address_spaces(&parents, |a, _| (a != 4).then_some(true));
        assert_eq!(spaces, [0, 0, 0, 3, 4]);
        let members = [m(10, None, None); 5];
        assert_eq!(sum_once(&spaces, &members).rss, Some(30));
        assert_eq!(sum_once(&spaces, &members).uss, None);
        // A parent index that is out of range, or the member itself, is ignored.
        assert_eq!(
            address_spaces(&[Some(0), Some(7)], |_, _| Some(true)),
            [0, 1]
        );
        assert_eq!(sum_once(&[], &[]), SweepMemory::default());
    }

    #[test]
    fn live_kcmp_tells_a_forked_child_from_the_process_itself() {
        let own = std::process::id();
        let mut child = std::process::Command::new("sleep")
            .arg("5")
            .spawn()
            .unwrap();
        let same_self = same_address_space(own, own);
        let same_child = same_address_space(own, child.id());
        child.kill().unwrap();
        child.wait().unwrap();
        // Kernels without kcmp (CONFIG_KCMP off) answer None for both: that only costs the
        // deduplication where no run cgroup exists.
        if same_self.is_some() {
            assert_eq!(same_self, Some(true));
            assert_eq!(same_child, Some(false));
        } else {
            assert_eq!(same_child, None);
        }
    }
}
