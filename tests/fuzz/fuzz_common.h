/* SPDX-License-Identifier: MIT */
/*
 * Shared helpers of the libFuzzer targets: a reader that turns the fuzzer's bytes into choices
 * (it never fails: past the end it yields zeros, so every input is a valid program), one context
 * per ISA tier this CPU has (created once, single-threaded so a run is deterministic), canary
 * buffers for "nothing written on error", and the switches for findings that are known and fixed
 * on other branches (QS_FUZZ_KNOWN, see README.md). A broken promise calls fz_fail, which prints
 * what broke and aborts: libFuzzer records the input as a crash.
 */
#ifndef QS_FUZZ_COMMON_H
#define QS_FUZZ_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "qsparse.h"

#define FZ_MAX_TIERS 8
#define FZ_CANARY 0xA5

/* ---- input reader ----------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p;
    size_t n;
} fz_in;

static inline uint8_t fz_u8(fz_in *in)
{
    if (in->n == 0)
        return 0;
    uint8_t v = in->p[0];
    in->p++;
    in->n--;
    return v;
}

static inline uint16_t fz_u16(fz_in *in)
{
    uint16_t lo = fz_u8(in);
    return (uint16_t)(lo | (uint16_t)fz_u8(in) << 8);
}

static inline uint32_t fz_u32(fz_in *in)
{
    uint32_t lo = fz_u16(in);
    return lo | (uint32_t)fz_u16(in) << 16;
}

static inline uint64_t fz_u64(fz_in *in)
{
    uint64_t lo = fz_u32(in);
    return lo | (uint64_t)fz_u32(in) << 32;
}

/* Copy `bytes` bytes of the input into dst, zeros once the input runs out. */
static inline void fz_fill(fz_in *in, void *dst, size_t bytes)
{
    size_t k = bytes < in->n ? bytes : in->n;
    memcpy(dst, in->p, k);
    memset((uint8_t *)dst + k, 0, bytes - k);
    in->p += k;
    in->n -= k;
}

/* ---- failures --------------------------------------------------------------------------------- */

#define fz_fail(...)                                                                             \
    do {                                                                                         \
        fprintf(stderr, "fuzz: " __VA_ARGS__);                                                   \
        fputc('\n', stderr);                                                                     \
        abort();                                                                                 \
    } while (0)

#define fz_check(cond, ...)                                                                      \
    do {                                                                                         \
        if (!(cond))                                                                             \
            fz_fail(__VA_ARGS__);                                                                \
    } while (0)

/* Every status the header defines. */
static inline int fz_status_known(qs_status st)
{
    return st <= QS_OK && st >= QS_ERR_BACKEND;
}

/* ---- known findings fixed on other branches --------------------------------------------------- */

/*
 * QS_FUZZ_KNOWN is a comma-separated list of findings to step around while their fixes are not
 * merged: "nan" (cross-tier comparisons accept differing NaN payloads where both sides are NaN),
 * "align" (inputs stay aligned to their element size), "empty" (no huge shapes with a zero
 * dimension), "overlap" (the safetensors target trusts the reader's own overlap check). Unset:
 * every check is strict, which is what the CI runs.
 */
static inline int fz_known(const char *what)
{
    const char *v = getenv("QS_FUZZ_KNOWN");
    if (!v)
        return 0;
    size_t len = strlen(what);
    for (const char *p = v; *p;) {
        const char *e = strchr(p, ',');
        size_t k = e ? (size_t)(e - p) : strlen(p);
        if (k == len && memcmp(p, what, len) == 0)
            return 1;
        if (!e)
            break;
        p = e + 1;
    }
    return 0;
}

/* The deliberate huge shape of the computing targets: with the rows selector at 255 (and "empty"
 * not stepped around), one dimension is a big value from the input and the other 0, which is how
 * size overflows and loops over empty rows show up. Returns 1 when it chose such a shape. */
static inline int fz_huge_shape(fz_in *in, int rsel, int csel, int64_t *rows, int64_t *cols)
{
    if (rsel != 255 || fz_known("empty"))
        return 0;
    int64_t big = (int64_t)(fz_u64(in) >> 1);
    if (csel & 1)
        *rows = big, *cols = 0;
    else
        *rows = 0, *cols = big;
    return 1;
}

/* ---- one context per ISA tier ----------------------------------------------------------------- */

typedef struct {
    qs_ctx *ctx[FZ_MAX_TIERS];
    int count;
} fz_tiers;

/*
 * Contexts for the masks 0 (scalar), then every prefix of the CPU's ISA bits (avx2, avx2+avx512
 * ...), keeping only those whose kernel tables differ (same qs_ctx_isa: same tier). Tier 0 is
 * the scalar reference, the oracle the others are compared with.
 */
static inline fz_tiers *fz_tiers_get(void)
{
    static fz_tiers t;
    static int done;
    if (done)
        return &t;
    done = 1;
    uint32_t cpu = qs_cpu_isa(), mask = 0;
    uint32_t seen[FZ_MAX_TIERS];
    for (int bit = -1; bit < 32 && t.count < FZ_MAX_TIERS; bit++) {
        if (bit >= 0) {
            if (!(cpu & (1u << bit)))
                continue;
            mask |= 1u << bit;
        }
        qs_ctx_params p;
        qs_ctx_params_init(&p);
        p.num_threads = 1;
        p.isa_mask = mask;
        qs_ctx *c = NULL;
        if (qs_ctx_create(&p, &c) != QS_OK)
            fz_fail("qs_ctx_create failed for ISA mask %#x", mask);
        uint32_t isa = qs_ctx_isa(c);
        int dup = 0;
        for (int i = 0; i < t.count; i++)
            dup |= seen[i] == isa;
        if (dup) {
            qs_ctx_destroy(c);
            continue;
        }
        seen[t.count] = isa;
        t.ctx[t.count++] = c;
    }
    return &t;
}

/* Name of a context's best ISA ("scalar", "avx2", "avx512", "neon", ...), for messages. */
static inline const char *fz_tier_name(const qs_ctx *ctx)
{
    uint32_t isa = qs_ctx_isa(ctx);
    for (int bit = 31; bit >= 0; bit--)
        if (isa & (1u << bit)) {
            const char *name = qs_isa_name(1u << bit);
            return name ? name : "?";
        }
    return "scalar";
}

/* ---- canary buffers --------------------------------------------------------------------------- */

/*
 * A heap buffer of exactly `bytes` bytes (so ASan sees any write past it), filled with the
 * canary. malloc(0) may return NULL; one byte is allocated then, and `bytes` stays 0.
 */
static inline uint8_t *fz_canary_new(size_t bytes)
{
    uint8_t *p = malloc(bytes ? bytes : 1);
    if (!p)
        fz_fail("out of memory for %zu bytes", bytes);
    memset(p, FZ_CANARY, bytes ? bytes : 1);
    return p;
}

static inline int fz_untouched(const uint8_t *p, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (p[i] != FZ_CANARY)
            return 0;
    return 1;
}

/* ---- float comparison ------------------------------------------------------------------------- */

static inline int fz_is_nan_bits(uint32_t bits, int dtype)
{
    if (dtype == QS_DTYPE_F32)
        return (bits & 0x7F800000u) == 0x7F800000u && (bits & 0x007FFFFFu);
    if (dtype == QS_DTYPE_F16)
        return (bits & 0x7C00u) == 0x7C00u && (bits & 0x03FFu);
    return (bits & 0x7F80u) == 0x7F80u && (bits & 0x007Fu); /* bf16 */
}

/*
 * First index where two float outputs of `dtype` differ bit for bit, or -1. With "nan" in
 * QS_FUZZ_KNOWN two NaNs count as equal whatever their bits.
 */
static inline int64_t fz_float_diff(const void *a, const void *b, int64_t n, int dtype)
{
    int esz = dtype == QS_DTYPE_F32 ? 4 : 2;
    int lax = fz_known("nan");
    for (int64_t i = 0; i < n; i++) {
        uint32_t x = 0, y = 0;
        memcpy(&x, (const uint8_t *)a + i * esz, (size_t)esz);
        memcpy(&y, (const uint8_t *)b + i * esz, (size_t)esz);
        if (x == y)
            continue;
        if (lax && fz_is_nan_bits(x, dtype) && fz_is_nan_bits(y, dtype))
            continue;
        return i;
    }
    return -1;
}

static inline int64_t fz_byte_diff(const void *a, const void *b, size_t bytes)
{
    for (size_t i = 0; i < bytes; i++)
        if (((const uint8_t *)a)[i] != ((const uint8_t *)b)[i])
            return (int64_t)i;
    return -1;
}

#endif /* QS_FUZZ_COMMON_H */
