/* SPDX-License-Identifier: MIT */
/*
 * The block Hadamard rotation and the Hessian's output error (docs/calibration.md §14.1, §17):
 * qs_hadamard against the dense definition ([H_B]_ij = (-1)^popcount(i & j) / sqrt(B), summed
 * in double), exactly on small integers where every sum is exact; its own inverse; the identity
 * (x R)(W R)^T = x W^T; the same bits for every thread count; the canonical NaN; errors leaving
 * x untouched. qs_hessian_error against ||X W2^T - X W^T||^2 computed directly from the
 * activations, and qs_hessian_rotate against the Hessian of the rotated activations.
 */
#include "common.h"

#include "qsparse/gptq.h"

static int popcount32(uint32_t v)
{
    int n = 0;
    for (; v; v &= v - 1)
        n++;
    return n;
}

/* x R by the dense definition, in double. */
static void dense_rotate(const float *x, int64_t rows, int64_t cols, int32_t b, double *out)
{
    double s = 1.0 / sqrt((double)b);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c0 = 0; c0 < cols; c0 += b)
            for (int32_t j = 0; j < b; j++) {
                double acc = 0.0;
                for (int32_t i = 0; i < b; i++)
                    acc += (popcount32((uint32_t)(i & j)) & 1 ? -1.0 : 1.0) *
                           (double)x[r * cols + c0 + i];
                out[r * cols + c0 + j] = acc * s;
            }
}

static void test_hadamard_definition(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {41};
    const int32_t blocks[] = {2, 4, 8, 16, 64, 128, 512};
    for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
        int32_t b = blocks[bi];
        int64_t rows = 5, cols = 2 * (int64_t)b;
        float *x = malloc((size_t)(rows * cols) * sizeof(float));
        float *y = malloc((size_t)(rows * cols) * sizeof(float));
        double *ref = malloc((size_t)(rows * cols) * sizeof(double));
        for (int64_t i = 0; i < rows * cols; i++)
            x[i] = (float)(t_next(&rng) % 17) - 8.0f; /* small integers: exact sums */
        memcpy(y, x, (size_t)(rows * cols) * sizeof(float));
        assert_int_equal(qs_hadamard(ctx, y, rows, cols, b), QS_OK);
        dense_rotate(x, rows, cols, b, ref);
        float scale = (float)(1.0 / sqrt((double)b));
        for (int64_t i = 0; i < rows * cols; i++) {
            /* the butterflies' integer sum is exact; one f32 product by fl(1/sqrt(B)) */
            double exact_sum = nearbyint(ref[i] * sqrt((double)b));
            float want = (float)exact_sum * scale;
            if (t_bits(y[i]) != t_bits(want) && !(want == 0.0f && y[i] == 0.0f))
                fail_msg("B = %d, element %lld: %.9g, definition %.9g", (int)b, (long long)i,
                         (double)y[i], (double)want);
            assert_true(fabs((double)y[i] - ref[i]) <= 1e-6 * (1.0 + fabs(ref[i])));
        }
        /* R R = I */
        assert_int_equal(qs_hadamard(ctx, y, rows, cols, b), QS_OK);
        for (int64_t i = 0; i < rows * cols; i++)
            assert_true(fabs((double)y[i] - (double)x[i]) <= 1e-5 * (1.0 + fabs((double)x[i])));
        free(x);
        free(y);
        free(ref);
    }
    /* random values: within f32 rounding of the double definition */
    {
        int64_t rows = 7, cols = 384;
        float *x = malloc((size_t)(rows * cols) * sizeof(float));
        double *ref = malloc((size_t)(rows * cols) * sizeof(double));
        for (int64_t i = 0; i < rows * cols; i++)
            x[i] = (float)t_normal(&rng);
        dense_rotate(x, rows, cols, 128, ref);
        assert_int_equal(qs_hadamard(ctx, x, rows, cols, 128), QS_OK);
        for (int64_t i = 0; i < rows * cols; i++)
            assert_true(fabs((double)x[i] - ref[i]) < 1e-5);
        free(x);
        free(ref);
    }
    assert_int_equal(qs_hadamard_block(384), 128);
    assert_int_equal(qs_hadamard_block(1536), 512);
    assert_int_equal(qs_hadamard_block(4096), 4096);
    assert_int_equal(qs_hadamard_block(1 << 20), QS_HADAMARD_MAX_BLOCK);
    assert_int_equal(qs_hadamard_block(6), 2);
    assert_int_equal(qs_hadamard_block(7), 0);
    assert_int_equal(qs_hadamard_block(0), 0);
    qs_ctx_destroy(ctx);
}

/* (x R)(W R)^T = x W^T; the same bits with 1 and 2 threads; a NaN spreads as the canonical one. */
static void test_hadamard_invariance(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {42};
    const int64_t m = 300, n = 9, k = 256;
    float *x = malloc((size_t)(m * k) * sizeof(float)), *x2 = malloc((size_t)(m * k) * 4);
    float *w = malloc((size_t)(n * k) * sizeof(float));
    for (int64_t i = 0; i < m * k; i++)
        x[i] = (float)t_normal(&rng);
    for (int64_t i = 0; i < n * k; i++)
        w[i] = (float)t_normal(&rng);
    double y[9 * 4];
    for (int64_t r = 0; r < 4; r++)
        for (int64_t o = 0; o < n; o++) {
            double a = 0.0;
            for (int64_t j = 0; j < k; j++)
                a += (double)x[r * k + j] * (double)w[o * k + j];
            y[r * n + o] = a;
        }
    memcpy(x2, x, (size_t)(m * k) * 4);
    assert_int_equal(qs_hadamard(ctx, x, m, k, 64), QS_OK);
    assert_int_equal(qs_hadamard(ctx, w, n, k, 64), QS_OK);
    for (int64_t r = 0; r < 4; r++)
        for (int64_t o = 0; o < n; o++) {
            double a = 0.0;
            for (int64_t j = 0; j < k; j++)
                a += (double)x[r * k + j] * (double)w[o * k + j];
            assert_true(fabs(a - y[r * n + o]) < 1e-4 * (1.0 + fabs(y[r * n + o])));
        }
    /* thread counts: identical bits */
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_NUM_THREADS, 1), QS_OK);
    assert_int_equal(qs_hadamard(ctx, x2, m, k, 64), QS_OK);
    assert_memory_equal(x, x2, (size_t)(m * k) * 4);
    /* a NaN fills its block with the canonical quiet NaN; the other block is finite */
    float v[8] = {1, 2, t_f32_from_bits(0xFFC00123u), 4, 5, 6, 7, 8};
    assert_int_equal(qs_hadamard(ctx, v, 1, 8, 4), QS_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(t_bits(v[i]), 0x7FC00000u);
    for (int i = 4; i < 8; i++)
        assert_true(isfinite(v[i]));
    free(x);
    free(x2);
    free(w);
    qs_ctx_destroy(ctx);
}

static void test_hadamard_errors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, keep[12];
    memcpy(keep, x, sizeof x);
    assert_int_equal(qs_hadamard(NULL, x, 1, 12, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, NULL, 1, 12, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, -1, 12, 4), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, 1, 12, 3), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, 1, 12, 1), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, 1, 12, 0), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, 1, 12, 8), QS_ERR_SHAPE);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "multiple of the block"));
    assert_int_equal(qs_hadamard(ctx, x, 1, 12, 1 << 16), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hadamard(ctx, x, INT64_MAX, 12, 4), QS_ERR_OVERFLOW);
    assert_memory_equal(x, keep, sizeof x);
    assert_int_equal(qs_hadamard(ctx, NULL, 0, 12, 4), QS_OK); /* nothing to do */
    qs_ctx_destroy(ctx);
}

/* ---- the Hessian's output error and its rotation --------------------------------------------- */

static void test_hessian_error(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {43};
    const int64_t t = 700, k = 64, rows = 130;
    float *x = malloc((size_t)(t * k) * 4), *w = malloc((size_t)(rows * k) * 4);
    float *w2 = malloc((size_t)(rows * k) * 4);
    for (int64_t i = 0; i < t * k; i++)
        x[i] = (float)(t_normal(&rng) * (1.0 + (double)(i % k) / 8.0));
    for (int64_t i = 0; i < rows * k; i++) {
        w[i] = (float)t_normal(&rng);
        w2[i] = w[i] + (float)(0.01 * t_normal(&rng));
    }
    qs_hessian *h = NULL;
    assert_int_equal(qs_hessian_create(ctx, k, &h), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, t, k), QS_OK);
    double e_ref = 0.0, y_ref = 0.0;
    for (int64_t a = 0; a < t; a++)
        for (int64_t r = 0; r < rows; r++) {
            double y = 0.0, d = 0.0;
            for (int64_t j = 0; j < k; j++) {
                y += (double)x[a * k + j] * (double)w[r * k + j];
                d += (double)x[a * k + j] * ((double)w2[r * k + j] - (double)w[r * k + j]);
            }
            y_ref += y * y;
            e_ref += d * d;
        }
    double err = -1.0, ref = -1.0;
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k, &err, &ref), QS_OK);
    /* H = 2 X^T X: twice the squared output error and output */
    assert_true(fabs(err - 2.0 * e_ref) < 1e-4 * 2.0 * e_ref);
    assert_true(fabs(ref - 2.0 * y_ref) < 1e-4 * 2.0 * y_ref);
    double only = -1.0;
    assert_int_equal(qs_hessian_error(ctx, h, w, w, rows, k, &only, NULL), QS_OK);
    assert_true(only == 0.0);
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k, NULL, &only), QS_OK);
    assert_true(only == ref);

    /* the rotated Hessian is the Hessian of the rotated activations; the error of rotated
     * weights on it is the error of the original ones */
    qs_hessian *hr = NULL;
    float *xr = malloc((size_t)(t * k) * 4);
    memcpy(xr, x, (size_t)(t * k) * 4);
    assert_int_equal(qs_hadamard(ctx, xr, t, k, 32), QS_OK);
    assert_int_equal(qs_hessian_create(ctx, k, &hr), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, hr, xr, QS_DTYPE_F32, t, k), QS_OK);
    assert_int_equal(qs_hessian_rotate(ctx, h, 32), QS_OK);
    double *a = malloc((size_t)(k * k) * 8), *b = malloc((size_t)(k * k) * 8);
    assert_int_equal(qs_hessian_get(ctx, h, a, k * k), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, hr, b, k * k), QS_OK);
    double dmax = 0.0;
    for (int64_t i = 0; i < k; i++)
        dmax = b[i * k + i] > dmax ? b[i * k + i] : dmax;
    for (int64_t i = 0; i < k * k; i++) {
        /* f32 sums of 700 products on both sides: within 1e-5 of the diagonal's scale */
        if (fabs(a[i] - b[i]) > 1e-5 * dmax)
            fail_msg("R H R [%lld] = %.9g, H of X R %.9g (diag max %.3g)", (long long)i, a[i], b[i],
                     dmax);
        assert_true(a[i] == a[(i % k) * k + i / k]);
    }
    assert_int_equal(qs_hadamard(ctx, w, rows, k, 32), QS_OK);
    assert_int_equal(qs_hadamard(ctx, w2, rows, k, 32), QS_OK);
    double err_r, ref_r;
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k, &err_r, &ref_r), QS_OK);
    assert_true(fabs(err_r - err) < 1e-3 * err);
    assert_true(fabs(ref_r - ref) < 1e-4 * ref);

    /* many rows: the sums run over several passes of the 2^21-double buffers */
    {
        const int64_t k2 = 8, t2 = 20, r2 = ((int64_t)1 << 21) / k2 * 2 + 5;
        float *x2 = malloc((size_t)(t2 * k2) * 4), *a2 = malloc((size_t)(r2 * k2) * 4);
        float *b2 = malloc((size_t)(r2 * k2) * 4);
        qs_hessian *h2 = NULL;
        double e2 = 0.0, y2 = 0.0, eg, yg;
        for (int64_t i = 0; i < t2 * k2; i++)
            x2[i] = (float)t_normal(&rng);
        for (int64_t i = 0; i < r2 * k2; i++) {
            a2[i] = (float)t_normal(&rng);
            b2[i] = a2[i] + (float)(0.01 * t_normal(&rng));
        }
        assert_int_equal(qs_hessian_create(ctx, k2, &h2), QS_OK);
        assert_int_equal(qs_hessian_update(ctx, h2, x2, QS_DTYPE_F32, t2, k2), QS_OK);
        for (int64_t r = 0; r < r2; r++)
            for (int64_t s = 0; s < t2; s++) {
                double y = 0.0, d = 0.0;
                for (int64_t j = 0; j < k2; j++) {
                    y += (double)x2[s * k2 + j] * (double)a2[r * k2 + j];
                    d += (double)x2[s * k2 + j] * ((double)b2[r * k2 + j] - (double)a2[r * k2 + j]);
                }
                y2 += y * y;
                e2 += d * d;
            }
        assert_int_equal(qs_hessian_error(ctx, h2, a2, b2, r2, k2, &eg, &yg), QS_OK);
        assert_true(fabs(eg - 2.0 * e2) < 1e-4 * 2.0 * e2);
        assert_true(fabs(yg - 2.0 * y2) < 1e-4 * 2.0 * y2);
        qs_hessian_destroy(h2);
        free(x2);
        free(a2);
        free(b2);
    }

    /* errors: nothing written */
    double keep = 7.0;
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k + 1, &keep, NULL), QS_ERR_SHAPE);
    assert_int_equal(qs_hessian_error(ctx, h, w, NULL, rows, k, &keep, NULL), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k, NULL, NULL), QS_ERR_INVALID_ARG);
    w2[5] = NAN;
    assert_int_equal(qs_hessian_error(ctx, h, w, w2, rows, k, &keep, NULL), QS_ERR_NONFINITE);
    assert_true(keep == 7.0);
    assert_int_equal(qs_hessian_rotate(ctx, h, 48), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_hessian_rotate(ctx, h, 128), QS_ERR_SHAPE);
    assert_int_equal(qs_hessian_get(ctx, h, b, k * k), QS_OK);
    assert_memory_equal(a, b, (size_t)(k * k) * 8);
    qs_hessian_destroy(h);
    qs_hessian_destroy(hr);
    free(x);
    free(xr);
    free(w);
    free(w2);
    free(a);
    free(b);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hadamard_definition),
        cmocka_unit_test(test_hadamard_invariance),
        cmocka_unit_test(test_hadamard_errors),
        cmocka_unit_test(test_hessian_error),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
