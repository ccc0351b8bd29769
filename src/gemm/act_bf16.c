/* SPDX-License-Identifier: MIT */
/*
 * The activations of qs_matmul with bf16 activations (include/qsparse/matmul.h): x rounded to
 * bf16 once per call, before any kernel runs, into the bf16 x of the GEMV_BF16 path or, where no
 * bf16 kernel runs, into x^ = that bf16 widened to f32 for the f32 path. The rounding is the
 * library's f32 -> bf16 conversion (cvt_f32_bf16: nearest even, a NaN kept quiet); an f16 x is
 * widened exactly first, a bf16 x taken as it is. Fixed chunks, so the bits never depend on the
 * thread count.
 */
#include <string.h>

#include "../core/parallel.h"
#include "gemm_internal.h"

/* Elements per chunk: the thread's QS_TILE-float tile holds the chunk in f32 in its first half
 * and in bf16 in its second. */
#define CHUNK (QS_TILE / 2)

struct bf16_job {
    const qs_ctx *ctx;
    const void *x;
    int32_t dtype;
    int64_t n;
    uint16_t *xb; /* bf16 output, or NULL */
    float *xf;    /* x^ output, or NULL */
};

static void bf16_task(void *arg, int64_t i, float *tile)
{
    const struct bf16_job *b = arg;
    const struct qs_kernels *k = &b->ctx->k;
    int64_t start = i * CHUNK, len = b->n - start < CHUNK ? b->n - start : CHUNK;
    uint16_t *h = b->xb ? b->xb + start : (uint16_t *)(void *)(tile + CHUNK);

    if (b->dtype == QS_DTYPE_BF16) {
        if (b->xf)
            k->cvt_bf16_f32((const uint16_t *)b->x + start, len, b->xf + start);
        else
            memcpy(h, (const uint16_t *)b->x + start, (size_t)len * 2);
        return;
    }
    if (b->dtype == QS_DTYPE_F16) {
        k->cvt_f16_f32((const uint16_t *)b->x + start, len, tile);
        k->cvt_f32_bf16(tile, len, h);
    } else {
        k->cvt_f32_bf16((const float *)b->x + start, len, h);
    }
    if (b->xf)
        k->cvt_bf16_f32(h, len, b->xf + start);
}

void qs_mm_x_to_bf16(const qs_ctx *ctx, const void *x, int32_t dtype, int64_t n, uint16_t *dst)
{
    struct bf16_job b = {ctx, x, dtype, n, dst, NULL};
    qs_parallel_for(ctx, qs_ceil_div(n, CHUNK), bf16_task, &b);
}

void qs_mm_x_to_bf16_f32(const qs_ctx *ctx, const void *x, int32_t dtype, int64_t n, float *dst)
{
    struct bf16_job b = {ctx, x, dtype, n, NULL, dst};
    qs_parallel_for(ctx, qs_ceil_div(n, CHUNK), bf16_task, &b);
}
