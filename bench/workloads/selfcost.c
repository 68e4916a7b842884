/* selfcost [-n] [-w START_MS,END_MS] OUT CMD ARGS...
 *
 * Runs CMD (montrace) and measures what CMD's own process used, without its children:
 *   cpu_ticks       utime + stime of CMD itself from /proc/PID/stat, read after it exited and
 *                   before it is reaped (all its threads; its children are in other fields)
 *   clk_tck         ticks per second of those figures
 *   vmhwm_kib       CMD's VmHWM (peak resident memory), read every 10 ms while it runs
 *                   (-1 with -n, which only waits, to cost nothing while CMD runs)
 *   wait_maxrss_kib ru_maxrss from wait4: the larger of CMD's own peak and its children's
 *   wall_ns         from fork to exit
 * With -w START_MS,END_MS, also CMD's CPU over a window in the middle of its run (its steady
 * state, without start-up and finish), in nanoseconds rather than clock ticks:
 *   window_cpu_ns   the sum of field 1 of every /proc/PID/task/TID/schedstat (sum_exec_runtime, ns:
 *                   every thread of CMD) at END_MS less the same sum at START_MS after the fork
 *   window_wall_ns  the time between the two readings (each is taken as soon as it is due:
 *                   within 10 ms, or at once with -n)
 *   window_threads  CMD's threads at the two readings, "START/END"; a thread that ended
 *                   between them would take its CPU out of the sum, so different numbers mean
 *                   the figure is doubtful
 * (all three null when CMD ended before END_MS). Exits with CMD's exit code. Part of
 * `cargo xtask bench`.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
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

/* The CPU of every thread of PID, ns (field 1 of each /proc/PID/task/TID/schedstat); -1 when
 * the task directory cannot be read. The number of threads read goes to *threads. */
static long long read_schedstat(pid_t pid, int *threads) {
    char path[320], line[256];
    snprintf(path, sizeof path, "/proc/%d/task", pid);
    DIR *d = opendir(path);
    if (!d) return -1;
    long long sum = 0;
    *threads = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        snprintf(path, sizeof path, "/proc/%d/task/%s/schedstat", pid, e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* the thread ended meanwhile */
        unsigned long long ns;
        if (fgets(line, sizeof line, f) && sscanf(line, "%llu", &ns) == 1) {
            sum += (long long)ns;
            (*threads)++;
        }
        fclose(f);
    }
    closedir(d);
    return sum;
}

static void usage(void) {
    fprintf(stderr, "usage: selfcost [-n] [-w START_MS,END_MS] OUT CMD ARGS...\n");
}

int main(int argc, char **argv) {
    int poll_hwm = 1;
    long long at[2] = {-1, -1}; /* the window's readings, ns after the fork */
    for (;;) {
        if (argc > 1 && strcmp(argv[1], "-n") == 0) {
            poll_hwm = 0;
            argv++;
            argc--;
        } else if (argc > 2 && strcmp(argv[1], "-w") == 0) {
            long long a, b;
            if (sscanf(argv[2], "%lld,%lld", &a, &b) != 2 || a < 0 || b <= a) {
                usage();
                return 125;
            }
            at[0] = a * 1000000LL;
            at[1] = b * 1000000LL;
            argv += 2;
            argc -= 2;
        } else {
            break;
        }
    }
    if (argc < 3) {
        usage();
        return 125;
    }
    int window = at[0] >= 0;
    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) { perror("selfcost: fork"); return 125; }
    if (pid == 0) {
        execvp(argv[2], argv + 2);
        fprintf(stderr, "selfcost: %s: %s\n", argv[2], strerror(errno));
        _exit(127);
    }
    /* With -n and a window, wait for the exit or the next reading, whichever comes first. */
    int pidfd = window && !poll_hwm ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
    long long cpu[2] = {-1, -1}, when[2] = {0, 0};
    int threads[2] = {0, 0};
    int mark = 0;
    long hwm = -1;
    siginfo_t info;
    for (;;) {
        int pending = window && mark < 2;
        memset(&info, 0, sizeof info);
        int flags = WEXITED | WNOWAIT | (poll_hwm || pending ? WNOHANG : 0);
        if (waitid(P_PID, pid, &info, flags) != 0 && errno != EINTR) {
            perror("selfcost: waitid");
            return 125;
        }
        if (info.si_pid == pid) break;
        long long due = pending ? at[mark] - (now_ns() - t0) : 0;
        if (pending && due <= 0) {
            when[mark] = now_ns();
            cpu[mark] = read_schedstat(pid, &threads[mark]);
            mark++;
            continue;
        }
        if (poll_hwm) {
            long h = read_vmhwm(pid);
            if (h > hwm) hwm = h;
            long long nap = 10 * 1000000LL;
            if (pending && due < nap) nap = due;
            struct timespec t = {0, (long)nap};
            nanosleep(&t, NULL);
        } else if (pending) {
            if (pidfd >= 0) {
                struct pollfd p = {pidfd, POLLIN, 0};
                poll(&p, 1, (int)((due + 999999) / 1000000));
            } else {
                struct timespec t = {0, (long)(due < 10000000LL ? due : 10000000LL)};
                nanosleep(&t, NULL);
            }
        }
    }
    long long wall = now_ns() - t0;
    if (pidfd >= 0) close(pidfd);
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
            "\"wall_ns\": %lld",
            utime + stime, sysconf(_SC_CLK_TCK), hwm, ru.ru_maxrss, wall);
    if (window) {
        if (mark == 2 && cpu[0] >= 0 && cpu[1] >= 0)
            fprintf(out,
                    ", \"window_cpu_ns\": %lld, \"window_wall_ns\": %lld, "
                    "\"window_threads\": \"%d/%d\"",
                    cpu[1] - cpu[0], when[1] - when[0], threads[0], threads[1]);
        else
            fprintf(out, ", \"window_cpu_ns\": null, \"window_wall_ns\": null, \"window_threads\": null");
    }
    fprintf(out, "}\n");
    fclose(out);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 125;
}
