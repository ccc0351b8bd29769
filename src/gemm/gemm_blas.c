/* SPDX-License-Identifier: MIT */
/*
 * The OpenBLAS GEMM path of qs_matmul (plan.c takes it for plain f32 weights, read in place, and
 * for every weight but 2:4 ones in a build without a SIMD mm_gemm_f32 kernel): panels of MM_PANEL
 * rows of W dequantized (qs_mm_span_dequant, in parallel), then cblas_sgemm, then the bias and the
 * NaN rule. Panel bounds depend only on the shape.
 */
#include <limits.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../ref/ref.h"
#include "gemm_internal.h"

#define MM_PANEL 512 /* rows of W per dequantized panel (sgemm wants wide panels) */

void qs_mm_gemm_blas_scratch(const struct qs_mm_job *j, int64_t *per_thread, int64_t *panel)
{
    *per_thread = QS_TILE; /* NF4/FP4 first partial block of a row */
    *panel = 0;
    if (!(j->kind == QS_WEIGHT_DENSE && j->dtype == QS_DTYPE_F32))
        *panel = (j->N < MM_PANEL ? j->N : MM_PANEL) * j->K;
}

static void panel_task(const struct qs_mm_job *j, int64_t r, float *scratch)
{
    qs_mm_span_dequant(j, j->n0 + r, 0, j->K, j->panel + r * j->K, scratch);
}

/* Bias and the NaN rule over row m of y, after sgemm. */
static void finish_task(const struct qs_mm_job *j, int64_t m, float *scratch)
{
    (void)scratch;
    for (int64_t n = 0; n < j->N; n++)
        qs_st_f32(j->y + m * j->N + n, qs_mm_finish(j, qs_ld_f32(j->y + m * j->N + n), n));
}

void qs_mm_gemm_blas_run(struct qs_mm_job *j)
{
#ifdef QS_HAVE_BLAS
    for (j->n0 = 0; j->n0 < j->N; j->n0 += MM_PANEL) {
        const float *w = j->panel ? j->panel : (const float *)j->w.data + j->n0 * j->K;
        j->nb = j->N - j->n0 < MM_PANEL ? j->N - j->n0 : MM_PANEL;
        if (j->panel)
            qs_mm_parallel(j, j->nb, panel_task);
        /* plan.c takes this path only for shapes that fit int */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)j->M, (int)j->nb, (int)j->K, 1.0f,
                    j->x, (int)j->K, w, (int)j->K, 0.0f, j->y + j->n0, (int)j->N);
    }
    qs_mm_parallel(j, j->M, finish_task);
#else
    (void)j; /* plan.c never takes this path without OpenBLAS */
#endif
}
