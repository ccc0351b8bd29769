/* SPDX-License-Identifier: MIT */
/*
 * qs_dequantize: checks every argument and size, then decodes chunk by chunk with table kernels
 * into f32 (directly into dst for f32 output, else through the staging tile and a cvt kernel).
 * An f32 output of QS_STREAM_MIN_BYTES or more is decoded into the tile (which stays in L1) and
 * written with the copy_stream_f32 kernel's non-temporal stores: the output would not stay in
 * the cache anyway, and streaming stores skip the read for ownership of every destination line
 * (a third of the memory traffic of a plain store). Every format and tier goes through it alike.
 */
#include "../ref/ref.h"
#include "parallel.h"
#include "backend.h"
#include "quant_common.h"
#include "profile_internal.h"

/*
 * The smallest f32 output (bytes) written with non-temporal stores. Below it the output may still
 * be in the last-level cache for whoever reads it next, and plain stores run at memcpy speed there
 * (qsparse-bench --size 1024, 4 MiB); above it every line goes to memory anyway. 32 MiB is the L3
 * one core of a Zen 4 / Zen 5 CCD sees (the OS's figure, sysconf or CPUID, is the whole socket's
 * on many servers: 320 MiB on the machine measured, so it is not asked). At 64 MiB (4096 x 4096,
 * one thread, against plain stores in the same run) NF4, FP4 and INT8 ran 5-10% faster and the
 * MX formats within the noise of a shared machine.
 */
#define QS_STREAM_MIN_BYTES ((int64_t)32 << 20)

/* Values decoded per streaming step: 4 KiB pieces keep the code reads and the streaming stores of
 * one task interleaved (a whole 16 KiB tile decoded, then copied, ran MXFP8 1.5x slower), and a
 * piece of exactly 4 KiB keeps its distance to the destination fixed modulo 4 KiB (see emit). */
#define QS_STREAM_PIECE 1024

/* Decode `len` elements starting at element `start` into dst with `decode(j, out)`. Streaming:
 * pieces of a multiple of `step` values (the block), each decoded into the tile and streamed. */
static void emit(const struct qs_qjob *j, int64_t start, int64_t len, int64_t step, float *tile,
                 void (*decode)(const struct qs_qjob *, int64_t, int64_t, float *))
{
    float *out;

    if (j->stream) {
        int64_t piece = step >= QS_STREAM_PIECE ? step : QS_STREAM_PIECE / step * step;
        float *d = (float *)j->dst + start;
        /* the piece sits half a page away from its destination modulo 4 KiB, so that reading it
         * back never waits on a streaming store to an address with the same low 12 bits */
        float *t = piece <= QS_TILE / 2
                       ? tile + ((uintptr_t)d + 2048 - (uintptr_t)tile) % 4096 / sizeof(float)
                       : tile;
        for (int64_t o = 0; o < len; o += piece) {
            int64_t m = len - o < piece ? len - o : piece;
            decode(j, start + o, m, t);
            j->ctx->k.copy_stream_f32(t, m, d + o, o + m == len);
        }
        return;
    }
    out = qs_stage_out(j->dst, j->dtype, start, tile);
    decode(j, start, len, out);
    if (out == tile)
        qs_unstage_f32(j->ctx, tile, j->dst, j->dtype, start, len);
}

/* ---- NF4 / FP4 -------------------------------------------------------------------------------- */

static void bnb4_decode(const struct qs_qjob *j, int64_t start, int64_t len, float *out)
{
    qs_nf4_dequant_fn *fn = (qs_nf4_dequant_fn *)j->dequant;

    fn(j->data + start / 2, j->absmax + start / j->block, len, j->block, out);
}

static void bnb4_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = i * j->chunk;

    emit(j, start, j->n - start < j->chunk ? j->n - start : j->chunk, j->block, tile, bnb4_decode);
}

static void dyn8_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t start = i * QS_DQ_CHUNK;
    int64_t len = j->units - start < QS_DQ_CHUNK ? j->units - start : QS_DQ_CHUNK;

    (void)tile;
    j->ctx->k.dyn8_dequant(j->scales + start, j->nested + start / 256, len, 256, j->offset,
                           j->absmax + start);
}

static qs_status dequantize_bnb4(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                                 const qs_qtensor *q)
{
    float *scratch = NULL;

    j->chunk = (QS_TILE / j->block) * j->block;
    if (p->double_quant) {
        scratch = qs_scratch_alloc(ctx, (size_t)(j->units > 0 ? j->units : 1) * sizeof(float));
        if (!scratch)
            return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "no memory for %lld absmax values",
                           (long long)j->units);
        j->absmax = scratch;
        j->scales = q->scale;
        j->nested = q->nested_scale;
        j->offset = q->nested_offset;
        qs_parallel_for(ctx, qs_ceil_div(j->units, QS_DQ_CHUNK), dyn8_task, j);
    } else {
        j->absmax = q->scale;
    }
    qs_parallel_for(ctx, qs_ceil_div(j->n, j->chunk), bnb4_task, j);
    qs_scratch_free(ctx, scratch);
    return QS_OK;
}

/* ---- INT8 and FP8 ----------------------------------------------------------------------------- */

static void unit_decode(const struct qs_qjob *j, int64_t start, int64_t len, float *out)
{
    const int8_t *codes = (const int8_t *)j->data + start;
    int64_t u = j->unit_len > 0 ? start / j->unit_len : 0;

    if (j->t->driver == QS_DRIVER_FP8)
        ((qs_e4m3_dequant_fn *)j->dequant)(j->data + start, len, qs_ld_f32(j->fscale), out);
    else if (j->t->flags & QS_TRAIT_ROWSTAT)
        ((qs_int8_dequant_rowstat_fn *)j->dequant)(codes, len, qs_ld_f32(j->fscale + u), out);
    else
        ((qs_int8_dequant_fn *)j->dequant)(codes, len, qs_ld_f32(j->fscale + u),
                                           j->zp ? j->zp[u] : 0, out);
}

/* Scale units (rows or groups) of unit_len elements; 0 means one unit over the whole tensor. */
static void unit_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t ulen = j->unit_len > 0 ? j->unit_len : j->n;
    int64_t u = i / j->chunks_per_row, off = (i % j->chunks_per_row) * QS_TILE;
    int64_t len = ulen - off < QS_TILE ? ulen - off : QS_TILE;

    emit(j, u * ulen + off, len, 2, tile, unit_decode);
}

static void dequantize_units(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                             const qs_qtensor *q)
{
    int64_t units = 1;

    j->fscale = q->scale;
    j->zp = (j->t->options & QS_OPT_SYMMETRIC) && !p->symmetric ? q->zero_point : NULL;
    j->unit_len = 0;
    if (j->unit_rule == QS_UNITS_ROWS) {
        j->unit_len = j->cols;
        units = j->rows;
    } else if (j->unit_rule == QS_UNITS_ROW_BLOCKS) {
        j->unit_len = j->block;
        units = j->units;
    }
    /* Each unit is cut into tiles; tasks never straddle two units. */
    j->chunks_per_row = qs_ceil_div(j->unit_len > 0 ? j->unit_len : j->n, QS_TILE);
    qs_parallel_for(ctx, units * j->chunks_per_row, unit_task, j);
}

/* ---- MX and NVFP4 ----------------------------------------------------------------------------- */

static void row_decode(const struct qs_qjob *j, int64_t start, int64_t len, float *out)
{
    int64_t r = start / j->cols, c0 = start % j->cols;
    const uint8_t *scales = j->scales + r * j->scales_per_row + c0 / j->block;

    /* c0 is a multiple of QS_TILE or of the streaming piece (of the block), so the codes before it
     * fill whole bytes */
    const uint8_t *src = j->data + r * j->row_bytes + c0 * j->t->bits / 8;

    if (j->t->driver == QS_DRIVER_MX)
        ((qs_mxfp4_dequant_fn *)j->dequant)(src, scales, len, out);
    else
        ((qs_nvfp4_dequant_fn *)j->dequant)(src, scales, len, j->scale, out);
}

static void row_task(void *arg, int64_t i, float *tile)
{
    const struct qs_qjob *j = arg;
    int64_t r = i / j->chunks_per_row, c0 = (i % j->chunks_per_row) * QS_TILE;

    emit(j, r * j->cols + c0, j->cols - c0 < QS_TILE ? j->cols - c0 : QS_TILE, j->block, tile,
         row_decode);
}

/* ---- the CPU backend's dequantize, then the public entry point ------------------------------ */

qs_status qs_cpu_dequantize(qs_ctx *ctx, const struct qs_layout *l, const qs_quant_params *p,
                            const qs_qtensor *q, void *dst, int32_t dst_dtype)
{
    struct qs_qjob j;
    qs_status st;

    qs_qjob_init(&j, ctx, l, dst_dtype, q);
    j.dst = dst;
    j.stream = dst_dtype == QS_DTYPE_F32 && ((uintptr_t)dst & 3) == 0 &&
               l->n >= QS_STREAM_MIN_BYTES / (int64_t)sizeof(float);
    switch (l->traits->driver) {
    case QS_DRIVER_BNB4:
        if ((st = dequantize_bnb4(ctx, &j, p, q)) != QS_OK)
            return st;
        break;
    case QS_DRIVER_INT8:
    case QS_DRIVER_FP8: dequantize_units(ctx, &j, p, q); break;
    default:
        j.scales = q->scale;
        j.scale = q->global_scale;
        qs_parallel_for(ctx, l->rows * j.chunks_per_row, row_task, &j);
        break;
    }
    return QS_OK;
}

QS_API qs_status qs_dequantize(qs_ctx *ctx, const qs_quant_params *params, const qs_qtensor *q,
                               int64_t rows, int64_t cols, void *dst, int32_t dst_dtype,
                               int64_t dst_bytes)
{
    struct qs_layout l;
    qs_status st;
    int64_t need;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!params || !q)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s is NULL", params ? "q" : "params");
    if (qs_dtype_size(dst_dtype) == 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "unknown destination dtype %d", dst_dtype);
    if ((st = qs_layout_compute(ctx, params, rows, cols, &l)) != QS_OK)
        return st;
    if ((st = qs_check_planes(ctx, &l, q)) != QS_OK)
        return st;
    need = l.n * qs_dtype_size(dst_dtype); /* l.n * 4 was overflow-checked */
    if (!dst && need > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "dst is NULL");
    if (dst_bytes < need)
        return qs_fail(ctx, QS_ERR_BUFFER_TOO_SMALL, "dst holds %lld bytes, %lld needed",
                       (long long)dst_bytes, (long long)need);

    ctx->last_error[0] = '\0';
    uint64_t t0 = qs_prof_start(ctx);
    if ((st = ctx->ops->dequantize(ctx, &l, params, q, dst, dst_dtype)) != QS_OK)
        return ctx->last_error[0]
                   ? st
                   : qs_fail(ctx, st, "%s backend: dequantize failed", ctx->ops->name);
    if (t0)
        qs_prof_record(ctx, t0, "dequantize", l.traits->dequant_slot, l.format, (uint64_t)l.n,
                       qs_layout_total_bytes(&l), (uint64_t)need);
    return qs_ok(ctx);
}
