/* mem MIB PRE_MS HOLD_MS POST_MS OUT
 *
 * Sleeps PRE_MS, touches MIB MiB of fresh anonymous memory, holds it HOLD_MS, gives it back
 * (munmap), sleeps POST_MS, then writes what the kernel says of its own peak just before exiting:
 *   {"pid": ..., "vmhwm_kib": VmHWM of /proc/self/status, "maxrss_kib": getrusage ru_maxrss}
 * VmHWM is the high-water mark of this process's address space, the figure montrace's
 * peak_rss_bytes stands for. Part of `cargo xtask bench`.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t) != 0) {}
}

int main(int argc, char **argv) {
    if (argc != 6) {
        fprintf(stderr, "usage: mem MIB PRE_MS HOLD_MS POST_MS OUT\n");
        return 2;
    }
    size_t bytes = (size_t)atol(argv[1]) << 20;
    sleep_ms(atol(argv[2]));
    if (bytes) {
        char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) { perror("mem: mmap"); return 1; }
        long page = sysconf(_SC_PAGESIZE);
        for (size_t i = 0; i < bytes; i += page) p[i] = 1;
        sleep_ms(atol(argv[3]));
        munmap(p, bytes);
    }
    sleep_ms(atol(argv[4]));
    long hwm = -1;
    char line[256];
    FILE *f = fopen("/proc/self/status", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) hwm = atol(line + 6);
    if (f) fclose(f);
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    FILE *out = fopen(argv[5], "w");
    if (!out) { perror(argv[5]); return 1; }
    fprintf(out, "{\"pid\": %d, \"vmhwm_kib\": %ld, \"maxrss_kib\": %ld}\n", getpid(), hwm, ru.ru_maxrss);
    fclose(out);
    return 0;
}
