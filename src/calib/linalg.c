/* SPDX-License-Identifier: MIT */
/*
 * The dense linear algebra of GPTQ and SparseGPT (docs/calibration.md §15.2): the dampened
 * Hessian, its inverse's upper Cholesky factor U (H^-1 = U^T U, the factor whose rows carry a
 * column's quantization error to the columns after it), and the trailing update of the lazy
 * blocks. With OpenBLAS: LAPACK dpotrf / dpotri / dpotrf in double and cblas_sgemm; without it,
 * plain C loops that compute the same factors (slower, O(K^3) scalar work).
 */
#include <math.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../core/parallel.h"
#include "gptq_internal.h"

#ifdef QS_HAVE_LAPACK
/* The Fortran LAPACK entry points OpenBLAS exports (no LAPACKE header is needed); the trailing
 * size_t is the hidden length of the character argument. */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t);
extern void dpotri_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t);

/* Lower Cholesky in column-major of a symmetric matrix (row-major upper = column-major lower). */
static int chol(double *a, int n)
{
    int info = 0;
    dpotrf_("L", &n, a, &n, &info, 1);
    return info;
}

static int chol_inverse(double *a, int n)
{
    int info = 0;
    dpotri_("L", &n, a, &n, &info, 1);
    return info;
}
#else
/* Row-major upper triangle a holds symmetric A; on return it holds U with A = U^T U
 * (the column-major lower factor of LAPACK seen row-major). */
static int chol(double *a, int n)
{
    for (int64_t j = 0; j < n; j++) {
        double d = a[j * n + j];
        for (int64_t p = 0; p < j; p++)
            d -= a[p * n + j] * a[p * n + j];
        if (!(d > 0.0))
            return (int)j + 1;
        d = sqrt(d);
        a[j * n + j] = d;
        for (int64_t c = j + 1; c < n; c++) {
            double v = a[j * n + c];
            for (int64_t p = 0; p < j; p++)
                v -= a[p * n + j] * a[p * n + c];
            a[j * n + c] = v / d;
        }
    }
    return 0;
}

/* From U (A = U^T U, row-major upper), A^-1 = U^-1 U^-T into the upper triangle. */
static int chol_inverse(double *a, int n)
{
    /* V = U^-1, upper triangular, in place column by column from the right. */
    for (int64_t j = n - 1; j >= 0; j--) {
        a[j * n + j] = 1.0 / a[j * n + j];
        for (int64_t i = j - 1; i >= 0; i--) {
            double v = 0.0;
            for (int64_t p = i + 1; p <= j; p++)
                v += a[i * n + p] * a[p * n + j];
            a[i * n + j] = -v / a[i * n + i];
        }
    }
    /* A^-1 = V V^T: (i, j) for j >= i is sum over p >= j of V[i][p] V[j][p]; row i is read after
     * being overwritten only at columns < j, which the sum never touches for rows below. */
    for (int64_t i = 0; i < n; i++)
        for (int64_t j = i; j < n; j++) {
            double v = 0.0;
            for (int64_t p = j; p < n; p++)
                v += a[i * n + p] * a[j * n + p];
            a[i * n + j] = v;
        }
    return 0;
}
#endif

qs_status qs_gptq_hinv(qs_ctx *ctx, const struct qs_hessian *h, double percdamp,
                       const int32_t *perm, uint8_t *dead, float *u)
{
    const int64_t k = h->k;
    double *a = qs_scratch_alloc(ctx, (size_t)k * (size_t)k * sizeof(double));
    double mean = 0.0;
    int info;

    if (!a)
        return QS_ERR_OUT_OF_MEMORY;
    /* H = 2 S in the processing order, upper triangle (row-major). */
    for (int64_t i = 0; i < k; i++) {
        int64_t pi = perm ? perm[i] : i;
        for (int64_t j = i; j < k; j++) {
            int64_t pj = perm ? perm[j] : j;
            int64_t r = pi < pj ? pi : pj, c = pi < pj ? pj : pi;
            a[i * k + j] = 2.0 * h->s[r * k + c];
        }
    }
    /* Dead inputs (never active): their weights cannot matter; GPTQ sets H_jj = 1. */
    for (int64_t i = 0; i < k; i++) {
        dead[i] = a[i * k + i] == 0.0;
        if (dead[i])
            a[i * k + i] = 1.0;
        mean += a[i * k + i];
    }
    mean = percdamp * mean / (double)k;
    for (int64_t i = 0; i < k; i++)
        a[i * k + i] += mean;
    info = chol(a, (int)k);
    if (info == 0)
        info = chol_inverse(a, (int)k);
    if (info == 0)
        info = chol(a, (int)k);
    if (info != 0) {
        qs_scratch_free(ctx, a);
        return QS_ERR_BAD_DATA;
    }
    for (int64_t i = 0; i < k; i++) {
        for (int64_t j = 0; j < i; j++)
            u[i * k + j] = 0.0f;
        for (int64_t j = i; j < k; j++)
            u[i * k + j] = (float)a[i * k + j];
    }
    qs_scratch_free(ctx, a);
    return QS_OK;
}

#ifndef QS_HAVE_BLAS
struct gemm_job {
    int64_t n, k, lda, ldb, ldc;
    const float *a, *b;
    float *c;
};

static void gemm_row_task(void *arg, int64_t r, float *tile)
{
    const struct gemm_job *j = arg;
    float *c = j->c + r * j->ldc;
    (void)tile;
    for (int64_t p = 0; p < j->k; p++) {
        float av = j->a[r * j->lda + p];
        const float *b = j->b + p * j->ldb;
        if (av == 0.0f)
            continue;
        for (int64_t x = 0; x < j->n; x++)
            c[x] -= av * b[x];
    }
}
#endif

void qs_gptq_gemm_sub(const qs_ctx *ctx, int64_t m, int64_t n, int64_t k, const float *a,
                      int64_t lda, const float *b, int64_t ldb, float *c, int64_t ldc)
{
    if (m == 0 || n == 0 || k == 0)
        return;
#ifdef QS_HAVE_BLAS
    (void)ctx;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)m, (int)n, (int)k, -1.0f, a,
                (int)lda, b, (int)ldb, 1.0f, c, (int)ldc);
#else
    struct gemm_job j = {n, k, lda, ldb, ldc, a, b, c};
    qs_parallel_for(ctx, m, gemm_row_task, &j);
#endif
}
