/* nscount OUT CMD ARGS...
 *
 * Runs CMD in a new PID namespace and writes, as one JSON object to OUT, what the kernel counted:
 *   ns_last_pid      the last PID allocated in the namespace = every process (and thread) created
 *                    in it, its init (this helper's child, PID 1) included, since PIDs there start at
 *                    1 and are not reused before 32768 allocations
 *   wall_ns          CLOCK_MONOTONIC from the fork of the namespace's init to its reaping
 *   cpu_ns           user + system CPU of this helper (RUSAGE_SELF) and of everything reaped under
 *                    it (RUSAGE_CHILDREN): the kernel's CPU figure for the whole tree montrace sees
 *   children_cpu_ns  RUSAGE_CHILDREN alone
 *   status           CMD's wait status
 * The namespace's init reaps every orphan (a double-forked daemon too), so the helper returns only
 * when the whole tree is gone. Exits with CMD's exit code (128+N for signal N).
 * Needs CAP_SYS_ADMIN (root). Part of `cargo xtask bench`.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
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

static long long tv_ns(struct timeval tv) {
    return (long long)tv.tv_sec * 1000000000LL + (long long)tv.tv_usec * 1000LL;
}

static int code_of(int status) {
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
    return 125;
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: nscount OUT CMD ARGS...\n");
        return 125;
    }
    int fds[2];
    if (pipe(fds) != 0) { perror("nscount: pipe"); return 125; }
    if (unshare(CLONE_NEWPID) != 0) { perror("nscount: unshare(CLONE_NEWPID)"); return 125; }
    long long t0 = now_ns();
    pid_t init = fork();
    if (init < 0) { perror("nscount: fork"); return 125; }
    if (init == 0) {
        /* PID 1 of the new namespace. */
        close(fds[0]);
        pid_t cmd = fork();
        if (cmd < 0) { perror("nscount: fork"); _exit(125); }
        if (cmd == 0) {
            close(fds[1]);
            execvp(argv[2], argv + 2);
            fprintf(stderr, "nscount: %s: %s\n", argv[2], strerror(errno));
            _exit(127);
        }
        int cmd_status = 0, status;
        pid_t pid;
        while ((pid = wait(&status)) > 0 || errno == EINTR)
            if (pid == cmd) cmd_status = status;
        char buf[32] = {0};
        FILE *f = fopen("/proc/sys/kernel/ns_last_pid", "r");
        if (!f || !fgets(buf, sizeof buf, f)) { perror("nscount: ns_last_pid"); _exit(125); }
        fclose(f);
        char msg[64];
        int n = snprintf(msg, sizeof msg, "%ld %d\n", atol(buf), cmd_status);
        if (write(fds[1], msg, n) != n) _exit(125);
        _exit(code_of(cmd_status));
    }
    close(fds[1]);
    int status;
    while (waitpid(init, &status, 0) < 0)
        if (errno != EINTR) { perror("nscount: waitpid"); return 125; }
    long long wall = now_ns() - t0;
    char buf[64] = {0};
    ssize_t got = read(fds[0], buf, sizeof buf - 1);
    long last = -1;
    int cmd_status = status;
    if (got > 0) sscanf(buf, "%ld %d", &last, &cmd_status);
    struct rusage self, children;
    getrusage(RUSAGE_SELF, &self);
    getrusage(RUSAGE_CHILDREN, &children);
    long long child_cpu = tv_ns(children.ru_utime) + tv_ns(children.ru_stime);
    long long self_cpu = tv_ns(self.ru_utime) + tv_ns(self.ru_stime);
    FILE *out = fopen(argv[1], "w");
    if (!out) { perror(argv[1]); return 125; }
    fprintf(out,
            "{\"ns_last_pid\": %ld, \"wall_ns\": %lld, \"cpu_ns\": %lld, \"children_cpu_ns\": %lld, "
            "\"children_maxrss_kib\": %ld, \"status\": %d}\n",
            last, wall, self_cpu + child_cpu, child_cpu, children.ru_maxrss, cmd_status);
    fclose(out);
    return code_of(cmd_status);
}
