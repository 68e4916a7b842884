//! The /proc sweeps see what the exit figures cannot: memory that came and went while a process
//! lived, and CPU as it is used. Each process's last sample is its exact exit figures.
use std::collections::BTreeMap;

use tests::{compile_c, launch_montrace, Proc, Sample, MIB, MS};

/// `spike STREAM`: takes and touches 300 MiB, holds them 150 ms, and longer until montrace's
/// `--stream` (the file STREAM) has a sweep line after the first that showed the tree at
/// 300 MiB (10 s at most), then frees them.
const SPIKE: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sweep lines in the stream after the first one with the tree at 300 MiB; -1 before it. */
static int sweeps_since_seen(const char *path) {
    static char line[1 << 16];
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int since = -1;
    while (fgets(line, sizeof line, f)) {
        if (!strstr(line, "\"type\":\"sweep\"")) continue;
        if (since >= 0) {
            since++;
            continue;
        }
        const char *rss = strstr(line, "\"rss_bytes\":");
        if (rss && strtoull(rss + 12, NULL, 10) >= (300ull << 20)) since = 0;
    }
    fclose(f);
    return since;
}

int main(int argc, char **argv) {
    if (argc < 2) return 3;
    size_t size = 300u << 20;
    char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    usleep(150000);
    for (int i = 0; i < 1000 && sweeps_since_seen(argv[1]) < 1; i++) usleep(10000);
    int ok = p[size - 1] == 1;
    free(p);
    return ok ? 0 : 2;
}
"#;

/// The spike lasts 150 ms on an idle machine, about three sweeps. It used to last 150 ms
/// whatever the machine did, and a sweep had to land in it: montrace blocked 100 ms in a write
/// to a busy disk, or a sweep late by a page fault, missed it. Now the program holds its memory
/// until montrace's own stream shows the tree at 300 MiB and one sweep more (whose reads of the
/// process come after the memory was all touched: sweeps run one after another), so a sweep
/// sees the spike however late; a montrace that cannot see it still fails, after 10 s.
#[test]
fn sees_a_300mib_spike_of_150ms_at_50ms() {
    let program = compile_c("spike", SPIKE);
    let tmp = tempfile::tempdir().unwrap();
    let stream = tmp.path().join("stream.jsonl");
    let stream = stream.to_str().unwrap();
    let run = launch_montrace(
        &["--interval", "50ms", "--stream", stream],
        &[program.as_str(), stream],
    )
    .ahead_of_the_machine()
    .run();
    run.assert_code(0);
    let rows = run.processes();
    let process = run.root(&rows);
    let samples: Vec<Sample> = run
        .samples()
        .into_iter()
        .filter(|s| s.is_of(process))
        .collect();
    let in_spike: Vec<&Sample> = samples
        .iter()
        .filter(|s| s.source == "procfs")
        .filter(|s| s.rss_bytes.is_some_and(|rss| rss >= 270 * MIB))
        .collect();
    let mib = |bytes: Option<u64>| bytes.map(|b| format!("{:.1}", b as f64 / MIB as f64));
    eprintln!(
        "300 MiB for 150 ms at 50 ms: RSS of the samples (MiB) {:?}",
        samples.iter().map(|s| mib(s.rss_bytes)).collect::<Vec<_>>()
    );
    assert!(
        !in_spike.is_empty(),
        "no sweep saw the 300 MiB the program held for 150 ms: {samples:#?}\n{run:?}"
    );
    for sample in &in_spike {
        let rss = sample.rss_bytes.unwrap();
        assert!(
            rss <= 330 * MIB,
            "the program held 300 MiB and little else, a sample says {:.1} MiB: {sample:?}",
            rss as f64 / MIB as f64
        );
    }
    // The memory is its own: USS sees it too (--memory-detail full is the default).
    assert!(
        in_spike.iter().any(|s| s
            .uss_bytes
            .is_some_and(|uss| (270 * MIB..=330 * MIB).contains(&uss))),
        "the 300 MiB are private memory, yet no USS in the spike is near it: {in_spike:#?}"
    );
    // The exit figures: the peak is the spike, the exit row comes after the free.
    let peak = process.peak_rss_bytes.expect("peak_rss_bytes");
    assert!(
        (300 * MIB..=330 * MIB).contains(&peak),
        "peak RSS {:.1} MiB: {process:?}",
        peak as f64 / MIB as f64
    );
    let last = samples.last().expect("the process has samples");
    assert_eq!(last.source, "exit", "{last:?}");
    assert!(
        last.rss_bytes.expect("exit rows have an RSS") < 270 * MIB,
        "the program freed the 300 MiB before it exited: {last:?}"
    );
}

const FOUR_BURNERS: &str = r#"
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(void) {
    for (int i = 0; i < 4; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            while (cpu_ns() < 300000000LL) {}
            _exit(0);
        }
    }
    int status;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
    return 0;
}
"#;

#[test]
fn last_sample_cpu_matches_the_exit_figures() {
    let program = compile_c("four_burners", FOUR_BURNERS);
    let run = launch_montrace(&[], &[program.as_str()])
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    run.assert_nothing_lost();
    let rows = run.processes();
    let root = run.root(&rows);
    let children: Vec<&Proc> = rows.iter().filter(|p| p.is_child_of(root)).collect();
    assert_eq!(children.len(), 4, "{rows:#?}");
    let samples = run.samples();
    let mut busiest: f64 = 0.0;
    for child in &children {
        let mut own: Vec<&Sample> = samples.iter().filter(|s| s.is_of(child)).collect();
        own.sort_by_key(|s| s.time);
        let last = *own
            .last()
            .unwrap_or_else(|| panic!("no sample of {child:?}"));
        assert_eq!(
            last.source, "exit",
            "the last sample is the exit's: {own:#?}"
        );
        assert_eq!(
            (last.cpu_user_ns, last.cpu_system_ns),
            (child.cpu_user_ns.unwrap(), child.cpu_system_ns.unwrap()),
            "the exit sample and the process row hold the same exit figures: {last:?}\n{child:?}"
        );
        assert_eq!(last.time, child.end_time.unwrap(), "{last:?}\n{child:?}");
        assert!(child.cpu_ns() >= 300 * MS, "{child:?}");
        let sweeps: Vec<&Sample> = own
            .iter()
            .copied()
            .filter(|s| s.source == "procfs")
            .collect();
        eprintln!(
            "child {}: cpu_percent of its sweeps {:?}, of its exit row {:?}",
            child.pid,
            sweeps.iter().map(|s| s.cpu_percent).collect::<Vec<_>>(),
            last.cpu_percent,
        );
        // It burnt 300 ms of CPU (more wall time, sharing the CPUs with three others): a 200 ms
        // sweep found it at least once.
        assert!(!sweeps.is_empty(), "no sweep saw {child:?}: {own:#?}");
        let first = sweeps[0];
        assert!(
            first.cpu_ns() == 0 || first.cpu_percent.is_some_and(|p| p > 0.0),
            "the first sample measures the CPU used since the start: it used {} ns, yet its \
             cpu_percent is {:?}: {first:?}",
            first.cpu_ns(),
            first.cpu_percent
        );
        // Each cpu_percent is the CPU used since the previous row over the time since then, so
        // over the process's rows they add up (weighted by those times) to its whole CPU time:
        // the exact figure of the exit row. (How high one row can go is the business of
        // one_thread_never_shows_more_than_one_cpu.)
        let mut since = child.start_time;
        let mut integral_ns = 0.0;
        for sample in &own {
            integral_ns += sample.cpu_percent.unwrap() / 100.0 * (sample.time - since) as f64;
            since = sample.time;
        }
        // Two things keep this from being exact. CPU% is measured over the moments each process
        // was read, a few ms after its sweep's `time` on a busy machine (this integral takes the
        // rows' times): some per-cent either way. And a row is
        // clamped at 100% per thread: /proc rounds user and system time down to clock ticks
        // each, so a reading can be up to two ticks behind, which over a short interval (the
        // last, before the exit's exact figure) shows as more than a CPU. Each clamped row can
        // so lose up to two ticks of CPU; nothing else removes any.
        // SAFETY: sysconf has no memory-safety preconditions.
        let tick_ns = 1e9 / unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        let clamped = own
            .iter()
            .filter(|s| s.cpu_percent.unwrap() >= 100.0 - 1e-9)
            .count() as f64;
        let exact = child.cpu_ns() as f64;
        eprintln!(
            "child {}: cpu_percent over its rows adds up to {:.4} of its exit figures",
            child.pid,
            integral_ns / exact
        );
        assert!(
            integral_ns <= exact * 1.05 && integral_ns >= exact * 0.95 - clamped * 2.0 * tick_ns,
            "cpu_percent over the rows of {} adds up to {integral_ns:.0} ns of CPU, its exit \
             figures say {} ns ({clamped} rows clamped at 100%): {own:#?}",
            child.pid,
            child.cpu_ns()
        );
        busiest = sweeps
            .iter()
            .filter_map(|s| s.cpu_percent)
            .fold(busiest, f64::max);
    }
    // The four share the machine's CPUs (ahead of anything else, with montrace): each gets a
    // quarter of four CPUs or fewer, all of a CPU with four or more. The busiest sweep of one of
    // them shows most of that share, and, sweep by sweep, their shares add up to most of those
    // CPUs (montrace, the shell and the kernel take a little).
    let cpus = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(4) as f64;
    let share = 100.0 * cpus / 4.0;
    let mut per_sweep: BTreeMap<i64, f64> = BTreeMap::new();
    for sample in samples.iter().filter(|s| s.source == "procfs") {
        if children.iter().any(|c| sample.is_of(c)) {
            *per_sweep.entry(sample.time).or_default() += sample.cpu_percent.unwrap_or(0.0);
        }
    }
    let peak_sum = per_sweep.values().copied().fold(0.0, f64::max);
    eprintln!(
        "busiest child sample {busiest:.1}%, the four together at most {peak_sum:.1}% \
         ({cpus} CPUs for them, {share}% each)"
    );
    assert!(
        busiest > 50.0_f64.min(0.8 * share),
        "a burner sampled at 200 ms uses its share of the CPUs ({share}%), the busiest sample \
         says {busiest:.1}%"
    );
    assert!(
        peak_sum >= 80.0 * cpus,
        "the four burners kept {cpus} CPUs busy, yet their shares add up to {peak_sum:.1}% at \
         most: {per_sweep:?}"
    );
}

const ONE_AFTER_ANOTHER: &str = r#"
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Four single-threaded burners, one after another: each keeps one CPU busy for 250 ms. */
int main(void) {
    for (int i = 0; i < 4; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            while (cpu_ns() < 250000000LL) {}
            _exit(0);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 2;
    }
    return 0;
}
"#;

/// `cpu_percent` is the CPU used since the previous row over the time since then. /proc shows
/// CPU time in whole 10 ms ticks (rounded down) and the exit row has the exact figure, so an
/// exit row soon after a sweep divides up to 10 ms of CPU the /proc row did not show by a
/// short time: a burner that exits 1 ms after a sweep shows 1000% and more. (The same happens,
/// less, to the first row of a process a few ms old.) Each row has a share: a process is read
/// after its start and before its exit, on the clock of its exit row.
#[test]
fn one_thread_never_shows_more_than_one_cpu() {
    let program = compile_c("one_after_another", ONE_AFTER_ANOTHER);
    let run = launch_montrace(&[], &[program.as_str()])
        .ahead_of_the_machine()
        .run();
    run.assert_code(0);
    let rows = run.processes();
    let root = run.root(&rows);
    let burners: Vec<&Proc> = rows.iter().filter(|p| p.is_child_of(root)).collect();
    assert_eq!(burners.len(), 4, "{rows:#?}");
    let samples = run.samples();
    let (mut all, mut over) = (Vec::new(), Vec::new());
    for burner in &burners {
        let mut own: Vec<&Sample> = samples.iter().filter(|s| s.is_of(burner)).collect();
        own.sort_by_key(|s| s.time);
        let mut previous: Option<&Sample> = None;
        for sample in &own {
            let percent = sample.cpu_percent;
            let line = format!(
                "pid {} {} row {:.3} ms after {}, CPU {:.1} ms -> {:.1} ms: cpu_percent {percent:?}",
                burner.pid,
                sample.source,
                (sample.time - previous.map_or(burner.start_time, |p| p.time)) as f64 / 1e6,
                if previous.is_some() { "its previous row" } else { "its start" },
                previous.map_or(0, |p| p.cpu_ns()) as f64 / 1e6,
                sample.cpu_ns() as f64 / 1e6,
            );
            // Between two /proc rows 200 ms apart, the ticks make 5% either way.
            if percent.is_none_or(|percent| percent > 105.0) {
                over.push(line.clone());
            }
            all.push(line);
            previous = Some(sample);
        }
    }
    eprintln!("{}", all.join("\n"));
    assert!(
        over.is_empty(),
        "a single-threaded process keeps at most one CPU busy (the schema: above 100 only with \
         several busy threads), and every row has a share, yet these rows say more or none:\n{}",
        over.join("\n")
    );
}

/// A process that touches 64 MiB, burns 300 ms of CPU, writes 1 MiB with fsync, opens 600
/// descriptors (a table of 1,024, 16 words of bitmap) and closes every third, then says its pid
/// (in the file named by its argument) and sleeps 1.5 s with its figures still.
const STILL: &str = r#"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int main(int argc, char **argv) {
    size_t size = 64u << 20;
    char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    struct timespec t0, t1;
    /* 300 ms of CPU, not of wall time: on a busy machine the wall time holds less CPU. */
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t0);
    volatile unsigned long x = 0;
    do {
        for (int i = 0; i < 100000; i++) x += i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t1);
    } while ((t1.tv_sec - t0.tv_sec) * 1000000000L + (t1.tv_nsec - t0.tv_nsec) < 300000000L);
    char path[4096];
    snprintf(path, sizeof path, "%s.data", argv[1]);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    for (int i = 0; i < 16; i++) write(fd, p, 65536);
    fsync(fd);
    close(fd);
    for (int i = 0; i < 600; i++) open("/dev/null", O_RDONLY);
    for (int i = 3; i < 603; i += 3) close(i);
    /* Give the 64 MiB back now: freeing it at exit is CPU the exit row would count and the still
       rows never saw (milliseconds on a slow machine). */
    int ok = p[100] == 1;
    free(p);
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", argv[1]);
    FILE *f = fopen(tmp, "w");
    fprintf(f, "%d\n", getpid());
    fclose(f);
    rename(tmp, argv[1]);
    sleep(1);
    usleep(500000);
    return ok ? 0 : 2;
}
"#;

/// With the BTF tracepoints the sweeps read the tree from montrace's task iterator, not /proc's
/// text: its figures of a still process are /proc's own (read by this test meanwhile), CPU time
/// exact where /proc has clock ticks.
#[test]
fn the_task_iterator_reads_what_proc_shows() {
    let program = compile_c("still", STILL);
    let tmp = tempfile::tempdir().unwrap();
    let said = tmp.path().join("pid");
    let launch = launch_montrace(
        &["--interval", "100ms", "--tracepoints", "btf"],
        &[program.as_str(), said.to_str().unwrap()],
    );
    let mut seen = None;
    let run = launch.during(|_| {
        tests::wait_for_file(&said);
        let pid: u32 = std::fs::read_to_string(&said)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(150));
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
        let io = std::fs::read_to_string(format!("/proc/{pid}/io")).unwrap();
        let fds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .unwrap()
            .count() as u32;
        let at = tests::now_ns();
        seen = Some((pid, stat, io, fds, at));
    });
    run.assert_code(0);
    assert_eq!(run.run_json()["samples_from"], "task_iter");
    let (pid, stat, io, fds, at) = seen.expect("the program said its pid");
    // /proc/PID/stat after the command name: state is field 3; utime 14, stime 15, minflt 10,
    // majflt 12, vsize 23, rss 24 (pages).
    let fields: Vec<&str> = stat.rsplit_once(") ").unwrap().1.split(' ').collect();
    let field = |n: usize| -> u64 { fields[n - 3].parse().unwrap() };
    let io_field = |name: &str| -> u64 {
        io.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")))
            .unwrap()
            .parse()
            .unwrap()
    };
    let page = 4096;
    let still: Vec<Sample> = run
        .samples()
        .into_iter()
        .filter(|s| s.pid == pid && s.source == "procfs" && s.time > at)
        .collect();
    // Timing: the program sleeps 1.5 s after it says its pid (sleep and usleep never return
    // early), the test reads /proc 150 ms in, so at least 1.35 s of 100 ms sweeps follow: about
    // 13. A busy machine only delays a sweep (the timer waits for the late one, it does not
    // skip); 5 needs montrace to get the CPU 5 times in 1.35 s.
    assert!(still.len() >= 5, "{still:?}");
    let s = &still[0];
    assert_eq!(s.rss_bytes, Some(field(24) * page), "{s:?} {stat}");
    assert_eq!(s.vms_bytes, Some(field(23)), "{s:?} {stat}");
    assert_eq!(s.minor_faults, Some(field(10)), "{s:?} {stat}");
    assert_eq!(s.major_faults, Some(field(12)), "{s:?} {stat}");
    assert_eq!(s.threads, Some(1));
    // Read after the test's own read, inside the program's 1.5 s of sleep(1) and usleep.
    assert_eq!(s.state.as_deref(), Some("S"), "{s:?}");
    // Counted by the iterator's program in the descriptor table's bitmap, as /proc lists them:
    // 400 of the 600, the standard three and what the test's launcher passes on.
    assert_eq!(s.fds, Some(fds), "{s:?}");
    assert!((403..410).contains(&fds), "{fds}");
    assert_eq!(s.read_chars, Some(io_field("rchar")), "{s:?} {io}");
    assert_eq!(s.write_chars, Some(io_field("wchar")), "{s:?} {io}");
    assert_eq!(s.write_bytes, Some(io_field("write_bytes")), "{s:?} {io}");
    assert!(s.write_bytes.unwrap() >= MIB, "the fsync'd MiB: {s:?}");
    // /proc's CPU is in clock ticks, rounded down; the iterator's is exact.
    let tick = 10 * MS;
    let proc_cpu = (field(14) + field(15)) * tick;
    assert!(
        s.cpu_ns() >= proc_cpu && s.cpu_ns() < proc_cpu + 2 * tick,
        "{} ns against /proc's {proc_cpu} ns",
        s.cpu_ns()
    );
    assert!(s.cpu_ns() >= 300 * MS, "{s:?}");
    // Not in clock ticks: the exact figure has digits below 10 ms.
    assert_ne!(s.cpu_ns() % tick, 0, "{s:?}");
    // The exit row's exact CPU is where the still process's rows stopped: after them the
    // program only sleeps and exits, and CPU time counts time on a CPU only (waiting for one on
    // a busy machine adds none). What the wake-ups and the exit cost is small, but not bounded by
    // the program: the kernel's work on its behalf may reclaim memory first under pressure, and
    // in a VM the time the host takes the virtual CPU away mid-exit counts as the task's (7.05 ms
    // in a stress run beside a memory toucher and a page-cache filler; well under a millisecond
    // on an idle machine). 30 ms still tells this process's figure at its exit from any other
    // (the 300 ms it burnt, or none of it).
    let exit = run
        .samples()
        .into_iter()
        .find(|r| r.pid == pid && r.source == "exit")
        .unwrap();
    assert!(
        exit.cpu_ns() >= s.cpu_ns() && exit.cpu_ns() - s.cpu_ns() < 30 * MS,
        "{exit:?} against the still row {s:?}"
    );
}

/// `--samples-from procfs` reads /proc's text, as before the iterator.
#[test]
fn samples_from_procfs_reads_the_text_files() {
    let run = launch_montrace(
        &["--interval", "50ms", "--samples-from", "procfs"],
        &["sleep", "0.3"],
    )
    .run();
    run.assert_code(0);
    assert_eq!(run.run_json()["samples_from"], "procfs");
    let rows: Vec<Sample> = run
        .samples()
        .into_iter()
        .filter(|s| s.source == "procfs")
        .collect();
    // Timing: `sleep 0.3` lives at least 300 ms (nanosleep never returns early) and montrace
    // sweeps at once and then 50 ms after each sweep: about 7. A busy machine delays sweeps,
    // never skips one; 3 needs montrace on a CPU 3 times in 300 ms.
    assert!(rows.len() >= 3, "{rows:?}");
    // Clock ticks.
    assert!(rows.iter().all(|s| s.cpu_ns() % (10 * MS) == 0), "{rows:?}");
}
