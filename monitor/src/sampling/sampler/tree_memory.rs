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
//!
//! A row's USS and PSS describe the address space the process has at that sweep, never one it
//! had before ([`SmapsImage`], [`row_smaps`]): smaps_rollup is read again only while nothing says
//! the address space changed, and a row whose read finds none (a process between leaving its
//! address space and becoming a zombie, an exec under way) carries no USS/PSS. Repeating the
//! figures a vfork or CLONE_VM child read while it shared its parent's address space, once it
//! no longer shared it (it had exec'd, or was exiting: kcmp then finds it apart), counted its
//! parent's whole image a second time (a CI run's USS peak of 724 MiB for a 359 MiB tree).
use crate::sampling::sampler::SmapsReading;
pub use crate::store::model::{SweepMemory, TreeMemorySource};
use std::collections::HashMap;

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

/// What montrace knows of a process's address space at one sweep without reading
/// smaps_rollup: figures read under one `SmapsImage` still describe the process at a later sweep
/// only under the same one (`same_as`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmapsImage {
    pub rss_bytes: u64,
    /// Its execs so far (each gives it a new address space).
    pub exec_count: u32,
    /// The parent whose address space it shares at this sweep (`Recorder::sharing_parents`).
    pub shares_with: Option<u32>,
}

impl SmapsImage {
    /// Whether `now` is the address space this was: a process never joins an address space
    /// after its creation, so one that shared its parent's then and still shares it now has
    /// kept it; one that shared it then and does not now has left it (exec or exit), and what
    /// was read then is its parent's image. An exec or a move of RSS says it changed.
    pub fn same_as(&self, now: &SmapsImage) -> bool {
        self == now
    }
}

/// smaps_rollup figures as read, and the address space they describe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SmapsSeen {
    pub image: SmapsImage,
    /// When they were read (wall ns).
    pub read_at: i64,
    pub smaps: SmapsReading,
}

/// The smaps figures a sweep's row carries: none where the process has no address space
/// (`vms_bytes` 0: it has left it on its way out, or is a kernel thread); else `fresh`, read
/// this sweep; else the `cached` ones when the sweep asked whether to read them (`asked`) and
/// was told not to (`Some(false)`: the same address space, read lately). A read that was wanted
/// and brought nothing (the process left its address space meanwhile, or the file could not be
/// read) or that was not even asked for leaves the row without: repeating figures then would
/// count an image the process no longer maps.
pub fn row_smaps(
    vms_bytes: u64,
    fresh: Option<SmapsReading>,
    asked: Option<bool>,
    cached: Option<&SmapsSeen>,
) -> Option<SmapsReading> {
    match (fresh, asked) {
        _ if vms_bytes == 0 => None,
        (Some(fresh), _) => Some(fresh),
        (None, Some(false)) => cached.map(|c| c.smaps),
        (None, _) => None,
    }
}

/// The tree's fork families: a process and the forks of it (and of those) that have not
/// exec'd since, which share its pages copy-on-write until either side writes. A fork, an exec
/// or an exit in a family changes how its pages are shared, so each member's PSS and USS, and
/// nothing outside it. A family is named by the pid of its first process (only a name: it stays
/// while members live, after that process ended). Where two families come to share a name (a
/// first process that exec'd keeps its pid as the name of its new one), a change in either
/// marks both: figures read again for nothing, never figures left stale.
#[derive(Debug, Default)]
pub struct ForkFamilies {
    /// The family of each live process that joined one by a fork (others are their own).
    family: HashMap<u32, u32>,
    /// How many live processes joined each family by a fork.
    members: HashMap<u32, usize>,
    /// Families whose first process ended while members lived on.
    ended_first: std::collections::HashSet<u32>,
    /// When each family's sharing last changed (wall ns).
    changed: HashMap<u32, i64>,
}

impl ForkFamilies {
    /// The family of `pid`.
    pub fn of(&self, pid: u32) -> u32 {
        self.family.get(&pid).copied().unwrap_or(pid)
    }

    /// When the sharing of `pid`'s family last changed (wall ns), if it did.
    pub fn changed_at(&self, pid: u32) -> Option<i64> {
        self.changed.get(&self.of(pid)).copied()
    }

    /// `pid` was forked from `parent` at `at`: it joins the parent's family.
    pub fn fork(&mut self, pid: u32, parent: u32, at: i64) {
        let family = self.of(parent);
        self.leave(pid);
        if family != pid {
            self.family.insert(pid, family);
            *self.members.entry(family).or_default() += 1;
        }
        self.mark(family, at);
    }

    /// `pid` exec'd at `at`: it leaves its family (whose pages it no longer maps) for its own.
    pub fn exec(&mut self, pid: u32, at: i64) {
        self.mark(self.of(pid), at);
        self.leave(pid);
        self.mark(pid, at);
    }

    /// `pid` ended at `at`: its family's pages lose a sharer.
    pub fn exit(&mut self, pid: u32, at: i64) {
        self.mark(self.of(pid), at);
        self.leave(pid);
        if self.members.contains_key(&pid) {
            self.ended_first.insert(pid);
        } else {
            self.changed.remove(&pid);
        }
    }

    fn mark(&mut self, family: u32, at: i64) {
        let last = self.changed.entry(family).or_insert(at);
        *last = (*last).max(at);
    }

    fn leave(&mut self, pid: u32) {
        let Some(family) = self.family.remove(&pid) else {
            return;
        };
        if let Some(count) = self.members.get_mut(&family) {
            *count -= 1;
            if *count == 0 {
                self.members.remove(&family);
                if self.ended_first.remove(&family) {
                    self.changed.remove(&family);
                }
            }
        }
    }

    /// How many families it keeps a time for (nothing outlives its processes).
    pub fn families_timed(&self) -> usize {
        self.changed.len()
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

    const MIB: u64 = 1 << 20;

    fn smaps(uss: u64, pss: u64) -> SmapsReading {
        SmapsReading {
            uss_bytes: uss,
            pss_bytes: pss,
            swap_bytes: 0,
        }
    }

    fn image(rss_bytes: u64, exec_count: u32, shares_with: Option<u32>) -> SmapsImage {
        SmapsImage {
            rss_bytes,
            exec_count,
            shares_with,
        }
    }

    #[test]
    fn figures_read_in_a_parents_address_space_stand_only_while_the_child_still_shares_it() {
        let shared = image(361 * MIB, 0, Some(100));
        assert!(shared.same_as(&image(361 * MIB, 0, Some(100))));
        // kcmp finds it apart now (it exec'd, or left the address space on its way out), though
        // its RSS reads the same and its exec is not known yet.
        assert!(!shared.same_as(&image(361 * MIB, 0, None)));
        // Its own address space: an exec, or a move of RSS, is another one.
        let own = image(4 * MIB, 0, None);
        assert!(own.same_as(&image(4 * MIB, 0, None)));
        assert!(!own.same_as(&image(4 * MIB, 1, None)));
        assert!(!own.same_as(&image(4 * MIB + 4096, 0, None)));
    }

    #[test]
    fn a_row_repeats_figures_only_where_the_sweep_chose_not_to_read_them() {
        let seen = SmapsSeen {
            image: image(8 * MIB, 0, None),
            read_at: 1,
            smaps: smaps(6 * MIB, 7 * MIB),
        };
        let fresh = smaps(5 * MIB, 5 * MIB);
        let vms = 64 * MIB;
        assert_eq!(
            row_smaps(vms, Some(fresh), Some(true), Some(&seen)),
            Some(fresh)
        );
        assert_eq!(
            row_smaps(vms, None, Some(false), Some(&seen)),
            Some(seen.smaps)
        );
        assert_eq!(row_smaps(vms, None, Some(false), None), None);
        // Wanted, and smaps_rollup answered nothing (ESRCH: it has left its address space).
        assert_eq!(row_smaps(vms, None, Some(true), Some(&seen)), None);
        // Not asked: the reader saw no address space.
        assert_eq!(row_smaps(vms, None, None, Some(&seen)), None);
        // VmSize 0: nothing, whatever was read or kept.
        assert_eq!(row_smaps(0, None, Some(false), Some(&seen)), None);
        assert_eq!(row_smaps(0, Some(fresh), Some(true), Some(&seen)), None);
    }

    /// The sweep of the CI failure (USS 724 MiB for a 359 MiB tree): Python (pid 100) and its
    /// vfork child (101), read at an earlier sweep inside Python's address space, now exiting
    /// after its exec: VmSize 0, smaps_rollup ESRCH, kcmp apart from its parent.
    #[test]
    fn a_child_that_left_its_parents_address_space_does_not_bring_its_image_back() {
        let parent = smaps(361 * MIB, 361 * MIB);
        let child_then = SmapsSeen {
            image: image(362 * MIB, 0, Some(100)),
            read_at: 1,
            smaps: parent,
        };
        let child_now = row_smaps(0, None, None, Some(&child_then));
        let members = [
            Member {
                rss: Some(362 * MIB),
                uss: Some(parent.uss_bytes),
                pss: Some(parent.pss_bytes),
            },
            Member {
                rss: Some(0),
                uss: child_now.map(|s| s.uss_bytes),
                pss: child_now.map(|s| s.pss_bytes),
            },
        ];
        let spaces = address_spaces(&[None, Some(0)], |_, _| Some(false));
        assert_eq!(spaces, [0, 1]);
        let sums = sum_once(&spaces, &members);
        assert_eq!((sums.uss, sums.pss), (Some(361 * MIB), Some(361 * MIB)));
        // Before, its figures from inside the parent's address space were repeated: twice.
        let repeated = Member {
            uss: Some(parent.uss_bytes),
            pss: Some(parent.pss_bytes),
            ..members[1]
        };
        let doubled = sum_once(&spaces, &[members[0], repeated]);
        assert_eq!(doubled.uss, Some(722 * MIB));
    }

    #[test]
    fn a_fork_family_is_a_process_and_its_forks_until_they_exec() {
        let mut f = ForkFamilies::default();
        // 1 (the command) forks 2, 2 forks 3: one family, named 1.
        f.fork(2, 1, 10);
        f.fork(3, 2, 20);
        assert_eq!([f.of(1), f.of(2), f.of(3)], [1, 1, 1]);
        assert_eq!(f.changed_at(3), Some(20));
        // 2 execs: it leaves (the family's pages lose a sharer) for a family of its own; 3,
        // forked before the exec, still shares 1's pages.
        f.exec(2, 30);
        assert_eq!([f.of(2), f.of(3)], [2, 1]);
        assert_eq!([f.changed_at(1), f.changed_at(2)], [Some(30), Some(30)]);
        // 2's fork 4 is in 2's family: 1's is not marked.
        f.fork(4, 2, 40);
        assert_eq!([f.changed_at(1), f.changed_at(4)], [Some(30), Some(40)]);
        // 1 ends: its family lives on in 3 and is marked.
        f.exit(1, 50);
        assert_eq!(f.changed_at(3), Some(50));
        assert_eq!(f.changed_at(4), Some(40));
        // Each family's time goes with its last process.
        f.exit(3, 60);
        f.exit(4, 70);
        assert_eq!(f.changed_at(2), Some(70));
        f.exit(2, 80);
        assert_eq!(f.families_timed(), 0, "{f:?}");
        // A process not seen forking (attach's, the command) is its own family.
        assert_eq!((f.of(9), f.changed_at(9)), (9, None));
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
