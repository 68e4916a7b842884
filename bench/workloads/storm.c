/* storm TOTAL WORKERS RATE exec|fork [PROGRAM]
 *
 * A process storm: WORKERS processes (one per core) together create TOTAL short-lived processes,
 * each worker one at a time (fork, then wait). `exec`: the child execs PROGRAM (a static no-op),
 * three lifecycle events per process (fork, exec, exit); `fork`: the child exits at once, two
 * events. RATE is the target of processes per second over all workers (0: as fast as possible).
 * Part of `cargo xtask bench`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void worker(long count, double rate, int do_exec, const char *program) {
    long long start = now_ns();
    for (long i = 0; i < count; i++) {
        if (rate > 0) {
            long long due = start + (long long)(i * 1e9 / rate);
            long long wait = due - now_ns();
            if (wait > 0) {
                struct timespec t = {wait / 1000000000LL, wait % 1000000000LL};
                nanosleep(&t, NULL);
            }
        }
        pid_t pid = fork();
        if (pid < 0) { perror("storm: fork"); _exit(1); }
        if (pid == 0) {
            if (do_exec) {
                execl(program, program, (char *)NULL);
                _exit(127);
            }
            _exit(0);
        }
        int status;
        waitpid(pid, &status, 0);
    }
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: storm TOTAL WORKERS RATE exec|fork [PROGRAM]\n");
        return 2;
    }
    long total = atol(argv[1]);
    int workers = atoi(argv[2]);
    double rate = atof(argv[3]);
    int do_exec = strcmp(argv[4], "exec") == 0;
    const char *program = argc > 5 ? argv[5] : "/bin/true";
    if (workers < 1) workers = 1;
    for (int w = 0; w < workers; w++) {
        long count = total / workers + (w < total % workers ? 1 : 0);
        pid_t pid = fork();
        if (pid < 0) { perror("storm: fork"); return 1; }
        if (pid == 0) {
            worker(count, rate / workers, do_exec, program);
            _exit(0);
        }
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    return failed;
}
