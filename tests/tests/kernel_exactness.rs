//! The exactness subset that the kernel tier (`cargo xtask test --kernels`) runs inside a VM on
//! every kernel of its list, and the end-to-end tier on this machine's kernel: exact process
//! counts in both tracepoint modes, a row per process however many execs it makes, and exit
//! figures (CPU and peak memory) against the kernel's own (`wait4`'s rusage). No timing
//! assertion: a VM without KVM runs everything several times slower.
use tests::{assert_cpu_close, compile_c, run_montrace, stdout_number, Proc, Run};

const TEN_TRUES: &str = "for i in 1 2 3 4 5 6 7 8 9 10; do /bin/true; done; sleep 0.2";

/// The shell, ten `/bin/true` and a `sleep`: exactly twelve rows, each with its exit figures.
fn assert_twelve_rows(run: &Run, mode: &str) {
    run.assert_code(0);
    run.assert_nothing_lost();
    let json = run.run_json();
    assert_eq!(json["tracking_mode"], mode, "{json}");
    let rows = run.processes();
    assert_eq!(rows.len(), 12, "sh, 10 /bin/true, sleep: {rows:#?}");
    assert_eq!(json["processes_started"], 12, "{json}");
    let sh = run.root(&rows);
    let trues: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.has_filename("/bin/true"))
        .collect();
    assert_eq!(trues.len(), 10, "{rows:#?}");
    for p in &rows {
        assert!(p.pid == sh.pid || p.is_child_of(sh), "{p:?}");
        assert_eq!(p.exit_code, Some(0), "{p:?}");
        assert!(p.cpu_user_ns.is_some() && p.cpu_ns() > 0, "exit CPU: {p:?}");
        assert!(p.peak_rss_bytes.is_some_and(|b| b > 0), "exit peak: {p:?}");
    }
    for p in &trues {
        assert_eq!(p.exec_count, 1, "{p:?}");
    }
}

#[test]
fn a_loop_of_ten_trues_is_twelve_rows() {
    let run = run_montrace(&[], &["sh", "-c", TEN_TRUES]);
    assert_twelve_rows(&run, "tp_btf");
    // The BTF tracepoints follow the waits: the sleep's row slept.
    let rows = run.processes();
    let sleep = rows
        .iter()
        .find(|p| p.argv.as_ref().is_some_and(|a| a[0] == "sleep"))
        .expect("a sleep row");
    // Guarantee: nanosleep never returns early and sleeps interruptibly (S), however slow the
    // VM: at least 200 ms asleep; 150 ms leaves room for the tick a VM's timer may round by.
    assert!(
        sleep.sleep_ns.is_some_and(|ns| ns >= 150_000_000),
        "sleep 0.2 slept: {sleep:?}"
    );
}

#[test]
fn classic_tracepoints_give_the_same_twelve_rows() {
    let run = run_montrace(&["--tracepoints", "classic"], &["sh", "-c", TEN_TRUES]);
    assert_twelve_rows(&run, "tracepoint");
    // What the classic tracepoints cannot measure is null, and run.json names it.
    assert!(run.processes().iter().all(|p| p.run_queue_ns.is_none()));
    let json = run.run_json();
    let waits = json["features"]
        .as_array()
        .and_then(|f| f.iter().find(|f| f["name"] == "waits"))
        .unwrap_or_else(|| panic!("run.json names the waits feature: {json}"));
    assert_eq!(waits["available"], false, "{json}");
}

const FORK_STORM: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

/* Forks N children at once (each exits at once), then reaps them all. */
int main(int argc, char **argv) {
    int n = atoi(argv[1]);
    for (int i = 0; i < n; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) _exit(0);
    }
    int reaped = 0;
    while (wait(NULL) > 0) reaped++;
    printf("%d\n", reaped);
    return reaped == n ? 0 : 2;
}
"#;

#[test]
fn a_fork_storm_of_n_processes_is_n_rows() {
    const N: usize = 300;
    let program = compile_c("fork_storm", FORK_STORM);
    let run = run_montrace(&[], &[program.as_str(), &N.to_string()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    assert_eq!(stdout_number(&run, 0), N as u64);
    let rows = run.processes();
    let root = run.root(&rows);
    let children = rows.iter().filter(|p| p.is_child_of(root)).count();
    assert_eq!(children, N, "{N} children");
    assert_eq!(rows.len(), N + 1);
    assert_eq!(run.run_json()["processes_started"], N + 1);
}

#[test]
fn an_exec_chain_is_one_row() {
    let run = run_montrace(&[], &["sh", "-c", "exec sh -c 'exec env /bin/true'"]);
    run.assert_code(0);
    let rows = run.processes();
    assert_eq!(rows.len(), 1, "{rows:#?}");
    let p = &rows[0];
    assert_eq!(p.exec_count, 4, "sh, sh, env, then /bin/true: {p:?}");
    assert!(p.has_filename("/bin/true"), "{p:?}");
    assert!(
        p.cpu_user_ns.is_some() && p.peak_rss_bytes.is_some(),
        "{p:?}"
    );
}

const TOUCHER: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* A child touches 64 MiB and burns some CPU; the parent prints the child's CPU time (ns) and
   peak resident set (KiB) as wait4 reports them. */
int main(void) {
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
        size_t len = 64 << 20;
        char *p = malloc(len);
        if (!p) _exit(3);
        memset(p, 1, len);
        volatile unsigned long x = 0;
        for (unsigned long i = 0; i < 30000000UL; i++) x += i;
        _exit(p[len / 2] == 1 ? 0 : 4);
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
        return 2;
    printf("%lld\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                     + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    printf("%ld\n", ru.ru_maxrss);
    return 0;
}
"#;

#[test]
fn exit_cpu_and_peak_match_the_kernels_rusage() {
    let program = compile_c("toucher", TOUCHER);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let (cpu_ns, maxrss_kib) = (stdout_number(&run, 0), stdout_number(&run, 1));
    let rows = run.processes();
    let root = run.root(&rows);
    let child = rows
        .iter()
        .find(|p| p.is_child_of(root))
        .expect("the child's row");
    assert_cpu_close("the child's CPU", child.cpu_ns(), cpu_ns);
    let peak = child.peak_rss_bytes.expect("the child's peak");
    let kernel = maxrss_kib * 1024;
    // The child never exec'd: its own peak is the kernel's maxrss, to the page; the few pages
    // of slack cover a counter the kernel syncs lazily.
    assert!(
        peak.abs_diff(kernel) <= 64 * 4096,
        "peak {peak} B, the kernel's maxrss {kernel} B"
    );
    assert!(peak >= 64 << 20, "64 MiB were touched: {peak}");
}

/// The pid of the process whose command line is `argv`, if one is running.
fn pid_of(argv: &[&str]) -> Option<u32> {
    let wanted: Vec<u8> = argv
        .iter()
        .flat_map(|a| [a.as_bytes(), b"\0"].concat())
        .collect();
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let pid: u32 = e.ok()?.file_name().to_str()?.parse().ok()?;
        (std::fs::read(format!("/proc/{pid}/cmdline")).ok()? == wanted).then_some(pid)
    })
}

/// The system call `pid` is asleep in, from /proc/PID/syscall: the kernel answers only for a
/// task that is off its CPU and off the run queue, stopped in that call (`task_current_syscall`
/// waits for `wait_task_inactive`, twice, and gives up if the task ran between), else "running"
/// or an error.
fn asleep_in(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

/// Polls `f` until it answers, for as long as the harness lets a run last.
fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = std::time::Instant::now() + tests::run_timeout();
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(std::time::Instant::now() < deadline, "{what}: not in time");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// A `cat` reading an empty pipe and the shell waiting for it both sleep (interruptibly: not
/// blocked, not waiting for a CPU) until the pipe's writer closes it, and the BTF tracepoints
/// count that time as sleep. Correct however slowly the machine runs (a VM without KVM, a busy
/// host): the test holds the pipe only once the kernel has shown both asleep in those calls
/// (/proc/PID/syscall answers only for a task off its CPU and off the run queue), and the
/// kernel wakes neither before the pipe closes (a pipe reader sleeps until data or the last
/// writer's close; a parent in wait4 until a child changes state), so each sleep spans the
/// whole hold, whatever came before it (loading `cat` from a slow disk is blocked time, which
/// this test does not bound).
#[test]
fn a_reader_on_an_empty_pipe_and_the_shell_waiting_for_it_sleep() {
    use std::os::unix::fs::OpenOptionsExt as _;
    let work = tempfile::tempdir().unwrap();
    let fifo = work.path().join("fifo");
    let path = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0, "mkfifo");
    let fifo_arg = fifo.to_str().unwrap();
    let mut held = std::time::Duration::ZERO;
    let mut pids = (0, 0);
    let run = tests::launch_montrace(
        &["--tracepoints", "btf"],
        &["sh", "-c", "cat \"$0\"; echo done", fifo_arg],
    )
    .during(|_| {
        // The writer's end, once `cat` has opened the reader's (before, O_NONBLOCK says ENXIO).
        let writer = poll("cat opening the pipe", || {
            std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(&fifo)
                .ok()
        });
        let cat = poll("cat running", || pid_of(&["cat", fifo_arg]));
        let stat = std::fs::read_to_string(format!("/proc/{cat}/stat")).unwrap();
        let shell: u32 = stat[stat.rfind(')').unwrap() + 2..]
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        poll("cat asleep in read", || {
            (asleep_in(cat)? == libc::SYS_read).then_some(())
        });
        poll("the shell asleep waiting for cat", || {
            let call = asleep_in(shell)?;
            (call == libc::SYS_wait4 || call == libc::SYS_waitid).then_some(())
        });
        let both_asleep = std::time::Instant::now();
        std::thread::sleep(std::time::Duration::from_millis(500));
        held = both_asleep.elapsed();
        drop(writer);
        pids = (cat, shell);
    });
    run.assert_code(0);
    run.assert_nothing_lost();
    assert_eq!(run.stdout.trim(), "done");
    let rows = run.processes();
    let (cat, shell) = pids;
    let held_ns = held.as_nanos() as u64;
    for pid in [cat, shell] {
        let p = rows
            .iter()
            .find(|p| p.pid == pid)
            .unwrap_or_else(|| panic!("no row of {pid}: {rows:#?}"));
        let slept = p.sleep_ns.unwrap_or_else(|| panic!("no sleep_ns: {p:?}"));
        assert!(
            slept >= held_ns,
            "{slept} ns asleep, but asleep for the whole {held_ns} ns hold: {p:?}"
        );
        assert!(
            p.run_queue_ns.is_some() && p.blocked_ns.is_some(),
            "the other waits measured: {p:?}"
        );
    }
}

/// The command's first reading of its own cgroup is the run cgroup, and run.json says how it got
/// there: on cgroup v2 it was made there (`clone3` with `CLONE_INTO_CGROUP`: no move, whose wait
/// for the kernel was most of a start-up), on v1 it was moved before its exec. Either way the
/// kernel's totals cover the whole command.
#[test]
fn the_command_starts_in_the_run_cgroup() {
    let run = run_montrace(&[], &["cat", "/proc/self/cgroup"]);
    run.assert_code(0);
    let json = run.run_json();
    let cgroup = &json["cgroup"];
    let version = cgroup["version"].as_str().expect("a run cgroup");
    let path = cgroup["path"].as_str().expect("its path");
    // The name the run gave its cgroup, `run-<pid>-<ns>`, in every hierarchy it used.
    let name = path
        .rsplit('/')
        .next()
        .expect("a path")
        .trim_end_matches('}');
    assert!(name.starts_with("run-"), "{cgroup}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    match version {
        "v2" => {
            assert_eq!(cgroup["entered"], "at_clone", "{cgroup}");
            // The unified hierarchy's line, `0::/montrace/run-...`.
            let line = lines.iter().find(|l| l.starts_with("0::")).copied();
            assert_eq!(
                line,
                Some(format!("0::/montrace/{name}").as_str()),
                "{lines:?}"
            );
        }
        "v1" => {
            assert_eq!(cgroup["entered"], "moved", "{cgroup}");
            // The memory hierarchy's line names the run cgroup.
            let memory = lines
                .iter()
                .find(|l| {
                    l.split(':')
                        .nth(1)
                        .is_some_and(|c| c.split(',').any(|c| c == "memory"))
                })
                .unwrap_or_else(|| panic!("a memory hierarchy line: {lines:?}"));
            assert!(memory.ends_with(&format!("/montrace/{name}")), "{lines:?}");
        }
        other => panic!("cgroup.version {other}"),
    }
    // The kernel counted one process (the `cat`), and some CPU, in the run cgroup.
    let totals = &cgroup["totals"];
    assert!(
        totals["cpu_usage_ns"].as_u64().is_some_and(|ns| ns > 0),
        "{cgroup}"
    );
    if let Some(pids) = totals["pids_peak"].as_u64() {
        assert_eq!(pids, 1, "{cgroup}");
    }
}
