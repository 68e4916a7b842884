/* selfcost [-n] OUT CMD ARGS...
 *
 * Runs CMD (montrace) and measures what CMD's own process used, without its children:
 *   cpu_ticks       utime + stime of CMD itself from /proc/PID/stat, read after it exited and
 *                   before it is reaped (all its threads; its children are in other fields)
 *   clk_tck         ticks per second of those figures
 *   vmhwm_kib       CMD's VmHWM (peak resident memory), read every 10 ms while it runs
 *                   (-1 with -n, which only waits, to cost nothing while CMD runs)
 *   wait_maxrss_kib ru_maxrss from wait4: the larger of CMD's own peak and its children's
 *   wall_ns         from fork to exit
 * Exits with CMD's exit code. Part of `cargo xtask bench`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static long read_vmhwm(pid_t pid) {
    char path[64], line[256];
    long hwm = -1;
    snprintf(path, sizeof path, "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) hwm = atol(line + 6);
    if (f) fclose(f);
    return hwm;
}

int main(int argc, char **argv) {
    int poll = 1;
    if (argc > 1 && strcmp(argv[1], "-n") == 0) {
        poll = 0;
        argv++;
        argc--;
    }
    if (argc < 3) {
        fprintf(stderr, "usage: selfcost [-n] OUT CMD ARGS...\n");
        return 125;
    }
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) { perror("selfcost: fork"); return 125; }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "selfcost: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    long hwm = -1;
    siginfo_t info;
    for (;;) {
        memset(&info, 0, sizeof info);
        if (waitid(P_PID, pid, &info, WEXITED | WNOWAIT | (poll ? WNOHANG : 0)) != 0 && errno != EINTR) {
            perror("selfcost: waitid");
            return 125;
        }
        if (info.si_pid == pid) break;
        if (!poll) continue;
        long h = read_vmhwm(pid);
        if (h > hwm) hwm = h;
        struct timespec t = {0, 10 * 1000000L};
        nanosleep(&t, NULL);
    }
    long long wall = now_ns() - t0;
    /* A zombie still has its /proc/PID/stat: fields 14 and 15 are its own utime and stime. */
    char path[64], buf[4096];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f) fclose(f);
    buf[n] = 0;
    unsigned long long utime = 0, stime = 0;
    char *p = strrchr(buf, ')');
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &utime, &stime) != 2) {
        fprintf(stderr, "selfcost: cannot parse %s\n", path);
        return 125;
    }
    int status;
    struct rusage ru;
    if (wait4(pid, &status, 0, &ru) < 0) { perror("selfcost: wait4"); return 125; }
    FILE *out = fopen(argv[1], "w");
    if (!out) { perror(argv[1]); return 125; }
    fprintf(out,
            "{\"cpu_ticks\": %llu, \"clk_tck\": %ld, \"vmhwm_kib\": %ld, \"wait_maxrss_kib\": %ld, "
            "\"wall_ns\": %lld}\n",
            utime + stime, sysconf(_SC_CLK_TCK), hwm, ru.ru_maxrss, wall);
    fclose(out);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 125;
}
