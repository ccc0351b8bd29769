/* SPDX-License-Identifier: MIT */
/*
 * qs_quantize: checks every argument and size first, then runs the format's driver, which splits
 * the tensor into fixed chunks (parallel.h), stages them as f32 and calls table kernels. The scale
 * rules come from src/ref/scale_ref.c. Nothing is written before all checks have passed.
 */
#include <string.h>

#include "../ref/ref.h"
#include "../ref/scale_ref.h"
#include "parallel.h"
#include "backend.h"
#include "quant_common.h"
#include "profile_internal.h"

/* ---- NF4 / FP4 (formats.md §5, §6): chunks of whole blocks over the flattened tensor --------- */

static void bnb4_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = i * j->chunk, len = j->n - start < j->chunk ? j->n - start : j->chunk;
    const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, start, len, tile);
    qs_nf4_quant_fn *fn = (qs_nf4_quant_fn *)j->quant;

    fn(x, len, j->block, j->data + start / 2, j->absmax + start / j->block);
}

/* Nested quantization of the absmax vector, chunks of whole 256-blocks. */
static void dyn8_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = i * QS_DQ_CHUNK, len = j->units - start < QS_DQ_CHUNK ? j->units - start
                                                                          : QS_DQ_CHUNK;
    (void)tile;
    j->ctx->k.dyn8_quant(j->absmax + start, len, 256, j->scales + start,
                         j->nested + start / 256);
}

static qs_status quantize_bnb4(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                               qs_qtensor *q)
{
    float *scratch = NULL;

    j->chunk = (QS_TILE / j->block) * j->block;
    if (p->double_quant) {
        /* The f32 absmax goes to scratch first: the plane itself holds the 8-bit codes. */
        scratch = qs_scratch_alloc(ctx, (size_t)(j->units > 0 ? j->units : 1) * sizeof(float));
        if (!scratch)
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld absmax values",
                           (long long)j->units);
        j->absmax = scratch;
    } else {
        j->absmax = q->scale;
    }
    qs_parallel_run(ctx, qs_ceil_div(j->n, j->chunk), qs_qjob_work(j), bnb4_task, NULL, j);
    if (p->double_quant) {
        float offset = qs_ref_dq_offset(scratch, j->units);
        qs_ref_dq_center(scratch, j->units, offset);
        j->scales = q->scale;
        j->nested = q->nested_scale;
        qs_parallel_run(ctx, qs_ceil_div(j->units, QS_DQ_CHUNK), qs_work(j->units, 5), dyn8_task,
                        NULL, j);
        q->nested_offset = offset;
        qs_scratch_free(ctx, scratch);
    }
    return QS_OK;
}

/* ---- INT8 (formats.md §8, §9) ---------------------------------------------------------------- */

#define INT8_PF_PIECE 512 /* values quantized per prefetch of the next unit (2 KiB of f32) */

/* One scale unit (a row or a group): its range, its scale, then its codes. */
static void int8_unit_task(void *arg, int64_t u, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = u * j->unit_len;
    float scale, mul;
    int32_t zp = 0, qmin = -127;

    if (j->t->flags & QS_TRAIT_ROWSTAT) {
        float stat = qs_span_amax(j->ctx, j->src, j->dtype, start, j->unit_len, tile);
        qs_st_f32(j->fscale + u, stat); /* planes may sit at any byte */
        mul = qs_ref_llm_int8_mul(stat);
    } else if (j->symmetric) {
        qs_ref_int8_symmetric(qs_span_amax(j->ctx, j->src, j->dtype, start, j->unit_len, tile),
                              &scale, &mul);
        qs_st_f32(j->fscale + u, scale);
    } else {
        float lo = INFINITY, hi = -INFINITY;
        qs_span_minmax(j->ctx, j->src, j->dtype, start, j->unit_len, tile, &lo, &hi);
        qs_ref_int8_asymmetric(lo, hi, &scale, &mul, &zp);
        qs_st_f32(j->fscale + u, scale);
        j->zp[u] = (int8_t)zp;
        qmin = -128;
    }
    /* f32 units of up to QS_TILE: the codes in pieces, each after prefetching the same piece of
     * the next unit into L2, so that the next unit's range pass (the one pass from memory)
     * finds it there instead of waiting for memory while the core has nothing to do. */
    if (j->dtype == QS_DTYPE_F32 && j->unit_len <= QS_TILE && u + 1 < j->units) {
        const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, start, j->unit_len, tile);
        const char *next = (const char *)j->src + (start + j->unit_len) * 4;
        for (int64_t off = 0; off < j->unit_len; off += INT8_PF_PIECE) {
            int64_t len = j->unit_len - off < INT8_PF_PIECE ? j->unit_len - off : INT8_PF_PIECE;
            for (int64_t b = 0; b < len * 4; b += 64)
                __builtin_prefetch(next + off * 4 + b, 0, 2);
            ((qs_int8_quant_fn *)j->quant)(x + off, len, mul, zp, qmin,
                                           (int8_t *)j->data + start + off);
        }
        return;
    }
    for (int64_t off = 0; off < j->unit_len; off += QS_TILE) {
        int64_t len = j->unit_len - off < QS_TILE ? j->unit_len - off : QS_TILE;
        const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, start + off, len, tile);
        ((qs_int8_quant_fn *)j->quant)(x, len, mul, zp, qmin, (int8_t *)j->data + start + off);
    }
}

/* Per-tensor INT8 and FP8: one scale for all, fixed chunks. */
static void tensor_chunk_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = i * QS_TILE, len = j->n - start < QS_TILE ? j->n - start : QS_TILE;
    const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, start, len, tile);

    if (j->t->driver == QS_DRIVER_INT8)
        ((qs_int8_quant_fn *)j->quant)(x, len, j->mul, j->zero, j->qmin, (int8_t *)j->data + start);
    else
        ((qs_e4m3_quant_fn *)j->quant)(x, len, j->scale, j->data + start);
}

static void quantize_int8(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                          qs_qtensor *q)
{
    j->fscale = q->scale;
    j->zp = q->zero_point;
    /* formats without the symmetric option (LLM.int8) are symmetric */
    j->symmetric = (j->t->options & QS_OPT_SYMMETRIC) ? p->symmetric : 1;
    if (j->unit_rule == QS_UNITS_TENSOR) {
        float scale;
        if (j->symmetric) {
            qs_ref_int8_symmetric(qs_tensor_amax(ctx, j->src, j->dtype, j->n), &scale, &j->mul);
            j->zero = 0;
            j->qmin = -127;
        } else {
            float lo, hi;
            qs_tensor_minmax(ctx, j->src, j->dtype, j->n, &lo, &hi);
            qs_ref_int8_asymmetric(lo, hi, &scale, &j->mul, &j->zero);
            j->qmin = -128;
            ((int8_t *)q->zero_point)[0] = (int8_t)j->zero;
        }
        qs_st_f32(q->scale, scale);
        qs_parallel_run(ctx, qs_ceil_div(j->n, QS_TILE), qs_qjob_work(j), tensor_chunk_task, NULL,
                        j);
        return;
    }
    j->unit_len = j->unit_rule == QS_UNITS_ROW_BLOCKS ? j->block : j->cols;
    qs_parallel_run(ctx, j->units, qs_qjob_work(j), int8_unit_task, NULL, j);
}

/* ---- FP8 (formats.md §10) -------------------------------------------------------------------- */

static void quantize_fp8(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p, qs_qtensor *q)
{
    float elem_max = j->t->elem_max;

    j->scale = p->scale > 0.0f ? p->scale
                               : qs_ref_fp8_scale(qs_tensor_amax(ctx, j->src, j->dtype, j->n),
                                                  elem_max);
    qs_st_f32(q->scale, j->scale);
    qs_parallel_run(ctx, qs_ceil_div(j->n, QS_TILE), qs_qjob_work(j), tensor_chunk_task, NULL,
                        j);
}

/* ---- MX and NVFP4 (formats.md §13, §14): blocks along each row, tasks of (row, column chunk) - */

static void row_block_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t r = i / j->chunks_per_row, c0 = (i % j->chunks_per_row) * QS_TILE;
    int64_t len = j->cols - c0 < QS_TILE ? j->cols - c0 : QS_TILE;
    const float *x = qs_stage_f32(j->ctx, j->src, j->dtype, r * j->cols + c0, len, tile);
    uint8_t *scales = j->scales + r * j->scales_per_row + c0 / j->block;

    /* c0 is a multiple of QS_TILE, so the codes before it fill whole bytes */
    uint8_t *dst = j->data + r * j->row_bytes + c0 * j->t->bits / 8;

    if (j->t->driver == QS_DRIVER_MX)
        ((qs_mxfp4_quant_fn *)j->quant)(x, len, j->rounding, dst, scales);
    else
        ((qs_nvfp4_quant_fn *)j->quant)(x, len, j->scale, dst, scales);
}

static void quantize_rows(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                          qs_qtensor *q)
{
    j->scales = q->scale;
    j->rounding = p->scale_rounding;
    if (j->t->flags & QS_TRAIT_GLOBAL_SCALE) {
        j->scale = p->scale > 0.0f
                       ? p->scale
                       : qs_ref_nvfp4_global_scale(qs_tensor_amax(ctx, j->src, j->dtype, j->n));
        q->global_scale = j->scale;
    }
    qs_qjob_flatten_rows(j);
    qs_parallel_run(ctx, j->rows * j->chunks_per_row, qs_qjob_work(j), row_block_task, NULL, j);
}

/* ---- the CPU backend's quantize, then the public entry point -------------------------------- */

qs_status qs_cpu_quantize(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                          const void *src, int32_t src_dtype, qs_qtensor *q)
{
    struct qs_qjob j;
    qs_status st;

    qs_qjob_init(&j, ctx, l, src_dtype, q);
    j.src = src;
    switch (l->traits->driver) {
    case QS_DRIVER_BNB4:
        if ((st = quantize_bnb4(ctx, &j, p, q)) != QS_OK)
            return st;
        break;
    case QS_DRIVER_INT8: quantize_int8(ctx, &j, p, q); break;
    case QS_DRIVER_FP8: quantize_fp8(ctx, &j, p, q); break;
    default: quantize_rows(ctx, &j, p, q); break;
    }
    return QS_OK;
}

QS_API qs_status qs_quantize(qs_ctx *ctx, const qs_quant_params *params, const void *src,
                             int32_t src_dtype, int64_t rows, int64_t cols, qs_qtensor *q)
{
    struct qs_layout l;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "q" : "params");
    if (qs_dtype_size(src_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown source dtype %d", src_dtype);
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    if (!src && l.n > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "src is NULL");
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK)
        return st;
    if (!ctx->ops->quantize)
        return qs_backend_unsupported(ctx, "quantize (qs_quantize)");
    if (ctx->nonfinite == QS_NONFINITE_REJECT && qs_tensor_nonfinite(ctx, src, src_dtype, l.n))
        return qs_fail(ctx, QS_ERR_NONFINITE,
                       "input holds NaN or Inf and the context rejects non-finite values");

    struct qs_call_layout cl;
    qs_call_layout_init(ctx, &cl, &l, params);
    ctx->last_error[0] = '\0';
    uint64_t t0 = qs_prof_start(ctx);
    st = ctx->ops->quantize(qs_backend_handle(ctx), &cl.plain, params, src, src_dtype, q);
    if (st != QS_OK)
        return qs_backend_result(ctx, st, "quantize (qs_quantize)");
    if (t0)
        qs_prof_record(ctx, t0, "quantize", l.traits->quant_slot, l.format, (uint64_t)l.n,
                       (uint64_t)(l.n * qs_dtype_size(src_dtype)), qs_layout_total_bytes(&l));
    return qs_ok(ctx);
}
