/* SPDX-License-Identifier: MIT */
/*
 * qs_matmul with bf16 activations (include/qsparse/matmul.h, "bf16 activations") through the
 * public API, at whatever tier the suite forces (the bf16 kernels where the CPU has AVX512-BF16,
 * the f32 path on x^ elsewhere):
 * - the stated error bound against the f32-activation result, for every format and option, M = 1,
 *   2, 5, 16 (the bf16 kernels) and 17 (the f32 path on x^), K with tails (not a multiple of 32,
 *   odd), N tails of the 4-row tiles; and that the bound is not vacuous;
 * - the weights taken exactly: against the f32 path on x rounded to bf16 by the test, only the
 *   f32 sums differ (and the NF4 / FP4 codebook rounding);
 * - which path runs (the profiler's kernel name), and that the f32 path on x^ gives the bits of
 *   qs_matmul with f32 activations on x^ wherever it runs;
 * - NaN and infinite activations, infinite, NaN, zero and subnormal scales;
 * - f32, f16 and bf16 x holding the same values give the same bits; 1 and 2 threads too;
 * - bad parameters return a status and leave y untouched.
 */
#include <float.h>

#include "common.h"
#include "quant_helpers.h"
#include "qsparse/profile.h"

/* A weight: quantized (format >= 0) or plain / 2:4 values of dtype. */
typedef struct {
    const char *name;
    int32_t kind, format, dtype;
    int32_t gran, sym, dq, block;
} bspec;

static const bspec specs[] = {
    {"nf4", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 0, 64},
    {"nf4-b16", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 0, 16},
    {"nf4-b32-dq", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 1, 32},
    {"nf4-b6", QS_WEIGHT_QUANT, QS_FORMAT_NF4, 0, 0, 1, 0, 6},
    {"fp4", QS_WEIGHT_QUANT, QS_FORMAT_FP4, 0, 0, 1, 0, 64},
    {"fp4-b128-dq", QS_WEIGHT_QUANT, QS_FORMAT_FP4, 0, 0, 1, 1, 128},
    {"int8-tensor", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_TENSOR, 1, 0, 0},
    {"int8-row-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_ROW, 0, 0, 0},
    {"int8-group16", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_GROUP, 1, 0, 16},
    {"int8-group40-asym", QS_WEIGHT_QUANT, QS_FORMAT_INT8, 0, QS_GRAN_GROUP, 0, 0, 40},
    {"llm_int8", QS_WEIGHT_QUANT, QS_FORMAT_LLM_INT8, 0, 0, 1, 0, 0},
    {"e4m3", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E4M3, 0, 0, 1, 0, 0},
    {"e5m2", QS_WEIGHT_QUANT, QS_FORMAT_FP8_E5M2, 0, 0, 1, 0, 0},
    {"mxfp4", QS_WEIGHT_QUANT, QS_FORMAT_MXFP4, 0, 0, 1, 0, 0},
    {"mxfp8", QS_WEIGHT_QUANT, QS_FORMAT_MXFP8, 0, 0, 1, 0, 0},
    {"nvfp4", QS_WEIGHT_QUANT, QS_FORMAT_NVFP4, 0, 0, 1, 0, 0},
    {"bf16", QS_WEIGHT_DENSE, -1, QS_DTYPE_BF16, 0, 0, 0, 0},
    {"f16", QS_WEIGHT_DENSE, -1, QS_DTYPE_F16, 0, 0, 0, 0},
    {"f32", QS_WEIGHT_DENSE, -1, QS_DTYPE_F32, 0, 0, 0, 0},
    {"sp24-f32", QS_WEIGHT_SP24, -1, QS_DTYPE_F32, 0, 0, 0, 0},
    {"sp24-nf4", QS_WEIGHT_SP24_QUANT, QS_FORMAT_NF4, 0, 0, 1, 0, 64},
};
#define NSPECS ((int)(sizeof specs / sizeof specs[0]))

static int sparse(const bspec *s)
{
    return s->kind == QS_WEIGHT_SP24 || s->kind == QS_WEIGHT_SP24_QUANT;
}

/* Whether the bf16 kernel of the format may run: a dense weight with a bf16 kernel (every
 * quantized format, plain bf16) and M within QS_MATMUL_BF16_MAX_M, on a CPU with AVX512-BF16. */
static int bf16_kernel(qs_ctx *ctx, const bspec *s, int64_t M)
{
    return (qs_ctx_isa(ctx) & QS_ISA_AVX512_BF16) && M <= QS_MATMUL_BF16_MAX_M &&
           (s->kind == QS_WEIGHT_QUANT ||
            (s->kind == QS_WEIGHT_DENSE && s->dtype == QS_DTYPE_BF16));
}

/* c of the bound: the codebook rounding of NF4 and FP4. */
static int codebook(const bspec *s)
{
    return s->format == QS_FORMAT_NF4 || s->format == QS_FORMAT_FP4;
}

/* K suited to the spec near k: a multiple of 4 for 2:4, of the INT8 group. */
static int64_t fit_k(const bspec *s, int64_t k)
{
    int64_t g = sparse(s) ? 4 : s->gran == QS_GRAN_GROUP ? s->block : 1;
    return (k + g - 1) / g * g;
}

typedef struct {
    qs_weight w;
    qs_quant_params p;
    tq t;
    t_buf values;
    uint16_t *meta;
    float *dense; /* N x K, as qs_dequantize decodes it */
    float *scale; /* N x K: each element's scale (1 for plain values) */
} bweight;

/* The scale of every element: the weight dequantized with every code set to the one that stands
 * for 1 (and zero points 0), which each format decodes as its unit scale exactly. */
static void elem_scales(qs_ctx *ctx, const bspec *s, bweight *o, int64_t N, int64_t K)
{
    static const uint8_t one[] = {
        [QS_FORMAT_NF4] = 0xFF,   [QS_FORMAT_FP4] = 0x33,      [QS_FORMAT_INT8] = 0x01,
        [QS_FORMAT_LLM_INT8] = 1, [QS_FORMAT_FP8_E4M3] = 0x38, [QS_FORMAT_FP8_E5M2] = 0x3C,
        [QS_FORMAT_MXFP4] = 0x22, [QS_FORMAT_MXFP8] = 0x38,    [QS_FORMAT_NVFP4] = 0x22,
    };
    int64_t n = N * K;

    if (s->kind != QS_WEIGHT_QUANT) {
        for (int64_t i = 0; i < n; i++)
            o->scale[i] = 1.0f;
        return;
    }
    qs_qtensor q = o->t.q;
    void *data = malloc((size_t)q.data_bytes), *zp = NULL;
    assert_non_null(data);
    memset(data, one[s->format], (size_t)q.data_bytes);
    q.data = data;
    if (q.zero_point_bytes > 0) {
        zp = calloc(1, (size_t)q.zero_point_bytes);
        q.zero_point = zp;
    }
    assert_int_equal(qs_dequantize(ctx, &o->p, &q, N, K, o->scale, QS_DTYPE_F32, n * 4), QS_OK);
    free(data);
    free(zp);
}

static void bweight_make(qs_ctx *ctx, const bspec *s, const float *w0, int64_t N, int64_t K,
                         bweight *o)
{
    int64_t n = N * K;

    memset(o, 0, sizeof *o);
    o->w.kind = s->kind;
    o->dense = malloc((size_t)n * 4 + 4);
    o->scale = malloc((size_t)n * 4 + 4);
    assert_true(o->dense && o->scale);
    if (s->format >= 0) {
        o->p = params(s->format);
        if (s->format == QS_FORMAT_NF4 || s->format == QS_FORMAT_FP4) {
            o->p.block_size = s->block;
            o->p.double_quant = s->dq;
        }
        if (s->format == QS_FORMAT_INT8) {
            o->p.granularity = s->gran;
            o->p.symmetric = s->sym;
            if (s->gran == QS_GRAN_GROUP)
                o->p.block_size = s->block;
        }
        o->w.quant = &o->p;
        o->w.q = &o->t.q;
    }
    if (s->kind == QS_WEIGHT_QUANT) {
        quant(ctx, &o->p, w0, QS_DTYPE_F32, N, K, &o->t);
        assert_int_equal(qs_dequantize(ctx, &o->p, &o->t.q, N, K, o->dense, QS_DTYPE_F32, n * 4),
                         QS_OK);
    } else if (s->kind == QS_WEIGHT_DENSE) {
        o->values = t_buf_new((size_t)(n * qs_dtype_size(s->dtype)));
        assert_int_equal(
            qs_convert(ctx, w0, QS_DTYPE_F32, o->values.p, s->dtype, n, (int64_t)o->values.bytes),
            QS_OK);
        assert_int_equal(qs_convert(ctx, o->values.p, s->dtype, o->dense, QS_DTYPE_F32, n, n * 4),
                         QS_OK);
        o->w.dtype = s->dtype;
        o->w.data = o->values.p;
        o->w.data_bytes = (int64_t)o->values.bytes;
    } else { /* 2:4 by magnitude, values kept in f32 or quantized */
        int64_t vb = 0, mc = 0;
        assert_int_equal(qs_sp24_size(QS_DTYPE_F32, N, K, &vb, &mc), QS_OK);
        float *vals = malloc((size_t)vb), *pruned = malloc((size_t)n * 4);
        o->meta = malloc((size_t)mc * 2);
        assert_true(vals && pruned && o->meta);
        assert_int_equal(qs_sp24_prune_compress(ctx, w0, QS_DTYPE_F32, N, K, NULL, vals, vb,
                                                o->meta, mc, NULL, 0),
                         QS_OK);
        assert_int_equal(
            qs_sp24_decompress(ctx, vals, QS_DTYPE_F32, o->meta, mc, N, K, pruned, n * 4), QS_OK);
        o->w.meta = o->meta;
        o->w.meta_count = mc;
        if (s->kind == QS_WEIGHT_SP24) {
            o->values = t_buf_new((size_t)vb);
            memcpy(o->values.p, vals, (size_t)vb);
            memcpy(o->dense, pruned, (size_t)n * 4);
            o->w.dtype = QS_DTYPE_F32;
            o->w.data = o->values.p;
            o->w.data_bytes = vb;
        } else {
            tq_new(&o->t, &o->p, N, K / 2);
            assert_int_equal(qs_sp24_quantize(ctx, &o->p, pruned, QS_DTYPE_F32, N, K, NULL, &o->t.q,
                                              o->meta, mc),
                             QS_OK);
            assert_int_equal(qs_sp24_dequantize(ctx, &o->p, &o->t.q, o->meta, mc, N, K, o->dense,
                                                QS_DTYPE_F32, n * 4),
                             QS_OK);
        }
        free(vals);
        free(pruned);
    }
    elem_scales(ctx, s, o, N, K);
}

static void bweight_free(bweight *o)
{
    if (o->w.q)
        tq_free(&o->t);
    if (o->values.base)
        t_buf_free(&o->values);
    free(o->meta);
    free(o->dense);
    free(o->scale);
}

static void fill(t_rng *r, float *x, int64_t n, double scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = (float)(t_normal(r) * scale);
}

static qs_status mm(qs_ctx *ctx, int32_t act, const void *x, int32_t dt, int64_t M, int64_t K,
                    const bweight *o, int64_t N, const float *bias, float *y)
{
    qs_matmul_params p;
    qs_matmul_params_init(&p);
    p.activations = act;
    return qs_matmul(ctx, &p, x, dt, M, K, &o->w, N, bias, y, M * N * 4);
}

/* x rounded to bf16 and widened: x^ of the definition. */
static void x_hat(qs_ctx *ctx, const float *x, int64_t n, float *xh)
{
    uint16_t *h = malloc((size_t)n * 2 + 2);
    assert_non_null(h);
    round_16(ctx, x, n, QS_DTYPE_BF16, h, xh);
    free(h);
}

/* The bound of include/qsparse/matmul.h for y[m, n] against y32[m, n] (x, W, s as given). */
static double bf16_bound(const float *x, const float *w, const float *s, int64_t K, int c)
{
    double sum = 0.0, fl = 0.0, smax = 0.0;
    for (int64_t k = 0; k < K; k++) {
        sum += fabs((double)x[k] * w[k]);
        fl += fabs((double)w[k]) + fabs((double)s[k]) * (1.0 + fabs((double)x[k]));
        smax = fmax(smax, fabs((double)s[k]));
    }
    return (0x1p-8 + c * (0x1p-8 + 0x1p-16) + (3.2 * (double)K + 16.0) * 0x1p-24) * sum +
           0x1p-125 * fl + (4.0 * (double)K + 64.0) * 0x1p-149 * (1.0 + smax);
}

/* ---- the bound, every format ------------------------------------------------------------------
 */

static void test_bound(void **state)
{
    static const int64_t Ms[] = {1, 2, 5, 16, 17};
    static const int64_t Ks[] = {128, 100, 97, 304};
    qs_ctx *ctx = t_ctx();
    t_rng r = {31};
    int64_t changed = 0, total = 0;

    (void)state;
    for (int si = 0; si < NSPECS; si++)
        for (int c = 0; c < 5; c++) {
            const bspec *s = &specs[si];
            int64_t M = Ms[c], N = c % 2 ? 13 : 6, K = fit_k(s, Ks[(c + si) % 4]);
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *bias = malloc((size_t)N * 4), *y = malloc((size_t)(M * N) * 4);
            float *y32 = malloc((size_t)(M * N) * 4);
            bweight o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            fill(&r, bias, N, 0.1);
            bweight_make(ctx, s, w0, N, K, &o);
            assert_int_equal(
                mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, c & 1 ? bias : NULL, y),
                QS_OK);
            assert_string_equal(qs_ctx_last_error(ctx), "");
            assert_int_equal(
                mm(ctx, QS_MATMUL_ACT_F32, x, QS_DTYPE_F32, M, K, &o, N, c & 1 ? bias : NULL, y32),
                QS_OK);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double b =
                        bf16_bound(x + m * K, o.dense + n * K, o.scale + n * K, K, codebook(s));
                    double e = fabs((double)y[m * N + n] - y32[m * N + n]);
                    if (!(e <= b))
                        fail_msg("%s M=%lld K=%lld (%d): y[%lld, %lld] = %.9g, y32 = %.9g: "
                                 "|diff| %g > bound %g",
                                 s->name, (long long)M, (long long)K, c, (long long)m, (long long)n,
                                 (double)y[m * N + n], (double)y32[m * N + n], e, b);
                    changed += y[m * N + n] != y32[m * N + n];
                    total++;
                }
            bweight_free(&o);
            free(w0);
            free(x);
            free(bias);
            free(y);
            free(y32);
        }
    /* not vacuous: rounding x to bf16 changes nearly every output */
    assert_true(changed > total * 9 / 10);
    qs_ctx_destroy(ctx);
}

/* ---- the weights are taken exactly ------------------------------------------------------------
 * On x^ (rounded by the test) the only differences from the f32 path are the sums' order and,
 * for NF4 / FP4 through a bf16 kernel, the codebook's rounding: a wrong bf16 weight value (a
 * decode error worth one bf16 unit, 2^-8 relative) is far outside the f32 part of the bound. */
static void test_exact_weights(void **state)
{
    static const int64_t Ms[] = {1, 3, 8, 16};
    qs_ctx *ctx = t_ctx();
    t_rng r = {77};

    (void)state;
    for (int si = 0; si < NSPECS; si++)
        for (int c = 0; c < 4; c++) {
            const bspec *s = &specs[si];
            int64_t M = Ms[c], N = 9, K = fit_k(s, c % 2 ? 160 : 95);
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *xh = malloc((size_t)(M * K) * 4), *y = malloc((size_t)(M * N) * 4);
            float *y32 = malloc((size_t)(M * N) * 4);
            int cb = codebook(s) && bf16_kernel(ctx, s, M);
            bweight o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            x_hat(ctx, x, M * K, xh);
            bweight_make(ctx, s, w0, N, K, &o);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, NULL, y),
                             QS_OK);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_F32, xh, QS_DTYPE_F32, M, K, &o, N, NULL, y32),
                             QS_OK);
            for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                    double sum = 0.0;
                    for (int64_t k = 0; k < K; k++)
                        sum += fabs((double)xh[m * K + k] * o.dense[n * K + k]);
                    double b = ((3.2 * (double)K + 16.0) * 0x1p-24 + cb * (0x1p-8 + 0x1p-16)) * sum;
                    double e = fabs((double)y[m * N + n] - y32[m * N + n]);
                    if (!(e <= b))
                        fail_msg("%s M=%lld K=%lld: y[%lld, %lld] = %.9g, on x^ %.9g: |diff| %g > "
                                 "%g",
                                 s->name, (long long)M, (long long)K, (long long)m, (long long)n,
                                 (double)y[m * N + n], (double)y32[m * N + n], e, b);
                }
            bweight_free(&o);
            free(w0);
            free(x);
            free(xh);
            free(y);
            free(y32);
        }
    qs_ctx_destroy(ctx);
}

/* ---- which path runs; the f32 path on x^ ------------------------------------------------------
 */

/* The kernel of the one call profiled since the last reset. */
static const char *last_kernel(qs_ctx *ctx)
{
    qs_profile_entry e;
    assert_int_equal(qs_profile_count(ctx), 1);
    assert_int_equal(qs_profile_get(ctx, 0, &e), QS_OK);
    return e.kernel;
}

static void test_paths(void **state)
{
    static const int64_t Ms[] = {1, 4, QS_MATMUL_BF16_MAX_M, QS_MATMUL_BF16_MAX_M + 1};
    qs_ctx *ctx = t_ctx();
    t_rng r = {5};
    int kernels = 0;

    (void)state;
    assert_int_equal(qs_ctx_set(ctx, QS_PARAM_PROFILE, 1), QS_OK);
    for (int si = 0; si < NSPECS; si++)
        for (int c = 0; c < 4; c++) {
            const bspec *s = &specs[si];
            int64_t M = Ms[c], N = 7, K = fit_k(s, 132);
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)(M * K) * 4);
            float *xh = malloc((size_t)(M * K) * 4), *bias = malloc((size_t)N * 4);
            float *y = malloc((size_t)(M * N) * 4), *y32 = malloc((size_t)(M * N) * 4);
            bweight o;

            fill(&r, w0, N * K, 0.05);
            fill(&r, x, M * K, 1.0);
            fill(&r, bias, N, 0.1);
            x_hat(ctx, x, M * K, xh);
            bweight_make(ctx, s, w0, N, K, &o);
            assert_int_equal(qs_profile_reset(ctx), QS_OK);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, bias, y),
                             QS_OK);
            int bf16 = strstr(last_kernel(ctx), "abf16__") != NULL;
            if (bf16 != bf16_kernel(ctx, s, M))
                fail_msg("%s M=%lld: kernel %s, a bf16 kernel %sexpected", s->name, (long long)M,
                         last_kernel(ctx), bf16_kernel(ctx, s, M) ? "" : "not ");
            kernels += bf16;
            if (!bf16) { /* the f32 path on x^: the bits of f32 activations on x^ */
                assert_int_equal(
                    mm(ctx, QS_MATMUL_ACT_F32, xh, QS_DTYPE_F32, M, K, &o, N, bias, y32), QS_OK);
                T_ASSERT_BYTES(s->name, y, y32, (size_t)(M * N) * 4);
            }
            bweight_free(&o);
            free(w0);
            free(x);
            free(xh);
            free(bias);
            free(y);
            free(y32);
        }
    /* every quantized dense format and bf16 values, M <= 16, on a CPU with AVX512-BF16 */
    assert_int_equal(kernels, (qs_ctx_isa(ctx) & QS_ISA_AVX512_BF16) ? 17 * 3 : 0);
    qs_ctx_destroy(ctx);
}

/* ---- non-finite activations and scales --------------------------------------------------------
 */

/* NaN and Inf in x: y as the f32 path on x^ gives it, NaN for NaN and infinity for infinity (the
 * kernels and the f32 path may differ in the finite values only). */
static void test_nonfinite_x(void **state)
{
    enum { M = 3, N = 9, KMAX = 120 };
    qs_ctx *ctx = t_ctx();
    t_rng r = {9};

    (void)state;
    for (int si = 0; si < NSPECS; si++) {
        const bspec *s = &specs[si];
        const int64_t K = fit_k(s, 96);
        float w0[N * KMAX], x[M * KMAX], xh[M * KMAX], y[M * N], y32[M * N];
        bweight o;

        fill(&r, w0, N * K, 0.05);
        fill(&r, x, M * K, 1.0);
        x[5] = NAN;             /* row 0: NaN */
        x[K + 17] = INFINITY;   /* row 1: +Inf (times a zero weight: NaN) */
        x[2 * K + 3] = 3.4e38f; /* row 2: rounds to +Inf in bf16 */
        x_hat(ctx, x, M * K, xh);
        assert_true(isinf(xh[2 * K + 3]));
        bweight_make(ctx, s, w0, N, K, &o);
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, NULL, y), QS_OK);
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_F32, xh, QS_DTYPE_F32, M, K, &o, N, NULL, y32),
                         QS_OK);
        for (int i = 0; i < M * N; i++) {
            if (isnan(y32[i])   ? t_bits(y[i]) != 0x7FC00000u
                : isinf(y32[i]) ? t_bits(y[i]) != t_bits(y32[i])
                                : !isfinite(y[i]))
                fail_msg("%s y[%d] = %a (0x%08x), on x^ %a", s->name, i, (double)y[i], t_bits(y[i]),
                         (double)y32[i]);
        }
        for (int n = 0; n < N && !sparse(s); n++)        /* (2:4 reads only the kept columns) */
            assert_int_equal(t_bits(y[n]), 0x7FC00000u); /* the NaN row */
        bweight_free(&o);
    }
    qs_ctx_destroy(ctx);
}

/* One scale set to Inf, NaN, 0 or a subnormal, x one-hot in that scale's first column C: y[0]
 * (and every row for a per-tensor scale) is +-Inf by the code's sign (NaN for a zero code), NaN,
 * +0, or within the bound; the other rows as with f32 activations on x^. */
static void test_scales(void **state)
{
    enum { N = 6, K = 240, C = 3 };
    static const float scales[] = {INFINITY, NAN, 0.0f, 1e-40f};
    qs_ctx *ctx = t_ctx();
    t_rng r = {57};
    int checked = 0;

    (void)state;
    for (int si = 0; si < NSPECS; si++)
        for (int v = 0; v < 4; v++) {
            const bspec *s = &specs[si];
            float w0[N * K], x[K], y[N], y32[N];
            qs_plane_info pi;
            bweight o;

            if (s->kind != QS_WEIGHT_QUANT)
                continue;
            fill(&r, w0, N * K, 0.05);
            bweight_make(ctx, s, w0, N, K, &o);
            assert_int_equal(qs_quant_plane_info(ctx, &o.p, N, K, QS_PLANE_SCALE, &pi), QS_OK);
            if (pi.elem != QS_ELEM_F32) { /* E8M0, E4M3 or double-quantized scales */
                bweight_free(&o);
                continue;
            }
            float s0 = ((float *)o.t.q.scale)[0];
            ((float *)o.t.q.scale)[0] = scales[v];
            memset(x, 0, sizeof x);
            x[C] = 1.0f;
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, 1, K, &o, N, NULL, y),
                             QS_OK);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_F32, x, QS_DTYPE_F32, 1, K, &o, N, NULL, y32),
                             QS_OK);
            for (int n = 0; n < N; n++) {
                int hit = n == 0 || pi.values == 1;
                float v0 = o.dense[n * K + C] / s0; /* the code's value (its sign) */
                uint32_t want = !hit || v == 3 ? t_bits(y32[n])
                                : v == 0       ? (v0 > 0   ? 0x7F800000u
                                                  : v0 < 0 ? 0xFF800000u
                                                           : 0x7FC00000u)
                                : v == 1       ? 0x7FC00000u
                                               : 0u;
                /* the one product is exact in both paths (x = 1), up to the codebook rounding of
                 * NF4 / FP4 through a bf16 kernel */
                if (t_bits(y[n]) != want &&
                    !(isfinite(y[n]) && fabsf(y[n] - y32[n]) <= 0x1p-8f * fabsf(y32[n])))
                    fail_msg("%s scale %g row %d: y = %a (0x%08x), want 0x%08x", s->name,
                             (double)scales[v], n, (double)y[n], t_bits(y[n]), want);
            }
            checked++;
            bweight_free(&o);
        }
    assert_true(checked >= 4 * 8);
    qs_ctx_destroy(ctx);
}

/* NVFP4 with a tensor scale so large that the block scale fl(E4M3(S) * s_global) of the largest
 * scale byte (448) overflows to infinity, where the kernels test block by block: x one-hot, so
 * every y is one exact product times its block's scale (0 times the others'), the bits of the f32
 * path: NaN in a row holding an infinite scale (a zero sum times infinity), else v * den. */
static void test_nvfp4_infinite_scales(void **state)
{
    enum { N = 24, K = 96 };
    qs_ctx *ctx = t_ctx();
    const bspec *s = NULL;
    float w0[N * K], x[K], y[N], y32[N];
    t_rng r = {23};
    int nan = 0, num = 0;
    bweight o;

    (void)state;
    for (int si = 0; si < NSPECS; si++)
        if (specs[si].format == QS_FORMAT_NVFP4)
            s = &specs[si];
    assert_non_null(s);
    fill(&r, w0, N * K, 1.0);
    bweight_make(ctx, s, w0, N, K, &o);
    o.t.q.global_scale = FLT_MAX / 440.0f;
    for (int c = 0; c < K; c += 5) {
        memset(x, 0, sizeof x);
        x[c] = 1.0f;
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, 1, K, &o, N, NULL, y), QS_OK);
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_F32, x, QS_DTYPE_F32, 1, K, &o, N, NULL, y32),
                         QS_OK);
        T_ASSERT_BYTES("nvfp4, huge tensor scale", y, y32, sizeof y);
        for (int n = 0; n < N; n++) {
            nan += isnan(y[n]);
            num += isfinite(y[n]) && y[n] != 0.0f;
        }
    }
    assert_true(nan > 0 && num > 0); /* some block scales overflowed, not all */
    bweight_free(&o);
    qs_ctx_destroy(ctx);
}

/* Subnormal activations and scales: the bound's flush and underflow terms (vdpbf16ps flushes
 * denormal inputs to zero). */
static void test_subnormal(void **state)
{
    enum { M = 2, N = 5, K = 160 };
    qs_ctx *ctx = t_ctx();
    t_rng r = {13};

    (void)state;
    for (int si = 0; si < NSPECS; si++) {
        const bspec *s = &specs[si];
        float w0[N * K], x[M * K], y[M * N], y32[M * N];
        bweight o;

        fill(&r, w0, N * K, 1e-36); /* small blocks: subnormal products and scales */
        for (int k = 0; k < N * K; k += 3)
            w0[k] = 1e-39f * (float)(k % 5 - 2);
        fill(&r, x, M * K, 1.0);
        for (int k = 0; k < M * K; k += 2)
            x[k] = (float)(k % 7 - 3) * 1e-39f; /* subnormal x */
        bweight_make(ctx, s, w0, N, K, &o);
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, NULL, y), QS_OK);
        assert_int_equal(mm(ctx, QS_MATMUL_ACT_F32, x, QS_DTYPE_F32, M, K, &o, N, NULL, y32),
                         QS_OK);
        for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
                double b = bf16_bound(x + m * K, o.dense + n * K, o.scale + n * K, K, codebook(s));
                double e = fabs((double)y[m * N + n] - y32[m * N + n]);
                if (!(e <= b))
                    fail_msg("%s: y[%lld, %lld] = %a, y32 = %a: |diff| %g > bound %g", s->name,
                             (long long)m, (long long)n, (double)y[m * N + n],
                             (double)y32[m * N + n], e, b);
            }
        bweight_free(&o);
    }
    qs_ctx_destroy(ctx);
}

/* ---- activation dtypes, threads ------------------------------------------------------------- */

/* x holding bf16 values (so f16 holds them too where their range allows: |x| in [2^-14, 8]) as
 * f32, f16 and bf16 gives the same bits; and 2 threads the bits of 1. */
static void test_dtypes_threads(void **state)
{
    enum { N = 70, K = 240 };
    static const int64_t Ms[] = {1, 6, 16, 20};
    qs_ctx *ctx = t_ctx(), *ctx2 = NULL;
    qs_ctx_params cp;
    t_rng r = {3};

    (void)state;
    qs_ctx_params_init(&cp);
    cp.num_threads = 2;
    assert_int_equal(qs_ctx_create(&cp, &ctx2), QS_OK);
    for (int si = 0; si < NSPECS; si++)
        for (int c = 0; c < 4; c++) {
            const bspec *s = &specs[si];
            int64_t M = Ms[c], n = M * K;
            float *w0 = malloc((size_t)(N * K) * 4), *x = malloc((size_t)n * 4);
            uint16_t *hb = malloc((size_t)n * 2), *hh = malloc((size_t)n * 2);
            float *y[4];
            bweight o;

            fill(&r, w0, N * K, 0.05);
            for (int64_t i = 0; i < n; i++) { /* 8 significant bits, f16's normal range */
                double v =
                    ldexp(1.0 + (double)(t_next(&r) % 128) / 128.0, (int)(t_next(&r) % 16) - 13);
                x[i] = (float)(t_next(&r) & 1 ? -v : v);
            }
            assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, hb, QS_DTYPE_BF16, n, n * 2), QS_OK);
            assert_int_equal(qs_convert(ctx, x, QS_DTYPE_F32, hh, QS_DTYPE_F16, n, n * 2), QS_OK);
            bweight_make(ctx, s, w0, N, K, &o);
            for (int i = 0; i < 4; i++)
                y[i] = malloc((size_t)(M * N) * 4);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, NULL, y[0]),
                             QS_OK);
            assert_int_equal(
                mm(ctx, QS_MATMUL_ACT_BF16, hb, QS_DTYPE_BF16, M, K, &o, N, NULL, y[1]), QS_OK);
            assert_int_equal(mm(ctx, QS_MATMUL_ACT_BF16, hh, QS_DTYPE_F16, M, K, &o, N, NULL, y[2]),
                             QS_OK);
            assert_int_equal(mm(ctx2, QS_MATMUL_ACT_BF16, x, QS_DTYPE_F32, M, K, &o, N, NULL, y[3]),
                             QS_OK);
            for (int i = 1; i < 4; i++)
                T_ASSERT_BYTES(s->name, y[i], y[0], (size_t)(M * N) * 4);
            for (int i = 0; i < 4; i++)
                free(y[i]);
            bweight_free(&o);
            free(w0);
            free(x);
            free(hb);
            free(hh);
        }
    qs_ctx_destroy(ctx2);
    qs_ctx_destroy(ctx);
}

/* ---- errors --------------------------------------------------------------------------------- */

static void test_errors(void **state)
{
    enum { M = 2, N = 3, K = 64 };
    qs_ctx *ctx = t_ctx();
    float w0[N * K], x[M * K], bias[N] = {0.5f, -1.0f, 2.0f};
    t_buf y = t_buf_new(M * N * 4);
    qs_matmul_params p;
    bweight o;
    t_rng r = {1};

    (void)state;
    fill(&r, w0, N * K, 0.05);
    fill(&r, x, M * K, 1.0);
    bweight_make(ctx, &specs[0], w0, N, K, &o);
    qs_matmul_params_init(&p);
    p.activations = QS_MATMUL_ACT_BF16;
    p.threshold = 6.0f; /* an outlier threshold needs int8 activations */
    assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y.p, M * N * 4),
                     QS_ERR_INVALID_ARG);
    assert_true(t_buf_untouched(&y));
    p.threshold = 0.0f;
    p.activations = QS_MATMUL_ACT_BF16 + 1;
    assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y.p, M * N * 4),
                     QS_ERR_INVALID_ARG);
    assert_true(t_buf_untouched(&y));
    p.activations = QS_MATMUL_ACT_BF16;
    assert_int_equal(qs_matmul(ctx, &p, x, QS_DTYPE_F32, M, K, &o.w, N, NULL, y.p, M * N * 4 - 1),
                     QS_ERR_BUFFER_TOO_SMALL);
    assert_true(t_buf_untouched(&y));
    /* K = 0: the bias alone, nothing of x or W read */
    qs_weight w = {0};
    w.kind = QS_WEIGHT_DENSE;
    w.dtype = QS_DTYPE_BF16;
    assert_int_equal(qs_matmul(ctx, &p, NULL, QS_DTYPE_F32, M, 0, &w, N, bias, y.p, M * N * 4),
                     QS_OK);
    for (int i = 0; i < M * N; i++)
        assert_int_equal(t_bits(((float *)y.p)[i]), t_bits(bias[i % N]));
    assert_true(t_buf_guards_ok(&y));
    bweight_free(&o);
    t_buf_free(&y);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bound),     cmocka_unit_test(test_exact_weights),
        cmocka_unit_test(test_paths),     cmocka_unit_test(test_nonfinite_x),
        cmocka_unit_test(test_scales),    cmocka_unit_test(test_nvfp4_infinite_scales),
        cmocka_unit_test(test_subnormal), cmocka_unit_test(test_dtypes_threads),
        cmocka_unit_test(test_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
