/* SPDX-License-Identifier: MIT */
/*
 * Hessian statistics of a linear layer's inputs (docs/calibration.md §14): S = X^T X in double,
 * accumulated chunk by chunk (an f32 ssyrk of up to HS_CHUNK rows, then added in double; in
 * double throughout when the activations are large enough for an f32 sum to overflow, so S is
 * finite for every finite input), merged by addition (refused where a sum would overflow), and serialized as a versioned, checksummed little-endian byte string with the
 * conventions of the observer format (calib_serialize.c): every field written byte by byte, the
 * whole string checked before anything is allocated.
 *
 * Layout, version 1 (offsets in bytes):
 *   0 "QSHS"; 4 u32 version; 8 u32 header bytes (32); 12 u32 zero; 16 u64 K; 24 u64 tokens;
 *   32 the upper triangle of S, row by row, K (K + 1) / 2 IEEE doubles; then u64 FNV-1a of all
 *   preceding bytes.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../core/parallel.h"
#include "gptq_internal.h"

/* Rows per f32 partial sum. The double additions of a chunk read the K x K f32 partial and
 * read and write the double S: memory-bound, about a fifth of a 512-row ssyrk's time at K = 4096,
 * a twentieth of a 2048-row one's. The f32 sums stay short anyway: OpenBLAS's kernels sum a few
 * hundred rows in registers per pass and add the passes into C, so a 2048-row sum is a handful
 * of those partial sums (the documented bound, calibration.md §14, is the plain 2048-term one). */
#define HS_CHUNK 2048
#define HS_HEADER 32
#define HS_MAGIC "QSHS"

static void *hs_alloc(const qs_allocator *a, size_t bytes)
{
    return a->alloc(a->user, bytes, 64);
}

static void hs_free(const qs_allocator *a, void *p)
{
    if (p)
        a->free(a->user, p);
}

static qs_status hs_new(qs_ctx *ctx, int64_t k, qs_hessian **out, const char *who)
{
    qs_hessian *h;

    if (k < 1 || k > QS_HESSIAN_MAX_K)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: K = %lld is outside 1 ... %d", who,
                       (long long)k, QS_HESSIAN_MAX_K);
    h = hs_alloc(&ctx->allocator, sizeof *h);
    if (!h)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    memset(h, 0, sizeof *h);
    h->alloc = ctx->allocator;
    h->k = k;
    h->s = hs_alloc(&h->alloc, (size_t)k * (size_t)k * sizeof(double));
    if (!h->s) {
        hs_free(&h->alloc, h);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory for %lld x %lld doubles", who,
                       (long long)k, (long long)k);
    }
    memset(h->s, 0, (size_t)k * (size_t)k * sizeof(double));
    *out = h;
    return QS_OK;
}

QS_API qs_status qs_hessian_create(qs_ctx *ctx, int64_t k, qs_hessian **out)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!out)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_hessian_create: null pointer");
    qs_status st = hs_new(ctx, k, out, "qs_hessian_create");
    return st == QS_OK ? qs_ok(ctx) : st;
}

QS_API void qs_hessian_destroy(qs_hessian *h)
{
    if (!h)
        return;
    qs_allocator a = h->alloc;
    hs_free(&a, h->s);
    hs_free(&a, h);
}

QS_API qs_status qs_hessian_info(const qs_hessian *h, int64_t *k, int64_t *tokens)
{
    if (!h)
        return QS_ERR_INVALID_ARG;
    if (k)
        *k = h->k;
    if (tokens)
        *tokens = h->tokens;
    return QS_OK;
}

/* ---- update -------------------------------------------------------------------------------- */

#ifdef QS_HAVE_BLAS
struct hs_add_job {
    double *s;
    const float *part;
    int64_t k;
};

/* Upper-triangle rows of s += part, 16 at a time, one writer per element. Row r holds K - r
 * entries, so the tasks alternate between the two ends of the triangle (0, last, 1, last - 1,
 * ...): any contiguous half of the tasks, as a static schedule hands them out, gets half the
 * work. */
static void hs_add_task(void *arg, int64_t t, float *tile)
{
    const struct hs_add_job *j = arg;
    int64_t nb = qs_ceil_div(j->k, 16), b = t % 2 ? nb - 1 - t / 2 : t / 2;
    (void)tile;
    for (int64_t r = b * 16; r < j->k && r < b * 16 + 16; r++) {
        double *d = j->s + r * j->k;
        const float *p = j->part + r * j->k;
        for (int64_t c = r; c < j->k; c++)
            d[c] += (double)p[c];
    }
}

#endif

/* S += X^T X in double for n rows of f32 x (row stride k): products exact in double, each
 * element summed in row order. Tasks own bands of 16 rows of S (alternating between the two
 * ends of the triangle, as hs_add_task), so the bits do not depend on the thread count. */
struct hs_wide_job {
    double *s;
    const float *x;
    int64_t k, n;
};

static void hs_wide_task(void *arg, int64_t t, float *tile)
{
    const struct hs_wide_job *j = arg;
    int64_t nb = qs_ceil_div(j->k, 16), b = t % 2 ? nb - 1 - t / 2 : t / 2;
    int64_t r1 = b * 16 + 16 < j->k ? b * 16 + 16 : j->k;
    (void)tile;
    for (int64_t i = 0; i < j->n; i++) {
        const float *row = j->x + i * j->k;
        for (int64_t r = b * 16; r < r1; r++) {
            double xr = (double)row[r];
            double *d = j->s + r * j->k;
            if (xr == 0.0)
                continue;
            for (int64_t c = r; c < j->k; c++)
                d[c] += xr * (double)row[c];
        }
    }
}

/* S += X^T X for n rows of f32 x (row stride k). `wide`: the f32 partial sums could overflow
 * (hs_f32_safe), so the chunk is summed in double, where no finite activation can overflow. */
static void hs_accumulate(qs_ctx *ctx, qs_hessian *h, const float *x, int64_t n, float *part,
                          int wide)
{
    const int64_t k = h->k;
#ifdef QS_HAVE_BLAS
    if (!wide) {
        struct hs_add_job j = {h->s, part, k};
        cblas_ssyrk(CblasRowMajor, CblasUpper, CblasTrans, (int)k, (int)n, 1.0f, x, (int)k,
                    0.0f, part, (int)k);
        qs_parallel_for(ctx, qs_ceil_div(k, 16), hs_add_task, &j);
        return;
    }
#else
    (void)part;
    (void)wide;
#endif
    struct hs_wide_job w = {h->s, x, k, n};
    qs_parallel_for(ctx, qs_ceil_div(k, 16), hs_wide_task, &w);
}

/* Whether every f32 sum of up to `rows` products of values of magnitude <= amax stays finite:
 * each is at most rows * amax^2, kept under half of FLT_MAX for the rounding of the partial
 * sums. Beyond it (activations from about 4e17 up for 2048-row chunks) the double path is
 * taken. S itself cannot overflow: 2^63 tokens of FLT_MAX^2 sum to about 1e96. */
static int hs_f32_safe(float amax, int64_t rows)
{
    return (double)amax * (double)amax * (double)rows < 0.5 * (double)FLT_MAX;
}

QS_API qs_status qs_hessian_update(qs_ctx *ctx, qs_hessian *h, const void *x, int32_t dtype,
                                   int64_t rows, int64_t cols)
{
    const char *who = "qs_hessian_update";
    int64_t n, tok;
    float *stage = NULL, *part = NULL;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!h || (!x && rows > 0))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer", who);
    if (rows < 0 || cols < 0 || qs_dtype_size(dtype) <= 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: negative size or unknown dtype", who);
    if (cols != h->k)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns for a Hessian of K = %lld", who,
                       (long long)cols, (long long)h->k);
    if (qs_mul_overflow(rows, cols, &n) || qs_add_overflow(h->tokens, rows, &tok) ||
        n > INT64_MAX / 4)
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%s: size overflow", who);
    if (rows > INT32_MAX)
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%s: more than 2^31 rows in one call", who);
    if (rows == 0)
        return qs_ok(ctx);
    if (qs_tensor_nonfinite(ctx, x, dtype, n))
        return qs_fail(ctx, QS_ERR_NONFINITE, "%s: a NaN or Inf activation (nothing added)", who);

    int direct = dtype == QS_DTYPE_F32 && ((uintptr_t)x % sizeof(float)) == 0;
    int64_t chunk = rows < HS_CHUNK ? rows : HS_CHUNK;
    int wide = !hs_f32_safe(qs_tensor_amax(ctx, x, dtype, n), chunk);
#ifdef QS_HAVE_BLAS
    if (!wide) {
        part = qs_scratch_alloc(ctx, (size_t)h->k * (size_t)h->k * sizeof(float));
        if (!part)
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    }
#endif
    if (!direct) {
        stage = qs_scratch_alloc(ctx, (size_t)chunk * (size_t)cols * sizeof(float));
        if (!stage) {
            qs_scratch_free(ctx, part);
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
        }
    }
    for (int64_t r0 = 0; r0 < rows; r0 += HS_CHUNK) {
        int64_t m = rows - r0 < HS_CHUNK ? rows - r0 : HS_CHUNK;
        const float *xs;
        if (direct) {
            xs = (const float *)x + r0 * cols;
        } else {
            const uint8_t *src = (const uint8_t *)x + r0 * cols * qs_dtype_size(dtype);
            if (dtype == QS_DTYPE_F32)
                memcpy(stage, src, (size_t)(m * cols) * sizeof(float));
            else
                qs_convert(ctx, src, dtype, stage, QS_DTYPE_F32, m * cols,
                           m * cols * (int64_t)sizeof(float));
            xs = stage;
        }
        hs_accumulate(ctx, h, xs, m, part, wide);
    }
    h->tokens = tok;
    qs_scratch_free(ctx, stage);
    qs_scratch_free(ctx, part);
    return qs_ok(ctx);
}

QS_API qs_status qs_hessian_merge(qs_ctx *ctx, qs_hessian *dst, const qs_hessian *src)
{
    int64_t tok;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!dst || !src)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_hessian_merge: null pointer");
    if (dst->k != src->k)
        return qs_fail(ctx, QS_ERR_SHAPE, "qs_hessian_merge: K = %lld and %lld differ",
                       (long long)dst->k, (long long)src->k);
    if (qs_add_overflow(dst->tokens, src->tokens, &tok))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_hessian_merge: token count overflow");
    /* H = 2 S stays finite: a sum past DBL_MAX / 2 (possible only for matrices given near the
     * double range, qs_hessian_from_matrix or a serialized one) is refused before anything is
     * added */
    for (int64_t r = 0; r < dst->k; r++)
        for (int64_t c = r; c < dst->k; c++)
            if (!isfinite(2.0 * (dst->s[r * dst->k + c] + src->s[r * src->k + c])))
                return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_hessian_merge: S[%lld][%lld] would "
                               "overflow (nothing added)", (long long)r, (long long)c);
    for (int64_t r = 0; r < dst->k; r++)
        for (int64_t c = r; c < dst->k; c++)
            dst->s[r * dst->k + c] += src->s[r * src->k + c];
    dst->tokens = tok;
    return qs_ok(ctx);
}

QS_API qs_status qs_hessian_get(qs_ctx *ctx, const qs_hessian *h, double *dst, int64_t count)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!h || !dst)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_hessian_get: null pointer");
    if (count < h->k * h->k)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_hessian_get: %lld doubles, need %lld",
                       (long long)count, (long long)(h->k * h->k));
    for (int64_t r = 0; r < h->k; r++)
        for (int64_t c = r; c < h->k; c++) {
            double v = 2.0 * h->s[r * h->k + c];
            dst[r * h->k + c] = v;
            dst[c * h->k + r] = v;
        }
    return qs_ok(ctx);
}

QS_API qs_status qs_hessian_from_matrix(qs_ctx *ctx, const double *hm, int64_t k, int64_t tokens,
                                        qs_hessian **out)
{
    const char *who = "qs_hessian_from_matrix";
    qs_hessian *h;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!hm || !out || tokens < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer or negative token count", who);
    if (k < 1 || k > QS_HESSIAN_MAX_K)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: K = %lld out of range", who, (long long)k);
    for (int64_t r = 0; r < k; r++) {
        if (!(hm[r * k + r] >= 0.0))
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: diagonal %lld is negative or NaN", who,
                           (long long)r);
        for (int64_t c = r; c < k; c++)
            if (!isfinite(hm[r * k + c]))
                return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: H[%lld][%lld] is not finite", who,
                               (long long)r, (long long)c);
    }
    if ((st = hs_new(ctx, k, &h, who)) != QS_OK)
        return st;
    for (int64_t r = 0; r < k; r++)
        for (int64_t c = r; c < k; c++)
            h->s[r * k + c] = 0.5 * hm[r * k + c]; /* exact: S = H / 2 */
    h->tokens = tokens;
    *out = h;
    return qs_ok(ctx);
}

/* ---- serialization ------------------------------------------------------------------------- */

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static double get_f64(const uint8_t *p)
{
    uint64_t u = get64(p);
    double d;
    memcpy(&d, &u, sizeof d);
    return d;
}

static uint64_t fnv1a(const uint8_t *p, int64_t n)
{
    uint64_t h = 0xCBF29CE484222325ull;
    for (int64_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001B3ull;
    }
    return h;
}

/* Serialized size for K (K is bounded, so no overflow). */
static int64_t hs_size(int64_t k)
{
    return HS_HEADER + 8 * (k * (k + 1) / 2) + 8;
}

QS_API qs_status qs_hessian_serialized_size(const qs_hessian *h, int64_t *bytes)
{
    if (!h || !bytes)
        return QS_ERR_INVALID_ARG;
    *bytes = hs_size(h->k);
    return QS_OK;
}

QS_API qs_status qs_hessian_serialize(qs_ctx *ctx, const qs_hessian *h, void *dst,
                                      int64_t capacity, int64_t *written)
{
    uint8_t *p = dst, *q;
    int64_t size;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!h || !dst || !written)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_hessian_serialize: null pointer");
    size = hs_size(h->k);
    if (capacity < size)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_hessian_serialize: %lld bytes, need %lld",
                       (long long)capacity, (long long)size);
    memcpy(p, HS_MAGIC, 4);
    put32(p + 4, QS_HESSIAN_FORMAT_VERSION);
    put32(p + 8, HS_HEADER);
    put32(p + 12, 0);
    put64(p + 16, (uint64_t)h->k);
    put64(p + 24, (uint64_t)h->tokens);
    q = p + HS_HEADER;
    for (int64_t r = 0; r < h->k; r++)
        for (int64_t c = r; c < h->k; c++) {
            uint64_t u;
            memcpy(&u, &h->s[r * h->k + c], sizeof u);
            put64(q, u);
            q += 8;
        }
    put64(q, fnv1a(p, size - 8));
    *written = size;
    return qs_ok(ctx);
}

QS_API qs_status qs_hessian_deserialize(qs_ctx *ctx, const void *src, int64_t bytes,
                                        qs_hessian **out)
{
    const char *who = "qs_hessian_deserialize";
    const uint8_t *p = src, *q;
    uint64_t k, tokens;
    qs_hessian *h;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!src || !out || bytes < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer or negative size", who);
    if (bytes < HS_HEADER + 8 || memcmp(p, HS_MAGIC, 4) != 0)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: not a Hessian (magic or length)", who);
    if (get32(p + 4) != QS_HESSIAN_FORMAT_VERSION)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED, "%s: format version %u, this library reads %d", who,
                       get32(p + 4), QS_HESSIAN_FORMAT_VERSION);
    if (get32(p + 8) != HS_HEADER || get32(p + 12) != 0)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: bad header", who);
    k = get64(p + 16);
    tokens = get64(p + 24);
    if (k < 1 || k > QS_HESSIAN_MAX_K || tokens > (uint64_t)INT64_MAX)
        return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: K or token count out of range", who);
    if (bytes != hs_size((int64_t)k))
        return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: %lld bytes, K = %llu needs %lld", who,
                       (long long)bytes, (unsigned long long)k, (long long)hs_size((int64_t)k));
    if (fnv1a(p, bytes - 8) != get64(p + bytes - 8))
        return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: checksum mismatch", who);
    q = p + HS_HEADER;
    for (uint64_t r = 0; r < k; r++)
        for (uint64_t c = r; c < k; c++, q += 8) {
            double v = get_f64(q);
            if (!isfinite(2.0 * v) || (c == r && v < 0.0)) /* H = 2 S must be finite too */
                return qs_fail(ctx, QS_ERR_BAD_DATA, "%s: S[%llu][%llu] is not a valid value", who,
                               (unsigned long long)r, (unsigned long long)c);
        }
    if ((st = hs_new(ctx, (int64_t)k, &h, who)) != QS_OK)
        return st;
    q = p + HS_HEADER;
    for (int64_t r = 0; r < h->k; r++)
        for (int64_t c = r; c < h->k; c++, q += 8)
            h->s[r * h->k + c] = get_f64(q);
    h->tokens = (int64_t)tokens;
    *out = h;
    return qs_ok(ctx);
}
