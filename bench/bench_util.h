/* SPDX-License-Identifier: MIT */
/*
 * What the small benchmarks (bench_calib.c, bench_sparse.c) share: a monotonic clock, the median
 * of repeated timings, the read-bandwidth pass every ratio is taken against, and the CPU model
 * printed in each report. Header-only; each benchmark is one translation unit.
 */
#ifndef QS_BENCH_UTIL_H
#define QS_BENCH_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static inline double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static inline int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of n timings (sorts t in place). */
static inline double median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof *t, cmp_double);
    return t[n / 2];
}

/* Read-only pass over the array: four independent 64-bit sums, so the loop is bound by loads.
 * Returns the seconds it took. */
static volatile uint64_t bench_sink;
static inline double read_pass(const void *p, size_t bytes)
{
    const uint64_t *w = p;
    size_t n = bytes / 8;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    double t0 = now();
    for (size_t i = 0; i + 4 <= n; i += 4) {
        a += w[i];
        b += w[i + 1];
        c += w[i + 2];
        d += w[i + 3];
    }
    bench_sink = a ^ b ^ c ^ d;
    return now() - t0;
}

/* The "model name" line of /proc/cpuinfo, or "unknown". */
static inline void cpu_model(char *out, size_t cap)
{
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    snprintf(out, cap, "unknown");
    if (!f)
        return;
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, "model name", 10) == 0) {
            char *c = strchr(line, ':');
            if (c) {
                snprintf(out, cap, "%s", c + 2);
                out[strcspn(out, "\n")] = '\0';
            }
            break;
        }
    }
    fclose(f);
}

#endif /* QS_BENCH_UTIL_H */
