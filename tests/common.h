/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the C tests (cmocka): a seeded PRNG (splitmix64, never rand() or the clock),
 * the adversarial value list, canary-guarded buffers, guard-page buffers that fault on over-reads,
 * and byte comparison that reports the first differing index. Header-only; every test includes it
 * after <cmocka.h>'s prerequisites.
 */
#ifndef QS_TESTS_COMMON_H
#define QS_TESTS_COMMON_H

#ifndef _DEFAULT_SOURCE
#define _DEFAULT_SOURCE /* MAP_ANONYMOUS, setenv */
#endif

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "qsparse.h"

/* ---- PRNG ------------------------------------------------------------------------------------- */

typedef struct {
    uint64_t s;
} t_rng;

static inline uint64_t t_next(t_rng *r)
{
    uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1). */
static inline double t_unif(t_rng *r)
{
    return (double)(t_next(r) >> 11) * 0x1p-53;
}

/* Standard normal (Box-Muller). */
static inline double t_normal(t_rng *r)
{
    double u = t_unif(r), v = t_unif(r);
    if (u < 1e-300)
        u = 1e-300;
    return sqrt(-2.0 * log(u)) * cos(6.283185307179586 * v);
}

static inline float t_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t t_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* ---- adversarial values -------------------------------------------------------- */

static const float t_special[] = {
    0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, INFINITY, -INFINITY, NAN, -NAN,
    1e-45f, -1e-45f, 1e-40f, -3e-39f, 1.17549435e-38f, 3.4028235e38f, -3.4028235e38f,
    448.0f, 464.0f, 464.00003f, -480.0f, 57344.0f, 61440.0f, -61439.996f, 65504.0f, 65520.0f,
    6.0f, 7.0f, -5.0f, 0.25f, 0.75f, -1.75f, 2.5f, 3.5f, 0x1p-9f, 0x1p-10f, 3 * 0x1p-10f,
    0x1p-17f, 0x1p-127f, 0x1p-128f, 7.9999995f, 1073741760.0f, 1e30f, -1e-30f,
};
#define T_NSPECIAL ((int)(sizeof t_special / sizeof t_special[0]))

/* Fill x[0..n) with a mix: normal values at random scales, and with probability `p_special`
 * one of t_special, plus occasional repeats (ties inside blocks). */
static inline void t_fill_mixed(t_rng *r, float *x, int64_t n, double p_special)
{
    for (int64_t i = 0; i < n; i++) {
        double u = t_unif(r);
        if (u < p_special * 0.1)
            /* signaling NaNs (glibc's fmaxf does not ignore them), both signs */
            x[i] = t_f32_from_bits(t_next(r) & 1 ? 0x7FA00000u : 0xFFA00001u);
        else if (u < p_special)
            x[i] = t_special[t_next(r) % T_NSPECIAL];
        else if (u < p_special + 0.02 && i > 0)
            x[i] = x[i - 1];
        else
            x[i] = (float)(t_normal(r) * ldexp(1.0, (int)(t_next(r) % 40) - 20));
    }
}

/* ---- canary buffers --------------------------------------------------------------------------- */

#define T_CANARY 0x88
#define T_GUARD 64

/* A buffer of `bytes` with T_GUARD canary bytes before and after; also pre-filled with canary. */
typedef struct {
    uint8_t *base;
    void *p;
    size_t bytes;
} t_buf;

static inline t_buf t_buf_new(size_t bytes)
{
    t_buf b;
    b.bytes = bytes;
    b.base = malloc(bytes + 2 * T_GUARD);
    assert_non_null(b.base);
    memset(b.base, T_CANARY, bytes + 2 * T_GUARD);
    b.p = b.base + T_GUARD;
    return b;
}

/* 1 if the guard bytes around the buffer are intact. */
static inline int t_buf_guards_ok(const t_buf *b)
{
    for (size_t i = 0; i < T_GUARD; i++)
        if (b->base[i] != T_CANARY || b->base[T_GUARD + b->bytes + i] != T_CANARY)
            return 0;
    return 1;
}

/* 1 if the whole buffer still holds the canary (nothing was written). */
static inline int t_buf_untouched(const t_buf *b)
{
    for (size_t i = 0; i < b->bytes + 2 * T_GUARD; i++)
        if (b->base[i] != T_CANARY)
            return 0;
    return 1;
}

static inline void t_buf_free(t_buf *b)
{
    free(b->base);
    b->base = NULL;
    b->p = NULL;
}

/* ---- guard-page buffers: data ends exactly at a PROT_NONE page ------------------------------- */

typedef struct {
    void *map;
    size_t map_bytes;
    void *p; /* the last `bytes` bytes before the guard page */
} t_page_buf;

static inline t_page_buf t_page_buf_new(size_t bytes)
{
    t_page_buf b;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t data_pages = (bytes + page - 1) / page;
    b.map_bytes = (data_pages + 1) * page;
    b.map = mmap(NULL, b.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(b.map != MAP_FAILED);
    assert_int_equal(mprotect((uint8_t *)b.map + data_pages * page, page, PROT_NONE), 0);
    b.p = (uint8_t *)b.map + data_pages * page - bytes;
    return b;
}

static inline void t_page_buf_free(t_page_buf *b)
{
    munmap(b->map, b->map_bytes);
}

/* ---- comparison ------------------------------------------------------------------------------- */

/* Index of the first differing byte, or -1 when equal. */
static inline int64_t t_first_diff(const void *a, const void *b, size_t bytes)
{
    const uint8_t *x = a, *y = b;
    for (size_t i = 0; i < bytes; i++)
        if (x[i] != y[i])
            return (int64_t)i;
    return -1;
}

/* Fail the test with context if the byte ranges differ: the first differing index and, around
 * it, both values in hex. `what` names the comparison. Returns 1 when equal (for the negative
 * tests of the comparison itself). */
static inline int t_check_bytes(const char *what, const void *got, const void *want, size_t bytes,
                                int fail)
{
    int64_t d = t_first_diff(got, want, bytes);
    if (d < 0)
        return 1;
    if (fail) {
        const uint8_t *g = got, *w = want;
        print_error("%s: first difference at byte %lld: got 0x%02x, want 0x%02x\n", what,
                    (long long)d, g[d], w[d]);
        fail();
    }
    return 0;
}

#define T_ASSERT_BYTES(what, got, want, bytes) t_check_bytes((what), (got), (want), (bytes), 1)

/* A context with default parameters (honours QS_FORCE_ISA). */
static inline qs_ctx *t_ctx(void)
{
    qs_ctx *ctx = NULL;
    assert_int_equal(qs_ctx_create(NULL, &ctx), QS_OK);
    return ctx;
}

#endif /* QS_TESTS_COMMON_H */
