/* SPDX-License-Identifier: MIT */
/*
 * NVIDIA NVFP4 quantize and dequantize for AVX2 + FMA + F16C (spec/formats.md §11, §14),
 * bit-identical to src/ref/nvfp4_ref.c, with its operation order: per block of 16, amax (NaN
 * ignored), S = fl(amax / fl(6 * s_global)), S = 0 -> 0x38, S < 2^-9 -> 2^-9 (a comparison, so
 * NaN stays NaN), scale byte E4M3_RNE_sat(S) without sign, den = fl(value(S) * s_global), codes
 * E2M1_RNE_sat(fl(v / den)) with a true division (NaN -> 0; den = 0 -> 0), decode
 * fl(value(P) * den). The block scales of 8 blocks are computed in one vector pass; a tail goes
 * through a zero-padded local copy (+0.0 changes no amax), so nothing past n is read or written.
 */
#include <immintrin.h>
#include <string.h>

#include "../core/kernels.h"
#include "../ref/ref.h"

/* E4M3 codes of 8 floats (0...255 per 32-bit lane), NaN -> 0x7F | sign, saturating. */
static inline __m256i e4m3_encode_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 2^-6 every value has the quantum 2^-9: rne(a * 2^9), exact */
    __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(0x1p9f)));
    /* normal: RNE at f32 mantissa bit 20, then rebias 127 -> 7; a carry rolls into the exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 20), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x7FFFF)), odd);
    __m256i nrm = _mm256_sub_epi32(_mm256_srli_epi32(r, 20), _mm256_set1_epi32(120 << 3));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3C800000), a);
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(0x7E));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i sign = _mm256_and_si256(_mm256_srli_epi32(u, 24), _mm256_set1_epi32(0x80));

    mag = _mm256_or_si256(mag, _mm256_and_si256(is_nan, _mm256_set1_epi32(0x7F)));
    return _mm256_or_si256(mag, sign);
}

/* Values of 8 E4M3 codes (0...255 per 32-bit lane), exact; 0x7F / 0xFF give NaN with the sign. */
static inline __m256 e4m3_decode_avx2(__m256i c)
{
    const __m256i m = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    __m256i nrm = _mm256_add_epi32(_mm256_slli_epi32(m, 20), _mm256_set1_epi32(120 << 23));
    __m256i sub = _mm256_castps_si256(
        _mm256_mul_ps(_mm256_cvtepi32_ps(m), _mm256_set1_ps(0x1p-9f)));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(8), m);
    __m256i is_nan = _mm256_cmpeq_epi32(m, _mm256_set1_epi32(0x7F));
    __m256i v = _mm256_blendv_epi8(nrm, sub, is_sub);

    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), is_nan);
    v = _mm256_or_si256(v, _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24));
    return _mm256_castsi256_ps(v);
}

/* E2M1 codes (0...15) of 8 floats, one per 32-bit lane; NaN -> 0 (§11), Inf saturates. */
static inline __m256i e2m1_encode_avx2(__m256 y)
{
    const __m256i u = _mm256_castps_si256(y);
    const __m256i a = _mm256_and_si256(u, _mm256_set1_epi32(0x7FFFFFFF));
    /* below the smallest normal 1.0 the quantum is 0.5: rne(a * 2), exact scaling */
    __m256i sub =
        _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(a), _mm256_set1_ps(2.0f)));
    /* normal: RNE at f32 mantissa bit 22, then rebias 127 -> 1; a carry rolls into the exponent */
    __m256i odd = _mm256_and_si256(_mm256_srli_epi32(a, 22), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(_mm256_add_epi32(a, _mm256_set1_epi32(0x1FFFFF)), odd);
    __m256i nrm = _mm256_sub_epi32(_mm256_srli_epi32(r, 22), _mm256_set1_epi32(126 << 1));
    __m256i is_sub = _mm256_cmpgt_epi32(_mm256_set1_epi32(0x3F800000), a);
    __m256i mag = _mm256_min_epi32(_mm256_blendv_epi8(nrm, sub, is_sub), _mm256_set1_epi32(7));
    __m256i is_nan = _mm256_cmpgt_epi32(a, _mm256_set1_epi32(0x7F800000));
    __m256i code =
        _mm256_or_si256(mag, _mm256_and_si256(_mm256_srli_epi32(u, 28), _mm256_set1_epi32(8)));

    return _mm256_andnot_si256(is_nan, code);
}

/* E2M1 values of 8 codes (0...15): two 8-entry lookups, chosen by bit 3 of the code. */
static inline __m256 e2m1_decode_avx2(__m256i c)
{
    __m256 lo = _mm256_permutevar8x32_ps(_mm256_loadu_ps(qs_e2m1_values), c);
    __m256 hi = _mm256_permutevar8x32_ps(_mm256_loadu_ps(qs_e2m1_values + 8), c);

    return _mm256_blendv_ps(lo, hi, _mm256_castsi256_ps(_mm256_slli_epi32(c, 28)));
}

/* 16 bytes of nibbles from 32 codes (four vectors of 8), element 2j in the low nibble of byte j. */
static inline __m128i pack_nibbles_avx2(__m256i c0, __m256i c1, __m256i c2, __m256i c3)
{
    __m256i b = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
    b = _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    /* b holds the 32 codes as bytes in element order; join each pair of bytes into one */
    __m256i w = _mm256_and_si256(_mm256_or_si256(b, _mm256_srli_epi16(b, 4)),
                                 _mm256_set1_epi16(0x00FF));
    w = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0x08);
    return _mm256_castsi256_si128(w);
}

static inline float hmax_avx2(__m256 m)
{
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
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

/* 8 full blocks (128 values): 64 data bytes and 8 scale bytes. */
static inline void nvfp4_group_avx2(const float *v, float s_global, uint8_t *dst, uint8_t *scales)
{
    float am[8], dens[8];
    __m256 den;

    for (int k = 0; k < 8; k++)
        am[k] = nvfp4_amax_avx2(_mm256_loadu_ps(v + 16 * k), _mm256_loadu_ps(v + 16 * k + 8));
    __m256i code = nvfp4_scales_avx2(_mm256_loadu_ps(am), s_global, &den);
    __m128i c16 = _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64((__m128i *)scales, _mm_packus_epi16(c16, c16));
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
    int64_t i = 0;

    for (; i + 128 <= n; i += 128)
        nvfp4_group_avx2(src + i, s_global, dst + i / 2, scales + i / 16);
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

/* 16 bytes (32 codes, two blocks) -> 32 floats. */
static inline void nvfp4_dequant32_avx2(const uint8_t *src, const uint8_t *scales,
                                        __m256 s_global, float *dst)
{
    const __m128i nib = _mm_set1_epi8(0x0F);
    __m128i b = _mm_loadu_si128((const __m128i *)src);
    __m128i lo = _mm_and_si128(b, nib), hi = _mm_and_si128(_mm_srli_epi16(b, 4), nib);
    __m128i e0 = _mm_unpacklo_epi8(lo, hi), e1 = _mm_unpackhi_epi8(lo, hi);
    __m256i c[4] = {_mm256_cvtepu8_epi32(e0), _mm256_cvtepu8_epi32(_mm_srli_si128(e0, 8)),
                    _mm256_cvtepu8_epi32(e1), _mm256_cvtepu8_epi32(_mm_srli_si128(e1, 8))};

    for (int h = 0; h < 2; h++) {
        /* UE4M3: readers ignore the sign bit (§14) */
        __m256 den = _mm256_mul_ps(e4m3_decode_avx2(_mm256_set1_epi32(scales[h] & 0x7F)),
                                   s_global);
        _mm256_storeu_ps(dst + 16 * h, _mm256_mul_ps(e2m1_decode_avx2(c[2 * h]), den));
        _mm256_storeu_ps(dst + 16 * h + 8, _mm256_mul_ps(e2m1_decode_avx2(c[2 * h + 1]), den));
    }
}

void qs_nvfp4_dequant__avx2(const uint8_t *src, const uint8_t *scales, int64_t n,
                            float s_global, float *dst)
{
    const __m256 sg = _mm256_set1_ps(s_global);
    int64_t i = 0;

    for (; i + 32 <= n; i += 32)
        nvfp4_dequant32_avx2(src + i / 2, scales + i / 16, sg, dst + i);
    if (i < n) {
        size_t len = (size_t)(n - i);
        uint8_t buf[16] = {0}, sc[2] = {0, 0};
        float out[32];
        memcpy(buf, src + i / 2, (len + 1) / 2);
        memcpy(sc, scales + i / 16, (len + 15) / 16);
        nvfp4_dequant32_avx2(buf, sc, sg, out);
        memcpy(dst + i, out, len * sizeof(float));
    }
}
