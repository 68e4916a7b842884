//! Turns raw readings (`sampler`) and exit figures (`decode`) into the rows of samples.parquet
//! and system.parquet (`model`). Pure: no I/O, no clock; the caller passes the times and the
//! previous sample, and a rate exists only when there is something to measure it against.
//!
//! Times are wall-clock nanoseconds since the Unix epoch (UTC).

use crate::kernel::decode::{ExitStats, WaitTotals};
use crate::sampling::sampler::{CpuTicks, ProcessReading, Stalls, SystemReading};
use crate::store::records::{SampleRecord, SampleSource, SystemRecord};

/// What the next sample of a process needs from its last one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Previous {
    /// When that reading was taken (not the sweep's time: reads within a sweep take a while).
    pub time_ns: i64,
    /// User + system CPU time, ns.
    pub cpu_total_ns: u64,
    /// Its threads then: CPU% cannot exceed 100 per thread.
    pub threads: Option<u32>,
    /// Its waiting times then, when followed.
    pub waits: Option<WaitTotals>,
}

impl Previous {
    /// What the next sample of the process needs from `sample`, read at `measured_ns`.
    pub fn of(sample: &SampleRecord, measured_ns: i64) -> Previous {
        Previous {
            time_ns: measured_ns,
            cpu_total_ns: sample.cpu_user_ns.saturating_add(sample.cpu_system_ns),
            threads: sample.threads,
            waits: waits_of(sample),
        }
    }
}

impl From<&SampleRecord> for Previous {
    fn from(sample: &SampleRecord) -> Previous {
        Previous::of(sample, sample.time_ns)
    }
}

/// The samples.parquet row of one /proc reading. `start_time_ns` is when the process started;
/// `previous` is the last sample of the same process (same pid and start time), None for its
/// first sample, whose CPU share is then measured from the start of the process.
/// `time_ns` is the row's time (the sweep's, shared by its rows); `measured_ns` when this
/// process was read, which the CPU share is computed over.
pub fn process_sample(
    reading: &ProcessReading,
    time_ns: i64,
    measured_ns: i64,
    start_time_ns: i64,
    previous: Option<&Previous>,
) -> SampleRecord {
    let cpu_total_ns = reading.cpu_user_ns.saturating_add(reading.cpu_system_ns);
    let io = reading.io.as_ref();
    let smaps = reading.smaps.as_ref();
    SampleRecord {
        time_ns,
        pid: reading.pid,
        start_time_ns,
        source: SampleSource::Procfs,
        cpu_user_ns: reading.cpu_user_ns,
        cpu_system_ns: reading.cpu_system_ns,
        cpu_percent: cpu_percent(cpu_total_ns, measured_ns, start_time_ns, previous)
            .map(|p| clamp_to_threads(p, Some(reading.threads))),
        rss_bytes: Some(reading.rss_bytes),
        uss_bytes: smaps.map(|s| s.uss_bytes),
        pss_bytes: smaps.map(|s| s.pss_bytes),
        swap_bytes: smaps.map(|s| s.swap_bytes),
        vms_bytes: Some(reading.vms_bytes),
        threads: Some(reading.threads),
        fds: reading.fds,
        read_bytes: io.map(|io| io.read_bytes),
        write_bytes: io.map(|io| io.write_bytes),
        read_chars: io.map(|io| io.read_chars),
        write_chars: io.map(|io| io.write_chars),
        minor_faults: Some(reading.minor_faults),
        major_faults: Some(reading.major_faults),
        state: Some(reading.state.to_string()),
        ..SampleRecord::default()
    }
}

/// The waiting times a sample carries.
fn waits_of(sample: &SampleRecord) -> Option<WaitTotals> {
    Some(WaitTotals {
        run_queue_ns: sample.run_queue_ns?,
        blocked_ns: sample.blocked_ns?,
        sleep_ns: sample.sleep_ns?,
    })
}

/// Adds a process's waiting times so far (its live threads' from the kernel's map and its exited
/// threads' from their exit events) to its sample, with the run-queue and blocked shares since
/// the previous sample (or since it started), measured like `cpu_percent`.
pub fn add_waits(
    sample: &mut SampleRecord,
    waits: WaitTotals,
    measured_ns: i64,
    start_time_ns: i64,
    previous: Option<&Previous>,
) {
    sample.run_queue_ns = Some(waits.run_queue_ns);
    sample.blocked_ns = Some(waits.blocked_ns);
    sample.sleep_ns = Some(waits.sleep_ns);
    // A previous sample without waits (the map could not be read then) gives no share.
    let (since_ns, before) = match previous {
        Some(p) => match p.waits {
            Some(w) => (p.time_ns, w),
            None => return,
        },
        None => (start_time_ns, WaitTotals::default()),
    };
    let Some(elapsed_ns) = measured_ns.checked_sub(since_ns).filter(|&ns| ns > 0) else {
        return;
    };
    let share = |now: u64, then: u64| now.saturating_sub(then) as f64 / elapsed_ns as f64 * 100.0;
    sample.run_queue_percent = Some(share(waits.run_queue_ns, before.run_queue_ns));
    sample.blocked_percent = Some(share(waits.blocked_ns, before.blocked_ns));
}

/// The last samples.parquet row of a process, from the kernel's figures at its exit. What the
/// exit event does not carry (USS, PSS, swap, virtual size, threads, fds) is None. `pid` is the
/// process's (the exit event's `pid`): `stats.tid` is its last thread, which need not be the
/// thread group leader.
pub fn exit_sample(
    pid: u32,
    stats: &ExitStats,
    time_ns: i64,
    start_time_ns: i64,
    previous: Option<&Previous>,
) -> SampleRecord {
    let cpu_total_ns = stats.cpu_user_ns.saturating_add(stats.cpu_system_ns);
    let mut sample = SampleRecord {
        time_ns,
        pid,
        start_time_ns,
        source: SampleSource::Exit,
        cpu_user_ns: stats.cpu_user_ns,
        cpu_system_ns: stats.cpu_system_ns,
        // The exact exit figure against a /proc reading rounded down to clock ticks, over what
        // can be a millisecond: the share is only as good as the bound its threads set.
        cpu_percent: cpu_percent(cpu_total_ns, time_ns, start_time_ns, previous)
            .map(|p| clamp_to_threads(p, previous.and_then(|p| p.threads))),
        // 0 means the kernel had no address space to read at exit: unknown, not empty.
        rss_bytes: (stats.rss_bytes > 0).then_some(stats.rss_bytes),
        uss_bytes: None,
        pss_bytes: None,
        swap_bytes: None,
        vms_bytes: None,
        threads: None,
        fds: None,
        read_bytes: Some(stats.read_bytes),
        write_bytes: Some(stats.write_bytes),
        read_chars: Some(stats.read_chars),
        write_chars: Some(stats.write_chars),
        minor_faults: Some(stats.minor_faults),
        major_faults: Some(stats.major_faults),
        state: Some("X".to_string()),
        ..SampleRecord::default()
    };
    if let (Some(run_queue_ns), Some(blocked_ns), Some(sleep_ns)) =
        (stats.run_queue_ns, stats.blocked_ns, stats.sleep_ns)
    {
        let waits = WaitTotals {
            run_queue_ns,
            blocked_ns,
            sleep_ns,
        };
        add_waits(&mut sample, waits, time_ns, start_time_ns, previous);
    }
    sample
}

/// Share of one CPU (100 = one core busy) since the previous sample, or since the process
/// started. None when no time has passed (or the clock went backwards).
/// A process cannot use more than one CPU per thread: a higher figure is rounding error of
/// /proc's clock-tick CPU times over a short interval.
fn clamp_to_threads(percent: f64, threads: Option<u32>) -> f64 {
    match threads {
        Some(threads) => percent.min(100.0 * threads.max(1) as f64),
        None => percent,
    }
}

fn cpu_percent(
    cpu_total_ns: u64,
    time_ns: i64,
    start_time_ns: i64,
    previous: Option<&Previous>,
) -> Option<f64> {
    let (since_ns, cpu_before_ns) = match previous {
        Some(previous) => (previous.time_ns, previous.cpu_total_ns),
        None => (start_time_ns, 0),
    };
    let elapsed_ns = time_ns.checked_sub(since_ns).filter(|&ns| ns > 0)?;
    // /proc shows CPU time rounded to clock ticks and the exit event the exact figure, so the
    // exit row can be a little below the last /proc row: that is no CPU used, not negative CPU.
    let used_ns = cpu_total_ns.saturating_sub(cpu_before_ns);
    Some(used_ns as f64 / elapsed_ns as f64 * 100.0)
}

/// The system.parquet row of one reading; CPU percentages need the previous reading.
pub fn system_sample(
    reading: &SystemReading,
    time_ns: i64,
    previous: Option<&SystemReading>,
) -> SystemRecord {
    let cpu = previous.and_then(|previous| CpuShares::between(&previous.cpu, &reading.cpu));
    let psi = reading.psi.as_ref();
    SystemRecord {
        time_ns,
        cpu_user_percent: cpu.map(|c| c.user),
        cpu_nice_percent: cpu.map(|c| c.nice),
        cpu_system_percent: cpu.map(|c| c.system),
        cpu_idle_percent: cpu.map(|c| c.idle),
        cpu_iowait_percent: cpu.map(|c| c.iowait),
        cpu_irq_percent: cpu.map(|c| c.irq),
        cpu_steal_percent: cpu.map(|c| c.steal),
        mem_total_bytes: reading.mem_total_bytes,
        mem_available_bytes: reading.mem_available_bytes,
        mem_used_bytes: reading
            .mem_total_bytes
            .saturating_sub(reading.mem_available_bytes),
        mem_cached_bytes: reading.cached_bytes,
        swap_total_bytes: reading.swap_total_bytes,
        swap_used_bytes: reading
            .swap_total_bytes
            .saturating_sub(reading.swap_free_bytes),
        load_1: reading.load.0,
        load_5: reading.load.1,
        load_15: reading.load.2,
        psi_cpu_some_avg10: psi.map(|p| p.cpu_some_avg10),
        psi_memory_some_avg10: psi.map(|p| p.memory_some_avg10),
        psi_memory_full_avg10: psi.map(|p| p.memory_full_avg10),
        psi_io_some_avg10: psi.map(|p| p.io_some_avg10),
        psi_io_full_avg10: psi.map(|p| p.io_full_avg10),
        ..SystemRecord::default()
    }
}

/// The run cgroup's stall shares between two readings of its totals (`previous` and `now`,
/// each with the wall-clock time it was read): percent of the interval during which some or
/// all of its tasks stalled. Nothing when no time passed.
pub fn add_stalls(row: &mut SystemRecord, previous: (i64, &Stalls), now: (i64, &Stalls)) {
    let Some(elapsed_us) = now
        .0
        .checked_sub(previous.0)
        .filter(|&ns| ns > 0)
        .map(|ns| ns as f64 / 1e3)
    else {
        return;
    };
    // A share cannot exceed the interval: the totals and the clock are read a moment apart.
    let share = |a: u64, b: u64| (b.saturating_sub(a) as f64 / elapsed_us * 100.0).min(100.0);
    let (a, b) = (previous.1, now.1);
    row.run_cpu_some_percent = Some(share(a.cpu_some_us, b.cpu_some_us));
    row.run_cpu_full_percent = a.cpu_full_us.zip(b.cpu_full_us).map(|(a, b)| share(a, b));
    row.run_memory_some_percent = Some(share(a.memory_some_us, b.memory_some_us));
    row.run_memory_full_percent = Some(share(a.memory_full_us, b.memory_full_us));
    row.run_io_some_percent = Some(share(a.io_some_us, b.io_some_us));
    row.run_io_full_percent = Some(share(a.io_full_us, b.io_full_us));
}

/// Percent of all CPU time between two readings spent in each state.
#[derive(Clone, Copy, Debug)]
struct CpuShares {
    user: f64,
    nice: f64,
    system: f64,
    idle: f64,
    iowait: f64,
    /// Hard and soft interrupts.
    irq: f64,
    steal: f64,
}

impl CpuShares {
    /// None when no tick passed. A counter that went down (iowait can, see proc_stat(5)) counts
    /// as 0, so the shares still sum to 100.
    fn between(before: &CpuTicks, now: &CpuTicks) -> Option<CpuShares> {
        let user = now.user.saturating_sub(before.user);
        let nice = now.nice.saturating_sub(before.nice);
        let system = now.system.saturating_sub(before.system);
        let idle = now.idle.saturating_sub(before.idle);
        let iowait = now.iowait.saturating_sub(before.iowait);
        let irq = now.irq.saturating_sub(before.irq);
        let softirq = now.softirq.saturating_sub(before.softirq);
        let steal = now.steal.saturating_sub(before.steal);
        let total = user + nice + system + idle + iowait + irq + softirq + steal;
        if total == 0 {
            return None;
        }
        let percent = |ticks: u64| ticks as f64 / total as f64 * 100.0;
        Some(CpuShares {
            user: percent(user),
            nice: percent(nice),
            system: percent(system),
            idle: percent(idle),
            iowait: percent(iowait),
            irq: percent(irq + softirq),
            steal: percent(steal),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stall_shares_are_the_totals_moved_over_the_interval() {
        let then = Stalls {
            cpu_some_us: 1_000,
            cpu_full_us: Some(0),
            memory_some_us: 5,
            memory_full_us: 5,
            io_some_us: 100,
            io_full_us: 50,
        };
        // 500 ms later: 450 ms with a task waiting for a CPU, 50 ms of it all of them; 100 ms
        // with some waiting for I/O; memory untouched.
        let now = Stalls {
            cpu_some_us: 451_000,
            cpu_full_us: Some(50_000),
            io_some_us: 100_100,
            io_full_us: 50,
            ..then
        };
        let mut row = SystemRecord::default();
        add_stalls(&mut row, (START, &then), (START + SECOND / 2, &now));
        assert_eq!(row.run_cpu_some_percent, Some(90.0));
        assert_eq!(row.run_cpu_full_percent, Some(10.0));
        assert_eq!(row.run_memory_some_percent, Some(0.0));
        assert_eq!(row.run_io_some_percent, Some(20.0));
        assert_eq!(row.run_io_full_percent, Some(0.0));
        // Never above the interval; no cpu `full` line before Linux 5.13; no time, no share.
        let late = Stalls {
            cpu_some_us: 2_000_000,
            cpu_full_us: None,
            ..now
        };
        let mut row = SystemRecord::default();
        add_stalls(&mut row, (START, &then), (START + SECOND, &late));
        assert_eq!(row.run_cpu_some_percent, Some(100.0));
        assert_eq!(row.run_cpu_full_percent, None);
        let mut row = SystemRecord::default();
        add_stalls(&mut row, (START, &then), (START, &now));
        assert_eq!(row, SystemRecord::default());
    }

    #[test]
    fn waits_carry_their_share_of_the_interval_since_the_previous_sample() {
        let waits = |rq, blocked, sleep| WaitTotals {
            run_queue_ns: rq,
            blocked_ns: blocked,
            sleep_ns: sleep,
        };
        // First sample, 1 s after the start: 250 ms waiting for a CPU, 100 ms blocked.
        let mut first = SampleRecord::default();
        add_waits(
            &mut first,
            waits(250_000_000, 100_000_000, 7),
            START + SECOND,
            START,
            None,
        );
        assert_eq!(
            (first.run_queue_ns, first.blocked_ns, first.sleep_ns),
            (Some(250_000_000), Some(100_000_000), Some(7))
        );
        assert_eq!(first.run_queue_percent, Some(25.0));
        assert_eq!(first.blocked_percent, Some(10.0));
        // Half a second later: 250 ms more waiting (half the interval), no more blocked.
        let previous = Previous::of(&first, START + SECOND);
        let mut second = SampleRecord::default();
        add_waits(
            &mut second,
            waits(500_000_000, 100_000_000, 7),
            START + SECOND + SECOND / 2,
            START,
            Some(&previous),
        );
        assert_eq!(second.run_queue_percent, Some(50.0));
        assert_eq!(second.blocked_percent, Some(0.0));
        // A previous sample without waits: the totals, but no share.
        let bare = Previous::of(&SampleRecord::default(), START + SECOND);
        let mut third = SampleRecord::default();
        add_waits(
            &mut third,
            waits(1, 2, 3),
            START + 2 * SECOND,
            START,
            Some(&bare),
        );
        assert_eq!(
            (third.run_queue_ns, third.run_queue_percent),
            (Some(1), None)
        );
        // The exit row takes the exit figures.
        let stats = ExitStats {
            run_queue_ns: Some(600_000_000),
            blocked_ns: Some(100_000_000),
            sleep_ns: Some(9),
            ..ExitStats::default()
        };
        let exit = exit_sample(1, &stats, START + 2 * SECOND, START, Some(&previous));
        assert_eq!(exit.run_queue_ns, Some(600_000_000));
        assert_eq!(exit.run_queue_percent, Some(35.0));
        // Without waits in the exit figures (classic tracepoints): none.
        let exit = exit_sample(1, &ExitStats::default(), START + 2 * SECOND, START, None);
        assert_eq!((exit.run_queue_ns, exit.blocked_percent), (None, None));
    }

    /// A sample read at the sweep's own time.
    fn sample_at(
        reading: &ProcessReading,
        time_ns: i64,
        start_time_ns: i64,
        previous: Option<&Previous>,
    ) -> SampleRecord {
        process_sample(reading, time_ns, time_ns, start_time_ns, previous)
    }

    #[test]
    fn cpu_share_is_measured_when_the_process_was_read() {
        let r = reading(500_000_000, 0);
        // The sweep began at 1 s, but this process was read at 1.25 s.
        let sample = process_sample(&r, START + SECOND, START + SECOND + SECOND / 4, START, None);
        assert_eq!(sample.time_ns, START + SECOND);
        assert!((sample.cpu_percent.unwrap() - 40.0).abs() < 1e-9);
    }

    #[test]
    fn cpu_share_never_exceeds_one_cpu_per_thread() {
        // /proc rounded the previous reading down by 10 ms; the exit came 1 ms later.
        let previous = Previous {
            time_ns: START,
            cpu_total_ns: 90_000_000,
            threads: Some(1),
            waits: None,
        };
        let stats = ExitStats {
            cpu_user_ns: 101_000_000,
            ..ExitStats::default()
        };
        let exit = exit_sample(
            7,
            &stats,
            START + 1_000_000,
            START - SECOND,
            Some(&previous),
        );
        assert_eq!(exit.cpu_percent, Some(100.0));
        let two = Previous {
            threads: Some(2),
            ..previous
        };
        let exit = exit_sample(7, &stats, START + 1_000_000, START - SECOND, Some(&two));
        assert_eq!(exit.cpu_percent, Some(200.0));
    }
    use crate::sampling::sampler::{IoReading, Psi, SmapsReading};

    const SECOND: i64 = 1_000_000_000;
    const START: i64 = 1_700_000_000 * SECOND;

    fn reading(cpu_user_ns: u64, cpu_system_ns: u64) -> ProcessReading {
        ProcessReading {
            pid: 123,
            start_ticks: 206709,
            cpu_user_ns,
            cpu_system_ns,
            rss_bytes: 4 << 20,
            vms_bytes: 12 << 20,
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
                uss_bytes: 156 << 10,
                pss_bytes: 275 << 10,
                swap_bytes: 8 << 10,
            }),
        }
    }

    fn assert_close(actual: Option<f64>, expected: f64) {
        let actual = actual.expect("a value");
        assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
    }

    #[test]
    fn process_sample_copies_every_figure() {
        let sample = sample_at(
            &reading(300_000_000, 200_000_000),
            START + SECOND,
            START,
            None,
        );
        assert_eq!(
            sample,
            SampleRecord {
                time_ns: START + SECOND,
                pid: 123,
                start_time_ns: START,
                source: SampleSource::Procfs,
                cpu_user_ns: 300_000_000,
                cpu_system_ns: 200_000_000,
                cpu_percent: Some(50.0),
                rss_bytes: Some(4 << 20),
                uss_bytes: Some(156 << 10),
                pss_bytes: Some(275 << 10),
                swap_bytes: Some(8 << 10),
                vms_bytes: Some(12 << 20),
                threads: Some(4),
                fds: Some(4),
                read_bytes: Some(4096),
                write_bytes: Some(8192),
                read_chars: Some(6976),
                write_chars: Some(1234),
                minor_faults: Some(5432),
                major_faults: Some(12),
                state: Some("S".to_string()),
                ..SampleRecord::default()
            }
        );
    }

    #[test]
    fn missing_optional_readings_stay_none() {
        let mut r = reading(0, 0);
        r.io = None;
        r.smaps = None;
        r.fds = None;
        let sample = sample_at(&r, START + SECOND, START, None);
        assert_eq!(sample.uss_bytes, None);
        assert_eq!(sample.pss_bytes, None);
        assert_eq!(sample.swap_bytes, None);
        assert_eq!(sample.read_bytes, None);
        assert_eq!(sample.write_chars, None);
        assert_eq!(sample.fds, None);
        assert_eq!(sample.cpu_percent, Some(0.0));
    }

    #[test]
    fn first_sample_measures_cpu_from_the_start() {
        // 0.5 s of CPU in the 1 s since it started: half a core, not 0.
        let sample = sample_at(&reading(500_000_000, 0), START + SECOND, START, None);
        assert_close(sample.cpu_percent, 50.0);
    }

    #[test]
    fn later_sample_measures_cpu_from_the_previous_one() {
        let first = sample_at(&reading(500_000_000, 0), START + SECOND, START, None);
        let previous = Previous::from(&first);
        assert_eq!(
            previous,
            Previous {
                time_ns: START + SECOND,
                cpu_total_ns: 500_000_000,
                threads: first.threads,
                waits: None,
            }
        );
        // 0.2 s more CPU over the next 2 s.
        let second = sample_at(
            &reading(600_000_000, 100_000_000),
            START + 3 * SECOND,
            START,
            Some(&previous),
        );
        assert_close(second.cpu_percent, 10.0);
    }

    #[test]
    fn multi_threaded_process_goes_above_100() {
        let previous = Previous {
            time_ns: START + SECOND,
            cpu_total_ns: 1_000_000_000,
            threads: None,
            waits: None,
        };
        // 3.5 s of CPU in 1 s of wall time: three and a half cores.
        let sample = sample_at(
            &reading(4_000_000_000, 500_000_000),
            START + 2 * SECOND,
            START,
            Some(&previous),
        );
        assert_close(sample.cpu_percent, 350.0);
    }

    #[test]
    fn zero_or_negative_elapsed_time_has_no_cpu_percent() {
        let r = reading(500_000_000, 0);
        assert_eq!(sample_at(&r, START, START, None).cpu_percent, None);
        assert_eq!(sample_at(&r, START - 1, START, None).cpu_percent, None);
        let previous = Previous {
            time_ns: START + SECOND,
            cpu_total_ns: 0,
            threads: None,
            waits: None,
        };
        let same_time = sample_at(&r, START + SECOND, START, Some(&previous));
        assert_eq!(same_time.cpu_percent, None);
    }

    fn exit_stats() -> ExitStats {
        ExitStats {
            // The last thread to exit, not the leader.
            tid: 125,
            exit_code: 0,
            cpu_user_ns: 1_234_567_890,
            cpu_system_ns: 100_000_000,
            peak_rss_bytes: 8 << 20,
            rss_bytes: 6 << 20,
            minor_faults: 6000,
            major_faults: 13,
            voluntary_ctxt_switches: 40,
            involuntary_ctxt_switches: 5,
            read_bytes: 8192,
            write_bytes: 16384,
            read_chars: 10000,
            write_chars: 2000,
            ..ExitStats::default()
        }
    }

    #[test]
    fn exit_sample_takes_the_kernel_figures() {
        let sample = exit_sample(123, &exit_stats(), START + 2 * SECOND, START, None);
        assert_eq!(
            sample,
            SampleRecord {
                time_ns: START + 2 * SECOND,
                pid: 123,
                start_time_ns: START,
                source: SampleSource::Exit,
                cpu_user_ns: 1_234_567_890,
                cpu_system_ns: 100_000_000,
                cpu_percent: Some(66.7283945),
                rss_bytes: Some(6 << 20),
                uss_bytes: None,
                pss_bytes: None,
                swap_bytes: None,
                vms_bytes: None,
                threads: None,
                fds: None,
                read_bytes: Some(8192),
                write_bytes: Some(16384),
                read_chars: Some(10000),
                write_chars: Some(2000),
                minor_faults: Some(6000),
                major_faults: Some(13),
                state: Some("X".to_string()),
                ..SampleRecord::default()
            }
        );
    }

    #[test]
    fn exit_sample_below_the_last_tick_based_sample_clamps_at_zero() {
        // /proc said 1.34 s (134 ticks); the exact figure at exit is 1.33456789 s.
        let last = sample_at(
            &reading(1_240_000_000, 100_000_000),
            START + SECOND,
            START,
            None,
        );
        let previous = Previous::from(&last);
        let sample = exit_sample(
            123,
            &exit_stats(),
            START + SECOND + 5_000_000,
            START,
            Some(&previous),
        );
        assert_eq!(sample.cpu_percent, Some(0.0));
    }

    fn cpu(user: u64, nice: u64, system: u64, idle: u64, iowait: u64, irq: u64) -> CpuTicks {
        CpuTicks {
            user,
            nice,
            system,
            idle,
            iowait,
            irq,
            softirq: irq * 2,
            steal: 1,
        }
    }

    fn system(cpu: CpuTicks) -> SystemReading {
        SystemReading {
            cpu,
            mem_total_bytes: 16 << 30,
            mem_available_bytes: 10 << 30,
            mem_free_bytes: 4 << 30,
            cached_bytes: 5 << 30,
            swap_total_bytes: 2 << 30,
            swap_free_bytes: 1 << 30,
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
    fn first_system_sample_has_figures_but_no_cpu_percentages() {
        let record = system_sample(&system(cpu(100, 0, 50, 800, 5, 2)), START, None);
        assert_eq!(
            record,
            SystemRecord {
                time_ns: START,
                cpu_user_percent: None,
                cpu_nice_percent: None,
                cpu_system_percent: None,
                cpu_idle_percent: None,
                cpu_iowait_percent: None,
                cpu_irq_percent: None,
                cpu_steal_percent: None,
                mem_total_bytes: 16 << 30,
                mem_available_bytes: 10 << 30,
                mem_used_bytes: 6 << 30,
                mem_cached_bytes: 5 << 30,
                swap_total_bytes: 2 << 30,
                swap_used_bytes: 1 << 30,
                load_1: 3.2,
                load_5: 0.52,
                load_15: 3.09,
                psi_cpu_some_avg10: Some(17.8),
                psi_memory_some_avg10: Some(1.25),
                psi_memory_full_avg10: Some(0.75),
                psi_io_some_avg10: Some(3.1),
                psi_io_full_avg10: Some(2.05),
                ..SystemRecord::default()
            }
        );
    }

    #[test]
    fn system_cpu_percentages_come_from_tick_deltas() {
        let before = system(cpu(100, 0, 50, 800, 5, 2));
        // Deltas: user 100, nice 10, system 40, idle 800, iowait 10, irq 10, softirq 20,
        // steal 10: 1000 ticks in all.
        let mut now = system(cpu(200, 10, 90, 1600, 15, 12));
        now.cpu.steal = 11;
        let record = system_sample(&now, START + SECOND, Some(&before));
        assert_close(record.cpu_user_percent, 10.0);
        assert_close(record.cpu_nice_percent, 1.0);
        assert_close(record.cpu_system_percent, 4.0);
        assert_close(record.cpu_idle_percent, 80.0);
        assert_close(record.cpu_iowait_percent, 1.0);
        assert_close(record.cpu_irq_percent, 3.0);
        assert_close(record.cpu_steal_percent, 1.0);
        let sum: f64 = [
            record.cpu_user_percent,
            record.cpu_nice_percent,
            record.cpu_system_percent,
            record.cpu_idle_percent,
            record.cpu_iowait_percent,
            record.cpu_irq_percent,
            record.cpu_steal_percent,
        ]
        .iter()
        .map(|p| p.unwrap())
        .sum();
        assert!((sum - 100.0).abs() < 1e-9, "{sum}");
    }

    #[test]
    fn system_cpu_without_any_tick_has_no_percentages() {
        let reading = system(cpu(100, 0, 50, 800, 5, 2));
        let record = system_sample(&reading, START + SECOND, Some(&reading));
        assert_eq!(record.cpu_user_percent, None);
        assert_eq!(record.cpu_idle_percent, None);
    }

    #[test]
    fn iowait_going_down_counts_as_zero() {
        let before = system(cpu(100, 0, 50, 800, 9, 2));
        let now = system(cpu(200, 0, 50, 900, 5, 2));
        let record = system_sample(&now, START + SECOND, Some(&before));
        assert_close(record.cpu_iowait_percent, 0.0);
        assert_close(record.cpu_user_percent, 50.0);
        assert_close(record.cpu_idle_percent, 50.0);
    }

    #[test]
    fn system_without_psi_has_none() {
        let mut reading = system(cpu(100, 0, 50, 800, 5, 2));
        reading.psi = None;
        let record = system_sample(&reading, START, None);
        assert_eq!(record.psi_cpu_some_avg10, None);
        assert_eq!(record.psi_memory_full_avg10, None);
        assert_eq!(record.psi_io_full_avg10, None);
    }
}
