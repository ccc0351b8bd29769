/* SPDX-License-Identifier: MIT */
/*
 * What a Hessian says about a quantized weight, and the Hessian of rotated inputs
 * (docs/calibration.md §14.1, §17):
 *
 * - qs_hessian_error: tr(D H D^T) for D = W' - W, and tr(W H W^T): twice the squared output error
 *   of the changed layer on the calibration tokens, and twice the squared output. Their ratio is
 *   the layer's relative output error on those tokens, the quantity GPTQ lowers (the weight's own
 *   error can rise at the same time).
 * - qs_hessian_rotate: S <- R S R for the block Hadamard rotation R of hadamard.c, so that the
 *   statistics match inputs rotated by R (X R) and a weight rotated the same way (W R).
 */
#include <math.h>
#include <string.h>

#ifdef QS_HAVE_BLAS
#include <cblas.h>
#endif

#include "../core/parallel.h"
#include "gptq_internal.h"

/* Doubles per pass buffer (two of them, 16 MB each): as many rows of W as fit, at least one.
 * Each dsymm call packs S again, so a layer is best done in as few calls as possible. */
#define HE_BUFFER ((int64_t)1 << 21)

/* Sum over the m rows of d (m x k doubles) of d_r^T S d_r, S symmetric from its upper triangle. */
static double quad_rows(const double *s, int64_t k, const double *d, int64_t m, double *t)
{
    double sum = 0.0;
#ifdef QS_HAVE_BLAS
    /* T = D S (dsymm reads S's upper triangle), then the row-wise dot products, in order */
    cblas_dsymm(CblasRowMajor, CblasRight, CblasUpper, (int)m, (int)k, 1.0, s, (int)k, d, (int)k,
                0.0, t, (int)k);
    for (int64_t i = 0; i < m * k; i++)
        sum += d[i] * t[i];
#else
    (void)t;
    for (int64_t r = 0; r < m; r++) {
        const double *dr = d + r * k;
        for (int64_t i = 0; i < k; i++) {
            const double *si = s + i * k;
            double acc = 0.5 * si[i] * dr[i];
            if (dr[i] == 0.0)
                continue; /* the row's term and its column's vanish */
            for (int64_t j = i + 1; j < k; j++)
                acc += si[j] * dr[j];
            sum += 2.0 * dr[i] * acc;
        }
    }
#endif
    return sum;
}

QS_API qs_status qs_hessian_error(qs_ctx *ctx, const qs_hessian *h, const float *w, const float *w2,
                                  int64_t rows, int64_t cols, double *err, double *ref)
{
    const char *who = "qs_hessian_error";
    int64_t n;
    double *d = NULL, *t = NULL, e = 0.0, r = 0.0;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!h || !w || !w2 || (!err && !ref))
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: null pointer", who);
    if (rows < 0 || cols < 0)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "%s: negative size", who);
    if (cols != h->k)
        return qs_fail(ctx, QS_ERR_SHAPE, "%s: %lld columns for a Hessian of K = %lld", who,
                       (long long)cols, (long long)h->k);
    if (qs_mul_overflow(rows, cols, &n))
        return qs_fail(ctx, QS_ERR_OVERFLOW, "%s: size overflow", who);
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(w[i]) || !isfinite(w2[i]))
            return qs_fail(ctx, QS_ERR_NONFINITE, "%s: a NaN or Inf weight at %lld", who,
                           (long long)i);
    int64_t chunk = HE_BUFFER / cols > 1 ? HE_BUFFER / cols : 1;
    chunk = rows < chunk ? (rows > 0 ? rows : 1) : chunk;
    d = qs_scratch_alloc(ctx, (size_t)(chunk * cols) * sizeof *d);
    t = qs_scratch_alloc(ctx, (size_t)(chunk * cols) * sizeof *t);
    if (!d || !t) {
        qs_scratch_free(ctx, d);
        qs_scratch_free(ctx, t);
        return qs_fail(ctx, QS_ERR_OUT_OF_MEMORY, "%s: out of memory", who);
    }
    for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
        int64_t m = rows - r0 < chunk ? rows - r0 : chunk;
        const float *a = w + r0 * cols, *b = w2 + r0 * cols;
        if (err) {
            for (int64_t i = 0; i < m * cols; i++)
                d[i] = (double)b[i] - (double)a[i];
            e += quad_rows(h->s, cols, d, m, t);
        }
        if (ref) {
            for (int64_t i = 0; i < m * cols; i++)
                d[i] = (double)a[i];
            r += quad_rows(h->s, cols, d, m, t);
        }
    }
    qs_scratch_free(ctx, d);
    qs_scratch_free(ctx, t);
    /* H = 2 S; a sum of squares cannot be negative, rounding of a near-zero one can */
    if (err)
        *err = e > 0.0 ? 2.0 * e : 0.0;
    if (ref)
        *ref = r > 0.0 ? 2.0 * r : 0.0;
    return qs_ok(ctx);
}

QS_API qs_status qs_hessian_rotate(qs_ctx *ctx, qs_hessian *h, int32_t block)
{
    qs_status st;
    double scale;
    int64_t k;

    if (!ctx)
        return QS_ERR_INVALID_ARG;
    if (!h)
        return qs_fail(ctx, QS_ERR_INVALID_ARG, "qs_hessian_rotate: null pointer");
    if ((st = qs_hadamard_check(ctx, h->k, block, "qs_hessian_rotate")) != QS_OK)
        return st;
    k = h->k;
    scale = 1.0 / sqrt((double)block);
    /* the full symmetric S, then A = S R row by row; A^T = R S; its rows times R: R S R */
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = i + 1; j < k; j++)
            h->s[j * k + i] = h->s[i * k + j];
    for (int pass = 0; pass < 2; pass++) {
        for (int64_t i = 0; i < k; i++)
            for (int64_t c = 0; c < k; c += block)
                qs_hadamard_f64(h->s + i * k + c, block, scale);
        for (int64_t i = 0; i < k; i++)
            for (int64_t j = i + 1; j < k; j++) {
                double v = h->s[i * k + j];
                h->s[i * k + j] = h->s[j * k + i];
                h->s[j * k + i] = v;
            }
    }
    /* R S R is symmetric up to rounding: keep one triangle, the mean of both */
    for (int64_t i = 0; i < k; i++)
        for (int64_t j = i + 1; j < k; j++)
            h->s[i * k + j] = h->s[j * k + i] = 0.5 * (h->s[i * k + j] + h->s[j * k + i]);
    return qs_ok(ctx);
}
