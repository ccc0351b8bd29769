/* SPDX-License-Identifier: MIT */
/*
 * The GEMV paths of qs_matmul (M below the GEMM path's minimum): tasks of plan.task_rows rows of
 * W, each running every row of x, so W streams once. The kernel is the one plan.c chose for the
 * format (its descriptor's gemv or 2:4 gemv slot); nothing here depends on the format:
 * - dense weights: the multi-row GEMV kernel, raw sums into y, then bias and the NaN rule;
 * - 2:4 weights with a fused 2:4 kernel: that kernel per x row, which also checks the rows' meta;
 * - other 2:4 weights: x gathered at each row's kept columns (mm_gather_sp24), then the gemv
 *   kernel over that one compressed row; the task's meta is checked first;
 * - bf16 activations (QS_MM_GEMV_BF16): the descriptor's bf16 kernel on x in bf16, as the dense
 *   f32 GEMV otherwise.
 * Tasks have fixed bounds that depend only on the shape, so the bits never depend on threads.
 */
#include "../ref/ref.h"
#include "gemm_internal.h"

static void flag_bad(const struct qs_mm_job *j)
{
    if (j->meta_bad)
        __atomic_store_n(j->meta_bad, 1, __ATOMIC_RELAXED);
}

/* Rows [r0, r1) through the fused 2:4 kernel, one x row at a time; 1 if it found a bad nibble. */
static int sp24_rows(const struct qs_mm_job *j, qs_mm_gemv_sp24_fn *fn, int64_t r0, int64_t r1)
{
    for (int64_t m = 0; m < j->M; m++)
        if (fn(&j->w, r0, r1 - r0, j->x + m * j->K, j->y + m * j->N + r0)) {
            flag_bad(j);
            return 1;
        }
    return 0;
}

/* Rows [r0, r1) of a 2:4 weight without a fused kernel: x gathered into xg (w.k floats) per row
 * and x row, then the format's gemv kernel over that compressed row. */
static int gather_rows(const struct qs_mm_job *j, qs_mm_gemv_fn *fn, int64_t r0, int64_t r1,
                       float *xg)
{
    if (j->meta_bad &&
        j->ctx->k.mm_sp24_meta_bad(j->w.meta + r0 * j->w.words, (r1 - r0) * j->w.words)) {
        flag_bad(j);
        return 1;
    }
    for (int64_t m = 0; m < j->M; m++)
        for (int64_t r = r0; r < r1; r++) {
            j->ctx->k.mm_gather_sp24(j->x + m * j->K, j->w.meta + r * j->w.words, j->K, xg);
            fn(&j->w, r, 1, xg, j->w.k, 1, j->y + m * j->N + r, 1);
        }
    return 0;
}

static void gemv_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    int64_t r0 = t * j->plan.task_rows;
    int64_t r1 = r0 + j->plan.task_rows < j->N ? r0 + j->plan.task_rows : j->N;
    void (*fn)(void) = j->plan.entry->fn;

    switch (j->plan.path) {
    case QS_MM_GEMV_SP24:
        if (sp24_rows(j, (qs_mm_gemv_sp24_fn *)fn, r0, r1))
            return;
        break;
    case QS_MM_GEMV_SP24_GATHER:
        if (gather_rows(j, (qs_mm_gemv_fn *)fn, r0, r1, scratch))
            return;
        break;
    case QS_MM_GEMV_BF16:
        ((qs_mm_gemv_xbf16_fn *)fn)(&j->w, r0, r1 - r0, j->xb, j->K, j->M, j->y + r0, j->N);
        break;
    default: ((qs_mm_gemv_fn *)fn)(&j->w, r0, r1 - r0, j->x, j->K, j->M, j->y + r0, j->N); break;
    }
    for (int64_t m = 0; m < j->M; m++)
        for (int64_t n = r0; n < r1; n++)
            qs_st_f32(j->y + m * j->N + n, qs_mm_finish(j, qs_ld_f32(j->y + m * j->N + n), n));
}

void qs_mm_gemv_run(struct qs_mm_job *j)
{
    qs_mm_parallel_dynamic(j, qs_ceil_div(j->N, j->plan.task_rows), gemv_task);
}
