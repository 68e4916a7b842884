/* burn MS: spins until this process has used MS milliseconds of CPU. Part of `cargo xtask bench`. */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv) {
    long long want = (argc > 1 ? atoll(argv[1]) : 100) * 1000000LL;
    volatile unsigned long x = 0;
    for (;;) {
        for (int i = 0; i < 100000; i++) x += i;
        struct timespec t;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
        if ((long long)t.tv_sec * 1000000000LL + t.tv_nsec >= want) return 0;
    }
}
