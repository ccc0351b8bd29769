/* SPDX-License-Identifier: MIT */
/*
 * Using calibration results (docs/calibration.md §2, §8, formats.md §8-§10, §14): scales and zero
 * points of an observer for INT8, FP8 and NVFP4, quantizing a tensor with them in one call, the
 * dynamic per-token INT8 and per-tensor FP8 quantizers, and the per-channel sums of squares
 * behind Wanda's activation norms. Scale arithmetic is the reference's (src/ref/scale_ref.c);
 * element codes come from the kernel table, or from the reference element encoders where a
 * channel runs across rows (one scale per column).
 */
#include <math.h>
#include <string.h>

#include "../core/backend.h"
#include "../core/parallel.h"
#include "../ref/ref.h"
#include "../ref/scale_ref.h"
#include "calib_internal.h"

/* ---- scales and zero points ------------------------------------------------------------------ */

/* scale, mul (the encode multiplier) and zp per channel; `work` holds 3 * channels floats. */
static qs_status channel_params(qs_ctx *ctx, const qs_observer *obs, int32_t target,
                                float *scale, float *mul, int32_t *zp, float *work)
{
    float *amax = work, *lo = work + obs->channels, *hi = lo + obs->channels;
    qs_status st;

    if ((st = qs_observer_amax(ctx, obs, amax, obs->channels)) != QS_OK ||
        (st = qs_observer_range(ctx, obs, lo, hi, obs->channels)) != QS_OK)
        return st;
    for (int64_t c = 0; c < obs->channels; c++) {
        float a = amax[c], m = 0.0f;
        int32_t z = 0;
        switch (target) {
        case QS_CALIB_INT8_SYM: qs_ref_int8_symmetric(a, &scale[c], &m); break;
        case QS_CALIB_INT8_ASYM: {
            /* the observed range clipped to the method's threshold [-amax, amax] */
            float l = lo[c] < -a ? -a : lo[c], h = hi[c] > a ? a : hi[c];
            qs_ref_int8_asymmetric(l, h, &scale[c], &m, &z);
            break;
        }
        case QS_CALIB_FP8_E4M3: scale[c] = qs_ref_fp8_scale(a, 448.0f); break;
        case QS_CALIB_FP8_E5M2: scale[c] = qs_ref_fp8_scale(a, 57344.0f); break;
        default: scale[c] = qs_ref_nvfp4_global_scale(a); break;
        }
        if (mul)
            mul[c] = m;
        if (zp)
            zp[c] = z;
    }
    return qs_ok(ctx);
}

static int target_valid(int32_t target)
{
    return target >= QS_CALIB_INT8_SYM && target <= QS_CALIB_NVFP4;
}

QS_API qs_status qs_observer_qparams(qs_ctx *ctx, const qs_observer *obs, int32_t target,
                                     float *scale, int32_t *zero_point, int64_t count)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs || (!scale && obs->channels > 0))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_qparams: null pointer");
    if (!target_valid(target))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_qparams: unknown target %d", target);
    if (count < obs->channels)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_observer_qparams: %lld < %lld channels",
                       (long long)count, (long long)obs->channels);
    if (obs->channels == 0)
        return qs_ok(ctx);
    float *work = qs_scratch_alloc(ctx, (size_t)obs->channels * 3 * sizeof(float));
    if (!work)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "qs_observer_qparams: no scratch memory");
    qs_status st = channel_params(ctx, obs, target, scale, NULL, zero_point, work);
    qs_scratch_free(ctx, work);
    return st;
}

/* ---- applying the scales --------------------------------------------------------------------- */

struct apply_job {
    const qs_ctx *ctx;
    int32_t target, dtype, axis;
    int64_t rows, cols, n;
    const void *src;
    uint8_t *dst;
    const float *scale, *mul;
    const int32_t *zp;
};

/* len values of one channel c, with the table's kernels. */
static void encode_span(const struct apply_job *j, const float *x, int64_t len, int64_t c,
                        uint8_t *out)
{
    switch (j->target) {
    case QS_CALIB_INT8_SYM: j->ctx->k.int8_quant(x, len, j->mul[c], 0, -127, (int8_t *)out); break;
    case QS_CALIB_INT8_ASYM:
        j->ctx->k.int8_quant(x, len, j->mul[c], j->zp[c], -128, (int8_t *)out);
        break;
    case QS_CALIB_FP8_E4M3: j->ctx->k.e4m3_quant(x, len, j->scale[c], out); break;
    default: j->ctx->k.e5m2_quant(x, len, j->scale[c], out); break;
    }
}

/* One element of channel c: the reference element rules the kernels implement. */
static uint8_t encode_one(const struct apply_job *j, float x, int64_t c)
{
    switch (j->target) {
    case QS_CALIB_INT8_SYM: return (uint8_t)qs_ref_int8_encode(x, j->mul[c], 0, -127);
    case QS_CALIB_INT8_ASYM: return (uint8_t)qs_ref_int8_encode(x, j->mul[c], j->zp[c], -128);
    case QS_CALIB_FP8_E4M3: return qs_ref_e4m3_encode(x / j->scale[c]);
    default: return qs_ref_e5m2_encode(x / j->scale[c]);
    }
}

static void apply_task(void *arg, int64_t i, float *tile)
{
    const struct apply_job *j = arg;

    if (j->axis < 0) { /* per tensor: fixed chunks of the flattened tensor */
        int64_t start = i * QS_TILE, len = j->n - start < QS_TILE ? j->n - start : QS_TILE;
        encode_span(j, qs_stage_f32(j->ctx, j->src, j->dtype, start, len, tile), len, 0,
                    j->dst + start);
        return;
    }
    for (int64_t off = 0; off < j->cols; off += QS_TILE) { /* row i */
        int64_t len = j->cols - off < QS_TILE ? j->cols - off : QS_TILE;
        int64_t start = i * j->cols + off;
        const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, start, len, tile);
        if (j->axis == 0) {
            encode_span(j, x, len, i, j->dst + start);
        } else {
            for (int64_t e = 0; e < len; e++)
                j->dst[start + e] = encode_one(j, x[e], off + e);
        }
    }
}

static qs_status quantize_nvfp4(qs_ctx *ctx, const qs_observer *obs, const void *src,
                                int32_t dtype, int64_t rows, int64_t cols, qs_qtensor *q)
{
    qs_quant_params p;
    float s, work[3];
    qs_status st;

    if (obs->p.axis >= 0)
        return qs_fail(ctx, QS_ERR_UNSUPPORTED,
                       "qs_observer_quantize: NVFP4 has one per-tensor scale; use a per-tensor "
                       "observer");
    if ((st = channel_params(ctx, obs, QS_CALIB_NVFP4, &s, NULL, NULL, work)) != QS_OK)
        return st;
    qs_quant_params_init(&p, QS_FORMAT_NVFP4);
    p.scale = s; /* finite and > 0: the rule maps 0 to 1 (formats.md §14) */
    return qs_quantize(ctx, &p, src, dtype, rows, cols, q);
}

QS_API qs_status qs_observer_quantize(qs_ctx *ctx, const qs_observer *obs, int32_t target,
                                      const void *src, int32_t dtype, int64_t rows, int64_t cols,
                                      qs_qtensor *q)
{
    int64_t n, need_scale;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!obs || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: null pointer");
    if (!target_valid(target))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: unknown target %d",
                       target);
    if (dtype != QS_DTYPE_F32 && dtype != QS_DTYPE_F16 && dtype != QS_DTYPE_BF16)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: unknown dtype %d", dtype);
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: negative size");
    if (qs_mul_overflow(rows, cols, &n))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_observer_quantize: size overflows");
    if (target == QS_CALIB_NVFP4)
        return quantize_nvfp4(ctx, obs, src, dtype, rows, cols, q);
    if (obs->p.axis >= 0 && obs->channels != (obs->p.axis == 0 ? rows : cols))
        return qs_fail(ctx, QS_ERR_SHAPE,
                       "qs_observer_quantize: the observer has %lld channels, the tensor %lld",
                       (long long)obs->channels, (long long)(obs->p.axis == 0 ? rows : cols));
    for (size_t i = 0; i < sizeof q->reserved / sizeof q->reserved[0]; i++)
        if (q->reserved[i] != 0)
            return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: reserved fields");
    if ((n > 0 && (!src || !q->data)) || !q->scale ||
        (target == QS_CALIB_INT8_ASYM && !q->zero_point))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_observer_quantize: null plane or input");
    need_scale = obs->channels * 4;
    if (q->data_bytes < n || q->scale_bytes < need_scale ||
        (target == QS_CALIB_INT8_ASYM && q->zero_point_bytes < obs->channels))
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_observer_quantize: a plane is short");
    if (ctx->nonfinite == QS_NONFINITE_REJECT && n > 0 &&
        qs_tensor_nonfinite(ctx, src, dtype, n))
        return qs_fail(ctx, QS_ERR_NONFINITE, "qs_observer_quantize: NaN or Inf input");

    float *work = qs_scratch_alloc(ctx, (size_t)obs->channels * 6 * sizeof(float) + 64);
    if (!work)
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "qs_observer_quantize: no scratch memory");
    float *scale = work + 3 * obs->channels, *mul = scale + obs->channels;
    int32_t *zp = (int32_t *)(mul + obs->channels);
    if ((st = channel_params(ctx, obs, target, scale, mul, zp, work)) != QS_OK) {
        qs_scratch_free(ctx, work);
        return st;
    }
    memcpy(q->scale, scale, (size_t)obs->channels * sizeof(float));
    if (target == QS_CALIB_INT8_ASYM)
        for (int64_t c = 0; c < obs->channels; c++)
            ((int8_t *)q->zero_point)[c] = (int8_t)zp[c];
    struct apply_job j = {ctx, target, dtype, obs->p.axis, rows, cols, n, src, q->data,
                          scale, mul, zp};
    if (n > 0)
        qs_parallel_run(ctx, obs->p.axis < 0 ? qs_ceil_div(n, QS_TILE) : rows,
                        qs_work(n, qs_dtype_size(dtype) + 1), apply_task, NULL, &j);
    qs_scratch_free(ctx, work);
    return qs_ok(ctx);
}

/* ---- dynamic quantization (§8) --------------------------------------------------------------- */

static int64_t bytes_of(int64_t count, int64_t elem)
{
    return count > INT64_MAX / elem ? INT64_MAX : count * elem;
}

QS_API qs_status qs_quantize_dynamic_int8_per_token(qs_ctx *ctx, const void *src, int32_t dtype,
                                                    int64_t rows, int64_t cols, int8_t *dst,
                                                    int64_t dst_bytes, float *scales,
                                                    int64_t scales_count)
{
    qs_quant_params p;
    qs_qtensor q;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (scales_count < 0 || dst_bytes < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "dynamic int8: negative capacity");
    /* the row-wise INT8 driver measures each row and encodes it while it is in cache: the
     * range is computed in the same visit that quantizes (formats.md §8, §9) */
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    p.granularity = QS_GRAN_ROW;
    p.symmetric = 1;
    memset(&q, 0, sizeof q);
    q.data = dst;
    q.data_bytes = dst_bytes;
    q.scale = scales;
    q.scale_bytes = bytes_of(scales_count, 4);
    return qs_quantize(ctx, &p, src, dtype, rows, cols, &q);
}

QS_API qs_status qs_quantize_dynamic_fp8(qs_ctx *ctx, int32_t format, const void *src,
                                         int32_t dtype, int64_t n, uint8_t *dst,
                                         int64_t dst_bytes, float *scale)
{
    qs_quant_params p;
    qs_qtensor q;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (format != QS_FORMAT_FP8_E4M3 && format != QS_FORMAT_FP8_E5M2)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "dynamic fp8: format %d is not FP8", format);
    qs_quant_params_init(&p, format);
    p.scale = 0.0f; /* from the data: amax / elem_max (formats.md §10) */
    memset(&q, 0, sizeof q);
    q.data = dst;
    q.data_bytes = dst_bytes;
    q.scale = scale;
    q.scale_bytes = 4;
    return qs_quantize(ctx, &p, src, dtype, 1, n, &q);
}

/* ---- Wanda activation statistics ------------------------------------------------------------- */

/* Columns per task: each column's sum runs over the rows in order inside one task. */
#define SQ_COLS 1024

struct sq_job {
    const qs_ctx *ctx;
    const void *src;
    int32_t dtype;
    int64_t rows, cols;
    double *acc;
};

static void sumsq_task(void *arg, int64_t b, float *tile)
{
    const struct sq_job *j = arg;
    int64_t c0 = b * SQ_COLS, nc = j->cols - c0 < SQ_COLS ? j->cols - c0 : SQ_COLS;

    for (int64_t r = 0; r < j->rows; r++)
        j->ctx->k.hist_sumsq(qs_stage_f32(j->ctx, j->src, j->dtype, r * j->cols + c0, nc, tile),
                             nc, j->acc + c0);
}

QS_API qs_status qs_act_sumsq_update(qs_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                                     int64_t cols, double *sumsq, int64_t count)
{
    int64_t n;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (rows < 0 || cols < 0 || !sumsq)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_act_sumsq_update: bad argument");
    if (dtype != QS_DTYPE_F32 && dtype != QS_DTYPE_F16 && dtype != QS_DTYPE_BF16)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_act_sumsq_update: unknown dtype %d", dtype);
    if (qs_mul_overflow(rows, cols, &n))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "qs_act_sumsq_update: size overflows");
    if (n > 0 && !src)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_act_sumsq_update: null input");
    if (count < cols)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "qs_act_sumsq_update: %lld < %lld columns",
                       (long long)count, (long long)cols);
    if (!ctx->ops->act_sumsq)
        return qs_backend_unsupported(ctx, "act_sumsq (qs_act_sumsq_update)");
    if (n == 0)
        return qs_ok(ctx);
    ctx->last_error[0] = '\0';
    return qs_backend_result(
        ctx, ctx->ops->act_sumsq(qs_backend_handle(ctx), src, dtype, rows, cols, sumsq),
        "act_sumsq (qs_act_sumsq_update)");
}

/* The CPU backend's act_sumsq (backend.h), after the checks above. */
qs_status qs_cpu_act_sumsq(qs_ctx *ctx, const void *src, int32_t dtype, int64_t rows,
                           int64_t cols, double *sumsq)
{
    struct sq_job j = {ctx, src, dtype, rows, cols, sumsq};

    /* the work: every element read once (the caller checked rows * cols for overflow) */
    qs_parallel_run(ctx, qs_ceil_div(cols, SQ_COLS), qs_work(rows * cols, qs_dtype_size(dtype)),
                    sumsq_task, NULL, &j);
    return QS_OK;
}

QS_API qs_status qs_act_sumsq_merge(qs_ctx *ctx, double *dst, const double *src, int64_t count)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (count < 0 || (count > 0 && (!dst || !src)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_act_sumsq_merge: bad argument");
    for (int64_t j = 0; j < count; j++)
        dst[j] = dst[j] + src[j];
    return qs_ok(ctx);
}

QS_API qs_status qs_act_norms(qs_ctx *ctx, const double *sumsq, int64_t count, float *norms)
{
    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (count < 0 || (count > 0 && (!sumsq || !norms)))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_act_norms: bad argument");
    for (int64_t j = 0; j < count; j++)
        norms[j] = (float)sqrt(sumsq[j]);
    return qs_ok(ctx);
}
