//! The exit figures of processes that live a millisecond are as exact as those of long ones:
//! a build or a test suite is thousands of them.
use tests::{assert_cpu_close, compile_c, run_montrace, stdout_number, Proc};

const TWO_HUNDRED_TRUES: &str = r#"
#include <stdio.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

/* Runs /bin/true 200 times, one after another, then prints its children's CPU time. */
int main(void) {
    for (int i = 0; i < 200; i++) {
        pid_t pid = fork();
        if (pid < 0) return 1;
        if (pid == 0) {
            execl("/bin/true", "/bin/true", (char *)NULL);
            _exit(127);
        }
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            return 2;
    }
    struct rusage ru;
    getrusage(RUSAGE_CHILDREN, &ru);
    printf("%lld\n", (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000LL
                     + (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000LL);
    return 0;
}
"#;

/// The kernel adds a running task's CPU time to `se.sum_exec_runtime` only at a scheduler tick
/// or a context switch (`update_curr`). A process that exits before either (most processes of
/// a millisecond) has had almost none of its time added when `sched_process_exit` fires;
/// `getrusage` reads the figure after the final switch, with all of it.
#[test]
fn cpu_of_short_processes_matches_the_kernels_rusage() {
    let program = compile_c("two_hundred_trues", TWO_HUNDRED_TRUES);
    let run = run_montrace(&[], &[program.as_str()]);
    run.assert_code(0);
    run.assert_nothing_lost();
    let rusage_children = stdout_number(&run, 0);
    let rows = run.processes();
    let root = run.root(&rows);
    let trues: Vec<&Proc> = rows.iter().filter(|p| p.is_child_of(root)).collect();
    assert_eq!(trues.len(), 200, "{rows:#?}");
    let sum: u64 = trues.iter().map(|p| p.cpu_ns()).sum();
    eprintln!(
        "200 /bin/true: montrace {:.3} ms, getrusage(RUSAGE_CHILDREN) {:.3} ms ({:.0}%)",
        sum as f64 / 1e6,
        rusage_children as f64 / 1e6,
        sum as f64 / rusage_children as f64 * 100.0
    );
    assert_cpu_close("CPU of 200 short /bin/true", sum, rusage_children);
}
