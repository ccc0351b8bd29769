/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 quantize and dequantize for AVX2 + FMA + F16C (docs/formats.md §11, §14),
 * bit-identical to src/ref/nvfp4_ref.c, with its operation order: per block of 16, amax (NaN
 * ignored), S = fl(amax / fl(6 * s_global)), S = 0 -> 0x38, S < 2^-9 -> 2^-9 (a comparison, so
 * NaN stays NaN), scale byte E4M3_RNE_sat(S) without sign, den = fl(value(S) * s_global), codes
 * E2M1_RNE_sat(fl(v / den)) (NaN -> 0; den = 0 -> 0), decode fl(value(P) * den). The block
 * scales of 8 blocks are computed in one vector pass. Where the 8 dens are finite and > 0, the
 * codes come from three comparisons of |v| against the block's exact thresholds (nvfp4_rows.h:
 * the same codes as the division, without one); otherwise, and for the last blocks of a call
 * (fewer than 8), by the division itself. A tail goes
 * through a zero-padded local copy (+0.0 changes no amax), so nothing past n is read or written.
 * The E4M3/E2M1 rounding and decoding are shared through minifloat_avx2.h.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"
#include "lut16_avx2.h"
#include "minifloat_avx2.h"
#include "nan_avx2.h"
#include "nvfp4_rows.h"
#include "prefetch_x86.h"

/* E2M1 codes (0...15) of 8 floats, one per 32-bit lane; NaN -> 0 (§11), Inf saturates. */
static inline __m256i e2m1_encode_avx2(__m256 y)
{
    __m256i a = _mm256_and_si256(_mm256_castps_si256(y), _mm256_set1_epi32(0x7FFFFFFF));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));

    return _mm256_andnot_si256(is_nan, e2m1_encode_finite_avx2(y));
}

/* Scale bytes of up to 8 blocks from their amaxes, one per lane, and den = fl(value(scale) *
 * s_global) per lane: the reference's block-scale steps, vectorized across blocks. */
static inline __m256i nvfp4_scales_avx2(__m256 amax, float s_global, __m256 *den)
{
    __m256 s = _mm256_div_ps(amax, _mm256_set1_ps(6.0f * s_global));
    __m256 zero = _mm256_cmp_ps(s, _mm256_setzero_ps(), _CMP_EQ_OQ);
    /* a comparison, not a max, so that NaN stays NaN */
    __m256 small = _mm256_cmp_ps(s, _mm256_set1_ps(0x1p-9f), _CMP_LT_OQ);
    __m256i code;

    s = _mm256_blendv_ps(s, _mm256_set1_ps(0x1p-9f), small);
    code = _mm256_and_si256(e4m3_encode_avx2(s), _mm256_set1_epi32(0x7F)); /* unsigned */
    /* all-zero block: 1.0 */
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x38), _mm256_castps_si256(zero));
    *den = _mm256_mul_ps(e4m3_decode_avx2(code), _mm256_set1_ps(s_global));
    return code;
}

/* Block amax with NaN ignored: maxps returns its second operand when the first is NaN. */
static inline float nvfp4_amax_avx2(__m256 x0, __m256 x1)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m = _mm256_max_ps(_mm256_and_ps(x0, absm), _mm256_setzero_ps());

    return hmax_avx2(_mm256_max_ps(_mm256_and_ps(x1, absm), m));
}

/* Codes of 8 values divided by den; every code 0 where den == 0 (subnormal s_global). */
static inline __m256i nvfp4_codes_avx2(__m256 x, __m256 den)
{
    __m256 nz = _mm256_cmp_ps(den, _mm256_setzero_ps(), _CMP_NEQ_UQ);
    return _mm256_and_si256(e2m1_encode_avx2(_mm256_div_ps(x, den)), _mm256_castps_si256(nz));
}

/* Row s of thresholds (nvfp4_rows.h): floor_f32(M_k * den), M_k * den exact in double; the
 * nearest f32, one less where it rounded up (it is never equal: M_k * den is no f32). */
static inline void nvfp4_row_fill_avx2(struct nvfp4_rows *r, int s)
{
    static const double mid[8] = NVFP4_MIDPOINTS_INIT;
    const __m256d den = _mm256_set1_pd((double)(qs_ue4m3_values[s] * r->s_global));

    for (int h = 0; h < 2; h++) {
        __m256d b = _mm256_mul_pd(_mm256_loadu_pd(mid + 4 * h), den);
        __m128 f = _mm256_cvtpd_ps(b); /* +Inf past FLT_MAX: then FLT_MAX */
        __m256d up = _mm256_cmp_pd(_mm256_cvtps_pd(f), b, _CMP_GT_OQ);
        __m128i m = _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(
            _mm256_castpd_si256(up), _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6)));
        _mm_store_si128((__m128i *)(r->f[s] + 4 * h), _mm_add_epi32(_mm_castps_si128(f), m));
    }
}

/* Codes (0...15, one per 32-bit lane) of 8 values of a block against its row of thresholds
 * (nvfp4_rows.h), as nvfp4_row_codes_avx512 in nvfp4_avx512.c: #{k : |v| > F_k} by comparisons
 * against F_3, then F_1 or F_5, then F_0, F_2, F_4 or F_6 (lane c of the row, c = 0, 2, 4, 6);
 * then the sign bit for every negative v that is not NaN (NaN: code 0, §11). */
static inline __m256i nvfp4_row_codes_avx2(__m256 x, const float *row, __m256 t)
{
    const __m256 a = _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF)));
    __m256 m1 = _mm256_cmp_ps(a, _mm256_broadcast_ss(row + 3), _CMP_GT_OQ);
    __m256 m2 = _mm256_cmp_ps(
        a, _mm256_blendv_ps(_mm256_broadcast_ss(row + 1), _mm256_broadcast_ss(row + 5), m1),
        _CMP_GT_OQ);
    __m256i c = _mm256_or_si256(_mm256_and_si256(_mm256_castps_si256(m1), _mm256_set1_epi32(4)),
                                _mm256_and_si256(_mm256_castps_si256(m2), _mm256_set1_epi32(2)));
    __m256 m3 = _mm256_cmp_ps(a, _mm256_permutevar8x32_ps(t, c), _CMP_GT_OQ);
    /* v with NaN turned into +0: its sign bit says "negative and not NaN" */
    __m256 sv = _mm256_and_ps(x, _mm256_cmp_ps(x, x, _CMP_ORD_Q));

    c = _mm256_sub_epi32(c, _mm256_castps_si256(m3)); /* m3 is -1 where it holds */
    return _mm256_castps_si256(
        _mm256_blendv_ps(_mm256_castsi256_ps(c),
                         _mm256_castsi256_ps(_mm256_or_si256(c, _mm256_set1_epi32(8))), sv));
}

/* The amaxes of the 8 full blocks at v, block k in lane k, NaN ignored: per block the maximum
 * of its two vectors' magnitudes (maxps returns its second operand when the first is NaN, so a
 * NaN lane becomes 0 first), then a transposing reduction of the 8 NaN-free vectors: 128-bit
 * halves of blocks k and k + 4, pairs of lanes, lanes. Maxima are exact, so their order does not
 * matter; 7 shuffles and maxima per level instead of a horizontal maximum per block through
 * memory. */
static inline __m256 nvfp4_amax8_avx2(const float *v)
{
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 m[8], t[4], u[2];

    for (int k = 0; k < 8; k++)
        m[k] = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + 16 * k + 8), absm),
                             _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(v + 16 * k), absm),
                                           _mm256_setzero_ps()));
    /* t[k]: block k in the low half, block k + 4 in the high half (four lanes each) */
    for (int k = 0; k < 4; k++)
        t[k] = _mm256_max_ps(_mm256_permute2f128_ps(m[k], m[k + 4], 0x20),
                             _mm256_permute2f128_ps(m[k], m[k + 4], 0x31));
    /* u[h], per half: two lanes of block 2h (resp. + 4), two of block 2h + 1 (resp. + 4) */
    for (int h = 0; h < 2; h++)
        u[h] = _mm256_max_ps(_mm256_shuffle_ps(t[2 * h], t[2 * h + 1], 0x44),
                             _mm256_shuffle_ps(t[2 * h], t[2 * h + 1], 0xEE));
    return _mm256_max_ps(_mm256_shuffle_ps(u[0], u[1], 0x88), _mm256_shuffle_ps(u[0], u[1], 0xDD));
}

/* The scale bytes (one per lane) and dens of the 8 full blocks at v. */
static inline __m256i nvfp4_group_scales_avx2(const float *v, float s_global, __m256 *den)
{
    return nvfp4_scales_avx2(nvfp4_amax8_avx2(v), s_global, den);
}

/* 8 full blocks (128 values) with their scale bytes `code` and dens: 64 data bytes and 8 scale
 * bytes. */
static inline void nvfp4_group_avx2(const float *v, __m256i code, __m256 den,
                                    struct nvfp4_rows *rows, uint8_t *dst, uint8_t *scales)
{
    float dens[8];
    uint8_t sb[8];
    __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64((__m128i *)sb, _mm_packus_epi16(c16, c16));
    memcpy(scales, sb, 8);
    /* den finite and > 0 in every lane: the thresholds; else the division */
    __m256 ok = _mm256_and_ps(_mm256_cmp_ps(den, _mm256_setzero_ps(), _CMP_GT_OQ),
                              _mm256_cmp_ps(den, _mm256_set1_ps(0x1.fffffep127f), _CMP_LE_OQ));
    if (_mm256_movemask_ps(ok) == 0xFF) {
        for (int k = 0; k < 8; k++) /* scalar work beside the vector work */
            if (sb[k] < rows->lo || sb[k] > rows->hi)
                nvfp4_rows_cover(rows, sb[k] < rows->lo ? sb[k] : rows->lo,
                                 sb[k] > rows->hi ? sb[k] : rows->hi, nvfp4_row_fill_avx2);
        for (int k = 0; k < 8; k += 2) {
            const float *r0 = rows->f[sb[k]], *r1 = rows->f[sb[k + 1]];
            const __m256 t0 = _mm256_load_ps(r0), t1 = _mm256_load_ps(r1);
            const float *x = v + 16 * k;
            _mm_storeu_si128((__m128i *)(dst + 8 * k),
                             pack_nibbles_avx2(nvfp4_row_codes_avx2(_mm256_loadu_ps(x), r0, t0),
                                               nvfp4_row_codes_avx2(_mm256_loadu_ps(x + 8), r0, t0),
                                               nvfp4_row_codes_avx2(_mm256_loadu_ps(x + 16), r1, t1),
                                               nvfp4_row_codes_avx2(_mm256_loadu_ps(x + 24), r1,
                                                                    t1)));
        }
        return;
    }
    _mm256_storeu_ps(dens, den);
    for (int k = 0; k < 8; k += 2) {
        __m256 d0 = _mm256_set1_ps(dens[k]), d1 = _mm256_set1_ps(dens[k + 1]);
        const float *x = v + 16 * k;
        _mm_storeu_si128((__m128i *)(dst + 8 * k),
                         pack_nibbles_avx2(nvfp4_codes_avx2(_mm256_loadu_ps(x), d0),
                                           nvfp4_codes_avx2(_mm256_loadu_ps(x + 8), d0),
                                           nvfp4_codes_avx2(_mm256_loadu_ps(x + 16), d1),
                                           nvfp4_codes_avx2(_mm256_loadu_ps(x + 24), d1)));
    }
}

/* Two full blocks (32 values): 16 data bytes and two scale bytes. */
static inline void nvfp4_pair_avx2(const float *v, float s_global, uint8_t *dst, uint8_t *scales)
{
    __m256 x[4], den[2];

    for (int k = 0; k < 4; k++)
        x[k] = _mm256_loadu_ps(v + 8 * k);
    for (int h = 0; h < 2; h++) {
        __m256 am = _mm256_set1_ps(nvfp4_amax_avx2(x[2 * h], x[2 * h + 1]));
        scales[h] = (uint8_t)_mm256_cvtsi256_si32(nvfp4_scales_avx2(am, s_global, &den[h]));
    }
    _mm_storeu_si128((__m128i *)dst, pack_nibbles_avx2(nvfp4_codes_avx2(x[0], den[0]),
                                                       nvfp4_codes_avx2(x[1], den[0]),
                                                       nvfp4_codes_avx2(x[2], den[1]),
                                                       nvfp4_codes_avx2(x[3], den[1])));
}

void qs_nvfp4_quant__avx2(const float *src, int64_t n, float s_global, uint8_t *dst,
                          uint8_t *scales)
{
    struct nvfp4_rows rows;
    int64_t i = 0;
    __m256 den = _mm256_setzero_ps();
    __m256i code = _mm256_setzero_si256();

    nvfp4_rows_init(&rows, s_global);
    /* the next group's block scales before this group's codes: their chain of dependent steps
     * (amaxes through memory, division, E4M3 rounding) then overlaps this group's code work */
    if (128 <= n)
        code = nvfp4_group_scales_avx2(src, s_global, &den);
    for (; i + 128 <= n; i += 128) {
        __m256 next_den = _mm256_setzero_ps();
        __m256i next_code = _mm256_setzero_si256();

        /* the group 2048 values (8 KiB) ahead into L1, so that the next groups' early loads do
         * not miss (a Zen 2's hardware prefetcher alone left them waiting; 256 ahead gained
         * less: 4096 x 4096, 0.85-0.86 ns per value against 0.89); a prefetch never faults and
         * changes no data */
        for (int k = 0; k < 8; k++)
            qs_prefetch_l1(src + i, 4 * (2048 + 16 * k));
        if (i + 256 <= n)
            next_code = nvfp4_group_scales_avx2(src + i + 128, s_global, &next_den);
        nvfp4_group_avx2(src + i, code, den, &rows, dst + i / 2, scales + i / 16);
        code = next_code;
        den = next_den;
    }
    for (; i + 32 <= n; i += 32)
        nvfp4_pair_avx2(src + i, s_global, dst + i / 2, scales + i / 16);
    if (i < n) {
        size_t len = (size_t)(n - i);
        float buf[32] = {0};
        uint8_t out[16], sc[2];
        memcpy(buf, src + i, len * sizeof(float));
        nvfp4_pair_avx2(buf, s_global, out, sc);
        memcpy(dst + i / 2, out, (len + 1) / 2);
        memcpy(scales + i / 16, sc, (len + 15) / 16);
    }
}

/* 16 bytes (32 codes, two blocks) -> 32 floats, den0/den1 the blocks' dens, through the E2M1
 * values' byte planes e2m1 (lut16_avx2.h). canon: the NaN fix-up, needed only where a den is NaN
 * or infinite (Inf * 0, a NaN s_global's payload); with finite dens the products of finite E2M1
 * values are never NaN. */
static inline void nvfp4_dequant32_avx2(const uint8_t *src, const lut16_avx2 *e2m1, __m256 den0,
                                        __m256 den1, float *dst, int canon)
{
    __m256 v[4];

    lut16_decode32_avx2(src, e2m1, 0, v);
    for (int h = 0; h < 2; h++) {
        __m256 den = h ? den1 : den0;
        __m256 v0 = _mm256_mul_ps(v[2 * h], den);
        __m256 v1 = _mm256_mul_ps(v[2 * h + 1], den);
        _mm256_storeu_ps(dst + 16 * h, canon ? nan_canon_avx2(v0) : v0);
        _mm256_storeu_ps(dst + 16 * h + 8, canon ? nan_canon_avx2(v1) : v1);
    }
}

/* den = fl(value(scale) * s_global) of one block; UE4M3: readers ignore the sign bit (§14). */
static inline __m256 nvfp4_den_avx2(uint8_t scale, __m256 s_global)
{
    return _mm256_mul_ps(_mm256_set1_ps(qs_ue4m3_values[scale & 0x7F]), s_global);
}

/* Sixteen blocks (256 values): their dens first, then the blocks with or without the NaN fix-up
 * (a constant at each call: two loops, neither with a select). */
static inline void nvfp4_dequant256_avx2(const uint8_t *src, const lut16_avx2 *e2m1,
                                         const float *den, float *dst, int canon)
{
    for (int k = 0; k < 16; k += 2)
        nvfp4_dequant32_avx2(src + k * 8, e2m1, _mm256_set1_ps(den[k]),
                             _mm256_set1_ps(den[k + 1]), dst + k * 16, canon);
}

void qs_nvfp4_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n,
                            float s_global, float *dst)
{
    const __m256 sg = _mm256_set1_ps(s_global);
    const lut16_avx2 e2m1 = lut16_avx2_load(qs_e2m1_values);
    int64_t i = 0;

    for (; i + 256 <= n; i += 256) {
        float den[16];
        int finite = 1;

        for (int k = 0; k < 16; k++) {
            den[k] = qs_ue4m3_values[scales[i / 16 + k] & 0x7F] * s_global;
            finite &= (qs_f32_bits(den[k]) & 0x7F800000u) != 0x7F800000u;
        }
        if (finite)
            nvfp4_dequant256_avx2(src + i / 2, &e2m1, den, dst + i, 0);
        else
            nvfp4_dequant256_avx2(src + i / 2, &e2m1, den, dst + i, 1);
    }
    for (; i + 32 <= n; i += 32)
        nvfp4_dequant32_avx2(src + i / 2, &e2m1, nvfp4_den_avx2(scales[i / 16], sg),
                             nvfp4_den_avx2(scales[i / 16 + 1], sg), dst + i, 1);
    if (i < n) {
        size_t len = (size_t)(n - i);
        uint8_t buf[16] = {0}, sc[2] = {0, 0};
        float out[32];
        memcpy(buf, src + i / 2, (len + 1) / 2);
        memcpy(sc, scales + i / 16, (len + 15) / 16);
        nvfp4_dequant32_avx2(buf, &e2m1, nvfp4_den_avx2(sc[0], sg), nvfp4_den_avx2(sc[1], sg),
                             out, 1);
        memcpy(dst + i, out, len * sizeof(float));
    }
}
