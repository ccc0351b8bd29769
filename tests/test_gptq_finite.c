/* SPDX-License-Identifier: MIT */
/*
 * Calibration data at the edges of the float range (include/qsparse/gptq.h, "finite"):
 * activations whose f32 products overflow still give a finite Hessian, equal to the double sums
 * (the chunk is summed in double); GPTQ and SparseGPT on it give a finite loss and weights as
 * good as round-to-nearest, not the NaN / zero weights an Inf Hessian gave; a Hessian whose
 * inverse factor leaves the float range, a merge past the double range, and a weight whose
 * error cannot be carried in float are QS_ERR_BAD_DATA / QS_ERR_OVERFLOW with every output
 * untouched; a weight of 0 rows is a valid empty call (no null pointer reaches memcpy).
 */
#include <float.h>

#include "common.h"
#include "qsparse/gptq.h"

#define K 32
#define R 8
#define T 64

/* The planes of one quantized tensor from the size queries, each filled with `fill`. */
struct planes {
    qs_qtensor q;
    uint8_t *buf[QS_PLANE_COUNT];
};

static void planes_new(const qs_quant_params *p, int64_t rows, int64_t cols, struct planes *o,
                       uint8_t fill)
{
    void **ptr[] = {&o->q.data, &o->q.scale, &o->q.zero_point, &o->q.nested_scale};
    int64_t *len[] = {&o->q.data_bytes, &o->q.scale_bytes, &o->q.zero_point_bytes,
                      &o->q.nested_scale_bytes};

    memset(o, 0, sizeof *o);
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++) {
        int64_t bytes;
        assert_int_equal(qs_quant_size(p, rows, cols, pl, &bytes), QS_OK);
        o->buf[pl] = bytes ? malloc((size_t)bytes) : NULL;
        if (bytes)
            memset(o->buf[pl], fill, (size_t)bytes);
        *ptr[pl] = o->buf[pl];
        *len[pl] = bytes;
    }
}

static void planes_free(struct planes *o)
{
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
        free(o->buf[pl]);
}

/* Every byte of every plane still `fill`. */
static void planes_untouched(const struct planes *o, uint8_t fill)
{
    const int64_t len[] = {o->q.data_bytes, o->q.scale_bytes, o->q.zero_point_bytes,
                           o->q.nested_scale_bytes};
    for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
        for (int64_t i = 0; i < len[pl]; i++)
            assert_int_equal(o->buf[pl][i], fill);
}

/* Activations of ordinary size with one huge entry per token in column 5: x[t][5] = big. */
static void acts_with_outlier(t_rng *rng, float *x, float big)
{
    for (int64_t t = 0; t < T; t++)
        for (int64_t j = 0; j < K; j++)
            x[t * K + j] = j == 5 ? big * (float)(1 + t % 3) : (float)t_normal(rng);
}

/* || W - deq(q) ||_F / || W ||_F for NF4 planes. */
static double rel_err(qs_ctx *ctx, const qs_quant_params *p, const struct planes *o,
                      const float *w)
{
    float v[R * K];
    double num = 0.0, den = 0.0;
    assert_int_equal(qs_dequantize(ctx, p, &o->q, R, K, v, QS_DTYPE_F32, sizeof v), QS_OK);
    for (int i = 0; i < R * K; i++) {
        num += ((double)w[i] - v[i]) * ((double)w[i] - v[i]);
        den += (double)w[i] * w[i];
    }
    return sqrt(num / den);
}

/* An activation of 1e30 squares past FLT_MAX: S must still be the (finite) double sums. */
static void test_hessian_stays_finite(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {7};
    float x[T * K];
    double got[K * K];
    qs_hessian *h = NULL;

    acts_with_outlier(&rng, x, 1e30f);
    assert_int_equal(qs_hessian_create(ctx, K, &h), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, T, K), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, h, got, K * K), QS_OK);
    for (int r = 0; r < K; r++)
        for (int c = r; c < K; c++) {
            double want = 0.0; /* exact products, summed in token order: the double path */
            for (int t = 0; t < T; t++)
                want += (double)x[t * K + r] * (double)x[t * K + c];
            if (got[r * K + c] != 2.0 * want) {
                print_error("H[%d][%d] = %.17g, want %.17g\n", r, c, got[r * K + c], 2.0 * want);
                fail();
            }
        }
    assert_true(got[5 * K + 5] > 1e61);

    /* the largest finite activations, 2^20 tokens of them in chunks: still finite */
    float *big = malloc((size_t)2048 * K * sizeof(float));
    for (int i = 0; i < 2048 * K; i++)
        big[i] = i % 2 ? FLT_MAX : -FLT_MAX;
    for (int rep = 0; rep < 4; rep++)
        assert_int_equal(qs_hessian_update(ctx, h, big, QS_DTYPE_F32, 2048, K), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, h, got, K * K), QS_OK);
    for (int i = 0; i < K * K; i++)
        assert_true(isfinite(got[i]));
    free(big);
    qs_hessian_destroy(h);
    qs_ctx_destroy(ctx);
}

/* GPTQ and SparseGPT on that Hessian: QS_OK with a finite loss and usable weights (the Inf
 * Hessian used to give QS_OK, a NaN loss and 98 % zero / 95 % NaN weights). */
static void test_gptq_on_huge_activations(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    t_rng rng = {11};
    float x[T * K], w[R * K], d[R * K];
    qs_hessian *h = NULL;
    qs_quant_params p;
    qs_gptq_params g;
    qs_sparsegpt_params sp;
    struct planes rtn, gq;
    double loss = -1.0;

    acts_with_outlier(&rng, x, 1e30f);
    for (int i = 0; i < R * K; i++)
        w[i] = (float)(0.05 * t_normal(&rng));
    assert_int_equal(qs_hessian_create(ctx, K, &h), QS_OK);
    assert_int_equal(qs_hessian_update(ctx, h, x, QS_DTYPE_F32, T, K), QS_OK);

    qs_quant_params_init(&p, QS_FORMAT_NF4);
    p.block_size = 32;
    planes_new(&p, R, K, &rtn, 0);
    planes_new(&p, R, K, &gq, 0);
    assert_int_equal(qs_quantize(ctx, &p, w, QS_DTYPE_F32, R, K, &rtn.q), QS_OK);
    qs_gptq_params_init(&g);
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, R, K, h, &gq.q, &loss), QS_OK);
    assert_true(isfinite(loss) && loss >= 0.0);
    double e_rtn = rel_err(ctx, &p, &rtn, w), e_gptq = rel_err(ctx, &p, &gq, w);
    print_message("NF4 relative weight error: RTN %.4f, GPTQ %.4f\n", e_rtn, e_gptq);
    assert_true(e_gptq < 2.0 * e_rtn && e_gptq < 0.3);

    qs_sparsegpt_params_init(&sp);
    loss = -1.0;
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, d, R * K, NULL, NULL, 0, &loss),
                     QS_OK);
    assert_true(isfinite(loss));
    int64_t kept = 0;
    for (int i = 0; i < R * K; i++) {
        assert_true(isfinite(d[i]));
        kept += d[i] != 0.0f;
    }
    assert_int_equal(kept, R * K / 2);
    assert_int_equal(qs_nm_check(ctx, d, QS_DTYPE_F32, R, K, 2, 4, 0, NULL), QS_OK);
    planes_free(&rtn);
    planes_free(&gq);
    qs_hessian_destroy(h);
    qs_ctx_destroy(ctx);
}

/* H = s I with s near either end of the double range factors in double, but U = I / sqrt(s)
 * has no float diagonal: QS_ERR_BAD_DATA, planes, w_out, meta and loss untouched. */
static void test_factor_out_of_float_range(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const double scales[] = {1e300, 1e-300};
    float w[R * K], wout[R * K];
    uint16_t meta[R * K / 16];
    qs_quant_params p, p8;
    qs_gptq_params g;
    qs_sparsegpt_params sp;
    double hm[K * K];

    for (int i = 0; i < R * K; i++)
        w[i] = (float)((i % 11) - 5) * 0.01f;
    qs_quant_params_init(&p, QS_FORMAT_NF4);
    p.block_size = 32;
    qs_quant_params_init(&p8, QS_FORMAT_INT8);
    qs_gptq_params_init(&g);
    qs_sparsegpt_params_init(&sp);
    for (size_t s = 0; s < sizeof scales / sizeof scales[0]; s++) {
        struct planes o;
        qs_hessian *h = NULL;
        double loss = -1.0;
        memset(hm, 0, sizeof hm);
        for (int i = 0; i < K; i++)
            hm[i * K + i] = scales[s];
        assert_int_equal(qs_hessian_from_matrix(ctx, hm, K, 1, &h), QS_OK);
        planes_new(&p, R, K, &o, T_CANARY);
        assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, R, K, h, &o.q, &loss), QS_ERR_BAD_DATA);
        assert_non_null(strstr(qs_ctx_last_error(ctx), "inverse factor"));
        planes_untouched(&o, T_CANARY);
        assert_true(loss == -1.0);

        planes_free(&o);

        /* SparseGPT alone, and jointly with INT8 (its planes hold the R x K/2 kept values) */
        memset(wout, T_CANARY, sizeof wout);
        memset(meta, T_CANARY, sizeof meta);
        planes_new(&p8, R, K / 2, &o, T_CANARY);
        assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, R, K, h, wout, R * K, NULL, NULL, 0,
                                      &loss), QS_ERR_BAD_DATA);
        assert_int_equal(qs_sparsegpt(ctx, &sp, &p8, w, R, K, h, wout, R * K, &o.q, meta,
                                      R * K / 16, &loss), QS_ERR_BAD_DATA);
        for (size_t i = 0; i < sizeof wout; i++)
            assert_int_equal(((uint8_t *)wout)[i], T_CANARY);
        for (size_t i = 0; i < sizeof meta; i++)
            assert_int_equal(((uint8_t *)meta)[i], T_CANARY);
        planes_untouched(&o, T_CANARY);
        assert_true(loss == -1.0);
        planes_free(&o);
        qs_hessian_destroy(h);
    }
    qs_ctx_destroy(ctx);
}

/* A weight whose range overflows float (asymmetric INT8 over +-3.3e38 has an Inf step): the
 * GPTQ loss is not finite, so the call fails and writes nothing. It used to return QS_OK with a
 * NaN loss. SparseGPT with joint INT8 as well. */
static void test_loss_must_be_finite(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float w[R * K], wout[R * K];
    uint16_t meta[R * K / 16];
    double hm[K * K];
    qs_quant_params p;
    qs_gptq_params g;
    qs_sparsegpt_params sp;
    qs_hessian *h = NULL;
    struct planes o;
    double loss = -1.0;

    for (int i = 0; i < R * K; i++)
        w[i] = (i % 2 ? -3.3e38f : 3.3e38f) * ((float)(1 + i % 5) / 5.0f);
    memset(hm, 0, sizeof hm);
    for (int i = 0; i < K; i++)
        hm[i * K + i] = 1.0;
    assert_int_equal(qs_hessian_from_matrix(ctx, hm, K, 1, &h), QS_OK);
    qs_quant_params_init(&p, QS_FORMAT_INT8);
    p.symmetric = 0;
    planes_new(&p, R, K, &o, T_CANARY);
    qs_gptq_params_init(&g);
    assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, R, K, h, &o.q, &loss), QS_ERR_BAD_DATA);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "loss is not finite"));
    planes_untouched(&o, T_CANARY);
    assert_true(loss == -1.0);
    planes_free(&o);

    qs_sparsegpt_params_init(&sp);
    planes_new(&p, R, K / 2, &o, T_CANARY);
    memset(wout, T_CANARY, sizeof wout);
    memset(meta, T_CANARY, sizeof meta);
    assert_int_equal(qs_sparsegpt(ctx, &sp, &p, w, R, K, h, wout, R * K, &o.q, meta, R * K / 16,
                                  &loss), QS_ERR_BAD_DATA);
    planes_untouched(&o, T_CANARY);
    for (size_t i = 0; i < sizeof wout; i++)
        assert_int_equal(((uint8_t *)wout)[i], T_CANARY);
    for (size_t i = 0; i < sizeof meta; i++)
        assert_int_equal(((uint8_t *)meta)[i], T_CANARY);
    assert_true(loss == -1.0);
    planes_free(&o);
    qs_hessian_destroy(h);
    qs_ctx_destroy(ctx);
}

/* H = 2 S near the double range: a merge whose H would pass DBL_MAX is refused, dst unchanged;
 * one that stays under it is done. */
static void test_merge_stays_finite(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    double hm[4] = {1e308, 5e307, 5e307, 1e308}, small[4] = {4e307, 0.0, 0.0, 4e307};
    double got[4], before[4];
    qs_hessian *a = NULL, *b = NULL, *c = NULL;
    int64_t tokens = -1;

    assert_int_equal(qs_hessian_from_matrix(ctx, hm, 2, 3, &a), QS_OK);
    assert_int_equal(qs_hessian_from_matrix(ctx, hm, 2, 4, &b), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, a, before, 4), QS_OK);
    assert_int_equal(qs_hessian_merge(ctx, a, b), QS_ERR_OVERFLOW);
    assert_non_null(strstr(qs_ctx_last_error(ctx), "nothing added"));
    assert_int_equal(qs_hessian_get(ctx, a, got, 4), QS_OK);
    assert_memory_equal(got, before, sizeof got);
    assert_int_equal(qs_hessian_info(a, NULL, &tokens), QS_OK);
    assert_int_equal(tokens, 3);

    assert_int_equal(qs_hessian_from_matrix(ctx, small, 2, 1, &c), QS_OK);
    assert_int_equal(qs_hessian_merge(ctx, c, c), QS_OK);
    assert_int_equal(qs_hessian_get(ctx, c, got, 4), QS_OK);
    assert_true(got[0] == 8e307 && got[3] == 8e307 && got[1] == 0.0);
    assert_int_equal(qs_hessian_merge(ctx, c, c), QS_OK); /* H = 1.6e308 */
    assert_int_equal(qs_hessian_merge(ctx, c, c), QS_ERR_OVERFLOW); /* 3.2e308 */
    assert_int_equal(qs_hessian_get(ctx, c, got, 4), QS_OK);
    assert_true(got[0] == 1.6e308);
    qs_hessian_destroy(a);
    qs_hessian_destroy(b);
    qs_hessian_destroy(c);
    qs_ctx_destroy(ctx);
}

/* 0 rows: every plane of the size queries is empty (NULL here); QS_OK, loss 0. */
static void test_zero_rows(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    static const int32_t formats[] = {QS_FORMAT_INT8, QS_FORMAT_NF4, QS_FORMAT_MXFP4,
                                      QS_FORMAT_NVFP4};
    double hm[K * K];
    float w[1] = {0.0f}, wout[1] = {7.0f};
    qs_gptq_params g;
    qs_sparsegpt_params sp;
    qs_hessian *h = NULL;

    memset(hm, 0, sizeof hm);
    for (int i = 0; i < K; i++)
        hm[i * K + i] = 1.0;
    assert_int_equal(qs_hessian_from_matrix(ctx, hm, K, 1, &h), QS_OK);
    qs_gptq_params_init(&g);
    for (size_t f = 0; f < sizeof formats / sizeof formats[0]; f++) {
        qs_quant_params p;
        struct planes o;
        double loss = -1.0;
        qs_quant_params_init(&p, formats[f]);
        if (formats[f] == QS_FORMAT_NF4)
            p.block_size = 32;
        planes_new(&p, 0, K, &o, 0);
        assert_int_equal(qs_gptq_quantize(ctx, &g, &p, w, 0, K, h, &o.q, &loss), QS_OK);
        assert_true(loss == 0.0);
        planes_free(&o);
    }
    qs_sparsegpt_params_init(&sp);
    assert_int_equal(qs_sparsegpt(ctx, &sp, NULL, w, 0, K, h, wout, 0, NULL, NULL, 0, NULL),
                     QS_OK);
    assert_true(wout[0] == 7.0f);
    qs_hessian_destroy(h);
    qs_ctx_destroy(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_hessian_stays_finite),
        cmocka_unit_test(test_gptq_on_huge_activations),
        cmocka_unit_test(test_factor_out_of_float_range),
        cmocka_unit_test(test_loss_must_be_finite),
        cmocka_unit_test(test_merge_stays_finite),
        cmocka_unit_test(test_zero_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
