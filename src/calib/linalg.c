/* SPDX-License-Identifier: MIT */
/*
 * The dense linear algebra of GPTQ and SparseGPT (docs/calibration.md §15.2): the dampened
 * Hessian, its inverse's upper Cholesky factor U (H^-1 = U^T U, the factor whose rows carry a
 * column's quantization error to the columns after it), and the trailing update of the lazy
 * blocks. With OpenBLAS: LAPACK dpotrf / dtrtri in double and cblas_sgemm; without it,
 * plain C loops that compute the same factors (slower, O(K^3) scalar work).
 */
#include <float.h>
#include <math.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../core/parallel.h"
#include "gptq_internal.h"

/*
 * U comes from one Cholesky of H and one triangular inverse (2 K^3 / 3 flops, half of the
 * textbook dpotrf / dpotri / dpotrf route). With J the reversal permutation, factor
 * J H J = L L^T (L lower); then H = R R^T with R = J L J upper, so H^-1 = R^-T R^-1 and
 * U = R^-1 = J L^-1 J: upper with a positive diagonal, hence the (unique) Cholesky factor of H^-1.
 * Both helpers work on a row-major lower triangle (LAPACK's column-major upper, the same bytes).
 */
#ifdef QS_HAVE_LAPACK
/* The Fortran LAPACK entry points OpenBLAS exports (no LAPACKE header is needed); the trailing
 * size_t are the hidden lengths of the character arguments. */
extern void dpotrf_(const char *uplo, const int *n, double *a, const int *lda, int *info, size_t);
extern void dtrtri_(const char *uplo, const char *diag, const int *n, double *a, const int *lda,
                    int *info, size_t, size_t);

/* A = L L^T, L into the row-major lower triangle (column-major upper: A = U^T U, U = L^T). */
static int chol_lower(double *a, int n)
{
    int info = 0;
    dpotrf_("U", &n, a, &n, &info, 1);
    return info;
}

/* L^-1 in place of L (row-major lower). */
static int tri_inverse_lower(double *a, int n)
{
    int info = 0;
    dtrtri_("U", "N", &n, a, &n, &info, 1, 1);
    return info;
}
#else
/* A = L L^T in place of A's row-major lower triangle (row-contiguous dot products). */
static int chol_lower(double *a, int n)
{
    for (int64_t j = 0; j < n; j++) {
        const double *lj = a + j * n;
        double d = lj[j];
        for (int64_t p = 0; p < j; p++)
            d -= lj[p] * lj[p];
        if (!(d > 0.0))
            return (int)j + 1;
        d = sqrt(d);
        a[j * n + j] = d;
        for (int64_t i = j + 1; i < n; i++) {
            double *li = a + i * n;
            double v = li[j];
            for (int64_t p = 0; p < j; p++)
                v -= li[p] * lj[p];
            li[j] = v / d;
        }
    }
    return 0;
}

/* L^-1 in place of L (row-major lower), column by column from the left: row i's entries at
 * columns >= j are still L's when column j is computed, rows above i already hold L^-1's. */
static int tri_inverse_lower(double *a, int n)
{
    for (int64_t j = 0; j < n; j++) {
        a[j * n + j] = 1.0 / a[j * n + j];
        for (int64_t i = j + 1; i < n; i++) {
            double v = 0.0;
            for (int64_t p = j; p < i; p++)
                v += a[i * n + p] * a[p * n + j];
            a[i * n + j] = -v / a[i * n + i];
        }
    }
    return 0;
}
#endif

/* The copies around the factorization, HINV_ROWS rows a task, the tasks alternating between
 * the two ends of the triangle so that a static schedule splits the work evenly. */
#define HINV_ROWS 16

struct hinv_job {
    const struct qs_hessian *h;
    const int32_t *perm;
    double *a;
    float *u;
    int64_t k;
};

static int64_t hinv_rows(const struct hinv_job *j, int64_t t, int64_t *r1)
{
    int64_t nb = qs_ceil_div(j->k, HINV_ROWS), b = t % 2 ? nb - 1 - t / 2 : t / 2;
    *r1 = (b + 1) * HINV_ROWS < j->k ? (b + 1) * HINV_ROWS : j->k;
    return b * HINV_ROWS;
}

static void hinv_fill_task(void *arg, int64_t t, float *tile)
{
    const struct hinv_job *jb = arg;
    const int64_t k = jb->k;
    int64_t r1, r0 = hinv_rows(jb, t, &r1);
    (void)tile;
    for (int64_t i = r0; i < r1; i++) {
        int64_t pi = jb->perm ? jb->perm[k - 1 - i] : k - 1 - i;
        for (int64_t j = 0; j <= i; j++) {
            int64_t pj = jb->perm ? jb->perm[k - 1 - j] : k - 1 - j;
            int64_t r = pi < pj ? pi : pj, c = pi < pj ? pj : pi;
            jb->a[i * k + j] = 2.0 * jb->h->s[r * k + c];
        }
    }
}

static void hinv_copy_task(void *arg, int64_t t, float *tile)
{
    const struct hinv_job *jb = arg;
    const int64_t k = jb->k;
    int64_t r1, r0 = hinv_rows(jb, t, &r1);
    (void)tile;
    for (int64_t i = r0; i < r1; i++) {
        const double *l = jb->a + (k - 1 - i) * k + (k - 1);
        float *u = jb->u + i * k;
        for (int64_t j = 0; j < i; j++)
            u[j] = 0.0f;
        for (int64_t j = i; j < k; j++)
            u[j] = (float)l[-j];
    }
}

/* Whether the f32 factor can carry errors: every entry finite and every diagonal entry a
 * positive normal float (the sweeps divide by it). A Hessian of a huge scale (activations near
 * the float range, or a given matrix near the double range) factors in double but gives a
 * diagonal that underflows in f32: dividing by it would turn every error into Inf or NaN. */
static int hinv_usable(const float *u, int64_t k)
{
    for (int64_t i = 0; i < k; i++) {
        if (!(u[i * k + i] >= FLT_MIN) || !isfinite(u[i * k + i]))
            return 0;
        for (int64_t c = i + 1; c < k; c++)
            if (!isfinite(u[i * k + c]))
                return 0;
    }
    return 1;
}

qs_status qs_gptq_hinv(qs_ctx *ctx, const struct qs_hessian *h, double percdamp,
                       const int32_t *perm, uint8_t *dead, float *u)
{
    const int64_t k = h->k;
    double *a = qs_scratch_alloc(ctx, (size_t)k * (size_t)k * sizeof(double));
    double mean = 0.0;
    int info;

    if (!a)
        return QS_ERR_OUT_OF_MEMORY;
    /* B = J H J with H = 2 S in the processing order, lower triangle (row-major): B_ij is
     * H_(k-1-i)(k-1-j), an entry of S's upper triangle for j <= i. */
    struct hinv_job j = {h, perm, a, u, k};
    qs_parallel_for(ctx, qs_ceil_div(k, HINV_ROWS), hinv_fill_task, &j);
    /* Dead inputs (never active): their weights cannot matter; GPTQ sets H_jj = 1. */
    for (int64_t t = 0; t < k; t++) {
        double *d = &a[(k - 1 - t) * k + (k - 1 - t)];
        dead[t] = *d == 0.0;
        if (dead[t])
            *d = 1.0;
        mean += *d;
    }
    mean = percdamp * mean / (double)k;
    if (!isfinite(mean)) { /* a diagonal summing past the double range (a given matrix) */
        qs_scratch_free(ctx, a);
        return QS_ERR_BAD_DATA;
    }
    for (int64_t i = 0; i < k; i++)
        a[i * k + i] += mean;
    info = chol_lower(a, (int)k);
    if (info == 0)
        info = tri_inverse_lower(a, (int)k);
    if (info != 0) {
        qs_scratch_free(ctx, a);
        return QS_ERR_BAD_DATA;
    }
    /* U_ij = (L^-1)_(k-1-i)(k-1-j): row i of U is row k-1-i of L^-1 read backwards */
    qs_parallel_for(ctx, qs_ceil_div(k, HINV_ROWS), hinv_copy_task, &j);
    qs_scratch_free(ctx, a);
    return hinv_usable(u, k) ? QS_OK : QS_ERR_BAD_DATA;
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
