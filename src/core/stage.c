/* SPDX-License-Identifier: MIT */
/*
 * f32 staging of f16/bf16 tensors, and reductions over spans and whole tensors. Kernels only see
 * f32: drivers stage QS_TILE elements at a time through a per-thread tile with the table's cvt
 * kernels (so conversions run SIMD too), and read f32 tensors in place. Max and min are exact, so
 * partial results combine to the same bits in any order.
 */
#include <math.h>
#include <string.h>

#include "../ref/ref.h"
#include "parallel.h"

/* The public API promises no alignment (a safetensors tensor may start at any byte), but the
 * drivers, observers and masks index the staged pointer as float: a misaligned f32 span is copied
 * into the tile (one memcpy per tile, only then), so nothing past this point ever sees one. */
static int f32_aligned(const void *p)
{
    return ((uintptr_t)p & (sizeof(float) - 1)) == 0;
}

const float *qs_stage_f32(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t offset,
                          int64_t n, float *tile)
{
    const char *f32 = (const char *)src + offset * (int64_t)sizeof(float);

    switch (dtype) {
    case QS_DTYPE_F16: ctx->k.cvt_f16_f32((const uint16_t *)src + offset, n, tile); return tile;
    case QS_DTYPE_BF16: ctx->k.cvt_bf16_f32((const uint16_t *)src + offset, n, tile); return tile;
    default:
        if (f32_aligned(f32))
            return (const float *)(const void *)f32;
        memcpy(tile, f32, (size_t)n * sizeof(float));
        return tile;
    }
}

float *qs_stage_out(void *dst, int32_t dtype, int64_t offset, float *tile)
{
    char *f32 = (char *)dst + offset * (int64_t)sizeof(float);

    return dtype == QS_DTYPE_F32 && f32_aligned(f32) ? (float *)(void *)f32 : tile;
}

void qs_unstage_f32(const qs_ctx *ctx, const float *tile, void *dst, int32_t dtype,
                    int64_t offset, int64_t n)
{
    switch (dtype) {
    case QS_DTYPE_F16: ctx->k.cvt_f32_f16(tile, n, (uint16_t *)dst + offset); break;
    case QS_DTYPE_BF16: ctx->k.cvt_f32_bf16(tile, n, (uint16_t *)dst + offset); break;
    default: /* f32: only a misaligned dst was staged */
        if ((char *)dst + offset * (int64_t)sizeof(float) != (const char *)tile)
            memcpy((char *)dst + offset * (int64_t)sizeof(float), tile, (size_t)n * sizeof(float));
        break;
    }
}

float qs_span_amax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t start, int64_t n,
                   float *tile)
{
    float m = 0.0f;

    for (int64_t off = 0; off < n; off += QS_TILE) {
        int64_t len = n - off < QS_TILE ? n - off : QS_TILE;
        m = qs_ref_max(m, ctx->k.amax_f32(qs_stage_f32(ctx, src, dtype, start + off, len, tile), len));
    }
    return m;
}

void qs_span_minmax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t start, int64_t n,
                    float *tile, float *lo, float *hi)
{
    for (int64_t off = 0; off < n; off += QS_TILE) {
        int64_t len = n - off < QS_TILE ? n - off : QS_TILE;
        ctx->k.minmax_f32(qs_stage_f32(ctx, src, dtype, start + off, len, tile), len, lo, hi);
    }
}

/* Whole tensors: chunks of RANGE_CHUNK elements, partial results kept in a stack array per batch
 * of RANGE_BATCH chunks, so no allocation is needed. */
#define RANGE_CHUNK (64 * QS_TILE)
#define RANGE_BATCH 64

struct range_job {
    const qs_ctx *ctx;
    const void *src;
    int32_t dtype;
    int64_t start, n;
    float lo[RANGE_BATCH], hi[RANGE_BATCH];
    int32_t flag[RANGE_BATCH];
};

static int64_t chunk_len(const struct range_job *j, int64_t i)
{
    int64_t off = i * RANGE_CHUNK;
    return j->n - off < RANGE_CHUNK ? j->n - off : RANGE_CHUNK;
}

static void amax_task(void *arg, int64_t i, float *tile)
{
    struct range_job *j = arg;
    j->hi[i] = qs_span_amax(j->ctx, j->src, j->dtype, j->start + i * RANGE_CHUNK, chunk_len(j, i),
                            tile);
}

static void minmax_task(void *arg, int64_t i, float *tile)
{
    struct range_job *j = arg;
    j->lo[i] = INFINITY;
    j->hi[i] = -INFINITY;
    qs_span_minmax(j->ctx, j->src, j->dtype, j->start + i * RANGE_CHUNK, chunk_len(j, i), tile,
                   &j->lo[i], &j->hi[i]);
}

static void nonfinite_task(void *arg, int64_t i, float *tile)
{
    struct range_job *j = arg;
    int64_t start = j->start + i * RANGE_CHUNK, n = chunk_len(j, i);

    j->flag[i] = 0;
    for (int64_t off = 0; off < n && !j->flag[i]; off += QS_TILE) {
        int64_t len = n - off < QS_TILE ? n - off : QS_TILE;
        j->flag[i] = j->ctx->k.nonfinite_f32(
            qs_stage_f32(j->ctx, j->src, j->dtype, start + off, len, tile), len);
    }
}

/* Run `task` over the tensor batch by batch; `combine` folds each batch's partial results. */
static void range_run(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n,
                      qs_task_fn *task, void (*combine)(const struct range_job *, int64_t, void *),
                      void *acc)
{
    struct range_job j;
    int64_t chunks = qs_ceil_div(n, RANGE_CHUNK);

    j.ctx = ctx;
    j.src = src;
    j.dtype = dtype;
    for (int64_t b = 0; b < chunks; b += RANGE_BATCH) {
        int64_t cnt = chunks - b < RANGE_BATCH ? chunks - b : RANGE_BATCH;
        j.start = b * RANGE_CHUNK;
        j.n = n - j.start < cnt * RANGE_CHUNK ? n - j.start : cnt * RANGE_CHUNK;
        qs_parallel_run(ctx, cnt, qs_work(j.n, qs_dtype_size(dtype)), task, NULL, &j);
        combine(&j, cnt, acc);
    }
}

static void combine_amax(const struct range_job *j, int64_t cnt, void *acc)
{
    for (int64_t i = 0; i < cnt; i++)
        *(float *)acc = qs_ref_max(*(float *)acc, j->hi[i]);
}

static void combine_minmax(const struct range_job *j, int64_t cnt, void *acc)
{
    float *lh = acc;
    for (int64_t i = 0; i < cnt; i++) {
        lh[0] = qs_ref_min(lh[0], j->lo[i]);
        lh[1] = qs_ref_max(lh[1], j->hi[i]);
    }
}

static void combine_flag(const struct range_job *j, int64_t cnt, void *acc)
{
    for (int64_t i = 0; i < cnt; i++)
        *(int32_t *)acc |= j->flag[i];
}

float qs_tensor_amax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n)
{
    float m = 0.0f;
    range_run(ctx, src, dtype, n, amax_task, combine_amax, &m);
    return m;
}

void qs_tensor_minmax(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n, float *lo,
                      float *hi)
{
    float lh[2] = {INFINITY, -INFINITY};
    range_run(ctx, src, dtype, n, minmax_task, combine_minmax, lh);
    *lo = lh[0];
    *hi = lh[1];
}

int32_t qs_tensor_nonfinite(const qs_ctx *ctx, const void *src, int32_t dtype, int64_t n)
{
    int32_t flag = 0;
    range_run(ctx, src, dtype, n, nonfinite_task, combine_flag, &flag);
    return flag;
}
