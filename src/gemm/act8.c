/* SPDX-License-Identifier: MIT */
/*
 * int8 activations: the LLM.int8 vector-wise quantizer (qs_int8_vectorwise_quant, bitsandbytes'
 * int8_vectorwise_quant) and the int8 part of qs_matmul: integer dot products against INT8 and
 * LLM_INT8 weights with the outlier columns in f32, or, for every other weight, the f32 path on
 * the dequantized activations x^ (include/qsparse/matmul.h gives the definition).
 */
#include <math.h>
#include <string.h>

#include "../ref/ref.h"
#include "../core/parallel.h"
#include "gemm_internal.h"

#define MM_FLAG_COLS 256 /* columns per outlier-scan task */

/* ---- the quantizer ----------------------------------------------------------------------------
 */

struct act_job {
    const qs_ctx *ctx;
    const float *x;
    int64_t M, K;
    float threshold;
    const uint8_t *flags;
    uint8_t *wflags;
    int8_t *codes;
    float *rstat;
};

static void flag_task(void *arg, int64_t t, float *tile)
{
    const struct act_job *a = arg;
    int64_t c0 = t * MM_FLAG_COLS, c1 = c0 + MM_FLAG_COLS < a->K ? c0 + MM_FLAG_COLS : a->K;

    (void)tile;
    memset(a->wflags + c0, 0, (size_t)(c1 - c0));
    for (int64_t m = 0; m < a->M; m++) {
        /* a row span whose absmax (NaN ignored) is below the threshold holds no outlier */
        if (a->ctx->k.amax_f32(a->x + m * a->K + c0, c1 - c0) < a->threshold)
            continue;
        for (int64_t k = c0; k < c1; k++)
            if (fabsf(qs_ld_f32(a->x + m * a->K + k)) >= a->threshold)
                a->wflags[k] = 1;
    }
}

void qs_mm_outlier_flags(const qs_ctx *ctx, const float *x, int64_t M, int64_t K, float threshold,
                         uint8_t *flags)
{
    struct act_job a = {ctx, x, M, K, threshold, NULL, flags, NULL, NULL};

    qs_parallel_run(ctx, qs_ceil_div(K, MM_FLAG_COLS), qs_work(qs_work(M, K), 4), flag_task, NULL,
                    &a);
}

static void quant_task(void *arg, int64_t m, float *tile)
{
    const struct act_job *a = arg;
    const float *x = a->x + m * a->K;
    float amax = 0.0f, mul;

    (void)tile;
    /* bitsandbytes zeroes the outlier elements (|x| >= threshold) before the row absmax; the
     * amax kernel has the same NaN rule, and a row whose absmax is below the threshold has no
     * element to leave out. */
    amax = a->ctx->k.amax_f32(x, a->K);
    if (a->threshold > 0.0f && amax >= a->threshold) {
        amax = 0.0f;
        for (int64_t k = 0; k < a->K; k++) {
            float v = qs_ld_f32(x + k);
            if (!(fabsf(v) >= a->threshold))
                amax = qs_ref_absmax_step(amax, v);
        }
    }
    mul = 127.0f / amax; /* inf for an all-zero row: every product is 0 or NaN, both code 0 */
    qs_st_f32(a->rstat + m, amax); /* the caller's row_stats may sit at any byte */
    a->ctx->k.int8_quant(x, a->K, mul, 0, -127, a->codes + m * a->K);
    if (a->flags)
        for (int64_t k = 0; k < a->K; k++)
            if (a->flags[k])
                a->codes[m * a->K + k] = 0;
}

void qs_mm_quantize_rows(const qs_ctx *ctx, const float *x, int64_t M, int64_t K, float threshold,
                         const uint8_t *flags, int8_t *codes, float *rstat)
{
    struct act_job a = {ctx, x, M, K, threshold, flags, NULL, codes, rstat};

    qs_parallel_run(ctx, M, qs_work(qs_work(M, K), 9), quant_task, NULL, &a);
}

struct cvt_job {
    const qs_ctx *ctx;
    const void *src;
    int32_t dtype;
    int64_t n;
    float *dst;
};

static void cvt_task(void *arg, int64_t i, float *tile)
{
    const struct cvt_job *c = arg;
    int64_t start = i * QS_TILE, len = c->n - start < QS_TILE ? c->n - start : QS_TILE;

    (void)tile;
    if (c->dtype == QS_DTYPE_F32)
        memcpy(c->dst + start, (const float *)c->src + start, (size_t)len * sizeof(float));
    else if (c->dtype == QS_DTYPE_F16)
        c->ctx->k.cvt_f16_f32((const uint16_t *)c->src + start, len, c->dst + start);
    else
        c->ctx->k.cvt_bf16_f32((const uint16_t *)c->src + start, len, c->dst + start);
}

QS_API qs_status qs_int8_vectorwise_quant(qs_ctx *ctx, const void *x, int32_t dtype, int64_t M,
                                          int64_t K, float threshold, int8_t *codes,
                                          int64_t codes_bytes, float *row_stats,
                                          int64_t row_stats_count, int64_t *outlier_cols,
                                          int64_t outlier_capacity, int64_t *n_outliers)
{
    int64_t n, bytes, count = 0;
    float *xf = NULL;
    uint8_t *flags = NULL;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (qs_dtype_size(dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown dtype %d", dtype);
    if (M < 0 || K < 0 || outlier_capacity < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "negative size M=%lld K=%lld capacity=%lld",
                       (long long)M, (long long)K, (long long)outlier_capacity);
    if (!(threshold >= 0.0f) || isinf(threshold))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "threshold must be finite and >= 0, got %g",
                       (double)threshold);
    if (qs_mul_overflow(M, K, &n) || qs_mul_overflow(n, 4, &bytes))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%lld x %lld overflows", (long long)M, (long long)K);
    if (!n_outliers || (n > 0 && (!x || !codes)) || (M > 0 && !row_stats) ||
        (outlier_capacity > 0 && !outlier_cols))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "a pointer argument is NULL");
    if (codes_bytes < n)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "codes hold %lld bytes, %lld needed",
                       (long long)codes_bytes, (long long)n);
    if (row_stats_count < M)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "row_stats holds %lld floats, %lld needed",
                       (long long)row_stats_count, (long long)M);
    if (ctx->nonfinite == QS_NONFINITE_REJECT && qs_tensor_nonfinite(ctx, x, dtype, n))
        return qs_fail(ctx, QS_ERR_NONFINITE, "x holds NaN or Inf (the context rejects them)");
    if (n == 0) {
        /* No elements: no outliers and every row's statistic is 0. Work and scratch must not
         * grow with the other dimension (0 x 2^61 would allocate and scan 2^61 column flags). */
        for (int64_t m = 0; m < M; m++)
            qs_st_f32(row_stats + m, 0.0f); /* the caller's row_stats may sit at any byte */
        *n_outliers = 0;
        return qs_ok(ctx);
    }
    xf = qs_scratch_alloc(ctx, (size_t)bytes);
    flags = qs_scratch_alloc(ctx, (size_t)(K > 0 ? K : 1));
    if (!xf || !flags) {
        qs_scratch_free(ctx, xf);
        qs_scratch_free(ctx, flags);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld activations", (long long)n);
    }
    {
        struct cvt_job c = {ctx, x, dtype, n, xf};
        qs_parallel_run(ctx, qs_ceil_div(n, QS_TILE), qs_work(n, 8), cvt_task, NULL, &c);
    }
    memset(flags, 0, (size_t)K);
    if (threshold > 0.0f)
        qs_mm_outlier_flags(ctx, xf, M, K, threshold, flags);
    for (int64_t k = 0; k < K; k++)
        count += flags[k];
    if (count > outlier_capacity) {
        qs_scratch_free(ctx, xf);
        qs_scratch_free(ctx, flags);
        *n_outliers = count;
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL,
                       "%lld outlier columns, outlier_cols holds %lld", (long long)count,
                       (long long)outlier_capacity);
    }
    qs_mm_quantize_rows(ctx, xf, M, K, threshold, threshold > 0.0f ? flags : NULL, codes,
                        row_stats);
    count = 0;
    for (int64_t k = 0; k < K; k++)
        if (flags[k])
            outlier_cols[count++] = k;
    *n_outliers = count;
    qs_scratch_free(ctx, xf);
    qs_scratch_free(ctx, flags);
    return qs_ok(ctx);
}

/* ---- the matmul with int8 activations ---------------------------------------------------------
 */

/* Row m of y, columns [n0, n0 + rows), from the a8 kernel's sums a (overwritten): the activation
 * scale by the descriptor's a8 rule, the outlier columns, the bias, the NaN rule. One rule per
 * loop over the row, so that the compiler vectorizes each (at M = 512 this runs for every one
 * of the M x N outputs). */
static void a8_row(const struct qs_mm_job *j, int64_t m, int64_t n0, int64_t rows, float *a)
{
    const int32_t rule = j->mt->a8_rule;
    const float rm = j->rstat[m];
    float *y = j->y + m * j->N + n0;

    if (rule == QS_A8_ROWSTAT) { /* bitsandbytes' CUDA rule, its order and constant */
        const float *scb = (const float *)j->w.scale + n0;
        for (int64_t n = 0; n < rows; n++)
            a[n] = ((a[n] * rm) * qs_ld_f32(scb + n)) * QS_MM_INV16129;
    } else {
        const float f = rule == QS_A8_CODEBOOK_I8 ? rm / 16129.0f : rm / 127.0f;
        for (int64_t n = 0; n < rows; n++)
            a[n] = a[n] * f;
    }
    if (j->nout > 0)
        for (int64_t n = 0; n < rows; n++) {
            float o = 0.0f;
            for (int64_t c = 0; c < j->nout; c++)
                o = o + j->xo[m * j->nout + c] * j->wo[(n0 + n) * j->nout + c];
            a[n] = a[n] + o;
        }
    if (j->bias)
        for (int64_t n = 0; n < rows; n++)
            a[n] = a[n] + qs_ld_f32(j->bias + n0 + n);
    for (int64_t n = 0; n < rows; n++)
        qs_st_f32(y + n, qs_ref_nan_canon(a[n]));
}

/* The a8 kernel's sums into scratch, x rows in blocks of the plan's x_rows, then y by a8_row. */
static void a8_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    int64_t nb = j->plan.task_rows, n0 = t * nb, n1 = n0 + nb < j->N ? n0 + nb : j->N, K = j->K;
    int64_t rows = n1 - n0, xr = j->M < j->plan.x_rows ? j->M : j->plan.x_rows;
    int64_t xs = qs_ceil_div(K, j->xsum_unit);
    qs_mm_a8_fn *fn = (qs_mm_a8_fn *)j->plan.entry->fn;
    qs_mm_weight w = j->w;
    static const float one = 1.0f;

    if (j->mt->a8_rule == QS_A8_ROWSTAT) { /* the kernel's raw integer sums; SCB is applied below */
        w.scale = &one;
        w.sstride = 0;
        w.group = K;
    }
    for (int64_t m0 = 0; m0 < j->M; m0 += xr) {
        int64_t mc = j->M - m0 < xr ? j->M - m0 : xr;
        fn(j->xq + m0 * K, j->xsum + m0 * xs, mc, &w, n0, rows, scratch, rows);
        for (int64_t m = m0; m < m0 + mc; m++)
            a8_row(j, m, n0, rows, scratch + (m - m0) * rows);
    }
}

/* Outlier weight columns: W[n, cols[c]] dequantized by the format's rule. Blocks along the rows
 * (MX, NVFP4: 4-bit codes whose blocks the dequantize kernels start at a block's first element)
 * are decoded whole, from the block's start, into the second half of the scratch. */
static void wo_task(const struct qs_mm_job *j, int64_t n, float *scratch)
{
    float *wo = (float *)j->wo + n * j->nout;
    int64_t g = j->w.group;

    for (int64_t c = 0; c < j->nout; c++) {
        int64_t col = j->ocols[c];
        if (j->t->units == QS_UNITS_ROW_BLOCKS) {
            int64_t b0 = col - col % g, len = j->K - b0 < g ? j->K - b0 : g;
            qs_mm_span_dequant(j, n, b0, len, scratch + QS_TILE, scratch);
            wo[c] = scratch[QS_TILE + col - b0];
        } else {
            qs_mm_span_dequant(j, n, col, 1, wo + c, scratch);
        }
    }
}

/* Sums of each x row's codes over units of j->xsum_unit elements (the kernels' corrections). */
static void xsum_task(const struct qs_mm_job *j, int64_t m, float *scratch)
{
    int64_t unit = j->xsum_unit, nu = qs_ceil_div(j->K, unit);
    const int8_t *x = j->xq + m * j->K;
    int32_t *xs = (int32_t *)j->xsum + m * nu;

    (void)scratch;
    for (int64_t u = 0; u < nu; u++) {
        int64_t k1 = (u + 1) * unit < j->K ? (u + 1) * unit : j->K;
        int32_t s = 0;
        for (int64_t k = u * unit; k < k1; k++)
            s += x[k];
        xs[u] = s;
    }
}

/* x^ = the dequantized codes, with the outlier columns as given. */
static void xhat_task(const struct qs_mm_job *j, int64_t m, float *scratch)
{
    float *xh = j->xhat + m * j->K;
    const uint8_t *flags = j->oflags;

    (void)scratch;
    j->ctx->k.int8_dequant_rowstat(j->xq + m * j->K, j->K, j->rstat[m], xh);
    if (flags)
        for (int64_t k = 0; k < j->K; k++)
            if (flags[k])
                xh[k] = qs_ld_f32(j->x + m * j->K + k);
}

qs_status qs_mm_run_int8(qs_ctx *ctx, struct qs_mm_job *j, float threshold)
{
    int64_t M = j->M, K = j->K, N = j->N, mk = M * K, nout = 0, per_thread, panel, xt;
    int32_t threads = qs_threads(ctx);
    int integer = j->plan.path == QS_MM_A8;
    int8_t *codes = qs_scratch_alloc(ctx, (size_t)(mk > 0 ? mk : 1));
    float *rstat = qs_scratch_alloc(ctx, (size_t)M * sizeof(float));
    uint8_t *flags = threshold > 0.0f ? qs_scratch_alloc(ctx, (size_t)(K > 0 ? K : 1)) : NULL;
    int64_t *cols = NULL;
    int32_t *xsum = NULL;
    float *a = NULL, *b = NULL, *scratch = NULL, *big = NULL;
    qs_status st = QS_ERR_OUT_OF_MEMORY;

    if (!codes || !rstat || (threshold > 0.0f && !flags))
        goto done;
    if (flags) {
        qs_mm_outlier_flags(ctx, j->x, M, K, threshold, flags);
        for (int64_t k = 0; k < K; k++)
            nout += flags[k];
    }
    if (integer) {
        /* the descriptor says per how many elements the kernels correct (NF4/FP4 and FP8 per
         * 64, INT8 per scale unit, LLM.int8 per row, MX and NVFP4 per block) */
        j->xsum_unit = j->mt->a8_xsum > 0                ? j->mt->a8_xsum
                       : j->mt->a8_rule == QS_A8_ROWSTAT ? K
                                                         : j->w.group;
        /* the kernel's output tile, and a decode tile for the outlier columns' blocks */
        per_thread = (M < j->plan.x_rows ? M : j->plan.x_rows) * j->plan.task_rows + QS_TILE;
        if (per_thread < 2 * QS_TILE) /* wo_task: a decode tile and a row block */
            per_thread = 2 * QS_TILE;
        xsum = qs_scratch_alloc(ctx, (size_t)(M * qs_ceil_div(K, j->xsum_unit)) * sizeof(int32_t));
        scratch = qs_scratch_alloc(ctx, (size_t)(threads * per_thread) * sizeof(float));
        if (!xsum || !scratch)
            goto done;
        if (nout > 0) {
            cols = qs_scratch_alloc(ctx, (size_t)nout * sizeof(int64_t));
            a = qs_scratch_alloc(ctx, (size_t)(M * nout) * sizeof(float));
            b = qs_scratch_alloc(ctx, (size_t)(N * nout) * sizeof(float));
            if (!cols || !a || !b)
                goto done;
        }
    } else {
        a = qs_scratch_alloc(ctx, (size_t)(mk > 0 ? mk : 1) * sizeof(float));
        qs_mm_f32_scratch(j, &per_thread, &panel, &xt);
        scratch = per_thread > 0
                      ? qs_scratch_alloc(ctx, (size_t)(threads * per_thread) * sizeof(float))
                      : NULL;
        big = panel + xt > 0 ? qs_scratch_alloc(ctx, (size_t)(panel + xt) * sizeof(float)) : NULL;
        if (!a || (per_thread > 0 && !scratch) || (panel + xt > 0 && !big))
            goto done;
    }
    /* Everything allocated: from here on nothing fails. */
    st = QS_OK;
    qs_mm_quantize_rows(ctx, j->x, M, K, threshold, flags, codes, rstat);
    j->xq = codes;
    j->rstat = rstat;
    j->scratch = scratch;
    j->per_thread = per_thread;
    if (integer) {
        j->nout = nout;
        if (nout > 0) {
            int64_t c = 0;
            for (int64_t k = 0; k < K; k++)
                if (flags[k]) {
                    cols[c] = k;
                    for (int64_t m = 0; m < M; m++)
                        a[m * nout + c] = qs_ld_f32(j->x + m * K + k);
                    c++;
                }
            j->xo = a;
            j->wo = b;
            j->ocols = cols;
            qs_mm_parallel(j, N, wo_task);
        }
        j->xsum = xsum;
        qs_mm_parallel(j, M, xsum_task);
        if (!qs_ctx_kernel_select(ctx, QS_SLOT_mm_gemm_f32, M, N, K)) /* GEMV-sized */
            qs_mm_parallel_dynamic(j, qs_ceil_div(N, j->plan.task_rows), a8_task);
        else
            qs_mm_parallel(j, qs_ceil_div(N, j->plan.task_rows), a8_task);
    } else {
        j->xhat = a;
        j->oflags = flags;
        qs_mm_parallel(j, M, xhat_task);
        j->x = a;
        j->panel = panel > 0 ? big : NULL;
        j->xt = xt > 0 ? big + panel : NULL;
        qs_mm_run_f32(j);
    }
done:
    qs_scratch_free(ctx, codes);
    qs_scratch_free(ctx, rstat);
    qs_scratch_free(ctx, flags);
    qs_scratch_free(ctx, cols);
    qs_scratch_free(ctx, xsum);
    qs_scratch_free(ctx, a);
    qs_scratch_free(ctx, b);
    qs_scratch_free(ctx, scratch);
    qs_scratch_free(ctx, big);
    return st == QS_OK ? QS_OK : qs_fail(ctx, st, "no memory for the int8 activation path");
}
