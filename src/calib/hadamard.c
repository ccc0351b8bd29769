/* SPDX-License-Identifier: MIT */
/*
 * The block Hadamard rotation (docs/calibration.md §17): each row's consecutive blocks of B
 * columns multiplied by H_B / sqrt(B), H_B the Sylvester Hadamard matrix ([H_B]_ij =
 * (-1)^popcount(i & j)). The matrix is symmetric and orthogonal, hence its own inverse: rotating
 * a weight's columns and the layer's inputs by it leaves x W^T unchanged, and a rotation applied
 * twice gives the input back (up to rounding).
 *
 * The transform is the fast Walsh-Hadamard butterfly (B log2 B additions and subtractions per
 * block, strides 1, 2, 4, ... B / 2, each pair (a, b) -> (a + b, a - b)), then one multiplication
 * by fl(1 / sqrt(B)) per element. Those operations have a fixed order and no product to contract,
 * so the result is the same on every machine and thread count. A NaN or infinity spreads over
 * its block (as any dense rotation would spread it); a NaN computed into the output is the
 * canonical quiet NaN (docs/nan.md).
 */
#include <math.h>
#include <string.h>

#include "../core/parallel.h"
#include "gptq_internal.h"

/* The butterflies of one block of b (a power of two) values, then the scale. */
static void fwht_f32(float *x, int64_t b, float scale)
{
    for (int64_t h = 1; h < b; h *= 2)
        for (int64_t i = 0; i < b; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                float a = x[j], c = x[j + h];
                x[j] = a + c;
                x[j + h] = a - c;
            }
    for (int64_t j = 0; j < b; j++)
        x[j] = qs_ref_nan_canon(x[j] * scale);
}

QS_INTERNAL void qs_hadamard_f64(double *x, int64_t b, double scale)
{
    for (int64_t h = 1; h < b; h *= 2)
        for (int64_t i = 0; i < b; i += 2 * h)
            for (int64_t j = i; j < i + h; j++) {
                double a = x[j], c = x[j + h];
                x[j] = a + c;
                x[j + h] = a - c;
            }
    for (int64_t j = 0; j < b; j++)
        x[j] *= scale;
}

QS_INTERNAL qs_status qs_hadamard_check(qs_ctx *ctx, int64_t cols, int32_t block, const char *who)
{
    if (block < 2 || block > QS_HADAMARD_MAX_BLOCK || (block & (block - 1)) != 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG,
                       "%s: the rotation block (%d) must be a power of two in 2 ... %d", who,
                       (int)block, QS_HADAMARD_MAX_BLOCK);
    if (cols % block != 0)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns are not a multiple of the block %d",
                       who, (long long)cols, (int)block);
    return QS_OK;
}

QS_API int32_t qs_hadamard_block(int64_t cols)
{
    int32_t b = 1;

    if (cols < 2)
        return 0;
    while (b < QS_HADAMARD_MAX_BLOCK && cols % (2 * (int64_t)b) == 0)
        b *= 2;
    return b >= 2 ? b : 0;
}

struct had_job {
    float *x;
    int64_t rows, cols, per_task;
    int32_t block;
    float scale;
};

static void had_task(void *arg, int64_t t, float *tile)
{
    const struct had_job *j = arg;
    int64_t r1 = (t + 1) * j->per_task < j->rows ? (t + 1) * j->per_task : j->rows;
    (void)tile;
    for (int64_t r = t * j->per_task; r < r1; r++)
        for (int64_t c = 0; c < j->cols; c += j->block)
            fwht_f32(j->x + r * j->cols + c, j->block, j->scale);
}

QS_API qs_status qs_hadamard(qs_ctx *ctx, float *x, int64_t rows, int64_t cols, int32_t block)
{
    const char *who = "qs_hadamard";
    int64_t n;
    qs_status st;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!x && rows > 0 && cols > 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer", who);
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: negative size", who);
    if (qs_mul_overflow(rows, cols, &n))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%s: size overflow", who);
    if ((st = qs_hadamard_check(ctx, cols, block, who)) != QS_OK)
        return st;
    if (n == 0)
        return qs_ok(ctx);
    /* about 64 K elements per task: small enough to spread a layer's activations over the
     * threads, large enough that a task is not all overhead */
    int64_t per = (int64_t)1 << 16;
    per = per / cols > 0 ? per / cols : 1;
    struct had_job j = {x, rows, cols, per, block, (float)(1.0 / sqrt((double)block))};
    qs_parallel_for(ctx, qs_ceil_div(rows, per), had_task, &j);
    return qs_ok(ctx);
}
