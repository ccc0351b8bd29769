/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of the INT8 formats through the public API: LLM.int8 row-wise absmax (docs/formats.md
 * §8: codes, NaN/Inf/zero-row rules, the subnormal row whose factor overflows, and the vector
 * dequantization fl(fl(q * stats) * c)) and plain INT8 (§9: symmetric and asymmetric, per tensor,
 * per row and per group, the amax = 0 convention, a group size that does not divide cols). Also
 * odd column counts, 1-D tensors and f16/bf16 inputs and outputs. Every output plane sits between
 * canary bytes; expected values were worked by hand from the spec formulas in f32.
 */
#include <float.h>

#include "common.h"
#include "quant_helpers.h"

/* ---- helpers of the INT8 tests --------------------------------------------------------------- */

static void assert_f32_bits(const float *got, const uint32_t *want, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        if (t_bits(got[i]) != want[i]) {
            print_error("element %lld: got %08x, want %08x\n", (long long)i, t_bits(got[i]),
                        want[i]);
            fail();
        }
    }
}

/* The f32 dequantization of t, bit for bit: the spec fixes every rounding step (§8, §9). */
static void assert_dequant_f32(qs_ctx *ctx, const qs_quant_params *p, const tq *t, int64_t rows,
                               int64_t cols, const uint32_t *want)
{
    t_buf o = dequant(ctx, p, t, rows, cols, QS_DTYPE_F32);
    assert_f32_bits(o.p, want, rows * cols);
    t_buf_free(&o);
}

/* f16 / bf16 bits of a value that both represent exactly (inputs of the 16-bit tests). */
static uint16_t exact_f16(float f)
{
    uint32_t u = t_bits(f), a = u & 0x7FFFFFFFu;
    uint16_t h;

    if (a == 0)
        h = 0;
    else {
        assert_true(a >= 0x38800000u && a <= 0x477FE000u && (a & 0x1FFFu) == 0);
        h = (uint16_t)((a - (112u << 23)) >> 13);
    }
    return (uint16_t)(h | ((u >> 16) & 0x8000u));
}

static uint16_t exact_bf16(float f)
{
    assert_true((t_bits(f) & 0xFFFFu) == 0);
    return (uint16_t)(t_bits(f) >> 16);
}

/* ---- §8 LLM.int8 ----------------------------------------------------------------------------- */

static void test_llm_int8_vectors(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_LLM_INT8);
    /* rows: plain; NaN ignored by the absmax; +Inf row (factor 0); -Inf row; all-zero row; the
     * spec's subnormal row whose factor 127/stats overflows to +Inf */
    const float x[6][4] = {
        {1.0f, -2.0f, 0.5f, 4.0f},     {NAN, 1.0f, -2.0f, 0.5f},  {INFINITY, 1.0f, -3.0f, NAN},
        {-INFINITY, 1.0f, 2.0f, 3.0f}, {0.0f, -0.0f, 0.0f, 0.0f}, {1e-38f, -5e-39f, 0.0f, 2e-39f},
    };
    const int8_t want[6][4] = {
        {32, -64, 16, 127}, /* mul 31.75: 31.75 -> 32, -63.5 -> -64 (tie to even) */
        {0, 64, -127, 32},  /* mul 63.5: NaN -> 0, 63.5 -> 64 */
        {0, 0, 0, 0},       {0, 0, 0, 0},
        {0, 0, 0, 0},       {127, -127, 0, 127}, /* +-Inf products clamp; not [127, -64, 0, 25] */
    };
    const uint32_t want_scb[6] = {0x40800000u, 0x40000000u, 0x7F800000u,
                                  0x7F800000u, 0x00000000u, t_bits(1e-38f)};
    tq t;

    quant(ctx, &p, x, QS_DTYPE_F32, 6, 4, &t);
    assert_int_equal(t.q.data_bytes, 24);
    assert_int_equal(t.q.scale_bytes, 24);
    assert_null(t.q.zero_point);
    T_ASSERT_BYTES("llm_int8 codes", t.q.data, want, 24);
    assert_f32_bits(t.q.scale, want_scb, 6);

    /* f16 and bf16 inputs of the first two rows give the same planes */
    uint16_t h[8], b[8];
    for (int i = 0; i < 8; i++) {
        float v = x[i / 4][i % 4];
        h[i] = v != v ? 0x7E00u : exact_f16(v);
        b[i] = v != v ? 0x7FC0u : exact_bf16(v);
    }
    for (int k = 0; k < 2; k++) {
        tq t16;
        quant(ctx, &p, k ? (void *)b : (void *)h, k ? QS_DTYPE_BF16 : QS_DTYPE_F16, 2, 4, &t16);
        T_ASSERT_BYTES("llm_int8 16-bit codes", t16.q.data, want, 8);
        assert_f32_bits(t16.q.scale, want_scb, 2);
        tq_free(&t16);
    }
    tq_free(&t);
    qs_ctx_destroy(ctx);
}

/* Vector dequantization is fl(fl(q * stats) * c) with c = fl(1/127) = 3c010204, never a division
 * by 127; random stats make the two differ for some elements, so the check can fail. */
static void test_llm_int8_dequant(void **state)
{
    (void)state;
    enum { R = 64, C = 255 };
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_LLM_INT8);
    t_rng rng = {811};
    int8_t codes[R][C];
    float stats[R], out[R][C];
    qs_qtensor q;
    int64_t div_differs = 0;

    for (int r = 0; r < R; r++) {
        stats[r] = (float)(t_unif(&rng) * ldexp(1.0, (int)(t_next(&rng) % 16) - 8));
        for (int c = 0; c < C; c++)
            codes[r][c] = (int8_t)(c - 127);
    }
    memset(&q, 0, sizeof q);
    q.data = codes;
    q.data_bytes = sizeof codes;
    q.scale = stats;
    q.scale_bytes = sizeof stats;
    assert_int_equal(qs_dequantize(ctx, &p, &q, R, C, out, QS_DTYPE_F32, sizeof out), QS_OK);
    for (int r = 0; r < R; r++) {
        for (int c = 0; c < C; c++) {
            float prod = (float)codes[r][c] * stats[r];
            float want = prod * 0x1.020408p-7f;
            float by_div = prod / 127.0f;
            div_differs += t_bits(by_div) != t_bits(want);
            if (t_bits(out[r][c]) != t_bits(want)) {
                print_error("row %d code %d stats %a: got %a want %a\n", r, codes[r][c],
                            (double)stats[r], (double)out[r][c], (double)want);
                fail();
            }
        }
    }
    assert_true(div_differs > 0);

    /* a zero row decodes to +-0, and f16 / bf16 outputs are the f32 result rounded once */
    uint16_t h[R * C], hc[R * C];
    for (int dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
        assert_int_equal(qs_dequantize(ctx, &p, &q, R, C, h, dt, sizeof h), QS_OK);
        assert_int_equal(qs_convert(ctx, out, QS_DTYPE_F32, hc, dt, R * C, sizeof hc), QS_OK);
        T_ASSERT_BYTES("llm_int8 16-bit output", h, hc, sizeof h);
    }
    qs_ctx_destroy(ctx);
}

/* ---- §9 plain INT8 --------------------------------------------------------------------------- */

static void test_int8_symmetric(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_INT8);
    const float x[12] = {1.0f, -2.0f, 0.5f, 4.0f, 0.0f, 0.0f, -0.3f, 0.7f, 1.1f, 0.0f, 0.0f, 0.0f};
    tq t;

    /* per tensor: s = fl(4/127), mul = 31.75 */
    {
        const int8_t want[12] = {32, -64, 16, 127, 0, 0, -10, 22, 35, 0, 0, 0};
        const uint32_t want_dq[12] = {0x3f810204u, 0xc0010204u, 0x3f010204u, 0x40800000u, 0, 0,
                                      0xbea14285u, 0x3f3162c6u, 0x3f8d1a34u, 0,           0, 0};
        const uint32_t want_s = 0x3d010204u;
        p.granularity = QS_GRAN_TENSOR;
        quant(ctx, &p, x, QS_DTYPE_F32, 3, 4, &t);
        assert_int_equal(t.q.scale_bytes, 4);
        T_ASSERT_BYTES("int8 tensor codes", t.q.data, want, 12);
        assert_f32_bits(t.q.scale, &want_s, 1);
        assert_dequant_f32(ctx, &p, &t, 3, 4, want_dq);
        tq_free(&t);
    }
    /* per group of 3 on a 2 x 6 tensor: groups never span rows; the all-zero group gets s = 1 */
    {
        const int8_t want[12] = {64, -127, 32, 127, 0, 0, -35, 81, 127, 0, 0, 0};
        const uint32_t want_s[4] = {0x3c810204u, 0x3d010204u, 0x3c0de89eu, 0x3f800000u};
        const uint32_t want_dq[12] = {0x3f810204u, 0xc0000000u, 0x3f010204u, 0x40800000u, 0, 0,
                                      0xbe9b366du, 0x3f339a68u, 0x3f8ccccdu, 0,           0, 0};
        const float xg[12] = {1.0f,  -2.0f, 0.5f, 4.0f, 0.0f, 0.0f,
                              -0.3f, 0.7f,  1.1f, 0.0f, 0.0f, -0.0f};
        p.granularity = QS_GRAN_GROUP;
        p.block_size = 3;
        quant(ctx, &p, xg, QS_DTYPE_F32, 2, 6, &t);
        assert_int_equal(t.q.scale_bytes, 16);
        T_ASSERT_BYTES("int8 group codes", t.q.data, want, 12);
        assert_f32_bits(t.q.scale, want_s, 4);
        assert_dequant_f32(ctx, &p, &t, 2, 6, want_dq);
        tq_free(&t);
    }
    /* per row (the default) on a 4 x 3 tensor; odd cols */
    {
        const int8_t want[12] = {64, -127, 32, 127, 0, 0, -35, 81, 127, 0, 0, 0};
        const uint32_t want_s[4] = {0x3c810204u, 0x3d010204u, 0x3c0de89eu, 0x3f800000u};
        p = params(QS_FORMAT_INT8);
        assert_int_equal(p.granularity, QS_GRAN_ROW);
        const float xr[12] = {1.0f,  -2.0f, 0.5f, 4.0f, 0.0f, 0.0f,
                              -0.3f, 0.7f,  1.1f, 0.0f, 0.0f, 0.0f};
        quant(ctx, &p, xr, QS_DTYPE_F32, 4, 3, &t);
        T_ASSERT_BYTES("int8 row codes", t.q.data, want, 12);
        assert_f32_bits(t.q.scale, want_s, 4);
        tq_free(&t);
        /* 1-D: one row */
        quant(ctx, &p, xr, QS_DTYPE_F32, 1, 12, &t);
        const int8_t want1[12] = {32, -64, 16, 127, 0, 0, -10, 22, 35, 0, 0, 0};
        T_ASSERT_BYTES("int8 1-D codes", t.q.data, want1, 12);
        tq_free(&t);
    }
    qs_ctx_destroy(ctx);
}

static void test_int8_asymmetric(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_INT8);
    /* rows: lo < 0 < hi; [0, 255] (s = 1, zp = -128); all positive (lo clamps to 0);
     * all negative (hi clamps to 0, zp = 127); all zero (s = 1, zp = 0); lo / s = -2.5 exactly,
     * where rne gives zp = -128 + 2 (roundf would give -128 + 3); a range so small that s is
     * raised to FLT_EPSILON */
    enum { R = 7 };
    const float x[R][4] = {
        {-2.0f, 0.0f, 3.0f, 1.0f},    {0.0f, 255.0f, 0.0f, 255.0f}, {1.0f, 2.0f, 3.0f, 4.0f},
        {-1.0f, -0.5f, -0.25f, 0.0f}, {0.0f, 0.0f, -0.0f, 0.0f},    {-2.5f, 252.5f, 0.0f, 1.0f},
        {0.0f, 1e-6f, -1e-6f, 3e-7f},
    };
    const int8_t want[R][4] = {
        {-128, -26, 127, 25}, {-128, 127, -128, 127},  {-64, -1, 63, 127},       {-128, 0, 63, 127},
        {0, 0, 0, 0},         {-128, 126, -126, -125}, {-120, -112, -128, -117},
    };
    const int8_t want_zp[R] = {-26, -128, -128, 127, 0, -126, -120};
    const uint32_t want_s[R] = {0x3ca0a0a1u, 0x3f800000u, 0x3c808081u, 0x3b808081u,
                                0x3f800000u, 0x3f800000u, 0x34000000u};
    const uint32_t want_dq[R][4] = {
        {0xc0000000u, 0, 0x40400000u, 0x3f800000u},
        {0, 0x437f0000u, 0, 0x437f0000u},
        {0x3f808081u, 0x3ffeff00u, 0x403fbfc0u, 0x40800000u},
        {0xbf800000u, 0xbefeff00u, 0xbe808081u, 0},
        {0, 0, 0, 0},
        {0xc0000000u, 0x437c0000u, 0, 0x3f800000u},
        {0, 0x35800000u, 0xb5800000u, 0x34c00000u},
    };
    tq t;

    p.symmetric = 0;
    quant(ctx, &p, x, QS_DTYPE_F32, R, 4, &t);
    assert_int_equal(t.q.zero_point_bytes, R);
    T_ASSERT_BYTES("asym codes", t.q.data, want, 4 * R);
    T_ASSERT_BYTES("asym zero points", t.q.zero_point, want_zp, R);
    assert_f32_bits(t.q.scale, want_s, R);
    assert_dequant_f32(ctx, &p, &t, R, 4, &want_dq[0][0]);
    tq_free(&t);

    /* per tensor: one scale and one zero point, from the first row's range */
    p.granularity = QS_GRAN_TENSOR;
    quant(ctx, &p, x[0], QS_DTYPE_F32, 2, 2, &t);
    assert_int_equal(t.q.zero_point_bytes, 1);
    T_ASSERT_BYTES("asym tensor codes", t.q.data, want[0], 4);
    T_ASSERT_BYTES("asym tensor zp", t.q.zero_point, want_zp, 1);
    assert_f32_bits(t.q.scale, want_s, 1);
    tq_free(&t);

    /* per group of 4 on a 1 x 24 tensor equals the per-row result above */
    p.granularity = QS_GRAN_GROUP;
    p.block_size = 4;
    quant(ctx, &p, x, QS_DTYPE_F32, 1, 4 * R, &t);
    T_ASSERT_BYTES("asym group codes", t.q.data, want, 4 * R);
    T_ASSERT_BYTES("asym group zp", t.q.zero_point, want_zp, R);
    assert_f32_bits(t.q.scale, want_s, R);
    tq_free(&t);
    qs_ctx_destroy(ctx);
}

/* A group size that does not divide cols is a shape error; nothing is written. */
static void test_int8_group_shape(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(QS_FORMAT_INT8), ok = p;
    float x[14] = {0};
    int64_t bytes = 12345;
    tq t;

    p.granularity = QS_GRAN_GROUP;
    p.block_size = 3;
    ok.granularity = QS_GRAN_ROW;
    assert_int_equal(qs_quant_size(&p, 2, 7, QS_PLANE_SCALE, &bytes), QS_ERR_SHAPE);
    assert_int_equal(bytes, 12345);
    tq_new(&t, &ok, 2, 7);
    assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 2, 7, &t.q), QS_ERR_SHAPE);
    assert_true(strlen(qs_ctx_last_error(ctx)) > 0);
    for (int i = 0; i < QS_PLANE_COUNT; i++)
        assert_true(t_buf_untouched(&t.plane[i]));
    t_buf o = t_buf_new(14 * 4);
    assert_int_equal(qs_dequantize(ctx, &p, &t.q, 2, 7, o.p, QS_DTYPE_F32, 56), QS_ERR_SHAPE);
    assert_true(t_buf_untouched(&o));
    t_buf_free(&o);
    tq_free(&t);

    /* block_size 7 divides 7; block_size 0 is an invalid argument */
    p.block_size = 7;
    assert_int_equal(qs_quant_size(&p, 2, 7, QS_PLANE_SCALE, &bytes), QS_OK);
    assert_int_equal(bytes, 8);
    p.block_size = 0;
    assert_int_equal(qs_quant_size(&p, 2, 7, QS_PLANE_SCALE, &bytes), QS_ERR_INVALID_ARG);
    qs_ctx_destroy(ctx);
}

/* Random tensors with odd shapes against the §9 formulas restated here, in f32; every variant,
 * f32 / f16 / bf16 inputs (the 16-bit inputs are rounded copies, compared with their own f32
 * widening) and f16 / bf16 outputs. */
static void sym_unit(const float *x, int64_t n, float *scale, int8_t *q)
{
    float amax = 0.0f;
    for (int64_t i = 0; i < n; i++)
        amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax; /* NaN ignored */
    float mul = amax == 0.0f ? 0.0f : 127.0f / amax;
    *scale = amax == 0.0f ? 1.0f : amax / 127.0f;
    for (int64_t i = 0; i < n; i++) {
        float v = rintf(x[i] * mul);
        q[i] = (int8_t)(v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v);
    }
}

static void asym_unit(const float *x, int64_t n, float *scale, int8_t *zp, int8_t *q)
{
    float lo = 0.0f, hi = 0.0f, s = 1.0f;
    int32_t z = 0;
    for (int64_t i = 0; i < n; i++) {
        lo = x[i] < lo ? x[i] : lo; /* NaN ignored */
        hi = x[i] > hi ? x[i] : hi;
    }
    if (hi != lo) {
        s = (hi - lo) / 255.0f;
        if (s < FLT_EPSILON)
            s = FLT_EPSILON;
        z = -128 - (int32_t)rintf(lo / s);
        z = z > 127 ? 127 : z;
    }
    float inv = 1.0f / s;
    for (int64_t i = 0; i < n; i++) {
        int32_t v = (int32_t)rintf(x[i] * inv) + z;
        q[i] = (int8_t)(v > 127 ? 127 : v < -128 ? -128 : v);
    }
    *scale = s;
    *zp = (int8_t)z;
}

static void test_int8_random(void **state)
{
    (void)state;
    static const int64_t shapes[][2] = {{1, 1}, {1, 33}, {3, 5}, {7, 129}, {2, 4097}, {5, 96}};
    qs_ctx *ctx = t_ctx();
    t_rng rng = {4242};

    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t rows = shapes[si][0], cols = shapes[si][1], n = rows * cols;
        /* inputs end at a guard page: an over-read faults */
        t_page_buf xp = t_page_buf_new((size_t)n * 4), hp = t_page_buf_new((size_t)n * 2);
        float *x = xp.p, *ws = malloc((size_t)n * 4);
        int8_t *wq = malloc((size_t)n), *wz = malloc((size_t)n);
        uint16_t *h = hp.p;
        assert_non_null(x);
        for (int64_t i = 0; i < n; i++)
            x[i] = (float)(t_normal(&rng) * ldexp(1.0, (int)(t_next(&rng) % 8) - 4));

        for (int variant = 0; variant < 6; variant++) {
            qs_quant_params p = params(QS_FORMAT_INT8);
            int64_t unit;
            p.symmetric = variant < 3;
            p.granularity = variant % 3;
            if (p.granularity == QS_GRAN_GROUP)
                p.block_size = cols % 3 == 0 ? 3 : (int32_t)cols;
            unit = p.granularity == QS_GRAN_TENSOR ? n
                   : p.granularity == QS_GRAN_ROW  ? cols
                                                   : p.block_size;
            for (int64_t u = 0; u * unit < n; u++) {
                if (p.symmetric)
                    sym_unit(x + u * unit, unit, &ws[u], wq + u * unit);
                else
                    asym_unit(x + u * unit, unit, &ws[u], &wz[u], wq + u * unit);
            }
            tq t;
            quant(ctx, &p, x, QS_DTYPE_F32, rows, cols, &t);
            T_ASSERT_BYTES("random int8 codes", t.q.data, wq, (size_t)n);
            T_ASSERT_BYTES("random int8 scales", t.q.scale, ws, (size_t)(n / unit) * 4);
            if (!p.symmetric)
                T_ASSERT_BYTES("random int8 zp", t.q.zero_point, wz, (size_t)(n / unit));
            t_buf o = dequant(ctx, &p, &t, rows, cols, QS_DTYPE_F32);
            const float *of = o.p;
            for (int64_t i = 0; i < n; i++) {
                int64_t u = i / unit;
                float want = (float)((int32_t)wq[i] - (p.symmetric ? 0 : wz[u])) * ws[u];
                if (t_bits(of[i]) != t_bits(want)) {
                    print_error("variant %d element %lld: got %a want %a\n", variant, (long long)i,
                                (double)of[i], (double)want);
                    fail();
                }
            }
            for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
                assert_dequant_16(ctx, "16-bit dequant", &p, &t, rows, cols, dt, o.p, h);
            }
            /* 16-bit inputs: same planes as the f32 tensor they widen to */
            for (int32_t dt = QS_DTYPE_F16; dt <= QS_DTYPE_BF16; dt++) {
                tq t16, t32;
                round_16(ctx, x, n, dt, h, ws);
                quant(ctx, &p, h, dt, rows, cols, &t16);
                quant(ctx, &p, ws, QS_DTYPE_F32, rows, cols, &t32);
                for (int pl = 0; pl < QS_PLANE_COUNT; pl++)
                    T_ASSERT_BYTES("16-bit input plane", t16.plane[pl].p, t32.plane[pl].p,
                                   t16.plane[pl].bytes);
                tq_free(&t16);
                tq_free(&t32);
            }
            t_buf_free(&o);
            tq_free(&t);
        }
        t_page_buf_free(&xp);
        free(ws);
        free(wq);
        free(wz);
        t_page_buf_free(&hp);
    }
    qs_ctx_destroy(ctx);
}

/* The byte comparison used above reports a single flipped bit (a check that cannot fail is a
 * defect). */
static void test_compare_negative(void **state)
{
    (void)state;
    uint8_t a[33] = {0}, b[33] = {0};
    b[32] = 0x10;
    assert_int_equal(t_check_bytes("negative", a, b, 33, 0), 0);
    assert_int_equal(t_first_diff(a, b, 33), 32);
    b[32] = 0;
    assert_int_equal(t_check_bytes("negative", a, b, 33, 0), 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_llm_int8_vectors), cmocka_unit_test(test_llm_int8_dequant),
        cmocka_unit_test(test_int8_symmetric),   cmocka_unit_test(test_int8_asymmetric),
        cmocka_unit_test(test_int8_group_shape), cmocka_unit_test(test_int8_random),
        cmocka_unit_test(test_compare_negative),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
