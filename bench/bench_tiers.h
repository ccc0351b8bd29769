/* SPDX-License-Identifier: MIT */
/*
 * The ISA levels every benchmark measures, from the library's tier table (qs_isa_tier_info): the
 * tiers this machine has, in table order, that the --isa filter names and whose kernel table
 * differs from every earlier one (a tier that only adds bits no kernel uses yet is reported as
 * such, not measured twice). Header-only.
 */
#ifndef QS_BENCH_TIERS_H
#define QS_BENCH_TIERS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"

#define BENCH_MAX_TIERS 16

typedef struct {
    const char *name;
    uint32_t mask; /* the tier's `allowed`: isa_mask of the benchmark's contexts */
    uint32_t isa;  /* what a context got on this machine */
} bench_tier;

/* 1 if `name` is in the comma-separated `list` ("all" or NULL: every name). */
static inline int bench_name_in_list(const char *name, const char *list)
{
    size_t len = strlen(name);
    const char *p = list;

    if (!list || strcmp(list, "all") == 0)
        return 1;
    while (*p) {
        const char *end = strchr(p, ',');
        size_t l = end ? (size_t)(end - p) : strlen(p);
        if (l == len && strncmp(p, name, len) == 0)
            return 1;
        if (!end)
            break;
        p = end + 1;
    }
    return 0;
}

/* The kernel names a context with isa_mask `mask` runs, one per slot (static strings). */
static inline int bench_table(uint32_t mask, const char **names, int cap, uint32_t *isa)
{
    qs_ctx_params p;
    qs_ctx *ctx;
    const char *slot;
    int n;

    qs_ctx_params_init(&p);
    p.isa_mask = mask;
    p.num_threads = 1;
    if (qs_ctx_create(&p, &ctx) != QS_OK)
        return -1;
    n = qs_ctx_kernel_count(ctx) < cap ? qs_ctx_kernel_count(ctx) : cap;
    for (int s = 0; s < n; s++)
        qs_ctx_kernel_info(ctx, s, &slot, &names[s]);
    *isa = qs_ctx_isa(ctx);
    qs_ctx_destroy(ctx);
    return n;
}

/* Fill out[0 .. return) with the levels to measure; prints one line saying which tiers were
 * left out and why. `filter`: comma-separated tier names, "all" or NULL. */
static inline int bench_tiers(bench_tier *out, int max, const char *filter)
{
    enum { CAP = 256 };
    static const char *tables[BENCH_MAX_TIERS][CAP];
    int n = 0, sizes[BENCH_MAX_TIERS];
    char left[512] = "";

    for (int32_t i = 0; i < qs_isa_tier_count() && n < max && n < BENCH_MAX_TIERS; i++) {
        qs_isa_tier t;
        uint32_t isa;
        size_t used = strlen(left);
        if (qs_isa_tier_info(i, &t) != QS_OK || !bench_name_in_list(t.name, filter))
            continue;
        if (!t.available) {
            if (strcmp(t.arch, "any") == 0 || t.allowed & qs_cpu_isa())
                snprintf(left + used, sizeof left - used, " %s (not on this CPU)", t.name);
            continue;
        }
        int k = bench_table(t.allowed, tables[n], CAP, &isa), dup = -1;
        for (int j = 0; j < n && dup < 0 && k >= 0; j++)
            if (sizes[j] == k && memcmp(tables[j], tables[n], (size_t)k * sizeof(char *)) == 0)
                dup = j;
        if (k < 0 || dup >= 0) {
            snprintf(left + used, sizeof left - used, " %s (same kernels as %s)", t.name,
                     dup >= 0 ? out[dup].name : "?");
            continue;
        }
        sizes[n] = k;
        out[n].name = t.name;
        out[n].mask = t.allowed;
        out[n].isa = isa;
        n++;
    }
    if (*left)
        printf("tiers not measured :%s\n", left);
    return n;
}

#endif /* QS_BENCH_TIERS_H */
