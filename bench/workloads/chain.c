/* chain N: a fork+exec chain N deep. Each level forks a child that execs `chain N-1` (this same
 * program, through /proc/self/exe) and waits for it; level 0 exits. N+1 processes in all.
 * Part of `cargo xtask bench`. */
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 0;
    if (n <= 0) return 0;
    char next[16];
    snprintf(next, sizeof next, "%d", n - 1);
    pid_t pid = fork();
    if (pid < 0) { perror("chain: fork"); return 1; }
    if (pid == 0) {
        execl("/proc/self/exe", "chain", next, (char *)NULL);
        perror("chain: exec");
        _exit(127);
    }
    int status;
    if (waitpid(pid, &status, 0) < 0) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
