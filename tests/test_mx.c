/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of OCP Microscaling MXFP4 and MXFP8 through the public API (docs/formats.md §11, §12,
 * §13): the §13 vector table under FLOOR and RCEIL scale rounding, the [2, 48] layout example
 * (blocks never span rows), an amax just below a power of two (7.9999995: the exponent comes from
 * the bits, not from log2f), subnormal amax, NaN/Inf blocks (scale 0xFF, codes 0), the E8M0
 * decode including 0x00 = 2^-127, MXFP8 vectors, and random tensors with odd and partial blocks,
 * 1-D tensors and f16/bf16 inputs and outputs against an encoder restated here from the spec
 * (brute-force nearest element value, ties to the even code).
 */
#include "common.h"
#include "quant_helpers.h"

/* ---- the formats, restated from §10, §11, §12 ------------------------------------------------ */

struct mx_fmt {
    int32_t format;
    int emax;
    float elem_max;
};

static const struct mx_fmt MXFP4 = {QS_FORMAT_MXFP4, 2, 6.0f};
static const struct mx_fmt MXFP8 = {QS_FORMAT_MXFP8, 8, 448.0f};

/* One block of len <= 32 values: the scale byte and the element codes (§13). */
static uint8_t mx_block(const struct mx_fmt *f, int rceil, const float *v, int64_t len,
                        uint8_t *codes)
{
    float amax = 0.0f;
    int e;

    for (int64_t i = 0; i < len; i++) {
        if (!isfinite(v[i])) {
            memset(codes, 0, (size_t)len);
            return 0xFF;
        }
        amax = fmaxf(amax, fabsf(v[i])); /* finite here */
    }
    if (amax == 0.0f)
        e = -127;
    else if (!rceil)
        e = ilogbf(amax) - f->emax; /* ilogb is exact, subnormals included */
    else
        for (e = -127; ldexp(f->elem_max, e) < (double)amax; e++)
            ;
    if (e < -127)
        e = -127;
    for (int64_t i = 0; i < len; i++) {
        float y = (float)ldexp(v[i], -e); /* exact: a power of two, result in range */
        codes[i] = f->format == QS_FORMAT_MXFP4 ? (uint8_t)nearest(y, 7, 0x8, e2m1_value)
                                                : (uint8_t)nearest(y, 0x7E, 0x80, e4m3_value);
    }
    return (uint8_t)(e + 127);
}

/* The whole tensor: scales [rows][ceil(cols/32)], data packed per row (MXFP4 low nibble first,
 * a 0 high nibble at the end of odd rows). Returns nothing; fills scales and data. */
static void mx_tensor(const struct mx_fmt *f, int rceil, const float *x, int64_t rows, int64_t cols,
                      uint8_t *scales, uint8_t *data)
{
    int64_t spr = (cols + 31) / 32, rb = f->format == QS_FORMAT_MXFP4 ? (cols + 1) / 2 : cols;
    uint8_t codes[32];

    memset(data, 0, (size_t)(rows * rb));
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t b = 0; b < spr; b++) {
            int64_t c0 = b * 32, len = cols - c0 < 32 ? cols - c0 : 32;
            scales[r * spr + b] = mx_block(f, rceil, x + r * cols + c0, len, codes);
            for (int64_t i = 0; i < len; i++) {
                int64_t c = c0 + i;
                if (f->format == QS_FORMAT_MXFP8)
                    data[r * rb + c] = codes[i];
                else
                    data[r * rb + c / 2] |= (uint8_t)(codes[i] << (4 * (c & 1)));
            }
        }
    }
}

static float e8m0_value(uint8_t e)
{
    return e == 0xFF ? NAN : (float)ldexp(1.0, e - 127);
}

/* Quantize rows x cols f32 values and compare with the expected scale and data bytes. */
static void check_mx(qs_ctx *ctx, int32_t format, int32_t rounding, const float *x, int64_t rows,
                     int64_t cols, const uint8_t *want_scales, const uint8_t *want_data)
{
    qs_quant_params p = params(format);
    tq t;

    p.scale_rounding = rounding;
    quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
    assert_null(t.q.zero_point);
    assert_null(t.q.nested_scale);
    assert_int_equal(t.q.scale_bytes, rows * ((cols + 31) / 32));
    T_ASSERT_BYTES("mx scales", t.q.scale, want_scales, (size_t)t.q.scale_bytes);
    T_ASSERT_BYTES("mx data", t.q.data, want_data, (size_t)t.q.data_bytes);
    tq_free(&t);
}

/* ---- tests --------------------------------------------------------------------------------- */

/* The §13 table (MXFP4, FLOOR), plus the same blocks under RCEIL. One block per row. */
static void test_mxfp4_vectors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[7][32];
    uint8_t want_data[7][16], ws_floor[7] = {0x7F, 0x7B, 0x00, 0x00, 0xFF, 0xFF, 0xFF};
    uint8_t ws_rceil[7] = {0x80, 0x7B, 0x00, 0x00, 0xFF, 0xFF, 0xFF};

    memset(x, 0, sizeof x);
    memset(want_data, 0, sizeof want_data);
    x[0][0] = 1.0f, x[0][1] = -0.75f, x[0][2] = 5.0f, x[0][3] = 7.9f;
    x[1][0] = 0.1f, x[1][1] = -0.2f, x[1][2] = 0.3f, x[1][3] = 0.05f;
    x[3][0] = -0.0f;
    x[4][5] = NAN, x[4][0] = 100.0f;
    x[5][31] = INFINITY, x[5][1] = 1.0f;
    x[6][17] = -INFINITY;
    /* -0.75 ties to -1.0, 5.0 ties to 4.0, 7.9 clips to 6 */
    want_data[0][0] = 0xA2, want_data[0][1] = 0x76;
    want_data[1][0] = 0xD3, want_data[1][1] = 0x26;
    want_data[3][0] = 0x08; /* -0.0 keeps its sign */
    check_mx(ctx, QS_FORMAT_MXFP4, QS_MX_SCALE_FLOOR, &x[0][0], 7, 32, ws_floor, &want_data[0][0]);

    /* RCEIL: X = 2 for the first block: 0.5, -0.375 -> -0.5, 2.5 -> 2.0 (tie), 3.95 -> 4.0 */
    want_data[0][0] = 0x91, want_data[0][1] = 0x64;
    check_mx(ctx, QS_FORMAT_MXFP4, QS_MX_SCALE_RCEIL, &x[0][0], 7, 32, ws_rceil, &want_data[0][0]);

    /* decode: 2^(e-127) * value; the NaN blocks decode to NaN */
    {
        qs_quant_params p = params(QS_FORMAT_MXFP4);
        t_buf o = quant_dequant_f32(ctx, &p, x, 7, 32);
        const float *y = o.p;
        assert_true(y[0] == 1.0f && y[1] == -1.0f && y[2] == 4.0f && y[3] == 6.0f);
        assert_int_equal(t_bits(y[3 * 32]), 0x80000000u); /* -0 * 2^-127 */
        for (int i = 4 * 32; i < 7 * 32; i++)
            assert_true(isnan(y[i]));
        t_buf_free(&o);
    }
    qs_ctx_destroy(ctx);
}

/* [2, 48]: two scale bytes per row (columns 0-31 and 32-47), four in all, not three blocks over
 * the 96 flattened elements. */
static void test_mx_layout_2x48(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[2][48];
    uint8_t wd[2][24];
    const uint8_t ws[4] = {0x7D, 0x7E, 0x7B, 0x7E};
    int64_t bytes;
    qs_quant_params p = params(QS_FORMAT_MXFP4);

    memset(x, 0, sizeof x);
    memset(wd, 0, sizeof wd);
    x[0][0] = 1.0f;   /* X = 2^-2: 4.0 -> 6 */
    x[0][32] = 3.0f;  /* X = 2^-1: 6.0 -> 7 */
    x[1][0] = 0.25f;  /* X = 2^-4: 4.0 -> 6 */
    x[1][47] = -2.0f; /* X = 2^-1: -4.0 -> 0xE, high nibble of the row's last byte */
    wd[0][0] = 0x06, wd[0][16] = 0x07, wd[1][0] = 0x06, wd[1][23] = 0xE0;
    assert_int_equal(qs_quant_size(&p, 2, 48, QS_PLANE_SCALE, &bytes), QS_OK);
    assert_int_equal(bytes, 4);
    assert_int_equal(qs_quant_size(&p, 2, 48, QS_PLANE_DATA, &bytes), QS_OK);
    assert_int_equal(bytes, 48);
    check_mx(ctx, QS_FORMAT_MXFP4, QS_MX_SCALE_FLOOR, &x[0][0], 2, 48, ws, &wd[0][0]);

    /* MXFP8 on the same tensor: one byte per element */
    {
        uint8_t w8[2][48];
        const uint8_t ws8[4] = {0x77, 0x78, 0x75, 0x78};
        memset(w8, 0, sizeof w8);
        w8[0][0] = 0x78, w8[0][32] = 0x7C, w8[1][0] = 0x78, w8[1][47] = 0xF8;
        assert_int_equal(
            qs_quant_size(&(qs_quant_params){.format = QS_FORMAT_MXFP8, .block_size = 32}, 2, 48,
                          QS_PLANE_DATA, &bytes),
            QS_OK);
        assert_int_equal(bytes, 96);
        check_mx(ctx, QS_FORMAT_MXFP8, QS_MX_SCALE_FLOOR, &x[0][0], 2, 48, ws8, &w8[0][0]);
    }
    qs_ctx_destroy(ctx);
}

/* amax just below a power of two: floor(log2(7.9999995)) = 2 exactly, although a correctly
 * rounded log2f gives 3.0; likewise 1073741760 (exponent 29, log2f 30). Subnormal amax clamps to
 * 2^-127. */
static void test_mx_exponent_bits(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[4][32];
    uint8_t d4[4][16], d8[4][32];

    memset(x, 0, sizeof x);
    x[0][0] = 7.9999995f;
    x[1][0] = 1073741760.0f;
    x[2][0] = -3e-39f, x[2][1] = 1e-40f; /* amax 2^-128 < 3e-39 < 2^-127 */
    x[3][0] = 0x1p-127f * 6.0f;          /* amax 1.5 * 2^-125: shared_exp -127 */

    memset(d4, 0, sizeof d4);
    d4[0][0] = 0x07, d4[1][0] = 0x07; /* clipped to 6 */
    d4[2][0] = 0x09;                  /* -3e-39 * 2^127 = -0.51 -> -0.5; 1e-40 * 2^127 -> 0 */
    d4[3][0] = 0x07;                  /* exactly 6 */
    {
        const uint8_t s[4] = {0x7F, 0x9A, 0x00, 0x00};
        check_mx(ctx, QS_FORMAT_MXFP4, QS_MX_SCALE_FLOOR, &x[0][0], 4, 32, s, &d4[0][0]);
    }
    /* RCEIL: 7.9999995 / 6 -> X = 2, element 3.99999976 -> 4.0; 1073741760 / 6 -> X = 2^28 */
    d4[0][0] = 0x06, d4[1][0] = 0x06;
    {
        const uint8_t s[4] = {0x80, 0x9B, 0x00, 0x00};
        check_mx(ctx, QS_FORMAT_MXFP4, QS_MX_SCALE_RCEIL, &x[0][0], 4, 32, s, &d4[0][0]);
    }
    /* MXFP8: FLOOR 2 - 8 = -6 (0x79), element 511.99997 saturates to 448 (0x7E); a log2f scale
     * would be 0x7A with element 256 (0x78) */
    memset(d8, 0, sizeof d8);
    d8[0][0] = 0x7E, d8[1][0] = 0x7E;
    d8[2][0] = 0xB0, d8[2][1] = 0x09; /* -0.5104 -> -0.5 (0x30); 0.0170 -> 0.017578125 (0x09) */
    d8[3][0] = 0x4C;                  /* 6.0 */
    {
        const uint8_t s[4] = {0x79, 0x94, 0x00, 0x00};
        check_mx(ctx, QS_FORMAT_MXFP8, QS_MX_SCALE_FLOOR, &x[0][0], 4, 32, s, &d8[0][0]);
    }
    qs_ctx_destroy(ctx);
}

/* MXFP8 vectors worked by hand, FLOOR and RCEIL; E8M0 decode including 0x00 = 2^-127 and 0xFF. */
static void test_mxfp8_vectors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    float x[3][32];
    uint8_t d[3][32];

    memset(x, 0, sizeof x);
    memset(d, 0, sizeof d);
    x[0][0] = 1.0f, x[0][1] = 448.0f, x[0][2] = -0.1f, x[0][3] = 0x1p-9f;
    x[1][0] = 1000.0f, x[1][1] = 1.0f;
    x[2][9] = NAN, x[2][0] = 1.0f;
    d[0][0] = 0x38, d[0][1] = 0x7E, d[0][2] = 0x9D, d[0][3] = 0x01;
    d[1][0] = 0x7E, d[1][1] = 0x30; /* X = 2: 500 saturates to 448, 0.5 */
    {
        const uint8_t s[3] = {0x7F, 0x80, 0xFF};
        check_mx(ctx, QS_FORMAT_MXFP8, QS_MX_SCALE_FLOOR, &x[0][0], 3, 32, s, &d[0][0]);
    }
    d[1][0] = 0x78, d[1][1] = 0x28; /* RCEIL X = 4: 250 -> 256, 0.25 */
    {
        const uint8_t s[3] = {0x7F, 0x81, 0xFF};
        check_mx(ctx, QS_FORMAT_MXFP8, QS_MX_SCALE_RCEIL, &x[0][0], 3, 32, s, &d[0][0]);
    }

    /* decode of hand-made planes: scale 0x00 is 2^-127 (not zero), 0xFE is 2^127, 0xFF NaN */
    {
        qs_quant_params p = params(QS_FORMAT_MXFP8);
        uint8_t data[96] = {0}, scales[3] = {0x00, 0xFE, 0xFF};
        float out[96];
        qs_qtensor q;
        data[0] = 0x30;  /* 0.5 * 2^-127 = 2^-128 */
        data[1] = 0x7E;  /* 448 * 2^-127 */
        data[32] = 0x38; /* 2^127 */
        data[33] = 0xB0; /* -2^126 */
        data[64] = 0x00;
        memset(&q, 0, sizeof q);
        q.data = data, q.data_bytes = 96, q.scale = scales, q.scale_bytes = 3;
        assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 96, out, QS_DTYPE_F32, sizeof out), QS_OK);
        assert_int_equal(t_bits(out[0]), 0x00200000u);
        assert_true(out[1] == (float)ldexp(448.0, -127));
        assert_int_equal(t_bits(out[2]), 0);
        assert_true(out[32] == 0x1p127f && out[33] == -0x1p126f);
        for (int i = 64; i < 96; i++)
            assert_true(isnan(out[i]));

        /* MXFP4 with the same scales */
        qs_quant_params p4 = params(QS_FORMAT_MXFP4);
        data[0] = 0x71;  /* 0.5, 6 */
        data[16] = 0x0F; /* -6 * 2^127 overflows to -Inf */
        q.data_bytes = 48;
        assert_int_equal(qs_dequantize(ctx, &p4, &q, 1, 96, out, QS_DTYPE_F32, sizeof out), QS_OK);
        assert_int_equal(t_bits(out[0]), 0x00200000u);
        assert_true(out[1] == (float)ldexp(6.0, -127));
        assert_true(out[32] == -INFINITY);
    }
    qs_ctx_destroy(ctx);
}

/* Random tensors (odd cols, partial blocks, 1-D, the adversarial values) against the encoder
 * restated above; dequantize against 2^(e-127) * value(P); f16/bf16 in and out. */
static void test_mx_random(void **state)
{
    (void)state;
    /* {5, 64} and {3, 2080}: whole blocks per row, so the drivers run the rows as one (a span of
     * 4096 ends inside row 1) */
    static const int64_t shapes[][2] = {{1, 1},    {1, 33}, {3, 31},   {5, 64},
                                        {2, 4097}, {7, 65}, {1, 5000}, {3, 2080}};
    const struct mx_fmt *fm[2] = {&MXFP4, &MXFP8};
    qs_ctx *ctx = t_ctx();
    t_rng rng = {313};

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        int64_t ns = rows * ((cols + 31) / 32);
        /* inputs end at a guard page: an over-read faults */
        t_page_buf xp = t_page_buf_new((size_t)n * 4), hp = t_page_buf_new((size_t)n * 2);
        float *x = xp.p, *xw = malloc((size_t)n * 4);
        uint8_t *ws = malloc((size_t)ns), *wd = malloc((size_t)n);
        uint16_t *h = hp.p;
        assert_non_null(x);
        t_fill_mixed(&rng, x, n, si & 1 ? 0.002 : 0.0);
        for (int f = 0; f < 2; f++) {
            for (int rc = 0; rc < 2; rc++) {
                qs_quant_params p = params(fm[f]->format);
                p.scale_rounding = rc;
                mx_tensor(fm[f], rc, x, rows, cols, ws, wd);
                check_mx(ctx, fm[f]->format, rc, x, rows, cols, ws, wd);

                tq t;
                quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
                t_buf o = dequant(ctx, &p, &t, rows, cols, QS_DTYPE_F32);
                int64_t rb = f ? cols : (cols + 1) / 2;
                for (int64_t r = 0; r < rows; r++) {
                    for (int64_t c = 0; c < cols; c++) {
                        int code = f ? wd[r * rb + c] : (wd[r * rb + c / 2] >> (4 * (c & 1))) & 15;
                        float v = f ? e4m3_value(code) : e2m1_value(code);
                        float want = v * e8m0_value(ws[r * ((cols + 31) / 32) + c / 32]);
                        float got = ((float *)o.p)[r * cols + c];
                        assert_decoded("mx decode", r, c, got, want);
                    }
                }
                for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
                    assert_dequant_16(ctx, "mx 16-bit output", &p, &t, rows, cols, dt, o.p, h);
                    /* 16-bit input: the planes of its f32 widening */
                    round_16(ctx, x, n, dt, h, xw);
                    tq t16;
                    quant(ctx, &p, h, dt, rows, cols, &t16);
                    mx_tensor(fm[f], rc, xw, rows, cols, ws, wd);
                    T_ASSERT_BYTES("mx 16-bit input scales", t16.q.scale, ws, (size_t)ns);
                    T_ASSERT_BYTES("mx 16-bit input data", t16.q.data, wd,
                                   (size_t)t16.q.data_bytes);
                    tq_free(&t16);
                    mx_tensor(fm[f], rc, x, rows, cols, ws, wd);
                }
                t_buf_free(&o);
                tq_free(&t);
            }
        }
        t_page_buf_free(&xp);
        free(xw);
        free(ws);
        free(wd);
        t_page_buf_free(&hp);
    }
    qs_ctx_destroy(ctx);
}

/* The restated encoder can fail: it separates FLOOR from RCEIL and a tie from its neighbour. */
static void test_mx_oracle_negative(void **state)
{
    (void)state;
    float v[2] = {7.9f, 0.75f};
    uint8_t c[2];
    assert_int_equal(mx_block(&MXFP4, 0, v, 2, c), 0x7F);
    assert_int_equal(c[1], 0x2); /* 0.75 ties to 1.0, not 0.5 */
    assert_int_equal(mx_block(&MXFP4, 1, v, 2, c), 0x80);
    assert_int_equal(c[0], 0x6);
    assert_int_equal(nearest(nextafterf(0.75f, 0.0f), 7, 0x8, e2m1_value), 0x1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_mxfp4_vectors),    cmocka_unit_test(test_mx_layout_2x48),
        cmocka_unit_test(test_mx_exponent_bits), cmocka_unit_test(test_mxfp8_vectors),
        cmocka_unit_test(test_mx_random),        cmocka_unit_test(test_mx_oracle_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
