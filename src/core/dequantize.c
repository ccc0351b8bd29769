/* SPDX-License-Identifier: MIT */
/*
 * qs_dequantize: checks every argument and size, then decodes span by span with table kernels
 * into f32 (directly into dst for f32 output, else through the staging tile and a cvt kernel).
 * An f32 output of QS_STREAM_MIN_BYTES or more is decoded piece by piece into the tile (which
 * stays in L1) and written with the copy_stream_f32 kernel's non-temporal stores, whole 64-byte
 * lines at a time: the output would not stay in the cache anyway, and streaming stores skip the
 * read for ownership of every destination line (a third of the memory traffic of a plain store).
 * Every format and tier goes through it alike.
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
 * one thread, against plain stores in the same run, minima of 9 to 11 interleaved rounds, Zen 4,
 * three runs) the streamed output was faster for every format: 1.3-1.5x for NF4, FP4, INT8,
 * LLM.int8, FP8, MXFP4 and MXFP8, 1.15-1.35x for NVFP4 (its decode costs the most), and
 * 1.06-1.6x into a dst 4 or 16 bytes off a 64-byte boundary.
 */
#define QS_STREAM_MIN_BYTES ((int64_t)32 << 20)

/* Values decoded per streaming step. 4 KiB pieces keep the code reads and the streaming stores of
 * one task interleaved, and they keep the tile's distance to the destination fixed modulo 4 KiB
 * (stream_task). A piece may start inside an NF4/FP4 block of 2048 or 4096 values or inside an
 * INT8 row: the decoders take the block's or row's scale from the piece's start, so 1024 serves
 * every block size (powers of two; MX and NVFP4 blocks are 32 and 16). */
#define QS_STREAM_PIECE 1024

/* Elements per streaming task (256 KiB of f32). A task writes its first and last line of dst with
 * plain stores when they are shared with the neighbouring task (a destination that is not 64-byte
 * aligned, numpy's usual 16 bytes off), and a plain store that misses the cache holds up the later
 * stores for a memory round trip: NF4 at 64 MiB into such a dst, one thread, ran at 0.276 ns/value
 * with a partial line pair every 4 KiB and 0.182 with one every 16 KiB, against 0.150 with none.
 * At 256 KiB per task that cost is about 1%, and a 32 MiB output still gives 128 tasks to share
 * among the threads. */
#define QS_STREAM_TASK ((int64_t)1 << 16)

/* How a driver cuts the tensor: span(j, i) gives the elements [start, start + len) of span i,
 * spans are consecutive and contiguous in element order (each at most QS_TILE long and never
 * across a row or scale unit that its decode cannot cross), and decode(j, start, len, out) writes
 * their f32 values to out. A task runs `group` consecutive spans (1 unless streaming). */
struct dq_plan {
    const struct qs_qjob *j;
    void (*span)(const struct qs_qjob *j, int64_t i, int64_t *start, int64_t *len);
    void (*decode)(const struct qs_qjob *j, int64_t start, int64_t len, float *out);
    int64_t spans, group;
};

/* One span decoded straight into dst (an aligned f32 dst) or through the tile and a conversion. */
static void plain_task(void *arg, int64_t i, float *tile)
{
    const struct dq_plan *p = arg;
    const struct qs_qjob *j = p->j;
    int64_t start, len;
    float *out;

    p->span(j, i, &start, &len);
    out = qs_stage_out(j->dst, j->dtype, start, tile);
    p->decode(j, start, len, out);
    if (out == tile)
        qs_unstage_f32(j->ctx, tile, j->dst, j->dtype, start, len);
}

/* A group of spans decoded piece by piece into the tile and streamed to dst with non-temporal
 * stores (copy_stream_f32), whole 64-byte lines only; a line that a piece leaves unfinished waits
 * in a 16-float line buffer for the next piece, so only the task's first and last line can be
 * partial (plain stores, prefetched for writing at the start). Each piece is decoded to a 64-byte
 * aligned place, however dst is aligned: decode kernels whose 64-byte stores straddle two lines
 * ran NF4 at 64 MiB 50% slower (0.30 against 0.20 ns/value, one thread, same run), while the copy
 * loads anywhere at no cost. Decoding into the L1 tile and copying ran as fast as non-temporal
 * stores issued by the decode kernel itself (NF4, 0.150 and 0.151 ns/value in the same run), so
 * no kernel needs a streaming variant. */
static void stream_task(void *arg, int64_t g, float *tile)
{
    const struct dq_plan *p = arg;
    const struct qs_qjob *j = p->j;
    qs_copy_stream_f32_fn *const copy = j->ctx->k.copy_stream_f32;
    float *const dst = (float *)j->dst;
    int64_t first = g * p->group, last = first + p->group < p->spans ? first + p->group : p->spans;
    int64_t start, len, end, fill, lo, line;

    p->span(j, last - 1, &end, &len);
    end += len;
    p->span(j, first, &start, &len);
    __builtin_prefetch(dst + start, 1);
    __builtin_prefetch(dst + end - 1, 1);
    /* line: the element at the 64-byte boundary of dst where the line being filled starts;
     * buf[k] holds its element line + k for lo <= k < fill (the task's first line starts before
     * `start`, and those floats belong to another task: never written) */
    fill = lo = (int64_t)(((uintptr_t)(dst + start) & 63) / sizeof(float));
    line = start - lo;
    float *buf = tile + (64 - ((uintptr_t)tile & 63)) % 64 / sizeof(float);
    /* the piece sits half a page from its destination modulo 4 KiB, so that reading it back
     * never waits on a streaming store to an address with the same low 12 bits; 15 + 16 + 1008 +
     * QS_STREAM_PIECE floats fit the tile */
    float *t = buf + 16 + (((uintptr_t)(dst + start) & ~(uintptr_t)63) + 2048 -
                           (uintptr_t)(buf + 16)) % 4096 / sizeof(float);

    for (int64_t i = first; i < last; i++) {
        if (i > first)
            p->span(j, i, &start, &len);
        for (int64_t o = 0; o < len; o += QS_STREAM_PIECE) {
            int64_t m = len - o < QS_STREAM_PIECE ? len - o : QS_STREAM_PIECE, k = 0, full;
            p->decode(j, start + o, m, t);
            if (fill > 0) { /* finish the waiting line */
                k = 16 - fill < m ? 16 - fill : m;
                memcpy(buf + fill, t, (size_t)k * sizeof(float));
                fill += k;
                if (fill < 16)
                    continue;
                copy(buf + lo, 16 - lo, dst + line + lo, 0);
                line += 16;
                fill = lo = 0;
            }
            full = (m - k) & ~(int64_t)15;
            copy(t + k, full, dst + line, 0);
            line += full;
            fill = m - k - full;
            memcpy(buf, t + k + full, (size_t)fill * sizeof(float));
        }
    }
    if (fill > lo)
        copy(buf + lo, fill - lo, dst + line + lo, 0);
}

/* A streaming job's threads each end with one SFENCE after their last task, not one per task: a
 * fence waits for every write-combining buffer to drain, and one per 16 KiB task stalled the
 * stream so often that NF4 at 64 MiB ran at 0.23 ns/value instead of 0.15 (one thread, same run;
 * bitsandbytes' plain stores 0.21). The fence, before the loop's closing barrier, makes the
 * weakly ordered stores visible to whoever reads dst after the call. */
static void stream_done(void *arg)
{
    const struct dq_plan *p = arg;

    p->j->ctx->k.copy_stream_f32((const float *)p->j->dst, 0, p->j->dst, 1); /* only the fence */
}

/* Run the plan: spans one per task, or for a streaming job groups of about QS_STREAM_TASK
 * elements (span_max: the longest span). */
static void run_plan(const qs_ctx *ctx, struct dq_plan *p, int64_t span_max)
{
    if (!p->j->stream) {
        p->group = 1;
        qs_parallel_run(ctx, p->spans, qs_qjob_work(p->j), plain_task, NULL, p);
        return;
    }
    p->group = span_max < QS_STREAM_TASK ? QS_STREAM_TASK / span_max : 1;
    qs_parallel_run(ctx, qs_ceil_div(p->spans, p->group), qs_qjob_work(p->j), stream_task,
                    stream_done, p);
}

/* ---- NF4 / FP4 -------------------------------------------------------------------------------- */

static void bnb4_decode(const struct qs_qjob *j, int64_t start, int64_t len, float *out)
{
    qs_nf4_dequant_fn *fn = (qs_nf4_dequant_fn *)j->dequant;

    fn(j->data + start / 2, j->absmax + start / j->block, len, j->block, out);
}

static void bnb4_span(const struct qs_qjob *j, int64_t i, int64_t *start, int64_t *len)
{
    *start = i * j->chunk;
    *len = j->n - *start < j->chunk ? j->n - *start : j->chunk;
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
    struct dq_plan plan = {j, bnb4_span, bnb4_decode, 0, 1};

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
        qs_parallel_run(ctx, qs_ceil_div(j->units, QS_DQ_CHUNK), qs_work(j->units, 5),
                        dyn8_task, NULL, j);
    } else {
        j->absmax = q->scale;
    }
    plan.spans = qs_ceil_div(j->n, j->chunk);
    run_plan(ctx, &plan, j->chunk);
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

/* Scale units (rows or groups) of unit_len elements; 0 means one unit over the whole tensor.
 * Spans never straddle two units. */
static void unit_span(const struct qs_qjob *j, int64_t i, int64_t *start, int64_t *len)
{
    int64_t ulen = j->unit_len > 0 ? j->unit_len : j->n;
    int64_t u = i / j->chunks_per_row, off = (i % j->chunks_per_row) * QS_TILE;

    *start = u * ulen + off;
    *len = ulen - off < QS_TILE ? ulen - off : QS_TILE;
}

static void dequantize_units(qs_ctx *ctx, struct qs_qjob *j, const qs_quant_params *p,
                             const qs_qtensor *q)
{
    int64_t units = 1, ulen;
    struct dq_plan plan = {j, unit_span, unit_decode, 0, 1};

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
    ulen = j->unit_len > 0 ? j->unit_len : j->n;
    j->chunks_per_row = qs_ceil_div(ulen, QS_TILE);
    plan.spans = units * j->chunks_per_row;
    run_plan(ctx, &plan, ulen < QS_TILE ? ulen : QS_TILE);
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

static void row_span(const struct qs_qjob *j, int64_t i, int64_t *start, int64_t *len)
{
    int64_t r = i / j->chunks_per_row, c0 = (i % j->chunks_per_row) * QS_TILE;

    *start = r * j->cols + c0;
    *len = j->cols - c0 < QS_TILE ? j->cols - c0 : QS_TILE;
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
        qs_qjob_flatten_rows(&j);
        {
            struct dq_plan plan = {&j, row_span, row_decode, j.rows * j.chunks_per_row, 1};
            run_plan(ctx, &plan, j.cols < QS_TILE ? j.cols : QS_TILE);
        }
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

    if (!ctx->ops->dequantize)
        return qs_backend_unsupported(ctx, "dequantize (qs_dequantize)");

    struct qs_call_layout cl;
    qs_call_layout_init(ctx, &cl, &l, params);
    ctx->last_error[0] = '\0';
    uint64_t t0 = qs_prof_start(ctx);
    st = ctx->ops->dequantize(qs_backend_handle(ctx), &cl.plain, params, q, dst, dst_dtype);
    if (st != QS_OK)
        return qs_backend_result(ctx, st, "dequantize (qs_dequantize)");
    if (t0)
        qs_prof_record(ctx, t0, "dequantize", l.traits->dequant_slot, l.format, (uint64_t)l.n,
                       qs_layout_total_bytes(&l), (uint64_t)need);
    return qs_ok(ctx);
}
