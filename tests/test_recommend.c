/* SPDX-License-Identifier: MIT */
/*
 * qs_recommend (include/qsparse/recommend.h): every candidate's error equals a direct
 * measurement through the public API (quantize, matmul, relative Frobenius error), its size
 * equals qs_quant_size's planes, the ranking follows the objective, the probe's kernel is the
 * context's kernel for the candidate's slot (so a forced scalar context reports the references),
 * and bad input leaves the output untouched.
 */
#include "quant_helpers.h"

#include <math.h>

#include "core/internal.h"
#include "core/kernels.h"
#include "qsparse/matmul.h"
#include "qsparse/recommend.h"

enum { N = 48, K = 128, XR = 6 };

static void data(float *w, float *x)
{
    t_rng r = {11};
    for (int i = 0; i < N * K; i++)
        w[i] = (float)(0.05 * t_normal(&r));
    for (int i = 0; i < XR * K; i++)
        x[i] = (float)t_normal(&r);
    x[3] = 9.0f; /* an LLM.int8 outlier column */
}

static const char *kernel_of(const qs_ctx *ctx, const char *slot)
{
    for (int32_t i = 0; i < qs_ctx_kernel_count(ctx); i++) {
        const char *s = NULL, *impl = NULL;
        assert_int_equal(qs_ctx_kernel_info(ctx, i, &s, &impl), QS_OK);
        if (strcmp(s, slot) == 0)
            return impl;
    }
    return NULL;
}

static double rel(const float *ref, const float *got, int n)
{
    double a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        a += ((double)got[i] - ref[i]) * ((double)got[i] - ref[i]);
        b += (double)ref[i] * ref[i];
    }
    return sqrt(a / b);
}

/* The error of a dense quantized candidate measured directly. */
static double direct_error(qs_ctx *ctx, const qs_quant_params *p, int act8, const float *w,
                           const float *x, const float *yref, int64_t *bytes)
{
    tq t;
    qs_weight wt = {0};
    qs_matmul_params mp;
    float y[XR * N];

    quant(ctx, p, w, QS_DTYPE_F32, N, K, &t);
    *bytes = 0;
    for (int i = 0; i < QS_PLANE_COUNT; i++) {
        int64_t b = 0;
        assert_int_equal(qs_quant_size(p, N, K, i, &b), QS_OK);
        *bytes += b;
    }
    wt.kind = QS_WEIGHT_QUANT;
    wt.quant = p;
    wt.q = &t.q;
    qs_matmul_params_init(&mp);
    if (act8) {
        mp.activations = QS_MATMUL_ACT_INT8;
        mp.threshold = p->format == QS_FORMAT_LLM_INT8 ? QS_LLM_INT8_THRESHOLD : 0.0f;
    }
    assert_int_equal(qs_matmul(ctx, &mp, x, QS_DTYPE_F32, XR, K, &wt, N, NULL, y, sizeof y),
                     QS_OK);
    tq_free(&t);
    return rel(yref, y, XR * N);
}

static void fast_params(qs_recommend_params *p)
{
    qs_recommend_params_init(p);
    p->probe_seconds = 0.001;
    p->gemm_rows = 16;
}

static void test_errors_match_direct(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = malloc(N * K * 4), *x = malloc(XR * K * 4), yref[XR * N];
    qs_candidate out[QS_RECOMMEND_MAX_CANDIDATES];
    qs_recommend_params p;
    int64_t count = -1;
    qs_weight dense = {0};

    data(w, x);
    dense.kind = QS_WEIGHT_DENSE;
    dense.dtype = QS_DTYPE_F32;
    dense.data = w;
    dense.data_bytes = N * K * 4;
    assert_int_equal(qs_matmul(ctx, NULL, x, QS_DTYPE_F32, XR, K, &dense, N, NULL, yref,
                               sizeof yref),
                     QS_OK);
    fast_params(&p);
    p.max_error = 0.05f;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, QS_RECOMMEND_MAX_CANDIDATES,
                                  &count),
                     QS_OK);
    assert_int_equal(count, 15);

    int seen = 0, over = 0;
    for (int64_t i = 0; i < count; i++) {
        const qs_candidate *c = &out[i];
        assert_int_equal(c->rank, i + 1);
        assert_int_equal(c->within_error, c->error <= 0.05);
        /* within-bound candidates first */
        if (!c->within_error)
            over = 1;
        else
            assert_false(over);
        assert_true(c->gemv_speedup > 0 && c->gemv_speedup_mt > 0 && c->gemm_speedup > 0);
        assert_non_null(c->kernel);
        if (c->sparse24) {
            assert_string_equal(
                c->kernel, kernel_of(ctx, c->format ? "mm_gemv_sp24_nf4" : "mm_gemv_sp24_f32"));
            assert_true(c->error > 0.3 && c->error < 0.8); /* half the weights gone */
            continue;
        }
        qs_quant_params qp;
        qs_quant_params_init(&qp, c->format);
        if (strstr(c->label, "b64"))
            qp.block_size = 64;
        if (strstr(c->label, "+ dq"))
            qp.double_quant = 1;
        if (strstr(c->label, "g128")) {
            qp.granularity = QS_GRAN_GROUP;
            qp.block_size = 128;
            qp.symmetric = 0;
        }
        int64_t bytes = 0;
        double e = direct_error(ctx, &qp, c->int8_activations, w, x, yref, &bytes);
        assert_true(fabs(e - c->error) <= 1e-12 * (1 + e));
        assert_int_equal(c->bytes, bytes);
        assert_true(fabs(c->bits_per_weight - (double)bytes * 8.0 / (N * K)) < 1e-12);
        if (strcmp(c->label, "nf4 b64") == 0) {
            seen++;
            assert_string_equal(c->kernel, kernel_of(ctx, "mm_gemv_nf4"));
        }
        if (c->int8_activations && c->format == QS_FORMAT_INT8) {
            /* the GEMV's entry of the slot: the context's table holds the one for the largest
             * shapes (AMX where the CPU has it), which a one-row probe does not run */
            seen++;
            assert_string_equal(c->kernel,
                                qs_ctx_kernel_select(ctx, QS_SLOT_mm_w8a8, 1, N, K)->name);
        }
    }
    assert_int_equal(seen, 2);
    free(w);
    free(x);
    qs_ctx_destroy(ctx);
}

/* A scalar-only context probes the reference kernels, and never calls them slow (there is no
 * faster path on that tier); the size objective orders by bits per weight. */
static void test_scalar_tier_and_size_objective(void **state)
{
    (void)state;
    qs_ctx_params cp;
    qs_ctx *ctx = NULL;
    float *w = malloc(N * K * 4), *x = malloc(XR * K * 4);
    qs_candidate out[QS_RECOMMEND_MAX_CANDIDATES];
    qs_recommend_params p;
    int64_t count = 0;

    data(w, x);
    qs_ctx_params_init(&cp);
    cp.isa_mask = 0;
    assert_int_equal(qs_ctx_create(&cp, &ctx), QS_OK);
    fast_params(&p);
    p.objective = QS_RECOMMEND_SIZE;
    p.max_error = 1.0f; /* everything within: a pure size order */
    p.sparse24 = 0;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, NULL, 0, out, QS_RECOMMEND_MAX_CANDIDATES,
                                  &count),
                     QS_OK);
    assert_int_equal(count, 13);
    for (int64_t i = 0; i < count; i++) {
        size_t n = strlen(out[i].kernel);
        assert_true(n > 5 && strcmp(out[i].kernel + n - 5, "__ref") == 0);
        assert_false(out[i].slow && strstr(out[i].reason, "SIMD"));
        assert_int_equal(out[i].sparse24, 0);
        if (i > 0)
            assert_true(out[i - 1].bits_per_weight <= out[i].bits_per_weight);
    }
    /* without x the error is the weight's: check one against dequantize */
    for (int64_t i = 0; i < count; i++) {
        if (strcmp(out[i].label, "fp8 e4m3") != 0)
            continue;
        qs_quant_params qp;
        tq t;
        float *back = malloc(N * K * 4);
        qs_quant_params_init(&qp, QS_FORMAT_FP8_E4M3);
        quant(ctx, &qp, w, QS_DTYPE_F32, N, K, &t);
        assert_int_equal(qs_dequantize(ctx, &qp, &t.q, N, K, back, QS_DTYPE_F32, N * K * 4),
                         QS_OK);
        assert_true(fabs(rel(w, back, N * K) - out[i].error) <= 1e-12);
        tq_free(&t);
        free(back);
    }
    free(w);
    free(x);
    qs_ctx_destroy(ctx);
}

static void test_bad_input(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float *w = malloc(N * K * 4), *x = malloc(XR * K * 4);
    qs_candidate out[QS_RECOMMEND_MAX_CANDIDATES], before[QS_RECOMMEND_MAX_CANDIDATES];
    qs_recommend_params p;
    int64_t count = -7;

    data(w, x);
    memset(out, 0x3C, sizeof out);
    memcpy(before, out, sizeof out);
    fast_params(&p);
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 31, &count),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(qs_recommend(ctx, &p, NULL, N, K, x, XR, out, 32, &count),
                     QS_ERR_INVALID_ARG);
    assert_int_equal(qs_recommend(ctx, &p, w, 0, K, x, XR, out, 32, &count), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, NULL, XR, out, 32, &count),
                     QS_ERR_INVALID_ARG);
    p.max_error = NAN;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_INVALID_ARG);
    fast_params(&p);
    p.gemm_rows = 4;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_INVALID_ARG);
    fast_params(&p);
    p.reserved[5] = 1;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_INVALID_ARG);
    fast_params(&p);
    w[77] = INFINITY;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_NONFINITE);
    w[77] = 0.0f;
    x[5] = NAN;
    assert_int_equal(qs_recommend(ctx, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_NONFINITE);
    assert_memory_equal(out, before, sizeof out);
    assert_int_equal(count, -7);
    assert_int_equal(qs_recommend(NULL, &p, w, N, K, x, XR, out, 32, &count), QS_ERR_INVALID_ARG);
    free(w);
    free(x);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_errors_match_direct),
        cmocka_unit_test(test_scalar_tier_and_size_objective),
        cmocka_unit_test(test_bad_input),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
