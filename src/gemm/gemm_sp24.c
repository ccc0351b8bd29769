/* SPDX-License-Identifier: MIT */
/*
 * The 2:4 GEMM path of qs_matmul (plan.c: 2:4 weights where the GEMM path takes the shape): the
 * outer-product form over rows of x^T, no zeros multiplied and no gathers. Tasks have fixed bounds
 * that depend only on the shape, so the bits never depend on threads.
 */
#include <string.h>

#include "../ref/ref.h"
#include "gemm_internal.h"

#define MM_SP_MR 64   /* rows of x per packed panel of the 2:4 GEMM */
#define MM_SP_NT 128  /* rows of W per 2:4 GEMM task */
#define MM_SP_KC 128  /* columns of x per slice of the 2:4 GEMM (a multiple of 16: whole words) */
#define MM_SP_GROUP 4 /* panels of x packed at a time */

void qs_mm_gemm_sp24_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel,
                             int64_t *xt)
{
    /* accumulator and decode tile per thread; f32 kept values unless they are f32 already;
     * one packed panel of x */
    *per_thread = MM_SP_NT * MM_SP_MR + QS_TILE;
    *panel = 0;
    if (!(j->kind == QS_WEIGHT_SP24 && j->dtype == QS_DTYPE_F32))
        *panel = j->N * j->w.k;
    *xt = (j->M < MM_SP_GROUP * MM_SP_MR ? qs_ceil_div(j->M, MM_SP_MR) : MM_SP_GROUP) * MM_SP_MR *
          j->K;
}

/* ---- 2:4 GEMM: outer product over rows of x^T -------------------------------------------------
 *
 * The kept values are f32 in place, or dequantized once into j->panel (N x wcols). x is taken
 * MM_SP_GROUP panels of MM_SP_MR rows at a time (j->n0 is the first row), each packed transposed
 * into j->xt (K rows of MM_SP_MR floats, zero past M) by the table's mm_transpose_f32, which also
 * writes each task's accumulators (y^T) back into y: one buffer of a few MiB, reused group
 * after group, so it stays in the last-level cache and costs few fresh pages. A task of MM_SP_NT
 * rows of W runs over every panel of the group (its kept values stay in L2); per panel it walks the
 * K slices of MM_SP_KC columns in ascending order, every row of the task running over a slice (a
 * small contiguous block, in L1) before the next; the kernel (mm_sp24_axpy) accumulates in
 * ascending kept order whatever the slicing, so the bits are those of one call over the whole row,
 * for any thread count. */

static void sp24_dequant_task(const struct qs_mm_job *j, int64_t n, float *scratch)
{
    qs_mm_span_dequant(j, n, 0, j->w.k, j->panel + n * j->w.k, scratch + MM_SP_NT * MM_SP_MR);
}

/* rows of x in the group starting at j->n0 */
static int64_t group_rows(const struct qs_mm_job *j)
{
    return j->M - j->n0 < MM_SP_GROUP * MM_SP_MR ? j->M - j->n0 : MM_SP_GROUP * MM_SP_MR;
}

/* Panel t of the group: x^T by the transposed copy, zero past M. */
static void pack_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    float *xt = (float *)j->xt + t * MM_SP_MR * j->K;
    int64_t m0 = j->n0 + t * MM_SP_MR;
    int64_t mb = j->M - m0 < MM_SP_MR ? j->M - m0 : MM_SP_MR;

    (void)scratch;
    j->ctx->k.mm_transpose_f32(j->x + m0 * j->K, j->K, mb, j->K, xt, MM_SP_MR);
    if (mb < MM_SP_MR)
        for (int64_t k = 0; k < j->K; k++)
            memset(xt + k * MM_SP_MR + mb, 0, (size_t)(MM_SP_MR - mb) * sizeof(float));
}

/* Rows [n0, n0 + nr) of W against one packed panel of x (rows m0 ...). */
static void sp24_panel(const struct qs_mm_job *j, const float *xt, int64_t m0, int64_t n0,
                       int64_t nr, float *acc)
{
    int64_t mb = j->M - m0 < MM_SP_MR ? j->M - m0 : MM_SP_MR;
    const float *v = (j->panel ? j->panel : (const float *)j->w.data) + n0 * j->w.k;

    memset(acc, 0, (size_t)(nr * MM_SP_MR) * sizeof(float));
    for (int64_t k0 = 0; k0 < j->K; k0 += MM_SP_KC) {
        int64_t kc = j->K - k0 < MM_SP_KC ? j->K - k0 : MM_SP_KC;
        int64_t knext = j->K - k0 - kc < MM_SP_KC ? j->K - k0 - kc : MM_SP_KC;
        int64_t lines = knext * MM_SP_MR / 16, per = qs_ceil_div(lines, nr);
        const float *next = xt + (k0 + kc) * MM_SP_MR;

        for (int64_t r = 0; r < nr; r++) {
            const float *vr = v + r * j->w.k;
            /* A slice is read in meta order, which no hardware prefetcher follows: each row
             * fetches its share of the next slice, and its own next kept values. */
            for (int64_t l = r * per; l < (r + 1) * per && l < lines; l++)
                __builtin_prefetch(next + 16 * l);
            for (int64_t q = 0; q < knext / 2; q += 16)
                __builtin_prefetch(vr + (k0 + kc) / 2 + q);
            j->ctx->k.mm_sp24_axpy(vr + k0 / 2, j->w.meta + (n0 + r) * j->w.words + k0 / 16, kc,
                                   xt + k0 * MM_SP_MR, MM_SP_MR, mb, acc + r * MM_SP_MR);
        }
    }
    /* acc holds y^T: bias and the NaN rule in place, then one transposed copy into y */
    for (int64_t r = 0; r < nr; r++) {
        float *a = acc + r * MM_SP_MR;
        if (j->bias) {
            float b = qs_ld_f32(j->bias + n0 + r);
            for (int64_t i = 0; i < mb; i++)
                a[i] = qs_ref_nan_canon(a[i] + b);
        } else {
            for (int64_t i = 0; i < mb; i++)
                a[i] = qs_ref_nan_canon(a[i]);
        }
    }
    j->ctx->k.mm_transpose_f32(acc, MM_SP_MR, nr, mb, j->y + m0 * j->N + n0, j->N);
}

static void sp24_task(const struct qs_mm_job *j, int64_t t, float *scratch)
{
    int64_t n0 = t * MM_SP_NT, nr = j->N - n0 < MM_SP_NT ? j->N - n0 : MM_SP_NT;

    for (int64_t p = 0; p * MM_SP_MR < group_rows(j); p++)
        sp24_panel(j, j->xt + p * MM_SP_MR * j->K, j->n0 + p * MM_SP_MR, n0, nr, scratch);
}

void qs_mm_gemm_sp24_run(struct qs_mm_job *j)
{
    if (j->panel)
        qs_mm_parallel(j, j->N, sp24_dequant_task);
    for (j->n0 = 0; j->n0 < j->M; j->n0 += MM_SP_GROUP * MM_SP_MR) {
        qs_mm_parallel(j, qs_ceil_div(group_rows(j), MM_SP_MR), pack_task);
        qs_mm_parallel(j, qs_ceil_div(j->N, MM_SP_NT), sp24_task);
    }
}
