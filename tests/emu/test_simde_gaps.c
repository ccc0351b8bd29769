/* SPDX-License-Identifier: MIT */
/*
 * The emulated AVX-512 intrinsics of simde_gaps.h against hand-worked results from the
 * instruction definitions (Intel SDM): masked lanes that never touch memory (a guard page after
 * the data), the integer indefinite of out-of-range conversions, directed rounding of double to
 * float, F16C rounding, VFPCLASSPS per category, the operand order of GCC's reductions (which
 * decides NaN and signed-zero results), fused multiply-add, shuffles, narrowing and compares.
 * Built and run only in an avx512_emulation build (suite "emu"), where these names are the
 * emulation; the kernel tests then rest on them.
 */
#include "../common.h"

#include <float.h>
#include <limits.h>

#include <immintrin.h>

#define ALL16 ((__mmask16)0xFFFF)

/* p, with the compiler no longer knowing what it points to: a constant input would let it fold a
 * conversion builtin by C's rules (GCC -O1 turned VCVTTPS2DQ of NaN into 0), and the test is of
 * what runs, not of the folding. */
static const void *opaque(const void *p)
{
    __asm__("" : "+r"(p));
    return p;
}

static void check_f32(const char *what, __m512 v, const float want[16])
{
    float got[16];
    _mm512_storeu_ps(got, v);
    t_check_bytes(what, got, want, sizeof got, 1);
}

static void check_i32(const char *what, __m512i v, const int32_t want[16])
{
    int32_t got[16];
    _mm512_storeu_si512(got, v);
    t_check_bytes(what, got, want, sizeof got, 1);
}

/* Masked loads read only their lanes: the data ends at a PROT_NONE page, so one byte more
 * faults; masked stores write only theirs. */
static void test_masked_memory(void **state)
{
    (void)state;
    t_page_buf pb = t_page_buf_new(64);
    float *f = pb.p;
    for (int i = 0; i < 16; i++)
        f[i] = (float)(i + 1);
    const float *last8 = f + 8, *last4 = f + 12;
    float want[16] = {9, 10, 11, 12, 13, 14, 15, 16};
    check_f32("maskz_loadu_ps", _mm512_maskz_loadu_ps(0x00FF, last8), want);
    float got8[8], want8[8] = {13, 14, 15, 16, 0, 0, 0, 0};
    _mm256_storeu_ps(got8, _mm256_maskz_loadu_ps(0x0F, last4));
    t_check_bytes("mm256_maskz_loadu_ps", got8, want8, sizeof got8, 1);

    const uint8_t *b = (const uint8_t *)pb.p + 54; /* the last 10 bytes */
    uint8_t gotb[64], wantb[64] = {0};
    memcpy(wantb, b, 10);
    _mm512_storeu_si512(gotb, _mm512_maskz_loadu_epi8((1ull << 10) - 1, b));
    t_check_bytes("maskz_loadu_epi8", gotb, wantb, 64, 1);
    _mm_storeu_si128((__m128i *)gotb, _mm_maskz_loadu_epi8(0x03FF, b));
    t_check_bytes("mm_maskz_loadu_epi8", gotb, wantb, 16, 1);
    _mm256_storeu_si256((__m256i *)gotb, _mm256_maskz_loadu_epi8(0x03FF, b));
    t_check_bytes("mm256_maskz_loadu_epi8", gotb, wantb, 32, 1);

    /* merge-masked 16-bit load: lanes outside the mask keep the source */
    int16_t src16[32], got16[32], want16[32];
    const int16_t *h = (const int16_t *)pb.p + 30; /* the last 2 halves */
    for (int i = 0; i < 32; i++)
        src16[i] = want16[i] = (int16_t)(-i - 1);
    want16[0] = h[0];
    want16[1] = h[1];
    _mm512_storeu_si512(got16, _mm512_mask_loadu_epi16(_mm512_loadu_si512(src16), 0x3, h));
    t_check_bytes("mask_loadu_epi16", got16, want16, sizeof got16, 1);

    /* masked stores at the page end: lanes 0...3 only */
    float *dst = (float *)pb.p + 12;
    _mm512_mask_storeu_ps(dst, 0x000F, _mm512_set1_ps(-1.0f));
    for (int i = 0; i < 4; i++)
        assert_true(dst[i] == -1.0f);
    assert_true(f[11] == 12.0f);
    uint8_t row[16];
    memset(row, 0xAA, sizeof row);
    _mm512_mask_cvtepi32_storeu_epi8(row, 0x0005, _mm512_set1_epi32(0x1234567F));
    assert_int_equal(row[0], 0x7F);
    assert_int_equal(row[1], 0xAA);
    assert_int_equal(row[2], 0x7F);
    assert_int_equal(row[3], 0xAA);
    t_page_buf_free(&pb);
}

/* VCVTPS2DQ rounds to nearest even, VCVTTPS2DQ truncates; NaN, Inf and out-of-range values give
 * the integer indefinite 0x80000000. */
static void test_float_to_int(void **state)
{
    (void)state;
    const float in[16] = {2.5f,          3.5f,           -2.5f, -0.5f,    1.5f,      2147483520.0f,
                          2147483648.0f, -2147483648.0f, NAN,   INFINITY, -INFINITY, 0.49999997f,
                          1e-45f,        -1.5f,          1.99f, -1.99f};
    const int32_t rn[16] = {2,       4,       -2,      0, 2, 2147483520, INT_MIN, INT_MIN,
                            INT_MIN, INT_MIN, INT_MIN, 0, 0, -2,         2,       -2};
    const int32_t tz[16] = {2,       3,       -2,      0, 1, 2147483520, INT_MIN, INT_MIN,
                            INT_MIN, INT_MIN, INT_MIN, 0, 0, -1,         1,       -1};
    check_i32("cvtps_epi32", _mm512_cvtps_epi32(_mm512_loadu_ps(opaque(in))), rn);
    check_i32("cvttps_epi32", _mm512_cvttps_epi32(_mm512_loadu_ps(opaque(in))), tz);

    const int32_t ints[16] = {16777217, 16777219, -2147483647, 1, -1, 0, 33554435, 7};
    const float want[16] = {16777216.0f, 16777220.0f, -2147483648.0f, 1, -1, 0, 33554436.0f, 7};
    check_f32("cvtepi32_ps", _mm512_cvtepi32_ps(_mm512_loadu_si512(opaque(ints))), want);
}

/* VCVTPD2PS with an embedded rounding mode, per lane of 8 doubles. */
static void test_double_to_float_rounding(void **state)
{
    (void)state;
    const double in[8] = {1.0 + 0x1p-30, -(1.0 + 0x1p-30), 1e300, -1e300,
                          0x1p-160,      0x3p-151,         1.0,   -0x3p-151};
    const float fmin = 0x1p-149f;
    const float want[4][8] = {
        /* nearest */
        {1.0f, -1.0f, INFINITY, -INFINITY, 0.0f, fmin, 1.0f, -fmin},
        /* toward -Inf */
        {1.0f, -(1.0f + 0x1p-23f), FLT_MAX, -INFINITY, 0.0f, 0.0f, 1.0f, -fmin},
        /* toward +Inf */
        {1.0f + 0x1p-23f, -1.0f, INFINITY, -FLT_MAX, fmin, fmin, 1.0f, -0.0f},
        /* toward zero */
        {1.0f, -1.0f, FLT_MAX, -FLT_MAX, 0.0f, 0.0f, 1.0f, -0.0f},
    };
    float got[8];
    const __m512d v = _mm512_loadu_pd(opaque(in));

    _mm256_storeu_ps(got, _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    t_check_bytes("cvt_roundpd_ps nearest", got, want[0], sizeof got, 1);
    _mm256_storeu_ps(got, _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    t_check_bytes("cvt_roundpd_ps down", got, want[1], sizeof got, 1);
    _mm256_storeu_ps(got, _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC));
    t_check_bytes("cvt_roundpd_ps up", got, want[2], sizeof got, 1);
    _mm256_storeu_ps(got, _mm512_cvt_roundpd_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC));
    t_check_bytes("cvt_roundpd_ps toward zero", got, want[3], sizeof got, 1);

    const double nan_in[8] = {NAN, NAN, NAN, NAN, NAN, NAN, NAN, NAN};
    _mm256_storeu_ps(got, _mm512_cvt_roundpd_ps(_mm512_loadu_pd(opaque(nan_in)),
                                                _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC));
    for (int i = 0; i < 8; i++)
        assert_true(isnan(got[i]));
}

/* F16C both ways, ties to even: 1 + 2^-11 -> 1.0, 1 + 3 * 2^-11 -> 1 + 2^-9, 65520 -> Inf,
 * 2^-25 -> 0, 3 * 2^-25 -> 2^-23, a quiet NaN keeps its quiet bit. */
static void test_half(void **state)
{
    (void)state;
    const float in[16] = {1.0f + 0x1p-11f, 1.0f + 0x3p-11f, 65520.0f, 65519.0f,
                          0x1p-25f,        0x3p-25f,        -0.0f,    NAN,
                          -2.0f,           0x1p-24f,        65504.0f, -INFINITY};
    const uint16_t want[16] = {0x3C00, 0x3C02, 0x7C00, 0x7BFF, 0x0000, 0x0002, 0x8000, 0x7E00,
                               0xC000, 0x0001, 0x7BFF, 0xFC00, 0,      0,      0,      0};
    uint16_t got[16];
    _mm256_storeu_si256((__m256i *)got,
                        _mm512_cvtps_ph(_mm512_loadu_ps(opaque(in)), _MM_FROUND_TO_NEAREST_INT));
    t_check_bytes("cvtps_ph", got, want, sizeof got, 1);

    const float back[16] = {1.0f,  1.0f + 0x1p-9f, INFINITY, 65504.0f,
                            0.0f,  0x1p-23f,       -0.0f,    t_f32_from_bits(0x7FC00000),
                            -2.0f, 0x1p-24f,       65504.0f, -INFINITY};
    check_f32("cvtph_ps", _mm512_cvtph_ps(_mm256_loadu_si256(opaque(want))), back);
}

/* VFPCLASSPS, one category per immediate bit, on 16 hand-picked values. */
static void test_fpclass(void **state)
{
    (void)state;
    const uint32_t in[16] = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x3F800000, 0xBF800000,
                             0x7F800000, 0xFF800000, 0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001,
                             0x7F7FFFFF, 0xFF7FFFFF, 0x80800000, 0x00800000};
    const __m512 v = _mm512_loadu_ps(opaque(in));
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x01), 0x0300); /* QNaN */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x02), 0x0001); /* +0 */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x04), 0x0002); /* -0 */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x08), 0x0040); /* +Inf */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x10), 0x0080); /* -Inf */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x20), 0x000C); /* denormal */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x40), 0x6028); /* negative finite, not -0 */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x80), 0x0C00); /* SNaN */
    assert_int_equal(_mm512_fpclass_ps_mask(v, 0x54), 0x60AA); /* what nvfp4_avx512.c asks */
}

/* The reductions in GCC's order: max(hi, lo) per 256-bit half, then 128, then lanes {2,3,0,1},
 * then {1,0,1,0}; VMAXPS returns its second operand for a NaN or two zeros. So a NaN in lane 3
 * survives and one in lane 11 does not; -0 in lane 3 comes out, in lane 11 it does not. */
static void test_reductions(void **state)
{
    (void)state;
    float a[16];
    for (int i = 0; i < 16; i++)
        a[i] = 1.0f;
    a[3] = NAN;
    assert_true(isnan(_mm512_reduce_max_ps(_mm512_loadu_ps(a))));
    a[3] = 1.0f;
    a[11] = NAN;
    assert_true(_mm512_reduce_max_ps(_mm512_loadu_ps(a)) == 1.0f);
    memset(a, 0, sizeof a);
    a[3] = -0.0f;
    assert_int_equal(t_bits(_mm512_reduce_max_ps(_mm512_loadu_ps(a))), 0x80000000);
    assert_int_equal(t_bits(_mm512_reduce_min_ps(_mm512_loadu_ps(a))), 0x80000000);
    a[3] = 0.0f;
    a[11] = -0.0f;
    assert_int_equal(t_bits(_mm512_reduce_max_ps(_mm512_loadu_ps(a))), 0x00000000);
    /* the sum: (2^24 + 0) + (1 + 1) exactly, where a left-to-right sum would lose both ones */
    memset(a, 0, sizeof a);
    a[0] = 0x1p24f;
    a[1] = 1.0f;
    a[3] = 1.0f;
    assert_true(_mm512_reduce_add_ps(_mm512_loadu_ps(a)) == 16777218.0f);

    const int32_t ints[16] = {5, -7, 3, INT_MIN, 9, 0, -1, 2, 8, 1, 1, 1, 1, 1, 1, 4};
    __m512i vi = _mm512_loadu_si512(ints);
    assert_int_equal(_mm512_reduce_max_epi32(vi), 9);
    assert_int_equal(_mm512_reduce_min_epi32(vi), INT_MIN);
    assert_int_equal(_mm512_reduce_max_epu32(vi), 0xFFFFFFFFu); /* -1 as unsigned */
}

/* Fused multiply-add rounds once: (1 + 2^-12)^2 - (1 + 2^-11) is 2^-24, which a separate multiply
 * would round away; lanes outside the mask keep c. */
static void test_fmadd_masked(void **state)
{
    (void)state;
    const __m512 a = _mm512_set1_ps(1.0f + 0x1p-12f), c = _mm512_set1_ps(-(1.0f + 0x1p-11f));
    float want[16];
    for (int i = 0; i < 16; i++)
        want[i] = (i & 1) ? -(1.0f + 0x1p-11f) : 0x1p-24f;
    check_f32("mask3_fmadd_ps", _mm512_mask3_fmadd_ps(a, a, c, 0x5555), want);
}

/* Lane moves: in-lane dword shuffle, 128-bit block shuffles, expand, gather, widening and
 * narrowing. */
static void test_lane_moves(void **state)
{
    (void)state;
    int32_t idx[16], want[16];
    float src[16], wantf[16];
    for (int i = 0; i < 16; i++) {
        idx[i] = i;
        src[i] = (float)(i + 1);
    }
    const __m512i v = _mm512_loadu_si512(idx);

    for (int i = 0; i < 16; i++)
        want[i] = (i & ~3) + 3 - (i & 3);
    check_i32("shuffle_epi32 0x1B", _mm512_shuffle_epi32(v, 0x1B), want);

    /* blocks: a[3], a[2], b[1], b[0] with b = a + 16 */
    const __m512i b = _mm512_add_epi32(v, _mm512_set1_epi32(16));
    for (int i = 0; i < 16; i++) {
        static const int blk[4] = {3, 2, 5, 4};
        want[i] = 4 * blk[i / 4] + (i & 3);
    }
    check_i32("shuffle_i64x2 0x1B", _mm512_shuffle_i64x2(v, b, 0x1B), want);
    check_i32("shuffle_f32x4 0x1B",
              _mm512_castps_si512(
                  _mm512_shuffle_f32x4(_mm512_castsi512_ps(v), _mm512_castsi512_ps(b), 0x1B)),
              want);

    /* expand: lanes 0, 2, 5, 7, 8, 10, 13, 15 take 1 ... 8 */
    memset(wantf, 0, sizeof wantf);
    for (int i = 0, j = 0; i < 16; i++)
        if (0xA5A5 >> i & 1)
            wantf[i] = (float)++j;
    check_f32("maskz_expand_ps", _mm512_maskz_expand_ps(0xA5A5, _mm512_loadu_ps(src)), wantf);

    /* gather in reverse order */
    for (int i = 0; i < 16; i++) {
        idx[i] = 15 - i;
        wantf[i] = src[15 - i];
    }
    check_f32("i32gather_ps", _mm512_i32gather_ps(_mm512_loadu_si512(idx), src, 4), wantf);

    /* widening: sign and zero extension */
    uint8_t by[16] = {0x80, 0x7F, 0xFF, 0x01};
    const int32_t s8[16] = {-128, 127, -1, 1}, u8[16] = {128, 127, 255, 1};
    check_i32("cvtepi8_epi32", _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)by)), s8);
    check_i32("cvtepu8_epi32", _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)by)), u8);
    uint8_t by32[32] = {0x80, 0x7F, 0xFF, 0x01};
    uint16_t w16[32], want_w16[32] = {128, 127, 255, 1};
    by32[31] = 0xFE;
    want_w16[31] = 254;
    _mm512_storeu_si512(w16, _mm512_cvtepu8_epi16(_mm256_loadu_si256((const __m256i *)by32)));
    t_check_bytes("cvtepu8_epi16", w16, want_w16, sizeof w16, 1);
    uint16_t hw[16] = {0xFFFF, 0x8000, 1};
    const int32_t u16[16] = {65535, 32768, 1};
    check_i32("cvtepu16_epi32", _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)hw)),
              u16);

    /* narrowing keeps the low bits */
    uint8_t n8[16];
    _mm_storeu_si128((__m128i *)n8, _mm512_cvtepi32_epi8(_mm512_set1_epi32(0x12345678)));
    for (int i = 0; i < 16; i++)
        assert_int_equal(n8[i], 0x78);
    uint16_t n16[16];
    _mm256_storeu_si256((__m256i *)n16, _mm512_cvtepi32_epi16(_mm512_set1_epi32(0x12345678)));
    for (int i = 0; i < 16; i++)
        assert_int_equal(n16[i], 0x5678);
    _mm_storeu_si128((__m128i *)n16, _mm512_cvtepi64_epi16(_mm512_set1_epi64(0x1122334455667788)));
    for (int i = 0; i < 8; i++)
        assert_int_equal(n16[i], 0x7788);
    _mm_storeu_si128((__m128i *)n8, _mm512_cvtepi64_epi8(_mm512_set1_epi64(0x1122334455667788)));
    for (int i = 0; i < 16; i++)
        assert_int_equal(n8[i], i < 8 ? 0x88 : 0); /* the upper half is zeroed */
}

/* Compares: signed against unsigned, merge masks, NaN in an ordered compare. */
static void test_compares(void **state)
{
    (void)state;
    const __m512i m1 = _mm512_set1_epi32(-1), one = _mm512_set1_epi32(1);
    assert_int_equal(_mm512_cmplt_epi32_mask(m1, one), ALL16);
    assert_int_equal(_mm512_cmplt_epu32_mask(m1, one), 0);
    assert_int_equal(_mm512_cmpgt_epu32_mask(m1, one), ALL16);
    assert_int_equal(_mm512_cmpeq_epu32_mask(m1, m1), ALL16);
    assert_int_equal(_mm512_mask_cmpgt_epu32_mask(0x0F0F, m1, one), 0x0F0F);
    assert_int_equal(_mm512_mask_cmplt_epu32_mask(0x0F0F, one, m1), 0x0F0F);
    assert_int_equal(_mm512_mask_cmpeq_epu32_mask(0x00F0, one, one), 0x00F0);

    float a[16];
    for (int i = 0; i < 16; i++)
        a[i] = (float)i;
    a[5] = NAN;
    assert_int_equal(
        _mm512_mask_cmp_ps_mask(0x7FFF, _mm512_loadu_ps(a), _mm512_set1_ps(3.0f), _CMP_GT_OQ),
        0x7FD0); /* lanes 4 ... 14 but not NaN lane 5 (lane 15 outside the mask) */

    uint8_t x[64], y[64];
    memset(x, 7, sizeof x);
    memcpy(y, x, sizeof y);
    y[0] = 8;
    y[63] = 0;
    assert_true(_mm512_cmpneq_epi8_mask(_mm512_loadu_si512(x), _mm512_loadu_si512(y)) ==
                ((1ull << 63) | 1ull));
    int16_t p[16] = {1, 2, 3}, q[16] = {1, 0, 3};
    assert_int_equal(_mm256_cmpeq_epi16_mask(_mm256_loadu_si256((const __m256i *)p),
                                             _mm256_loadu_si256((const __m256i *)q)),
                     0xFFFD);
    const __m128i t = _mm_setr_epi8(1, 2, 4, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 16);
    assert_int_equal(_mm_test_epi8_mask(t, _mm_set1_epi8(0x0A)), 0x000A);
    uint8_t s[16];
    _mm_storeu_si128((__m128i *)s, _mm_maskz_set1_epi8(0x8001, 5));
    for (int i = 0; i < 16; i++)
        assert_int_equal(s[i], (i == 0 || i == 15) ? 5 : 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masked_memory),
        cmocka_unit_test(test_float_to_int),
        cmocka_unit_test(test_double_to_float_rounding),
        cmocka_unit_test(test_half),
        cmocka_unit_test(test_fpclass),
        cmocka_unit_test(test_reductions),
        cmocka_unit_test(test_fmadd_masked),
        cmocka_unit_test(test_lane_moves),
        cmocka_unit_test(test_compares),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
