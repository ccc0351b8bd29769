/* SPDX-License-Identifier: MIT */
/*
 * Spec tests of the element tables (docs/formats.md §2, §3, §4, §10, §11, §12): every NF4 and FP4
 * codebook entry and threshold against the hex the spec prints (restated here, never read from the
 * library to build an expectation), all 256 E4M3 / E5M2 / E8M0 codes against values computed
 * independently from the bit formulas, the §10 and §11 encode vectors, and encode(decode(c)) == c
 * for every code of NF4, FP4, E2M1, E4M3 and E5M2, both on the scalar element rules of src/ref
 * and through the public API (qs_codebook, qs_quantize, qs_dequantize), so that every ISA tier the
 * test runs under is covered. The dynamic 8-bit map (§6.3) is pinned in test_dyn8.c.
 */
#include "common.h"
#include "quant_helpers.h"
#include "ref/ref.h"

/* ---- the spec's hex columns ------------------------------------------------------------------ */

/* §2, NF4 code 0...15. */
static const uint32_t nf4_hex[16] = {
    0xbf800000, 0xbf3239b1, 0xbf066b30, 0xbeca32a0, 0xbe91a24d, 0xbe3d353f, 0xbdba7871, 0x00000000,
    0x3da2faff, 0x3e24cae3, 0x3e7c04dd, 0x3ead033a, 0x3ee1a4b8, 0x3f1007ab, 0x3f3913b3, 0x3f800000,
};

/* §3, NF4 thresholds t_0 ... t_14. */
static const uint32_t nf4_thr_hex[15] = {
    0xbf591cd8, 0xbf1c5270, 0xbeeb8480, 0xbeadea76, 0xbe703cec, 0xbe0d38bc, 0xbd3a7871, 0x3d22faff,
    0x3df64862, 0x3e5067e0, 0x3e9582d4, 0x3ec753f9, 0x3f006d04, 0x3f248daf, 0x3f5c89da,
};

/* §4, FP4 by low three bits 000 ... 111 (codes 8...15 are the negatives, code 8 is -0.0). */
static const uint32_t fp4_hex[8] = {
    0x00000000, 0x3baaaaab, 0x3f2aaaab, 0x3f800000, 0x3eaaaaab, 0x3f000000, 0x3e2aaaab, 0x3e800000,
};

/* §4, FP4 thresholds t_1 ... t_7: the "f32 hex (use this)" column. */
static const uint32_t fp4_thr_hex[7] = {
    0x3b2aaab9, 0x3db00000, 0x3e555555, 0x3e955555, 0x3ed55556, 0x3f155550, 0x3f555555,
};

/* §4, the "exact f32 midpoint (not used)" column: five of these differ from the literals. */
static const uint32_t fp4_mid_hex[7] = {
    0x3b2aaaab, 0x3db00000, 0x3e555556, 0x3e955556, 0x3ed55556, 0x3f155556, 0x3f555556,
};

/* §4, R[r]: low three bits of the code of magnitude rank r. */
static const uint8_t fp4_rank[8] = {0x0, 0x1, 0x6, 0x7, 0x4, 0x5, 0x2, 0x3};

/* §11, E2M1 values of codes 0x0 ... 0x7 (0x8 ... 0xF negate them). */
static const float e2m1_val[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

static float H(uint32_t u)
{
    return t_f32_from_bits(u);
}

static void assert_bits(const char *what, int index, float got, uint32_t want)
{
    if (t_bits(got) != want) {
        print_error("%s[%d]: got %08x, want %08x\n", what, index, t_bits(got), want);
        fail();
    }
}

/* ---- independent bit formulas (double arithmetic, exact for these formats) ------------------- */

/* E4M3 "fn" (§10): S.EEEE.MMM, bias 7, 0x7F / 0xFF NaN, no Inf. */
static double e4m3_formula(int c)
{
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double v;

    if ((c & 0x7F) == 0x7F)
        return NAN;
    v = e == 0 ? ldexp(m / 8.0, -6) : ldexp(1.0 + m / 8.0, e - 7);
    return s ? -v : v;
}

/* E5M2 (§10): S.EEEEE.MM, bias 15, IEEE-style Inf and NaN. */
static double e5m2_formula(int c)
{
    int s = c >> 7, e = (c >> 2) & 31, m = c & 3;
    double v;

    if (e == 31)
        v = m == 0 ? INFINITY : NAN;
    else
        v = e == 0 ? ldexp(m / 4.0, -14) : ldexp(1.0 + m / 4.0, e - 15);
    return s ? -v : v;
}

/* Compare a decoded f32 with the formula: NaN must be NaN, everything else bit-exact (so the sign
 * of zero counts). */
static void assert_decodes(const char *what, int c, float got, double want)
{
    if (isnan(want)) {
        if (!isnan(got)) {
            print_error("%s code 0x%02x: got %08x, want NaN\n", what, c, t_bits(got));
            fail();
        }
        return;
    }
    assert_bits(what, c, got, t_bits((float)want));
}

/* ---- §2, §3: NF4 ----------------------------------------------------------------------------- */

static void test_nf4_codebook(void **state)
{
    (void)state;
    float cb[16];

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_NF4), 16);
    assert_int_equal(qs_codebook(QS_CODEBOOK_NF4, cb, 16), QS_OK);
    for (int c = 0; c < 16; c++) {
        assert_bits("qs_codebook(NF4)", c, cb[c], nf4_hex[c]);
        assert_bits("qs_nf4_codebook", c, qs_nf4_codebook[c], nf4_hex[c]);
    }
    /* §2: the decimals of the source are exactly these f32 values. */
    assert_bits("nf4 decimal", 1, -0.6961928009986877f, nf4_hex[1]);
    assert_bits("nf4 decimal", 13, 0.5626170039176941f, nf4_hex[13]);
}

static void test_nf4_thresholds(void **state)
{
    (void)state;
    for (int k = 0; k < 15; k++) {
        assert_bits("qs_nf4_thresholds", k, qs_nf4_thresholds[k], nf4_thr_hex[k]);
        /* §3: each threshold is the f32 midpoint of its two codes, computed in f32. */
        assert_bits("nf4 f32 midpoint", k, (H(nf4_hex[k]) + H(nf4_hex[k + 1])) / 2.0f,
                    nf4_thr_hex[k]);
    }
    /* The source literals round to the same f32 values. */
    assert_bits("nf4 literal", 0, (float)-0.8480964004993439, nf4_thr_hex[0]);
    assert_bits("nf4 literal", 14, (float)0.8614784181118011, nf4_thr_hex[14]);
}

/* Every NF4 rule point: code = #{k : x > t_k}; ties take the lower code, one ulp above the
 * higher; each codebook value encodes to its own code (encode(decode(c)) == c). */
static void test_nf4_encode_rule(void **state)
{
    (void)state;
    for (int k = 0; k < 15; k++) {
        float t = H(nf4_thr_hex[k]);
        assert_int_equal(qs_ref_nf4_encode(t), k);
        assert_int_equal(qs_ref_nf4_encode(nextafterf(t, INFINITY)), k + 1);
        assert_int_equal(qs_ref_nf4_encode(nextafterf(t, -INFINITY)), k);
    }
    for (int c = 0; c < 16; c++)
        assert_int_equal(qs_ref_nf4_encode(H(nf4_hex[c])), c);
    assert_int_equal(qs_ref_nf4_encode(NAN), 0);
    assert_int_equal(qs_ref_nf4_encode(-0.0f), 7);
    assert_int_equal(qs_ref_nf4_encode(INFINITY), 15);
    assert_int_equal(qs_ref_nf4_encode(-INFINITY), 0);
}

/* ---- §4: bitsandbytes FP4 -------------------------------------------------------------------- */

static void test_fp4_codebook(void **state)
{
    (void)state;
    float cb[16];

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_FP4), 16);
    assert_int_equal(qs_codebook(QS_CODEBOOK_FP4, cb, 16), QS_OK);
    for (int c = 0; c < 16; c++) {
        uint32_t want = fp4_hex[c & 7] | (c & 8 ? 0x80000000u : 0);
        assert_bits("qs_codebook(FP4)", c, cb[c], want);
        assert_bits("qs_fp4_codebook", c, qs_fp4_codebook[c], want);
    }
    /* §4 bit layout s e1 e0 m: raw 2^(4-e) (1 + m/2) for e >= 1, m/16 for e = 0; value raw / 12
     * rounded once to f32. */
    for (int c = 0; c < 8; c++) {
        int e = (c >> 1) & 3, m = c & 1;
        double raw = e == 0 ? m * 0.0625 : ldexp(1.0 + m / 2.0, 4 - e);
        assert_bits("fp4 raw/12", c, (float)(raw / 12.0), fp4_hex[c]);
    }
}

static void test_fp4_thresholds(void **state)
{
    (void)state;
    for (int k = 0; k < 7; k++) {
        assert_bits("qs_fp4_thresholds", k + 1, qs_fp4_thresholds[k], fp4_thr_hex[k]);
        assert_int_equal(qs_fp4_rank_code[k], fp4_rank[k]);
    }
    assert_int_equal(qs_fp4_rank_code[7], fp4_rank[7]);
    /* The literal column, not the midpoint column: pin the difference (§4 table). */
    int differ = 0;
    for (int k = 0; k < 7; k++) {
        float lo = H(fp4_hex[fp4_rank[k]]), hi = H(fp4_hex[fp4_rank[k + 1]]);
        assert_bits("fp4 exact midpoint", k + 1, (lo + hi) / 2.0f, fp4_mid_hex[k]);
        differ += fp4_thr_hex[k] != fp4_mid_hex[k];
    }
    assert_int_equal(differ, 5);
    /* The CUDA decimal literals round to the hex column. */
    assert_bits("fp4 literal", 1, 0.00260417f, fp4_thr_hex[0]);
    assert_bits("fp4 literal", 6, 0.583333f, fp4_thr_hex[5]);
    assert_bits("fp4 literal", 7, 0.8333333f, fp4_thr_hex[6]);
}

/* §4 encode: sign from x < 0, rank r = #{k : |x| > t_k}, code s | R[r]; ties at a threshold take
 * the smaller magnitude, one ulp above the larger. */
static void test_fp4_encode_rule(void **state)
{
    (void)state;
    for (int k = 0; k < 7; k++) {
        float t = H(fp4_thr_hex[k]);
        assert_int_equal(qs_ref_fp4_encode(t), fp4_rank[k]);
        assert_int_equal(qs_ref_fp4_encode(nextafterf(t, INFINITY)), fp4_rank[k + 1]);
        assert_int_equal(qs_ref_fp4_encode(-t), 0x8 | fp4_rank[k]);
        assert_int_equal(qs_ref_fp4_encode(-nextafterf(t, INFINITY)), 0x8 | fp4_rank[k + 1]);
    }
    /* Between the literal t_6 (3f155550) and the exact midpoint (3f155556): already 2/3. */
    assert_int_equal(qs_ref_fp4_encode(H(0x3f155553)), 0x2);
    /* encode(decode(c)) == c, except code 8 (-0.0 is not < 0, so it encodes as 0x0). */
    for (int c = 0; c < 16; c++)
        assert_int_equal(qs_ref_fp4_encode(qs_fp4_codebook[c]), c == 8 ? 0 : c);
    assert_int_equal(qs_ref_fp4_encode(H(0x80000001)), 0x8); /* tiny negative: -0 code */
    assert_int_equal(qs_ref_fp4_encode(NAN), 0x0);
    assert_int_equal(qs_ref_fp4_encode(-NAN), 0x0);
    assert_int_equal(qs_ref_fp4_encode(INFINITY), 0x3);
    assert_int_equal(qs_ref_fp4_encode(-INFINITY), 0xB);
}

/* ---- §11: E2M1 ------------------------------------------------------------------------------- */

static void test_e2m1(void **state)
{
    (void)state;
    float cb[16];
    /* §11 encode table: boundaries (ties to the even code) and the values just inside them. */
    static const struct {
        float x;
        uint8_t code;
    } vec[] = {
        {0.25f, 0x0}, {0.2500001f, 0x1}, {0.75f, 0x2}, {0.7499999f, 0x1}, {1.25f, 0x2},
        {1.2500001f, 0x3}, {1.75f, 0x4}, {1.7499999f, 0x3}, {2.5f, 0x4}, {2.5000002f, 0x5},
        {3.5f, 0x6}, {3.4999998f, 0x5}, {5.0f, 0x6}, {5.0000005f, 0x7}, {6.0f, 0x7},
        {1e30f, 0x7}, {INFINITY, 0x7}, {-INFINITY, 0xF}, {-0.0f, 0x8}, {-0.1f, 0x8},
        {NAN, 0x0}, {-NAN, 0x0}, {-0.75f, 0xA}, {-5.0f, 0xE},
    };

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_E2M1), 16);
    assert_int_equal(qs_codebook(QS_CODEBOOK_E2M1, cb, 16), QS_OK);
    for (int c = 0; c < 16; c++) {
        /* S.EE.M, bias 1: (1 + M/2) 2^(E-1), subnormal 0.5 M. */
        int e = (c >> 1) & 3, m = c & 1;
        double v = e == 0 ? 0.5 * m : ldexp(1.0 + m / 2.0, e - 1);
        float want = (float)(c & 8 ? -v : v);
        assert_true(want == (c & 8 ? -e2m1_val[c & 7] : e2m1_val[c & 7]));
        assert_bits("qs_codebook(E2M1)", c, cb[c], t_bits(want));
        assert_int_equal(qs_ref_e2m1_encode(want), c); /* -0.0 keeps its sign: 0x8 */
    }
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++)
        if (qs_ref_e2m1_encode(vec[i].x) != vec[i].code) {
            print_error("e2m1(%a): got 0x%x, want 0x%x\n", (double)vec[i].x,
                        qs_ref_e2m1_encode(vec[i].x), vec[i].code);
            fail();
        }
}

/* E2M1 through the public API: an MXFP4 block holding the 16 E2M1 values has amax 6, so its scale
 * is 2^0 (byte 7F) and every element must come back as its own code, low nibble first (§13). */
static void test_e2m1_roundtrip_api(void **state)
{
    (void)state;
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    float x[32] = {0}, back[32];
    uint8_t data[16], scale[1];
    qs_qtensor q = {0};
    static const uint8_t want[16] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE};

    for (int c = 0; c < 16; c++)
        x[c] = c & 8 ? -e2m1_val[c & 7] : e2m1_val[c & 7];
    qs_quant_params_init(&p, QS_FORMAT_MXFP4);
    q.data = data;
    q.data_bytes = sizeof data;
    q.scale = scale;
    q.scale_bytes = sizeof scale;
    assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 32, &q), QS_OK);
    assert_int_equal(scale[0], 0x7F);
    T_ASSERT_BYTES("mxfp4 codes of the E2M1 values", data, want, 16);
    assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 32, back, QS_DTYPE_F32, sizeof back), QS_OK);
    T_ASSERT_BYTES("mxfp4 decode of the E2M1 codes", back, x, sizeof x);
    qs_ctx_destroy(ctx);
}

/* ---- §10: E4M3 and E5M2 ---------------------------------------------------------------------- */

static void test_e4m3_all_codes(void **state)
{
    (void)state;
    float cb[256];

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_E4M3), 256);
    assert_int_equal(qs_codebook(QS_CODEBOOK_E4M3, cb, 256), QS_OK);
    for (int c = 0; c < 256; c++) {
        double want = e4m3_formula(c);
        assert_decodes("qs_codebook(E4M3)", c, cb[c], want);
        assert_decodes("qs_ref_e4m3_decode", c, qs_ref_e4m3_decode((uint8_t)c), want);
        if (!isnan(want))
            assert_int_equal(qs_ref_e4m3_encode((float)want), c);
    }
    /* Landmarks of the §10 table. */
    assert_true(e4m3_formula(0x7E) == 448.0 && e4m3_formula(0x08) == 0x1p-6);
    assert_true(e4m3_formula(0x01) == 0x1p-9 && e4m3_formula(0x80) == 0.0);
}

static void test_e5m2_all_codes(void **state)
{
    (void)state;
    float cb[256];

    assert_int_equal(qs_codebook_size(QS_CODEBOOK_E5M2), 256);
    assert_int_equal(qs_codebook(QS_CODEBOOK_E5M2, cb, 256), QS_OK);
    for (int c = 0; c < 256; c++) {
        double want = e5m2_formula(c);
        assert_decodes("qs_codebook(E5M2)", c, cb[c], want);
        assert_decodes("qs_ref_e5m2_decode", c, qs_ref_e5m2_decode((uint8_t)c), want);
        if (isnan(want))
            continue;
        /* Saturating encode: +-Inf come back as +-57344 (7B / FB), every finite code as itself. */
        if (isinf(want))
            assert_int_equal(qs_ref_e5m2_encode((float)want), c == 0x7C ? 0x7B : 0xFB);
        else
            assert_int_equal(qs_ref_e5m2_encode((float)want), c);
    }
    assert_true(e5m2_formula(0x7B) == 57344.0 && e5m2_formula(0x04) == 0x1p-14);
    assert_true(e5m2_formula(0x01) == 0x1p-16);
}

/* §10 test vectors (saturating columns; libqsparse quantizes in saturating mode). */
static void test_fp8_encode_vectors(void **state)
{
    (void)state;
    static const struct {
        float x;
        uint8_t e4m3;
    } v4[] = {
        {1.0f, 0x38}, {0.1f, 0x1D}, {240.0f, 0x77}, {448.0f, 0x7E}, {464.0f, 0x7E},
        {464.00003f, 0x7E}, {INFINITY, 0x7E}, {-INFINITY, 0xFE}, {NAN, 0x7F}, {-NAN, 0xFF},
        {-0.0f, 0x80}, {0x1p-10f, 0x00}, {3 * 0x1p-10f, 0x02}, {-0x1p-7f, 0x84},
    };
    static const struct {
        float x;
        uint8_t e5m2;
    } v5[] = {
        {1.0f, 0x3C}, {0.1f, 0x2E}, {57344.0f, 0x7B}, {61439.996f, 0x7B}, {61440.0f, 0x7B},
        {65504.0f, 0x7B}, {INFINITY, 0x7B}, {NAN, 0x7F}, {-NAN, 0xFF}, {-0.0f, 0x80},
        {0x1p-17f, 0x00}, {3 * 0x1p-17f, 0x02},
    };

    for (size_t i = 0; i < sizeof v4 / sizeof v4[0]; i++)
        if (qs_ref_e4m3_encode(v4[i].x) != v4[i].e4m3) {
            print_error("e4m3(%a): got %02x want %02x\n", (double)v4[i].x,
                        qs_ref_e4m3_encode(v4[i].x), v4[i].e4m3);
            fail();
        }
    for (size_t i = 0; i < sizeof v5 / sizeof v5[0]; i++)
        if (qs_ref_e5m2_encode(v5[i].x) != v5[i].e5m2) {
            print_error("e5m2(%a): got %02x want %02x\n", (double)v5[i].x,
                        qs_ref_e5m2_encode(v5[i].x), v5[i].e5m2);
            fail();
        }
}

/* Every FP8 code through qs_dequantize (scale 1.0: value(q) * 1 is the value) and every non-NaN
 * value back through qs_quantize with a given scale 1.0 (q = cvt_sat(x / 1)). */
static void fp8_roundtrip_api(int32_t format, double (*formula)(int))
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(format);
    uint8_t codes[256], back[256];
    float one = 1.0f, vals[256], scale_out = 0.0f;
    qs_qtensor q = qt_over(codes, 256, &one, 4);

    for (int c = 0; c < 256; c++)
        codes[c] = (uint8_t)c;
    assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 256, vals, QS_DTYPE_F32, sizeof vals), QS_OK);
    for (int c = 0; c < 256; c++)
        assert_decodes(qs_format_name(format), c, vals[c], formula(c));

    p.scale = 1.0f;
    q.data = back;
    q.scale = &scale_out;
    assert_int_equal(qs_quantize(ctx, &p, vals, QS_DTYPE_F32, 1, 256, &q), QS_OK);
    assert_true(scale_out == 1.0f);
    for (int c = 0; c < 256; c++) {
        double v = formula(c);
        int want = isnan(v) ? (c & 0x80) | 0x7F : isinf(v) ? (c & 0x80) | 0x7B : c;
        if (!isnan(v) || (t_bits(vals[c]) >> 31) == (unsigned)(c >> 7))
            assert_int_equal(back[c], want);
        else
            assert_true((back[c] & 0x7F) == 0x7F); /* a NaN decodes as some NaN */
    }
    qs_ctx_destroy(ctx);
}

static void test_e4m3_roundtrip_api(void **state)
{
    (void)state;
    fp8_roundtrip_api(QS_FORMAT_FP8_E4M3, e4m3_formula);
}

static void test_e5m2_roundtrip_api(void **state)
{
    (void)state;
    fp8_roundtrip_api(QS_FORMAT_FP8_E5M2, e5m2_formula);
}

/* ---- §12: E8M0 ------------------------------------------------------------------------------- */

static void test_e8m0_all_codes(void **state)
{
    (void)state;
    for (int e = 0; e < 256; e++) {
        float got = qs_ref_e8m0_decode((uint8_t)e);
        if (e == 255)
            assert_true(isnan(got));
        else
            assert_bits("qs_ref_e8m0_decode", e, got, t_bits((float)ldexp(1.0, e - 127)));
    }
    assert_bits("e8m0", 0, qs_ref_e8m0_decode(0x00), 0x00400000); /* 2^-127, not zero */
    assert_bits("e8m0", 127, qs_ref_e8m0_decode(0x7F), 0x3f800000);
    assert_bits("e8m0", 254, qs_ref_e8m0_decode(0xFE), 0x7f000000);
}

/* Every E8M0 byte through qs_dequantize: an MXFP8 row of 256 blocks, each of 32 E4M3 codes 0x38
 * (1.0), decodes block b to 2^(b - 127), and block 255 to NaN. */
static void test_e8m0_api(void **state)
{
    (void)state;
    enum { COLS = 256 * 32 };
    qs_ctx *ctx = t_ctx();
    qs_quant_params p;
    uint8_t *codes = malloc(COLS), scales[256];
    float *out = malloc(COLS * sizeof(float));
    qs_qtensor q = {0};

    assert_non_null(codes);
    assert_non_null(out);
    memset(codes, 0x38, COLS);
    for (int e = 0; e < 256; e++)
        scales[e] = (uint8_t)e;
    qs_quant_params_init(&p, QS_FORMAT_MXFP8);
    q.data = codes;
    q.data_bytes = COLS;
    q.scale = scales;
    q.scale_bytes = 256;
    assert_int_equal(qs_dequantize(ctx, &p, &q, 1, COLS, out, QS_DTYPE_F32,
                                   COLS * (int64_t)sizeof(float)),
                     QS_OK);
    for (int i = 0; i < COLS; i++) {
        int e = i / 32;
        if (e == 255)
            assert_true(isnan(out[i]));
        else
            assert_bits("mxfp8 E8M0 decode", i, out[i], t_bits((float)ldexp(1.0, e - 127)));
    }
    free(codes);
    free(out);
    qs_ctx_destroy(ctx);
}

/* ---- NF4 / FP4 encode(decode(c)) through the API --------------------------------------------- */

/* One block holding the 16 codebook values in code order has absmax 1.0, so inv = 1 and x = v:
 * the packed bytes are 01 23 ... EF (high nibble first). FP4's -0.0 (code 8) comes back as 0. */
static void bnb4_roundtrip_api(int32_t format, int32_t codebook, const uint8_t *want)
{
    qs_ctx *ctx = t_ctx();
    qs_quant_params p = params(format);
    float x[16], absmax = 0.0f, back[16];
    uint8_t data[8];
    qs_qtensor q = qt_over(data, sizeof data, &absmax, 4);

    assert_int_equal(qs_codebook(codebook, x, 16), QS_OK);
    assert_int_equal(qs_quantize(ctx, &p, x, QS_DTYPE_F32, 1, 16, &q), QS_OK);
    assert_bits("absmax", 0, absmax, 0x3f800000);
    T_ASSERT_BYTES(qs_format_name(format), data, want, 8);
    assert_int_equal(qs_dequantize(ctx, &p, &q, 1, 16, back, QS_DTYPE_F32, sizeof back), QS_OK);
    for (int c = 0; c < 16; c++)
        assert_bits("decode", c, back[c], t_bits(x[c == 8 && format == QS_FORMAT_FP4 ? 0 : c]));
    qs_ctx_destroy(ctx);
}

static void test_nf4_fp4_roundtrip_api(void **state)
{
    (void)state;
    static const uint8_t nf4_want[8] = {0x01, 0x23, 0x45, 0x67, 0x89, 0xAB, 0xCD, 0xEF};
    static const uint8_t fp4_want[8] = {0x01, 0x23, 0x45, 0x67, 0x09, 0xAB, 0xCD, 0xEF};

    bnb4_roundtrip_api(QS_FORMAT_NF4, QS_CODEBOOK_NF4, nf4_want);
    bnb4_roundtrip_api(QS_FORMAT_FP4, QS_CODEBOOK_FP4, fp4_want);
}

/* ---- qs_codebook error paths ----------------------------------------------------------------- */

static void test_codebook_errors(void **state)
{
    (void)state;
    t_buf b = t_buf_new(256 * sizeof(float));
    static const int32_t ids[] = {QS_CODEBOOK_NF4, QS_CODEBOOK_FP4, QS_CODEBOOK_DYN8,
                                  QS_CODEBOOK_E2M1, QS_CODEBOOK_E4M3, QS_CODEBOOK_E5M2};

    assert_int_equal(qs_codebook_size(0), 0);
    assert_int_equal(qs_codebook_size(7), 0);
    assert_int_equal(qs_codebook(0, b.p, 256), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_codebook(99, b.p, 256), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_codebook(QS_CODEBOOK_NF4, NULL, 16), QS_ERR_INVALID_ARG);
    assert_int_equal(qs_codebook(QS_CODEBOOK_NF4, b.p, -1), QS_ERR_INVALID_ARG);
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++) {
        int64_t size = qs_codebook_size(ids[i]);
        assert_true(size == 16 || size == 256);
        assert_int_equal(qs_codebook(ids[i], b.p, size - 1), QS_ERR_BUFFER_TOO_SMALL);
    }
    assert_true(t_buf_untouched(&b));
    /* An exact capacity writes exactly `size` floats. */
    assert_int_equal(qs_codebook(QS_CODEBOOK_NF4, b.p, 16), QS_OK);
    assert_true(t_buf_guards_ok(&b));
    assert_int_equal(((uint8_t *)b.p)[16 * 4], T_CANARY);
    t_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nf4_codebook),
        cmocka_unit_test(test_nf4_thresholds),
        cmocka_unit_test(test_nf4_encode_rule),
        cmocka_unit_test(test_fp4_codebook),
        cmocka_unit_test(test_fp4_thresholds),
        cmocka_unit_test(test_fp4_encode_rule),
        cmocka_unit_test(test_e2m1),
        cmocka_unit_test(test_e2m1_roundtrip_api),
        cmocka_unit_test(test_e4m3_all_codes),
        cmocka_unit_test(test_e5m2_all_codes),
        cmocka_unit_test(test_fp8_encode_vectors),
        cmocka_unit_test(test_e4m3_roundtrip_api),
        cmocka_unit_test(test_e5m2_roundtrip_api),
        cmocka_unit_test(test_e8m0_all_codes),
        cmocka_unit_test(test_e8m0_api),
        cmocka_unit_test(test_nf4_fp4_roundtrip_api),
        cmocka_unit_test(test_codebook_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
