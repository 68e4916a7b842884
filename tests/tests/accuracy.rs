//! The exit figures agree with what the kernel itself reports: CPU time against getrusage(2),
//! peak RSS against the memory a program touched.
use tests::{assert_cpu_close, compile_c, run_montrace, stdout_number, Proc, MIB, MS};

const FOUR_CHILDREN: &str = r#"
#include <stdio.h>
#include <sys/resource.h>
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
        if (pid < 0) { perror("fork"); return 1; }
        if (pid == 0) {
            while (cpu_ns() < 300000000LL) {}
            _exit(0);
        }
    }
    int status;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 2;
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    printf("%lld\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                     + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    return 0;
}
"#;

#[test]
fn tree_cpu_matches_the_kernels_rusage() {
    let program = compile_c("four_children", FOUR_CHILDREN);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rusage_children = stdout_number(&run, 0);
    let rows = run.processes();
    let root = run.root(&rows);
    let children: Vec<&Proc> = rows.iter().filter(|p| p.is_child_of(root)).collect();
    assert_eq!(children.len(), 4, "{rows:?}");
    for child in &children {
        assert_eq!(child.exec_count, 0, "{child:?}");
        assert_eq!(
            child.filename.as_deref(),
            Some(program.as_str()),
            "a child that never exec'd shows its parent's program: {child:?}"
        );
        // Guarantee: each child burns until its own CPU clock says 300 ms; load delays that,
        // never shortens it.
        assert!(
            child.cpu_ns() >= 300 * MS,
            "each child burnt at least 300 ms, this one {} ns: {child:?}",
            child.cpu_ns()
        );
    }
    let sum: u64 = children.iter().map(|c| c.cpu_ns()).sum();
    eprintln!("4 children: montrace {sum} ns, getrusage(RUSAGE_CHILDREN) {rusage_children} ns");
    assert_cpu_close("CPU of the 4 children", sum, rusage_children);
    let own = root.cpu_ns();
    // CPU time is time on a CPU only: waiting for one on a busy machine adds none. Four forks
    // and the waits take a millisecond or two; 50 ms leaves room for page faults and reclaim.
    assert!(
        own > 0 && own < 50 * MS,
        "the parent only forked and waited, yet used {own} ns: {root:?}"
    );
    let json = run.run_json();
    let total = json["totals"]["cpu_user_ns"].as_u64().unwrap()
        + json["totals"]["cpu_system_ns"].as_u64().unwrap();
    assert_eq!(total, sum + own, "run.json totals sum the rows: {json}");
}

const BIG_ALLOC: &str = r#"
#include <stdlib.h>
#include <string.h>

int main(void) {
    size_t size = 200u << 20;
    char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    return p[size - 1] == 1 ? 0 : 2;
}
"#;

#[test]
fn peak_rss_of_a_200mib_child() {
    let program = compile_c("big_alloc", BIG_ALLOC);
    let run = run_montrace(
        &[],
        &["sh", "-c", &format!("{}; exit $?", program.as_str())],
    );
    run.assert_code(0);
    let rows = run.processes();
    let big: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.has_filename(program.as_str()))
        .collect();
    assert_eq!(big.len(), 1, "{rows:?}");
    let peak = big[0].peak_rss_bytes.expect("peak_rss_bytes");
    eprintln!("200 MiB program: peak_rss_bytes {peak}");
    let expected = 200 * MIB;
    assert!(
        peak.abs_diff(expected) <= expected / 20,
        "the program touched 200 MiB, montrace says its peak RSS was {:.1} MiB",
        peak as f64 / MIB as f64
    );
    let sh = run.root(&rows);
    assert!(
        sh.peak_rss_bytes.expect("sh peak") < 10 * MIB,
        "the shell is not charged its child's memory: {sh:?}"
    );
}

const BIG_PARENT: &str = r#"
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(void) {
    size_t size = 100u << 20;
    char *p = malloc(size);
    if (!p) return 1;
    memset(p, 1, size);
    pid_t pid = fork();
    if (pid == 0) {
        execl("/bin/true", "/bin/true", (char *)NULL);
        _exit(127);
    }
    int status;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 && p[size - 1] == 1 ? 0 : 2;
}
"#;

#[test]
fn small_program_after_big_parent_reports_its_own_peak() {
    let program = compile_c("big_parent", BIG_PARENT);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    let rows = run.processes();
    let parent = run.root(&rows);
    let trues: Vec<&Proc> = rows
        .iter()
        .filter(|p| p.has_filename("/bin/true"))
        .collect();
    assert_eq!(trues.len(), 1, "{rows:?}");
    assert!(trues[0].is_child_of(parent), "{:?}", trues[0]);
    let small = trues[0].peak_rss_bytes.expect("/bin/true peak");
    let big = parent.peak_rss_bytes.expect("parent peak");
    eprintln!("/bin/true after a 100 MiB parent: {small} bytes, parent {big} bytes");
    assert!(
        small < 10 * MIB,
        "/bin/true's own peak is small, montrace says {:.1} MiB (its parent had {:.1} MiB)",
        small as f64 / MIB as f64,
        big as f64 / MIB as f64
    );
    assert!(
        big >= 100 * MIB,
        "the parent touched 100 MiB, montrace says {:.1} MiB",
        big as f64 / MIB as f64
    );
}

const MAIN_THREAD_EXITS_FIRST: &str = r#"
#include <pthread.h>
#include <stdio.h>
#include <sys/resource.h>
#include <time.h>

static long long clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* The last thread: burns 100 ms, prints the whole process's rusage, and ends the process. */
static void *worker(void *arg) {
    (void)arg;
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < 100000000LL) {}
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    printf("%lld\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                     + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    fflush(stdout);
    return NULL;
}

/* The main thread burns 200 ms, then leaves with pthread_exit while the worker runs on. */
int main(void) {
    while (clock_ns(CLOCK_THREAD_CPUTIME_ID) < 200000000LL) {}
    pthread_t thread;
    if (pthread_create(&thread, NULL, worker, NULL) != 0) return 1;
    pthread_exit(NULL);
}
"#;

#[test]
fn cpu_counts_a_main_thread_that_exited_first() {
    let program = compile_c("main_thread_exits_first", MAIN_THREAD_EXITS_FIRST);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rusage_self = stdout_number(&run, 0);
    let rows = run.processes();
    assert_eq!(rows.len(), 1, "{rows:?}");
    let row = &rows[0];
    assert_eq!(row.exit_code, Some(0), "{row:?}");
    eprintln!(
        "main thread first: montrace {} ns, getrusage(RUSAGE_SELF) {rusage_self} ns",
        row.cpu_ns()
    );
    // Guarantee: each thread burns until its own CPU clock says so; load delays, never
    // shortens it.
    assert!(
        row.cpu_ns() >= 300 * MS,
        "the main thread burnt 200 ms and the worker 100 ms, yet the row says {:.1} ms \
         (getrusage says {:.1} ms): {row:?}",
        row.cpu_ns() as f64 / 1e6,
        rusage_self as f64 / 1e6
    );
    assert_cpu_close("CPU of both threads", row.cpu_ns(), rusage_self);
}

#[test]
fn io_of_a_child_is_not_counted_again_in_its_parent() {
    // dd moves exactly 100 MiB through read(2) and write(2); the shell only waits for it.
    let run = run_montrace(
        &[],
        &[
            "sh",
            "-c",
            "dd if=/dev/zero of=/dev/null bs=1M count=100 2>/dev/null; exit 0",
        ],
    );
    run.assert_code(0);
    let rows = run.processes();
    let sh = run.root(&rows);
    let dd: Vec<&Proc> = rows.iter().filter(|p| p.comm == "dd").collect();
    assert_eq!(dd.len(), 1, "{rows:?}");
    let (dd, hundred_mib) = (dd[0], 100 * MIB);
    for (what, chars) in [
        ("read_chars", dd.read_chars),
        ("write_chars", dd.write_chars),
    ] {
        let chars = chars.unwrap_or_else(|| panic!("dd has no {what}: {dd:?}"));
        assert!(
            (hundred_mib..hundred_mib + MIB).contains(&chars),
            "dd moved 100 MiB, its {what} is {chars}: {dd:?}"
        );
    }
    for (what, chars) in [
        ("read_chars", sh.read_chars),
        ("write_chars", sh.write_chars),
    ] {
        let chars = chars.unwrap_or_else(|| panic!("sh has no {what}: {sh:?}"));
        assert!(
            chars < MIB,
            "the shell moved next to nothing itself, yet its {what} is {chars} (dd's figures \
             counted again?): {sh:?}"
        );
    }
}
