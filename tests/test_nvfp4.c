/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of NVIDIA NVFP4 through the public API (docs/formats.md §11, §14): the §14 vector
 * table, the decode order (den = fl(value(S) * s_global) first; P = 0xB, S = 0x6B, s_global =
 * 3cd2ef15 decodes to c059868d), all-zero blocks (scale 0x38), the 2^-9 floor of the block scale,
 * NaN elements, the Inf rules with an automatic and with a given s_global, an s_global that
 * underflows (-> 1.0) and a subnormal given s_global (den = 0 -> codes 0), the row layout with odd
 * cols and partial blocks, 1-D tensors and f16/bf16 inputs and outputs; random tensors against
 * an encoder restated here from the spec (brute-force nearest values, ties to the even code).
 */
#include "common.h"
#include "quant_helpers.h"

/* ---- the format, restated from §10, §11, §14 ------------------------------------------------- */

/* NaN gives `nan_code`: NVFP4 has no NaN element code, and its scale uses E4M3 0x7F. */
static int nearest_nan(float x, int maxc, int sbit, int nan_code, float (*value)(int))
{
    return x != x ? nan_code : nearest(x, maxc, sbit, value);
}

/* amax with every NaN ignored, signaling ones too (glibc's fmaxf returns NaN for those). */
static float absmax_step(float acc, float v)
{
    float a = fabsf(v);
    return a > acc ? a : acc;
}

static float nv_global(const float *x, int64_t n, float given)
{
    float amax = 0.0f, s;
    if (given > 0.0f)
        return given;
    for (int64_t i = 0; i < n; i++)
        amax = absmax_step(amax, x[i]);
    s = amax / 2688.0f;
    return s == 0.0f ? 1.0f : s;
}

/* Scales [rows][ceil(cols/16)] and data [rows][ceil(cols/2)], low nibble first. */
static void nv_tensor(const float *x, int64_t rows, int64_t cols, float sg, uint8_t *scales,
                      uint8_t *data)
{
    int64_t spr = (cols + 15) / 16, rb = (cols + 1) / 2;

    memset(data, 0, (size_t)(rows * rb));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t b = 0; b < spr; b++) {
            const float *v = x + r * cols + b * 16;
            int64_t len = cols - b * 16 < 16 ? cols - b * 16 : 16;
            float amax = 0.0f, s;
            int code;
            for (int64_t i = 0; i < len; i++)
                amax = absmax_step(amax, v[i]);
            s = amax / (6.0f * sg);
            if (s == 0.0f)
                code = 0x38;
            else
                code = nearest_nan(s < 0x1p-9f ? 0x1p-9f : s, 0x7E, 0x80, 0x7F, e4m3_value);
            scales[r * spr + b] = (uint8_t)code;
            float den = e4m3_value(code) * sg;
            for (int64_t i = 0; i < len; i++) {
                int64_t c = b * 16 + i;
                int p = den == 0.0f ? 0 : nearest_nan(v[i] / den, 7, 0x8, 0x0, e2m1_value);
                data[r * rb + c / 2] |= (uint8_t)(p << (4 * (c & 1)));
            }
        }
    }
}

/* Quantize and compare every plane and the stored s_global. */
static void check_nv(qs_ctx *ctx, float given, const float *x, int64_t rows, int64_t cols,
                     const uint8_t *want_scales, const uint8_t *want_data, float want_sg)
{
    qs_quant_params p = params(QS_FORMAT_NVFP4);
    tq t;

    p.scale = given;
    quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
    assert_int_equal(t.q.scale_bytes, rows * ((cols + 15) / 16));
    assert_int_equal(t.q.data_bytes, rows * ((cols + 1) / 2));
    T_ASSERT_BYTES("nvfp4 scales", t.q.scale, want_scales, (size_t)t.q.scale_bytes);
    T_ASSERT_BYTES("nvfp4 data", t.q.data, want_data, (size_t)t.q.data_bytes);
    assert_int_equal(t_bits(t.q.global_scale), t_bits(want_sg));
    tq_free(&t);
}

/* ---- tests --------------------------------------------------------------------------------- */

/* The §14 table. Rows of two blocks; the tensor amax sits in a second block. */
static void test_nvfp4_vectors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[2][32];
    uint8_t d[2][16];

    /* tensor amax 2688 -> s_global 1.0: [6, -3, 0.7, 1.1] -> 38, codes 7 D 1 2; the amax block
     * -> 448 = 7E, code 7; an all-zero block -> 38; [1e-3, -2e-3] -> S 3.3e-4 raised to 2^-9 */
    memset(x, 0, sizeof x);
    memset(d, 0, sizeof d);
    x[0][0] = 6.0f, x[0][1] = -3.0f, x[0][2] = 0.7f, x[0][3] = 1.1f;
    x[0][16] = 2688.0f;
    x[1][16] = 1e-3f, x[1][17] = -2e-3f;
    d[0][0] = 0xD7, d[0][1] = 0x21, d[0][8] = 0x07, d[1][8] = 0xA1;
    {
        const uint8_t s[4] = {0x38, 0x7E, 0x38, 0x01};
        check_nv(ctx, 0.0f, &x[0][0], 2, 32, s, &d[0][0], 1.0f);
    }
    /* tensor amax 10 -> s_global 3b73cf3d; [1.3, -0.4, 0.05, 0.9]: S = 58.24 -> 60 (0x67),
     * codes 7 C 0 6 */
    memset(x, 0, sizeof x);
    memset(d, 0, sizeof d);
    x[0][0] = 1.3f, x[0][1] = -0.4f, x[0][2] = 0.05f, x[0][3] = 0.9f;
    x[0][16] = 10.0f;
    d[0][0] = 0xC7, d[0][1] = 0x60, d[0][8] = 0x07;
    {
        const uint8_t s[2] = {0x67, 0x7E};
        check_nv(ctx, 0.0f, &x[0][0], 1, 32, s, &d[0][0], t_f32_from_bits(0x3b73cf3du));
    }
    /* decode of the 2688 tensor: 1e-3 -> 2^-10, -2e-3 -> -2^-9 */
    {
        qs_quant_params p = params(QS_FORMAT_NVFP4);
        float y[2][32];
        memset(y, 0, sizeof y);
        y[0][16] = 2688.0f;
        y[1][0] = 1e-3f, y[1][1] = -2e-3f;
        t_buf o = quant_dequant_f32(ctx, &p, y, 2, 32);
        const float *z = o.p;
        assert_true(z[16] == 2688.0f && z[32] == 0x1p-10f && z[33] == -0x1p-9f);
        t_buf_free(&o);
    }
    qs_ctx_destroy(ctx);
}

/* Decode order: v = fl(value(P) * fl(value(S) * s_global)); the other order gives c059868e.
 * The sign bit of the scale byte is ignored by readers. */
static void test_nvfp4_decode_order(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_NVFP4);
    uint8_t data[9] = {0xBB, 0, 0, 0, 0, 0, 0, 0, 0x0B}, scales[2] = {0x6B, 0xEB};
    float out[17];
    qs_qtensor q;

    memset(&q, 0, sizeof q);
    q.data = data, q.data_bytes = 9, q.scale = scales, q.scale_bytes = 2;
    q.global_scale = t_f32_from_bits(0x3cd2ef15u);
    assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 17, out, QS_DTYPE_F32, sizeof out), QS_OK);
    assert_int_equal(t_bits(out[0]), 0xc059868du);
    assert_int_equal(t_bits(out[1]), 0xc059868du);
    assert_int_equal(t_bits(out[2]), 0u);
    assert_int_equal(t_bits(out[16]), 0xc059868du);
    {
        float wrong = (-1.5f * 88.0f) * q.global_scale;
        assert_int_equal(t_bits(wrong), 0xc059868eu); /* the order matters for this input */
    }
    /* f16 and bf16 outputs are the f32 values rounded once */
    uint16_t h[17], hc[17];
    for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
        assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 17, h, dt, sizeof h), QS_OK);
        assert_int_equal(qs_convert(ctx, out, QS_DTYPE_F32, hc, dt, 17, sizeof hc), QS_OK);
        T_ASSERT_BYTES("nvfp4 16-bit output", h, hc, sizeof h);
    }
    qs_ctx_destroy(ctx);
}

/* NaN elements are ignored by both amaxes and encode as 0; ±Inf with an automatic s_global makes
 * it +Inf (finite blocks 0x38 with codes ±0, the Inf block 0x7F with codes 0, everything decodes
 * to NaN); with a given finite s_global the Inf block saturates to 0x7E and Inf to ±6. */
static void test_nvfp4_nonfinite(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[32];
    uint8_t d[16];

    memset(x, 0, sizeof x);
    x[0] = NAN, x[1] = 3.0f, x[2] = -NAN;
    memset(d, 0, sizeof d);
    d[0] = 0x70; /* S = 0.5 (0x30), den 0.5: NaN -> 0, 3 -> 6 (7) */
    {
        const uint8_t s[1] = {0x30};
        check_nv(ctx, 1.0f, x, 1, 16, s, d, 1.0f);
    }

    memset(x, 0, sizeof x);
    x[0] = 1.0f, x[1] = -2.0f;
    x[16] = INFINITY, x[17] = 3.0f, x[18] = -1.0f;
    memset(d, 0, sizeof d);
    d[0] = 0x80; /* 1/Inf = +0, -2/Inf = -0 */
    {
        const uint8_t s[2] = {0x38, 0x7F};
        check_nv(ctx, 0.0f, x, 1, 32, s, d, INFINITY);
        qs_quant_params p = params(QS_FORMAT_NVFP4);
        t_buf o = quant_dequant_f32(ctx, &p, x, 1, 32);
        for (int i = 0; i < 32; i++)
            assert_true(isnan(((float *)o.p)[i]));
        t_buf_free(&o);
    }
    /* given s_global 1: S = 2/6 -> 0.34375 (0x2B): 1 -> 3.0 (5), -2 -> -6 (F);
     * Inf block: S = Inf -> 0x7E, den 448: Inf -> 6 (7), 3 -> 0, -1 -> -0 (8) */
    memset(d, 0, sizeof d);
    d[0] = 0xF5, d[8] = 0x07, d[9] = 0x08;
    {
        const uint8_t s[2] = {0x2B, 0x7E};
        check_nv(ctx, 1.0f, x, 1, 32, s, d, 1.0f);
    }
    x[16] = -INFINITY;
    d[8] = 0x0F;
    {
        const uint8_t s[2] = {0x2B, 0x7E};
        check_nv(ctx, 1.0f, x, 1, 32, s, d, 1.0f);
    }
    qs_ctx_destroy(ctx);
}

/* s_global rules: a quotient that underflows gives 1.0; a given value is stored as is; a
 * subnormal given value can make den = 0, and then every code of the block is 0. */
static void test_nvfp4_global_scale(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[16] = {0};
    uint8_t d[8] = {0};

    x[0] = 1e-42f; /* amax / 2688 underflows to 0 -> s_global 1; S raised to 2^-9 */
    {
        const uint8_t s[1] = {0x01};
        check_nv(ctx, 0.0f, x, 1, 16, s, d, 1.0f);
    }
    x[0] = 0.0f; /* all zero: s_global 1, scale 0x38 */
    {
        const uint8_t s[1] = {0x38};
        check_nv(ctx, 0.0f, x, 1, 16, s, d, 1.0f);
    }
    /* given 0.5: [3, -1.5] -> S = 1 (0x38), den 0.5: 6 (7), -3 (D) */
    x[0] = 3.0f, x[1] = -1.5f;
    d[0] = 0xD7;
    {
        const uint8_t s[1] = {0x38};
        check_nv(ctx, 0.5f, x, 1, 16, s, d, 0.5f);
    }
    /* given 2^-149: S = fl(2^-149 / fl(6 * 2^-149)) = 1/6 -> 0.171875 (0x23); den underflows to
     * 0, so the codes are all 0 (even for the negative element) */
    x[0] = 0x1p-149f, x[1] = -0x1p-149f;
    d[0] = 0x00;
    {
        const uint8_t s[1] = {0x23};
        check_nv(ctx, 0x1p-149f, x, 1, 16, s, d, 0x1p-149f);
    }
    /* P = E2M1(fl(v / den)), a division: with s_global 3f4e2173 and block amax 44663b07
     * (S = 190.6 -> 0x74, den = 154.598), v = 438745f3 gives exactly 1.75, a tie -> 2.0 (4);
     * multiplying by fl(1 / den) gives 1.7499999 -> 1.5 (3) */
    x[0] = t_f32_from_bits(0x438745f3u), x[1] = t_f32_from_bits(0x44663b07u);
    x[3] = x[0]; /* the tie in both nibbles */
    d[0] = 0x74, d[1] = 0x40;
    {
        const uint8_t s[1] = {0x74};
        const float sg = t_f32_from_bits(0x3f4e2173u);
        check_nv(ctx, sg, x, 1, 16, s, d, sg);
    }
    /* an invalid given s_global is an argument error */
    {
        qs_quant_params p = params(QS_FORMAT_NVFP4);
        tq t;
        tq_new(&t, &p, 1, 16);
        p.scale = -1.0f;
        assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 16, &t.q), QS_ERR_INVALID_ARG);
        p.scale = INFINITY;
        assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 16, &t.q), QS_ERR_INVALID_ARG);
        p.scale = NAN;
        assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 16, &t.q), QS_ERR_INVALID_ARG);
        for (int i = 0; i < QS_PLANE_COUNT; i++)
            assert_true(t_buf_untouched(&t.plane[i]));
        assert_int_equal(t_bits(t.q.global_scale), 0);
        tq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

/* Row layout: blocks of 16 never span rows; odd cols leave a 0 high nibble at each row's end. */
static void test_nvfp4_layout(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[3][17];
    uint8_t s[6], d[3][9];

    memset(x, 0, sizeof x);
    for (int r = 0; r < 3; r++) {
        x[r][0] = 6.0f * (float)(r + 1);
        x[r][16] = -1.0f; /* alone in its block: S = 1/(6 s_global), element -6 */
    }
    /* s_global = 18 / 2688; block amax 6, 12, 18 */
    const float sg = 18.0f / 2688.0f;
    nv_tensor(&x[0][0], 3, 17, sg, s, &d[0][0]);
    for (int r = 0; r < 3; r++) {
        assert_int_equal(d[r][8], 0x0F); /* -6 in the low nibble, 0 high nibble */
        assert_int_equal(d[r][0] & 0xF, 0x7);
    }
    check_nv(ctx, 0.0f, &x[0][0], 3, 17, s, &d[0][0], sg);
    qs_ctx_destroy(ctx);
}

/* Random tensors against the restated encoder, automatic and given s_global, f32/f16/bf16 in and
 * out, with the adversarial values salted in (some tensors hold Inf, so s_global is +Inf). */
static void test_nvfp4_random(void **state)
{
    (void)state;
    /* {5, 64} and {3, 2080}: whole blocks per row, so the drivers run the rows as one (a span of
     * 4096 ends inside row 1) */
    static const int64_t shapes[][2] = {{1, 1},    {1, 17}, {3, 15},   {5, 64},
                                        {2, 4097}, {7, 33}, {1, 5000}, {3, 2080}};
    qs_ctx *ctx = t_ctx();
    t_rng rng = {1616};

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        int64_t ns = rows * ((cols + 15) / 16), nd = rows * ((cols + 1) / 2);
        /* inputs end at a guard page: an over-read faults */
        t_page_buf xp = t_page_buf_new((size_t)n * 4), hp = t_page_buf_new((size_t)n * 2);
        float *x = xp.p, *xw = malloc((size_t)n * 4);
        uint8_t *ws = malloc((size_t)ns), *wd = malloc((size_t)nd);
        uint16_t *h = hp.p;
        assert_non_null(x);
        t_fill_mixed(&rng, x, n, si % 3 == 1 ? 0.002 : 0.0);
        for (int given = 0; given < 2; given++) {
            qs_quant_params p = params(QS_FORMAT_NVFP4);
            p.scale = given ? 0.037f : 0.0f;
            float sg = nv_global(x, n, p.scale);
            nv_tensor(x, rows, cols, sg, ws, wd);
            check_nv(ctx, p.scale, x, rows, cols, ws, wd, sg);

            tq t;
            quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
            t_buf o = dequant(ctx, &p, &t, rows, cols, QS_DTYPE_F32);
            for (int64_t r = 0; r < rows; r++) {
                for (int64_t c = 0; c < cols; c++) {
                    int code = (wd[r * ((cols + 1) / 2) + c / 2] >> (4 * (c & 1))) & 15;
                    float den = e4m3_value(ws[r * ((cols + 15) / 16) + c / 16]) * sg;
                    float want = e2m1_value(code) * den;
                    float got = ((float *)o.p)[r * cols + c];
                    assert_decoded("nvfp4 decode", r, c, got, want);
                }
            }
            for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
                assert_dequant_16(ctx, "nvfp4 16-bit output", &p, &t, rows, cols, dt, o.p, h);
                round_16(ctx, x, n, dt, h, xw);
                float sgw = nv_global(xw, n, p.scale);
                nv_tensor(xw, rows, cols, sgw, ws, wd);
                tq t16;
                quant(ctx, &p, h, dt, rows, cols, &t16);
                T_ASSERT_BYTES("nvfp4 16-bit input scales", t16.q.scale, ws, (size_t)ns);
                T_ASSERT_BYTES("nvfp4 16-bit input data", t16.q.data, wd, (size_t)nd);
                assert_int_equal(t_bits(t16.q.global_scale), t_bits(sgw));
                tq_free(&t16);
                nv_tensor(x, rows, cols, sg, ws, wd);
            }
            t_buf_free(&o);
            tq_free(&t);
        }
        t_page_buf_free(&xp);
        free(xw);
        free(ws);
        free(wd);
        t_page_buf_free(&hp);
    }
    qs_ctx_destroy(ctx);
}

/* The restated encoder can fail: a NaN block scale, the 2^-9 floor and E2M1 ties. */
static void test_nvfp4_oracle_negative(void **state)
{
    (void)state;
    assert_int_equal(nearest_nan(NAN, 0x7E, 0x80, 0x7F, e4m3_value), 0x7F);
    assert_int_equal(nearest_nan(-NAN, 7, 0x8, 0x0, e2m1_value), 0x0);
    assert_int_equal(nearest_nan(2.5f, 7, 0x8, 0x0, e2m1_value), 0x4);
    assert_int_equal(nearest_nan(nextafterf(2.5f, 3.0f), 7, 0x8, 0x0, e2m1_value), 0x5);
    assert_int_equal(nearest_nan(-7.0f, 7, 0x8, 0x0, e2m1_value), 0xF);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nvfp4_vectors),         cmocka_unit_test(test_nvfp4_decode_order),
        cmocka_unit_test(test_nvfp4_nonfinite),       cmocka_unit_test(test_nvfp4_global_scale),
        cmocka_unit_test(test_nvfp4_layout),          cmocka_unit_test(test_nvfp4_random),
        cmocka_unit_test(test_nvfp4_oracle_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
