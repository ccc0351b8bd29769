/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of OCP FP8 E4M3 ("fn") and E5M2 through the public API (docs/formats.md §10): every
 * row of both test-vector tables (saturating column), the value of all 256 codes of each format,
 * encode(decode(c)) == c, round-to-nearest-even at every midpoint between adjacent codes (checked
 * against the brute-force nearest-value search of quant_helpers.h), the per-tensor scale from the
 * data (fl(amax / max), amax 0 -> 1.0) or given by the caller, the division x / scale (not a
 * multiply by the reciprocal), odd shapes and f16/bf16 inputs and outputs.
 */
#include "common.h"
#include "quant_helpers.h"

/* ---- the formats, restated from §10 --------------------------------------------------------- */

static float e5m2_value(int c)
{
    int e = (c >> 2) & 0x1F, m = c & 3;
    float v;
    if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = e == 0 ? (float)ldexp(m, -16) : (float)ldexp(4 + m, e - 17);
    return (c & 0x80) ? -v : v;
}

/* Saturating RNE encode by brute force: the nearest finite code, ties to the even code, NaN ->
 * 0x7F | sign, +-Inf -> +-max. `maxc` is the largest finite positive code. */
static uint8_t nearest_code(float x, int maxc, float (*value)(int))
{
    if (x != x)
        return (uint8_t)(((t_bits(x) >> 24) & 0x80) | 0x7F);
    return (uint8_t)nearest(x, maxc, 0x80, value);
}

struct fp8_fmt {
    int32_t format;
    int maxc;
    float max;
    float (*value)(int);
};

static const struct fp8_fmt fmts[2] = {
    {QS_FORMAT_FP8_E4M3, 0x7E, 448.0f, e4m3_value},
    {QS_FORMAT_FP8_E5M2, 0x7B, 57344.0f, e5m2_value},
};

/* Quantize n values with a given scale (0: from the data) and compare codes and stored scale. */
static void check_codes(qs_ctx *ctx, int32_t format, float scale, const float *x,
                        const uint8_t *want, int64_t n, float want_scale)
{
    qs_quant_params p = params(format);
    tq t;

    p.scale = scale;
    quant(ctx, &p, x, QS_DTYPE_F32, 1, n, &t);
    assert_int_equal(t.q.data_bytes, n);
    assert_int_equal(t.q.scale_bytes, 4);
    T_ASSERT_BYTES("fp8 codes", t.q.data, want, (size_t)n);
    assert_int_equal(t_bits(*(float *)t.q.scale), t_bits(want_scale));
    tq_free(&t);
}

/* ---- tests --------------------------------------------------------------------------------- */

/* The §10 test-vector tables, saturating column, with scale 1. */
static void test_fp8_spec_tables(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float x4[] = {1.0f,      0.1f, 240.0f, 448.0f, 464.0f,   464.00003f,   INFINITY,
                        -INFINITY, NAN,  -NAN,   -0.0f,  0x1p-10f, 3 * 0x1p-10f, -0x1p-7f};
    const uint8_t w4[] = {0x38, 0x1D, 0x77, 0x7E, 0x7E, 0x7E, 0x7E,
                          0xFE, 0x7F, 0xFF, 0x80, 0x00, 0x02, 0x84};
    const float x5[] = {1.0f,     0.1f, 57344.0f, 61439.996f, 61440.0f, 65504.0f,
                        INFINITY, NAN,  -NAN,     -0.0f,      0x1p-17f, 3 * 0x1p-17f};
    const uint8_t w5[] = {0x3C, 0x2E, 0x7B, 0x7B, 0x7B, 0x7B, 0x7B, 0x7F, 0xFF, 0x80, 0x00, 0x02};

    assert_true(t_bits(NAN) >> 31 == 0 && t_bits(-NAN) >> 31 == 1);
    check_codes(ctx, QS_FORMAT_FP8_E4M3, 1.0f, x4, w4, sizeof w4, 1.0f);
    check_codes(ctx, QS_FORMAT_FP8_E5M2, 1.0f, x5, w5, sizeof w5, 1.0f);
    qs_ctx_destroy(ctx);
}

/* Every code decodes to its §10 value (through qs_dequantize and qs_codebook), and every code
 * that is not NaN (or E5M2 Inf) encodes back to itself. */
static void test_fp8_all_codes(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();

    for (int f = 0; f < 2; f++) {
        qs_quant_params p = params(fmts[f].format);
        uint8_t codes[256];
        float one = 1.0f, got[256], book[256], want[256];
        qs_qtensor q;

        for (int c = 0; c < 256; c++) {
            codes[c] = (uint8_t)c;
            want[c] = fmts[f].value(c);
        }
        memset(&q, 0, sizeof q);
        q.data = codes;
        q.data_bytes = 256;
        q.scale = &one;
        q.scale_bytes = 4;
        assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 256, got, QS_DTYPE_F32, sizeof got), QS_OK);
        assert_int_equal(qs_codebook(f ? QS_CODEBOOK_E5M2 : QS_CODEBOOK_E4M3, book, 256), QS_OK);
        for (int c = 0; c < 256; c++) {
            if (want[c] != want[c]) {
                assert_true(got[c] != got[c] && book[c] != book[c]);
                continue;
            }
            assert_int_equal(t_bits(got[c]), t_bits(want[c]));
            assert_int_equal(t_bits(book[c]), t_bits(want[c]));
        }
        assert_int_equal(t_bits(want[fmts[f].maxc]), t_bits(fmts[f].max));

        /* encode(decode(c)) == c */
        tq t;
        p.scale = 1.0f;
        quant(ctx, &p, want, QS_DTYPE_F32, 1, 256, &t);
        const uint8_t *enc = t.q.data;
        for (int c = 0; c < 256; c++) {
            int special = want[c] != want[c] || isinf(want[c]);
            if (!special)
                assert_int_equal(enc[c], c);
            else if (want[c] != want[c])
                assert_int_equal(enc[c], (c & 0x80) | 0x7F);
            else
                assert_int_equal(enc[c], (c & 0x80) | fmts[f].maxc);
        }
        tq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* RNE at every midpoint and one ulp either side, over the whole range, plus random values at all
 * magnitudes and the adversarial list, against the brute-force encoder. */
static void test_fp8_rounding(void **state)
{
    (void)state;
    enum { N = 20000 };
    qs_ctx *ctx = t_ctx();
    t_rng rng = {1010};
    float *x = malloc(N * sizeof *x);
    uint8_t *want = malloc(N);

    assert_non_null(x);
    for (int f = 0; f < 2; f++) {
        int64_t n = 0;
        for (int c = 0; c < fmts[f].maxc; c++) {
            float m = (float)(((double)fmts[f].value(c) + fmts[f].value(c + 1)) / 2);
            float s = (t_next(&rng) & 1) ? -1.0f : 1.0f;
            x[n++] = s * m;
            x[n++] = s * nextafterf(m, 0.0f);
            x[n++] = s * nextafterf(m, INFINITY);
        }
        /* above the top code: the rounding boundary is max + half a step; all saturate */
        for (int k = 0; k < 64; k++)
            x[n++] = (k & 1 ? -1.0f : 1.0f) * fmts[f].max * (1.0f + (float)k / 16.0f);
        for (int k = 0; k < T_NSPECIAL; k++)
            x[n++] = t_special[k];
        while (n < N)
            x[n++] = (float)(t_normal(&rng) * ldexp(1.0, (int)(t_next(&rng) % 60) - 30));
        for (int64_t i = 0; i < N; i++)
            want[i] = nearest_code(x[i], fmts[f].maxc, fmts[f].value);
        check_codes(ctx, fmts[f].format, 1.0f, x, want, N, 1.0f);
    }
    free(x);
    free(want);
    qs_ctx_destroy(ctx);
}

/* Scale from the data: fl(amax / max); amax 0 -> 1.0; a given scale is used as is. */
static void test_fp8_scale(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    const float x[4] = {1.0f, -3.0f, 2.5f, 0.001f};
    const uint8_t w4[4] = {0x71, 0xFE, 0x7C, 0x22};
    const uint8_t w5[4] = {0x75, 0xFB, 0x7A, 0x4D};
    const float zeros[3] = {0.0f, -0.0f, 0.0f};
    const uint8_t wz[3] = {0x00, 0x80, 0x00};

    check_codes(ctx, QS_FORMAT_FP8_E4M3, 0.0f, x, w4, 4, t_f32_from_bits(0x3bdb6db7u));
    check_codes(ctx, QS_FORMAT_FP8_E5M2, 0.0f, x, w5, 4, t_f32_from_bits(0x385b6db7u));
    check_codes(ctx, QS_FORMAT_FP8_E4M3, 0.0f, zeros, wz, 3, 1.0f);
    check_codes(ctx, QS_FORMAT_FP8_E5M2, 0.0f, zeros, wz, 3, 1.0f);
    /* NaN is ignored by the amax: the scale comes from 2.0 */
    {
        const float xn[3] = {NAN, 2.0f, -1.0f};
        const uint8_t wn[3] = {0x7F, 0x7E, 0xF6}; /* -1 / (2/448) = -224 */
        check_codes(ctx, QS_FORMAT_FP8_E4M3, 0.0f, xn, wn, 3, 2.0f / 448.0f);
    }
    /* a given scale: 1 / 0.5 = 2.0 -> 0x40, -0.75 / 0.5 = -1.5 -> 0xBC */
    {
        const float xg[3] = {1.0f, -0.75f, 1000.0f};
        const uint8_t wg4[3] = {0x40, 0xBC, 0x7E};
        const uint8_t wg5[3] = {0x40, 0xBE, 0x68}; /* 2000 -> 2048 */
        check_codes(ctx, QS_FORMAT_FP8_E4M3, 0.5f, xg, wg4, 3, 0.5f);
        check_codes(ctx, QS_FORMAT_FP8_E5M2, 0.5f, xg, wg5, 3, 0.5f);
    }
    /* q = cvt(fl(x / scale)): with amax 3fa17c82 the element 37a17c81 gives 0x03; multiplying by
     * fl(1 / scale) would give 0x04 */
    {
        const float xd[2] = {t_f32_from_bits(0x3fa17c82u), t_f32_from_bits(0x37a17c81u)};
        const uint8_t wd[2] = {0x7E, 0x03};
        check_codes(ctx, QS_FORMAT_FP8_E4M3, 0.0f, xd, wd, 2, xd[0] / 448.0f);
    }
    /* an invalid given scale is an argument error */
    {
        static const float bad[] = {-1.0f, NAN, INFINITY, -0.0f};
        qs_quant_params p = params(QS_FORMAT_FP8_E4M3);
        int64_t bytes;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            p.scale = bad[i];
            if (bad[i] == 0.0f) /* -0.0 == 0: "from the data" */
                assert_int_equal(qs_quant_size(&p, 1, 4, QS_PLANE_DATA, &bytes), QS_OK);
            else
                assert_int_equal(qs_quant_size(&p, 1, 4, QS_PLANE_DATA, &bytes),
                                 QS_ERR_INVALID_ARG);
        }
    }
    qs_ctx_destroy(ctx);
}

/* Dequantize: fl(value(q) * scale), with f16 / bf16 outputs rounded once from it; shapes with
 * odd cols and 1-D; f16 / bf16 inputs give the planes of their f32 widening. */
static void test_fp8_roundtrip_dtypes(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{1, 1}, {1, 4097}, {3, 7}, {17, 33}, {2, 4096}};
    qs_ctx *ctx = t_ctx();
    t_rng rng = {77};

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        /* inputs end at a guard page: an over-read faults */
        t_page_buf xp = t_page_buf_new((size_t)n * 4), hp = t_page_buf_new((size_t)n * 2);
        float *x = xp.p, *xw = malloc((size_t)n * 4);
        uint16_t *h = malloc((size_t)n * 2), *h2 = hp.p;
        assert_non_null(x);
        t_fill_mixed(&rng, x, n, 0.0);
        for (int f = 0; f < 2; f++) {
            qs_quant_params p = params(fmts[f].format);
            tq t;
            quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
            float scale = *(float *)t.q.scale;
            const uint8_t *codes = t.q.data;
            t_buf o = dequant(ctx, &p, &t, rows, cols, QS_DTYPE_F32);
            for (int64_t i = 0; i < n; i++) {
                float want = fmts[f].value(codes[i]) * scale;
                if (t_bits(((float *)o.p)[i]) != t_bits(want)) {
                    print_error("element %lld code %02x: got %a want %a\n", (long long)i, codes[i],
                                (double)((float *)o.p)[i], (double)want);
                    fail();
                }
                /* every code is the brute-force encoding of x / scale */
                assert_int_equal(codes[i], nearest_code(x[i] / scale, fmts[f].maxc, fmts[f].value));
            }
            for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
                assert_dequant_16(ctx, "fp8 16-bit output", &p, &t, rows, cols, dt, o.p, h);

                tq t16, tw;
                round_16(ctx, x, n, dt, h2, xw);
                quant(ctx, &p, h2, dt, rows, cols, &t16);
                quant(ctx, &p, xw, QS_DTYPE_F32, rows, cols, &tw);
                T_ASSERT_BYTES("fp8 16-bit input codes", t16.q.data, tw.q.data, (size_t)n);
                T_ASSERT_BYTES("fp8 16-bit input scale", t16.q.scale, tw.q.scale, 4);
                tq_free(&t16);
                tq_free(&tw);
            }
            t_buf_free(&o);
            tq_free(&t);
        }
        t_page_buf_free(&xp);
        free(xw);
        free(h);
        t_page_buf_free(&hp);
    }
    qs_ctx_destroy(ctx);
}

/* The brute-force encoder itself distinguishes a tie from its neighbours (so the checks above
 * can fail): 2^-10 is a tie between 0 and 2^-9 and goes to the even code 0. */
static void test_fp8_oracle_negative(void **state)
{
    (void)state;
    assert_int_equal(nearest_code(0x1p-10f, 0x7E, e4m3_value), 0x00);
    assert_int_equal(nearest_code(nextafterf(0x1p-10f, 1.0f), 0x7E, e4m3_value), 0x01);
    assert_int_equal(nearest_code(3 * 0x1p-10f, 0x7E, e4m3_value), 0x02);
    assert_int_equal(nearest_code(-465.0f, 0x7E, e4m3_value), 0xFE);
    assert_int_equal(nearest_code(-NAN, 0x7B, e5m2_value), 0xFF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp8_spec_tables),      cmocka_unit_test(test_fp8_all_codes),
        cmocka_unit_test(test_fp8_rounding),         cmocka_unit_test(test_fp8_scale),
        cmocka_unit_test(test_fp8_roundtrip_dtypes), cmocka_unit_test(test_fp8_oracle_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
