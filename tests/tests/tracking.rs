//! montrace follows the exact process tree: every process, its lineage, processes that leave the
//! tree (daemons), pid reuse, threads, and both kinds of tracepoints.
use tests::{compile_c, kill_leftovers, run_montrace, stdout_number, Proc, Run, MS};

const SHELL_LOOP: &str = "for i in $(seq 1000); do /bin/true; done";

/// The rows of `/bin/true`, each checked to be a child of `parent` that exited 0.
fn true_children<'a>(run: &Run, rows: &'a [Proc], parent: &Proc) -> Vec<&'a Proc> {
    let trues: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.has_filename("/bin/true"))
        .collect();
    for row in &trues {
        assert!(
            row.is_child_of(parent),
            "/bin/true should be a child of {parent:?}, but is {row:?}\n{run:?}"
        );
        assert_eq!(row.exit_code, Some(0), "{row:?}");
        assert_eq!(row.exit_signal, None, "{row:?}");
        assert_eq!(row.exec_count, 1, "{row:?}");
        assert!(!row.alive_at_end, "{row:?}");
        assert!(row.end_time.is_some(), "{row:?}");
    }
    trues
}

fn assert_shell_loop_recorded(run: &Run) {
    run.assert_code(0);
    run.assert_nothing_lost();
    let rows = run.processes();
    let sh = run.root(&rows);
    assert_eq!(
        sh.argv.as_deref(),
        Some(&["sh".to_string(), "-c".into(), SHELL_LOOP.into()][..]),
        "{sh:?}"
    );
    assert_eq!(sh.exit_code, Some(0), "{sh:?}");
    let trues = true_children(run, &rows, sh);
    assert_eq!(trues.len(), 1000, "1000 /bin/true processes ran\n{run:?}");
    for row in &trues {
        assert_eq!(
            row.argv.as_deref(),
            Some(&["/bin/true".to_string()][..]),
            "{row:?}"
        );
    }
    let json = run.run_json();
    assert_eq!(json["processes_started"], rows.len(), "{json}");
    assert_eq!(json["totals"]["alive_at_end"], 0, "{json}");
    assert!(
        rows.iter().all(|p| !p.alive_at_end && p.end_time.is_some()),
        "every process ended"
    );
}

#[test]
fn records_every_process_of_a_shell_loop() {
    let run = run_montrace(&[], &["sh", "-c", SHELL_LOOP]);
    assert_shell_loop_recorded(&run);
    assert_eq!(run.run_json()["tracking_mode"], "tp_btf");
}

#[test]
fn classic_tracepoints_record_the_same_tree() {
    let run = run_montrace(&["--tracepoints", "classic"], &["sh", "-c", SHELL_LOOP]);
    assert_shell_loop_recorded(&run);
    assert_eq!(run.run_json()["tracking_mode"], "tracepoint");
}

#[test]
fn records_every_process_of_parallel_xargs() {
    let run = run_montrace(&[], &["sh", "-c", "seq 3000 | xargs -P8 -n1 /bin/true"]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rows = run.processes();
    let xargs: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.argv.as_ref().is_some_and(|a| a[0] == "xargs"))
        .collect();
    assert_eq!(xargs.len(), 1, "one xargs process: {xargs:?}");
    let trues = true_children(&run, &rows, xargs[0]);
    assert_eq!(trues.len(), 3000, "3000 /bin/true processes ran\n{run:?}");
    // xargs -n1 gave each one number of 1..=3000, once.
    let mut numbers: Vec<u32> = trues
        .iter()
        .map(|p| match p.argv.as_deref() {
            Some([program, n]) if program == "/bin/true" => n.parse().unwrap(),
            other => panic!("unexpected argv {other:?}: {p:?}"),
        })
        .collect();
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=3000).collect::<Vec<u32>>());
    let json = run.run_json();
    assert_eq!(json["processes_started"], rows.len(), "{json}");
    let max = json["max_concurrent"].as_u64().expect("max_concurrent");
    // Not a race to win once: xargs -P8 forks the next /bin/true without waiting for the last,
    // so of 3000 some two overlap beside sh and xargs however the scheduler interleaves them.
    assert!(
        (4..=rows.len() as u64).contains(&max),
        "xargs -P8 runs several at once (sh, seq, xargs and up to 8 /bin/true): {json}"
    );
}

/// A daemon in the shell's way: `( setsid sh -c "..." & )`; the subshell exits at once, the
/// root shell too, and the daemon sleeps `sleep` seconds then burns some CPU.
fn daemon_command(sleep: &str) -> Vec<String> {
    let daemon = format!(
        "sleep {sleep}; i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; echo daemon $$ done"
    );
    vec![
        "sh".into(),
        "-c".into(),
        format!("(setsid sh -c '{daemon}' </dev/null >/dev/null 2>&1 &) ; exit 0"),
    ]
}

/// The daemon's row (the `sh -c` that setsid ran) and its lineage: daemon -> subshell -> root.
fn find_daemon<'a>(run: &Run, rows: &'a [Proc]) -> (&'a Proc, &'a Proc) {
    let root = run.root(rows);
    let daemons: Vec<&Proc> = rows
        .iter()
        .filter(|p| {
            p.argv
                .as_ref()
                .is_some_and(|a| a.len() == 3 && a[0] == "sh" && a[2].starts_with("sleep "))
        })
        .collect();
    assert_eq!(daemons.len(), 1, "one daemon row: {rows:?}\n{run:?}");
    let daemon = daemons[0];
    let parent = rows
        .iter()
        .find(|p| daemon.is_child_of(p))
        .unwrap_or_else(|| panic!("the daemon's parent has no row: {daemon:?}\n{rows:?}"));
    assert_ne!(
        parent.pid, root.pid,
        "the daemon was forked by the subshell"
    );
    assert!(
        parent.is_child_of(root),
        "the subshell is a child of the root sh: {parent:?}\n{root:?}"
    );
    assert!(
        !parent.alive_at_end && parent.exit_code == Some(0),
        "the subshell exited at once: {parent:?}"
    );
    (daemon, root)
}

#[test]
fn waits_for_a_double_forked_daemon() {
    let cmd = daemon_command("1");
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let run = run_montrace(&[], &cmd);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rows = run.processes();
    let (daemon, root) = find_daemon(&run, &rows);
    // Guarantee: the daemon's `sleep 1` never returns early, and montrace waits for it.
    assert!(
        run.wall.as_secs_f64() >= 1.0,
        "montrace waited for the daemon's 1 s sleep, yet returned after {:?}",
        run.wall
    );
    assert!(!daemon.alive_at_end, "the daemon ended: {daemon:?}");
    assert_eq!(daemon.exit_code, Some(0), "{daemon:?}");
    // Only more than nothing: a loop's CPU time is the machine's, but any loop uses some.
    assert!(
        daemon.cpu_ns() > 0,
        "the daemon's loop used CPU: {daemon:?}"
    );
    let sleeps: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.argv.as_ref().is_some_and(|a| a[0] == "sleep"))
        .collect();
    assert_eq!(sleeps.len(), 1, "{sleeps:?}");
    let sleep = sleeps[0];
    assert!(sleep.is_child_of(daemon), "{sleep:?}");
    // montrace followed the daemon past the command's end, to its exit after its `sleep 1`.
    // Not "0.9 s after the root": the root's exit comes after the daemon's fork by however long
    // a busy machine keeps the root shell off a CPU. Guarantees: the daemon exits after its
    // child `sleep` (it waits for it), which lives at least 1 s (nanosleep never returns early);
    // the root, which exits as soon as its subshell has, ends first unless a machine keeps it
    // off every CPU for the whole of that second (scheduler latency is milliseconds).
    let root_end = root.end_time.expect("root end_time");
    let daemon_end = daemon.end_time.expect("daemon end_time");
    let sleep_end = sleep.end_time.expect("sleep end_time");
    assert!(
        daemon_end > root_end
            && daemon_end >= sleep_end
            && sleep_end - sleep.start_time >= 1_000 * MS as i64,
        "the daemon ended {:.3} s after the command, its sleep lived {:.3} s",
        (daemon_end - root_end) as f64 / 1e9,
        (sleep_end - sleep.start_time) as f64 / 1e9
    );
    assert!(rows.iter().all(|p| !p.alive_at_end), "{rows:?}");
    assert_eq!(run.run_json()["linger_expired"], false);
}

#[test]
fn linger_bounds_the_wait() {
    let cmd = daemon_command("5");
    let cmd: Vec<&str> = cmd.iter().map(String::as_str).collect();
    let run = run_montrace(&["--linger", "500ms"], &cmd);
    let rows = run.processes();
    kill_leftovers(&rows);
    run.assert_code(0);
    // Not a timing claim: without --linger montrace waits the daemon's 5 s; 2.5 s of margin
    // over the 500 ms linger is only scheduler latency, which no busy machine makes seconds.
    // Measured by run.json (montrace's start to the end of its recording), less the time its
    // programs took to load: not the test's wall time, which also holds the report's making and
    // the verifier's work, both the machine's.
    let json = run.run_json();
    let recorded =
        json["duration_s"].as_f64().unwrap() - json["ebpf_load_ms"].as_f64().unwrap_or(0.0) / 1e3;
    assert!(
        recorded < 3.0,
        "--linger 500ms should end the wait, yet montrace recorded {recorded:.3} s besides \
         loading its programs ({:?} in all): {json}",
        run.wall
    );
    let (daemon, root) = find_daemon(&run, &rows);
    assert!(!root.alive_at_end, "{root:?}");
    assert!(
        daemon.alive_at_end,
        "the daemon was still running: {daemon:?}"
    );
    assert_eq!(daemon.end_time, None, "{daemon:?}");
    assert_eq!(
        (
            daemon.exit_code,
            daemon.exit_signal,
            daemon.cpu_user_ns,
            daemon.cpu_system_ns,
            daemon.peak_rss_bytes
        ),
        (None, None, None, None, None),
        "no exit figures for a process still running: {daemon:?}"
    );
    let json = run.run_json();
    assert_eq!(json["linger_expired"], true, "{json}");
    // The daemon and its `sleep 5`.
    assert_eq!(json["totals"]["alive_at_end"], 2, "{json}");
}

const PID_REUSE: &str = r#"
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

/* The kernel's struct clone_args up to set_tid_size (CLONE_ARGS_SIZE_VER1, Linux 5.5). */
struct clone_args_v1 {
    uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls;
    uint64_t set_tid, set_tid_size;
};

/* Forks a child that exits with `code`; with `want` set, the child gets exactly that pid
   (clone3's set_tid, root only: no other process of the machine can take it first). */
static pid_t spawn(int code, pid_t want) {
    struct clone_args_v1 args;
    memset(&args, 0, sizeof args);
    args.exit_signal = SIGCHLD;
    if (want != 0) {
        args.set_tid = (uint64_t)(uintptr_t)&want;
        args.set_tid_size = 1;
    }
    pid_t pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0) { fprintf(stderr, "clone3 for pid %d: %s\n", want, strerror(errno)); exit(1); }
    if (pid == 0) _exit(code);
    int status;
    waitpid(pid, &status, 0);
    return pid;
}

int main(void) {
    pid_t a = spawn(3, 0);
    if (spawn(4, a) != a) { fprintf(stderr, "pid %d was not handed out again\n", a); return 1; }
    printf("%d\n", a);
    return 0;
}
"#;

#[test]
fn pid_reuse_yields_two_rows() {
    let program = compile_c("pid_reuse", PID_REUSE);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let pid = stdout_number(&run, 0) as u32;
    let rows = run.processes();
    let root = run.root(&rows);
    let reused: Vec<&Proc> = rows.iter().filter(|p| p.pid == pid).collect();
    assert_eq!(reused.len(), 2, "pid {pid} ran twice: {reused:?}");
    let (first, second) = (reused[0], reused[1]);
    assert!(
        first.start_time < second.start_time,
        "two processes, in the order they started: {reused:?}"
    );
    assert_eq!(
        (first.exit_code, second.exit_code),
        (Some(3), Some(4)),
        "each row has its own process's exit code: {reused:?}"
    );
    for row in [first, second] {
        assert!(row.is_child_of(root), "{row:?}");
        assert!(!row.alive_at_end, "{row:?}");
        assert!(row.end_time.is_some(), "{row:?}");
    }
    assert!(
        first.end_time.unwrap() <= second.start_time,
        "the first ended before the second started: {reused:?}"
    );
    // The events of each process carry its own start_time.
    let events = run.events();
    for row in [first, second] {
        let kinds: Vec<&str> = events
            .iter()
            .filter(|e| e.pid == pid && e.start_time == row.start_time)
            .map(|e| e.kind.as_str())
            .collect();
        assert_eq!(kinds, ["fork", "exit"], "events of {row:?}");
    }
}

const THREADS: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

static long long clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* Each thread burns 100 ms of its own CPU time. */
static void *worker(void *arg) {
    (void)arg;
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < 100000000LL) {}
    return NULL;
}

int main(void) {
    pthread_t threads[3];
    for (int i = 0; i < 3; i++)
        if (pthread_create(&threads[i], NULL, worker, NULL) != 0) return 1;
    for (int i = 0; i < 3; i++) pthread_join(threads[i], NULL);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%lld\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                     + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    return 0;
}
"#;

#[test]
fn records_argv_and_threads() {
    let program = compile_c("threads", THREADS);
    let argv = [program.as_str(), "alpha", "two words", "", "--beta=1"];
    let run = run_montrace(&[], &argv);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rusage_self = stdout_number(&run, 0);
    let rows = run.processes();
    assert_eq!(rows.len(), 1, "threads are not processes: {rows:?}");
    let row = &rows[0];
    assert_eq!(row.filename.as_deref(), Some(program.as_str()), "{row:?}");
    assert_eq!(
        row.argv.as_deref(),
        Some(&argv.map(String::from)[..]),
        "{row:?}"
    );
    assert_eq!(row.exec_count, 1, "{row:?}");
    assert_eq!(row.exit_code, Some(0), "{row:?}");
    // Guarantee: each thread burns until its own CPU clock says 100 ms; load delays that,
    // never shortens it.
    assert!(
        row.cpu_ns() >= 300 * MS,
        "three threads burnt 100 ms each, yet the row says {} ns",
        row.cpu_ns()
    );
    tests::assert_cpu_close("CPU of all threads", row.cpu_ns(), rusage_self);

    let events = run.events();
    let mine: Vec<_> = events.iter().filter(|e| e.pid == row.pid).collect();
    let thread_exits: Vec<_> = mine.iter().filter(|e| e.kind == "thread_exit").collect();
    assert_eq!(
        thread_exits.len(),
        3,
        "one thread_exit per thread: {mine:?}"
    );
    for e in &thread_exits {
        assert_ne!(e.tid, Some(row.pid), "a thread's tid is not the pid: {e:?}");
        let cpu = e.cpu_user_ns.unwrap() + e.cpu_system_ns.unwrap();
        // Guarantee: the thread stops within a clock read of its CPU clock's 100 ms, and time
        // off a CPU (a busy machine) is not CPU time; 20 ms is for its exit's own work.
        assert!(
            (100 * MS..=120 * MS).contains(&cpu),
            "each thread burnt 100 ms of its own, the event says {cpu} ns: {e:?}"
        );
        assert_eq!(e.start_time, row.start_time, "{e:?}");
    }
    let tids: std::collections::BTreeSet<_> = thread_exits.iter().map(|e| e.tid).collect();
    assert_eq!(tids.len(), 3, "three different threads: {thread_exits:?}");
    let exits: Vec<_> = mine.iter().filter(|e| e.kind == "exit").collect();
    assert_eq!(exits.len(), 1, "one exit, for the last thread: {mine:?}");
    assert_eq!(exits[0].tid, Some(row.pid), "{:?}", exits[0]);
    assert_eq!(exits[0].exit_code, Some(0), "{:?}", exits[0]);
    let execs: Vec<_> = mine.iter().filter(|e| e.kind == "exec").collect();
    assert_eq!(execs.len(), 1, "{mine:?}");
    assert_eq!(execs[0].argv.as_deref(), row.argv.as_deref());
    assert!(
        mine.iter().all(|e| e.kind != "fork"),
        "montrace forked the command before tracking: no fork event for it"
    );
}
