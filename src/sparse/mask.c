/* SPDX-License-Identifier: MIT */
/*
 * N:M mask drivers (docs/sparsity.md §2, §6.4, §6.6): STRIP masks from |w|, Wanda scores or caller
 * scores, the transposable TILE mask, validity checks, the fused SR-STE step, mask application and
 * mask-flip counting. Each entry point checks every argument first, then runs table kernels over
 * fixed chunks of whole rows; f16/bf16 weights are staged to f32 (exactly) through the per-thread
 * tile, a group-aligned segment at a time.
 */
#include <math.h>
#include <string.h>

#include "sparse_internal.h"

/* ---- shared checks --------------------------------------------------------------------------- */

qs_status qs_sp_check_shape(qs_ctx *ctx, int64_t rows, int64_t cols, int64_t *n)
{
    int64_t bytes = 0;

    *n = 0;
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative shape %lld x %lld", (long long)rows,
                       (long long)cols);
    if (qs_mul_overflow(rows, cols, n) || qs_mul_overflow(*n, 4, &bytes))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "shape %lld x %lld overflows int64 byte counts",
                       (long long)rows, (long long)cols);
    return QS_OK;
}

qs_status qs_sp_check_nm(qs_ctx *ctx, int32_t n, int32_t m, int64_t cols)
{
    if (m < 2 || m > 16 || n < 1 || n >= m)
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "N:M = %d:%d is not supported (need 1 <= N < M <= 16)", n, m);
    if (cols % m != 0)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "cols = %lld is not a multiple of M = %d: N:M has no partial groups "
                       "(sparsity.md §2.2 rule 4); pad the rows",
                       (long long)cols, m);
    return QS_OK;
}

qs_status qs_sp_check_norms(qs_ctx *ctx, const float *norms, int64_t cols)
{
    if (!norms)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "Wanda needs the activation norms (NULL given)");
    for (int64_t j = 0; j < cols; j++) {
        float v = qs_ld_f32(norms + j); /* the caller's array may sit at any byte */
        if (!(v >= 0.0f))
            return qs_fail(ctx, QS_ERR_INVALID_ARG,
                           "activation norm %lld is %g: norms must be >= 0 and not NaN",
                           (long long)j, (double)v);
    }
    return QS_OK;
}

qs_status qs_sp_check_capacity(qs_ctx *ctx, const char *what, int64_t have, int64_t need)
{
    if (have < need)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "%s holds %lld, needs %lld", what,
                       (long long)have, (long long)need);
    return QS_OK;
}

static qs_status check_dtype(qs_ctx *ctx, int32_t dtype)
{
    if (qs_dtype_size(dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown dtype %d", dtype);
    return QS_OK;
}

/* 2:4 fast path of the scan below: kept counts of a group of 4 without the per-element switch. */
static int64_t first_bad_24(const void *x, int32_t dtype, int64_t r0, int64_t r1, int64_t cols)
{
    for (int64_t i = r0 * cols; i < r1 * cols; i += 4) {
        int kept;
        if (dtype == QS_DTYPE_MASK_U8) {
            const uint8_t *b = (const uint8_t *)x + i;
            kept = (b[0] != 0) + (b[1] != 0) + (b[2] != 0) + (b[3] != 0);
        } else if (dtype == QS_DTYPE_F32) {
            kept = 0;
            for (int k = 0; k < 4; k++) /* memcpy loads: the tensor may sit at any byte */
                kept += qs_ld_f32((const float *)x + i + k) != 0.0f;
        } else {
            kept = 0;
            for (int k = 0; k < 4; k++)
                kept += (qs_ld_u16((const uint16_t *)x + i + k) & 0x7FFFu) != 0;
        }
        if (kept > 2)
            return i;
    }
    return -1;
}

int64_t qs_sp_first_bad_group(const void *x, int32_t dtype, int64_t r0, int64_t r1, int64_t cols,
                              int32_t n, int32_t m)
{
    if (n == 2 && m == 4)
        return first_bad_24(x, dtype, r0, r1, cols);
    for (int64_t r = r0; r < r1; r++)
        for (int64_t c = 0; c < cols; c += m) {
            int32_t kept = 0;
            for (int32_t i = 0; i < m; i++)
                kept += qs_sp_kept(x, dtype, r * cols + c + i);
            if (kept > n)
                return r * cols + c;
        }
    return -1;
}

/* ---- STRIP masks (§2.2) ---------------------------------------------------------------------- */

struct mask_job {
    const qs_ctx *ctx;
    const void *w;
    int32_t dtype, n, m, method;
    int64_t rows, cols, rows_per_task;
    const float *norms;
    uint8_t *mask;
};

static void mask_segment(const struct mask_job *j, const float *x, const float *norm, int64_t len,
                         uint8_t *mask)
{
    if (j->n == 2 && j->m == 4 && j->method != QS_PRUNE_SCORE)
        j->ctx->k.sp24_mask_f32(x, norm, len, mask);
    else
        j->ctx->k.nm_mask_f32(x, norm, len, j->n, j->m, j->method, mask);
}

static void mask_task(void *arg, int64_t t, float *tile)
{
    const struct mask_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    int64_t seg = (QS_TILE / j->m) * j->m;

    if (r1 > j->rows)
        r1 = j->rows;
    for (int64_t r = r0; r < r1; r++) {
        if (j->dtype == QS_DTYPE_F32) {
            mask_segment(j, (const float *)j->w + r * j->cols, j->norms, j->cols,
                         j->mask + r * j->cols);
            continue;
        }
        for (int64_t c = 0; c < j->cols; c += seg) {
            int64_t len = j->cols - c < seg ? j->cols - c : seg;
            const float *x = qs_stage_f32(j->ctx, j->w, j->dtype, r * j->cols + c, len, tile);
            mask_segment(j, x, j->norms ? j->norms + c : NULL, len, j->mask + r * j->cols + c);
        }
    }
}

/* Checks of the mask entry points; *count = rows * cols. */
static qs_status check_mask_args(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                 int64_t cols, int32_t method, const float *norms,
                                 const uint8_t *mask, int64_t mask_bytes, int64_t *count)
{
    qs_status st;

    if ((st = check_dtype(ctx, dtype)) != QS_OK)
        return st;
    if ((st = qs_sp_check_shape(ctx, rows, cols, count)) != QS_OK)
        return st;
    if ((!w || !mask) && *count > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", w ? "mask" : "w");
    if (method == QS_PRUNE_WANDA) {
        if ((st = qs_sp_check_norms(ctx, norms, cols)) != QS_OK)
            return st;
    } else if (method == QS_PRUNE_MAGNITUDE || method == QS_PRUNE_SCORE) {
        if (norms)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "norms are only used by Wanda");
        if (method == QS_PRUNE_SCORE && dtype != QS_DTYPE_F32)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "caller scores must be float32");
    } else {
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown pruning method %d", method);
    }
    return qs_sp_check_capacity(ctx, "mask", mask_bytes, *count);
}

QS_API qs_status qs_nm_mask(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows, int64_t cols,
                            int32_t n, int32_t m, int32_t method, const float *norms,
                            uint8_t *mask, int64_t mask_bytes)
{
    struct mask_job j;
    int64_t count = 0;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = qs_sp_check_nm(ctx, n, m, cols)) != QS_OK)
        return st;
    if ((st = check_mask_args(ctx, w, dtype, rows, cols, method, norms, mask, mask_bytes,
                              &count)) != QS_OK)
        return st;
    j = (struct mask_job){ctx, w, dtype, n, m, method, rows, cols, qs_sp_rows_per_task(cols),
                          norms, mask};
    if (count > 0)
        qs_parallel_run(ctx, qs_ceil_div(rows, j.rows_per_task),
                        qs_work(count, qs_dtype_size(dtype) + 1), mask_task, NULL, &j);
    return qs_ok(ctx);
}

/* ---- TILE (§2.3) ----------------------------------------------------------------------------- */

/* Columns of one staged strip: 4 rows of TILE_SEG floats fill the QS_TILE floats of the tile. */
#define TILE_SEG (QS_TILE / 4)

static void tile_task(void *arg, int64_t t, float *tile)
{
    const struct mask_job *j = arg;
    int64_t r = 4 * t;

    if (j->dtype == QS_DTYPE_F32) {
        j->ctx->k.sp24_tile_f32((const float *)j->w + r * j->cols, j->cols, j->norms, j->cols,
                                j->method, j->mask + r * j->cols, j->cols);
        return;
    }
    for (int64_t c = 0; c < j->cols; c += TILE_SEG) {
        int64_t len = j->cols - c < TILE_SEG ? j->cols - c : TILE_SEG;
        /* 16-bit rows convert into the tile itself, one row every TILE_SEG floats. */
        for (int i = 0; i < 4; i++)
            qs_stage_f32(j->ctx, j->w, j->dtype, (r + i) * j->cols + c, len, tile + i * TILE_SEG);
        j->ctx->k.sp24_tile_f32(tile, TILE_SEG, j->norms ? j->norms + c : NULL, len, j->method,
                                j->mask + r * j->cols + c, j->cols);
    }
}

QS_API qs_status qs_sp24_tile_mask(qs_ctx *ctx, const void *w, int32_t dtype, int64_t rows,
                                   int64_t cols, const float *norms, int32_t variant,
                                   uint8_t *mask, int64_t mask_bytes)
{
    struct mask_job j;
    int64_t count = 0;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (variant != QS_TILE_BEST && variant != QS_TILE_GREEDY)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown TILE variant %d", variant);
    if (rows % 4 != 0 || cols % 4 != 0)
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "TILE masks need rows and cols multiples of 4 (got %lld x %lld)",
                       (long long)rows, (long long)cols);
    if ((st = check_mask_args(ctx, w, dtype, rows, cols,
                              norms ? QS_PRUNE_WANDA : QS_PRUNE_MAGNITUDE, norms, mask,
                              mask_bytes, &count)) != QS_OK)
        return st;
    j = (struct mask_job){ctx, w, dtype, 2, 4, variant, rows, cols, 4, norms, mask};
    if (count > 0)
        qs_parallel_for(ctx, rows / 4, tile_task, &j);
    return qs_ok(ctx);
}

/* ---- validity (§2.4) ------------------------------------------------------------------------- */

/* Top element of the first 4x4 tile column keeping more than 2, or -1. */
static int64_t first_bad_tile_column(const void *x, int32_t dtype, int64_t rows, int64_t cols)
{
    for (int64_t r = 0; r < rows; r += 4)
        for (int64_t c = 0; c < cols; c++) {
            int kept = 0;
            for (int i = 0; i < 4; i++)
                kept += qs_sp_kept(x, dtype, (r + i) * cols + c);
            if (kept > 2)
                return r * cols + c;
        }
    return -1;
}

QS_API qs_status qs_nm_check(qs_ctx *ctx, const void *x, int32_t dtype, int64_t rows,
                             int64_t cols, int32_t n, int32_t m, int32_t tile,
                             int64_t *first_bad)
{
    int64_t count = 0, bad;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (dtype != QS_DTYPE_MASK_U8 && (st = check_dtype(ctx, dtype)) != QS_OK)
        return st;
    if ((st = qs_sp_check_nm(ctx, n, m, cols)) != QS_OK)
        return st;
    if ((st = qs_sp_check_shape(ctx, rows, cols, &count)) != QS_OK)
        return st;
    if (!x && count > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "x is NULL");
    if (tile && (n != 2 || m != 4 || rows % 4 != 0))
        return qs_fail(ctx, rows % 4 != 0 ? QS_ERR_SHAPE : QS_ERR_INVALID_ARG,
                       "the TILE check needs 2:4 and rows %% 4 == 0 (got %d:%d, %lld rows)", n,
                       m, (long long)rows);
    if (count == 0) { /* rows x 0 (or 0 x cols) has no group: valid, without a pass over rows */
        if (first_bad)
            *first_bad = -1;
        return qs_ok(ctx);
    }
    bad = qs_sp_first_bad_group(x, dtype, 0, rows, cols, n, m);
    if (bad >= 0) {
        if (first_bad)
            *first_bad = bad;
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "not %d:%d: row %lld, columns %lld..%lld keep more than %d", n, m,
                       (long long)(bad / cols), (long long)(bad % cols),
                       (long long)(bad % cols + m - 1), n);
    }
    if (tile && (bad = first_bad_tile_column(x, dtype, rows, cols)) >= 0) {
        if (first_bad)
            *first_bad = bad;
        return qs_fail(ctx, QS_ERR_BAD_DATA,
                       "not transposable 2:4: column %lld keeps more than 2 in rows %lld..%lld",
                       (long long)(bad % cols), (long long)(bad / cols),
                       (long long)(bad / cols + 3));
    }
    if (first_bad)
        *first_bad = -1;
    return qs_ok(ctx);
}

/* ---- SR-STE and masking (§6.4, §6.6) --------------------------------------------------------- */

struct srste_job {
    const qs_ctx *ctx;
    const float *w, *grad;
    int32_t n, m;
    float lambda;
    int64_t rows, cols, rows_per_task;
    float *w_out, *g_out;
    uint8_t *mask;
};

static void srste_task(void *arg, int64_t t, float *tile)
{
    const struct srste_job *j = arg;
    int64_t r0 = t * j->rows_per_task, r1 = r0 + j->rows_per_task;
    int64_t off;

    (void)tile;
    if (r1 > j->rows)
        r1 = j->rows;
    off = r0 * j->cols;
    j->ctx->k.nm_srste_f32(j->w + off, j->grad ? j->grad + off : NULL, (r1 - r0) * j->cols,
                           j->n, j->m, j->lambda, j->w_out ? j->w_out + off : NULL,
                           j->g_out ? j->g_out + off : NULL, j->mask ? j->mask + off : NULL);
}

QS_API qs_status qs_nm_srste(qs_ctx *ctx, const float *w, const float *grad, int64_t rows,
                             int64_t cols, int32_t n, int32_t m, float lambda, float *w_masked,
                             float *grad_out, uint8_t *mask, int64_t n_out)
{
    struct srste_job j;
    int64_t count = 0;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = qs_sp_check_nm(ctx, n, m, cols)) != QS_OK)
        return st;
    if ((st = qs_sp_check_shape(ctx, rows, cols, &count)) != QS_OK)
        return st;
    if (!isfinite(lambda))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "lambda must be finite");
    if (grad_out && !grad)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "grad_out needs grad");
    if (count > 0 && (!w || (!w_masked && !grad_out && !mask)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s", w ? "no output requested" : "w is NULL");
    if ((st = qs_sp_check_capacity(ctx, "outputs", n_out, count)) != QS_OK)
        return st;
    j = (struct srste_job){ctx, w, grad, n, m, lambda, rows, cols, qs_sp_rows_per_task(cols),
                           w_masked, grad_out, mask};
    if (count > 0)
        qs_parallel_run(ctx, qs_ceil_div(rows, j.rows_per_task), qs_work(count, 17), srste_task,
                        NULL, &j);
    return qs_ok(ctx);
}

QS_API qs_status qs_nm_apply_mask(qs_ctx *ctx, const void *x, int32_t dtype, const uint8_t *mask,
                                  int64_t count, void *dst, int64_t dst_bytes)
{
    int64_t bytes;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if ((st = check_dtype(ctx, dtype)) != QS_OK)
        return st;
    if ((st = qs_sp_check_shape(ctx, 1, count, &bytes)) != QS_OK)
        return st;
    bytes = count * qs_dtype_size(dtype);
    if (count > 0 && (!x || !mask || !dst))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a pointer is NULL");
    if ((st = qs_sp_check_capacity(ctx, "dst", dst_bytes, bytes)) != QS_OK)
        return st;
    /* A select, not arithmetic: kept elements are copied bit for bit, the rest become +0. */
    /* Bytes, not typed elements: x and dst may sit at any byte. */
    {
        const size_t es = (size_t)qs_dtype_size(dtype);
        const uint8_t *s = x;
        uint8_t *d = dst;
        for (int64_t i = 0; i < count; i++) {
            if (mask[i])
                memcpy(d + (size_t)i * es, s + (size_t)i * es, es);
            else
                memset(d + (size_t)i * es, 0, es);
        }
    }
    return qs_ok(ctx);
}

QS_API qs_status qs_nm_mask_flips(qs_ctx *ctx, const uint8_t *a, const uint8_t *b, int64_t count,
                                  int64_t *flips)
{
    int64_t f = 0;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (count < 0 || !flips || (count > 0 && (!a || !b)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "bad arguments to qs_nm_mask_flips");
    for (int64_t i = 0; i < count; i++)
        f += (a[i] != 0) != (b[i] != 0);
    *flips = f;
    return qs_ok(ctx);
}
