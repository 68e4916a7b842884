//! The kernel's sources of one sweep, merged here so that the recorder only routes rows (issue
//! 30): the whole tree's figures from montrace's task iterator (one binary read per sweep), and
//! the live threads' waiting times, from that same pass or else from the waits map.

use std::collections::HashMap;

use crate::kernel::decode::{LiveFigures, WaitTotals};
use crate::kernel::ebpf::{TaskIter, WaitsMap};

/// The task iterator's figures of every live process of the tree, by pid, each with when the
/// pass read it (`LiveFigures::read_ns`).
pub struct KernelSweep {
    pub figures: HashMap<u32, LiveFigures>,
}

impl KernelSweep {
    /// One pass of the iterator over every task.
    pub fn read(iter: &mut TaskIter) -> std::io::Result<KernelSweep> {
        Ok(KernelSweep {
            figures: crate::kernel::decode::live_figures(&iter.sweep()?),
        })
    }

    /// `pid`'s figures, where the pass saw it.
    pub fn of(&self, pid: u32) -> Option<&LiveFigures> {
        self.figures.get(&pid)
    }
}

/// The live threads' waiting times of one sweep. With the task iterator they came in its pass;
/// else from the waits map: a single-threaded process's thread is looked up as it is read, and
/// the live threads of all processes are read once, when a multi-threaded one first needs them.
#[derive(Default)]
pub struct SweepWaits {
    /// Every live thread's totals summed by process, or why they could not be read.
    all: Option<Result<HashMap<u32, WaitTotals>, String>>,
}

impl SweepWaits {
    /// The waiting times of `pid`'s live threads (`threads` of them): from the iterator's pass
    /// where it saw the process, else from `map`. None where no map follows the waits.
    pub fn live(
        &mut self,
        map: Option<&WaitsMap>,
        kernel: Option<&LiveFigures>,
        pid: u32,
        threads: u32,
    ) -> Option<Result<WaitTotals, String>> {
        let map = map?;
        if let Some(live) = kernel {
            return Some(Ok(live.waits));
        }
        Some(self.live_in_map(
            pid,
            threads,
            |tid| map.thread(tid).map_err(|e| e.to_string()),
            || map.read().map_err(|e| e.to_string()),
        ))
    }

    /// [`SweepWaits::live`] from the map's two reads: one thread's totals (none when it has not
    /// left a CPU yet), and every live thread's summed by process.
    fn live_in_map(
        &mut self,
        pid: u32,
        threads: u32,
        thread: impl FnOnce(u32) -> Result<Option<WaitTotals>, String>,
        all: impl FnOnce() -> Result<HashMap<u32, WaitTotals>, String>,
    ) -> Result<WaitTotals, String> {
        if threads == 1 {
            return thread(pid).map(Option::unwrap_or_default);
        }
        match self.all.get_or_insert_with(all) {
            Ok(by_process) => Ok(by_process.get(&pid).copied().unwrap_or_default()),
            Err(e) => Err(e.clone()),
        }
    }
}

/// A process's waiting times: its exited threads' and its live ones'.
pub fn process_waits(exited: WaitTotals, live: &WaitTotals) -> WaitTotals {
    let mut waits = exited;
    waits.add(live);
    waits
}

#[cfg(test)]
mod tests {
    use super::*;

    fn waits(run_queue_ns: u64) -> WaitTotals {
        WaitTotals {
            run_queue_ns,
            ..Default::default()
        }
    }

    #[test]
    fn a_single_threaded_process_is_looked_up_and_the_map_is_read_once_per_sweep() {
        let mut sweep = SweepWaits::default();
        let mut reads = 0;
        let no_read = || -> Result<HashMap<u32, WaitTotals>, String> { panic!("read") };
        let one = sweep.live_in_map(7, 1, |tid| Ok(Some(waits(u64::from(tid)))), no_read);
        assert_eq!(one, Ok(waits(7)));
        // A thread that has not left a CPU yet has waited nothing.
        assert_eq!(sweep.live_in_map(8, 1, |_| Ok(None), no_read), Ok(waits(0)));
        let all = HashMap::from([(10, waits(100)), (11, waits(110))]);
        for (pid, want) in [(10, 100), (11, 110), (12, 0)] {
            let got = sweep.live_in_map(
                pid,
                3,
                |_| panic!("thread"),
                || {
                    reads += 1;
                    Ok(all.clone())
                },
            );
            assert_eq!(got, Ok(waits(want)));
        }
        assert_eq!(reads, 1);
    }

    #[test]
    fn a_failed_read_of_the_map_is_the_answer_for_the_rest_of_the_sweep() {
        let mut sweep = SweepWaits::default();
        let failed = sweep.live_in_map(10, 2, |_| panic!("thread"), || Err("gone".into()));
        assert_eq!(failed, Err("gone".to_string()));
        let again = sweep.live_in_map(11, 2, |_| panic!("thread"), || panic!("read twice"));
        assert_eq!(again, Err("gone".to_string()));
    }

    #[test]
    fn a_process_waited_what_its_exited_and_live_threads_waited() {
        let exited = WaitTotals {
            run_queue_ns: 1,
            blocked_ns: 2,
            sleep_ns: 3,
        };
        let live = WaitTotals {
            run_queue_ns: 10,
            blocked_ns: 20,
            sleep_ns: 30,
        };
        let both = process_waits(exited, &live);
        assert_eq!(
            (both.run_queue_ns, both.blocked_ns, both.sleep_ns),
            (11, 22, 33)
        );
    }
}
